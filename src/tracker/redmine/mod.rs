//! The Redmine adapter: one project's issues, statuses by name, comments as journal notes.
//!
//! See `docs/trackers/redmine.md` for the setup a pipeline needs. In short:
//! - a pipeline status is a Redmine issue status, matched by exact name; statuses
//!   flagged *closed* make their tickets `closed`;
//! - comments are journal entries with a note (pure attribute changes are not);
//! - a transition sets `status_id`, then re-reads the issue, because Redmine silently
//!   keeps the old status when its workflow forbids the change.

mod client;
pub mod wire;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::OnceCell;

use self::client::RedmineClient;
use self::wire::{
    CurrentUser, CurrentUserEnvelope, Issue, IssueEnvelope, IssuePage, PriorityList, PriorityRanks,
    ProjectEnvelope, StatusCatalogue, StatusList,
};
use super::{
    same_name, Capabilities, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError,
};
use crate::tracker::http::{encode, next_offset, PageWalk, MAX_PAGES};

pub use self::client::REQUEST_TIMEOUT;

/// Issues per page when listing (Redmine's maximum).
pub const PAGE_SIZE: u32 = 100;

/// The workflow name in [`TrackerError::TransitionRefused`].
const WORKFLOW: &str = "Redmine";

/// One Redmine project as a board.
#[derive(Debug)]
pub struct RedmineTracker {
    name: String,
    project: String,
    api: RedmineClient,
    page_size: u32,
    /// Statuses are cached per process; an unknown name refreshes the cache once.
    statuses: Mutex<Option<Arc<StatusCatalogue>>>,
    priorities: OnceCell<PriorityRanks>,
    me: OnceCell<CurrentUser>,
    project_id: OnceCell<u64>,
}

impl RedmineTracker {
    /// An adapter for `project` on the server at `url`, authenticating with `api_key`
    /// (read from the variable `api_key_env`, named in error messages). No request is
    /// made until the first call.
    pub fn new(
        url: &str,
        project: &str,
        api_key: String,
        api_key_env: &str,
    ) -> Result<Self, TrackerError> {
        let api = RedmineClient::new(url, api_key, api_key_env)?;
        Ok(RedmineTracker {
            name: format!("redmine:{project}"),
            project: project.to_string(),
            api,
            page_size: PAGE_SIZE,
            statuses: Mutex::new(None),
            priorities: OnceCell::new(),
            me: OnceCell::new(),
            project_id: OnceCell::new(),
        })
    }

    /// Open the adapter a config names, reading the API key from `api_key_env`.
    pub fn from_env(url: &str, project: &str, api_key_env: &str) -> Result<Self, TrackerError> {
        let key = super::read_secret(api_key_env, || {
            format!(
                "the Redmine API key variable ${api_key_env} is not set; export it with \
                 the key from My account > API access key on {url}"
            )
        })?;
        Self::new(url, project, key, api_key_env)
    }

    /// List with pages of `size` issues instead of [`PAGE_SIZE`] (tests of pagination).
    pub fn with_page_size(mut self, size: u32) -> Self {
        self.page_size = size.clamp(1, PAGE_SIZE);
        self
    }

    /// The server's issue statuses, from the cache unless `refresh`.
    async fn statuses(&self, refresh: bool) -> Result<Arc<StatusCatalogue>, TrackerError> {
        if !refresh {
            if let Some(cached) = self.statuses.lock().expect("status cache").clone() {
                return Ok(cached);
            }
        }
        let list: StatusList = self.api.get("/issue_statuses.json").await?;
        let catalogue = Arc::new(StatusCatalogue::new(list.issue_statuses));
        *self.statuses.lock().expect("status cache") = Some(catalogue.clone());
        Ok(catalogue)
    }

    /// The catalogue, refreshed once if it lacks any of `names` (an administrator may
    /// have added a status since it was cached).
    async fn statuses_with(&self, names: &[&str]) -> Result<Arc<StatusCatalogue>, TrackerError> {
        let cached = self.statuses(false).await?;
        if names.iter().all(|n| cached.get(n).is_some()) {
            return Ok(cached);
        }
        self.statuses(true).await
    }

    async fn priorities(&self) -> Result<&PriorityRanks, TrackerError> {
        self.priorities
            .get_or_try_init(|| async {
                let list: PriorityList =
                    self.api.get("/enumerations/issue_priorities.json").await?;
                Ok(PriorityRanks::from_positions(&list.issue_priorities))
            })
            .await
    }

    async fn me(&self) -> Result<&CurrentUser, TrackerError> {
        self.me
            .get_or_try_init(|| async {
                let env: CurrentUserEnvelope = self.api.get("/users/current.json").await?;
                Ok(env.user)
            })
            .await
    }

    async fn project_id(&self) -> Result<u64, TrackerError> {
        self.project_id
            .get_or_try_init(|| async {
                let path = format!("/projects/{}.json", encode(&self.project));
                match self.api.get::<ProjectEnvelope>(&path).await {
                    Ok(env) => Ok(env.project.id),
                    Err(TrackerError::NotFound(_)) => Err(TrackerError::NotFound(format!(
                        "Redmine at {} has no project {:?} visible to this API key",
                        self.api.base(),
                        self.project
                    ))),
                    Err(other) => Err(other),
                }
            })
            .await
            .copied()
    }

    /// Read issue `id` of this project (journals too when `journals`).
    async fn issue(&self, id: &str, journals: bool) -> Result<Issue, TrackerError> {
        let number = issue_number(id)?;
        let project_id = self.project_id().await?;
        let include = if journals { "?include=journals" } else { "" };
        let env: IssueEnvelope = self
            .api
            .get(&format!("/issues/{number}.json{include}"))
            .await
            .map_err(|e| match e {
                TrackerError::NotFound(_) => TrackerError::NotFound(format!(
                    "no issue #{number} on {} visible to this API key",
                    self.api.base()
                )),
                other => other,
            })?;
        if env.issue.project.id != project_id {
            return Err(TrackerError::NotFound(format!(
                "issue #{number} is in project {:?}, not {:?}",
                env.issue.project.name, self.project
            )));
        }
        Ok(env.issue)
    }

    async fn to_ticket(&self, issue: &Issue) -> Result<Ticket, TrackerError> {
        let statuses = self.statuses(false).await?;
        let priorities = self.priorities().await?;
        Ok(wire::ticket(issue, self.api.base(), &statuses, priorities))
    }

    /// The comments of an issue already read with its journals.
    async fn comments_of(&self, issue: &Issue) -> Result<Vec<Comment>, TrackerError> {
        let me = self.me().await?;
        Ok(wire::comments(&issue.journals, me.id, &me.display_name()))
    }

    /// Issues on each of `statuses`, assigned to `assigned` (a Redmine user filter
    /// value) when given.
    async fn list_assigned(
        &self,
        statuses: &[String],
        assigned: Option<&str>,
    ) -> Result<Listing, TrackerError> {
        let mut listing = Listing::default();
        if statuses.is_empty() {
            return Ok(listing);
        }
        let names: Vec<&str> = statuses.iter().map(String::as_str).collect();
        let catalogue = self.statuses_with(&names).await?;
        let mut ids = Vec::new();
        for name in &names {
            let id = catalogue.resolve(name, self.api.base())?.id;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let filter = ids
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("%7C"); // `|`: Redmine's "any of" in a short filter
        let project_id = self.project_id().await?;
        let priorities = self.priorities().await?;
        let mut seen = HashSet::new();
        let mut offset: u64 = 0;
        let mut walk = PageWalk::new("Redmine listing /issues.json", MAX_PAGES);
        loop {
            walk.visit(&offset.to_string())?;
            // subproject_id=!* keeps subprojects' issues off this project's board;
            // sorting by id keeps pages stable while issues change.
            let path = format!(
                "/issues.json?project_id={project_id}&subproject_id=%21%2A&status_id={filter}\
                 &sort=id&limit={}&offset={offset}{}",
                self.page_size,
                assigned.map_or(String::new(), |a| format!("&assigned_to_id={a}")),
            );
            let page: IssuePage = self.api.get(&path).await?;
            let count = page.issues.len() as u64;
            for raw in page.issues {
                let number = raw.get("id").and_then(|v| v.as_u64());
                match serde_json::from_value::<Issue>(raw) {
                    Ok(issue) => {
                        if !seen.insert(issue.id)
                            || !names.iter().any(|n| same_name(n, &issue.status.name))
                        {
                            continue;
                        }
                        listing.tickets.push(wire::ticket(
                            &issue,
                            self.api.base(),
                            &catalogue,
                            priorities,
                        ));
                    }
                    Err(e) => listing.warnings.push(format!(
                        "skipped Redmine issue #{}: unexpected JSON: {e}",
                        number.map_or("?".to_string(), |n| n.to_string())
                    )),
                }
            }
            match next_offset(offset, count, page.total_count) {
                Some(next) => offset = next,
                None => break,
            }
        }
        for w in &listing.warnings {
            tracing::warn!("{w}");
        }
        Ok(listing)
    }
}

/// The issue number in `id`, refusing anything that is not one (it goes into a URL path).
fn issue_number(id: &str) -> Result<u64, TrackerError> {
    id.parse::<u64>()
        .ok()
        .filter(|n| *n > 0 && !id.starts_with('+'))
        .ok_or_else(|| {
            TrackerError::Invalid(format!(
                "{id:?} is not a Redmine issue number (a positive integer such as 42)"
            ))
        })
}

#[async_trait]
impl Tracker for RedmineTracker {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        // Relations, one request per candidate (and one per blocker), bounded per tick.
        Capabilities::workflow_states(true)
    }

    /// The API key user's display name (`firstname lastname`); comments that user
    /// wrote carry it as their author.
    async fn identity(&self) -> Result<String, TrackerError> {
        Ok(self.me().await?.display_name())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.list_assigned(statuses, None).await
    }

    /// Server-side: `assignee: me` becomes `assigned_to_id=me` (Redmine's own word for
    /// the API key's user). A named assignee, labels and excluded labels are applied by
    /// the pipeline after listing (Redmine filters by user id, not name).
    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &crate::config::TicketFilter,
    ) -> Result<Listing, TrackerError> {
        let me = filter
            .assignee
            .as_deref()
            .is_some_and(|a| crate::tracker::same_name(a, "me"));
        self.list_assigned(statuses, me.then_some("me")).await
    }

    /// Relations: `GET /issues/{id}/relations.json`; `X blocks id` and `id blocked X`
    /// make X a blocker, each then read (`GET /issues/{X}.json`) for its status.
    async fn blockers(&self, id: &str) -> Result<Vec<crate::tracker::Blocker>, TrackerError> {
        #[derive(serde::Deserialize)]
        struct Relation {
            issue_id: u64,
            issue_to_id: u64,
            relation_type: String,
        }
        #[derive(serde::Deserialize)]
        struct Relations {
            relations: Vec<Relation>,
        }
        let number: u64 = id
            .trim()
            .parse()
            .map_err(|_| TrackerError::Invalid(format!("{id:?} is not a Redmine issue id")))?;
        let list: Relations = self
            .api
            .get(&format!("/issues/{number}/relations.json"))
            .await?;
        let mut ids: Vec<u64> = Vec::new();
        for r in list.relations {
            let by = match r.relation_type.as_str() {
                "blocks" if r.issue_to_id == number => r.issue_id,
                "blocked" if r.issue_id == number => r.issue_to_id,
                _ => continue,
            };
            if !ids.contains(&by) {
                ids.push(by);
            }
        }
        let mut out = Vec::new();
        for by in ids {
            let ticket = self.get(&by.to_string()).await?;
            out.push(crate::tracker::Blocker {
                id: by.to_string(),
                status: Some(ticket.status),
                closed: ticket.closed,
            });
        }
        Ok(out)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let issue = self.issue(id, false).await?;
        self.to_ticket(&issue).await
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let issue = self.issue(id, true).await?;
        self.comments_of(&issue).await
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        let number = issue_number(id)?;
        self.issue(id, false).await?; // only this project's issues
        self.api
            .put(
                &format!("/issues/{number}.json"),
                &json!({ "issue": { "notes": body } }),
            )
            .await?;
        // Redmine answers 204 without the journal; read it back for its id and time.
        let issue = self.issue(id, true).await?;
        let me = self.me().await?;
        self.comments_of(&issue)
            .await?
            .into_iter()
            .rev()
            .find(|c| c.author == me.display_name() && wire::same_note(&c.body, body))
            .ok_or_else(|| {
                TrackerError::Unavailable(format!(
                    "the note was sent to issue #{number} but is not among its journals yet"
                ))
            })
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let number = issue_number(id)?;
        let catalogue = self.statuses_with(&[to]).await?;
        let target = catalogue.resolve(to, self.api.base())?.id;
        let current = self.issue(id, false).await?.status.name;
        if same_name(&current, to) {
            return Ok(());
        }
        if !same_name(&current, from) {
            return Err(TrackerError::Conflict {
                id: id.to_string(),
                expected: from.to_string(),
                current,
            });
        }
        self.api
            .put(
                &format!("/issues/{number}.json"),
                &json!({ "issue": { "status_id": target } }),
            )
            .await?;
        // A status change the workflow forbids is dropped silently (204, old status
        // kept), so only the issue itself says whether the transition happened.
        let after = self.issue(id, false).await?.status.name;
        if same_name(&after, to) {
            Ok(())
        } else if same_name(&after, from) {
            Err(TrackerError::TransitionRefused {
                workflow: WORKFLOW.to_string(),
                id: id.to_string(),
                from: from.to_string(),
                to: to.to_string(),
                current: after,
            })
        } else {
            Err(TrackerError::Conflict {
                id: id.to_string(),
                expected: from.to_string(),
                current: after,
            })
        }
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        let mut report = CheckReport::default();
        match self.me().await {
            Ok(me) => report.push(
                "api key",
                true,
                format!(
                    "authenticated as {} ({:?}, user #{}); sortie's comments carry the author {:?}",
                    me.login,
                    me.display_name(),
                    me.id,
                    me.display_name()
                ),
            ),
            Err(e @ (TrackerError::Unauthorized(_) | TrackerError::NotFound(_))) => {
                report.push("api key", false, e.to_string());
                return Ok(report);
            }
            Err(e) => return Err(e),
        }
        match self.project_id().await {
            Ok(id) => report.push(
                "project",
                true,
                format!("{} is project #{id}", self.project),
            ),
            Err(e @ (TrackerError::Unauthorized(_) | TrackerError::NotFound(_))) => {
                report.push("project", false, e.to_string());
                return Ok(report);
            }
            Err(e) => return Err(e),
        }
        let catalogue = self.statuses(true).await?;
        let mut known = Vec::new();
        for name in statuses {
            match catalogue.get(name) {
                Some(s) => {
                    known.push(name.clone());
                    report.push(
                        format!("status {name}"),
                        true,
                        format!(
                            "status #{}{}",
                            s.id,
                            if s.is_closed {
                                " (closed: its tickets are terminal)"
                            } else {
                                ""
                            }
                        ),
                    );
                }
                None => {
                    let mut detail = catalogue.unknown_status(name, self.api.base());
                    if create {
                        detail.push_str(
                            "; Redmine statuses cannot be created through its API, so \
                             --create-missing-labels does not apply",
                        );
                    }
                    report.push(format!("status {name}"), false, detail);
                }
            }
        }
        let listing = self.list(&known).await?;
        report.push(
            "board",
            true,
            format!(
                "{} issue(s) in the pipeline's statuses, {} unreadable; the workflow \
                 (which transitions each role may make) cannot be read through the API: \
                 see docs/trackers/redmine.md",
                listing.tickets.len(),
                listing.warnings.len()
            ),
        );
        for warning in listing.warnings {
            report.push("board entry", false, warning);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_numbers_are_positive_integers_and_nothing_else() {
        assert_eq!(issue_number("42").unwrap(), 42);
        for bad in ["0", "-1", "+1", "4 2", "../42", "42.json", "", "PROJ-7"] {
            assert!(
                matches!(issue_number(bad), Err(TrackerError::Invalid(_))),
                "{bad:?} was accepted"
            );
        }
    }

    #[test]
    fn project_identifiers_are_encoded_for_the_url() {
        assert_eq!(encode("my-project_2"), "my-project_2");
        assert_eq!(encode("a b/c?"), "a%20b%2Fc%3F");
    }

    #[test]
    fn a_missing_key_variable_is_unauthorized_and_names_the_variable() {
        let var = "SORTIE_TEST_REDMINE_KEY_THAT_IS_NEVER_SET";
        let err = RedmineTracker::from_env("http://127.0.0.1:9", "demo", var).unwrap_err();
        match err {
            TrackerError::Unauthorized(msg) => assert!(msg.contains(var), "{msg}"),
            other => panic!("expected Unauthorized, got {other:?}"),
        }
    }
}

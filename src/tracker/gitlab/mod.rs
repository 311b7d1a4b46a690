//! The GitLab adapter (gitlab.com and self-managed): statuses are labels (scoped
//! `status::ready` by default), a ticket is an issue by `iid`, a closed issue is
//! terminal, comments are notes, and a transition is one atomic `PUT` with
//! `add_labels` and `remove_labels`. See `docs/trackers/gitlab.md`.

mod pulls;
pub mod webhook;
mod wire;

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use reqwest::Method;
use serde_json::Value;
use tokio::sync::OnceCell;

use self::wire::{move_body, next_page, WireIssue, WireNote, WireUser};
use super::forge_core::{
    check_access, check_token, closes, core_tracker_methods, fmt_adapter, not_a, open_adapter,
    Dialect, ForgeCore,
};
use super::http::{adapter_options, encode, strip_query, ExchangeObserver, PageWalk};
use super::labels::{LabelMove, LabelScheme};
use super::{Blocker, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError};
use crate::config::{Config, TrackerConfig};

/// Items per page GitLab serves at most.
const PER_PAGE: u32 = 100;
/// Pages read per listing at most (10 000 issues in one status); more fails the listing.
const MAX_PAGES: usize = 100;

/// GitLab's names: issues by `iid`, merge requests, notes.
static GITLAB: Dialect = Dialect {
    vendor: "GitLab",
    token_hint: "the token needs the `api` scope and at least the Reporter role on \
                 the project (Planner or Reporter to relabel)",
    ticket_id: "a GitLab issue iid",
    number_key: "iid",
    url_key: "web_url",
    pulls: "merge_requests",
    draft_prefix: "Draft: ",
    comments: "notes",
    comment_noun: "note",
    label_hint: "(needs the Planner or Reporter role)",
};

/// Which project, where, and how statuses are labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitlabSettings {
    /// Instance URL (`https://gitlab.com`), without `/api/v4`.
    pub url: String,
    /// Project path (`group/sub/repo`) or numeric id.
    pub project: String,
    /// Send the token as `Authorization: Bearer` rather than `PRIVATE-TOKEN`.
    pub bearer: bool,
    /// Status and priority label prefixes.
    pub labels: LabelScheme,
    /// Statuses whose transition also closes the issue.
    pub close_on: Vec<String>,
}

impl GitlabSettings {
    /// The settings of a `kind: gitlab` tracker config, `None` for other kinds.
    pub fn from_config(tracker: &TrackerConfig) -> Option<Self> {
        match tracker {
            TrackerConfig::Gitlab {
                url,
                project,
                bearer,
                status_label_prefix,
                priority_label_prefix,
                close_on,
                ..
            } => Some(GitlabSettings {
                url: url.clone(),
                project: project.clone(),
                bearer: *bearer,
                labels: LabelScheme::new(status_label_prefix, priority_label_prefix),
                close_on: close_on.clone(),
            }),
            _ => None,
        }
    }
}

adapter_options! {
    /// How the adapter talks to GitLab; the defaults suit production.
    pub struct GitlabOptions {
        /// Sees every response (contract tests, diagnostics). Default none.
        pub observer: Option<ExchangeObserver> = None,
    }
}

/// A GitLab project's issues as a sortie board.
pub struct GitlabTracker {
    settings: GitlabSettings,
    core: ForgeCore,
    project_id: OnceCell<Option<u64>>,
}

impl std::fmt::Debug for GitlabTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_adapter(f, "GitlabTracker", &self.core.name)
    }
}

impl GitlabTracker {
    /// The tracker a `kind: gitlab` config names, with the token read from `token_env`.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let doc = "docs/trackers/gitlab.md";
        open_adapter(
            &config.tracker,
            "GitLab",
            doc,
            GitlabSettings::from_config,
            |s, token| Self::new(s, token, GitlabOptions::default()),
        )
        .unwrap_or_else(|| Err(not_a(config, "GitLab")))
    }

    /// A tracker for `settings`, authenticating with `token`.
    pub fn new(
        settings: GitlabSettings,
        token: String,
        options: GitlabOptions,
    ) -> Result<Self, TrackerError> {
        let auth = if settings.bearer {
            ("authorization", format!("Bearer {token}"))
        } else {
            ("private-token", token)
        };
        let base = format!("{}/api/v4", settings.url.trim_end_matches('/'));
        let project = format!("/projects/{}", encode(&settings.project));
        let timing = (options.timeout, options.clock, options.observer);
        let name = format!("gitlab:{}", settings.project);
        Ok(GitlabTracker {
            core: ForgeCore::connect(&GITLAB, name, &base, auth, project, timing)?,
            settings,
            project_id: OnceCell::new(),
        })
    }

    async fn wire_issue(&self, id: &str) -> Result<WireIssue, TrackerError> {
        let path = self.core.issue_path(id)?;
        let issue: WireIssue = self.core.client.get_json(&path).await?;
        if let Some(pid) = issue.project_id {
            let _ = self.project_id.set(Some(pid));
        }
        Ok(issue)
    }

    /// Every item of a paginated listing, following `x-next-page` or `Link`. A link
    /// off the API base, a link loop, the page cap or a failing page fails the whole
    /// listing ([`PageWalk`]).
    async fn all_pages(&self, first: String) -> Result<Vec<Value>, TrackerError> {
        let base = self.core.client.base();
        let mut walk = PageWalk::new(format!("GitLab listing {}", strip_query(&first)), MAX_PAGES);
        let mut items = Vec::new();
        let mut url = format!("{base}{first}");
        loop {
            walk.visit(&url)?;
            let reply = self.core.client.send(Method::GET, &url, None).await?;
            let page: Vec<Value> = reply.json("GET a GitLab listing")?;
            if page.is_empty() {
                return Ok(items);
            }
            items.extend(page);
            let next = next_page(&url, reply.header("x-next-page"), reply.header("link")).map_err(
                |e| {
                    TrackerError::Invalid(format!(
                        "GitLab listing {}: {e}; refusing to act on part of the board",
                        strip_query(&first)
                    ))
                },
            )?;
            match next {
                Some(next) => url = walk.follow(next, base)?,
                None => return Ok(items),
            }
        }
    }

    /// The one `PUT /projects/:id/issues/:iid` of a transition: add `add`, remove
    /// `remove`, and close when `close`, atomically. Transitions call it after their
    /// re-read; contract tests call it directly.
    pub async fn move_labels(
        &self,
        id: &str,
        add: Option<&str>,
        remove: &[String],
        close: bool,
    ) -> Result<(), TrackerError> {
        self.put_issue(id, &move_body(add, remove, close)).await
    }

    async fn put_issue(&self, id: &str, body: &Value) -> Result<(), TrackerError> {
        self.core
            .client
            .send(Method::PUT, &self.core.issue_path(id)?, Some(body))
            .await
            .map(drop)
    }

    /// The listing, each status query narrowed by `narrow` (extra query parameters).
    async fn list_with(&self, statuses: &[String], narrow: &str) -> Result<Listing, TrackerError> {
        let mut listing = Listing::default();
        // An issue with two status labels shows up in two listings: collect by iid.
        let mut issues: BTreeMap<u64, WireIssue> = BTreeMap::new();
        for status in statuses {
            if status.contains(',') {
                // GitLab splits `labels=` on commas: such a label cannot be queried.
                listing.warnings.push(format!(
                    "status {status:?} contains a comma and cannot be listed on GitLab"
                ));
                continue;
            }
            let label = self.settings.labels.status_label(status);
            let first = format!(
                "{}/issues?state=opened&labels={}{narrow}&per_page={PER_PAGE}",
                self.core.project,
                encode(&label)
            );
            let items = self.all_pages(first).await?;
            self.core.collect(
                items,
                |i: &WireIssue| i.iid,
                &mut issues,
                &mut listing.warnings,
            );
        }
        if let Some(pid) = issues.values().find_map(|i| i.project_id) {
            let _ = self.project_id.set(Some(pid));
        }
        for issue in issues.values() {
            issue
                .classify(&self.settings.labels)
                .list_into(&mut listing, statuses, issue.iid);
        }
        Ok(listing)
    }
}

#[async_trait]
impl Tracker for GitlabTracker {
    core_tracker_methods!();

    async fn identity(&self) -> Result<String, TrackerError> {
        self.core.identity(|user: WireUser| user.username).await
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.list_with(statuses, "").await
    }

    /// Server-side: required labels join the status label in `labels=` (GitLab ANDs
    /// them), excluded ones go in `not[labels]=`, the assignee in `assignee_username=`
    /// (`me` is the token's user). Names with a comma stay client-side.
    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &crate::config::TicketFilter,
    ) -> Result<Listing, TrackerError> {
        let mut narrow = String::new();
        let plain = |l: &&String| !l.contains(',') && !l.trim().is_empty();
        for label in filter.labels.iter().filter(plain) {
            narrow.push_str(&encode(&format!(",{}", label.trim())));
        }
        let excluded: Vec<&str> = filter
            .exclude_labels
            .iter()
            .filter(plain)
            .map(|l| l.trim())
            .collect();
        if !excluded.is_empty() {
            narrow.push_str(&format!("&not%5Blabels%5D={}", encode(&excluded.join(","))));
        }
        if let Some(who) = filter.assignee.as_deref().map(str::trim) {
            let who = if who.eq_ignore_ascii_case("me") {
                self.identity().await?
            } else {
                who.to_string()
            };
            narrow.push_str(&format!("&assignee_username={}", encode(&who)));
        }
        self.list_with(statuses, &narrow).await
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let issue = self.wire_issue(id).await?;
        issue
            .classify(&self.settings.labels)
            .into_ticket(id, issue.iid)
    }

    async fn blockers(&self, id: &str) -> Result<Vec<Blocker>, TrackerError> {
        let path = format!("{}/links", self.core.issue_path(id)?);
        let reply = self
            .core
            .client
            .send_accepting(Method::GET, &path, None, &[403])
            .await?;
        if reply.status == 403 {
            // The token read the issue; a 403 on its links is the instance's tier.
            return Err(TrackerError::Unsupported(format!(
                "GitLab answered 403 to the issue links of #{id}: this instance's tier lacks \
                 issue links (blocking links need GitLab Premium or Ultimate); the token is fine"
            )));
        }
        let links: Vec<WireIssue> = reply.json(&format!("GET links of #{id}"))?;
        let project_id = self.project_id.get().copied().flatten();
        Ok(links
            .iter()
            .filter_map(|l| l.as_blocker(&self.settings.labels, project_id))
            .collect())
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let first = format!(
            "{}/notes?sort=asc&order_by=created_at&per_page={PER_PAGE}",
            self.core.issue_path(id)?
        );
        let items = self.all_pages(first).await?;
        Ok(self
            .core
            .comments(id, items, |note: &WireNote| !note.system))
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        self.core
            .post_comment::<WireNote>(&self.core.issue_path(id)?, id, body)
            .await
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        // Re-read first: a label a person changed meanwhile must not be clobbered.
        let issue = self.wire_issue(id).await?;
        let close = closes(&self.settings.close_on, to) && issue.state != "closed";
        let body = match self
            .settings
            .labels
            .plan_move(id, issue.label_names(), from, to)?
        {
            LabelMove::AlreadyThere if !close => return Ok(()),
            LabelMove::AlreadyThere => move_body(None, &[], true),
            LabelMove::Write { add, remove } => move_body(add.as_deref(), &remove, close),
        };
        // One PUT: GitLab applies add_labels, remove_labels and state_event together.
        self.put_issue(id, &body).await
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        let mut report = CheckReport::default();
        if !check_token(&mut report, self.identity().await)? {
            return Ok(report);
        }
        let first = format!("{}/labels?per_page={PER_PAGE}", self.core.project);
        let Some(items) = check_access(
            &mut report,
            "project access",
            self.all_pages(first).await,
            |items| {
                format!(
                    "{} label(s) on project {}",
                    items.len(),
                    self.settings.project
                )
            },
            "check `project`, and that the token's user is a member",
        )?
        else {
            return Ok(report);
        };
        let existing: BTreeSet<String> = items
            .iter()
            .filter_map(|l| l.get("name").and_then(Value::as_str))
            .map(str::to_lowercase)
            .collect();
        let has = |label: &str| existing.contains(&label.to_lowercase());
        self.core
            .check_labels(report, &self.settings.labels, statuses, create, has)
            .await
    }
}

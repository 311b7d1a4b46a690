//! The Jira adapter: one project's issues on Jira Cloud (REST v3) or Data Center
//! (REST v2); statuses are workflow statuses reached through the transitions the
//! workflow offers; comments are ADF (Cloud) or wiki markup (Data Center).
//!
//! See `docs/trackers/jira.md`. In short:
//! - one JQL search per listing (`project = P AND status in (...) AND (jql)`);
//! - a transition reads the issue's available transitions and posts the one whose
//!   target status is the one asked (or the one `transitions:` pins); none, several,
//!   or a refusal by Jira is [`TrackerError::TransitionRefused`];
//! - comment authors are account ids (Cloud) or user names (Data Center), never
//!   display names.

mod check;
mod client;
mod search;
mod transition;
pub mod webhook;
pub mod wire;

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use self::client::{Auth, JiraClient};
use self::wire::{CommentPage, Issue, Myself, TicketContext, FIELDS};
use super::{
    same_name, Blocker, Capabilities, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError,
};
use crate::block::jira::{adf, wiki};
use crate::config::{Config, TicketFilter, TrackerConfig};
use crate::tracker::http::{next_offset, PageWalk, MAX_PAGES};

pub use self::client::{jira_said, REQUEST_TIMEOUT};
pub use crate::tracker::http::{Exchange, ExchangeObserver};

/// Issues per search page (Jira's usual maximum).
pub const PAGE_SIZE: u32 = 100;
/// Comments per page.
const COMMENT_PAGE: u32 = 100;
/// The issue link type whose links are blockers when `tracker.blockers.link_type` is
/// not set: Jira's built-in one (inward "is blocked by", outward "blocks").
pub const DEFAULT_LINK_TYPE: &str = "Blocks";

/// What the adapter is built from (the `tracker:` section, resolved).
#[derive(Debug, Clone)]
pub struct JiraSettings {
    /// Site base URL.
    pub url: String,
    /// Project key.
    pub project: String,
    /// 3 (Cloud) or 2 (Data Center).
    pub api_version: u8,
    /// Clause ANDed to every listing.
    pub jql: Option<String>,
    /// Pipeline status -> pinned transition name.
    pub transitions: BTreeMap<String, String>,
    /// Priority names, most urgent first.
    pub priority_order: Vec<String>,
    /// Statuses stages claim from (a `done`-category one among them is not terminal).
    pub claim_statuses: Vec<String>,
    /// Every status the config names (stages and terminal states): a Jira status that
    /// matches one of them ignoring case is reported in the config's spelling.
    pub pipeline_statuses: Vec<String>,
    /// Issues per search page.
    pub page_size: u32,
    /// The issue link type whose inward links are blockers. Default [`DEFAULT_LINK_TYPE`].
    pub link_type: String,
}

impl JiraSettings {
    /// The settings a config names; `None` when its tracker is not Jira.
    pub fn from_config(config: &Config) -> Option<Self> {
        let TrackerConfig::Jira {
            url,
            project,
            api_version,
            jql,
            transitions,
            priority_order,
            ..
        } = &config.tracker
        else {
            return None;
        };
        let mut claim_statuses = Vec::new();
        let mut pipeline_statuses = config.terminal_states.clone();
        for s in &config.stages {
            claim_statuses.push(s.claim_status.clone());
            claim_statuses.extend(s.in_progress_status.iter().cloned());
            pipeline_statuses.extend(
                [&s.success_status, &s.failure_status, &s.in_progress_status]
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
            pipeline_statuses.push(s.claim_status.clone());
        }
        Some(JiraSettings {
            url: url.clone(),
            project: project.clone(),
            api_version: *api_version,
            jql: jql.clone(),
            transitions: transitions.clone(),
            priority_order: priority_order.clone(),
            claim_statuses,
            pipeline_statuses,
            page_size: PAGE_SIZE,
            link_type: config
                .blockers
                .link_type
                .clone()
                .unwrap_or_else(|| DEFAULT_LINK_TYPE.to_string()),
        })
    }
}

/// One Jira project as a board.
#[derive(Debug)]
pub struct JiraTracker {
    name: String,
    settings: JiraSettings,
    api: JiraClient,
    me: OnceCell<Myself>,
}

impl JiraTracker {
    /// An adapter with explicit credentials: `email` (Cloud) and `token`.
    /// `credentials` names where they came from, for error messages.
    pub fn new(
        settings: JiraSettings,
        email: Option<String>,
        token: String,
        credentials: String,
    ) -> Result<Self, TrackerError> {
        let auth = match (settings.api_version, email) {
            (2, _) => Auth::Bearer(token),
            (_, Some(email)) => Auth::Basic { email, token },
            (_, None) => {
                return Err(TrackerError::Unauthorized(format!(
                    "Jira Cloud needs the account e-mail with the API token ({credentials})"
                )))
            }
        };
        let api = JiraClient::new(
            &settings.url,
            settings.api_version,
            auth,
            credentials,
            &settings.project,
        )?;
        Ok(JiraTracker {
            name: format!("jira:{}", settings.project),
            settings,
            api,
            me: OnceCell::new(),
        })
    }

    /// Open the adapter a config names, reading the secrets from its variables.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let TrackerConfig::Jira {
            url,
            email_env,
            token_env,
            ..
        } = &config.tracker
        else {
            return Err(TrackerError::Invalid("the tracker is not Jira".into()));
        };
        let settings = JiraSettings::from_config(config)
            .ok_or_else(|| TrackerError::Invalid("the tracker is not Jira".into()))?;
        let read = |var: &str, what: &str| {
            super::read_secret(var, || {
                format!(
                    "the variable ${var} ({what}) is not set; export it (see \
                     docs/trackers/jira.md) to reach {url}"
                )
            })
        };
        let (email, credentials) = match email_env {
            Some(e) => (
                Some(read(e, "the Jira account e-mail")?),
                format!("${e} / ${token_env}"),
            ),
            None => (None, format!("${token_env}")),
        };
        let what = if email.is_some() {
            "the Jira API token"
        } else {
            "the Jira personal access token"
        };
        let token = read(token_env, what)?;
        Self::new(settings, email, token, credentials)
    }

    /// Report every HTTP exchange to `observer` (contract tests).
    pub fn with_observer(mut self, observer: ExchangeObserver) -> Self {
        self.api.observe(observer);
        self
    }

    /// List with pages of `size` issues (tests of pagination).
    pub fn with_page_size(mut self, size: u32) -> Self {
        self.settings.page_size = size.clamp(1, PAGE_SIZE);
        self
    }

    fn cloud(&self) -> bool {
        self.settings.api_version != 2
    }

    fn cx(&self) -> TicketContext<'_> {
        TicketContext {
            base: self.api.base(),
            cloud: self.cloud(),
            priority_order: &self.settings.priority_order,
            claim_statuses: &self.settings.claim_statuses,
            pipeline_statuses: &self.settings.pipeline_statuses,
            link_type: &self.settings.link_type,
        }
    }

    async fn me(&self) -> Result<&Myself, TrackerError> {
        self.me
            .get_or_try_init(|| async { self.api.get::<Myself>("/myself").await })
            .await
    }

    /// `id` checked as a key of this project (it goes into a URL path).
    fn key<'a>(&self, id: &'a str) -> Result<&'a str, TrackerError> {
        let ok = id
            .strip_prefix(&self.settings.project)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if ok {
            Ok(id)
        } else {
            Err(TrackerError::Invalid(format!(
                "{id:?} is not an issue key of project {} (such as {}-42)",
                self.settings.project, self.settings.project
            )))
        }
    }

    /// Read one issue; an issue answered under another key was moved.
    async fn issue(&self, id: &str) -> Result<Issue, TrackerError> {
        let key = self.key(id)?;
        let query = format!("fields={}", FIELDS.join(","));
        self.read_issue(key, &query, |issue: &Issue| &issue.key)
            .await
    }

    /// `GET /issue/{key}?{query}`: an issue that is gone, or was moved to another key
    /// (`key_of` reads the key Jira answered with), is [`TrackerError::NotFound`] saying so.
    async fn read_issue<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        query: &str,
        key_of: impl FnOnce(&T) -> &String,
    ) -> Result<T, TrackerError> {
        let read: T = self
            .api
            .get(&format!("/issue/{key}?{query}"))
            .await
            .map_err(|e| match e {
                TrackerError::NotFound(detail) => TrackerError::NotFound(format!(
                    "issue {key} does not exist (deleted, or moved out of reach of this \
                     account): {detail}"
                )),
                other => other,
            })?;
        let answered = key_of(&read);
        if answered != key {
            return Err(TrackerError::NotFound(format!(
                "issue {key} was moved; it is now {answered}"
            )));
        }
        Ok(read)
    }

    /// Take the workflow transition `transition_id` on issue `key` (no fields set).
    pub async fn post_transition(
        &self,
        key: &str,
        transition_id: &str,
    ) -> Result<(), TrackerError> {
        let key = self.key(key)?;
        let body = json!({ "transition": { "id": transition_id } });
        self.api
            .post::<Value>(&format!("/issue/{key}/transitions"), &body)
            .await
            .map(drop)
    }
}

#[async_trait]
impl Tracker for JiraTracker {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::workflow_states(true)
    }

    fn rate_limit_remaining(&self) -> Option<u64> {
        self.api.remaining()
    }

    /// The account id (Cloud) or user name (Data Center) of the token's account.
    async fn identity(&self) -> Result<String, TrackerError> {
        let me = self.me().await?;
        let id = if self.cloud() {
            me.account_id.clone()
        } else {
            me.name.clone().or_else(|| me.key.clone())
        };
        id.filter(|i| !i.is_empty()).ok_or_else(|| {
            TrackerError::Invalid(format!(
                "GET {}/myself names no {}",
                self.api.base(),
                if self.cloud() { "accountId" } else { "name" }
            ))
        })
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.list_filtered(statuses, &TicketFilter::default()).await
    }

    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &TicketFilter,
    ) -> Result<Listing, TrackerError> {
        let Some(jql) = self.listing_jql(statuses, filter) else {
            return Ok(Listing::default()); // no status, no request
        };
        let mut listing = self.search(&jql).await?;
        listing
            .tickets
            .retain(|t| statuses.iter().any(|s| same_name(s, &t.status)));
        Ok(listing)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let issue = self.issue(id).await?;
        wire::ticket(&issue, &self.cx()).map_err(TrackerError::Invalid)
    }

    /// The issue's links alone (`fields=issuelinks`), for a ticket whose listing did
    /// not carry readable links: a site without issue linking sends no such field, and
    /// that is an error (held, never dispatched on a guess), not "no blockers".
    async fn blockers(&self, id: &str) -> Result<Vec<Blocker>, TrackerError> {
        let key = self.key(id)?;
        let read = self
            .read_issue(key, "fields=issuelinks", |r: &wire::IssueLinks| &r.key)
            .await?;
        let Some(links) = read.fields.issuelinks else {
            return Err(TrackerError::Unsupported(format!(
                "Jira sent no `issuelinks` field for {key} (issue linking is turned off \
                 on this site, or the field is hidden); set `tracker.blockers.enabled: \
                 false` if the project has no blockers"
            )));
        };
        wire::blockers(key, &links, &self.cx()).map_err(TrackerError::Invalid)
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let key = self.key(id)?;
        let mut out = Vec::new();
        let mut start = 0u64;
        let mut walk = PageWalk::new(format!("Jira comments of {key}"), MAX_PAGES);
        loop {
            walk.visit(&start.to_string())?;
            let page: CommentPage = self
                .api
                .get(&format!(
                    "/issue/{key}/comment?startAt={start}&maxResults={COMMENT_PAGE}&orderBy=created"
                ))
                .await?;
            let count = page.comments.len() as u64;
            out.extend(page.comments.iter().map(|c| wire::comment(c, self.cloud())));
            match next_offset(page.start_at, count, page.total) {
                Some(next) => start = next,
                None => break,
            }
        }
        Ok(out)
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        let key = self.key(id)?;
        let payload = if self.cloud() {
            json!({ "body": adf::from_markdown(body) })
        } else {
            json!({ "body": wiki::from_markdown(body) })
        };
        let raw: wire::RawComment = self
            .api
            .post(&format!("/issue/{key}/comment"), &payload)
            .await?;
        Ok(wire::comment(&raw, self.cloud()))
    }

    async fn check(
        &self,
        statuses: &[String],
        _create_missing: bool,
    ) -> Result<CheckReport, TrackerError> {
        self.check_site(statuses).await
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let key = self.key(id)?;
        // One read for the status and the transitions offered from it.
        let query = "fields=status&expand=transitions";
        let read = self
            .read_issue(key, query, |r: &wire::IssueTransitions| &r.key)
            .await?;
        let current = read.fields.status.name;
        if same_name(&current, to) {
            return Ok(());
        }
        if !same_name(&current, from) {
            return Err(TrackerError::Conflict {
                id: key.to_string(),
                expected: from.to_string(),
                current,
            });
        }
        let transition = self.pick_transition(key, &current, to, &read.transitions)?;
        match self.post_transition(key, &transition.id).await {
            Ok(()) => Ok(()),
            // 400: a required field, a validator, a condition; 409: a conflicting edit.
            Err(TrackerError::Invalid(detail)) => Err(TrackerError::TransitionRefused {
                workflow: format!(
                    "Jira (it refused the transition {:?}: {detail})",
                    transition.name
                ),
                id: key.to_string(),
                from: current.clone(),
                to: to.to_string(),
                current,
            }),
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(jql: Option<&str>) -> JiraTracker {
        let settings = JiraSettings {
            url: "http://127.0.0.1:9".into(),
            project: "PROJ".into(),
            api_version: 3,
            jql: jql.map(str::to_string),
            transitions: BTreeMap::new(),
            priority_order: vec![],
            claim_statuses: vec![],
            pipeline_statuses: vec![],
            page_size: PAGE_SIZE,
            link_type: DEFAULT_LINK_TYPE.into(),
        };
        JiraTracker::new(settings, Some("a@b".into()), "t".into(), "$E / $T".into()).unwrap()
    }

    #[test]
    fn the_configured_clause_is_anded_in_parentheses_after_project_and_status() {
        let t = tracker(Some("labels = agent-ok OR priority = High"));
        let filter = TicketFilter {
            labels: vec!["x".into()],
            exclude_labels: vec!["wip".into()],
            assignee: Some("me".into()),
            project: None,
        };
        assert_eq!(
            t.listing_jql(&["In Design".into(), "To Do".into()], &filter)
                .as_deref(),
            Some(
                "project = \"PROJ\" AND status in (\"In Design\", \"To Do\") AND \
             (labels = agent-ok OR priority = High) AND labels = \"x\" AND \
             (labels is EMPTY OR labels not in (\"wip\")) AND assignee = currentUser() \
             ORDER BY key ASC"
            )
        );
    }

    #[test]
    fn statuses_are_searched_trimmed_as_the_config_spells_them() {
        let t = tracker(None);
        assert_eq!(
            t.listing_jql(&[" in design ".into()], &TicketFilter::default())
                .as_deref(),
            Some("project = \"PROJ\" AND status in (\"in design\") ORDER BY key ASC")
        );
        assert_eq!(t.listing_jql(&[], &TicketFilter::default()), None);
    }

    #[test]
    fn keys_of_other_projects_and_path_tricks_are_refused() {
        let t = tracker(None);
        assert!(t.key("PROJ-12").is_ok());
        for bad in [
            "PROJ-",
            "OTHER-1",
            "PROJ-1/../2",
            "PROJ-1?x",
            "proj-1",
            "PROJX-1",
        ] {
            assert!(matches!(t.key(bad), Err(TrackerError::Invalid(_))), "{bad}");
        }
    }
}

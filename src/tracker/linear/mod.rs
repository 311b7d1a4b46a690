//! The Linear adapter: a team's issues over GraphQL, statuses are the team's workflow
//! states by name, a state of type `completed` or `canceled` is terminal unless a
//! stage claims from it, and comments are created with an id derived from the
//! outcome's idempotency key so Linear itself refuses a replayed post. See
//! `docs/trackers/linear.md`.

mod check;
mod comments;
pub mod queries;
mod states;
mod transport;
pub mod webhook;
mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

pub use crate::tracker::http::Clock;

/// The file under the state root holding a rate-limit wait Linear asked for.
pub const WAIT_FILE: &str = "linear-ratelimit.json";

pub use self::comments::comment_id;
// Every document sortie sends is safe to repeat (queries, a state change to a fixed
// state, comments whose id the outcome fixes), so each is sent with `Retry::Safe`.
use self::transport::LinearClient;
use crate::tracker::http::{
    adapter_options, fmt_options, PageWalk, Retry, DEFAULT_RETRY_BACKOFF, MAX_PAGES,
};

use self::states::TeamStates;
use self::wire::{Connection, Naming, WireComment, WireIssue, WireRelation, WireUser};
use super::{
    same_name, Blocker, Capabilities, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError,
};
use crate::config::{Config, LinearTokenType, TicketFilter, TrackerConfig};

adapter_options! {
    /// How the adapter talks to Linear; the defaults suit production.
    pub struct LinearOptions {
        /// Wait before the one retry after a server or connection error. Default 1 s.
        pub retry_backoff: Duration = DEFAULT_RETRY_BACKOFF,
        /// Where a rate-limit wait is persisted for the next process; `None` keeps it in
        /// memory. Default none ([`LinearTracker::open`] uses `state_root/linear-ratelimit.json`).
        pub wait_file: Option<PathBuf> = None,
    }
}

impl std::fmt::Debug for LinearOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let timeouts = (self.timeout, self.retry_backoff);
        fmt_options(f, "LinearOptions", timeouts, ("wait_file", &self.wait_file))
    }
}

/// A Linear team's issues as a sortie board.
pub struct LinearTracker {
    name: String,
    team: String,
    transport: LinearClient,
    naming: Naming,
    /// Statuses the stages move tickets to or through: each must exist in the team.
    required: Vec<String>,
    board_filter: TicketFilter,
    trusted_authors: Vec<String>,
    viewer: OnceCell<WireUser>,
    states: Mutex<Option<TeamStates>>,
    /// Identifier (`ENG-7`) to Linear's issue id, for mutations that want the id.
    issue_ids: Mutex<HashMap<String, String>>,
}

impl LinearTracker {
    /// The tracker a `kind: linear` config names, with the key read from the
    /// environment variable `token_env`.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let TrackerConfig::Linear { token_env, .. } = &config.tracker else {
            return Err(not_linear(config));
        };
        let token = super::read_secret(token_env, || {
            format!(
                "environment variable {token_env} is not set; put a Linear API key in it \
                 (see docs/trackers/linear.md)"
            )
        })?;
        let options = LinearOptions {
            wait_file: Some(config.state_root.join(WAIT_FILE)),
            ..LinearOptions::default()
        };
        Self::from_config(config, token, options)
    }

    /// The tracker a `kind: linear` config names, with an explicit token and options.
    pub fn from_config(
        config: &Config,
        token: String,
        options: LinearOptions,
    ) -> Result<Self, TrackerError> {
        let TrackerConfig::Linear {
            team,
            api_url,
            token_type,
            ..
        } = &config.tracker
        else {
            return Err(not_linear(config));
        };
        let authorization = match token_type {
            LinearTokenType::ApiKey => token,
            LinearTokenType::Oauth => format!("Bearer {token}"),
        };
        let transport = LinearClient::new(
            api_url.clone(),
            authorization,
            options.timeout,
            options.retry_backoff,
            options.clock,
            options.wait_file,
        )?;
        let required = config.stage_statuses();
        let mut known = required.clone();
        known.extend(config.terminal_states.iter().cloned());
        Ok(LinearTracker {
            name: config.tracker.name(),
            team: team.clone(),
            transport,
            naming: Naming {
                known,
                claimed: config.pipeline_statuses(),
            },
            required,
            board_filter: config.filter.clone(),
            trusted_authors: config.trusted_authors.clone(),
            viewer: OnceCell::new(),
            states: Mutex::new(None),
            issue_ids: Mutex::new(HashMap::new()),
        })
    }

    /// Complexity of the last query as Linear reported it (`x-complexity`).
    pub fn last_complexity(&self) -> Option<u64> {
        self.transport.budget().last_complexity
    }

    async fn viewer(&self) -> Result<&WireUser, TrackerError> {
        self.viewer
            .get_or_try_init(|| async {
                let data = self
                    .transport
                    .send("SortieViewer", queries::VIEWER, json!({}), Retry::Safe)
                    .await?;
                decode::<WireUser>("SortieViewer", &data["viewer"])
            })
            .await
    }

    fn remember(&self, issue: &WireIssue) {
        super::unpoisoned(&self.issue_ids).insert(issue.identifier.clone(), issue.id.clone());
    }

    async fn wire_issue(&self, id: &str) -> Result<WireIssue, TrackerError> {
        let data = self
            .transport
            .send(
                "SortieIssue",
                &queries::issue(),
                json!({ "id": id }),
                Retry::Safe,
            )
            .await?;
        let issue: WireIssue = decode("SortieIssue", &data["issue"])?;
        if !issue_in_team(&issue.identifier, &self.team) {
            return Err(TrackerError::NotFound(format!(
                "{id} is not an issue of team {}",
                self.team
            )));
        }
        self.remember(&issue);
        Ok(issue)
    }

    async fn issue_id(&self, id: &str) -> Result<String, TrackerError> {
        let known = super::unpoisoned(&self.issue_ids).get(id).cloned();
        match known {
            Some(uuid) => Ok(uuid),
            None => Ok(self.wire_issue(id).await?.id),
        }
    }

    /// The server-side filter of one listing.
    fn issue_filter(&self, state_ids: &[String], filter: &TicketFilter) -> Value {
        let mut clauses = vec![
            json!({ "team": { "key": { "eq": self.team } } }),
            json!({ "state": { "id": { "in": state_ids } } }),
        ];
        for label in &filter.labels {
            clauses.push(
                json!({ "labels": { "some": { "name": { "eqIgnoreCase": label.trim() } } } }),
            );
        }
        if let Some(project) = &filter.project {
            clauses.push(json!({ "project": { "name": { "eqIgnoreCase": project.trim() } } }));
        }
        json!({ "and": clauses })
    }
}

fn not_linear(config: &Config) -> TrackerError {
    TrackerError::Invalid(format!(
        "tracker {} is not a Linear tracker",
        config.tracker.name()
    ))
}

/// Whether `identifier` (`ENG-7`) names an issue of team `team` (`ENG`).
fn issue_in_team(identifier: &str, team: &str) -> bool {
    identifier
        .rsplit_once('-')
        .is_some_and(|(prefix, _)| prefix.eq_ignore_ascii_case(team))
}

fn decode<T: serde::de::DeserializeOwned>(
    operation: &str,
    value: &Value,
) -> Result<T, TrackerError> {
    T::deserialize(value).map_err(|e| {
        TrackerError::Invalid(format!("Linear {operation}: the answer is unreadable: {e}"))
    })
}

#[async_trait]
impl Tracker for LinearTracker {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::workflow_states(true)
    }

    fn rate_limit_remaining(&self) -> Option<u64> {
        self.transport.budget().requests_remaining
    }

    async fn identity(&self) -> Result<String, TrackerError> {
        Ok(self.viewer().await?.id.clone())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let filter = self.board_filter.clone();
        self.list_filtered(statuses, &filter).await
    }

    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &TicketFilter,
    ) -> Result<Listing, TrackerError> {
        // No statuses, no request (not even the team's states).
        if statuses.is_empty() {
            return Ok(Listing::default());
        }
        let states = self.refresh_states().await?;
        if let Some(err) = self.missing_states(&states) {
            return Err(err);
        }
        let mut listing = Listing::default();
        let state_ids: Vec<String> = statuses
            .iter()
            .filter_map(|s| states.find(s).map(|st| st.id.clone()))
            .collect();
        if state_ids.is_empty() {
            return Ok(listing);
        }
        let variables_filter = self.issue_filter(&state_ids, filter);
        let query = queries::issues();
        let mut after: Option<String> = None;
        let mut walk = PageWalk::new("Linear issues", MAX_PAGES);
        loop {
            walk.visit(after.as_deref().unwrap_or(""))?;
            let data = self
                .transport
                .send(
                    "SortieIssues",
                    &query,
                    json!({ "filter": variables_filter, "after": after }),
                    Retry::Safe,
                )
                .await?;
            let page: Connection<Value> = decode("SortieIssues", &data["issues"])?;
            for node in page.nodes {
                let identifier = node
                    .get("identifier")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                match serde_json::from_value::<WireIssue>(node) {
                    Ok(issue) => {
                        self.remember(&issue);
                        let ticket = issue.into_ticket(&self.naming);
                        if statuses.iter().any(|s| same_name(s, &ticket.status)) {
                            listing.tickets.push(ticket);
                        }
                    }
                    Err(err) => listing
                        .warnings
                        .push(format!("issue {identifier} is unreadable, skipped: {err}")),
                }
            }
            let info = page.page_info;
            match walk.next_cursor(info.has_next_page, info.end_cursor)? {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        Ok(listing)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        Ok(self.wire_issue(id).await?.into_ticket(&self.naming))
    }

    async fn blockers(&self, id: &str) -> Result<Vec<Blocker>, TrackerError> {
        let mut relations: Vec<WireRelation> = Vec::new();
        let mut after: Option<String> = None;
        let mut walk = PageWalk::new(format!("Linear blockers of {id}"), MAX_PAGES);
        loop {
            walk.visit(after.as_deref().unwrap_or(""))?;
            let data = self
                .transport
                .send(
                    "SortieBlockers",
                    queries::BLOCKERS,
                    json!({ "id": id, "after": after }),
                    Retry::Safe,
                )
                .await?;
            let page: Connection<WireRelation> =
                decode("SortieBlockers", &data["issue"]["inverseRelations"])?;
            relations.extend(page.nodes);
            let info = page.page_info;
            match walk.next_cursor(info.has_next_page, info.end_cursor)? {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        Ok(wire::blockers(&relations, &self.naming))
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let viewer = self.viewer().await?.id.clone();
        let query = queries::comments();
        let mut comments = Vec::new();
        let mut after: Option<String> = None;
        let mut walk = PageWalk::new(format!("Linear comments of {id}"), MAX_PAGES);
        loop {
            walk.visit(after.as_deref().unwrap_or(""))?;
            let data = self
                .transport
                .send(
                    "SortieComments",
                    &query,
                    json!({ "id": id, "after": after }),
                    Retry::Safe,
                )
                .await?;
            let page: Connection<Value> = decode("SortieComments", &data["issue"]["comments"])?;
            for node in page.nodes {
                match serde_json::from_value::<WireComment>(node) {
                    Ok(c) => comments.push(c.into_comment(&viewer, &self.trusted_authors)),
                    Err(err) => tracing::warn!(issue = id, %err, "skipping an unreadable comment"),
                }
            }
            let info = page.page_info;
            match walk.next_cursor(info.has_next_page, info.end_cursor)? {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        comments.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(comments)
    }

    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        let viewer = self.viewer().await?.id.clone();
        let issue_id = self.issue_id(id).await?;
        let comment_id = comment_id(key).to_string();
        let input = json!({ "id": comment_id, "issueId": issue_id, "body": body });
        // The id makes a repeat harmless: a retry after a lost answer is refused as a
        // duplicate and found below.
        let result = self
            .transport
            .send(
                "SortieCommentCreate",
                queries::COMMENT_CREATE,
                json!({ "input": input }),
                Retry::Safe,
            )
            .await;
        match result {
            Ok(data) => {
                let created: WireComment =
                    decode("SortieCommentCreate", &data["commentCreate"]["comment"])?;
                Ok(created.into_comment(&viewer, &self.trusted_authors))
            }
            Err(err @ (TrackerError::Invalid(_) | TrackerError::NotFound(_))) => {
                // Refused: if a comment with our id already exists on this issue, the
                // post happened before (a replay after a crash) and is done.
                match self.comment_by_id(&comment_id).await? {
                    Some((owner, existing)) if owner.eq_ignore_ascii_case(id) => {
                        tracing::info!(ticket = id, comment = %comment_id, "comment already posted; Linear refused the duplicate");
                        Ok(existing.into_comment(&viewer, &self.trusted_authors))
                    }
                    _ => Err(err),
                }
            }
            Err(err) => Err(err),
        }
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        // Re-read first: a state a person changed meanwhile must not be clobbered.
        let issue = self.wire_issue(id).await?;
        if same_name(&issue.state.name, to) {
            return Ok(());
        }
        if !same_name(&issue.state.name, from) {
            return Err(TrackerError::Conflict {
                id: id.to_string(),
                expected: from.to_string(),
                current: self.naming.status(&issue.state.name),
            });
        }
        let mut states = self.states().await?;
        if states.find(to).is_none() {
            // Resolved names are per tick; a state added since is worth one re-read.
            states = self.refresh_states().await?;
        }
        let Some(target) = states.find(to) else {
            return Err(TrackerError::Invalid(format!(
                "Linear team {} has no workflow state named {to:?}; its states are: {}",
                self.team,
                states.names()
            )));
        };
        let data = self
            .transport
            .send(
                "SortieIssueUpdate",
                queries::ISSUE_UPDATE,
                json!({ "id": issue.id, "stateId": target.id }),
                Retry::Safe,
            )
            .await?;
        let success = data["issueUpdate"]["success"].as_bool().unwrap_or(false);
        let now_in = data["issueUpdate"]["issue"]["state"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !success || !same_name(&now_in, to) {
            return Err(TrackerError::TransitionRefused {
                workflow: "Linear".to_string(),
                id: id.to_string(),
                from: from.to_string(),
                to: to.to_string(),
                current: self.naming.status(&now_in),
            });
        }
        Ok(())
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        check::run(self, statuses, create).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_ids_are_uuids_fixed_by_the_idempotency_key() {
        let a = comment_id("k1");
        assert_eq!(a, comment_id("k1"));
        assert_ne!(a, comment_id("k2"));
        assert_eq!(a.get_version_num(), 8);
        assert_eq!(a.to_string().len(), 36);
    }

    #[test]
    fn issues_belong_to_the_team_of_their_identifier_prefix() {
        assert!(issue_in_team("ENG-12", "ENG"));
        assert!(issue_in_team("eng-12", "ENG"));
        assert!(!issue_in_team("OPS-12", "ENG"));
        assert!(!issue_in_team("12", "ENG"));
    }
}

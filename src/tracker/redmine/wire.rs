//! Redmine's REST JSON as sortie reads it, and the pure mapping onto tickets and comments.
//!
//! Nothing here does I/O, so every rule (which journals are comments, how priorities
//! rank, which statuses exist) is tested without a server.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::tracker::labels::normalize_labels;
use crate::tracker::{Comment, Ticket, TrackerError};

/// `{id, name}`: how Redmine refers to a project, tracker, user, priority or category.
#[derive(Debug, Clone, Deserialize)]
pub struct Named {
    /// Numeric id.
    pub id: u64,
    /// Display name.
    #[serde(default)]
    pub name: String,
}

/// An issue's status as embedded in the issue (`is_closed` only since Redmine 5).
#[derive(Debug, Clone, Deserialize)]
pub struct IssueStatusRef {
    /// Status id.
    pub id: u64,
    /// Status name.
    pub name: String,
    /// Whether the status closes the issue, when the server says.
    #[serde(default)]
    pub is_closed: Option<bool>,
}

/// One issue from `/issues.json` or `/issues/<id>.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Issue {
    /// Issue number.
    pub id: u64,
    /// Owning project.
    pub project: Named,
    /// Redmine tracker (Bug, Feature, ...).
    #[serde(default)]
    pub tracker: Option<Named>,
    /// Current status.
    pub status: IssueStatusRef,
    /// Priority enumeration value.
    #[serde(default)]
    pub priority: Option<Named>,
    /// Issue category.
    #[serde(default)]
    pub category: Option<Named>,
    /// The user (or group) the issue is assigned to.
    #[serde(default)]
    pub assigned_to: Option<Named>,
    /// Title.
    pub subject: String,
    /// Body (null when empty).
    #[serde(default)]
    pub description: Option<String>,
    /// Creation time.
    pub created_on: DateTime<Utc>,
    /// Last change.
    pub updated_on: DateTime<Utc>,
    /// Journal entries, with `include=journals`.
    #[serde(default)]
    pub journals: Vec<Journal>,
}

/// One journal entry: a note, attribute changes, or both.
#[derive(Debug, Clone, Deserialize)]
pub struct Journal {
    /// Journal id.
    pub id: u64,
    /// Who wrote it (absent for entries of deleted users on some versions).
    #[serde(default)]
    pub user: Option<Named>,
    /// The note; empty or null for pure attribute changes.
    #[serde(default)]
    pub notes: Option<String>,
    /// When it was written.
    pub created_on: DateTime<Utc>,
}

/// `{"issue": {...}}`.
#[derive(Debug, Deserialize)]
pub struct IssueEnvelope {
    /// The issue.
    pub issue: Issue,
}

/// One page of `/issues.json`; issues stay raw so one bad entry does not sink the page.
#[derive(Debug, Deserialize)]
pub struct IssuePage {
    /// The issues of this page.
    pub issues: Vec<serde_json::Value>,
    /// Matching issues across all pages.
    pub total_count: u64,
}

/// One status from `/issue_statuses.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Status {
    /// Status id.
    pub id: u64,
    /// Status name, as pipelines name it.
    pub name: String,
    /// Tickets in this status are closed (terminal).
    #[serde(default)]
    pub is_closed: bool,
}

/// `{"issue_statuses": [...]}`.
#[derive(Debug, Deserialize)]
pub struct StatusList {
    /// Every status, in Redmine's order.
    pub issue_statuses: Vec<Status>,
}

/// `{"issue_priorities": [...]}`, least urgent first (Redmine's position order).
#[derive(Debug, Deserialize)]
pub struct PriorityList {
    /// Every priority.
    pub issue_priorities: Vec<Named>,
}

/// The API key's user from `/users/current.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct CurrentUser {
    /// User id.
    pub id: u64,
    /// Login.
    pub login: String,
    /// First name.
    #[serde(default)]
    pub firstname: String,
    /// Last name.
    #[serde(default)]
    pub lastname: String,
}

impl CurrentUser {
    /// The name sortie's own comments carry: `firstname lastname` (Redmine's default
    /// display format), or the login when both are empty.
    pub fn display_name(&self) -> String {
        let name = format!("{} {}", self.firstname.trim(), self.lastname.trim());
        let name = name.trim();
        if name.is_empty() {
            self.login.clone()
        } else {
            name.to_string()
        }
    }
}

/// `{"user": {...}}`.
#[derive(Debug, Deserialize)]
pub struct CurrentUserEnvelope {
    /// The user.
    pub user: CurrentUser,
}

/// `{"project": {...}}`.
#[derive(Debug, Deserialize)]
pub struct ProjectEnvelope {
    /// The project.
    pub project: Named,
}

/// `{"errors": [...]}` of a 422 answer.
#[derive(Debug, Deserialize)]
struct Errors {
    #[serde(default)]
    errors: Vec<String>,
}

/// The issue statuses a server has, looked up by exact name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusCatalogue {
    statuses: Vec<Status>,
}

impl StatusCatalogue {
    /// A catalogue of `statuses`, in the server's order.
    pub fn new(statuses: Vec<Status>) -> Self {
        StatusCatalogue { statuses }
    }

    /// The status named `name` (compared as [`crate::tracker::same_name`] does).
    pub fn get(&self, name: &str) -> Option<&Status> {
        self.statuses
            .iter()
            .find(|s| crate::tracker::same_name(&s.name, name))
    }

    /// Whether status `id` is closed, when the catalogue knows it.
    pub fn is_closed(&self, id: u64) -> Option<bool> {
        self.statuses
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.is_closed)
    }

    /// Resolve `name`, or explain which statuses exist.
    pub fn resolve(&self, name: &str, server: &str) -> Result<&Status, TrackerError> {
        self.get(name)
            .ok_or_else(|| TrackerError::Invalid(self.unknown_status(name, server)))
    }

    /// The message for a status the server does not have: names it, lists the
    /// ones that exist, and suggests a near miss in case or spacing.
    pub fn unknown_status(&self, name: &str, server: &str) -> String {
        let names: Vec<String> = self
            .statuses
            .iter()
            .map(|s| format!("{:?}", s.name))
            .collect();
        let folded = fold(name);
        let hint = self
            .statuses
            .iter()
            .find(|s| fold(&s.name) == folded)
            .map(|s| format!(" (did you mean {:?}? names match exactly)", s.name))
            .unwrap_or_default();
        format!(
            "Redmine at {server} has no issue status {name:?}{hint}; its statuses are {}. \
             Fix the pipeline config or add the status under Administration > Issue statuses \
             (`sortie tracker check` validates a config against the server)",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    }
}

fn fold(name: &str) -> String {
    name.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// How urgent each priority is: 1 for the most urgent, counting down Redmine's
/// position order (so with the defaults Immediate = 1, Urgent = 2, High = 3,
/// Normal = 4, Low = 5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityRanks {
    by_id: HashMap<u64, i64>,
}

impl PriorityRanks {
    /// Ranks from the priorities in Redmine's position order (least urgent first).
    pub fn from_positions(priorities: &[Named]) -> Self {
        let n = priorities.len() as i64;
        let by_id = priorities
            .iter()
            .enumerate()
            .map(|(i, p)| (p.id, n - i as i64))
            .collect();
        PriorityRanks { by_id }
    }

    /// The rank of priority `id`; `None` for a priority the server did not list.
    pub fn rank(&self, id: u64) -> Option<i64> {
        self.by_id.get(&id).copied()
    }
}

/// Turn an issue into a ticket. `closed` comes from the issue when the server says,
/// else from the catalogue.
pub fn ticket(
    issue: &Issue,
    base_url: &str,
    statuses: &StatusCatalogue,
    priorities: &PriorityRanks,
) -> Ticket {
    let closed = issue
        .status
        .is_closed
        .or_else(|| statuses.is_closed(issue.status.id))
        .unwrap_or(false);
    let labels = normalize_labels(
        issue
            .tracker
            .iter()
            .chain(issue.category.iter())
            .map(|n| n.name.clone()),
    );
    Ticket {
        id: issue.id.to_string(),
        title: issue.subject.clone(),
        body: issue.description.clone().unwrap_or_default(),
        status: issue.status.name.clone(),
        labels,
        priority: issue.priority.as_ref().and_then(|p| priorities.rank(p.id)),
        created_at: issue.created_on,
        updated_at: issue.updated_on,
        url: Some(format!("{base_url}/issues/{}", issue.id)),
        closed,
        assignees: issue.assigned_to.iter().map(|a| a.name.clone()).collect(),
        blocked_by: None,
    }
}

/// The journal entries that are comments (a non-blank note), oldest first. Entries
/// written by user `own_user_id` carry `own_name` as their author, whatever display
/// format the server uses, so they match [`CurrentUser::display_name`].
pub fn comments(journals: &[Journal], own_user_id: u64, own_name: &str) -> Vec<Comment> {
    let mut notes: Vec<&Journal> = journals
        .iter()
        .filter(|j| j.notes.as_deref().is_some_and(|n| !n.trim().is_empty()))
        .collect();
    notes.sort_by_key(|j| (j.created_on, j.id));
    notes
        .into_iter()
        .map(|j| Comment {
            id: j.id.to_string(),
            author: match &j.user {
                Some(u) if u.id == own_user_id => own_name.to_string(),
                Some(u) => u.name.clone(),
                None => String::new(),
            },
            created_at: j.created_on,
            body: j.notes.clone().unwrap_or_default(),
        })
        .collect()
}

/// Whether a stored note is the text sortie posted (Redmine may turn `\n` into `\r\n`
/// and drop trailing blanks).
pub fn same_note(stored: &str, posted: &str) -> bool {
    let norm = |s: &str| s.replace("\r\n", "\n").trim_end().to_string();
    norm(stored) == norm(posted)
}

/// Map a non-success HTTP answer onto the error the pipeline branches on.
/// `what` says what was asked (`GET /issues/7.json`); `key_env` names the key's variable.
pub fn http_error(
    status: u16,
    body: &str,
    retry_after: Option<std::time::Duration>,
    what: &str,
    key_env: &str,
) -> TrackerError {
    match status {
        401 => TrackerError::Unauthorized(format!(
            "{what}: Redmine rejected the API key in ${key_env} (401); check the key \
             (My account > API access key) and that the REST API is enabled \
             (Administration > Settings > API)"
        )),
        403 => TrackerError::Unauthorized(format!(
            "{what}: forbidden (403); the API key's user lacks the permission, or the \
             REST API is disabled (Administration > Settings > API)"
        )),
        404 => TrackerError::NotFound(format!("{what}: not found (404)")),
        409 | 422 => {
            let errors = serde_json::from_str::<Errors>(body)
                .map(|e| e.errors)
                .unwrap_or_default();
            let detail = if errors.is_empty() {
                "no reason given (a concurrent change of the issue, or a value the \
                 workflow does not allow)"
                    .to_string()
            } else {
                errors.join("; ")
            };
            TrackerError::Invalid(format!("{what}: Redmine refused it ({status}): {detail}"))
        }
        429 => TrackerError::RateLimited { retry_after },
        500..=599 => {
            TrackerError::Unavailable(format!("{what}: server error {status}{}", snippet(body)))
        }
        _ => TrackerError::Invalid(format!(
            "{what}: unexpected answer {status}{}",
            snippet(body)
        )),
    }
}

fn snippet(body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return String::new();
    }
    let cut: String = body.chars().take(200).collect();
    format!(": {cut}")
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;

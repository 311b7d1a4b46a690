//! Linear's answers as serde types, and how an issue becomes a [`Ticket`].

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::tracker::labels::normalize_labels;
use crate::tracker::{same_name, Blocker, Comment, Ticket};

/// A connection's `pageInfo`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PageInfo {
    pub has_next_page: bool,
    #[serde(default)]
    pub end_cursor: Option<String>,
}

/// A connection: its nodes and where the next page starts.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Connection<T> {
    pub nodes: Vec<T>,
    #[serde(default)]
    pub page_info: PageInfo,
}

/// A workflow state.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct WireState {
    #[serde(default)]
    pub id: String,
    pub name: String,
    /// `triage`, `backlog`, `unstarted`, `started`, `completed`, `canceled`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl WireState {
    /// Linear itself says work on the issue is over.
    pub fn is_finished(&self) -> bool {
        matches!(self.kind.as_str(), "completed" | "canceled")
    }
}

/// A person (or app user).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct WireUser {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub email: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireName {
    pub name: String,
}

/// A relation pointing at the issue (`inverseRelations`): `issue` relates to it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireRelation {
    #[serde(rename = "type")]
    pub kind: String,
    pub issue: WireRelatedIssue,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireRelatedIssue {
    pub identifier: String,
    pub state: WireState,
}

/// The fields of `fragment SortieIssue`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireIssue {
    pub id: String,
    pub identifier: String,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    pub priority: f64,
    pub url: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub state: WireState,
    pub labels: Connection<WireName>,
    #[serde(default)]
    pub assignee: Option<WireUser>,
    pub inverse_relations: Connection<WireRelation>,
}

/// One comment.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireComment {
    pub id: String,
    pub body: String,
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub user: Option<WireUser>,
}

/// The status names a config uses, so tickets carry the config's spelling of a
/// workflow state (`In Review` in Linear is `in review` in the config).
#[derive(Debug, Clone, Default)]
pub(crate) struct Naming {
    /// Every status the config names (stages and terminal states).
    pub known: Vec<String>,
    /// Statuses some stage claims from or runs in: never closed by their state type.
    pub claimed: Vec<String>,
}

impl Naming {
    /// The config's spelling of the state `name`, or the name as Linear has it.
    pub fn status(&self, name: &str) -> String {
        self.known
            .iter()
            .find(|k| same_name(k, name))
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    /// A state of type completed or canceled is closed unless a stage claims from it.
    pub fn closed(&self, state: &WireState) -> bool {
        state.is_finished() && !self.claimed.iter().any(|c| same_name(c, &state.name))
    }
}

/// Who wrote a comment, as the pipeline's trust check sees it: the viewer's id for the
/// key's own comments, the matching `trusted_authors` entry (by id, name or email) for
/// trusted people, else `name <email>` (which can match neither).
pub(crate) fn author(user: Option<&WireUser>, viewer_id: &str, trusted: &[String]) -> String {
    let Some(user) = user else {
        return "(integration)".to_string();
    };
    if user.id == viewer_id {
        return viewer_id.to_string();
    }
    if let Some(entry) = trusted.iter().find(|t| {
        t.as_str() == user.id
            || same_name(t, &user.name)
            || (!user.email.is_empty() && same_name(t, &user.email))
    }) {
        return entry.clone();
    }
    format!("{} <{}>", user.name, user.email)
}

impl WireComment {
    pub fn into_comment(self, viewer_id: &str, trusted: &[String]) -> Comment {
        Comment {
            author: author(self.user.as_ref(), viewer_id, trusted),
            id: self.id,
            created_at: self.created_at,
            body: self.body,
        }
    }
}

/// The blockers among relations pointing at an issue.
pub(crate) fn blockers(relations: &[WireRelation], naming: &Naming) -> Vec<Blocker> {
    relations
        .iter()
        .filter(|r| r.kind == "blocks")
        .map(|r| Blocker {
            id: r.issue.identifier.clone(),
            status: Some(naming.status(&r.issue.state.name)),
            closed: r.issue.state.is_finished(),
        })
        .collect()
}

impl WireIssue {
    /// The ticket this issue is; `warnings` gets what was cut short.
    pub fn into_ticket(self, naming: &Naming) -> Ticket {
        let priority = match self.priority.round() as i64 {
            p @ 1..=4 => Some(p),
            _ => None,
        };
        let blocked_by = (!self.inverse_relations.page_info.has_next_page)
            .then(|| blockers(&self.inverse_relations.nodes, naming));
        let mut labels: Vec<String> = self.labels.nodes.into_iter().map(|l| l.name).collect();
        if self.labels.page_info.has_next_page {
            tracing::warn!(issue = %self.identifier, "more than 10 labels: only the first 10 are seen");
        }
        labels.sort();
        let labels = normalize_labels(labels);
        Ticket {
            closed: naming.closed(&self.state),
            status: naming.status(&self.state.name),
            id: self.identifier,
            title: self.title,
            body: self.description.unwrap_or_default(),
            labels,
            priority,
            created_at: self.created_at,
            updated_at: self.updated_at,
            url: Some(self.url),
            assignees: self
                .assignee
                .map(|a| vec![a.id, a.name, a.email])
                .unwrap_or_default(),
            blocked_by,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str, name: &str, email: &str) -> WireUser {
        WireUser {
            id: id.into(),
            name: name.into(),
            email: email.into(),
        }
    }

    #[test]
    fn authors_are_trusted_by_viewer_id_or_a_trusted_id_name_or_email() {
        let trusted = vec!["Alice@Example.com".to_string(), "u-bob".to_string()];
        let me = user("u-me", "sortie", "bot@x");
        assert_eq!(author(Some(&me), "u-me", &trusted), "u-me");
        let alice = user("u-a", "Alice", "alice@example.com");
        assert_eq!(author(Some(&alice), "u-me", &trusted), "Alice@Example.com");
        let bob = user("u-bob", "Bob", "bob@x");
        assert_eq!(author(Some(&bob), "u-me", &trusted), "u-bob");
        // Someone naming themselves after the bot's id is still not the bot.
        let mallory = user("u-m", "u-me", "m@x");
        assert_eq!(author(Some(&mallory), "u-me", &trusted), "u-me <m@x>");
    }

    #[test]
    fn finished_states_are_closed_unless_a_stage_claims_from_them() {
        let naming = Naming {
            known: vec!["done".into(), "qa".into()],
            claimed: vec!["QA".into()],
        };
        let state = |name: &str, kind: &str| WireState {
            id: String::new(),
            name: name.into(),
            kind: kind.into(),
        };
        assert!(naming.closed(&state("Done", "completed")));
        assert!(naming.closed(&state("Canceled", "canceled")));
        assert!(!naming.closed(&state("qa", "completed")));
        assert!(!naming.closed(&state("In Progress", "started")));
        assert_eq!(naming.status("Done"), "done");
        assert_eq!(naming.status("Backlog"), "Backlog");
    }
}

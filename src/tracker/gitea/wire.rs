//! Pure translation of Gitea's JSON into sortie's tickets and comments, the repository's
//! label ids by name, and page/limit pagination.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::tracker::forge_issue::IssueHead;
use crate::tracker::labels::LabelScheme;
use crate::tracker::Comment;

/// An issue as the REST API returns it, reduced to what sortie reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireIssue {
    /// Number, title, body, state, link and times, named as on GitHub.
    #[serde(flatten)]
    pub head: IssueHead,
    #[serde(default)]
    pub labels: Option<Vec<WireLabel>>,
    /// Set (an object) on pull requests, which the issues API returns unless `type=issues`.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
    #[serde(default)]
    pub assignees: Option<Vec<WireUser>>,
}

/// A label, on an issue or on the repository.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireLabel {
    pub id: i64,
    pub name: String,
}

/// A person as Gitea names them.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireUser {
    pub login: String,
}

/// A comment.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireComment {
    /// `int64` in Gitea's description.
    pub id: i64,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub user: Option<WireUser>,
    pub created_at: DateTime<Utc>,
}

pub(crate) use crate::tracker::forge_core::Classified;

impl WireIssue {
    /// The labels, in Gitea's order.
    pub fn labels(&self) -> &[WireLabel] {
        self.labels.as_deref().unwrap_or_default()
    }

    /// The label names.
    pub fn label_names(&self) -> impl Iterator<Item = &str> + Clone {
        self.labels().iter().map(|l| l.name.as_str())
    }

    /// The id of the label named `name` (as spelled on the issue).
    pub fn label_id(&self, name: &str) -> Option<i64> {
        self.labels().iter().find(|l| l.name == name).map(|l| l.id)
    }

    /// Read the issue through the label scheme.
    pub fn classify(&self, scheme: &LabelScheme) -> Classified {
        if self.pull_request.as_ref().is_some_and(|p| !p.is_null()) {
            return Classified::PullRequest;
        }
        match scheme.read(self.label_names()) {
            Err(labels) => Classified::Ambiguous(labels),
            Ok(reading) => {
                let assignees = self.assignees.iter().flatten();
                let assignees = assignees.map(|u| u.login.clone()).collect();
                Classified::Ticket(Box::new(self.head.ticket(reading, assignees, None)))
            }
        }
    }
}

impl From<WireComment> for Comment {
    fn from(c: WireComment) -> Self {
        Comment {
            id: c.id.to_string(),
            // Gitea shows comments of deleted accounts as by "Ghost".
            author: c.user.map_or_else(|| "Ghost".to_string(), |u| u.login),
            created_at: c.created_at,
            body: c.body.unwrap_or_default(),
        }
    }
}

/// The repository's labels by lower-cased name: id and spelling.
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelIds(BTreeMap<String, (i64, String)>);

impl LabelIds {
    /// From `GET /repos/{owner}/{repo}/labels` entries.
    pub fn new(labels: impl IntoIterator<Item = WireLabel>) -> Self {
        LabelIds(
            labels
                .into_iter()
                .map(|l| (l.name.trim().to_lowercase(), (l.id, l.name)))
                .collect(),
        )
    }

    /// The id and exact spelling of the label `name` (compared as [`crate::tracker::same_name`] does).
    pub fn get(&self, name: &str) -> Option<&(i64, String)> {
        self.0.get(&name.trim().to_lowercase())
    }

    /// How many labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Whether another page follows one that held `got` items, with `seen` items so far:
/// a `Link: rel=next` says so; else `X-Total-Count`; else a full page.
pub(crate) fn more_pages(
    got: usize,
    seen: usize,
    limit: usize,
    total: Option<usize>,
    next_link: bool,
) -> bool {
    if got == 0 {
        return false;
    }
    if next_link {
        return true;
    }
    match total {
        Some(total) => seen < total,
        None => got >= limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scheme() -> LabelScheme {
        LabelScheme {
            status_prefix: "status/".into(),
            priority_prefix: "priority/".into(),
        }
    }

    fn issue(labels: serde_json::Value, pr: serde_json::Value) -> WireIssue {
        serde_json::from_value(json!({
            "number": 3, "title": "T", "body": "B", "state": "open", "labels": labels,
            "html_url": "https://gitea.example.com/o/r/issues/3", "pull_request": pr,
            "created_at": "2026-01-02T03:04:05+01:00", "updated_at": "2026-01-02T03:04:05Z",
            "assignees": null
        }))
        .unwrap()
    }

    #[test]
    fn an_issue_is_a_ticket_by_number_and_a_pull_request_is_not() {
        let i = issue(
            json!([{"id": 5, "name": "status/ready"}, {"id": 6, "name": "priority/1"}, {"id": 7, "name": "ui"}]),
            json!(null),
        );
        let Classified::Ticket(t) = i.classify(&scheme()) else {
            panic!()
        };
        assert_eq!(
            (t.id.as_str(), t.status.as_str(), t.priority),
            ("3", "ready", Some(1))
        );
        assert_eq!(t.labels, ["ui"]);
        assert_eq!(i.label_id("status/ready"), Some(5));
        let pr = issue(json!([]), json!({"merged": false}));
        assert!(matches!(pr.classify(&scheme()), Classified::PullRequest));
        let two = issue(
            json!([{"id": 1, "name": "status/a"}, {"id": 2, "name": "status/b"}]),
            json!(null),
        );
        assert!(
            matches!(two.classify(&scheme()), Classified::Ambiguous(l) if l == ["status/a", "status/b"])
        );
    }

    #[test]
    fn label_ids_are_found_ignoring_case() {
        let ids = LabelIds::new([WireLabel {
            id: 9,
            name: "Status/Ready".into(),
        }]);
        assert_eq!(
            ids.get("status/ready"),
            Some(&(9, "Status/Ready".to_string()))
        );
        assert_eq!(ids.get("status/done"), None);
    }

    #[test]
    fn pages_continue_on_a_next_link_a_total_or_a_full_page() {
        assert!(more_pages(50, 50, 50, None, false));
        assert!(!more_pages(20, 70, 50, None, false));
        assert!(
            more_pages(30, 30, 50, Some(45), false),
            "the server capped the limit"
        );
        assert!(!more_pages(15, 45, 50, Some(45), false));
        assert!(more_pages(10, 10, 50, None, true));
        assert!(!more_pages(0, 10, 50, None, true));
    }
}

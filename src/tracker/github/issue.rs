//! Pure translation of GitHub's JSON into sortie's tickets and comments: status and
//! priority from labels, pull requests told apart from issues, `Link` pagination.
//!
//! Nothing here does I/O, so every rule is unit-tested on literal JSON.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::tracker::forge_issue::IssueHead;
pub use crate::tracker::labels::LabelScheme;
use crate::tracker::{Comment, Ticket};

/// An issue as the REST API returns it, reduced to what sortie reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireIssue {
    /// Number, title, body, state, link and times.
    #[serde(flatten)]
    pub head: IssueHead,
    #[serde(default)]
    pub labels: Vec<WireLabel>,
    /// Present (an object) only on pull requests.
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
    /// How many issues block this one; absent on servers without issue dependencies
    /// (GitHub Enterprise Server releases before they shipped).
    #[serde(default)]
    pub issue_dependencies_summary: Option<DependencySummary>,
}

/// `issue_dependencies_summary` of an issue, reduced to what sortie reads.
#[derive(Debug, Clone, Copy, Deserialize)]
pub(crate) struct DependencySummary {
    /// Open issues blocking this one (`total_blocked_by` also counts closed ones).
    pub blocked_by: u64,
}

/// A label on an issue: the API documents both a bare name and an object.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireLabel {
    Named { name: String },
    Bare(String),
}

impl WireLabel {
    pub(crate) fn name(&self) -> &str {
        match self {
            WireLabel::Named { name } | WireLabel::Bare(name) => name,
        }
    }
}

/// What one issue of a listing is to sortie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Classified {
    /// A ticket (its status may be empty when it has no status label).
    Ticket(Box<Ticket>),
    /// A pull request: the issues API returns them too, but they are not tickets.
    PullRequest,
    /// Two or more status labels: skipped with a warning naming them.
    Ambiguous {
        /// Issue number.
        number: u64,
        /// The full status labels.
        labels: Vec<String>,
    },
}

impl WireIssue {
    /// Classify the issue; a ticket without a status label gets the empty status.
    pub fn classify(&self, scheme: &LabelScheme) -> Classified {
        if self.pull_request.is_some() {
            return Classified::PullRequest;
        }
        let reading = match scheme.read(self.labels.iter().map(WireLabel::name)) {
            Ok(reading) => reading,
            Err(labels) => {
                return Classified::Ambiguous {
                    number: self.head.number,
                    labels,
                }
            }
        };
        // No open blocker: nothing to read. Otherwise (or without a summary) the
        // pipeline reads them, as their statuses decide whether they block.
        let blocked_by = self
            .issue_dependencies_summary
            .filter(|s| s.blocked_by == 0)
            .map(|_| Vec::new());
        Classified::Ticket(Box::new(self.head.ticket(reading, Vec::new(), blocked_by)))
    }
}

/// A comment as the REST API returns it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireComment {
    pub id: u64,
    /// `null` for comments of deleted accounts.
    #[serde(default)]
    pub user: Option<WireUser>,
    #[serde(default)]
    pub body: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The author of a comment, or the token's own user.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireUser {
    pub login: String,
}

impl From<WireComment> for Comment {
    fn from(c: WireComment) -> Self {
        Comment {
            id: c.id.to_string(),
            // GitHub shows comments of deleted accounts as by "ghost".
            author: c.user.map_or_else(|| "ghost".to_string(), |u| u.login),
            created_at: c.created_at,
            body: c.body.unwrap_or_default(),
        }
    }
}

/// The issue number an id names, when it is one.
pub(crate) fn issue_number(id: &str) -> Option<u64> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok().filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scheme() -> LabelScheme {
        LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        }
    }

    fn issue(labels: serde_json::Value) -> WireIssue {
        serde_json::from_value(json!({
            "number": 12, "title": "Login page", "body": null, "state": "open",
            "labels": labels, "html_url": "https://github.com/o/r/issues/12",
            "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-03T03:04:05Z"
        }))
        .unwrap()
    }

    #[test]
    fn status_is_the_suffix_of_the_one_status_label_and_priority_the_lowest_number() {
        let i = issue(json!([
            {"name": "bug"}, {"name": "status:ready-for-design"},
            {"name": "priority:3"}, "priority:1", {"name": "priority:high"}
        ]));
        let Classified::Ticket(t) = i.classify(&scheme()) else {
            panic!()
        };
        assert_eq!(t.id, "12");
        assert_eq!(t.status, "ready-for-design");
        assert_eq!(t.priority, Some(1));
        assert_eq!(t.labels, vec!["bug", "priority:high"]);
        assert_eq!(t.url.as_deref(), Some("https://github.com/o/r/issues/12"));
        assert_eq!(t.body, "");
        assert!(!t.closed);
    }

    #[test]
    fn two_status_labels_are_ambiguous_and_name_both() {
        let i = issue(json!([{"name": "status:a"}, {"name": "status:b"}]));
        assert_eq!(
            i.classify(&scheme()),
            Classified::Ambiguous {
                number: 12,
                labels: vec!["status:a".into(), "status:b".into()]
            }
        );
    }

    #[test]
    fn pull_requests_are_not_tickets_and_closed_issues_are_closed() {
        let mut i = issue(json!([{"name": "status:a"}]));
        i.pull_request = Some(json!({"url": "x"}));
        assert_eq!(i.classify(&scheme()), Classified::PullRequest);
        let mut i = issue(json!([{"name": "status:a"}]));
        i.head.state = "closed".into();
        let Classified::Ticket(t) = i.classify(&scheme()) else {
            panic!()
        };
        assert!(t.closed);
    }

    #[test]
    fn a_summary_without_open_blockers_means_no_blockers_to_read() {
        let with = |summary: serde_json::Value| {
            let mut v = json!({
                "number": 12, "title": "t", "state": "open", "labels": [{"name": "status:a"}],
                "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-03T03:04:05Z"
            });
            if !summary.is_null() {
                v["issue_dependencies_summary"] = summary;
            }
            let i: WireIssue = serde_json::from_value(v).unwrap();
            let Classified::Ticket(t) = i.classify(&scheme()) else {
                panic!()
            };
            t.blocked_by
        };
        let summary = |open: u64, total: u64| json!({"blocked_by": open, "blocking": 0, "total_blocked_by": total, "total_blocking": 0});
        assert_eq!(with(summary(0, 2)), Some(vec![]), "closed blockers only");
        assert_eq!(with(summary(1, 1)), None, "an open blocker needs a read");
        assert_eq!(with(serde_json::Value::Null), None, "no summary: read them");
    }

    #[test]
    fn only_positive_decimal_ids_are_issue_numbers() {
        assert_eq!(issue_number("42"), Some(42));
        for bad in ["", "0", "-1", "+4", "4a", "PROJ-7", " 4"] {
            assert_eq!(issue_number(bad), None, "{bad:?}");
        }
    }
}

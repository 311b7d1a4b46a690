//! Pure translation of GitLab's JSON into sortie's tickets, comments and blockers, and
//! of a status move into the one `PUT` body that makes it.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tracker::labels::LabelScheme;
use crate::tracker::{Blocker, Comment, Ticket};

/// An issue as `GET /projects/:id/issues` returns it, reduced to what sortie reads.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireIssue {
    pub iid: u64,
    #[serde(default)]
    pub project_id: Option<u64>,
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `opened` or `closed`.
    pub state: String,
    #[serde(default)]
    pub labels: Vec<WireLabel>,
    #[serde(default)]
    pub web_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub assignees: Vec<WireUser>,
    /// `group/project#12`, on linked issues from other projects.
    #[serde(default)]
    pub references: Option<WireReferences>,
    /// On entries of `GET .../links`: `relates_to`, `blocks` or `is_blocked_by`.
    #[serde(default)]
    pub link_type: Option<String>,
}

/// A label: names by default, objects with `with_labels_details=true`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireLabel {
    Bare(String),
    Detailed { name: String },
}

impl WireLabel {
    pub(crate) fn name(&self) -> &str {
        match self {
            WireLabel::Bare(name) | WireLabel::Detailed { name } => name,
        }
    }
}

/// A person as GitLab names them.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireUser {
    pub username: String,
}

/// An issue's references.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireReferences {
    #[serde(default)]
    pub full: Option<String>,
}

/// A note (comment) on an issue.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WireNote {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub author: Option<WireUser>,
    pub created_at: DateTime<Utc>,
    /// Notes GitLab writes itself ("added ~label", "closed"): not comments.
    #[serde(default)]
    pub system: bool,
}

pub(crate) use crate::tracker::forge_core::Classified;

impl WireIssue {
    /// The label names, in GitLab's order.
    pub fn label_names(&self) -> impl Iterator<Item = &str> + Clone {
        self.labels.iter().map(WireLabel::name)
    }

    /// Read the issue through the label scheme.
    pub fn classify(&self, scheme: &LabelScheme) -> Classified {
        match scheme.read(self.label_names()) {
            Err(labels) => Classified::Ambiguous(labels),
            Ok(reading) => Classified::Ticket(Box::new(Ticket {
                id: self.iid.to_string(),
                title: self.title.clone(),
                body: self.description.clone().unwrap_or_default(),
                status: reading.status,
                labels: reading.other,
                priority: reading.priority,
                created_at: self.created_at,
                updated_at: self.updated_at,
                url: self.web_url.clone(),
                closed: self.state == "closed",
                assignees: self.assignees.iter().map(|u| u.username.clone()).collect(),
                blocked_by: None,
            })),
        }
    }

    /// This entry of `GET .../links` as a blocker of an issue of `project_id`, when it
    /// is one (`is_blocked_by`).
    pub fn as_blocker(&self, scheme: &LabelScheme, project_id: Option<u64>) -> Option<Blocker> {
        if self.link_type.as_deref() != Some("is_blocked_by") {
            return None;
        }
        let same_project = project_id.is_none() || self.project_id == project_id;
        let id = match (&self.references, same_project) {
            (_, true) => self.iid.to_string(),
            (Some(WireReferences { full: Some(full) }), false) => full.clone(),
            (_, false) => format!("{}#{}", self.project_id.unwrap_or_default(), self.iid),
        };
        let status = scheme
            .read(self.label_names())
            .ok()
            .map(|r| r.status)
            .filter(|s| !s.is_empty());
        Some(Blocker {
            id,
            status,
            closed: self.state == "closed",
        })
    }
}

impl From<WireNote> for Comment {
    fn from(n: WireNote) -> Self {
        Comment {
            id: n.id.to_string(),
            // GitLab shows notes of deleted accounts as by the "Ghost User".
            author: n.author.map_or_else(|| "ghost".to_string(), |u| u.username),
            created_at: n.created_at,
            body: n.body.unwrap_or_default(),
        }
    }
}

/// The body of the one `PUT /projects/:id/issues/:iid` that moves labels (and closes).
pub(crate) fn move_body(add: Option<&str>, remove: &[String], close: bool) -> Value {
    let mut body = json!({});
    if let Some(add) = add {
        body["add_labels"] = json!([add]);
    }
    if !remove.is_empty() {
        body["remove_labels"] = json!(remove);
    }
    if close {
        body["state_event"] = json!("close");
    }
    body
}

/// The next page of a listing: `x-next-page` (offset pagination), else `Link: rel=next`
/// (keyset pagination), as a path-or-URL for [`crate::tracker::rest::ForgeClient::send`].
/// An `x-next-page` that is not a page number is an error: stopping there would list
/// part of the board.
pub(crate) fn next_page(
    current: &str,
    x_next_page: Option<&str>,
    link: Option<&str>,
) -> Result<Option<String>, String> {
    if let Some(page) = x_next_page.map(str::trim).filter(|p| !p.is_empty()) {
        let page: u64 = page
            .parse()
            .map_err(|_| format!("x-next-page {page:?} is not a page number"))?;
        let base: Vec<&str> = current
            .split(['?', '&'])
            .filter(|part| !part.starts_with("page="))
            .collect();
        let Some((path, query)) = base.split_first() else {
            return Ok(None);
        };
        let mut next = format!("{path}?");
        for q in query {
            next.push_str(q);
            next.push('&');
        }
        next.push_str(&format!("page={page}"));
        return Ok(Some(next));
    }
    Ok(link.and_then(crate::tracker::http::next_link))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme() -> LabelScheme {
        LabelScheme {
            status_prefix: "status::".into(),
            priority_prefix: "priority::".into(),
        }
    }

    fn issue(v: Value) -> WireIssue {
        let mut base = json!({
            "iid": 4, "project_id": 9, "title": "Export", "description": "Body",
            "state": "opened", "labels": ["bug", "status::ready", "priority::2"],
            "web_url": "https://gitlab.com/g/r/-/issues/4",
            "created_at": "2026-01-02T03:04:05.000Z", "updated_at": "2026-01-03T03:04:05.123Z",
            "assignees": [{"username": "alice", "id": 3}]
        });
        for (k, val) in v.as_object().unwrap() {
            base[k] = val.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn an_issue_is_a_ticket_by_iid_with_its_scoped_status_label() {
        let Classified::Ticket(t) = issue(json!({})).classify(&scheme()) else {
            panic!("ambiguous")
        };
        assert_eq!(
            (t.id.as_str(), t.status.as_str(), t.priority),
            ("4", "ready", Some(2))
        );
        assert_eq!(t.labels, ["bug"]);
        assert_eq!(t.assignees, ["alice"]);
        assert_eq!(t.body, "Body");
        assert!(!t.closed);
        let Classified::Ticket(t) = issue(json!({"state": "closed"})).classify(&scheme()) else {
            panic!()
        };
        assert!(t.closed, "closed is terminal");
    }

    #[test]
    fn two_status_labels_are_named_and_the_issue_is_not_a_ticket() {
        let i = issue(json!({"labels": ["status::a", {"name": "status::b"}]}));
        let Classified::Ambiguous(labels) = i.classify(&scheme()) else {
            panic!()
        };
        assert_eq!(labels, ["status::a", "status::b"]);
    }

    #[test]
    fn a_move_is_one_body_with_both_label_lists_and_the_close() {
        assert_eq!(
            move_body(Some("status::done"), &["status::qa".into()], true),
            json!({"add_labels": ["status::done"], "remove_labels": ["status::qa"], "state_event": "close"})
        );
        assert_eq!(
            move_body(None, &["status::qa".into()], false),
            json!({"remove_labels": ["status::qa"]})
        );
    }

    #[test]
    fn pagination_follows_x_next_page_then_link() {
        let p = "/projects/g%2Fr/issues?state=opened&labels=x&per_page=100";
        assert_eq!(
            next_page(p, Some("2"), None).unwrap().as_deref(),
            Some("/projects/g%2Fr/issues?state=opened&labels=x&per_page=100&page=2")
        );
        assert_eq!(
            next_page(&format!("{p}&page=2"), Some("3"), None)
                .unwrap()
                .as_deref(),
            Some("/projects/g%2Fr/issues?state=opened&labels=x&per_page=100&page=3")
        );
        assert_eq!(next_page(p, Some(""), None), Ok(None));
        assert_eq!(
            next_page(
                p,
                Some(""),
                Some("<https://h/api/v4/x?cursor=abc>; rel=\"next\"")
            )
            .unwrap()
            .as_deref(),
            Some("https://h/api/v4/x?cursor=abc")
        );
    }

    #[test]
    fn pagination_integrity_an_unreadable_next_page_is_an_error() {
        // Issue #39: not a truncated listing.
        let p = "/projects/g%2Fr/issues?per_page=100";
        assert!(next_page(p, Some("two"), None).is_err());
    }

    #[test]
    fn only_is_blocked_by_links_are_blockers() {
        let s = scheme();
        let b = issue(json!({"link_type": "is_blocked_by", "iid": 2, "state": "closed"}))
            .as_blocker(&s, Some(9))
            .unwrap();
        assert_eq!(
            (b.id.as_str(), b.status.as_deref(), b.closed),
            ("2", Some("ready"), true)
        );
        let other = issue(
            json!({"link_type": "is_blocked_by", "project_id": 1, "references": {"full": "g/o#2"}}),
        )
        .as_blocker(&s, Some(9))
        .unwrap();
        assert_eq!(other.id, "g/o#2");
        assert!(issue(json!({"link_type": "relates_to"}))
            .as_blocker(&s, Some(9))
            .is_none());
    }
}

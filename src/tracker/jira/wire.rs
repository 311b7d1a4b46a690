//! Jira's JSON as sortie reads it (REST v3 and v2 differ only in text fields: ADF
//! documents on v3, wiki strings on v2), and its conversion into [`Ticket`]s and
//! [`Comment`]s.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::block::jira::{adf, wiki};
use crate::tracker::labels::normalize_labels;
use crate::tracker::{same_name, Blocker, Comment, Ticket};

/// The fields a listing or a read asks for: only what a ticket is made of (its issue
/// links carry its blockers, with their statuses, at no extra request).
pub const FIELDS: &[&str] = &[
    "summary",
    "description",
    "status",
    "labels",
    "priority",
    "created",
    "updated",
    "assignee",
    "issuelinks",
];

/// `GET /myself`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Myself {
    /// Cloud's account id.
    pub account_id: Option<String>,
    /// Data Center's user name.
    pub name: Option<String>,
    /// Data Center's user key.
    pub key: Option<String>,
    /// Shown to people; never trusted.
    pub display_name: Option<String>,
}

/// A user as comments and issues carry it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub account_id: Option<String>,
    pub name: Option<String>,
    pub key: Option<String>,
    pub display_name: Option<String>,
}

impl User {
    /// The name sortie compares with its identity and `trusted_authors`: the account
    /// id on Cloud, the user name (else key) on Data Center; never the display name.
    pub fn id(&self, cloud: bool) -> String {
        let id = if cloud {
            self.account_id.clone()
        } else {
            self.name.clone().or_else(|| self.key.clone())
        };
        id.unwrap_or_default()
    }
}

/// A status with its category.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub name: String,
    #[serde(default)]
    pub status_category: Option<StatusCategory>,
}

impl Status {
    /// Whether its category is `done`.
    pub fn is_done(&self) -> bool {
        self.status_category
            .as_ref()
            .is_some_and(|c| c.key.as_deref() == Some("done"))
    }
}

/// `statusCategory`: `new`, `indeterminate` or `done`.
#[derive(Debug, Clone, Deserialize)]
pub struct StatusCategory {
    pub key: Option<String>,
}

/// A priority by name.
#[derive(Debug, Clone, Deserialize)]
pub struct Priority {
    pub name: Option<String>,
}

/// An issue's fields sortie reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Fields {
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub description: Option<Value>,
    pub status: Status,
    #[serde(default)]
    pub labels: Vec<String>,
    #[serde(default)]
    pub priority: Option<Priority>,
    pub created: String,
    #[serde(default)]
    pub updated: Option<String>,
    #[serde(default)]
    pub assignee: Option<User>,
    /// Read apart ([`blockers`]): a link sortie cannot read holds only this ticket.
    /// Absent when the site has issue linking turned off.
    #[serde(default)]
    pub issuelinks: Option<Value>,
}

/// One issue.
#[derive(Debug, Clone, Deserialize)]
pub struct Issue {
    pub key: String,
    pub fields: Fields,
}

/// `POST /rest/api/3/search/jql`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudPage {
    #[serde(default)]
    pub issues: Vec<Value>,
    #[serde(default)]
    pub next_page_token: Option<String>,
    #[serde(default)]
    pub is_last: Option<bool>,
}

/// `GET /rest/api/2/search`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DcPage {
    #[serde(default)]
    pub issues: Vec<Value>,
    #[serde(default)]
    pub start_at: u64,
    #[serde(default)]
    pub total: u64,
}

/// `GET /issue/{key}/comment`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommentPage {
    #[serde(default)]
    pub comments: Vec<RawComment>,
    #[serde(default)]
    pub start_at: u64,
    #[serde(default)]
    pub total: u64,
}

/// One comment as Jira sends it.
#[derive(Debug, Clone, Deserialize)]
pub struct RawComment {
    pub id: String,
    #[serde(default)]
    pub author: Option<User>,
    #[serde(default)]
    pub body: Value,
    pub created: String,
}

/// `GET /issue/{key}?fields=status&expand=transitions`: the status and what the
/// workflow offers from it, in one read.
#[derive(Debug, Deserialize)]
pub struct IssueTransitions {
    pub key: String,
    pub fields: StatusOnly,
    #[serde(default)]
    pub transitions: Vec<Transition>,
}

/// `GET /issue/{key}?fields=issuelinks`: the links alone (a blocker read).
#[derive(Debug, Deserialize)]
pub struct IssueLinks {
    pub key: String,
    pub fields: LinksOnly,
}

/// An issue's fields when only its links were asked.
#[derive(Debug, Deserialize)]
pub struct LinksOnly {
    #[serde(default)]
    pub issuelinks: Option<Value>,
}

/// An issue's fields when only its status was asked.
#[derive(Debug, Deserialize)]
pub struct StatusOnly {
    pub status: Status,
}

/// One transition the workflow offers from the issue's status.
#[derive(Debug, Clone, Deserialize)]
pub struct Transition {
    pub id: String,
    pub name: String,
    pub to: Status,
}

/// `GET /project/{key}/statuses`: statuses per issue type.
#[derive(Debug, Deserialize)]
pub struct IssueTypeStatuses {
    pub name: String,
    #[serde(default)]
    pub statuses: Vec<Status>,
}

/// A Jira time (`2024-01-31T10:00:00.000+0000`, or RFC 3339).
pub fn time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z")
        .or_else(|_| DateTime::parse_from_rfc3339(s))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A text field (description, comment body) as Markdown: an ADF document or a wiki
/// string is converted, anything else is its text.
pub fn markdown(value: &Value) -> String {
    let text = match value {
        Value::Null => String::new(),
        Value::String(s) => wiki::to_markdown(s),
        doc @ Value::Object(_) => adf::to_markdown(doc),
        other => other.to_string(),
    };
    text.trim_end_matches('\n').to_string()
}

/// What the adapter needs to turn issues into tickets.
#[derive(Debug, Clone)]
pub struct TicketContext<'a> {
    pub base: &'a str,
    pub cloud: bool,
    pub priority_order: &'a [String],
    /// Statuses a stage claims from: a `done`-category status among them is not terminal.
    pub claim_statuses: &'a [String],
    /// The config's spelling of every status it names.
    pub pipeline_statuses: &'a [String],
    /// The issue link type whose inward links are blockers (`Blocks`).
    pub link_type: &'a str,
}

impl TicketContext<'_> {
    /// A status name in the config's spelling when the config names it.
    fn spelled(&self, name: &str) -> String {
        self.pipeline_statuses
            .iter()
            .find(|s| same_name(s, name))
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    /// Whether a status is finished for sortie: its category is *done* and no stage
    /// claims from it (a claimed status is work to do, whatever its category).
    fn closed(&self, status: &Status) -> bool {
        status.is_done()
            && !self
                .claim_statuses
                .iter()
                .any(|s| same_name(s, &status.name))
    }
}

/// One entry of `fields.issuelinks`: its type and the issue at the other end.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IssueLink {
    #[serde(rename = "type")]
    kind: LinkType,
    #[serde(default)]
    inward_issue: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LinkType {
    #[serde(default)]
    name: Option<String>,
}

/// The issue at the other end of a link, with the few fields Jira sends for it.
#[derive(Debug, Deserialize)]
struct LinkedIssue {
    key: String,
    #[serde(default)]
    fields: Option<LinkedFields>,
}

#[derive(Debug, Deserialize)]
struct LinkedFields {
    #[serde(default)]
    status: Option<Status>,
}

/// The blockers among an issue's links: every link of type `cx.link_type` (compared
/// ignoring case) whose other end is its `inwardIssue`, i.e. the issue "is blocked by"
/// it, with that issue's status. Links of other types, and links this issue is the
/// blocker of (`outwardIssue`), are not blockers. `Err` says why a link of the
/// blocking type cannot be read: the ticket is then held, never dispatched on a guess.
pub fn blockers(key: &str, links: &Value, cx: &TicketContext<'_>) -> Result<Vec<Blocker>, String> {
    let Value::Array(links) = links else {
        return Err(format!("issue {key}: `issuelinks` is not a list: {links}"));
    };
    let mut out = Vec::new();
    for link in links {
        let link: IssueLink = serde_json::from_value(link.clone())
            .map_err(|e| format!("issue {key}: an issue link sortie cannot read ({e}): {link}"))?;
        let name = link.kind.name.as_deref().unwrap_or("");
        if !same_name(name, cx.link_type) {
            continue;
        }
        let Some(other) = link.inward_issue else {
            continue; // this issue blocks the other one
        };
        let other: LinkedIssue = serde_json::from_value(other.clone()).map_err(|e| {
            format!("issue {key}: a {name:?} link whose blocker sortie cannot read ({e}): {other}")
        })?;
        let status = other.fields.and_then(|f| f.status);
        out.push(Blocker {
            id: other.key,
            closed: status.as_ref().is_some_and(|s| cx.closed(s)),
            status: status.map(|s| cx.spelled(&s.name)),
        });
    }
    Ok(out)
}

/// An issue as a ticket; an unreadable time is an error naming the issue.
pub fn ticket(issue: &Issue, cx: &TicketContext<'_>) -> Result<Ticket, String> {
    let f = &issue.fields;
    let created = time(&f.created)
        .ok_or_else(|| format!("issue {}: unreadable `created` {:?}", issue.key, f.created))?;
    let updated = f.updated.as_deref().and_then(time).unwrap_or(created);
    let priority = f
        .priority
        .as_ref()
        .and_then(|p| p.name.as_deref())
        .and_then(|name| cx.priority_order.iter().position(|p| same_name(p, name)))
        .map(|i| i as i64);
    let blocked_by = match f.issuelinks.as_ref().map(|l| blockers(&issue.key, l, cx)) {
        Some(Ok(blockers)) => Some(blockers),
        // Absent or unreadable: `Tracker::blockers` reads them again, and says why.
        Some(Err(e)) => {
            tracing::warn!("Jira {e}");
            None
        }
        None => None,
    };
    Ok(Ticket {
        id: issue.key.clone(),
        title: f.summary.clone().unwrap_or_default(),
        body: f.description.as_ref().map(markdown).unwrap_or_default(),
        // The config's spelling, so `In design` in the config is `In Design` in Jira.
        status: cx.spelled(&f.status.name),
        labels: normalize_labels(f.labels.iter().cloned()),
        priority,
        created_at: created,
        updated_at: updated,
        url: Some(format!("{}/browse/{}", cx.base, issue.key)),
        closed: cx.closed(&f.status),
        assignees: f
            .assignee
            .iter()
            .map(|u| u.id(cx.cloud))
            .filter(|id| !id.is_empty())
            .collect(),
        blocked_by,
    })
}

/// A comment as sortie sees it: author id, Markdown body.
pub fn comment(raw: &RawComment, cloud: bool) -> Comment {
    Comment {
        id: raw.id.clone(),
        author: raw.author.as_ref().map(|u| u.id(cloud)).unwrap_or_default(),
        created_at: time(&raw.created).unwrap_or(DateTime::UNIX_EPOCH),
        body: markdown(&raw.body),
    }
}

/// A JQL string literal.
pub fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jira_times_with_and_without_a_colon_in_the_offset_parse() {
        let a = time("2024-01-31T10:00:00.000+0000").unwrap();
        let b = time("2024-01-31T11:00:00.000+01:00").unwrap();
        assert_eq!(a, b);
        assert!(time("yesterday").is_none());
    }

    fn cx<'a>(claim: &'a [String], named: &'a [String]) -> TicketContext<'a> {
        TicketContext {
            base: "https://j",
            cloud: true,
            priority_order: &[],
            claim_statuses: claim,
            pipeline_statuses: named,
            link_type: "Blocks",
        }
    }

    fn link(kind: &str, side: &str, key: &str, status: &str, category: &str) -> Value {
        serde_json::json!({"id": "1", "type": {"name": kind, "inward": "is blocked by", "outward": "blocks"},
            side: {"key": key, "fields": {"status": {"name": status, "statusCategory": {"key": category}}}}})
    }

    #[test]
    fn only_inward_links_of_the_blocking_type_are_blockers_with_their_status() {
        let claim = vec!["Ready for QA".to_string()];
        let named = vec!["on hold".to_string()];
        let links = serde_json::json!([
            link("Blocks", "inwardIssue", "A-1", "On Hold", "indeterminate"),
            link("blocks", "inwardIssue", "A-2", "Won't Do", "done"),
            link("Blocks", "inwardIssue", "A-3", "Ready for QA", "done"),
            link("Blocks", "outwardIssue", "A-4", "On Hold", "new"),
            link("Relates", "inwardIssue", "A-5", "On Hold", "new"),
            {"type": {"name": "Blocks"}, "inwardIssue": {"key": "A-6"}},
            {"type": {"name": "Cloners"}, "inwardIssue": {"no": "key"}},
        ]);
        let got = blockers("P-1", &links, &cx(&claim, &named)).unwrap();
        let seen: Vec<(&str, Option<&str>, bool)> = got
            .iter()
            .map(|b| (b.id.as_str(), b.status.as_deref(), b.closed))
            .collect();
        assert_eq!(
            seen,
            [
                ("A-1", Some("on hold"), false),      // the config's spelling
                ("A-2", Some("Won't Do"), true),      // done category
                ("A-3", Some("Ready for QA"), false), // a stage claims from it
                ("A-6", None, false),                 // no status: not done
            ]
        );
    }

    #[test]
    fn a_blocking_link_sortie_cannot_read_is_an_error_naming_the_issue() {
        let bad = [
            serde_json::json!([{"type": {"name": "Blocks"}, "inwardIssue": {"id": "7"}}]),
            serde_json::json!([{"inwardIssue": {"key": "A-1"}}]),
            serde_json::json!({"not": "a list"}),
        ];
        for links in bad {
            let err = blockers("P-1", &links, &cx(&[], &[])).unwrap_err();
            assert!(err.starts_with("issue P-1:"), "{err}");
        }
    }

    #[test]
    fn jql_literals_escape_quotes_and_backslashes() {
        assert_eq!(quote(r#"In "Design" \ x"#), r#""In \"Design\" \\ x""#);
    }
}

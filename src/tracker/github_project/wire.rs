//! What GitHub's GraphQL answers look like to the adapter: the status field with its
//! options, an item, and an issue made into a [`Ticket`].

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::text;
use crate::tracker::labels::normalize_labels;
use crate::tracker::{same_name, Ticket, TrackerError};

/// One option of the status field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StatusOption {
    pub id: String,
    pub name: String,
}

/// The project's status field, as read at the start of a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StatusField {
    pub project_id: String,
    pub project_title: String,
    pub field_id: String,
    pub name: String,
    pub options: Vec<StatusOption>,
}

impl StatusField {
    /// The field in a `SortieProjectField` answer; a missing project or field, or a
    /// field that is not single-select, is an error a person can act on.
    pub fn read(data: &Value, project: &str, field_name: &str) -> Result<Self, TrackerError> {
        let p = &data["repositoryOwner"]["projectV2"];
        if p.is_null() {
            return Err(TrackerError::NotFound(format!(
                "GitHub Project {project} does not exist, or the token cannot see it \
                 (the token needs the `project` scope; see docs/trackers/github-project.md)"
            )));
        }
        let f = &p["field"];
        if f.is_null() {
            return Err(TrackerError::Invalid(format!(
                "GitHub Project {project} has no field named {field_name:?} (tracker.status_field)"
            )));
        }
        let kind = f["__typename"].as_str().unwrap_or("?");
        if kind != "ProjectV2SingleSelectField" {
            return Err(TrackerError::Invalid(format!(
                "GitHub Project {project}: field {field_name:?} is a {}, not a single-select field; \
                 tracker.status_field must name a single-select field such as `Status`",
                match kind {
                    "ProjectV2IterationField" => "iteration field",
                    _ => "text, number or date field",
                }
            )));
        }
        let unreadable = |e: String| {
            TrackerError::Invalid(format!(
                "GitHub Project {project}: the field is unreadable: {e}"
            ))
        };
        let mut options = Vec::new();
        for o in f["options"].as_array().into_iter().flatten() {
            options.push(StatusOption {
                id: text(o, "id").map_err(unreadable)?.to_string(),
                name: text(o, "name").map_err(unreadable)?.to_string(),
            });
        }
        Ok(StatusField {
            project_id: text(p, "id").map_err(unreadable)?.to_string(),
            project_title: p["title"].as_str().unwrap_or_default().to_string(),
            field_id: text(f, "id").map_err(unreadable)?.to_string(),
            name: text(f, "name").map_err(unreadable)?.to_string(),
            options,
        })
    }

    /// The option named `status` (compared with [`same_name`]).
    pub fn option(&self, status: &str) -> Option<&StatusOption> {
        self.options.iter().find(|o| same_name(&o.name, status))
    }

    /// Every option's name, comma-separated, for messages.
    pub fn option_names(&self) -> String {
        self.options
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One item of the project, as the listing needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WireItem {
    pub id: String,
    pub archived: bool,
    /// The status option's name; `None` when the card has no status.
    pub status: Option<String>,
    /// `Issue`, `PullRequest` or `DraftIssue` (`Redacted` when the token cannot see it).
    pub content: String,
}

impl WireItem {
    pub fn read(node: &Value) -> Result<Self, String> {
        Ok(WireItem {
            id: text(node, "id")?.to_string(),
            archived: node["isArchived"].as_bool().unwrap_or(false),
            status: status_of(&node["fieldValueByName"]),
            content: node["content"]["__typename"]
                .as_str()
                .or_else(|| node["type"].as_str().map(|_| "Redacted"))
                .unwrap_or("Redacted")
                .to_string(),
        })
    }
}

/// The option name in a `fieldValueByName` answer, when it is a single-select value.
pub(super) fn status_of(value: &Value) -> Option<String> {
    (value["__typename"].as_str() == Some("ProjectV2ItemFieldSingleSelectValue"))
        .then(|| value["name"].as_str().map(str::to_string))
        .flatten()
}

/// An issue (the `SortieIssue` fragment) as a ticket in `status`.
pub(super) fn ticket(issue: &Value, status: String) -> Result<Ticket, String> {
    let repo = issue["repository"]["nameWithOwner"]
        .as_str()
        .ok_or("no `repository.nameWithOwner`")?;
    let number = issue["number"].as_u64().ok_or("no `number`")?;
    let time = |key: &str| -> Result<DateTime<Utc>, String> {
        let t = text(issue, key)?;
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| format!("`{key}` {t:?}: {e}"))
    };
    let names = |connection: &str, key: &str| -> Vec<String> {
        issue[connection]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n[key].as_str().map(str::to_string))
            .collect()
    };
    Ok(Ticket {
        id: format!("{repo}#{number}"),
        title: text(issue, "title")?.to_string(),
        body: issue["body"].as_str().unwrap_or_default().to_string(),
        status,
        labels: normalize_labels(names("labels", "name")),
        priority: None,
        created_at: time("createdAt")?,
        updated_at: time("updatedAt")?,
        url: issue["url"].as_str().map(str::to_string),
        closed: issue["state"].as_str() == Some("CLOSED"),
        assignees: names("assignees", "login"),
        blocked_by: None,
    })
}

//! The issue fields GitHub and Gitea (whose REST API copies GitHub's) name alike, and
//! the ticket such an issue becomes once its labels are read.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::labels::LabelReading;
use super::Ticket;

/// What a GitHub or Gitea issue says besides its labels, flattened into each adapter's
/// own wire issue.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct IssueHead {
    pub number: u64,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    /// `open` or `closed`.
    pub state: String,
    #[serde(default)]
    pub html_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl IssueHead {
    /// The ticket this issue is, its labels read as `reading`: the number is its id, a
    /// closed issue is closed; `assignees` and `blocked_by` are what the adapter read.
    pub fn ticket(
        &self,
        reading: LabelReading,
        assignees: Vec<String>,
        blocked_by: Option<Vec<super::Blocker>>,
    ) -> Ticket {
        Ticket {
            id: self.number.to_string(),
            title: self.title.clone(),
            body: self.body.clone().unwrap_or_default(),
            status: reading.status,
            labels: reading.other,
            priority: reading.priority,
            created_at: self.created_at,
            updated_at: self.updated_at,
            url: self.html_url.clone(),
            closed: self.state == "closed",
            assignees,
            blocked_by,
        }
    }
}

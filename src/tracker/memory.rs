//! An in-memory tracker: the board as a map, for tests and for programs that embed
//! sortie and feed it tickets from elsewhere.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::Utc;

use super::{same_name, Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// A tracker whose tickets and comments live in memory.
#[derive(Debug, Default)]
pub struct MemoryTracker {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    tickets: BTreeMap<String, Ticket>,
    comments: BTreeMap<String, Vec<Comment>>,
    writes: usize,
}

impl MemoryTracker {
    /// An empty board.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every write is one
        // statement), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add or replace a ticket.
    pub fn insert(&self, mut ticket: Ticket) {
        ticket.labels = super::labels::normalize_labels(ticket.labels);
        self.state().tickets.insert(ticket.id.clone(), ticket);
    }

    /// A new open ticket with the given id, title and status, created now.
    pub fn ticket(id: &str, title: &str, status: &str) -> Ticket {
        let now = Utc::now();
        Ticket {
            id: id.to_string(),
            title: title.to_string(),
            body: String::new(),
            status: status.to_string(),
            labels: Vec::new(),
            priority: None,
            created_at: now,
            updated_at: now,
            url: None,
            closed: false,
            assignees: Vec::new(),
            blocked_by: None,
        }
    }

    /// Move a ticket as a person would, unconditionally.
    pub fn set_status(&self, id: &str, status: &str) {
        if let Some(t) = self.state().tickets.get_mut(id) {
            t.status = status.to_string();
            t.updated_at = Utc::now();
        }
    }

    /// Close or reopen a ticket as a person would.
    pub fn set_closed(&self, id: &str, closed: bool) {
        if let Some(t) = self.state().tickets.get_mut(id) {
            t.closed = closed;
        }
    }

    /// Add a comment as `author`.
    pub fn add_comment(&self, id: &str, author: &str, body: &str) {
        let mut state = self.state();
        let list = state.comments.entry(id.to_string()).or_default();
        let comment = Comment {
            id: format!("{:04}", list.len() + 1),
            author: author.to_string(),
            created_at: Utc::now(),
            body: body.to_string(),
        };
        list.push(comment);
    }

    /// A snapshot of a ticket.
    pub fn snapshot(&self, id: &str) -> Option<Ticket> {
        self.state().tickets.get(id).cloned()
    }

    /// A snapshot of a ticket's comments.
    pub fn comment_snapshot(&self, id: &str) -> Vec<Comment> {
        self.state().comments.get(id).cloned().unwrap_or_default()
    }

    /// How many writes (comments and transitions) were made through the trait.
    pub fn writes(&self) -> usize {
        self.state().writes
    }
}

#[async_trait]
impl Tracker for MemoryTracker {
    fn name(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::workflow_states(false)
    }

    async fn identity(&self) -> Result<String, TrackerError> {
        Ok("sortie".to_string())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let tickets = self
            .state()
            .tickets
            .values()
            .filter(|t| statuses.iter().any(|s| same_name(s, &t.status)))
            .cloned()
            .collect();
        Ok(Listing {
            tickets,
            ..Listing::default()
        })
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        self.snapshot(id)
            .ok_or_else(|| TrackerError::NotFound(format!("ticket {id}")))
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        if !self.state().tickets.contains_key(id) {
            return Err(TrackerError::NotFound(format!("ticket {id}")));
        }
        Ok(self.comment_snapshot(id))
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        if !self.state().tickets.contains_key(id) {
            return Err(TrackerError::NotFound(format!("ticket {id}")));
        }
        self.add_comment(id, "sortie", body);
        let mut state = self.state();
        state.writes += 1;
        Ok(state.comments[id].last().cloned().expect("just pushed"))
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let mut state = self.state();
        let ticket = state
            .tickets
            .get_mut(id)
            .ok_or_else(|| TrackerError::NotFound(format!("ticket {id}")))?;
        if same_name(&ticket.status, to) {
            return Ok(());
        }
        if !same_name(&ticket.status, from) {
            return Err(TrackerError::Conflict {
                id: id.to_string(),
                expected: from.to_string(),
                current: ticket.status.clone(),
            });
        }
        ticket.status = to.to_string();
        ticket.updated_at = Utc::now();
        state.writes += 1;
        Ok(())
    }
}

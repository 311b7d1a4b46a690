//! The memory tracker behind a switch: unreachable while `down` is set (a tracker that
//! is down at start, or goes down mid-run), for the daemon's readiness and reload tests.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use sortie::config::TicketFilter;
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// The memory tracker, unreachable while `down` is set.
pub struct Switchable {
    pub inner: MemoryTracker,
    pub down: AtomicBool,
}

impl Switchable {
    /// An empty board, down from the start when `down`.
    pub fn new(down: bool) -> Self {
        Switchable {
            inner: MemoryTracker::new(),
            down: AtomicBool::new(down),
        }
    }

    fn check(&self) -> Result<(), TrackerError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(TrackerError::Unavailable(
                "connection refused (test)".into(),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Tracker for Switchable {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn identity(&self) -> Result<String, TrackerError> {
        self.check()?;
        self.inner.identity().await
    }
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.check()?;
        self.inner.list(statuses).await
    }
    async fn list_filtered(
        &self,
        statuses: &[String],
        _filter: &TicketFilter,
    ) -> Result<Listing, TrackerError> {
        self.list(statuses).await
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        self.check()?;
        self.inner.get(id).await
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        self.check()?;
        self.inner.comments(id).await
    }
    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        self.check()?;
        self.inner.post_comment(id, body, key).await
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        self.check()?;
        self.inner.transition(id, from, to).await
    }
}

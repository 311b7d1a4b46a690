//! The contract on [`MemoryTracker`].

use std::sync::Arc;

use async_trait::async_trait;
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::Tracker;

use crate::contract::Fixture;

struct Memory {
    board: Arc<MemoryTracker>,
    next: std::sync::atomic::AtomicU32,
}

async fn fixture() -> Memory {
    Memory {
        board: Arc::new(MemoryTracker::new()),
        next: 1.into(),
    }
}

#[async_trait]
impl Fixture for Memory {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.board.clone()
    }
    fn statuses(&self) -> [String; 3] {
        ["ready".into(), "review".into(), "on-hold".into()]
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        let id = self
            .next
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            .to_string();
        self.board.insert(MemoryTracker::ticket(&id, title, status));
        id
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        let id = self.open_ticket(title, status).await;
        let mut ticket = MemoryTracker::ticket(&id, title, status);
        ticket.labels = labels.iter().map(|l| l.to_string()).collect();
        self.board.insert(ticket);
        Some(id)
    }
    async fn corrupt(&self, _id: &str) -> bool {
        false
    }
    async fn move_to(&self, id: &str, status: &str) {
        self.board.set_status(id, status);
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.board.set_closed(id, true);
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        self.board.add_comment(id, "alice", body);
    }
    fn person(&self) -> String {
        "alice".into()
    }
    fn requests(&self) -> Option<usize> {
        Some(self.board.writes())
    }
    fn writes(&self) -> Option<usize> {
        Some(self.board.writes())
    }
}

crate::contract_tests!(fixture);

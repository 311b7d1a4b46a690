//! The contract on the local board ([`LocalBoard`]): closing is moving to `done`.

use std::sync::Arc;

use async_trait::async_trait;
use sortie::tracker::local::{LocalBoard, NewTicket};
use sortie::tracker::Tracker;

use crate::contract::Fixture;

struct Local {
    board: Arc<LocalBoard>,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Local {
    let dir = tempfile::tempdir().unwrap();
    let board = LocalBoard::init(&dir.path().join("board")).expect("board");
    Local {
        board: Arc::new(board),
        _dir: dir,
    }
}

#[async_trait]
impl Fixture for Local {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.board.clone()
    }
    fn statuses(&self) -> [String; 3] {
        ["ready".into(), "review".into(), "on-hold".into()]
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        let new = NewTicket {
            title: title.into(),
            status: status.into(),
            priority: None,
            labels: Vec::new(),
            body: String::new(),
        };
        self.board.add_ticket(new).expect("add").id
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        // `add_ticket` refuses a blank label: a person edits the file instead.
        let id = self.open_ticket(title, status).await;
        let file = self.board.path().join(&id).join("ticket.md");
        let labels: Vec<String> = labels.iter().map(|l| format!("{l:?}")).collect();
        let text = format!(
            "---\ntitle: {title}\nstatus: {status}\nlabels: [{}]\n---\n",
            labels.join(", ")
        );
        std::fs::write(file, text).unwrap();
        Some(id)
    }
    async fn corrupt(&self, id: &str) -> bool {
        let file = self.board.path().join(id).join("ticket.md");
        std::fs::write(file, "---\ntitle: [unclosed\nstatus: ready\n---\nbody\n").unwrap();
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        self.board.set_status(id, status).expect("move");
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.board.set_status(id, "done").expect("close");
        Some("done".into())
    }
    async fn comment(&self, id: &str, body: &str) {
        self.board.add_comment(id, "alice", body).expect("comment");
    }
    fn person(&self) -> String {
        "alice".into()
    }
}

crate::contract_tests!(fixture);

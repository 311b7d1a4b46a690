//! The tracker contract suite (tests/it/contract) on real Redmine, through the e2e
//! tests' project setup: each test gets a fresh project; Jane Doe is the person.
//! Needs the server `scripts/services/redmine.sh` starts; fails (never skips) without it.

use std::sync::Arc;

use async_trait::async_trait;
use sortie::tracker::Tracker;

use crate::contract::Fixture;
use crate::redmine_e2e::Project;

/// The e2e statuses the contract moves between (scripts/services/redmine/setup.rb
/// allows every move among them).
const STATUSES: [&str; 3] = ["Ready for design", "Design approved", "Designing"];

struct Redmine {
    project: Project,
    tracker: Arc<dyn Tracker>,
}

async fn fixture() -> Redmine {
    let project = Project::new().await;
    let tracker = Arc::new(project.tracker());
    Redmine { project, tracker }
}

/// A person picks a status from Redmine's list: the one `name` names, whatever its case.
fn canonical(name: &str) -> &'static str {
    STATUSES
        .into_iter()
        .chain(["Closed"])
        .find(|s| s.eq_ignore_ascii_case(name.trim()))
        .unwrap_or_else(|| panic!("no e2e status {name:?}"))
}

#[async_trait]
impl Fixture for Redmine {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.tracker.clone()
    }
    fn statuses(&self) -> [String; 3] {
        STATUSES.map(str::to_string)
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        self.project.issue(title, canonical(status), "Normal").await
    }
    async fn open_labelled(&self, _: &str, _: &str, _: &[&str]) -> Option<String> {
        None
    }
    async fn corrupt(&self, _id: &str) -> bool {
        false
    }
    async fn move_to(&self, id: &str, status: &str) {
        self.project.jane_moves(id, canonical(status)).await;
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.project.jane_moves(id, "Closed").await;
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        self.project.jane_notes(id, body).await;
    }
    fn person(&self) -> String {
        "Jane Doe".into()
    }
    fn missing_id(&self) -> String {
        "987654321".into()
    }
}

crate::contract_tests!(fixture);

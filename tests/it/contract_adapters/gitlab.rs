//! The contract on the GitLab adapter against the GitLab model.

use std::sync::Arc;

use async_trait::async_trait;
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::labels::LabelScheme;
use sortie::tracker::Tracker;

use crate::contract::{Fault, Fixture};
use crate::forge_model::ForgeModel;
use crate::gitlab_model::{self, PROJECT, TOKEN};

struct Gitlab {
    model: ForgeModel,
    tracker: Arc<GitlabTracker>,
}

fn settings(url: String) -> GitlabSettings {
    GitlabSettings {
        url,
        project: PROJECT.into(),
        bearer: false,
        labels: LabelScheme {
            status_prefix: "status::".into(),
            priority_prefix: "priority::".into(),
        },
        close_on: Vec::new(),
    }
}

async fn fixture() -> Gitlab {
    let model = gitlab_model::start().await;
    for s in ["ready", "review", "on-hold"] {
        model.board().ensure_label(&format!("status::{s}"));
    }
    let t = GitlabTracker::new(
        settings(model.url()),
        TOKEN.into(),
        GitlabOptions::default(),
    );
    Gitlab {
        tracker: Arc::new(t.unwrap()),
        model,
    }
}

#[async_trait]
impl Fixture for Gitlab {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.tracker.clone()
    }
    fn statuses(&self) -> [String; 3] {
        ["ready".into(), "review".into(), "on-hold".into()]
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        self.model
            .add_issue(title, &[&format!("status::{status}")])
            .to_string()
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        let status = format!("status::{status}");
        let labels = crate::contract::labels_after(&status, labels);
        Some(self.model.add_issue(title, &labels).to_string())
    }
    async fn corrupt(&self, id: &str) -> bool {
        self.model.edit(id.parse().unwrap(), |i| i.broken = true);
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        let label = format!("status::{status}");
        // A person picks an existing label, or creates it on the way.
        self.model.board().ensure_label(&label);
        self.model.edit(id.parse().unwrap(), |i| {
            i.labels.retain(|l| !l.starts_with("status::"));
            i.labels.push(label);
        });
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.model.edit(id.parse().unwrap(), |i| i.open = false);
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        self.model.add_comment(id.parse().unwrap(), "alice", body);
    }
    fn person(&self) -> String {
        "alice".into()
    }
    fn requests(&self) -> Option<usize> {
        Some(self.model.requests().len())
    }
    fn writes(&self) -> Option<usize> {
        let log = self.model.requests();
        Some(log.iter().filter(|r| r.method != "GET").count())
    }
    fn inject(&self, fault: Fault) -> bool {
        self.model.clear_faults();
        match fault {
            Fault::Unavailable => self.model.fail("GET", "/issues/", 503, None, 1),
            Fault::RateLimited { secs } => self.model.fail("GET", "/issues/", 429, Some(secs), 1),
        }
        true
    }
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        let t = GitlabTracker::new(
            settings(self.model.url()),
            "wrong".into(),
            GitlabOptions::default(),
        );
        Some(Arc::new(t.unwrap()))
    }
}

crate::contract_tests!(fixture);

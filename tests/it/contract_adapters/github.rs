//! The contract on the GitHub adapter against the GitHub model.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::Tracker;

use crate::contract::{Fault, Fixture};
use crate::github_model::{GithubModel, REPO, TOKEN};

struct Github {
    model: GithubModel,
    tracker: Arc<GithubTracker>,
}

fn settings(api_url: String) -> GithubSettings {
    GithubSettings {
        repo: REPO.into(),
        api_url,
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    }
}

fn options() -> GithubOptions {
    GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    }
}

async fn fixture() -> Github {
    let model = GithubModel::start().await;
    for s in ["ready", "review", "on-hold"] {
        model.add_repo_label(&format!("status:{s}"));
    }
    let tracker = GithubTracker::new(settings(model.api_url()), TOKEN.into(), options()).unwrap();
    Github {
        model,
        tracker: Arc::new(tracker),
    }
}

#[async_trait]
impl Fixture for Github {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.tracker.clone()
    }
    fn statuses(&self) -> [String; 3] {
        ["ready".into(), "review".into(), "on-hold".into()]
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        self.model
            .add_issue(title, &[&format!("status:{status}")])
            .to_string()
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        let status = format!("status:{status}");
        let labels = crate::contract::labels_after(&status, labels);
        Some(self.model.add_issue(title, &labels).to_string())
    }
    async fn corrupt(&self, id: &str) -> bool {
        self.model.edit(id.parse().unwrap(), |i| i.broken = true);
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        let label = format!("status:{status}");
        self.model.edit(id.parse().unwrap(), |i| {
            i.labels.retain(|l| !l.starts_with("status:"));
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
        Some(
            self.model
                .requests()
                .iter()
                .filter(|r| r.method != "GET")
                .count(),
        )
    }
    fn inject(&self, fault: Fault) -> bool {
        self.model.clear_faults();
        // Two answers: the adapter retries a 5xx once.
        match fault {
            Fault::Unavailable => self.model.fail("GET", "/issues/", 503, None, 2),
            Fault::RateLimited { secs } => self.model.fail("GET", "/issues/", 429, Some(secs), 2),
        }
        true
    }
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        let t = GithubTracker::new(settings(self.model.api_url()), "wrong".into(), options());
        Some(Arc::new(t.unwrap()))
    }
}

crate::contract_tests!(fixture);

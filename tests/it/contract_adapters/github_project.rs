//! The contract on the GitHub Project adapter against the project model (every GraphQL
//! document checked against GitHub's schema; comments through the GitHub REST model).
//! The config spells the statuses in lower case, the board's options are capitalised.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sortie::config::Config;
use sortie::tracker::github_project::{GithubProjectOptions, GithubProjectTracker};
use sortie::tracker::Tracker;

use super::next_cursor;
use crate::contract::{BrokenCursor, Fault, Fixture};
use crate::github_project_model::{self as model, ProjectModel, NUMBER, OWNER, REPO, TOKEN};

/// The board's options, as the project spells them.
const BOARD: [&str; 4] = ["Ready for design", "Designing", "On hold", "Done"];

pub struct Project {
    pub model: ProjectModel,
    config: Config,
    tracker: Arc<GithubProjectTracker>,
}

pub fn config(api_url: &str) -> Config {
    let text = format!(
        r#"
tracker: {{kind: github_project, owner: {OWNER}, project: {NUMBER}, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN}}
agent: {{command: ["true"]}}
terminal_states: [done]
pipeline_stages:
  - {{role: architect, claim_status: ready for design, in_progress_status: designing, success_status: on hold, failure_status: on hold}}
"#
    );
    Config::parse_str(&text, None).expect("valid test config")
}

pub fn adapter(config: &Config, token: &str) -> GithubProjectTracker {
    let options = GithubProjectOptions {
        retry_backoff: Duration::ZERO,
        ..GithubProjectOptions::default()
    };
    GithubProjectTracker::from_config(config, token.into(), options).unwrap()
}

pub async fn fixture() -> Project {
    let model = ProjectModel::start(&BOARD).await;
    let config = config(&model.api_url());
    Project {
        tracker: Arc::new(adapter(&config, TOKEN)),
        config,
        model,
    }
}

impl Drop for Project {
    /// Every request must have validated against GitHub's schema.
    fn drop(&mut self) {
        let refused = self.model.refused();
        if !std::thread::panicking() {
            assert!(refused.is_empty(), "the model refused: {refused:#?}");
        }
    }
}

fn on_board(status: &str) -> &'static str {
    BOARD
        .iter()
        .find(|b| b.eq_ignore_ascii_case(status.trim()))
        .unwrap_or_else(|| panic!("the fixture's project has no option {status:?}"))
}

pub fn number(id: &str) -> u64 {
    let (repo, n) = id.rsplit_once('#').expect("an id such as acme/widgets#1");
    assert_eq!(repo, REPO);
    n.parse().expect("an issue number")
}

#[async_trait]
impl Fixture for Project {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.tracker.clone()
    }
    fn statuses(&self) -> [String; 3] {
        [
            "ready for design".into(),
            "designing".into(),
            "on hold".into(),
        ]
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        let n = self.model.add_issue(title, on_board(status));
        format!("{REPO}#{n}")
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        let id = self.open_ticket(title, status).await;
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        self.model.github.edit(number(&id), |i| i.labels = labels);
        Some(id)
    }
    async fn corrupt(&self, id: &str) -> bool {
        self.model.github.edit(number(id), |i| i.broken = true);
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        self.model.move_card(number(id), on_board(status));
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.model.github.edit(number(id), |i| i.open = false);
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        self.model.github.add_comment(number(id), "alice", body);
    }
    fn person(&self) -> String {
        "alice".into()
    }
    fn requests(&self) -> Option<usize> {
        Some(self.model.log().len() + self.model.github.requests().len())
    }
    fn writes(&self) -> Option<usize> {
        let moves = self
            .model
            .log()
            .iter()
            .filter(|op| *op == "SortieProjectMove")
            .count();
        let posts = self
            .model
            .github
            .requests()
            .iter()
            .filter(|r| r.method != "GET")
            .count();
        Some(moves + posts)
    }
    fn inject(&self, fault: Fault) -> bool {
        match fault {
            // Two answers: the adapter retries a 5xx once.
            Fault::Unavailable => self
                .model
                .fail(&[model::Fault::Server, model::Fault::Server]),
            Fault::RateLimited { secs } => self.model.fail(&[model::Fault::Secondary(secs)]),
        }
        true
    }
    fn break_cursors(&self, broken: BrokenCursor) -> bool {
        self.model.set_next_cursor(next_cursor(broken));
        true
    }
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        Some(Arc::new(adapter(&self.config, "ghp_wrong")))
    }
    fn missing_id(&self) -> String {
        format!("{REPO}#999999")
    }
}

crate::contract_tests!(fixture);

//! The contract on the Linear adapter against the Linear model (every document
//! checked against Linear's schema). The config spells the statuses in lower case,
//! the team's workflow states are capitalised, as in `tests/it/linear_adapter.rs`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sortie::config::Config;
use sortie::tracker::linear::{LinearOptions, LinearTracker};
use sortie::tracker::Tracker;

use super::next_cursor;
use crate::contract::{BrokenCursor, Fault, Fixture};
use crate::linear_model::{LinearModel, ALICE_ID, TEAM, TOKEN};

/// The team's states the fixture uses, as Linear spells them (`On hold` is of type
/// backlog, still open), and the one closing means.
const BOARD: [&str; 4] = ["Ready for design", "Designing", "On hold", "Done"];

struct Linear {
    model: LinearModel,
    config: Config,
    tracker: Arc<LinearTracker>,
}

fn config(api_url: &str) -> Config {
    let text = format!(
        r#"
tracker: {{kind: linear, team: {TEAM}, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN}}
agent: {{command: ["true"]}}
terminal_states: [done, canceled]
trusted_authors: [alice@acme.test]
pipeline_stages:
  - {{role: architect, claim_status: ready for design, in_progress_status: designing, success_status: design approved, failure_status: on hold}}
"#
    );
    Config::parse_str(&text, None).expect("valid test config")
}

fn adapter(config: &Config, token: &str) -> LinearTracker {
    let options = LinearOptions {
        retry_backoff: Duration::ZERO,
        ..LinearOptions::default()
    };
    LinearTracker::from_config(config, token.into(), options).unwrap()
}

async fn fixture() -> Linear {
    let model = LinearModel::start().await;
    let config = config(&model.api_url());
    Linear {
        tracker: Arc::new(adapter(&config, TOKEN)),
        config,
        model,
    }
}

impl Drop for Linear {
    /// Every request must have validated against Linear's schema, as in the other
    /// Linear tests (a refusal the adapter recovered from would hide a broken query).
    fn drop(&mut self) {
        let refused = self.model.refused();
        if !std::thread::panicking() {
            assert!(refused.is_empty(), "the model refused: {refused:#?}");
        }
    }
}

/// The team's state a person picks for `status`.
fn on_board(status: &str) -> &'static str {
    BOARD
        .iter()
        .find(|b| b.eq_ignore_ascii_case(status.trim()))
        .unwrap_or_else(|| panic!("the fixture's team has no state {status:?}"))
}

fn number(id: &str) -> u64 {
    let (_, n) = id.rsplit_once('-').expect("an identifier such as ENG-1");
    n.parse().expect("an issue number")
}

#[async_trait]
impl Fixture for Linear {
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
        let n = self.model.add_issue(title, on_board(status), &[]);
        format!("{TEAM}-{n}")
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        let n = self.model.add_issue(title, on_board(status), labels);
        Some(format!("{TEAM}-{n}"))
    }
    async fn corrupt(&self, id: &str) -> bool {
        self.model.edit(number(id), |i| i.broken = true);
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        self.model.move_to(number(id), on_board(status));
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.model.move_to(number(id), "Done");
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        self.model.add_comment(number(id), ALICE_ID, body);
    }
    fn person(&self) -> String {
        // Alice is a trusted author: her comments carry the config's entry.
        "alice@acme.test".into()
    }
    fn requests(&self) -> Option<usize> {
        Some(self.model.requests().len())
    }
    fn writes(&self) -> Option<usize> {
        Some(self.model.requests().iter().filter(|r| r.mutation).count())
    }
    fn inject(&self, fault: Fault) -> bool {
        match fault {
            // Two answers: the adapter retries a 5xx once.
            Fault::Unavailable => self.model.fail(503, 2),
            Fault::RateLimited { secs } => {
                let reset = chrono::Utc::now().timestamp_millis() + secs as i64 * 1000;
                self.model.rate_limit(1, reset);
            }
        }
        true
    }
    fn break_cursors(&self, broken: BrokenCursor) -> bool {
        self.model.set_next_cursor(next_cursor(broken));
        true
    }
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        Some(Arc::new(adapter(&self.config, "lin_api_wrong")))
    }
    fn missing_id(&self) -> String {
        format!("{TEAM}-999999")
    }
}

crate::contract_tests!(fixture);

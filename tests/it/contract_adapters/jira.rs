//! The contract on the Jira adapter against the Jira model, on Cloud (REST v3, ADF,
//! the config spelling statuses in lower case, as Jira compares them) and on Data
//! Center (REST v2, wiki markup, the config spelling them as Jira does).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use sortie::tracker::jira::{JiraSettings, JiraTracker, PAGE_SIZE};
use sortie::tracker::Tracker;

use super::next_cursor;
use crate::contract::{BrokenCursor, Fault, Fixture};
use crate::jira_model::{self, JiraModel, Mode, PROJECT};

/// The board's statuses the fixture uses, as Jira spells them: `Ready for Design` ->
/// `In Design` is a workflow transition, `On Hold` is reached from anywhere.
const BOARD: [&str; 3] = ["Ready for Design", "In Design", "On Hold"];
/// A person's account: its Cloud account id and Data Center user name.
const ALICE_ACCOUNT: &str = "5b10ac8d82e05b22cc7d0a11";
const ALICE_NAME: &str = "alice";

struct Jira {
    model: JiraModel,
    tracker: Arc<JiraTracker>,
    /// The statuses as the config spells them.
    statuses: [String; 3],
}

fn settings(model: &JiraModel, statuses: &[String; 3]) -> JiraSettings {
    let mut pipeline_statuses = statuses.to_vec();
    pipeline_statuses.push("Done".into());
    JiraSettings {
        url: model.url(),
        project: PROJECT.into(),
        api_version: model.mode.version(),
        jql: None,
        transitions: BTreeMap::new(),
        priority_order: ["Highest", "High", "Medium", "Low", "Lowest"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        claim_statuses: statuses[..2].to_vec(),
        pipeline_statuses,
        page_size: PAGE_SIZE,
        link_type: "Blocks".into(),
    }
}

fn adapter(model: &JiraModel, statuses: &[String; 3], token: &str) -> JiraTracker {
    let email = (model.mode == Mode::Cloud).then(|| jira_model::EMAIL.to_string());
    JiraTracker::new(
        settings(model, statuses),
        email,
        token.into(),
        "$JIRA_EMAIL / $JIRA_TOKEN".into(),
    )
    .unwrap()
}

fn token(mode: Mode) -> &'static str {
    match mode {
        Mode::Cloud => jira_model::CLOUD_TOKEN,
        Mode::DataCenter => jira_model::DC_TOKEN,
    }
}

async fn start(mode: Mode, statuses: [String; 3]) -> Jira {
    let model = JiraModel::start(mode).await;
    let tracker = Arc::new(adapter(&model, &statuses, token(mode)));
    Jira {
        model,
        tracker,
        statuses,
    }
}

async fn cloud() -> Jira {
    start(Mode::Cloud, BOARD.map(|s| s.to_lowercase())).await
}

async fn data_center() -> Jira {
    start(Mode::DataCenter, BOARD.map(str::to_string)).await
}

/// The board's status a person picks for `status`: Jira has one spelling of each.
fn on_board(status: &str) -> String {
    BOARD
        .iter()
        .chain(&["Done"])
        .find(|b| b.eq_ignore_ascii_case(status.trim()))
        .unwrap_or_else(|| panic!("the fixture's board has no status {status:?}"))
        .to_string()
}

#[async_trait]
impl Fixture for Jira {
    fn tracker(&self) -> Arc<dyn Tracker> {
        self.tracker.clone()
    }
    fn statuses(&self) -> [String; 3] {
        self.statuses.clone()
    }
    async fn open_ticket(&self, title: &str, status: &str) -> String {
        self.model.add_issue(title, &on_board(status), &[])
    }
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String> {
        // Jira itself refuses a label with a space; the model keeps what it is given,
        // as a record written by another client could carry.
        Some(self.model.add_issue(title, &on_board(status), labels))
    }
    async fn corrupt(&self, id: &str) -> bool {
        self.model.edit(id, |i| i.broken = true);
        true
    }
    async fn move_to(&self, id: &str, status: &str) {
        let status = on_board(status);
        self.model.edit(id, |i| i.status = status);
    }
    async fn close(&self, id: &str) -> Option<String> {
        self.model.edit(id, |i| i.status = "Done".into());
        None
    }
    async fn comment(&self, id: &str, body: &str) {
        match self.model.mode {
            Mode::Cloud => {
                let doc = json!({"type": "doc", "version": 1, "content": [
                    {"type": "paragraph", "content": [{"type": "text", "text": body}]}
                ]});
                self.model.add_comment(id, ALICE_ACCOUNT, "Alice", doc);
            }
            Mode::DataCenter => self.model.add_comment(id, ALICE_NAME, "Alice", json!(body)),
        }
    }
    fn person(&self) -> String {
        match self.model.mode {
            Mode::Cloud => ALICE_ACCOUNT.into(),
            Mode::DataCenter => ALICE_NAME.into(),
        }
    }
    fn requests(&self) -> Option<usize> {
        Some(self.model.log().len())
    }
    fn writes(&self) -> Option<usize> {
        // A Cloud search is a POST that writes nothing.
        let log = self.model.log();
        Some(
            log.iter()
                .filter(|r| r.method != "GET" && !r.path.starts_with("/search"))
                .count(),
        )
    }
    fn inject(&self, fault: Fault) -> bool {
        match fault {
            Fault::Unavailable => self.model.fail("GET", "/issue/", 503, None, 1),
            Fault::RateLimited { secs } => self.model.fail("GET", "/issue/", 429, Some(secs), 1),
        }
        true
    }
    fn break_cursors(&self, broken: BrokenCursor) -> bool {
        // Data Center pages by offset (`startAt`).
        self.model.set_next_cursor(next_cursor(broken));
        self.model.mode == Mode::Cloud
    }
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        Some(Arc::new(adapter(&self.model, &self.statuses, "wrong")))
    }
    fn missing_id(&self) -> String {
        format!("{PROJECT}-999999")
    }
}

mod cloud {
    crate::contract_tests!(super::cloud);
}

mod data_center {
    crate::contract_tests!(super::data_center);
}

//! Whole three-stage pipelines against the GitLab and Gitea models: the real adapters,
//! the real tick, a SQLite ledger in a temp dir and an injected clock. Every scenario
//! runs on both forges (issue #17).
//! `forge_rules.rs` holds the forge-specific ones and the tick cost.

use crate::forge_model::ForgeModel;
use crate::{gitea_model, gitlab_model};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SubsecRound, Utc};
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::{Ledger, SqliteLedger};
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::Tracker;

/// The statuses of the three-stage pipeline below.
const STATUSES: [&str; 9] = [
    "ready-for-design",
    "designing",
    "design-approved",
    "design-blocked",
    "code-review",
    "blocked",
    "done",
    "qa-failed",
    "on-hold",
];

/// Which forge a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    Gitlab,
    Gitea,
}

pub const FORGES: [Forge; 2] = [Forge::Gitlab, Forge::Gitea];

impl Forge {
    /// The status label for `status`, with the forge's default prefix.
    pub fn label(self, status: &str) -> String {
        match self {
            Forge::Gitlab => format!("status::{status}"),
            Forge::Gitea => format!("status/{status}"),
        }
    }

    pub async fn model(self) -> ForgeModel {
        match self {
            Forge::Gitlab => gitlab_model::start().await,
            Forge::Gitea => gitea_model::start().await,
        }
    }

    /// The ledger/tracker name.
    pub fn name(self) -> &'static str {
        match self {
            Forge::Gitlab => "gitlab:acme/tools/widgets",
            Forge::Gitea => "gitea:acme/widgets",
        }
    }

    /// The login sortie's comments carry.
    pub fn bot(self) -> &'static str {
        match self {
            Forge::Gitlab => gitlab_model::USER,
            Forge::Gitea => gitea_model::LOGIN,
        }
    }

    fn tracker_yaml(self, url: &str, extra: &str) -> String {
        match self {
            Forge::Gitlab => format!(
                r#"{{kind: gitlab, url: "{url}", project: acme/tools/widgets, token_env: SORTIE_TEST_UNUSED_TOKEN{extra}}}"#
            ),
            Forge::Gitea => format!(
                r#"{{kind: gitea, url: "{url}", repo: acme/widgets, token_env: SORTIE_TEST_UNUSED_TOKEN{extra}}}"#
            ),
        }
    }

    /// The adapter for `cfg`, on the given clock, with the model's token.
    pub fn tracker(self, cfg: &Config, clock: Option<Arc<StepClock>>) -> Arc<dyn Tracker> {
        let now: sortie::tracker::github::Clock = match clock {
            Some(c) => Arc::new(move || c.now()),
            None => Arc::new(Utc::now),
        };
        match self {
            Forge::Gitlab => {
                let settings = GitlabSettings::from_config(&cfg.tracker).unwrap();
                let options = GitlabOptions {
                    clock: now,
                    ..GitlabOptions::default()
                };
                Arc::new(GitlabTracker::new(settings, gitlab_model::TOKEN.into(), options).unwrap())
            }
            Forge::Gitea => {
                let settings = GiteaSettings::from_config(&cfg.tracker).unwrap();
                let options = GiteaOptions {
                    clock: now,
                    ..GiteaOptions::default()
                };
                Arc::new(GiteaTracker::new(settings, gitea_model::TOKEN.into(), options).unwrap())
            }
        }
    }

    /// Create every status label, as `sortie tracker check --create-missing-labels` does.
    pub fn create_status_labels(self, model: &ForgeModel) {
        let mut b = model.board();
        for s in STATUSES {
            b.ensure_label(&self.label(s));
        }
    }
}

/// A clock the test moves by hand, shared by the pipeline and the adapter.
pub struct StepClock(Mutex<DateTime<Utc>>);

impl StepClock {
    fn advance(&self, secs: i64) {
        *self.0.lock().unwrap() += chrono::Duration::seconds(secs);
    }
}

impl Clock for StepClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn config(dir: &Path, tracker: &str, agent: &[&str]) -> Config {
    let argv: Vec<String> = agent.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        r#"
tracker: {tracker}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 60
concurrency: {{max_in_flight: 8, per_role_max_in_flight: 8}}
terminal_states: [done, cancelled]
agent:
  command: [{argv}]
  timeout_seconds: 60
retry: {{max_attempts: 1, backoff_base_seconds: 1, backoff_max_seconds: 2}}
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    in_progress_status: designing
    success_status: design-approved
    failure_status: design-blocked
  - role: backend
    claim_status: design-approved
    success_status: code-review
    failure_status: blocked
    requires_prior_role: architect
  - role: qa
    claim_status: code-review
    success_status: done
    failure_status: qa-failed
    requires_prior_role: backend
"#,
        roles = repo().join("roles").display(),
        argv = argv.join(", "),
    );
    Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid test config")
}

pub(crate) struct Harness {
    pub(crate) forge: Forge,
    pub(crate) model: ForgeModel,
    dir: tempfile::TempDir,
    pub(crate) clock: Arc<StepClock>,
    agent: Vec<String>,
    extra: String,
}

impl Harness {
    pub(crate) async fn new(forge: Forge, agent: &[&str]) -> Self {
        Self::with(forge, agent, "").await
    }

    /// `extra` is appended inside the tracker mapping (`, close_on: [done]`).
    pub(crate) async fn with(forge: Forge, agent: &[&str], extra: &str) -> Self {
        let model = forge.model().await;
        forge.create_status_labels(&model);
        Harness {
            forge,
            model,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock(Mutex::new(Utc::now().trunc_subsecs(3)))),
            agent: agent.iter().map(|a| a.to_string()).collect(),
            extra: extra.to_string(),
        }
    }

    pub(crate) fn config(&self) -> Config {
        let agent: Vec<&str> = self.agent.iter().map(String::as_str).collect();
        let tracker = self.forge.tracker_yaml(&self.model.url(), &self.extra);
        config(self.dir.path(), &tracker, &agent)
    }

    pub(crate) fn label(&self, status: &str) -> String {
        self.forge.label(status)
    }

    pub(crate) async fn tick(&self) -> Report {
        let cfg = self.config();
        let tracker = self.forge.tracker(&cfg, Some(self.clock.clone()));
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
        let p = Pipeline::with_clock(cfg, tracker, ledger, self.clock.clone(), Faults::none())
            .await
            .unwrap_or_else(|e| panic!("{:?}: pipeline: {e}", self.forge));
        let r = p.tick(TickOptions::default()).await.expect("tick");
        Report {
            json: serde_json::to_value(&r).unwrap(),
            text: r.to_text(),
        }
    }

    pub(crate) fn blocks(&self, number: u64) -> Vec<OutcomeBlock> {
        self.model
            .issue(number)
            .comments
            .iter()
            .filter(|c| c.author == self.forge.bot() && !c.system)
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }
}

pub(crate) struct Report {
    pub(crate) json: serde_json::Value,
    pub(crate) text: String,
}

impl Report {
    pub(crate) fn runs(&self) -> &Vec<serde_json::Value> {
        self.json["runs"].as_array().unwrap()
    }
    pub(crate) fn writebacks(&self) -> Vec<&str> {
        self.runs()
            .iter()
            .map(|r| r["writeback"].as_str().unwrap_or(""))
            .collect()
    }
    pub(crate) fn replays(&self) -> Vec<&str> {
        self.json["replays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect()
    }
    pub(crate) fn warnings(&self) -> Vec<&str> {
        self.json["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect()
    }
}

pub(crate) fn demo_agent() -> String {
    repo().join("scripts/demo-agent").display().to_string()
}

#[tokio::test]
async fn three_stages_run_end_to_end_on_labels_and_comments() {
    for forge in FORGES {
        let agent = demo_agent();
        let h = Harness::new(forge, &[&agent]).await;
        let ready = h.label("ready-for-design");
        let n = h.model.add_issue("Export to CSV", &[&ready, "feature"]);
        h.model.add_comment(n, "alice", "Please keep it small.");

        let mut ticks = 0;
        loop {
            ticks += 1;
            assert!(ticks <= 6, "{forge:?}: not drained");
            let r = h.tick().await;
            if r.runs().is_empty() {
                break;
            }
            assert!(
                r.writebacks().iter().all(|w| *w == "done"),
                "{forge:?}: {}",
                r.text
            );
        }
        assert_eq!(ticks, 4, "{forge:?}: one stage per tick, then an idle tick");
        let issue = h.model.issue(n);
        assert_eq!(
            issue.labels,
            ["feature".to_string(), h.label("done")],
            "{forge:?}"
        );
        assert!(
            issue.open,
            "{forge:?}: no close_on: closing is a person's call"
        );
        let blocks = h.blocks(n);
        let roles: Vec<(&str, bool)> = blocks
            .iter()
            .map(|b| (b.role(), matches!(b, OutcomeBlock::Success(_))))
            .collect();
        assert_eq!(
            roles,
            [("architect", true), ("backend", true), ("qa", true)],
            "{forge:?}"
        );
        let people = issue.comments.iter().filter(|c| !c.system).count();
        assert_eq!(
            people, 4,
            "{forge:?}: the person's comment and one per stage"
        );
    }
}

#[tokio::test]
async fn a_person_relabelling_during_the_run_wins_and_the_write_back_is_dropped() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        let n = h.model.add_issue("t", &[&h.label("ready-for-design")]);
        let hold = h.label("on-hold");
        // Re-read #1 is the in-progress transition's; #2 is the write-back's.
        h.model.on_get(n, 1, move |i| i.labels = vec![hold]);

        let r = h.tick().await;
        assert_eq!(
            r.writebacks(),
            ["dropped: moved by a person to on-hold"],
            "{forge:?}: {}",
            r.text
        );
        assert_eq!(h.model.issue(n).labels, [h.label("on-hold")], "{forge:?}");
        assert!(h.blocks(n).is_empty(), "{forge:?}: nothing written");
    }
}

#[tokio::test]
async fn a_closed_issue_is_terminal_and_gets_no_write_back() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        let n = h.model.add_issue("t", &[&h.label("ready-for-design")]);
        h.model.on_get(n, 1, |i| i.open = false);

        let r = h.tick().await;
        assert!(
            r.writebacks()[0].starts_with("dropped: ticket is terminal"),
            "{forge:?}: {}",
            r.text
        );
        let issue = h.model.issue(n);
        assert!(!issue.open);
        assert_eq!(issue.labels, [h.label("designing")], "{forge:?}");
        assert!(h.blocks(n).is_empty(), "{forge:?}");
        let r = h.tick().await;
        assert!(
            r.runs().is_empty() && r.json["tickets_listed"] == 0,
            "{forge:?}: {}",
            r.text
        );
    }
}

#[tokio::test]
async fn an_issue_with_two_status_labels_is_skipped_naming_both() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        let (a, b) = (h.label("ready-for-design"), h.label("code-review"));
        let n = h.model.add_issue("confused", &[&a, "bug", &b]);
        let fine = h.model.add_issue("fine", &[&h.label("ready-for-design")]);

        let r = h.tick().await;
        let runs: Vec<&str> = r
            .runs()
            .iter()
            .map(|r| r["ticket"].as_str().unwrap())
            .collect();
        assert_eq!(runs, [fine.to_string()], "{forge:?}: {}", r.text);
        let expected = format!(
            "issue #{n} has 2 status labels ({a}, {b}); skipped until a person removes all but one"
        );
        assert_eq!(
            r.warnings(),
            [expected.as_str()],
            "{forge:?}: listed once, not per listing"
        );
        assert_eq!(
            h.model.issue(n).labels,
            [a, "bug".to_string(), b],
            "{forge:?}: untouched"
        );
    }
}

#[tokio::test]
async fn listings_follow_every_page() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        h.model.set_max_per_page(2);
        let ready = h.label("ready-for-design");
        for i in 0..5 {
            h.model.add_issue(&format!("t{i}"), &[&ready]);
        }
        let r = h.tick().await;
        assert_eq!(r.runs().len(), 5, "{forge:?}: {}", r.text);
        let pages: Vec<String> = h
            .model
            .log()
            .into_iter()
            .filter(|l| l.contains("issues?") && l.contains("ready-for-design"))
            .collect();
        assert_eq!(pages.len(), 3, "{forge:?}: {pages:#?}");
        assert!(pages[2].contains("page=3"), "{forge:?}: {pages:#?}");
    }
}

#[tokio::test]
async fn a_429_with_retry_after_defers_the_write_without_a_request_storm() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        let n = h.model.add_issue("a", &[&h.label("ready-for-design")]);
        h.model.add_issue("b", &[&h.label("ready-for-design")]);
        let comments = match forge {
            Forge::Gitlab => "/notes",
            Forge::Gitea => "/comments",
        };
        h.model.fail("POST", comments, 429, Some(60), usize::MAX);

        let r = h.tick().await;
        assert_eq!(r.runs().len(), 2, "{forge:?}: {}", r.text);
        assert!(
            r.writebacks()
                .iter()
                .all(|w| w.starts_with("deferred: rate limited")),
            "{forge:?}: {}",
            r.text
        );
        // Once the forge said 429 nothing more was sent but what the other run had in
        // flight already: at most one request.
        let log = h.model.requests();
        let first = log.iter().position(|r| r.status == 429).expect("a 429");
        assert!(
            log.len() - first - 1 <= 1,
            "{forge:?}: {:#?}",
            h.model.log()
        );
        let ledger = SqliteLedger::open(&h.config().ledger_path()).unwrap();
        assert_eq!(ledger.outbox_pending(forge.name()).unwrap().len(), 2);
        assert_eq!(h.model.issue(n).labels, [h.label("designing")], "{forge:?}");

        h.model.clear_faults();
        h.clock.advance(61);
        let r = h.tick().await;
        assert_eq!(r.replays(), ["done", "done"], "{forge:?}: {}", r.text);
        let architect = h
            .blocks(n)
            .iter()
            .filter(|b| b.role() == "architect")
            .count();
        assert_eq!(architect, 1, "{forge:?}: written once");
    }
}

#[tokio::test]
async fn a_person_relabelling_right_before_the_transition_keeps_the_label() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        let n = h.model.add_issue("t", &[&h.label("ready-for-design")]);
        let hold = h.label("on-hold");
        // Re-read #3 is the write-back transition's own re-read.
        h.model.on_get(n, 2, move |i| i.labels = vec![hold]);

        let r = h.tick().await;
        assert_eq!(
            r.writebacks(),
            ["dropped: moved by a person to on-hold during write-back"],
            "{forge:?}: {}",
            r.text
        );
        assert_eq!(h.model.issue(n).labels, [h.label("on-hold")], "{forge:?}");
    }
}

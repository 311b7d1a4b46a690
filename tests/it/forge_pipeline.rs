//! Whole three-stage pipelines against the GitLab and Gitea models: the real adapters,
//! the real tick, a SQLite ledger in a temp dir and an injected clock. Every scenario
//! runs on both forges (issue #17); the ones every vendor shares run from
//! `pipeline_suite` (`pipeline_suite::gitlab::*`, `pipeline_suite::gitea::*`).
//! `forge_rules.rs` holds the forge-specific ones and the tick cost.

use crate::forge_model::ForgeModel;
pub(crate) use crate::pipeline_suite::{demo_agent, Report};
use crate::pipeline_suite::{Pipeline3, RateLimited, StepClock, Vendor, KEBAB};
use crate::{gitea_model, gitlab_model};

use std::path::PathBuf;
use std::sync::Arc;

use chrono::Utc;
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::Tracker;

/// The statuses of the three-stage pipeline below: its own words, and the one a person
/// parks a ticket in.
fn statuses() -> impl Iterator<Item = &'static str> {
    KEBAB.into_iter().chain(["on-hold"])
}

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
        for s in statuses() {
            b.ensure_label(&self.label(s));
        }
    }
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
            clock: Arc::new(StepClock::new()),
            agent: agent.iter().map(|a| a.to_string()).collect(),
            extra: extra.to_string(),
        }
    }

    pub(crate) fn config(&self) -> Config {
        let tracker = format!(
            "tracker: {}",
            self.forge.tracker_yaml(&self.model.url(), &self.extra)
        );
        Pipeline3 {
            tracker: &tracker,
            statuses: KEBAB,
            terminal: "[done, cancelled]",
            per_role_max_in_flight: "8",
            agent_extra: "",
        }
        .config(self.dir.path(), &self.agent)
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
        Report::of(&r, r.to_text())
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

impl Vendor for Harness {
    type Flavour = Forge;
    type Id = u64;

    async fn start(forge: Forge, agent: &[&str]) -> Self {
        Harness::new(forge, agent).await
    }
    fn open(&self, title: &str, status: &str, labels: &[&str]) -> u64 {
        let status = self.label(status);
        let all: Vec<&str> = std::iter::once(status.as_str())
            .chain(labels.iter().copied())
            .collect();
        self.model.add_issue(title, &all)
    }
    fn person_comments(&self, n: &u64) {
        self.model.add_comment(*n, "alice", "Please keep it small.");
    }
    fn status_of(&self, n: &u64) -> String {
        let prefix = self.label("");
        let labels = self.model.issue(*n).labels;
        labels
            .into_iter()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_default()
    }
    fn spell(&self, status: &str) -> String {
        status.to_string()
    }
    fn assert_in(&self, n: &u64, status: &str, labels: &[&str]) {
        let mut want: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        want.push(self.label(status));
        assert_eq!(self.model.issue(*n).labels, want, "{:?}", self.forge);
    }
    fn moves_before_read(&self, n: &u64, skip: usize, status: &str) {
        let label = self.label(status);
        self.model.on_get(*n, skip, move |i| i.labels = vec![label]);
    }
    fn closes_before_read(&self, n: &u64, skip: usize) {
        self.model.on_get(*n, skip, |i| i.open = false);
    }
    fn assert_closed_in_designing(&self, n: &u64) {
        let issue = self.model.issue(*n);
        assert!(!issue.open);
        assert_eq!(issue.labels, [self.label("designing")], "{:?}", self.forge);
    }
    fn blocks(&self, n: &u64) -> Vec<OutcomeBlock> {
        Harness::blocks(self, *n)
    }
    fn comments(&self, n: &u64) -> usize {
        let issue = self.model.issue(*n);
        issue.comments.iter().filter(|c| !c.system).count()
    }
    async fn tick(&self) -> Report {
        Harness::tick(self).await
    }
    fn check_drained(&self, n: &u64) {
        assert!(
            self.model.issue(*n).open,
            "{:?}: no close_on: closing is a person's call",
            self.forge
        );
    }
}

impl RateLimited for Harness {
    fn clock(&self) -> &StepClock {
        &self.clock
    }
    fn ledger_name(&self) -> &'static str {
        self.forge.name()
    }
    fn ledger_path(&self) -> PathBuf {
        self.config().ledger_path()
    }
    fn fail_comment_posts(&self) {
        let comments = match self.forge {
            Forge::Gitlab => "/notes",
            Forge::Gitea => "/comments",
        };
        self.model.fail("POST", comments, 429, Some(60), usize::MAX);
    }
    fn clear_faults(&self) {
        self.model.clear_faults();
    }
    fn statuses(&self) -> (Vec<u16>, Vec<String>) {
        let statuses = self.model.requests().iter().map(|r| r.status).collect();
        (statuses, self.model.log())
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

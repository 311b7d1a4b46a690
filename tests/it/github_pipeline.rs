//! Whole pipelines against the in-memory GitHub model: the real adapter, the real
//! tick, a SQLite ledger in a temp dir and an injected clock. The scenarios every
//! vendor shares run from `pipeline_suite` (`pipeline_suite::github::*`); this file
//! holds the harness and what a tick costs in requests and rate-limit units
//! (docs/trackers/github.md quotes it).

use crate::github_model;
use crate::pipeline_suite::{Asks, Pipeline3, RateLimited, Report, StepClock, Vendor, Who, KEBAB};
use sortie::block::question::parse_question_blocks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use github_model::{GithubModel, LOGIN, TOKEN};
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::github::{GithubOptions, GithubTracker, ETAG_FILE};

pub(crate) struct Harness {
    model: GithubModel,
    dir: tempfile::TempDir,
    clock: Arc<StepClock>,
    agent: Vec<String>,
    /// `trusted_authors` of the next ticks.
    trusted: std::sync::Mutex<Vec<String>>,
    /// The architect stage has no `failure_status`: a final failure holds the issue.
    hold_failures: bool,
}

impl Harness {
    async fn new(agent: &[&str]) -> Self {
        Harness {
            model: GithubModel::start().await,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock::new()),
            agent: agent.iter().map(|a| a.to_string()).collect(),
            trusted: Default::default(),
            hold_failures: false,
        }
    }

    fn config(&self) -> Config {
        let tracker = format!(
            r#"tracker: {{kind: github, repo: acme/widgets, api_url: "{}", token_env: SORTIE_TEST_UNUSED_TOKEN}}"#,
            self.model.api_url()
        );
        let mut cfg = Pipeline3 {
            tracker: &tracker,
            statuses: KEBAB,
            terminal: "[done, cancelled]",
            per_role_max_in_flight: "4",
            agent_extra: "",
        }
        .config(self.dir.path(), &self.agent);
        cfg.trusted_authors = self.trusted.lock().unwrap().clone();
        if self.hold_failures {
            cfg.stages[0].failure_status = None;
        }
        cfg
    }

    /// A fresh adapter and pipeline, as a new `sortie pipeline tick` process would
    /// build them (the ETag cache comes from the state root's file).
    async fn process(&self) -> (Pipeline, Arc<SqliteLedger>) {
        match self.try_process().await {
            Ok(p) => p,
            Err(err) => panic!("pipeline: {err}"),
        }
    }

    /// Like [`Harness::process`], returning the error (the pipeline reads the
    /// tracker's identity when it starts).
    async fn try_process(&self) -> Result<(Pipeline, Arc<SqliteLedger>), String> {
        let cfg = self.config();
        let clock = self.clock.clone();
        let options = GithubOptions {
            retry_backoff: Duration::ZERO,
            etag_file: Some(cfg.state_root.join(ETAG_FILE)),
            clock: Arc::new(move || clock.now()),
            ..GithubOptions::default()
        };
        let tracker = Arc::new(GithubTracker::from_config(&cfg, TOKEN.into(), options).unwrap());
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
        let p = Pipeline::with_clock(
            cfg,
            tracker,
            ledger.clone(),
            self.clock.clone(),
            Faults::none(),
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok((p, ledger))
    }

    /// One tick in a new process; the report as JSON (its type is not exported).
    async fn tick(&self) -> Report {
        let (p, _) = self.process().await;
        let r = p.tick(TickOptions::default()).await.expect("tick");
        Report::of(&r, r.to_text())
    }

    fn blocks(&self, number: u64) -> Vec<OutcomeBlock> {
        self.model
            .issue(number)
            .comments
            .iter()
            .filter(|c| c.author == LOGIN)
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }
}

impl Vendor for Harness {
    type Flavour = ();
    type Id = u64;

    async fn start(_: (), agent: &[&str]) -> Self {
        Harness::new(agent).await
    }
    fn open(&self, title: &str, status: &str, labels: &[&str]) -> u64 {
        let status = format!("status:{status}");
        let all: Vec<&str> = std::iter::once(status.as_str())
            .chain(labels.iter().copied())
            .collect();
        self.model.add_issue(title, &all)
    }
    fn person_comments(&self, n: &u64) {
        self.model.add_comment(*n, "alice", "Please keep it small.");
    }
    fn status_of(&self, n: &u64) -> String {
        let labels = self.model.issue(*n).labels;
        labels
            .into_iter()
            .find(|l| l.starts_with("status:"))
            .unwrap_or_default()
    }
    fn spell(&self, status: &str) -> String {
        status.to_string()
    }
    fn assert_in(&self, n: &u64, status: &str, labels: &[&str]) {
        let mut want: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        want.push(format!("status:{status}"));
        assert_eq!(self.model.issue(*n).labels, want);
    }
    fn moves_before_read(&self, n: &u64, skip: usize, status: &str) {
        let label = format!("status:{status}");
        self.model.on_get(*n, skip, move |i| i.labels = vec![label]);
    }
    fn closes_before_read(&self, n: &u64, skip: usize) {
        self.model.on_get(*n, skip, |i| i.open = false);
    }
    fn assert_closed_in_designing(&self, n: &u64) {
        let issue = self.model.issue(*n);
        assert!(!issue.open);
        assert_eq!(issue.labels, ["status:designing"]);
    }
    fn blocks(&self, n: &u64) -> Vec<OutcomeBlock> {
        Harness::blocks(self, *n)
    }
    fn comments(&self, n: &u64) -> usize {
        self.model.issue(*n).comments.len()
    }
    async fn tick(&self) -> Report {
        Harness::tick(self).await
    }
    fn check_drained(&self, n: &u64) {
        assert!(
            self.model.issue(*n).open,
            "sortie moves labels; closing is a person's call"
        );
    }
}

impl RateLimited for Harness {
    fn clock(&self) -> &StepClock {
        &self.clock
    }
    fn ledger_name(&self) -> &'static str {
        "github:acme/widgets"
    }
    fn ledger_path(&self) -> PathBuf {
        self.config().ledger_path()
    }
    fn fail_comment_posts(&self) {
        self.model
            .fail("POST", "/comments", 429, Some(60), usize::MAX);
    }
    fn clear_faults(&self) {
        self.model.clear_faults();
    }
    fn statuses(&self) -> (Vec<u16>, Vec<String>) {
        let statuses = self.model.requests().iter().map(|r| r.status).collect();
        (statuses, self.model.log())
    }
    /// 30 s later GitHub's wait is not over: the next tick stops before sending
    /// anything (the wait was persisted with the ETag cache).
    async fn while_waiting(&self) -> i64 {
        self.clock.advance(30);
        let sent = self.model.requests().len();
        let err = self.try_process().await.err().expect("rate limited");
        assert!(err.contains("rate limited (retry after 30s)"), "{err}");
        assert_eq!(self.model.requests().len(), sent, "{:#?}", self.model.log());
        30
    }
}

/// Requests and rate-limit units one tick spends, with its request log.
async fn measure(h: &Harness) -> (Report, Vec<String>, u64) {
    h.model.clear_log();
    let before = h.model.units_used();
    let r = h.tick().await;
    (r, h.model.log(), h.model.units_used() - before)
}

#[tokio::test]
async fn an_idle_tick_is_only_conditional_requests_answered_304() {
    let h = Harness::new(&["true"]).await;
    h.model.add_issue("parked", &["status:triage"]);
    h.model.add_issue("shipped", &["status:done"]);
    let (r, log, units) = measure(&h).await;
    assert!(r.runs().is_empty());
    assert_eq!(log.len(), 5, "{log:#?}");
    assert_eq!(units, 5, "a cold cache pays once");

    // The next cron tick is a new process: the persisted ETags make it free.
    let (r, log, units) = measure(&h).await;
    assert!(r.runs().is_empty());
    assert_eq!(
        log,
        [
            "GET /user -> 304",
            "GET /repos/acme/widgets/issues?labels=status%3Aready-for-design&state=open&per_page=100 -> 304",
            "GET /repos/acme/widgets/issues?labels=status%3Adesigning&state=open&per_page=100 -> 304",
            "GET /repos/acme/widgets/issues?labels=status%3Adesign-approved&state=open&per_page=100 -> 304",
            "GET /repos/acme/widgets/issues?labels=status%3Acode-review&state=open&per_page=100 -> 304",
        ]
    );
    assert_eq!(units, 0);
}

#[tokio::test]
async fn a_busy_tick_costs_eight_to_eleven_requests_per_run() {
    let h = Harness::new(&["true"]).await;
    h.model.add_issue("parked", &["status:triage"]);
    measure(&h).await; // warm the cache, as every cron tick after the first has it

    for n in 0..3 {
        h.model
            .add_issue(&format!("new {n}"), &["status:ready-for-design"]);
    }
    let (r, log, units) = measure(&h).await;
    assert_eq!(r.runs().len(), 3, "{}", r.text);
    // 1 user (304) + 4 listings (1 changed) + per run: comments, the re-read after
    // the claim (comments, 304: free), in-progress transition (re-read, add, remove),
    // write-back (re-read, comments (304), comment, transition re-read, add, remove).
    // No blocker read: the listing's `issue_dependencies_summary` says none is open.
    assert_eq!(log.len(), 5 + 3 * 11, "{log:#?}");
    assert_eq!(units, 1 + 3 * 9, "{log:#?}");
    println!(
        "busy tick (3 architect runs): {} requests, {units} rate-limit units",
        log.len()
    );

    // The next tick: backend (no in-progress status) takes the three tickets: per run
    // comments, comments after the claim (304, free), write-back re-read, comments
    // (304), comment, transition re-read, add, remove.
    let (r, log, units) = measure(&h).await;
    assert_eq!(r.runs().len(), 3, "{}", r.text);
    assert_eq!(log.len(), 5 + 3 * 8, "{log:#?}");
    assert_eq!(units, 2 + 3 * 6, "{log:#?}");
    println!(
        "busy tick (3 backend runs): {} requests, {units} rate-limit units",
        log.len()
    );
}

/// Issue #52, item 8: a person moving a held issue's status label away and back between
/// two ticks releases the hold (its `updated_at` moved past the one sortie read after
/// its own writes), and so does `/retry` from a trusted author; sortie's own writes, a
/// person's comment and a stranger's `/retry` do not.
#[tokio::test]
async fn issue_52_a_held_issue_relabelled_away_and_back_between_ticks_runs_again() {
    let mut h = Harness::new(&["false"]).await;
    h.hold_failures = true;
    *h.trusted.lock().unwrap() = vec!["alice".to_string()];
    let n = h.model.add_issue("Export", &["status:ready-for-design"]);
    let attempts = |r: &Report| -> Vec<u64> {
        r.runs()
            .iter()
            .map(|r| r["attempt"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(attempts(&h.tick().await), [1]);
    assert_eq!(h.model.issue(n).labels, ["status:ready-for-design"]);
    let r = h.tick().await;
    assert_eq!(attempts(&r), [0u64; 0], "sortie's own writes: {}", r.text);

    h.model.add_comment(n, "alice", "why did this fail?");
    h.model.add_comment(n, "mallory", "/retry");
    let r = h.tick().await;
    assert_eq!(
        attempts(&r),
        [0u64; 0],
        "a comment is no status change, mallory is not trusted: {}",
        r.text
    );

    // A minute later alice moves it away and back, between two ticks.
    h.model.advance(60);
    h.model
        .edit(n, |i| i.labels = vec!["status:triage".to_string()]);
    h.model.edit(n, |i| {
        i.labels = vec!["status:ready-for-design".to_string()]
    });
    let r = h.tick().await;
    assert_eq!(attempts(&r), [2], "{}", r.text);
    assert_eq!(attempts(&h.tick().await), [0u64; 0], "held again");

    h.model.add_comment(n, "alice", "/retry");
    assert_eq!(attempts(&h.tick().await), [3]);
}

impl Asks for Harness {
    fn trust_person(&self) {
        *self.trusted.lock().unwrap() = vec!["alice".to_string()];
    }
    fn comment_as(&self, n: &u64, who: Who, text: &str) {
        let author = match who {
            Who::Sortie => LOGIN,
            Who::Person => "alice",
            Who::Stranger => "mallory",
        };
        self.model.add_comment(*n, author, text);
    }
    fn questions(&self, n: &u64) -> usize {
        self.model
            .issue(*n)
            .comments
            .iter()
            .filter(|c| c.author == LOGIN)
            .map(|c| parse_question_blocks(&c.body).len())
            .sum()
    }
}

//! Whole pipelines against the in-memory GitHub model: the real adapter, the real
//! tick, a SQLite ledger in a temp dir and an injected clock. Also measures what a
//! tick costs in requests and rate-limit units (docs/trackers/github.md quotes it).

use crate::github_model;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use github_model::{GithubModel, LOGIN, TOKEN};
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::{Ledger, SqliteLedger};
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::github::{GithubOptions, GithubTracker, ETAG_FILE};

/// A clock the test moves by hand, shared by the pipeline and the adapter.
struct StepClock(Mutex<DateTime<Utc>>);

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

/// The three-stage pipeline (architect -> backend -> qa) on the model's repository.
fn config(dir: &Path, api_url: &str, agent: &[&str]) -> Config {
    let argv: Vec<String> = agent.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        r#"
tracker: {{kind: github, repo: acme/widgets, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 60
concurrency: {{max_in_flight: 8, per_role_max_in_flight: 4}}
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

struct Harness {
    model: GithubModel,
    dir: tempfile::TempDir,
    clock: Arc<StepClock>,
    agent: Vec<String>,
}

impl Harness {
    async fn new(agent: &[&str]) -> Self {
        Harness {
            model: GithubModel::start().await,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock(Mutex::new(Utc::now().trunc_subsecs(3)))),
            agent: agent.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn config(&self) -> Config {
        let agent: Vec<&str> = self.agent.iter().map(String::as_str).collect();
        config(self.dir.path(), &self.model.api_url(), &agent)
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
        Report {
            json: serde_json::to_value(&r).unwrap(),
            text: r.to_text(),
        }
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

/// What a tick reported.
struct Report {
    json: serde_json::Value,
    text: String,
}

impl Report {
    fn runs(&self) -> &Vec<serde_json::Value> {
        self.json["runs"].as_array().unwrap()
    }
    /// The write-back result of every run.
    fn writebacks(&self) -> Vec<&str> {
        self.runs()
            .iter()
            .map(|r| r["writeback"].as_str().unwrap_or(""))
            .collect()
    }
    fn replays(&self) -> Vec<&str> {
        self.json["replays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect()
    }
}

fn demo_agent() -> String {
    repo().join("scripts/demo-agent").display().to_string()
}

#[tokio::test]
async fn three_stages_run_end_to_end_on_github_labels_and_comments() {
    let agent = demo_agent();
    let h = Harness::new(&[&agent]).await;
    let n = h
        .model
        .add_issue("Export to CSV", &["status:ready-for-design", "feature"]);
    h.model.add_comment(n, "alice", "Please keep it small.");

    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks <= 6, "not drained");
        let r = h.tick().await;
        if r.runs().is_empty() {
            break;
        }
        assert!(r.writebacks().iter().all(|w| *w == "done"), "{}", r.text);
    }
    assert_eq!(ticks, 4, "one stage per tick, then an idle tick");

    let issue = h.model.issue(n);
    assert_eq!(issue.labels, ["feature", "status:done"]);
    assert!(
        issue.open,
        "sortie moves labels; closing is a person's call"
    );
    let blocks = h.blocks(n);
    let roles: Vec<(&str, bool)> = blocks
        .iter()
        .map(|b| (b.role(), matches!(b, OutcomeBlock::Success(_))))
        .collect();
    assert_eq!(
        roles,
        [("architect", true), ("backend", true), ("qa", true)]
    );
    assert_eq!(
        issue.comments.len(),
        4,
        "the person's comment and one per stage"
    );
}

#[tokio::test]
async fn a_person_relabelling_during_the_run_wins_and_the_write_back_is_dropped() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", &["status:ready-for-design"]);
    // Re-read #1 is the in-progress transition's; #2 is the write-back's.
    h.model
        .on_get(n, 1, |i| i.labels = vec!["status:on-hold".into()]);

    let r = h.tick().await;
    assert_eq!(
        r.writebacks(),
        ["dropped: moved by a person to on-hold"],
        "{}",
        r.text
    );
    assert_eq!(h.model.issue(n).labels, ["status:on-hold"]);
    assert!(h.blocks(n).is_empty(), "nothing written");
}

#[tokio::test]
async fn a_person_relabelling_right_before_the_transition_keeps_the_label() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", &["status:ready-for-design"]);
    // Re-read #3 is the write-back transition's own re-read.
    h.model
        .on_get(n, 2, |i| i.labels = vec!["status:on-hold".into()]);

    let r = h.tick().await;
    assert_eq!(
        r.writebacks(),
        ["dropped: moved by a person to on-hold during write-back"],
        "{}",
        r.text
    );
    assert_eq!(h.model.issue(n).labels, ["status:on-hold"]);
}

#[tokio::test]
async fn a_closed_issue_is_terminal_and_gets_no_write_back() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", &["status:ready-for-design"]);
    h.model.on_get(n, 1, |i| i.open = false);

    let r = h.tick().await;
    assert!(
        r.writebacks()[0].starts_with("dropped: ticket is terminal"),
        "{}",
        r.text
    );
    let issue = h.model.issue(n);
    assert!(!issue.open);
    assert_eq!(issue.labels, ["status:designing"]);
    assert!(h.blocks(n).is_empty());

    // Closed issues are not on the board any more: the next tick sees nothing to do.
    let r = h.tick().await;
    assert!(
        r.runs().is_empty() && r.json["tickets_listed"] == 0,
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_secondary_rate_limit_defers_the_write_without_a_request_storm() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("a", &["status:ready-for-design"]);
    h.model.add_issue("b", &["status:ready-for-design"]);
    h.model.fail("POST", "/comments", 429, Some(60), usize::MAX);

    let r = h.tick().await;
    assert_eq!(r.runs().len(), 2, "{}", r.text);
    assert!(
        r.writebacks()
            .iter()
            .all(|w| w.starts_with("deferred: rate limited")),
        "{}",
        r.text
    );
    // Once GitHub said 429 nothing more was sent, except what the other run already
    // had in flight before the answer arrived: at most one request.
    let log = h.model.requests();
    let first = log.iter().position(|r| r.status == 429).expect("a 429");
    assert!(log.len() - first - 1 <= 1, "{:#?}", h.model.log());
    let ledger = SqliteLedger::open(&h.config().ledger_path()).unwrap();
    assert_eq!(
        ledger.outbox_pending("github:acme/widgets").unwrap().len(),
        2
    );
    assert_eq!(
        h.model.issue(n).labels,
        ["status:designing"],
        "the write waits"
    );

    // 30 s later GitHub's wait is not over: the next tick stops before sending
    // anything (the wait was persisted with the ETag cache).
    h.clock.advance(30);
    let sent = h.model.requests().len();
    let err = h.try_process().await.err().expect("rate limited");
    assert!(err.contains("rate limited (retry after 30s)"), "{err}");
    assert_eq!(h.model.requests().len(), sent, "{:#?}", h.model.log());

    // After the wait the stored outcomes are written, once each.
    h.model.clear_faults();
    h.clock.advance(31);
    let r = h.tick().await;
    assert_eq!(r.replays(), ["done", "done"], "{}", r.text);
    assert_eq!(
        h.blocks(n)
            .iter()
            .filter(|b| b.role() == "architect")
            .count(),
        1
    );
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

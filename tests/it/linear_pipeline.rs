//! Whole pipelines against the Linear model: the real adapter, the real tick, a
//! SQLite ledger in a temp dir and an injected clock. Every request the adapter
//! sends is validated against Linear's schema by the model; each test ends by
//! asserting none was refused. Also measures what a tick costs in requests and
//! complexity (docs/trackers/linear.md quotes it).

use crate::linear_model;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use linear_model::{LinearModel, ALICE_ID, TOKEN, VIEWER_ID};
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::linear::{LinearOptions, LinearTracker, WAIT_FILE};

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

/// The three-stage pipeline (architect -> backend -> qa) on the model's team; status
/// names are spelled in lower case, the team's states are capitalised.
fn config(dir: &Path, api_url: &str, agent: &[&str]) -> Config {
    let argv: Vec<String> = agent.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        r#"
tracker: {{kind: linear, team: ENG, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 60
concurrency: {{max_in_flight: 8, per_role_max_in_flight: 4}}
terminal_states: [done, canceled]
agent:
  command: [{argv}]
  timeout_seconds: 60
retry: {{max_attempts: 1, backoff_base_seconds: 1, backoff_max_seconds: 2}}
pipeline_stages:
  - role: architect
    claim_status: ready for design
    in_progress_status: designing
    success_status: design approved
    failure_status: design blocked
  - role: backend
    claim_status: design approved
    success_status: code review
    failure_status: blocked
    requires_prior_role: architect
  - role: qa
    claim_status: code review
    success_status: done
    failure_status: qa failed
    requires_prior_role: backend
"#,
        roles = repo().join("roles").display(),
        argv = argv.join(", "),
    );
    Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid test config")
}

struct Harness {
    model: LinearModel,
    dir: tempfile::TempDir,
    clock: Arc<StepClock>,
    agent: Vec<String>,
}

impl Harness {
    async fn new(agent: &[&str]) -> Self {
        Harness {
            model: LinearModel::start().await,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock(Mutex::new(Utc::now().trunc_subsecs(3)))),
            agent: agent.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn config(&self) -> Config {
        let agent: Vec<&str> = self.agent.iter().map(String::as_str).collect();
        config(self.dir.path(), &self.model.api_url(), &agent)
    }

    fn tracker(&self) -> Arc<LinearTracker> {
        let clock = self.clock.clone();
        let cfg = self.config();
        let options = LinearOptions {
            retry_backoff: Duration::ZERO,
            clock: Arc::new(move || clock.now()),
            wait_file: Some(cfg.state_root.join(WAIT_FILE)),
            ..LinearOptions::default()
        };
        Arc::new(LinearTracker::from_config(&cfg, TOKEN.into(), options).unwrap())
    }

    /// A fresh adapter and pipeline, as a new `sortie pipeline tick` process builds them.
    async fn try_process(&self, tracker: Arc<LinearTracker>) -> Result<Pipeline, String> {
        let cfg = self.config();
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
        Pipeline::builder(cfg, tracker, ledger)
            .clock(self.clock.clone())
            .faults(Faults::none())
            .build()
            .await
            .map_err(|e| e.to_string())
    }

    /// One tick in a new process; the report as JSON.
    async fn tick(&self) -> Report {
        self.tick_with(self.tracker()).await
    }

    async fn tick_with(&self, tracker: Arc<LinearTracker>) -> Report {
        let p = match self.try_process(tracker).await {
            Ok(p) => p,
            Err(err) => panic!("pipeline: {err}\n{:#?}", self.model.log()),
        };
        let r = p.tick(TickOptions::default()).await.expect("tick");
        Report {
            json: serde_json::to_value(&r).unwrap(),
            text: r.to_text(),
        }
    }

    fn blocks(&self, n: u64) -> Vec<OutcomeBlock> {
        self.model
            .issue(n)
            .comments
            .iter()
            .filter(|c| c.user_id == VIEWER_ID)
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }

    fn assert_nothing_refused(&self) {
        let refused = self.model.refused();
        assert!(
            refused.is_empty(),
            "requests that do not validate: {refused:#?}"
        );
    }
}

struct Report {
    json: serde_json::Value,
    text: String,
}

impl Report {
    fn runs(&self) -> &Vec<serde_json::Value> {
        self.json["runs"].as_array().unwrap()
    }
    fn writebacks(&self) -> Vec<&str> {
        self.runs()
            .iter()
            .map(|r| r["writeback"].as_str().unwrap_or(""))
            .collect()
    }
}

fn demo_agent() -> String {
    repo().join("scripts/demo-agent").display().to_string()
}

#[tokio::test]
async fn three_stages_drain_a_linear_team_end_to_end() {
    let agent = demo_agent();
    let h = Harness::new(&[&agent]).await;
    let n = h
        .model
        .add_issue("Export to CSV", "Ready for design", &["feature"]);
    h.model.add_comment(n, ALICE_ID, "Please keep it small.");
    let parked = h.model.add_issue("Parked", "Backlog", &[]);

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
    assert_eq!(h.model.state_of(n), "Done");
    assert_eq!(h.model.state_of(parked), "Backlog", "not on the pipeline");
    let blocks = h.blocks(n);
    let roles: Vec<(&str, bool)> = blocks
        .iter()
        .map(|b| (b.role(), matches!(b, OutcomeBlock::Success(_))))
        .collect();
    assert_eq!(
        roles,
        [("architect", true), ("backend", true), ("qa", true)]
    );
    let issue = h.model.issue(n);
    assert_eq!(
        issue.comments.len(),
        4,
        "the person's comment and one per stage"
    );
    // Each of sortie's comments has the id derived from its block's key.
    for c in issue.comments.iter().filter(|c| c.user_id == VIEWER_ID) {
        let block = parse_blocks(&c.body)
            .into_iter()
            .next()
            .unwrap()
            .unwrap()
            .block;
        assert_eq!(
            c.id,
            sortie::tracker::linear::comment_id(block.idempotency_key()).to_string()
        );
    }
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_person_moving_the_issue_during_the_run_wins() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    let on_hold = h.model.state_id("On hold");
    // Read #0 is the in-progress transition's re-read; #1 is the write-back's.
    h.model.on_get(n, 1, move |i| i.state_id = on_hold);

    let r = h.tick().await;
    assert_eq!(
        r.writebacks(),
        ["dropped: moved by a person to On hold"],
        "{}",
        r.text
    );
    assert_eq!(h.model.state_of(n), "On hold");
    assert!(h.blocks(n).is_empty(), "nothing written");
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_person_moving_the_issue_right_before_the_transition_keeps_it_there() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    let on_hold = h.model.state_id("On hold");
    // Read #2 is the write-back transition's own re-read, after the comment.
    h.model.on_get(n, 2, move |i| i.state_id = on_hold);

    let r = h.tick().await;
    assert_eq!(
        r.writebacks(),
        ["dropped: moved by a person to On hold during write-back"],
        "{}",
        r.text
    );
    assert_eq!(h.model.state_of(n), "On hold", "not clobbered");
    h.assert_nothing_refused();
}

#[tokio::test]
async fn an_issue_completed_during_the_run_is_terminal_and_gets_no_write_back() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    let done = h.model.state_id("Done");
    h.model.on_get(n, 1, move |i| i.state_id = done);

    let r = h.tick().await;
    assert!(
        r.writebacks()[0].starts_with("dropped: ticket is terminal"),
        "{}",
        r.text
    );
    assert_eq!(h.model.state_of(n), "Done");
    assert!(h.blocks(n).is_empty());
    // A completed issue is not on the board any more.
    let r = h.tick().await;
    assert!(
        r.runs().is_empty() && r.json["tickets_listed"] == 0,
        "{}",
        r.text
    );
    h.assert_nothing_refused();
}

#[tokio::test]
async fn an_unreadable_issue_is_skipped_with_a_reason_and_the_rest_of_the_board_runs() {
    let h = Harness::new(&["true"]).await;
    let broken = h.model.add_issue("broken", "Ready for design", &[]);
    h.model.edit(broken, |i| i.broken = true);
    let fine = h.model.add_issue("fine", "Ready for design", &[]);
    let r = h.tick().await;
    assert_eq!(r.writebacks(), ["done"], "{}", r.text);
    assert_eq!(h.model.state_of(fine), "Design approved");
    assert_eq!(h.model.state_of(broken), "Ready for design");
    assert!(
        r.text
            .contains(&format!("issue ENG-{broken} is unreadable, skipped")),
        "{}",
        r.text
    );
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_canceled_state_is_terminal_even_when_the_config_does_not_name_it() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    let canceled = h.model.state_id("Canceled");
    h.model.edit(n, |i| i.state_id = canceled);
    let tracker = h.tracker();
    use sortie::tracker::Tracker;
    let ticket = tracker.get(&format!("ENG-{n}")).await.unwrap();
    assert!(ticket.closed, "{ticket:?}");
    assert_eq!(ticket.status, "canceled", "the config's spelling");
}

#[tokio::test]
async fn a_lost_answer_to_a_comment_post_is_retried_and_the_duplicate_refused() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    // The comment is created, but its answer is lost: the adapter retries, Linear
    // refuses the same id as a duplicate, and the adapter finds its comment.
    h.model.lose_answers("SortieCommentCreate", 1);
    let r = h.tick().await;
    assert_eq!(r.writebacks(), ["done"], "{}", r.text);
    assert_eq!(h.model.issue(n).comments.len(), 1, "{:#?}", h.model.log());
    assert_eq!(h.model.state_of(n), "Design approved");
    let log = h.model.log();
    let posts: Vec<&String> = log
        .iter()
        .filter(|l| l.starts_with("SortieCommentCreate"))
        .collect();
    assert_eq!(
        posts,
        ["SortieCommentCreate -> 502", "SortieCommentCreate -> 200"]
    );
    assert!(
        log.contains(&"SortieComment -> 200".to_string()),
        "{log:#?}"
    );
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_replayed_comment_post_after_a_crash_leaves_one_comment() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design", &[]);
    // The first process posts the comment and never hears back (both tries lost): to
    // it the write failed, as if it had crashed right after posting. The outcome stays
    // in the outbox.
    h.model.lose_answers("SortieCommentCreate", 2);
    let r = h.tick().await;
    assert!(r.writebacks()[0].starts_with("deferred"), "{}", r.text);
    assert_eq!(h.model.issue(n).comments.len(), 1, "posted once already");
    assert_eq!(h.model.state_of(n), "Designing");

    // The next process replays the stored outcome. Its read-before-write races the
    // earlier post and misses it, so it posts again: Linear refuses the id as a
    // duplicate and the replay counts it as done.
    h.model.stale_comment_reads(n, 1);
    h.clock.advance(10);
    h.model.clear_log();
    let r = h.tick().await;
    let log = h.model.log();
    let replay: Vec<&str> = log[..5].iter().map(String::as_str).collect();
    assert_eq!(
        replay,
        [
            "SortieViewer -> 200",
            "SortieIssue -> 200",
            "SortieComments -> 200",
            "SortieCommentCreate -> 200",
            "SortieComment -> 200",
        ],
        "re-read, stale comment read, the post refused (errors with HTTP 200), the lookup"
    );
    assert_eq!(r.json["replays"][0]["result"], "done", "{}", r.text);
    let blocks = h.blocks(n);
    let roles: Vec<&str> = blocks.iter().map(|b| b.role()).collect();
    // The same tick then lists the board and runs the next stage on the ticket.
    assert_eq!(
        roles,
        ["architect", "backend"],
        "one architect comment: {:#?}",
        h.model.log()
    );
    assert_eq!(h.model.issue(n).comments.len(), 2);
    assert_eq!(h.model.state_of(n), "Code review");
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_rate_limited_tick_finishes_with_what_it_read_without_a_request_storm() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("a", "Ready for design", &[]);
    h.model.add_issue("b", "Ready for design", &[]);
    let tracker = h.tracker();
    let p = h.try_process(tracker.clone()).await.unwrap();
    // The listing (team states, issues) is answered; from then on Linear says
    // RATELIMITED with HTTP 400 and a reset 90 s away, in epoch milliseconds.
    let reset = h.clock.now().timestamp_millis() + 90_000;
    h.model.clear_log();
    h.model.rate_limit_after(2, usize::MAX, reset);
    let r = p
        .tick(TickOptions::default())
        .await
        .expect("the tick finishes");
    let text = r.to_text();
    let log = h.model.log();
    assert_eq!(
        &log[..2],
        ["SortieTeamStates -> 200", "SortieIssues -> 200"]
    );
    let limited = log.iter().filter(|l| l.ends_with("-> 400")).count();
    assert!(
        (1..=2).contains(&limited) && log.len() == 2 + limited,
        "after the first RATELIMITED at most the other run's request in flight: {log:#?}\n{text}"
    );
    use sortie::tracker::{Tracker, TrackerError};
    match tracker.list(&["ready for design".to_string()]).await {
        Err(TrackerError::RateLimited {
            retry_after: Some(d),
        }) => {
            assert!(
                (89..=90).contains(&d.as_secs()),
                "until the reset Linear gave: {d:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.model.requests().len(),
        log.len(),
        "the gate sends nothing"
    );
    // The next cron tick is a new process: the wait was persisted under the state
    // root, so it stops before sending anything.
    h.clock.advance(30);
    let err = h
        .try_process(h.tracker())
        .await
        .err()
        .expect("rate limited");
    assert!(err.contains("rate limited (retry after 60s)"), "{err}");
    assert_eq!(h.model.requests().len(), log.len(), "{:#?}", h.model.log());

    // After the reset the board is read again and both tickets run.
    h.model.rate_limit(0, reset);
    h.clock.advance(61);
    let r = p.tick(TickOptions::default()).await.expect("tick");
    let text = r.to_text();
    let done = r.runs.len() + r.replays.len();
    assert!(done >= 2, "{text}");
    assert_eq!(h.blocks(n).len(), 1, "{text}");
    h.assert_nothing_refused();
}

/// Requests and complexity one tick spends, with its request log.
async fn measure(h: &Harness) -> (Report, Vec<String>, u64) {
    h.model.clear_log();
    let r = h.tick().await;
    let requests = h.model.requests();
    let complexity = requests.iter().map(|l| l.complexity).sum();
    (r, h.model.log(), complexity)
}

#[tokio::test]
async fn an_idle_tick_costs_three_requests_and_each_query_stays_far_below_the_ceiling() {
    let h = Harness::new(&["true"]).await;
    h.model.add_issue("parked", "Backlog", &[]);
    h.model.add_issue("shipped", "Done", &[]);
    let (r, log, complexity) = measure(&h).await;
    assert!(r.runs().is_empty());
    assert_eq!(
        log,
        [
            "SortieViewer -> 200",
            "SortieTeamStates -> 200",
            "SortieIssues -> 200"
        ]
    );
    let per_query: Vec<(String, u64)> = h
        .model
        .requests()
        .iter()
        .map(|l| (l.operation.clone(), l.complexity))
        .collect();
    let issues = per_query
        .iter()
        .find(|(op, _)| op == "SortieIssues")
        .unwrap()
        .1;
    // A full page of the listing costs under a tenth of Linear's 10,000-point ceiling
    // per query, and a whole idle tick under 1,000 points: 120 ticks an hour (the 30 s
    // default poll) stay under half of a 250,000-point hourly budget.
    assert!(issues < 1_000, "{per_query:?}");
    assert!(complexity < 1_000, "{per_query:?}");
    println!(
        "idle tick: {} requests, complexity {complexity} ({per_query:?})",
        log.len()
    );
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_busy_tick_costs_a_fixed_number_of_requests_per_run() {
    let h = Harness::new(&["true"]).await;
    for n in 0..3 {
        h.model
            .add_issue(&format!("new {n}"), "Ready for design", &[]);
    }
    let (r, log, complexity) = measure(&h).await;
    assert_eq!(r.runs().len(), 3, "{}", r.text);
    // viewer + team states + issues, then per run: comments (history), comments again
    // after the claim (a stale listing, issue #20), in-progress transition (re-read,
    // update), write-back (re-read, comments, comment, transition re-read, update).
    assert_eq!(log.len(), 3 + 3 * 9, "{log:#?}");
    println!(
        "busy tick (3 architect runs): {} requests, complexity {complexity}",
        log.len()
    );
    let (r, log, complexity) = measure(&h).await;
    assert_eq!(r.runs().len(), 3, "{}", r.text);
    // Backend has no in-progress status: per run comments, comments after the claim,
    // write-back re-read, comments, comment, transition re-read, update.
    assert_eq!(log.len(), 3 + 3 * 7, "{log:#?}");
    println!(
        "busy tick (3 backend runs): {} requests, complexity {complexity}",
        log.len()
    );
    h.assert_nothing_refused();
}

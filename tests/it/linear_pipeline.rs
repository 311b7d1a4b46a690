//! Whole pipelines against the Linear model: the real adapter, the real tick, a
//! SQLite ledger in a temp dir and an injected clock. Every request the adapter
//! sends is validated against Linear's schema by the model; each test ends by
//! asserting none was refused. Also measures what a tick costs in requests and
//! complexity (docs/trackers/linear.md quotes it).

use crate::linear_model;
use crate::pipeline_suite::{Pipeline3, Report, Spelling, StepClock, Vendor};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use linear_model::{LinearModel, ALICE_ID, TOKEN, VIEWER_ID};
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::linear::{LinearOptions, LinearTracker, WAIT_FILE};

/// The pipeline's statuses, spelled in lower case (the team's states are capitalised).
const LINEAR: Spelling = [
    "ready for design",
    "designing",
    "design approved",
    "design blocked",
    "code review",
    "blocked",
    "done",
    "qa failed",
];

/// The three-stage pipeline (architect -> backend -> qa) on the model's team.
fn config(dir: &Path, api_url: &str, agent: &[String]) -> Config {
    let tracker = format!(
        r#"tracker: {{kind: linear, team: ENG, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN}}"#
    );
    Pipeline3 {
        tracker: &tracker,
        statuses: LINEAR,
        terminal: "[done, canceled]",
        per_role_max_in_flight: "4",
        agent_extra: "",
    }
    .config(dir, agent)
}

pub(crate) struct Harness {
    model: LinearModel,
    dir: tempfile::TempDir,
    clock: Arc<StepClock>,
    agent: Vec<String>,
    /// `trusted_authors` of the next ticks.
    trusted: std::sync::Mutex<Vec<String>>,
}

impl Harness {
    async fn new(agent: &[&str]) -> Self {
        Harness {
            model: LinearModel::start().await,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock::new()),
            agent: agent.iter().map(|a| a.to_string()).collect(),
            trusted: Default::default(),
        }
    }

    fn config(&self) -> Config {
        let mut cfg = config(self.dir.path(), &self.model.api_url(), &self.agent);
        cfg.trusted_authors = self.trusted.lock().unwrap().clone();
        cfg
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
        Report::of(&r, r.to_text())
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

impl Vendor for Harness {
    type Flavour = ();
    type Id = u64;

    async fn start(_: (), agent: &[&str]) -> Self {
        Harness::new(agent).await
    }
    fn open(&self, title: &str, status: &str, labels: &[&str]) -> u64 {
        self.model.add_issue(title, &self.spell(status), labels)
    }
    fn person_comments(&self, n: &u64) {
        self.model
            .add_comment(*n, ALICE_ID, "Please keep it small.");
    }
    fn open_parked(&self) -> Option<(u64, String)> {
        Some((
            self.model.add_issue("Parked", "Backlog", &[]),
            "Backlog".into(),
        ))
    }
    fn status_of(&self, n: &u64) -> String {
        self.model.state_of(*n)
    }
    /// The team's state: the config's spelling, capitalised.
    fn spell(&self, status: &str) -> String {
        let at = crate::pipeline_suite::KEBAB
            .iter()
            .position(|s| *s == status);
        let lower = match (at, status) {
            (Some(i), _) => LINEAR[i],
            (None, "on-hold") => "on hold",
            (None, other) => panic!("no Linear state for {other}"),
        };
        let mut chars = lower.chars();
        let first = chars.next().unwrap().to_uppercase();
        format!("{first}{}", chars.as_str())
    }
    fn assert_in(&self, n: &u64, status: &str, _labels: &[&str]) {
        assert_eq!(self.model.state_of(*n), self.spell(status));
    }
    fn moves_before_read(&self, n: &u64, skip: usize, status: &str) {
        let state = self.model.state_id(&self.spell(status));
        self.model.on_get(*n, skip, move |i| i.state_id = state);
    }
    fn closes_before_read(&self, n: &u64, skip: usize) {
        let done = self.model.state_id("Done");
        self.model.on_get(*n, skip, move |i| i.state_id = done);
    }
    fn assert_closed_in_designing(&self, n: &u64) {
        assert_eq!(self.model.state_of(*n), "Done");
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
    /// Each of sortie's comments has the id derived from its block's key.
    fn check_drained(&self, n: &u64) {
        let issue = self.model.issue(*n);
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
    }
    fn check_clean(&self) {
        self.assert_nothing_refused();
    }
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

impl crate::pipeline_suite::Asks for Harness {
    /// Alice by her name, as a person writes `trusted_authors` (the adapter maps it).
    fn trust_person(&self) {
        *self.trusted.lock().unwrap() = vec!["Alice".to_string()];
    }
    fn comment_as(&self, n: &u64, who: crate::pipeline_suite::Who, text: &str) {
        use crate::pipeline_suite::Who;
        let user = match who {
            Who::Sortie => VIEWER_ID,
            Who::Person => ALICE_ID,
            // A user the trust list does not name.
            Who::Stranger => linear_model::MALLORY_ID,
        };
        self.model.add_comment(*n, user, text);
    }
    fn questions(&self, n: &u64) -> usize {
        self.model
            .issue(*n)
            .comments
            .iter()
            .filter(|c| c.user_id == VIEWER_ID)
            .map(|c| sortie::block::question::parse_question_blocks(&c.body).len())
            .sum()
    }
}

/// Issue #39, item 9: a claimed ticket whose record turns malformed is skipped by the
/// listing and its re-read fails; that is no evidence the ticket left its stage, so
/// reconcile keeps the claim (no cancel request) and the tick goes on.
#[tokio::test]
async fn malformed_record_get_is_an_error_and_reconcile_keeps_the_claim() {
    use sortie::ledger::{ClaimKey, ClaimOutcome, Ledger, Scope, SqliteLedger};
    use sortie::tracker::{Tracker, TrackerError};
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("claimed", "Ready for design", &[]);
    h.model.edit(n, |i| i.broken = true);
    let tracker = h.tracker();
    match tracker.get(&format!("ENG-{n}")).await {
        Err(TrackerError::NotFound(e)) => panic!("a malformed record read as gone: {e}"),
        Err(_) => {}
        Ok(t) => panic!("a malformed record read as a ticket: {t:?}"),
    }
    // Another host holds the ticket's architect claim.
    let ledger = SqliteLedger::open(&h.config().ledger_path()).unwrap();
    let claim = ledger
        .try_claim(
            &crate::common::claim_by_another_host(
                ClaimKey::new(tracker.name(), format!("ENG-{n}"), "architect"),
                "ready for design",
            ),
            Clock::now(&*h.clock),
        )
        .unwrap();
    assert!(matches!(claim, ClaimOutcome::Acquired(_)));
    let r = h.tick_with(tracker).await;
    assert_eq!(r.json["cancels"], serde_json::json!([]), "{}", r.text);
    let claims = ledger.claims(Scope::All).unwrap();
    assert_eq!(claims.len(), 1, "{}", r.text);
    assert!(!claims[0].cancel_requested, "{}", r.text);
    h.assert_nothing_refused();
}

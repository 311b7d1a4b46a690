//! The tick driven as a library: an in-memory tracker, a file ledger and an injected
//! clock, so retries, backoff, the outbox and terminal-wins are tested without sleeping.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, SubsecRound, Utc};

use sortie::block::{idempotency_key, parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::{
    ClaimKey, FollowUp, Ledger, OutboxEntry, OutboxPut, OutboxState, Scope, SqliteLedger,
};
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// A clock the test moves by hand.
struct StepClock(Mutex<DateTime<Utc>>);

impl StepClock {
    fn new() -> Arc<Self> {
        // The ledger stores milliseconds; start on one so times compare exactly.
        Arc::new(StepClock(Mutex::new(Utc::now().trunc_subsecs(3))))
    }
    fn advance(&self, secs: i64) {
        *self.0.lock().unwrap() += Duration::seconds(secs);
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

/// A two-stage config whose agent is `command` (argv), with the repo's roles.
fn config(dir: &Path, command: &[&str], max_attempts: u32, failure_status: Option<&str>) -> Config {
    let argv: Vec<String> = command.iter().map(|a| format!("{a:?}")).collect();
    let failure = failure_status
        .map(|f| format!("    failure_status: {f}\n"))
        .unwrap_or_default();
    let text = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent:
  command: [{argv}]
  timeout_seconds: 30
retry:
  max_attempts: {max_attempts}
  backoff_base_seconds: 10
  backoff_max_seconds: 300
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    in_progress_status: designing
    success_status: design-approved
{failure}  - role: backend
    claim_status: design-approved
    success_status: done
    requires_prior_role: architect
"#,
        roles = repo().join("roles").display(),
        argv = argv.join(", "),
    );
    Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid test config")
}

async fn pipeline(
    cfg: Config,
    tracker: Arc<dyn Tracker>,
    clock: Arc<StepClock>,
) -> (Pipeline, Arc<SqliteLedger>) {
    let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
    let p = Pipeline::with_clock(cfg, tracker, ledger.clone(), clock, Faults::none())
        .await
        .expect("pipeline");
    (p, ledger)
}

fn blocks(tracker: &MemoryTracker, id: &str) -> Vec<OutcomeBlock> {
    tracker
        .comment_snapshot(id)
        .iter()
        .flat_map(|c| parse_blocks(&c.body))
        .filter_map(Result::ok)
        .map(|p| p.block)
        .collect()
}

/// The outbox entry a run leaves behind when it crashes right after storing its
/// outcome: architect succeeded on ticket 5 (attempt 1) and nothing is written yet.
fn stored_architect_success(now: DateTime<Utc>) -> OutboxEntry {
    let key = idempotency_key("memory", "5", "architect", "ready-for-design", 1);
    let body = format!(
        "```yaml sortie:success\nrole: architect\nstage_attempt: 1\nidempotency_key: {key}\nfrom_status: ready-for-design\nto_status: design-approved\nsummary: designed\n```\n"
    );
    OutboxEntry {
        idempotency_key: key,
        key: ClaimKey::new("memory", "5", "architect"),
        stage: "ready-for-design".into(),
        stage_attempt: 1,
        run_id: "r1".into(),
        outcome: "success".into(),
        from_status: "ready-for-design".into(),
        to_status: "design-approved".into(),
        comment_body: body,
        state: OutboxState::Pending,
        write_attempts: 0,
        next_attempt_at: now,
        last_error: None,
        created_at: now,
        follow_up: FollowUp::Clear,
    }
}

#[tokio::test]
async fn transient_failures_retry_with_backoff_then_fail_finally() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &["sh", "-c", "echo boom; exit 3"],
        3,
        Some("design-blocked"),
    );
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("7", "flaky", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;

    // Attempt 1 fails: the ticket goes back from `designing` to its claim status, a
    // failure block says "retry", and a retry is queued 10 s out.
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.runs.len(), 1);
    assert_eq!(r.runs[0].outcome, "failure");
    assert_eq!(tracker.snapshot("7").unwrap().status, "ready-for-design");
    let retries = ledger.retries(Scope::All).unwrap();
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].due_at, clock.now() + Duration::seconds(10));

    // Not due yet: nothing runs, and the tick says why.
    clock.advance(9);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert!(r.runs.is_empty());
    assert!(
        r.to_text()
            .contains("retry after agent.exit_nonzero not due"),
        "{}",
        r.to_text()
    );

    // Due: attempt 2 runs and fails; the next backoff is 20 s.
    clock.advance(1);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!((r.runs.len(), r.runs[0].attempt), (1, 2));
    assert_eq!(
        ledger.retries(Scope::All).unwrap()[0].due_at,
        clock.now() + Duration::seconds(20)
    );

    // Attempt 3 is the last: a final failure moves the ticket to failure_status.
    clock.advance(20);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.runs[0].attempt, 3);
    assert_eq!(tracker.snapshot("7").unwrap().status, "design-blocked");
    assert!(ledger.retries(Scope::All).unwrap().is_empty());

    let b = blocks(&tracker, "7");
    assert_eq!(b.len(), 3);
    let OutcomeBlock::Failure(last) = &b[2] else {
        panic!("{b:?}")
    };
    assert_eq!(
        (last.stage_attempt, last.to_status.as_str()),
        (3, "design-blocked")
    );
    assert_eq!(last.next_action.as_str(), "escalate");
    assert!(
        last.detail.contains("retry limit reached"),
        "{}",
        last.detail
    );
    for (n, block) in b.iter().enumerate() {
        let attempt = n as u32 + 1;
        assert_eq!(
            block.idempotency_key(),
            idempotency_key("memory", "7", "architect", "ready-for-design", attempt)
        );
    }
}

#[tokio::test]
async fn final_failure_without_failure_status_holds_the_ticket_until_a_person_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["sh", "-c", "exit 1"], 1, None);
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("1", "t", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;

    p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(tracker.snapshot("1").unwrap().status, "ready-for-design");
    assert_eq!(ledger.holds(Scope::All).unwrap().len(), 1);

    clock.advance(3600);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert!(r.runs.is_empty(), "held tickets are not dispatched again");
    assert!(
        r.to_text()
            .contains("held after final failure agent.exit_nonzero"),
        "{}",
        r.to_text()
    );

    // A person moves it away and back: the hold is gone and it runs again.
    tracker.set_status("1", "triage");
    p.tick(TickOptions::default()).await.unwrap();
    tracker.set_status("1", "ready-for-design");
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.runs.len(), 1);
    assert_eq!(r.runs[0].attempt, 2);
}

#[tokio::test]
async fn a_stored_outcome_is_finished_from_the_outbox_without_running_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("agent-ran");
    let script = format!("echo $$SORTIE_ROLE >> {}", marker.display());
    let cfg = config(dir.path(), &["sh", "-c", &script], 3, None);
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("5", "t", "designing"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;

    // As if a run crashed after storing its outcome: the outbox holds it, the
    // ticket is still `designing`, and the claim has expired.
    let entry = stored_architect_success(clock.now());
    assert_eq!(
        crate::common::store_crashed_outcome(&*ledger, &entry, clock.now()),
        OutboxPut::Stored
    );

    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.replays.len(), 1, "{}", r.to_text());
    assert_eq!(r.replays[0].result, "done");
    let architect_blocks = blocks(&tracker, "5")
        .iter()
        .filter(|b| b.role() == "architect")
        .count();
    assert_eq!(architect_blocks, 1);
    // The replayed success let backend run in the same tick; architect never ran again.
    let ran = std::fs::read_to_string(&marker).unwrap_or_default();
    assert_eq!(
        ran, "backend\n",
        "the agent must not run again for a stored outcome"
    );
    assert_eq!(tracker.snapshot("5").unwrap().status, "done");
    assert!(ledger.outbox_pending("memory").unwrap().is_empty());
}

#[tokio::test]
async fn a_comment_already_posted_is_not_posted_again_on_replay() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["true"], 3, None);
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("5", "t", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;
    let entry = stored_architect_success(clock.now());
    // The crash fell between the comment and the transition.
    tracker.add_comment("5", "sortie", &entry.comment_body);
    crate::common::store_crashed_outcome(&*ledger, &entry, clock.now());
    let r = p.tick(TickOptions { dry_run: false }).await.unwrap();
    assert_eq!(r.replays[0].result, "done");
    let architect_blocks = blocks(&tracker, "5")
        .iter()
        .filter(|b| b.role() == "architect")
        .count();
    assert_eq!(architect_blocks, 1, "no duplicate comment");
    assert_eq!(tracker.snapshot("5").unwrap().status, "done");
}

/// The memory tracker with a person's or a workflow's behaviour scripted in: a person
/// who moves the ticket right before sortie re-reads it, and a workflow that refuses
/// transitions to one status (as Redmine's does; its adapter reports `TransitionRefused`).
#[derive(Default)]
struct Scripted {
    inner: MemoryTracker,
    move_on_reread: Option<String>,
    refuse_to: Option<String>,
    /// Reading comments takes this long (a slow tracker: concurrent writers overlap).
    slow_comments: Option<std::time::Duration>,
    /// Every transition asked for, `(from, to)`.
    transitions: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl Tracker for Scripted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn identity(&self) -> Result<String, TrackerError> {
        self.inner.identity().await
    }
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.inner.list(statuses).await
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        if let Some(status) = &self.move_on_reread {
            self.inner.set_status(id, status);
        }
        self.inner.get(id).await
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        if let Some(delay) = self.slow_comments {
            tokio::time::sleep(delay).await;
        }
        self.inner.comments(id).await
    }
    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        self.inner.post_comment(id, body, key).await
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        self.transitions
            .lock()
            .unwrap()
            .push((from.to_string(), to.to_string()));
        if self.refuse_to.as_deref() == Some(to) {
            let current = self
                .inner
                .snapshot(id)
                .map(|t| t.status)
                .unwrap_or_default();
            return Err(TrackerError::TransitionRefused {
                workflow: "Redmine".into(),
                id: id.into(),
                from: from.into(),
                to: to.into(),
                current,
            });
        }
        self.inner.transition(id, from, to).await
    }
}

#[tokio::test]
async fn terminal_wins_a_ticket_closed_during_the_run_gets_no_write_back() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["true"], 3, None);
    let tracker = Arc::new(Scripted {
        move_on_reread: Some("cancelled".into()),
        ..Scripted::default()
    });
    tracker
        .inner
        .insert(MemoryTracker::ticket("9", "t", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;

    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.runs.len(), 1);
    assert!(
        r.runs[0]
            .writeback
            .as_deref()
            .unwrap_or("")
            .starts_with("dropped: ticket is terminal"),
        "{:?}",
        r.runs[0]
    );
    assert_eq!(
        tracker.inner.snapshot("9").unwrap().status,
        "cancelled",
        "the person's decision stands"
    );
    assert!(
        tracker.inner.comment_snapshot("9").is_empty(),
        "nothing written on a closed ticket"
    );
    assert!(
        ledger.claims(Scope::All).unwrap().is_empty(),
        "claim released"
    );
    assert!(ledger.outbox_pending("memory").unwrap().is_empty());
}

#[tokio::test]
async fn a_transition_the_workflow_refuses_is_reported_and_the_ticket_held_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["true"], 3, None);
    let tracker = Arc::new(Scripted {
        refuse_to: Some("design-approved".into()),
        ..Scripted::default()
    });
    tracker
        .inner
        .insert(MemoryTracker::ticket("4", "t", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;

    let r = p.tick(TickOptions::default()).await.unwrap();
    let wb = r.runs[0].writeback.clone().unwrap_or_default();
    assert!(
        wb.starts_with("dropped: transition refused by the tracker"),
        "{wb}"
    );
    // The agent's success is on the ticket, and so is the refusal, as a failure block.
    let b = blocks(&tracker.inner, "4");
    assert_eq!(b.len(), 2, "{b:?}");
    let OutcomeBlock::Failure(f) = &b[1] else {
        panic!("{b:?}")
    };
    assert_eq!(f.reason_code, "transition.refused");
    assert_eq!(
        (f.category.as_str(), f.next_action.as_str()),
        ("policy", "manual")
    );
    assert_eq!(f.to_status, "designing", "the status the ticket really has");
    assert_ne!(f.idempotency_key, b[0].idempotency_key(), "its own key");
    assert_eq!(ledger.holds(Scope::All).unwrap().len(), 1);

    // Held: later ticks neither re-run it nor post again.
    clock.advance(3600);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert!(r.runs.is_empty() && r.replays.is_empty(), "{}", r.to_text());
    assert_eq!(blocks(&tracker.inner, "4").len(), 2);
}

/// Regression (#12, defect 5): three ticks replaying one stored outcome at once, on a
/// tracker slow enough that every replay reads the comments before any posts, leave one
/// comment and one transition: only the holder of the entry's write lease writes it.
#[tokio::test]
async fn concurrent_replays_of_one_stored_outcome_post_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["true"], 3, None);
    let tracker = Arc::new(Scripted {
        slow_comments: Some(std::time::Duration::from_millis(200)),
        ..Scripted::default()
    });
    tracker
        .inner
        .insert(MemoryTracker::ticket("5", "t", "designing"));
    let clock = StepClock::new();
    let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
    let entry = stored_architect_success(clock.now());
    crate::common::store_crashed_outcome(&*ledger, &entry, clock.now());
    let mut ticks = Vec::new();
    for _ in 0..3 {
        ticks.push(
            Pipeline::with_clock(
                cfg.clone(),
                tracker.clone(),
                ledger.clone(),
                clock.clone(),
                Faults::none(),
            )
            .await
            .expect("pipeline"),
        );
    }
    let (a, b, c) = tokio::join!(
        ticks[0].tick(TickOptions::default()),
        ticks[1].tick(TickOptions::default()),
        ticks[2].tick(TickOptions::default()),
    );
    let replays: usize = [a, b, c]
        .into_iter()
        .map(|r| r.unwrap().replays.len())
        .sum();
    assert_eq!(replays, 1, "exactly one tick replays the entry");
    let with_key = tracker
        .inner
        .comment_snapshot("5")
        .iter()
        .filter(|c| c.body.contains(&entry.idempotency_key))
        .count();
    assert_eq!(with_key, 1, "one comment with the idempotency key");
    let to_design_approved = tracker
        .transitions
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, to)| to == "design-approved")
        .count();
    assert_eq!(to_design_approved, 1, "one transition");
}

/// Symphony conformance (#39, item 13), slot exhaustion: a retry that is due while its
/// role's cap is full keeps its queue entry (due time, attempt, reason) and the tick
/// says the cap holds it; it runs once the slot is free.
#[tokio::test]
async fn slot_exhaustion_a_due_retry_held_by_a_full_cap_keeps_its_entry_and_says_why() {
    use sortie::ledger::ClaimOutcome;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &["sh", "-c", "exit 3"], 3, None);
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("7", "flaky", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;
    p.tick(TickOptions::default()).await.unwrap();
    let queued = ledger.retries(Scope::All).unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");

    // Another host runs architect on ticket 8: the role's one slot is taken.
    tracker.insert(MemoryTracker::ticket("8", "busy", "designing"));
    let other = crate::common::claim_by_another_host(
        ClaimKey::new("memory", "8", "architect"),
        "ready-for-design",
    );
    let held = ledger.try_claim(&other, clock.now()).unwrap();
    assert!(matches!(held, ClaimOutcome::Acquired(_)), "{held:?}");

    clock.advance(10);
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert!(r.runs.is_empty(), "{}", r.to_text());
    let line = r
        .skips
        .iter()
        .find(|s| s.ticket == "7")
        .unwrap_or_else(|| panic!("no line for 7:\n{}", r.to_text()));
    assert!(
        line.reason.to_string() == "role cap reached (1 in flight)",
        "{}",
        r.to_text()
    );
    assert_eq!(
        ledger.retries(Scope::All).unwrap(),
        queued,
        "the due retry keeps its entry: due time, attempt and reason"
    );

    ledger
        .release(&other.key, &other.claimer_id)
        .expect("release");
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(
        (r.runs.len(), r.runs[0].ticket.as_str(), r.runs[0].attempt),
        (1, "7", 2),
        "{}",
        r.to_text()
    );
}

/// Symphony conformance 17.4.10: the retry delay doubles from `backoff_base_seconds`
/// and stops at the configured `backoff_max_seconds`.
#[tokio::test]
async fn retry_backoff_doubles_and_stops_at_the_configured_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &["sh", "-c", "exit 3"], 5, None);
    cfg.retry.backoff_max = std::time::Duration::from_secs(25);
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("7", "flaky", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;
    let mut delays = Vec::new();
    for _ in 0..4 {
        let r = p.tick(TickOptions::default()).await.unwrap();
        assert_eq!(r.runs.len(), 1, "{}", r.to_text());
        let entry = ledger.retries(Scope::All).unwrap().remove(0);
        let delay = (entry.due_at - clock.now()).num_seconds();
        delays.push(delay);
        clock.advance(delay);
    }
    assert_eq!(delays, [10, 20, 25, 25], "10 s, doubled, capped at 25 s");
}

/// Symphony conformance 17.4.12: a stalled agent is killed, and its run is a
/// transient failure whose retry is queued.
#[tokio::test]
async fn a_stalled_agent_is_killed_and_its_retry_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &["sleep", "600"], 3, None);
    cfg.agent.stall_timeout = Some(std::time::Duration::from_secs(1));
    let tracker = Arc::new(MemoryTracker::new());
    tracker.insert(MemoryTracker::ticket("7", "silent", "ready-for-design"));
    let clock = StepClock::new();
    let (p, ledger) = pipeline(cfg, tracker.clone(), clock.clone()).await;
    let r = p.tick(TickOptions::default()).await.unwrap();
    assert_eq!(
        (r.runs[0].outcome.as_str(), r.runs[0].reason_code.as_deref()),
        ("failure", Some("agent.stalled")),
        "{}",
        r.to_text()
    );
    let retries = ledger.retries(Scope::All).unwrap();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0].due_at, clock.now() + Duration::seconds(10));
    let OutcomeBlock::Failure(f) = &blocks(&tracker, "7")[0] else {
        panic!("no failure block")
    };
    assert_eq!(f.next_action.as_str(), "retry", "{f:?}");
}

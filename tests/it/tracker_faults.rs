//! A tracker that misbehaves: errors, rate limits, failed re-reads and a listing that
//! drops tickets. The sweep degrades gracefully: nothing crashes, nothing is mass-moved,
//! nothing is lost, and the report says what happened.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};

use sortie::config::Config;
use sortie::ledger::{ClaimKey, ClaimOutcome, Hold, Ledger, Scope, SqliteLedger};
use sortie::pipeline::{Clock, Faults, Pipeline, PipelineError, TickOptions};
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// Faults to inject, consumed as calls are made.
#[derive(Default)]
struct Plan {
    fail_lists: usize,
    rate_limit_comments: usize,
    fail_gets: usize,
    dropped_from_list: HashSet<String>,
    delay: Option<Duration>,
}

/// A tracker wrapper that injects the faults of its plan.
struct FaultyTracker {
    inner: MemoryTracker,
    plan: Mutex<Plan>,
}

impl FaultyTracker {
    fn new(plan: Plan) -> Arc<Self> {
        Arc::new(FaultyTracker {
            inner: MemoryTracker::new(),
            plan: Mutex::new(plan),
        })
    }
    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap()
    }
    async fn pause(&self) {
        let delay = self.plan().delay;
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
    }
}

fn take(counter: &mut usize) -> bool {
    if *counter > 0 {
        *counter -= 1;
        true
    } else {
        false
    }
}

#[async_trait]
impl Tracker for FaultyTracker {
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
        self.pause().await;
        if take(&mut self.plan().fail_lists) {
            return Err(TrackerError::Unavailable("502 Bad Gateway".into()));
        }
        let mut listing = self.inner.list(statuses).await?;
        let dropped = self.plan().dropped_from_list.clone();
        listing.tickets.retain(|t| !dropped.contains(&t.id));
        Ok(listing)
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        self.pause().await;
        if take(&mut self.plan().fail_gets) {
            return Err(TrackerError::Unavailable("timed out".into()));
        }
        self.inner.get(id).await
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        self.pause().await;
        self.inner.comments(id).await
    }
    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        self.pause().await;
        if take(&mut self.plan().rate_limit_comments) {
            return Err(TrackerError::RateLimited {
                retry_after: Some(Duration::from_secs(30)),
            });
        }
        self.inner.post_comment(id, body, key).await
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        self.pause().await;
        self.inner.transition(id, from, to).await
    }
}

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

struct Setup {
    _dir: tempfile::TempDir,
    tracker: Arc<FaultyTracker>,
    ledger: Arc<SqliteLedger>,
    clock: Arc<StepClock>,
    pipeline: Pipeline,
    runs_log: PathBuf,
}

async fn setup(plan: Plan, tickets: &[(&str, &str)]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let runs_log = dir.path().join("runs.log");
    let text = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "echo $$SORTIE_TICKET_ID >> {log}"]}}
retry: {{max_attempts: 3, backoff_base_seconds: 10}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
"#,
        roles = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("roles")
            .display(),
        log = runs_log.display(),
    );
    let config = Config::parse_str(&text, Some(&dir.path().join("pipeline.yaml"))).unwrap();
    let tracker = FaultyTracker::new(plan);
    for (id, status) in tickets {
        tracker.inner.insert(MemoryTracker::ticket(id, "t", status));
    }
    let ledger = Arc::new(SqliteLedger::open(&config.ledger_path()).unwrap());
    let clock = Arc::new(StepClock(Mutex::new(Utc::now().trunc_subsecs(3))));
    let pipeline = Pipeline::with_clock(
        config,
        tracker.clone(),
        ledger.clone(),
        clock.clone(),
        Faults::none(),
    )
    .await
    .unwrap();
    Setup {
        _dir: dir,
        tracker,
        ledger,
        clock,
        pipeline,
        runs_log,
    }
}

fn agent_runs(s: &Setup) -> usize {
    std::fs::read_to_string(&s.runs_log)
        .map(|l| l.lines().count())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_failed_listing_fails_the_tick_and_touches_nothing() {
    let s = setup(
        Plan {
            fail_lists: 1,
            ..Plan::default()
        },
        &[("1", "ready-for-design"), ("2", "ready-for-design")],
    )
    .await;
    let err = s.pipeline.tick(TickOptions::default()).await.unwrap_err();
    assert!(
        matches!(err, PipelineError::Tracker(TrackerError::Unavailable(_))),
        "{err}"
    );
    assert_eq!(s.tracker.inner.writes(), 0, "nothing moved");
    assert!(s.ledger.claims(Scope::All).unwrap().is_empty());
    // The next tick, with the tracker back, does the work.
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.runs.len(), 1);
}

#[tokio::test]
async fn a_rate_limited_write_back_waits_in_the_outbox_and_the_agent_never_reruns() {
    let s = setup(
        Plan {
            rate_limit_comments: 1,
            ..Plan::default()
        },
        &[("1", "ready-for-design")],
    )
    .await;
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    let wb = r.runs[0].writeback.clone().unwrap_or_default();
    assert!(
        wb.starts_with("deferred: rate limited (retry after 30s)"),
        "{wb}"
    );
    assert_eq!(
        s.tracker.inner.snapshot("1").unwrap().status,
        "designing",
        "not moved on without its comment"
    );

    // Before the tracker's retry-after: nothing is replayed and the ticket is not re-dispatched.
    s.clock.advance(10);
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert!(r.replays.is_empty() && r.runs.is_empty(), "{}", r.to_text());
    assert!(
        r.to_text()
            .contains("write-back of the last run still pending"),
        "{}",
        r.to_text()
    );

    s.clock.advance(30);
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.replays.len(), 1, "{}", r.to_text());
    assert_eq!(r.replays[0].result, "done");
    assert_eq!(
        s.tracker.inner.snapshot("1").unwrap().status,
        "design-approved"
    );
    assert_eq!(s.tracker.inner.comment_snapshot("1").len(), 1);
    assert_eq!(agent_runs(&s), 1, "the agent ran once");
}

#[tokio::test]
async fn a_failed_reread_is_not_evidence_of_closure() {
    let s = setup(
        Plan {
            fail_gets: 1,
            ..Plan::default()
        },
        &[("1", "ready-for-design")],
    )
    .await;
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert!(
        r.runs[0]
            .writeback
            .as_deref()
            .unwrap_or("")
            .starts_with("deferred: tracker unavailable"),
        "{:?}",
        r.runs[0]
    );
    s.clock.advance(60);
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.replays[0].result, "done", "{}", r.to_text());
    assert_eq!(
        s.tracker.inner.snapshot("1").unwrap().status,
        "design-approved"
    );
    assert_eq!(agent_runs(&s), 1);
}

#[tokio::test]
async fn a_listing_that_drops_tickets_cancels_nothing_and_clears_no_hold() {
    let plan = Plan {
        dropped_from_list: ["1".to_string(), "2".to_string()].into(),
        ..Plan::default()
    };
    let s = setup(
        plan,
        &[
            ("1", "designing"),
            ("2", "ready-for-design"),
            ("3", "ready-for-design"),
        ],
    )
    .await;
    // Another process holds ticket 1; ticket 2 is held after a final failure.
    let now = s.clock.now();
    let claim = s
        .ledger
        .try_claim(
            &crate::common::claim_by_another_host(
                ClaimKey::new("memory", "1", "architect"),
                "ready-for-design",
            ),
            now,
        )
        .unwrap();
    assert!(matches!(claim, ClaimOutcome::Acquired(_)));
    s.ledger
        .put_hold(&Hold {
            key: ClaimKey::new("memory", "2", "architect"),
            status: "ready-for-design".into(),
            reason_code: "tests.failed".into(),
            created_at: now,
            ticket_updated_at: None,
        })
        .unwrap();

    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert!(
        r.cancels.is_empty(),
        "a short listing cancelled work: {}",
        r.to_text()
    );
    assert!(!s.ledger.claims(Scope::All).unwrap()[0].cancel_requested);
    assert_eq!(
        s.ledger.holds(Scope::All).unwrap().len(),
        1,
        "the hold survives a short listing"
    );
    // The other process's live run still counts against the role cap of 1.
    assert!(r.runs.is_empty(), "{}", r.to_text());
    assert!(
        r.to_text()
            .contains("skip ticket 3 role architect (status ready-for-design): role cap reached"),
        "{}",
        r.to_text()
    );
    assert_eq!(s.tracker.inner.snapshot("1").unwrap().status, "designing");
    assert_eq!(
        s.tracker.inner.snapshot("2").unwrap().status,
        "ready-for-design"
    );

    // When the ticket really moved, the claim is cancelled.
    s.tracker.inner.set_status("1", "backlog");
    let r = s.pipeline.tick(TickOptions::default()).await.unwrap();
    assert_eq!(r.cancels.len(), 1, "{}", r.to_text());
    assert_eq!(r.cancels[0].reason, "ticket moved to backlog");
}

#[tokio::test]
async fn slow_tracker_calls_still_converge() {
    let plan = Plan {
        delay: Some(Duration::from_millis(20)),
        ..Plan::default()
    };
    let s = setup(
        plan,
        &[("1", "ready-for-design"), ("2", "ready-for-design")],
    )
    .await;
    for _ in 0..3 {
        s.pipeline.tick(TickOptions::default()).await.unwrap();
    }
    assert_eq!(
        s.tracker.inner.snapshot("1").unwrap().status,
        "design-approved"
    );
    assert_eq!(
        s.tracker.inner.snapshot("2").unwrap().status,
        "design-approved"
    );
    assert_eq!(agent_runs(&s), 2);
}

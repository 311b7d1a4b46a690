//! The report line of a run that a person cancelled by moving or closing its ticket
//! (issue #29, 6): it says what is true, not the status the ticket left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};

use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::memory::MemoryTracker;

use crate::common::repo;

/// A clock that stands still: every run lasts 0.0 s, so whole lines compare.
struct StillClock(DateTime<Utc>);

impl Clock for StillClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// Regression (#29, 6): a person closes the card while its agent runs; the tick's line
/// says the run was cancelled by a person and where the ticket is now, not that it
/// "stays ready-for-design".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cancelled_by_a_person_says_so_and_where_the_ticket_is_now() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!("touch {}; sleep 60", started.display());
    let text = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent:
  command: ["sh", "-c", {script:?}]
  timeout_seconds: 120
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    success_status: design-approved
"#,
        roles = repo().join("roles").display(),
    );
    let cfg = Config::parse_str(&text, Some(&dir.path().join("pipeline.yaml"))).expect("config");
    let board = Arc::new(MemoryTracker::new());
    board.insert(MemoryTracker::ticket("1", "t", "ready-for-design"));
    let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
    let clock = Arc::new(StillClock(Utc::now().trunc_subsecs(3)));
    let host = |clock: Arc<StillClock>| {
        Pipeline::with_clock(
            cfg.clone(),
            board.clone(),
            ledger.clone(),
            clock,
            Faults::none(),
        )
    };
    let running = host(clock.clone()).await.expect("pipeline");
    let tick = tokio::spawn(async move { running.tick(TickOptions::default()).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the agent never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A person closes the card; the next tick (another process, here another pipeline)
    // asks the run to stop.
    board.set_status("1", "cancelled");
    let noticing = host(clock).await.expect("pipeline");
    let cancelling = noticing.tick(TickOptions::default()).await.expect("tick");
    assert_eq!(cancelling.cancels.len(), 1, "{}", cancelling.to_text());

    let report = tick.await.unwrap().expect("tick");
    assert_eq!(
        report.to_text(),
        "run ticket 1 role architect attempt 1: cancelled by a person: ticket is now cancelled; nothing written (0.0 s)\n"
    );
    assert_eq!(board.snapshot("1").unwrap().status, "cancelled");
    assert!(board.comment_snapshot("1").is_empty(), "nothing written");
}

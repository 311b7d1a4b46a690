//! The database goes away while runs are in flight (issue #20): a private cluster
//! (`PrivateCluster`) stopped and started with `pg_ctl` under a running tick.
//!
//! - stopped while an agent runs and back within the lease: the run retries its renewal
//!   and its outcome's store with backoff, stores it when the database is back, and
//!   writes back once;
//! - stopped past the lease: the run gives up at the lease's end, says so, writes
//!   nothing, and the next host to claim the ticket runs it again;
//! - restarted mid-tick with several runs in flight: nothing is lost and the next tick
//!   converges.
//!
//! Needs `SORTIE_TEST_POSTGRES_BIN` (scripts/services/postgres.sh).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sortie::block::parse_blocks;
use sortie::config::Config;
use sortie::ledger::{Ledger, PostgresLedger, Scope};
use sortie::pipeline::{Faults, Pipeline, SystemClock, TickOptions};
use sortie::tracker::memory::MemoryTracker;

use crate::common::repo;
use crate::ledger_postgres::PrivateCluster;

/// A sandbox: one stage (no in-progress status), an agent that records its start, waits
/// for the file `go`, records its end and succeeds.
struct Outage {
    dir: tempfile::TempDir,
    cluster: PrivateCluster,
    board: Arc<MemoryTracker>,
    ttl_seconds: u64,
}

impl Outage {
    fn new(ttl_seconds: u64, tickets: usize) -> Outage {
        let cluster = PrivateCluster::start();
        let board = Arc::new(MemoryTracker::new());
        for n in 1..=tickets {
            board.insert(MemoryTracker::ticket(&n.to_string(), "t", "ready"));
        }
        Outage {
            dir: tempfile::tempdir().unwrap(),
            cluster,
            board,
            ttl_seconds,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn config(&self) -> Config {
        let d = self.dir.path().display();
        let script = format!(
            "echo $$SORTIE_TICKET_ID >> {d}/started; while [ ! -e {d}/go ]; do sleep 0.05; done; echo $$SORTIE_TICKET_ID >> {d}/finished"
        );
        let text = format!(
            r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
claim_lock_ttl_seconds: {ttl}
concurrency: {{max_in_flight: 5, per_role_max_in_flight: 5}}
agent:
  command: ["sh", "-c", {script:?}]
  timeout_seconds: 120
pipeline_stages:
  - role: architect
    claim_status: ready
    success_status: designed
"#,
            roles = repo().join("roles").display(),
            ttl = self.ttl_seconds,
        );
        Config::parse_str(&text, Some(&self.dir.path().join("pipeline.yaml"))).expect("config")
    }

    /// A host: its own pipeline (its own claimer id) on the shared board and database.
    async fn host(&self) -> Pipeline {
        let ledger = Arc::new(PostgresLedger::open(&self.cluster.url()).expect("ledger"));
        Pipeline::with_clock(
            self.config(),
            self.board.clone(),
            ledger,
            Arc::new(SystemClock::default()),
            Faults::none(),
        )
        .await
        .expect("pipeline")
    }

    fn lines(&self, name: &str) -> usize {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// Wait (polling, bounded) until `name` has `n` lines.
    async fn wait_lines(&self, name: &str, n: usize) {
        for _ in 0..1200 {
            if self.lines(name) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{name} never reached {n} lines");
    }

    fn go(&self) {
        std::fs::write(self.path("go"), "").unwrap();
    }

    fn blocks(&self, id: &str) -> usize {
        self.board
            .comment_snapshot(id)
            .iter()
            .map(|c| parse_blocks(&c.body).len())
            .sum()
    }

    async fn pg_ctl(&self, action: &'static str) {
        // pg_ctl waits for the server; keep the runtime's threads free meanwhile.
        let cluster = &self.cluster;
        tokio::task::block_in_place(|| cluster.pg_ctl(action));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_stores_its_outcome_when_the_database_comes_back_within_the_lease() {
    let o = Outage::new(60, 1);
    let host = o.host().await;
    let tick = tokio::spawn(async move { host.tick(TickOptions::default()).await });
    o.wait_lines("started", 1).await;
    o.pg_ctl("stop").await;
    o.go();
    o.wait_lines("finished", 1).await;
    // The run is now failing to renew and to store its outcome; give it a few tries.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !tick.is_finished(),
        "the run gave up with 57 s of lease left"
    );
    o.pg_ctl("start").await;
    let report = tick.await.unwrap().expect("tick");
    let run = &report.runs[0];
    assert_eq!(run.outcome, "success", "{}", report.to_text());
    assert_eq!(
        run.writeback.as_deref(),
        Some("done"),
        "{}",
        report.to_text()
    );
    let note = run.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("outcome stored after") && note.contains("ledger unavailable"),
        "the outage was not seen by the run: {note:?}"
    );
    assert_eq!(o.board.snapshot("1").unwrap().status, "designed");
    assert_eq!(o.blocks("1"), 1);
    assert_eq!(o.lines("started"), 1, "the agent ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_not_stored_before_the_lease_ran_out_is_reported_and_run_again_by_the_next_claimer(
) {
    let o = Outage::new(3, 1);
    let first = o.host().await;
    let tick = tokio::spawn(async move { first.tick(TickOptions::default()).await });
    o.wait_lines("started", 1).await;
    o.pg_ctl("stop").await;
    o.go();
    // The run gives up by itself when its 3 s lease has run out: the tick returns while
    // the database is still down.
    let report = tick.await.unwrap().expect("tick");
    let run = &report.runs[0];
    let note = run.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("outcome not stored before the lease ran out"),
        "{}",
        report.to_text()
    );
    assert_eq!(o.board.snapshot("1").unwrap().status, "ready");
    assert_eq!(o.blocks("1"), 0, "nothing written without a stored outcome");
    // A runtime failure: `pipeline tick` exits 1 on it (issue #29).
    assert_eq!(report.unstored_runs().count(), 1, "{}", report.to_text());

    o.pg_ctl("start").await;
    std::fs::remove_file(o.path("go")).unwrap();
    o.go();
    let second = o.host().await;
    let report = second.tick(TickOptions::default()).await.expect("tick");
    assert_eq!(report.runs.len(), 1, "{}", report.to_text());
    assert_eq!(report.runs[0].writeback.as_deref(), Some("done"));
    assert_eq!(o.lines("started"), 2, "the next claimer ran it again");
    assert_eq!(o.blocks("1"), 1);
    assert_eq!(o.board.snapshot("1").unwrap().status, "designed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restarted_mid_tick_loses_nothing_and_the_next_tick_converges() {
    let o = Outage::new(60, 3);
    let host = o.host().await;
    let host = Arc::new(host);
    let ticking = host.clone();
    let tick = tokio::spawn(async move { ticking.tick(TickOptions::default()).await });
    o.wait_lines("started", 3).await;
    // Every pooled connection dies with the old server.
    o.pg_ctl("restart").await;
    o.go();
    let first = tick.await.unwrap().expect("tick");
    // The next tick finishes whatever the first could not (nothing, normally) and
    // finds nothing left to do.
    let second = host.tick(TickOptions::default()).await.expect("tick");
    assert!(second.runs.is_empty(), "{}", second.to_text());
    for id in ["1", "2", "3"] {
        assert_eq!(
            o.board.snapshot(id).unwrap().status,
            "designed",
            "ticket {id}: {}\n{}",
            first.to_text(),
            second.to_text()
        );
        assert_eq!(o.blocks(id), 1, "ticket {id}: one outcome");
    }
    assert_eq!(o.lines("started"), 3, "no agent ran twice");
    let ledger = PostgresLedger::open(&o.cluster.url()).unwrap();
    assert!(ledger.claims(Scope::All).unwrap().is_empty());
    assert!(ledger.outbox_pending("memory").unwrap().is_empty());
}

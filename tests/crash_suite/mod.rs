//! The crash-anywhere suite, shared by both ledgers: tick processes die at every fault
//! point (and at random moments), and the board still converges with nothing lost, no
//! comment posted twice, and no agent re-run once its outcome was stored.
//!
//! `crash_suite!(store)` expands to one `#[test]` per case for a [`Store`]:
//! `tests/it/crash_anywhere.rs` runs it on SQLite, `tests/services/crash_anywhere_postgres.rs`
//! on PostgreSQL (issue #20). `cargo test --release --test it crash_anywhere -- --nocapture`
//! prints the table that `docs/reliability.md` records.

#![allow(dead_code)] // each binary uses the part its cases need

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Sandbox;
use sortie::block::idempotency_key;
use sortie::ledger::{Ledger, PostgresLedger, Scope, SqliteLedger};

/// The ledger the tick processes share.
#[derive(Debug, Clone)]
pub enum Store {
    /// `state/ledger.db` in the sandbox.
    Sqlite,
    /// A PostgreSQL database (a schema of its own), by URL.
    Postgres(String),
}

impl Store {
    /// The config's `ledger:` section.
    fn section(&self) -> &'static str {
        match self {
            Store::Sqlite => "",
            Store::Postgres(_) => "ledger: {kind: postgres, url_env: SORTIE_LEDGER_URL}\n",
        }
    }
}

/// The cases, as `#[test]`s for `$store` (a [`Store`] expression, evaluated per test).
macro_rules! crash_suite {
    ($store:expr) => {
        crash_suite!(@each $store;
            crashes_before_the_outcome_is_stored_rerun_the_agent_and_lose_nothing,
            crashes_after_the_outcome_is_stored_never_rerun_the_agent,
            random_sigkills_converge,
        );
    };
    (@each $store:expr; $($name:ident,)*) => {
        $(
            #[test]
            fn $name() {
                crate::crash_suite::$name($store)
            }
        )*
    };
}

const TICKETS: usize = 20;
const ROLES: [&str; 3] = ["architect", "backend", "qa"];
/// Lease length in the test config; each tick runs this much later than the last
/// (through `SORTIE_CLOCK_OFFSET_SECONDS`), so leases of killed ticks have expired.
const TTL: i64 = 30;

fn config(dir: &Path, slow: bool, store: &Store) -> String {
    let agent = dir.join("agent.sh");
    let pause = if slow { "sleep 0.3\n" } else { "" };
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncat > /dev/null\necho \"$SORTIE_TICKET_ID $SORTIE_ROLE $SORTIE_STAGE_ATTEMPT $SORTIE_RUN_ID\" >> {runs}\n{pause}printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
            runs = dir.join("runs.log").display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&agent)
        .status()
        .unwrap();
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: {TTL}
concurrency: {{max_in_flight: 6, per_role_max_in_flight: 3}}
agent: {{command: ["{agent}"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, in_progress_status: implementing, success_status: code-review, requires_prior_role: architect}}
  - {{role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}}
{ledger}"#,
        roles = common::repo().join("roles").display(),
        agent = agent.display(),
        ledger = store.section(),
    )
}

/// A sandbox board with [`TICKETS`] tickets and the tick processes' bookkeeping.
pub struct Chaos {
    /// The sandbox (board, config, runs log).
    pub sb: Sandbox,
    store: Store,
    ids: Vec<String>,
    offset: i64,
    crashes: usize,
}

impl Chaos {
    /// A fresh board; `slow` agents pause 0.3 s (runs in flight to kill).
    pub fn new(slow: bool, store: Store) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = config(dir.path(), slow, &store);
        std::fs::write(dir.path().join("pipeline.yaml"), text).unwrap();
        let sb = Sandbox { dir };
        sb.ok(&["board", "init", "board"]);
        let ids = (0..TICKETS)
            .map(|i| sb.add(&format!("ticket {i}"), "ready-for-design", &[]))
            .collect();
        Chaos {
            sb,
            store,
            ids,
            offset: 0,
            crashes: 0,
        }
    }

    /// A tick process, its clock one lease later than the last one's.
    pub fn tick_command(&mut self, fault: Option<&str>) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .current_dir(self.sb.path())
            .env("SORTIE_CLOCK_OFFSET_SECONDS", self.offset.to_string())
            .env_remove("SORTIE_FAULT")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(point) = fault {
            cmd.env("SORTIE_FAULT", point);
        }
        if let Store::Postgres(url) = &self.store {
            cmd.env("SORTIE_LEDGER_URL", url);
        }
        self.offset += TTL + 1;
        cmd
    }

    /// One tick; returns whether it was killed.
    pub fn tick(&mut self, fault: Option<&str>) -> bool {
        let out = self.tick_command(fault).output().expect("run tick");
        self.check_exit(out.status, &out.stderr)
    }

    pub fn check_exit(&mut self, status: std::process::ExitStatus, stderr: &[u8]) -> bool {
        if status.signal() == Some(9) {
            self.crashes += 1;
            return true;
        }
        assert!(
            status.success(),
            "tick failed: {status:?}\n{}",
            String::from_utf8_lossy(stderr)
        );
        false
    }

    pub fn drained(&self) -> bool {
        self.ids
            .iter()
            .all(|id| self.sb.ticket(id).status == "done")
    }

    /// Alternate crashing and clean ticks until the board is drained, then a few clean
    /// ticks to replay anything left in the outbox.
    pub fn run_with_fault(&mut self, point: &str) {
        for round in 0..200 {
            if round % 2 == 0 {
                self.tick(Some(point));
            } else {
                self.tick(None);
            }
            if self.drained() {
                break;
            }
        }
        self.settle();
    }

    pub fn settle(&mut self) {
        for _ in 0..3 {
            self.tick(None);
        }
    }

    /// Invocations that ran again after an earlier run's outcome for the same ticket and
    /// role had been stored in the outbox. Runs of one (ticket, role) never overlap (the
    /// claim serializes them), so any invocation after one whose outcome was stored is
    /// a re-run of a stored outcome.
    pub fn reruns_after_stored_outcome(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.sb.path().join("runs.log")).unwrap_or_default();
        let ledger = self.ledger();
        let stage = |role: &str| match role {
            "architect" => "ready-for-design",
            "backend" => "design-approved",
            _ => "code-review",
        };
        let mut stored: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut reruns = Vec::new();
        for line in log.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [id, role, attempt, run_id] = parts[..] else {
                continue;
            };
            let key = (id.to_string(), role.to_string());
            if let Some(earlier) = stored.get(&key) {
                reruns.push(format!(
                    "{id} {role}: run {run_id} after stored run {earlier}"
                ));
            }
            let attempt: u32 = attempt.parse().unwrap();
            let ikey = idempotency_key("local", id, role, stage(role), attempt);
            if ledger
                .outbox_get(&ikey)
                .unwrap()
                .is_some_and(|e| e.run_id == run_id)
            {
                stored.insert(key, run_id.to_string());
            }
        }
        reruns
    }

    /// The shared ledger, opened as the test's own reader.
    fn ledger(&self) -> Box<dyn Ledger> {
        match &self.store {
            Store::Sqlite => Box::new(
                SqliteLedger::open(&self.sb.path().join("state/ledger.db")).expect("ledger"),
            ),
            Store::Postgres(url) => Box::new(PostgresLedger::open_with(url, 1).expect("ledger")),
        }
    }

    /// Agent invocations per (ticket, role).
    fn invocations(&self) -> BTreeMap<(String, String), usize> {
        let log = std::fs::read_to_string(self.sb.path().join("runs.log")).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in log.lines() {
            let mut parts = line.split_whitespace();
            let (Some(id), Some(role)) = (parts.next(), parts.next()) else {
                continue;
            };
            *counts
                .entry((id.to_string(), role.to_string()))
                .or_insert(0) += 1;
        }
        counts
    }

    pub fn outcome(&self, name: &str) -> Outcome {
        let runs: usize = self.invocations().values().sum();
        let mut duplicate_comments = 0;
        let mut lost = 0;
        for id in &self.ids {
            let mut per_attempt: BTreeMap<(String, u32), usize> = BTreeMap::new();
            for block in self.sb.blocks(id) {
                *per_attempt
                    .entry((block.role().to_string(), block.stage_attempt()))
                    .or_default() += 1;
            }
            duplicate_comments += per_attempt.values().map(|n| n - 1).sum::<usize>();
            let succeeded = ROLES.iter().all(|r| {
                self.sb
                    .blocks(id)
                    .iter()
                    .any(|b| b.role() == *r && b.kind().to_string() == "success")
            });
            if self.sb.ticket(id).status != "done" || !succeeded {
                lost += 1;
            }
        }
        let claims_left = self.ledger().claims(Scope::All).expect("claims").len();
        Outcome {
            name: name.to_string(),
            tickets: self.ids.len(),
            crashes: self.crashes,
            runs,
            duplicate_runs: runs.saturating_sub(self.ids.len() * ROLES.len()),
            duplicate_comments,
            lost,
            claims_left,
            reruns_of_stored: self.reruns_after_stored_outcome().len(),
        }
    }
}

/// What a case did to the board, as a row of the table in `docs/reliability.md`.
#[derive(Debug)]
pub struct Outcome {
    name: String,
    tickets: usize,
    crashes: usize,
    runs: usize,
    /// Agent invocations beyond one per ticket and role.
    pub duplicate_runs: usize,
    duplicate_comments: usize,
    lost: usize,
    claims_left: usize,
    reruns_of_stored: usize,
}

impl Outcome {
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.name,
            self.tickets,
            self.crashes,
            self.runs,
            self.duplicate_runs,
            self.reruns_of_stored,
            self.duplicate_comments,
            self.lost,
            self.claims_left
        )
    }

    pub fn assert_converged(&self) {
        assert_eq!(self.lost, 0, "{self:?}");
        assert_eq!(self.duplicate_comments, 0, "{self:?}");
        assert_eq!(self.claims_left, 0, "{self:?}");
    }
}

/// The table's header.
pub const HEADER: &str = "| fault | tickets | crashes | runs | duplicate runs | re-runs of a stored outcome | duplicate comments | lost tickets | claims left |\n|---|---|---|---|---|---|---|---|---|";

/// Faults before the outcome is stored: the run is lost with the process and runs again.
pub fn crashes_before_the_outcome_is_stored_rerun_the_agent_and_lose_nothing(store: Store) {
    crash_at_each(&store, &["after_claim", "after_in_progress", "mid_agent"]);
}

/// Faults after the outcome is stored: the next tick finishes the write-back from the
/// outbox, and the agent never runs again for that ticket and role.
pub fn crashes_after_the_outcome_is_stored_never_rerun_the_agent(store: Store) {
    crash_at_each(
        &store,
        &[
            "after_outbox",
            "after_comment",
            "after_transition",
            "before_release",
        ],
    );
}

/// One pipeline per fault point, crashed there until it converges: nothing lost, no
/// agent run again after its outcome was stored; prints the table.
fn crash_at_each(store: &Store, points: &[&str]) {
    let mut rows = Vec::new();
    for &point in points {
        let mut chaos = Chaos::new(false, store.clone());
        chaos.run_with_fault(point);
        let outcome = chaos.outcome(point);
        outcome.assert_converged();
        assert!(outcome.crashes > 0, "fault point {point} was never reached");
        let reruns = chaos.reruns_after_stored_outcome();
        assert!(
            reruns.is_empty(),
            "{point}: agents re-run after their outcome was stored: {reruns:#?}"
        );
        rows.push(outcome.row());
    }
    println!("{HEADER}\n{}", rows.join("\n"));
}

/// Real SIGKILLs at pseudo-random moments of tick processes.
pub fn random_sigkills_converge(store: Store) {
    let mut chaos = Chaos::new(true, store);
    let mut seed: u64 = 0x5eed_1234;
    for _ in 0..200 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_millis(50 + (seed >> 33) % 400);
        let mut child = chaos.tick_command(None).spawn().expect("spawn tick");
        std::thread::sleep(delay);
        let _ = child.kill();
        let out = child.wait_with_output().expect("wait");
        chaos.check_exit(out.status, &out.stderr);
        if chaos.drained() {
            break;
        }
    }
    // Then let it finish cleanly.
    for _ in 0..50 {
        if chaos.drained() {
            break;
        }
        chaos.tick(None);
    }
    chaos.settle();
    let outcome = chaos.outcome("random SIGKILL");
    outcome.assert_converged();
    let reruns = chaos.reruns_after_stored_outcome();
    assert!(
        reruns.is_empty(),
        "agents re-run after their outcome was stored: {reruns:#?}"
    );
    println!("{HEADER}\n{}", outcome.row());
}

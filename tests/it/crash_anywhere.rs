//! The crash-anywhere suite (tests/crash_suite) on the SQLite ledger, plus what only a
//! file ledger has: the file deleted while runs are in flight.
//!
//! `cargo test --release --test it crash_anywhere -- --nocapture` prints the table that
//! `docs/reliability.md` records.

use std::time::Duration;

use crate::crash_suite::{Chaos, Store, HEADER};

crash_suite!(Store::Sqlite);

/// The ledger file deleted while runs are in flight costs at most one duplicate run
/// per in-flight ticket, and loses nothing.
#[test]
fn deleting_the_ledger_mid_run_costs_at_most_one_duplicate_per_in_flight_ticket() {
    let mut chaos = Chaos::new(true, Store::Sqlite);
    let runs_log = chaos.sb.path().join("runs.log");
    let first = chaos.tick_command(None).spawn().expect("spawn tick");
    // Wait until its agents are running (they append to runs.log before pausing).
    for _ in 0..200 {
        if std::fs::read_to_string(&runs_log).is_ok_and(|l| !l.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(chaos.sb.path().join(format!("state/ledger.db{suffix}")));
    }
    // A second tick on a fresh ledger, while the first still runs.
    let second = chaos.tick_command(None).spawn().expect("spawn tick");
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        chaos.check_exit(out.status, &out.stderr);
    }
    for _ in 0..50 {
        if chaos.drained() {
            break;
        }
        chaos.tick(None);
    }
    chaos.settle();
    let outcome = chaos.outcome("ledger deleted");
    outcome.assert_converged();
    let in_flight = 3; // per_role_max_in_flight: the first tick ran at most 3 architects
    assert!(outcome.duplicate_runs <= in_flight, "{outcome:?}");
    println!("{HEADER}\n{}", outcome.row());
}

//! Concurrent claimers, as threads and as OS processes, racing for one key on one ledger
//! file: exactly one wins and every loser names the winner.
//!
//! The process race re-executes this test binary with `SORTIE_RACE_LEDGER` set; the same
//! test function then plays one contender and prints its outcome on stdout.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use chrono::DateTime;
use sortie::ledger::{
    ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, Ledger, Scope, SqliteLedger, Timestamp,
};

const CONTENDERS: usize = 8;
const LEDGER_ENV: &str = "SORTIE_RACE_LEDGER";
const CLAIMER_ENV: &str = "SORTIE_RACE_CLAIMER";
const READY: &str = "RACE-READY";
const OUTCOME: &str = "RACE-OUTCOME";

fn now() -> Timestamp {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn request(claimer: &str) -> ClaimRequest {
    ClaimRequest {
        key: ClaimKey::new("local", "T-1", "backend"),
        stage: "ready".into(),
        claimer_id: claimer.into(),
        run_id: format!("run-{claimer}"),
        ttl: Duration::from_secs(600),
        limits: ClaimLimits {
            global: 100,
            role: 100,
            status: None,
            host: None,
        },
        attempt_floor: 0,
    }
}

/// `acquired <claimer>` or `held <holder>`, as a contender reports it.
fn describe(claimer: &str, outcome: &ClaimOutcome) -> String {
    match outcome {
        ClaimOutcome::Acquired(claim) => {
            assert_eq!(claim.claimer_id, claimer);
            format!("acquired {claimer}")
        }
        ClaimOutcome::Held { holder, .. } => format!("held {holder}"),
        ClaimOutcome::Ceiling(scope) => format!("ceiling {scope:?}"),
        ClaimOutcome::HostShare(scope) => format!("host share {scope:?}"),
    }
}

/// Exactly one `acquired X`, and every other outcome is `held X`.
fn assert_one_winner(outcomes: &[String]) {
    assert_eq!(outcomes.len(), CONTENDERS, "{outcomes:?}");
    let winners: Vec<&str> = outcomes
        .iter()
        .filter_map(|o| o.strip_prefix("acquired "))
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one winner expected: {outcomes:?}"
    );
    let expected_loss = format!("held {}", winners[0]);
    let losers = outcomes.iter().filter(|o| **o == expected_loss).count();
    assert_eq!(
        losers,
        CONTENDERS - 1,
        "every loser must name the winner: {outcomes:?}"
    );
}

fn assert_ledger_holds_one_claim(path: &Path, outcomes: &[String]) {
    let ledger = SqliteLedger::open(path).unwrap();
    let claims = ledger.claims(Scope::All).unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].stage_attempt, 1);
    assert!(outcomes.contains(&format!("acquired {}", claims[0].claimer_id)));
}

#[test]
fn eight_threads_racing_for_one_key_produce_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    let threads: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let path = path.clone();
            std::thread::spawn(move || {
                // Each thread opens its own ledger on the fresh file, concurrently.
                barrier.wait();
                let ledger = SqliteLedger::open(&path).unwrap();
                barrier.wait();
                let claimer = format!("thread-{i}");
                describe(
                    &claimer,
                    &ledger.try_claim(&request(&claimer), now()).unwrap(),
                )
            })
        })
        .collect();
    let outcomes: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_one_winner(&outcomes);
    assert_ledger_holds_one_claim(&path, &outcomes);
}

#[test]
fn eight_processes_racing_for_one_key_produce_one_winner() {
    if let Ok(path) = std::env::var(LEDGER_ENV) {
        contend_as_child(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            Command::new(&exe)
                .args([
                    // The test's own name inside this binary (`ledger_race::...`).
                    &format!(
                        "{}::eight_processes_racing_for_one_key_produce_one_winner",
                        module_path!().split_once("::").map_or("", |(_, m)| m)
                    ),
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(LEDGER_ENV, &path)
                .env(CLAIMER_ENV, format!("process-{i}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();

    let race_over = watchdog(children.iter().map(|c| c.id()).collect());

    // Every child opens the (fresh) ledger and reports ready; then all are released at once.
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|child| BufReader::new(child.stdout.take().unwrap()))
        .collect();
    for reader in &mut readers {
        wait_for_line(reader, READY);
    }
    for child in &mut children {
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let outcomes: Vec<String> = readers
        .iter_mut()
        .map(|reader| wait_for_line(reader, OUTCOME))
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    drop(race_over);
    assert_one_winner(&outcomes);
    assert_ledger_holds_one_claim(&path, &outcomes);
}

/// Kill the contenders unless the returned sender is dropped within a minute, so a deadlock
/// fails the test (their stdout closes) instead of hanging it.
fn watchdog(pids: Vec<u32>) -> mpsc::Sender<()> {
    let (race_over, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait.recv_timeout(Duration::from_secs(60)) != Err(RecvTimeoutError::Timeout) {
            return;
        }
        for pid in pids {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    });
    race_over
}

/// Read lines until one contains `marker`; return what follows it. (libtest may print
/// `test <name> ... ` on the same line before the child's own output.)
fn wait_for_line(reader: &mut impl BufRead, marker: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "contender exited before printing {marker}");
        if let Some((_, rest)) = line.trim_end().split_once(marker) {
            return rest.trim().to_owned();
        }
    }
}

/// One contender process: open, report ready, wait for `go`, claim, report.
fn contend_as_child(path: &Path) {
    let claimer = std::env::var(CLAIMER_ENV).unwrap();
    let ledger = SqliteLedger::open(path).unwrap();
    println!("{READY}");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let outcome = ledger.try_claim(&request(&claimer), now()).unwrap();
    println!("{OUTCOME} {}", describe(&claimer, &outcome));
    std::io::stdout().flush().unwrap();
}

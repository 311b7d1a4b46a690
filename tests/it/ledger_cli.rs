//! `sortie claims list` and `sortie claims release`, run as the real binary against a
//! ledger seeded through the library.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use sortie::ledger::{
    ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, Ledger, Scope, SqliteLedger,
};

/// Seeds a ledger under `<dir>/state/ledger.db` holding:
/// - `local/T-7/backend`: live, claimed 2h ago by `host:11:aaaa`, lease left 3h30m, attempt 1;
/// - `local/T-9/qa`: expired a day ago, claimed by `host:22:bbbb`, attempt 3, cancel requested.
///
/// The ages are chosen half a minute away from a boundary so the printed text is stable
/// however long the test takes to reach the binary.
fn seed(dir: &Path) -> SqliteLedger {
    let ledger = SqliteLedger::open(&dir.join("state/ledger.db")).unwrap();
    let now = Utc::now();
    let claim = |ticket: &str, role: &str, claimer: &str, ago: TimeDelta, ttl: u64, floor| {
        let req = ClaimRequest {
            key: ClaimKey::new("local", ticket, role),
            stage: "ready".into(),
            claimer_id: claimer.into(),
            run_id: "run-1".into(),
            ttl: Duration::from_secs(ttl),
            limits: ClaimLimits {
                global: 10,
                role: 10,
                status: None,
                host: None,
            },
            attempt_floor: floor,
        };
        let outcome = ledger.try_claim(&req, now - ago).unwrap();
        assert!(matches!(outcome, ClaimOutcome::Acquired(_)), "{outcome:?}");
    };
    // claimed 2h00m30s ago; lease ends 3h30m30s from now.
    claim(
        "T-7",
        "backend",
        "host:11:aaaa",
        TimeDelta::seconds(2 * 3600 + 30),
        (5 * 3600 + 31 * 60) as u64,
        0,
    );
    // claimed 1d01h00m30s ago with a 1h lease.
    claim(
        "T-9",
        "qa",
        "host:22:bbbb",
        TimeDelta::seconds(25 * 3600 + 30),
        3600,
        3,
    );
    assert!(ledger
        .request_cancel(&ClaimKey::new("local", "T-9", "qa"))
        .unwrap());
    ledger
}

fn sortie(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env_remove("SORTIE_LOG")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn list_prints_a_table_of_live_and_expired_claims() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    // Default location: state/ledger.db under the working directory.
    let out = sortie(dir.path(), &["claims", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "\
TRACKER  TICKET  ROLE     STAGE  HOLDER        ATTEMPT  CLAIMED    LEASE    CANCEL
local    T-7     backend  ready  host:11:aaaa  1        2h00m ago  3h30m    no
local    T-9     qa       ready  host:22:bbbb  3        1d01h ago  expired  yes
"
    );
}

#[test]
fn list_json_reports_every_field_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let state = dir.path().join("state");
    let out = sortie(
        dir.path(),
        &[
            "claims",
            "list",
            "--json",
            "--state-root",
            state.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["ticket_id"], "T-7");
    assert_eq!(rows[0]["claimer_id"], "host:11:aaaa");
    assert_eq!(rows[0]["expired"], false);
    assert_eq!(rows[0]["cancel_requested"], false);
    assert_eq!(rows[1]["ticket_id"], "T-9");
    assert_eq!(rows[1]["stage_attempt"], 3);
    assert_eq!(rows[1]["expired"], true);
    assert_eq!(rows[1]["cancel_requested"], true);
    assert!(rows[1]["lease_expires_at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn list_without_a_ledger_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = sortie(dir.path(), &["claims", "list", "--state-root", "nowhere"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        "no ledger at nowhere/ledger.db (nothing has run with this state root yet)\n"
    );
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn release_refuses_a_live_claim_without_force_and_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = seed(dir.path());
    let out = sortie(
        dir.path(),
        &["claims", "release", "local", "T-7", "backend"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("held by host:11:aaaa"), "{err}");
    assert!(err.contains("lease left 3h30m"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        ledger.claims(Scope::All).unwrap().len(),
        2,
        "nothing was released"
    );

    let out = sortie(
        dir.path(),
        &["claims", "release", "local", "T-7", "backend", "--force"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "released local/T-7/backend (held by host:11:aaaa, lease left 3h30m)\n"
    );
    let left: Vec<String> = ledger
        .claims(Scope::All)
        .unwrap()
        .iter()
        .map(|c| c.key.to_string())
        .collect();
    assert_eq!(left, ["local/T-9/qa"]);
}

#[test]
fn release_frees_an_expired_claim_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = seed(dir.path());
    let out = sortie(dir.path(), &["claims", "release", "local", "T-9", "qa"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "released local/T-9/qa (held by host:22:bbbb, lease expired 1d00h ago)\n"
    );
    assert_eq!(ledger.claims(Scope::All).unwrap().len(), 1);
    // The attempt history outlives the release.
    assert_eq!(
        ledger
            .last_attempt(&ClaimKey::new("local", "T-9", "qa"))
            .unwrap(),
        3
    );
}

#[test]
fn release_of_a_missing_claim_says_no_claim() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let out = sortie(dir.path(), &["claims", "release", "local", "T-404", "qa"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no claim for local/T-404/qa"));

    let empty = tempfile::tempdir().unwrap();
    let out = sortie(empty.path(), &["claims", "release", "local", "T-1", "qa"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no claim for local/T-1/qa"));
}

#[test]
fn a_config_that_does_not_load_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = sortie(
        dir.path(),
        &["claims", "list", "--config", "missing-pipeline.yaml"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

//! Exit codes of `pipeline tick` and `pipeline validate` that cron users watch
//! (issue #29, 6): 1 a runtime failure (tracker or ledger unavailable), 2 a config that
//! cannot run. The real binary, whole lines compared.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Sandbox};

/// `sortie ARGS` in `dir`: (exit code, stdout, stderr).
fn sortie(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env_remove("SORTIE_FAULT")
        .env_remove("SORTIE_LOG")
        .output()
        .expect("run sortie");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

/// Regression (#29, 6): the ledger fails while the agent runs, so the run's outcome
/// cannot be stored; nothing is written, and the tick exits 1 (it used to exit 0) with
/// a line on stderr saying why.
#[test]
fn a_tick_whose_ledger_fails_while_its_agent_runs_exits_1_and_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (started, go) = (d.path().join("started"), d.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done; echo done",
        started.display(),
        go.display()
    );
    let sb = Sandbox::with_config(&format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", {script:?}], timeout_seconds: 120}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
    ));
    let id = sb.add("t", "ready-for-design", &[]);
    let tick = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env_remove("SORTIE_FAULT")
        .env_remove("SORTIE_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tick");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the agent never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The ledger breaks under the running tick: its outbox is gone, so storing the
    // outcome fails at once.
    let ledger = rusqlite::Connection::open(sb.path().join("state/ledger.db")).unwrap();
    ledger
        .execute_batch("ALTER TABLE outbox RENAME TO outbox_gone")
        .unwrap();
    drop(ledger);
    std::fs::write(&go, "").unwrap();
    let out = tick.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}stderr:\n{stderr}"
    );
    assert_eq!(
        stderr.lines().last(),
        Some(
            "sortie: the ledger failed: the outcome of 1 run(s) could not be stored (ledger \
             database error: no such table: outbox); nothing was written on their tickets, \
             and they run again at their next claim"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains(
            "outcome not stored (ledger database error: no such table: outbox); nothing written"
        ),
        "{stdout}"
    );
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
    assert!(sb.comments(&id).is_empty(), "nothing written");
}

/// The three-stage config of the sandbox, in a directory without its board.
fn without_board() -> Sandbox {
    let sb = Sandbox::three_stages(1);
    std::fs::remove_dir_all(sb.board_path()).unwrap();
    sb
}

fn board_missing(sb: &Sandbox) -> String {
    let board = sb.board_path();
    format!(
        "pipeline.yaml:4:9: tracker.path: the board directory {0} does not exist; create it with `sortie board init {0}`\n",
        board.display()
    )
}

/// Regression (#29, 6): `pipeline validate` on a config whose local board does not
/// exist is a config error (exit 2; it used to warn and exit 0).
#[test]
fn validate_refuses_a_missing_local_board_with_exit_2() {
    let sb = without_board();
    let (code, stdout, stderr) = sortie(
        sb.path(),
        &["pipeline", "validate", "--config", "pipeline.yaml"],
    );
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert_eq!(stderr, board_missing(&sb));
}

/// Regression (#29, 6): `pipeline tick` (and its dry run) on a missing local board
/// exits 2 with validate's message (it used to exit 1 with "not found: no board").
#[test]
fn tick_refuses_a_missing_local_board_with_exit_2_and_validates_message() {
    let sb = without_board();
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut args = vec!["pipeline", "tick", "--config", "pipeline.yaml"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = sortie(sb.path(), &args);
        assert_eq!((code, stdout.as_str()), (2, ""), "{args:?}: {stderr}");
        assert_eq!(
            stderr,
            format!("sortie: {}", board_missing(&sb)),
            "{args:?}"
        );
    }
}

//! Issue #14: a run explains itself in the daemon's log. The daemon logs at `info`
//! without `-v`; every line of a run carries `ticket`, `role`, `attempt`, `run_id` and,
//! once the agent reported it, the agent's `session_id`; ticks where nothing happened
//! log nothing, and a cron tick (`pipeline tick`) stays quiet.

use crate::common;
use crate::daemon_e2e::{wait_until, Daemon};

use common::Sandbox;

/// The session the fake `claude` stream reports in its `init` event.
const SESSION: &str = "09b1754f-359d-4c69-baa7-874073bec825";

fn sandbox() -> Sandbox {
    Sandbox::with_config(&format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent:
  preset: claude-code
  command: ["{fake}"]
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
        fake = common::repo()
            .join("tests/fixtures/agents/fake-claude")
            .display(),
    ))
}

fn daemon_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("daemon.log")).unwrap_or_default()
}

/// The ticks the daemon has run, as `/api/v1/state` reports the last one.
fn last_tick(d: &Daemon) -> serde_json::Value {
    d.state()["last_tick"]["started_at"].clone()
}

#[test]
fn every_line_of_a_run_carries_ticket_role_attempt_run_id_and_then_the_session() {
    let sb = sandbox();
    let id = sb.add("Add a login page", "ready-for-design", &[]);
    let d = Daemon::start(&sb, &[]);
    wait_until(30, "the run's last log line", || {
        daemon_log(&sb).contains("run ended")
    });
    assert_eq!(sb.ticket(&id).status, "design-approved");
    let log = daemon_log(&sb);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("run{")).collect();
    let started = lines
        .iter()
        .position(|l| l.contains("run started"))
        .unwrap_or_else(|| panic!("no `run started` line at info by default:\n{log}"));
    let session = lines
        .iter()
        .position(|l| l.contains("agent session started"))
        .unwrap_or_else(|| panic!("no `agent session started` line:\n{log}"));
    let ended = lines
        .iter()
        .position(|l| l.contains("run ended"))
        .unwrap_or_else(|| panic!("no `run ended` line:\n{log}"));
    assert!(started < session && session < ended, "{log}");
    for line in &lines {
        for field in [
            format!("ticket={id}"),
            "role=architect".to_string(),
            "attempt=1".to_string(),
            "run_id=r".to_string(),
        ] {
            assert!(line.contains(&field), "{field} missing from {line:?}");
        }
    }
    for line in &lines[session..] {
        assert!(
            line.contains(&format!("session_id={SESSION}")),
            "the session is on every line once known: {line:?}"
        );
    }
    assert!(
        !lines[started].contains("session_id"),
        "not known yet when the run starts: {}",
        lines[started]
    );
    assert!(
        lines[ended].contains("outcome=success")
            && lines[ended].contains("to_status=design-approved"),
        "{}",
        lines[ended]
    );

    // Ticks with nothing to do add nothing to the log.
    let before = daemon_log(&sb);
    for _ in 0..2 {
        let seen = last_tick(&d);
        assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
        d.wait_state(20, "another tick", |s| s["last_tick"]["started_at"] != seen);
    }
    assert_eq!(daemon_log(&sb), before, "idle ticks logged something");
}

#[test]
fn a_cron_tick_stays_quiet_unless_something_went_wrong() {
    let sb = sandbox();
    let out = sb.sortie(&["pipeline", "tick", "--config", "pipeline.yaml"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "an empty board");
    sb.add("t", "ready-for-design", &[]);
    let out = sb.sortie(&["pipeline", "tick", "--config", "pipeline.yaml"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "a successful run logs nothing without -v"
    );
}

//! Hooks wired into the pipeline: the handoff event fires once per write-back, also
//! when the write-back is replayed after a crash, and a hanging hook does not hold the
//! pipeline up past its timeout.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Sandbox;

fn sandbox(hook: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 30
concurrency: {{max_in_flight: 4, per_role_max_in_flight: 4}}
agent: {{command: ["true"]}}
hooks:
  - {hook}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: done, requires_prior_role: architect}}
"#,
        roles = common::repo().join("roles").display(),
        hook = hook.replace(
            "LOG",
            &dir.path().join("handoffs.log").display().to_string()
        ),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

/// Appends each payload as one line, in one write, so concurrent hooks never interleave.
const RECORD: &str = r#"{event: tracker_pipeline.handoff, command: ["sh", "-c", "p=$$(cat); printf '%s\n' \"$$p\" >> LOG"], timeout_seconds: 10}"#;

fn handoffs(sb: &Sandbox) -> Vec<serde_json::Value> {
    std::fs::read_to_string(sb.path().join("handoffs.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("payload is JSON"))
        .collect()
}

#[test]
fn each_handoff_fires_once_with_the_documented_payload() {
    let sb = sandbox(RECORD);
    let id = sb.add("t", "ready-for-design", &[]);
    sb.drain(5);
    let events = handoffs(&sb);
    assert_eq!(events.len(), 2, "{events:#?}");
    let first = &events[0];
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "from_status",
            "handoff_event_name",
            "idempotency_key",
            "outcome",
            "role",
            "stage_attempt",
            "ticket_id",
            "to_status",
            "tracker"
        ]
    );
    assert_eq!(first["handoff_event_name"], "tracker_pipeline.handoff");
    assert_eq!(first["ticket_id"], id.as_str());
    assert_eq!(first["role"], "architect");
    assert_eq!(
        (first["from_status"].as_str(), first["to_status"].as_str()),
        (Some("ready-for-design"), Some("design-approved"))
    );
    assert_eq!(first["outcome"], "success");
    assert_eq!(
        first["idempotency_key"],
        sortie::block::idempotency_key("local", &id, "architect", "ready-for-design", 1)
    );
}

#[test]
fn a_crash_between_the_transition_and_the_hook_still_delivers_exactly_once() {
    let sb = sandbox(RECORD);
    let ids: Vec<String> = (0..6)
        .map(|i| sb.add(&format!("t{i}"), "ready-for-design", &[]))
        .collect();
    let mut offset = 0;
    for round in 0..40 {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .current_dir(sb.path())
            .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string());
        if round % 2 == 0 {
            cmd.env("SORTIE_FAULT", "after_transition");
        }
        offset += 31;
        let out = cmd.output().unwrap();
        assert!(
            out.status.success() || out.status.signal() == Some(9),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if round > 2 && ids.iter().all(|id| sb.ticket(id).status == "done") {
            break;
        }
    }
    // One more clean tick replays anything left.
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env("SORTIE_CLOCK_OFFSET_SECONDS", (offset + 31).to_string())
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for e in handoffs(&sb) {
        *per_key
            .entry(e["idempotency_key"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(
        per_key.len(),
        ids.len() * 2,
        "one handoff per ticket and role: {per_key:#?}"
    );
    assert!(
        per_key.values().all(|n| *n == 1),
        "a handoff was delivered twice: {per_key:#?}"
    );
}

#[test]
fn a_hanging_hook_is_killed_at_its_timeout_and_the_pipeline_moves_on() {
    let sb = sandbox(r#"{event: "*", command: ["sleep", "1000"], timeout_seconds: 1}"#);
    let id = sb.add("t", "ready-for-design", &[]);
    let started = Instant::now();
    sb.tick();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the tick waited for the hook: {:?}",
        started.elapsed()
    );
    assert_eq!(
        sb.ticket(&id).status,
        "design-approved",
        "the handoff happened"
    );
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        status.contains("timed out"),
        "failing hooks are shown in pipeline status:\n{status}"
    );
}

//! Command hooks from config (issue #8): payload on stdin and in `SORTIE_EVENT_*`, argv never
//! through a shell, relative programs resolved against the config file, and a hanging hook
//! killed with its whole process group at its timeout.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;
use sortie::config::Config;
use sortie::hooks::{DeliveryStatus, Event, Handoff, HookRegistry};

fn handoff() -> Event {
    Event::handoff(&Handoff {
        tracker: "local".into(),
        ticket_id: "T-42".into(),
        role: "backend".into(),
        from_status: "design-approved".into(),
        to_status: "code-review".into(),
        stage_attempt: 3,
        success: true,
        idempotency_key: "abc123".into(),
    })
}

/// A registry from a config in `dir` whose `hooks:` section is `hooks`.
fn registry(dir: &Path, hooks: &str) -> HookRegistry {
    let text = format!(
        "tracker: {{kind: local, path: board}}\nagent: {{command: [my-agent]}}\nactive_states: [todo]\nhooks:\n{hooks}"
    );
    let config = Config::parse_str_with_env(&text, Some(&dir.join("pipeline.yaml")), &|_| None)
        .unwrap_or_else(|e| panic!("{e}"));
    HookRegistry::from_config(&config)
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_command_gets_the_payload_on_stdin_and_as_environment_variables() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("hooks")).unwrap();
    script(
        &tmp.path().join("hooks"),
        "notify.sh",
        "cat > payload.json\nenv | grep '^SORTIE_EVENT_' | sort > env.txt",
    );
    let hooks = registry(
        tmp.path(),
        "  - {event: tracker_pipeline.handoff, command: [./hooks/notify.sh], timeout_seconds: 30}\n",
    );
    let event = handoff();
    let results = hooks.fire(event.clone()).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, DeliveryStatus::Delivered, "{results:?}");

    // The hook ran in the config file's directory.
    let payload = std::fs::read_to_string(tmp.path().join("payload.json")).unwrap();
    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload, serde_json::Value::Object(event.payload.clone()));
    let env = std::fs::read_to_string(tmp.path().join("env.txt")).unwrap();
    for line in [
        "SORTIE_EVENT_NAME=tracker_pipeline.handoff",
        "SORTIE_EVENT_DELIVERY_ID=abc123",
        "SORTIE_EVENT_HANDOFF_EVENT_NAME=tracker_pipeline.handoff",
        "SORTIE_EVENT_TRACKER=local",
        "SORTIE_EVENT_TICKET_ID=T-42",
        "SORTIE_EVENT_ROLE=backend",
        "SORTIE_EVENT_FROM_STATUS=design-approved",
        "SORTIE_EVENT_TO_STATUS=code-review",
        "SORTIE_EVENT_STAGE_ATTEMPT=3",
        "SORTIE_EVENT_OUTCOME=success",
        "SORTIE_EVENT_IDEMPOTENCY_KEY=abc123",
    ] {
        assert!(env.lines().any(|l| l == line), "missing {line} in:\n{env}");
    }
}

#[tokio::test]
async fn arguments_are_never_interpreted_by_a_shell() {
    let tmp = tempfile::tempdir().unwrap();
    script(tmp.path(), "args.sh", "printf '%s\\n' \"$@\" > args.txt");
    let hooks = registry(
        tmp.path(),
        "  - {event: \"*\", command: [./args.sh, \"$$(touch pwned)\", \"a; touch pwned2\"]}\n",
    );
    let results = hooks.fire(handoff()).await;
    assert_eq!(results[0].status, DeliveryStatus::Delivered, "{results:?}");
    let args = std::fs::read_to_string(tmp.path().join("args.txt")).unwrap();
    assert_eq!(args, "$(touch pwned)\na; touch pwned2\n");
    assert!(!tmp.path().join("pwned").exists() && !tmp.path().join("pwned2").exists());
}

#[tokio::test]
async fn a_hanging_hook_is_killed_with_its_process_group_at_its_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let pids = tmp.path().join("pids");
    let hooks = registry(
        tmp.path(),
        &format!(
            "  - {{event: \"*\", command: [sh, -c, \"sleep 1000\"], timeout_seconds: 1}}\n\
             \x20 - {{event: \"*\", command: [sh, -c, \"echo $$$$ > {0}; sleep 1000 & echo $$! >> {0}; wait\"], timeout_seconds: 1}}\n",
            pids.display()
        ),
    );
    let started = Instant::now();
    let results = hooks.fire(handoff()).await;
    let waited = started.elapsed();

    assert!(
        waited >= Duration::from_secs(1),
        "returned early: {waited:?}"
    );
    // Far below the hooks' `sleep 1000`: fire returned at the timeout, not when they ended
    // (a loose bound: a loaded machine may take a few seconds to kill and reap).
    assert!(
        waited < Duration::from_secs(30),
        "fire blocked past the timeout: {waited:?}"
    );
    for result in &results {
        assert_eq!(result.status, DeliveryStatus::TimedOut, "{result:?}");
        assert_eq!(result.error.as_deref(), Some("timed out after 1s"));
    }
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "the hook's shell and its background sleep");
    // The shell was reaped by the sink; the orphaned sleep was killed and is at most a
    // zombie until init reaps it.
    let limit = Duration::from_secs(10);
    assert!(
        common::gone_within(pids[0], limit),
        "hook shell {} still running",
        pids[0]
    );
    assert!(
        common::gone_within(pids[1], limit),
        "hook's child {} still running",
        pids[1]
    );
}

#[tokio::test]
async fn a_failing_command_reports_its_exit_status_and_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let hooks = registry(
        tmp.path(),
        "  - {event: \"*\", command: [sh, -c, \"echo boom >&2; exit 3\"]}\n  - {event: \"*\", command: [./missing.sh]}\n",
    );
    let results = hooks.fire(handoff()).await;
    assert_eq!(results[0].status, DeliveryStatus::Failed);
    assert_eq!(
        results[0].error.as_deref(),
        Some("exited with code 3: boom")
    );
    assert_eq!(results[1].status, DeliveryStatus::Failed);
    let error = results[1].error.as_deref().unwrap();
    assert!(
        error.starts_with("cannot start ") && error.contains("missing.sh"),
        "{error}"
    );
}

//! The agent runner against real processes: outcomes, timeouts, stalls, cancellation,
//! and no orphan processes. Time is paused where it can be, so timeouts cost no wall time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common;
use sortie::agent::{run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan};
use sortie::config::AgentPreset;
use tokio_util::sync::CancellationToken;

fn plan(dir: &Path, command: &[&str], timeout: u64, stall: Option<u64>) -> RunPlan {
    RunPlan {
        command: command.iter().map(|s| s.to_string()).collect(),
        preset: AgentPreset::Command,
        env: BTreeMap::from([("EXTRA".to_string(), "from-config".to_string())]),
        env_remove: vec!["SORTIE_TEST_SECRET".to_string()],
        prompt: "do the thing\n".to_string(),
        workspace: dir.join("ws"),
        run_dir: dir.join("run"),
        timeout: Duration::from_secs(timeout),
        stall_timeout: stall.map(Duration::from_secs),
        handshake_timeout: Duration::from_secs(60),
        resume: None,
        resume_command: None,
        stream: Default::default(),
        sandbox: None,
    }
}

async fn run(plan: &RunPlan) -> RunEnd {
    let vars = BTreeMap::from([("SORTIE_TICKET_ID".to_string(), "42".to_string())]);
    run_agent(AgentSpec { plan, vars }, CancellationToken::new(), |_| {}).await
}

fn finished(end: RunEnd) -> (AgentOutcome, String) {
    match end {
        RunEnd::Finished(r) => {
            let log = std::fs::read_to_string(&r.log_path).unwrap_or_default();
            (r.outcome, log)
        }
        RunEnd::Cancelled { .. } => panic!("unexpected cancel"),
    }
}

fn reason(outcome: &AgentOutcome) -> &str {
    match outcome {
        AgentOutcome::Failure { reason_code, .. } => reason_code,
        AgentOutcome::Success { .. } => "success",
        AgentOutcome::Question(_) => "question",
    }
}

#[tokio::test]
async fn prompt_on_stdin_env_and_workspace_reach_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"read line; echo "stdin=$line id=$SORTIE_TICKET_ID extra=$EXTRA"; cat "$SORTIE_PROMPT_FILE"; pwd"#;
    let p = plan(dir.path(), &["sh", "-c", script], 30, None);
    let (outcome, log) = finished(run(&p).await);
    let AgentOutcome::Success { summary, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        summary.contains("stdin=do the thing id=42 extra=from-config"),
        "{summary}"
    );
    assert!(
        summary.contains(&dir.path().join("ws").display().to_string()),
        "runs in the workspace: {summary}"
    );
    assert_eq!(
        log.lines().next(),
        Some("stdin=do the thing id=42 extra=from-config")
    );
}

#[tokio::test]
async fn the_result_file_decides_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"printf 'outcome: failure\nreason_code: tests.failed\ncategory: permanent\nnext_action: manual\ndetail: red\n' > "$SORTIE_RESULT_FILE""#;
    let p = plan(dir.path(), &["sh", "-c", script], 30, None);
    let (outcome, _) = finished(run(&p).await);
    assert_eq!(reason(&outcome), "tests.failed");
}

#[tokio::test]
async fn exit_codes_and_spawn_failures_classify() {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, log) = finished(
        run(&plan(
            dir.path(),
            &["sh", "-c", "echo oops >&2; exit 4"],
            30,
            None,
        ))
        .await,
    );
    assert_eq!(reason(&outcome), "agent.exit_nonzero");
    assert!(log.contains("oops"), "stderr goes to the run log");
    let (outcome, _) = finished(run(&plan(dir.path(), &["/nonexistent/agent"], 30, None)).await);
    assert_eq!(reason(&outcome), "agent.spawn_failed");
}

#[tokio::test(start_paused = true)]
async fn a_run_over_its_timeout_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(dir.path(), &["sh", "-c", "exec sleep 1000"], 3600, None);
    let (outcome, _) = finished(run(&p).await);
    assert_eq!(reason(&outcome), "agent.timeout");
}

/// Real time here: the output must reach the log before the timeout fires.
#[tokio::test]
async fn a_timed_out_run_keeps_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        dir.path(),
        &["sh", "-c", "echo started; exec sleep 1000"],
        1,
        None,
    );
    let (outcome, log) = finished(run(&p).await);
    assert_eq!(reason(&outcome), "agent.timeout");
    assert_eq!(log, "started\n");
}

#[tokio::test(start_paused = true)]
async fn an_agent_silent_for_the_stall_timeout_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(
        dir.path(),
        &["sh", "-c", "echo hello; exec sleep 1000"],
        3600,
        Some(300),
    );
    let (outcome, _) = finished(run(&p).await);
    assert_eq!(reason(&outcome), "agent.stalled");
}

#[tokio::test]
async fn cancel_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // The agent starts a grandchild and waits; both must die on cancel.
    let script = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
    let p = plan(dir.path(), &["sh", "-c", &script], 3600, None);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let watcher = pidfile.clone();
    tokio::spawn(async move {
        // Not as soon as the file exists: `>` creates it before `echo` writes the pid.
        pid_line(&watcher).await;
        trigger.cancel();
    });
    let end = run_agent(
        AgentSpec {
            plan: &p,
            vars: BTreeMap::new(),
        },
        cancel,
        |_| {},
    )
    .await;
    assert!(matches!(end, RunEnd::Cancelled { .. }), "{end:?}");
    let pid = pid_in(&pidfile);
    assert!(
        common::gone_within(pid, Duration::from_secs(20)),
        "grandchild {pid} outlived its run"
    );
}

/// Wait until `path` holds a whole line (a pid and its newline), polling every 20 ms,
/// and return the pid. A file that exists but is empty or has no newline yet is a
/// shell between creating it and writing to it.
async fn pid_line(path: &Path) -> i32 {
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some((line, _)) = text.split_once('\n') {
                if let Ok(pid) = line.trim().parse() {
                    return pid;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Regression (#30): `cancel_kills_the_whole_process_group` cancelled as soon as the
/// pid file existed, before the shell had written the pid, and then failed to parse
/// an empty file (`ParseIntError { kind: Empty }`). The wait is for a whole line.
#[tokio::test(start_paused = true)]
async fn the_pid_file_wait_ignores_a_file_not_written_yet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("child.pid");
    std::fs::write(&path, "").unwrap();
    let waiter = tokio::spawn({
        let path = path.clone();
        async move { pid_line(&path).await }
    });
    // Paused time: the waiter polls the file many times meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiter.is_finished(), "returned for an empty pid file");
    std::fs::write(&path, "12345").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !waiter.is_finished(),
        "returned for a pid without its newline"
    );
    std::fs::write(&path, "12345\n").unwrap();
    assert_eq!(waiter.await.unwrap(), 12345);
}

fn pid_in(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn run_vars() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "SORTIE_RUN_ID".to_string(),
        format!("runner-{}", uuid::Uuid::new_v4().simple()),
    )])
}

/// Issue #19: Claude Code's Bash tool starts commands with setsid, out of the agent's
/// process group; a cancel kills them too.
#[tokio::test]
async fn cancel_kills_a_descendant_in_a_session_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("escaped.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 1000' & wait",
        pidfile.display()
    );
    let p = plan(dir.path(), &["sh", "-c", &script], 3600, None);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let watcher = pidfile.clone();
    tokio::spawn(async move {
        pid_line(&watcher).await;
        trigger.cancel();
    });
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let end = run_agent(spec, cancel, |_| {}).await;
    assert!(matches!(end, RunEnd::Cancelled { .. }), "{end:?}");
    let pid = pid_in(&pidfile);
    assert!(
        common::gone_within(pid, Duration::from_secs(20)),
        "the setsid child {pid} outlived its run"
    );
}

/// Issue #19: an agent that exits leaving a detached child behind (re-parented, in its own
/// session) does not leak it: the run-id mark finds it.
#[tokio::test]
async fn a_detached_child_left_by_an_agent_that_exited_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("left.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {}.tmp; mv {0}.tmp {0}; exec sleep 1000' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {0} ]; do sleep 0.01; done; exit 0",
        pidfile.display()
    );
    let p = plan(dir.path(), &["sh", "-c", &script], 3600, None);
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let end = run_agent(spec, CancellationToken::new(), |_| {}).await;
    let (outcome, _) = finished(end);
    assert!(outcome.is_success(), "{outcome:?}");
    let pid = pid_in(&pidfile);
    assert!(
        common::gone_within(pid, Duration::from_secs(20)),
        "the detached child {pid} outlived its run"
    );
}

/// Issue #19: a silent child that uses CPU (a compile) is alive; a silent idle one stalls.
#[tokio::test]
async fn cpu_time_of_descendants_counts_as_liveness_for_the_stall_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let busy = "timeout 4 sh -c 'while :; do :; done'; echo compiled";
    let p = plan(dir.path(), &["sh", "-c", busy], 60, Some(1));
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let (outcome, _) = finished(run_agent(spec, CancellationToken::new(), |_| {}).await);
    assert!(
        outcome.is_success(),
        "a busy silent child is not a stall: {outcome:?}"
    );

    let p = plan(
        dir.path(),
        &["sh", "-c", "sleep 4; echo slept"],
        60,
        Some(1),
    );
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let (outcome, _) = finished(run_agent(spec, CancellationToken::new(), |_| {}).await);
    assert_eq!(reason(&outcome), "agent.stalled");
}

/// Issue #53: among 2,000 idle processes of the host, an agent that exits leaving a child
/// in a session of its own (setsid) still does not leak it: the run finds it without
/// reading the others.
#[tokio::test]
async fn among_2000_idle_processes_a_detached_grandchild_dies_at_run_end() {
    let _idle = common::idle_host::IdleHost::start(2000);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("left.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {}.tmp; mv {0}.tmp {0}; exec sleep 1000' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {0} ]; do sleep 0.01; done; exit 0",
        pidfile.display()
    );
    let p = plan(dir.path(), &["sh", "-c", &script], 3600, None);
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let (outcome, _) = finished(run_agent(spec, CancellationToken::new(), |_| {}).await);
    assert!(outcome.is_success(), "{outcome:?}");
    let pid = pid_in(&pidfile);
    assert!(
        common::gone_within(pid, Duration::from_secs(20)),
        "the detached grandchild {pid} outlived its run"
    );
}

/// Issue #53: the same at cancel (a card moved), with the agent still running.
#[tokio::test]
async fn among_2000_idle_processes_a_detached_grandchild_dies_at_cancel() {
    let _idle = common::idle_host::IdleHost::start(2000);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("escaped.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 1000' </dev/null >/dev/null 2>&1 & sleep 1000",
        pidfile.display()
    );
    let p = plan(dir.path(), &["sh", "-c", &script], 3600, None);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let watcher = pidfile.clone();
    tokio::spawn(async move {
        // Bounded: a grandchild that never wrote its pid fails the test below.
        let _ = tokio::time::timeout(Duration::from_secs(60), pid_line(&watcher)).await;
        trigger.cancel();
    });
    let spec = AgentSpec {
        plan: &p,
        vars: run_vars(),
    };
    let end = run_agent(spec, cancel, |_| {}).await;
    assert!(matches!(end, RunEnd::Cancelled { .. }), "{end:?}");
    let pid = pid_in(&pidfile);
    assert!(
        common::gone_within(pid, Duration::from_secs(20)),
        "the setsid grandchild {pid} outlived its cancelled run"
    );
}

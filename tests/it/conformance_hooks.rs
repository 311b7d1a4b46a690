//! Issue #39, items 5-7 (Symphony SPEC.md section 17, hook timeouts): a `before_run`
//! hook past `workspace.hook_timeout_seconds` aborts the run before the agent starts;
//! `after_run` and `before_remove` past it are logged and ignored. Each time the hook's
//! whole process group is killed: a `sleep` the hook started in the background is gone
//! too. The real binary ticking a local board.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::Sandbox;
use sortie::block::OutcomeBlock;

/// The hook limit. Long enough for a loaded machine to start the hook's shell and write
/// its pids before the limit kills it (the pids are what the test checks).
const HOOK_TIMEOUT: u64 = 5;

/// One stage, todo -> done (terminal), whose `hook` workspace hook hangs: it writes its
/// shell's pid and the pid of a background `sleep` to `pids` beside the config, then
/// waits for the sleep. The agent appends `ran` to `agent.log` and succeeds.
fn sandbox(hook: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent: {{command: ["sh", "-c", "echo ran >> {agent_log}"], timeout_seconds: 60}}
retry: {{max_attempts: 3, backoff_base_seconds: 60, backoff_max_seconds: 60}}
workspace:
  prune_every_ticks: 0
  hook_timeout_seconds: {HOOK_TIMEOUT}
  hooks:
    {hook}: ["sh", "-c", "echo $$$$ > {pids}.tmp; sleep 1000 & echo $$! >> {pids}.tmp; mv {pids}.tmp {pids}; wait"]
pipeline_stages:
  - {{role: architect, claim_status: todo, success_status: done}}
"#,
        roles = common::repo().join("roles").display(),
        agent_log = dir.path().join("agent.log").display(),
        pids = pids.display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

fn agent_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("agent.log")).unwrap_or_default()
}

fn workspace(sb: &Sandbox, id: &str) -> PathBuf {
    sb.path().join("state/workspaces").join(id)
}

/// One tick; its JSON report and its log (stderr).
fn tick(sb: &Sandbox) -> (serde_json::Value, String) {
    let out = sb.sortie(&["pipeline", "tick", "--config", "pipeline.yaml", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tick failed: {stderr}");
    let report = serde_json::from_slice(&out.stdout).expect("tick --json prints JSON");
    (report, stderr)
}

/// The hook's shell and its background `sleep` are both gone (killed, or zombies no one
/// reaped yet). The limit is a bound on a loaded machine, not a measurement.
fn assert_the_process_group_is_gone(sb: &Sandbox) {
    let pids = std::fs::read_to_string(sb.path().join("pids"))
        .expect("the hook wrote its pids before its limit");
    let pids: Vec<i32> = pids.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "the hook's shell and its background sleep");
    for (pid, what) in pids
        .iter()
        .zip(["the hook's shell", "its background sleep"])
    {
        assert!(
            common::gone_within(*pid, Duration::from_secs(30)),
            "{what} ({pid}) is still running"
        );
    }
}

#[test]
fn hook_timeout_before_run_aborts_the_run_and_kills_its_process_group() {
    let sb = sandbox("before_run");
    let id = sb.add("t", "todo", &[]);
    let (report, _) = tick(&sb);
    assert_eq!(report["runs"][0]["outcome"], "failure", "{report:#}");
    assert_eq!(report["runs"][0]["reason_code"], "workspace.hook_failed");
    assert_eq!(agent_log(&sb), "", "the agent never ran");
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert!(
        f.detail.contains("before_run hook failed")
            && f.detail.contains(&format!(
                "did not finish within {HOOK_TIMEOUT}s and was killed"
            )),
        "the reason says which hook and why: {}",
        f.detail
    );
    assert_eq!(sb.ticket(&id).status, "todo", "no handoff");
    assert_the_process_group_is_gone(&sb);
}

#[test]
fn hook_timeout_after_run_is_logged_and_ignored_and_kills_its_process_group() {
    let sb = sandbox("after_run");
    let id = sb.add("t", "todo", &[]);
    let (report, log) = tick(&sb);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(report["runs"][0]["to_status"], "done", "{report:#}");
    assert_eq!(agent_log(&sb), "ran\n");
    assert_eq!(
        sb.ticket(&id).status,
        "done",
        "the run's outcome is unchanged"
    );
    assert!(
        log.contains("after_run workspace hook failed")
            && log.contains(&format!(
                "did not finish within {HOOK_TIMEOUT}s and was killed"
            )),
        "the timeout is logged: {log}"
    );
    assert!(
        !workspace(&sb, &id).exists(),
        "the cleanup after the run still happened"
    );
    assert_the_process_group_is_gone(&sb);
}

#[test]
fn hook_timeout_before_remove_is_logged_and_ignored_and_kills_its_process_group() {
    let sb = sandbox("before_remove");
    let id = sb.add("t", "todo", &[]);
    let (report, log) = tick(&sb);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "done");
    assert!(
        log.contains("before_remove workspace hook failed")
            && log.contains(&format!(
                "did not finish within {HOOK_TIMEOUT}s and was killed"
            )),
        "the timeout is logged: {log}"
    );
    assert!(
        !workspace(&sb, &id).exists(),
        "the workspace was removed anyway"
    );
    assert!(
        !sb.path().join("state/workspace-ids").join(&id).exists(),
        "with its owner record"
    );
    assert_the_process_group_is_gone(&sb);
}

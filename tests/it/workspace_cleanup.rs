//! Issue #14: the workspaces of finished tickets are removed (the `before_remove` hook
//! first, its failure logged and ignored) when a write-back moves the ticket to a
//! terminal status, when reconcile finds it terminal, and when the daemon starts; the
//! workspace of a ticket that is gone, missing from a listing or on a status outside the
//! pipeline is kept; `after_run` and `before_remove` failures never fail a run.

use crate::common;
use crate::daemon_e2e::{wait_until, Daemon};

use common::Sandbox;

/// Two stages (architect: ready-for-design -> design-approved, backend: design-approved
/// -> done); the agent fails on tickets whose title contains `fail`, else leaves a file
/// in the workspace. Every hook appends `<hook> <ticket>` to `hooks.log`; `after_run`
/// and `before_remove` then fail.
fn sandbox(agent_sleep: u64) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hooks.log");
    let hook = |name: &str, exit: u8| {
        format!(
            r#"["sh", "-c", "echo {name} $$SORTIE_TICKET_ID >> {}; exit {exit}"]"#,
            log.display()
        )
    };
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 30
concurrency: {{per_role_max_in_flight: 4}}
agent:
  command: ["sh", "-c", "sleep {agent_sleep}; case \"$$SORTIE_TICKET_TITLE\" in *fail*) exit 1;; esac; echo work > work-$$SORTIE_ROLE.txt"]
retry: {{max_attempts: 3, backoff_base_seconds: 60, backoff_max_seconds: 60}}
terminal_states: [done, cancelled]
workspace:
  hooks:
    after_create: {after_create}
    after_run: {after_run}
    before_remove: {before_remove}
  hook_timeout_seconds: 10
  prune_every_ticks: 0
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: done, requires_prior_role: architect}}
"#,
        roles = common::repo().join("roles").display(),
        after_create = hook("after_create", 0),
        after_run = hook("after_run", 3),
        before_remove = hook("before_remove", 4),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

fn workspace(sb: &Sandbox, id: &str) -> std::path::PathBuf {
    sb.path().join("state/workspaces").join(id)
}

fn hooks_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("hooks.log")).unwrap_or_default()
}

fn move_to(sb: &Sandbox, id: &str, status: &str) {
    sb.ok(&["board", "move", "--board", "board", id, status]);
}

#[test]
fn a_write_back_to_a_terminal_status_removes_the_workspace_and_failing_hooks_fail_nothing() {
    let sb = sandbox(0);
    let id = sb.add("t", "ready-for-design", &[]);

    let first = sb.tick_json(&[]);
    assert_eq!(first["runs"][0]["outcome"], "success", "{first:#}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    assert!(
        workspace(&sb, &id).join("work-architect.txt").is_file(),
        "a non-terminal status keeps the workspace"
    );

    let second = sb.tick_json(&[]);
    assert_eq!(
        second["runs"][0]["outcome"], "success",
        "a failing after_run or before_remove hook does not fail the run: {second:#}"
    );
    assert_eq!(second["runs"][0]["to_status"], "done", "{second:#}");
    assert_eq!(sb.ticket(&id).status, "done");
    assert!(
        !workspace(&sb, &id).exists(),
        "the write-back to done removed the workspace"
    );
    assert!(
        !sb.path().join("state/workspace-ids").join(&id).exists(),
        "and its owner record"
    );
    assert_eq!(
        hooks_log(&sb),
        format!("after_create {id}\nafter_run {id}\nafter_run {id}\nbefore_remove {id}\n"),
        "before_remove ran once, after the last run"
    );
    // The success block is on the ticket: nothing of the removal reached the tracker.
    assert_eq!(sb.blocks(&id).len(), 2);
}

#[test]
fn reconcile_removes_the_workspace_of_a_ticket_found_terminal_and_keeps_the_others() {
    let sb = sandbox(0);
    let closed = sb.add("fail then closed", "ready-for-design", &[]);
    let parked = sb.add("fail then parked", "ready-for-design", &[]);
    let deleted = sb.add("fail then deleted", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    let outcomes: Vec<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["failure"; 3], "{report:#}");
    for id in [&closed, &parked, &deleted] {
        assert!(
            workspace(&sb, id).is_dir(),
            "a failed run keeps its workspace"
        );
    }

    // A person closes one, parks one on a status no stage claims, deletes one.
    move_to(&sb, &closed, "done");
    move_to(&sb, &parked, "backlog");
    std::fs::remove_dir_all(sb.board_path().join(&deleted)).unwrap();

    // Their retries are waiting (60 s backoff): only reconcile looks at them.
    let report = sb.tick_json(&[]);
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    assert!(
        !workspace(&sb, &closed).exists(),
        "the ticket reconcile found terminal lost its workspace"
    );
    assert!(
        workspace(&sb, &parked).is_dir(),
        "a ticket on a status outside the pipeline keeps its workspace"
    );
    assert!(
        workspace(&sb, &deleted).is_dir(),
        "a ticket the tracker does not find keeps its workspace"
    );
    let log = hooks_log(&sb);
    assert!(log.contains(&format!("before_remove {closed}\n")), "{log}");
    assert_eq!(log.matches("before_remove").count(), 1, "{log}");
}

#[test]
fn a_ticket_closed_during_its_run_loses_its_workspace_once_the_run_has_stopped() {
    let sb = sandbox(30);
    let id = sb.add("t", "ready-for-design", &[]);
    let daemon = Daemon::start(&sb, &[]);
    daemon.wait_state(20, "the run to start", |s| {
        s["live_runs"].as_array().is_some_and(|r| r.len() == 1)
    });
    assert!(workspace(&sb, &id).is_dir());
    move_to(&sb, &id, "done");
    let refresh = daemon.post("/api/v1/refresh").send().unwrap();
    assert_eq!(refresh.status(), 202);
    wait_until(30, "the workspace of the closed ticket to go", || {
        !workspace(&sb, &id).exists()
    });
    let log = hooks_log(&sb);
    assert!(
        log.contains(&format!("after_run {id}\nbefore_remove {id}\n")),
        "the run's after_run ran before the workspace was removed: {log}"
    );
    assert_eq!(sb.ticket(&id).status, "done", "nothing was written back");
}

#[test]
fn the_daemon_removes_the_workspaces_of_finished_tickets_when_it_starts() {
    let sb = sandbox(0);
    let parked = sb.add("parked", "backlog", &[]);
    let done = sb.add("finished while no daemon ran", "done", &[]);
    let waiting = sb.add("waiting", "design-approved", &[]);
    // Workspaces as an earlier sortie left them; `0gone` belongs to no ticket at all.
    // Names sort `0gone`, `1`, `2`, `3`: the sweep decides them in that order.
    for name in ["0gone", parked.as_str(), done.as_str(), waiting.as_str()] {
        let ws = workspace(&sb, name);
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("work.txt"), "kept?").unwrap();
    }
    assert_eq!(
        (parked.as_str(), done.as_str(), waiting.as_str()),
        ("1", "2", "3")
    );
    // `waiting` needs an architect block to run, so the first tick runs nothing.
    let daemon = Daemon::start(&sb, &[]);
    wait_until(20, "the finished ticket's workspace to go", || {
        !workspace(&sb, &done).exists()
    });
    wait_until(20, "the sweep to decide the last workspace", || {
        std::fs::read_to_string(sb.path().join("state/prune-cursor")).is_ok_and(|c| c == waiting)
    });
    for kept in ["0gone", parked.as_str(), waiting.as_str()] {
        assert!(
            workspace(&sb, kept).join("work.txt").is_file(),
            "{kept} was kept"
        );
    }
    assert_eq!(hooks_log(&sb), format!("before_remove {done}\n"));
    drop(daemon);
}

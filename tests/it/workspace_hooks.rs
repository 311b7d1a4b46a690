//! Workspace hooks run at the right moments, a failing `before_run` fails the run,
//! and pruning removes only the workspaces of finished tickets.

use crate::common;

use common::Sandbox;

fn sandbox(before_run: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("hooks.log");
    let hook = |name: &str| {
        format!(
            r#"["sh", "-c", "echo {name} $$SORTIE_TICKET_ID $$SORTIE_ROLE >> {}"]"#,
            log.display()
        )
    };
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
concurrency: {{per_role_max_in_flight: 4}}
agent: {{command: ["sh", "-c", "echo ran $$SORTIE_ROLE >> {agent_log}; ls >> {agent_log}; touch made-by-$$SORTIE_ROLE"]}}
workspace:
  hooks:
    after_create: {after_create}
    before_run: {before_run}
    after_run: {after_run}
    before_remove: {before_remove}
  hook_timeout_seconds: 10
  prune_every_ticks: 0
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: done, requires_prior_role: architect}}
"#,
        roles = common::repo().join("roles").display(),
        agent_log = dir.path().join("agent.log").display(),
        after_create = hook("after_create"),
        before_run = if before_run.is_empty() {
            hook("before_run")
        } else {
            before_run.to_string()
        },
        after_run = hook("after_run"),
        before_remove = hook("before_remove"),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

fn read(sb: &Sandbox, name: &str) -> String {
    std::fs::read_to_string(sb.path().join(name)).unwrap_or_default()
}

#[test]
fn hooks_run_around_runs_and_the_workspace_is_shared_by_roles() {
    let sb = sandbox("");
    let id = sb.add("t", "ready-for-design", &[]);
    sb.drain(5);
    assert_eq!(sb.ticket(&id).status, "done");
    assert_eq!(
        read(&sb, "hooks.log"),
        format!(
            "after_create {id} architect\nbefore_run {id} architect\nafter_run {id} architect\n\
             before_run {id} backend\nafter_run {id} backend\nbefore_remove {id}\n"
        ),
        "after_create once, then before/after each run, and before_remove once the \
         ticket is done"
    );
    assert_eq!(
        read(&sb, "agent.log"),
        "ran architect\nran backend\nmade-by-architect\n",
        "backend found architect's file: the workspace is shared"
    );
    let ws = sb.path().join("state/workspaces").join(&id);
    assert!(!ws.exists(), "done is terminal: the workspace went");
}

#[test]
fn a_failing_before_run_hook_fails_the_run_without_running_the_agent() {
    let sb = sandbox(r#"["sh", "-c", "echo no disk >&2; exit 7"]"#);
    let id = sb.add("t", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "failure", "{report:#}");
    assert_eq!(report["runs"][0]["reason_code"], "workspace.hook_failed");
    assert_eq!(read(&sb, "agent.log"), "", "the agent did not run");
    let blocks = sb.blocks(&id);
    let sortie::block::OutcomeBlock::Failure(f) = &blocks[0] else {
        panic!("{blocks:?}")
    };
    assert!(
        f.detail.contains("before_run hook failed") && f.detail.contains("no disk"),
        "{}",
        f.detail
    );
}

#[test]
fn prune_removes_only_workspaces_of_finished_tickets() {
    let sb = sandbox("");
    let done = sb.add("done one", "ready-for-design", &[]);
    let open = sb.add("still open", "ready-for-design", &[]);
    sb.tick(); // both get workspaces; both move to design-approved
    sb.ok(&["board", "move", "--board", "board", &done, "done"]);

    let dry = sb.ok(&[
        "workspaces",
        "prune",
        "--config",
        "pipeline.yaml",
        "--dry-run",
    ]);
    let ws = |id: &str| sb.path().join("state/workspaces").join(id);
    assert!(
        dry.contains(&format!(
            "would remove {} (ticket {done}): ticket is done",
            ws(&done).display()
        )),
        "{dry}"
    );
    assert!(
        dry.contains(&format!(
            "kept {} (ticket {open}): ticket is design-approved",
            ws(&open).display()
        )),
        "{dry}"
    );
    assert!(ws(&done).exists(), "a dry run removes nothing");

    sb.ok(&["workspaces", "prune", "--config", "pipeline.yaml"]);
    assert!(!ws(&done).exists());
    assert!(ws(&open).exists());
    assert!(read(&sb, "hooks.log").contains(&format!("before_remove {done}")));
}

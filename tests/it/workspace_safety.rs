//! Issue #14: a workspace that would let the agent work outside
//! `state_root/workspaces/` is refused with a `workspace.unsafe` policy failure, and
//! the agent never starts.

use crate::common;

use common::Sandbox;
use sortie::block::{Category, OutcomeBlock};

fn sandbox(agent_log: &std::path::Path, before_run: &str) -> Sandbox {
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "echo ran >> {log}; touch made-by-agent"]}}
workspace:
  hooks:
    before_run: {before_run}
  prune_every_ticks: 0
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: done, failure_status: blocked}}
"#,
        roles = common::repo().join("roles").display(),
        log = agent_log.display(),
    );
    Sandbox::with_config(&config)
}

fn only_failure(sb: &Sandbox, id: &str) -> sortie::block::FailureBlock {
    match sb.blocks(id).as_slice() {
        [OutcomeBlock::Failure(f)] => f.clone(),
        other => panic!("expected one failure block, found {other:?}"),
    }
}

#[test]
fn a_symlink_planted_at_the_workspace_path_is_refused_and_not_followed() {
    let outside = tempfile::tempdir().unwrap();
    let agent_log = outside.path().join("agent.log");
    let sb = sandbox(&agent_log, "[\"true\"]");
    let id = sb.add("t", "ready-for-design", &[]);
    let workspaces = sb.path().join("state/workspaces");
    std::fs::create_dir_all(&workspaces).unwrap();
    let target = outside.path().join("victim");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, workspaces.join(&id)).unwrap();

    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "failure", "{report:#}");
    assert_eq!(report["runs"][0]["reason_code"], "workspace.unsafe");
    let block = only_failure(&sb, &id);
    assert_eq!(block.reason_code, "workspace.unsafe");
    assert_eq!(block.category, Category::Policy);
    assert!(block.detail.contains("symlink"), "{}", block.detail);
    assert_eq!(
        sb.ticket(&id).status,
        "blocked",
        "a policy failure is final"
    );
    assert!(!agent_log.exists(), "the agent never started");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing was written through the link"
    );
}

#[test]
fn a_hook_that_links_the_workspace_root_outside_is_caught_before_the_agent() {
    let outside = tempfile::tempdir().unwrap();
    let agent_log = outside.path().join("agent.log");
    let hook = format!(r#"["ln", "-s", "{}", "escape"]"#, outside.path().display());
    let sb = sandbox(&agent_log, &hook);
    let id = sb.add("t", "ready-for-design", &[]);
    sb.tick_json(&[]);
    let block = only_failure(&sb, &id);
    assert_eq!(block.reason_code, "workspace.unsafe");
    assert!(block.detail.contains("escape"), "{}", block.detail);
    assert!(!agent_log.exists(), "the agent never started");
}

//! Issue #39, item 4 (Symphony SPEC.md section 17, workspace population errors): a clone
//! or fetch that fails, a base branch the remote does not have and a workspace path
//! that is not a worktree are `workspace.git_failed` runs in which the agent never
//! starts; a failing `after_create` hook fails the run and removes the half-made
//! workspace. Real `git`, a local bare repository as the remote, the real binary.

use crate::common;
use crate::git_workspaces::bare_remote;

use std::path::{Path, PathBuf};

use common::{git, Sandbox};
use sortie::block::{Category, FailureBlock, NextAction, OutcomeBlock};

/// What the pipeline's `workspace:` section holds besides `prune_every_ticks`.
struct Setup<'a> {
    /// `workspace.git` as flow YAML (`None`: a plain workspace).
    git: Option<String>,
    /// `workspace.hooks.after_create` as flow YAML.
    after_create: Option<&'a str>,
}

/// Two stages (architect: todo -> review, backend: review -> approved); the agent
/// appends its role to `agent.log` beside the config, leaves a file in the workspace (a
/// change: a git workspace's run that changes nothing is held) and succeeds.
fn sandbox(dir: tempfile::TempDir, setup: Setup) -> Sandbox {
    let mut workspace = String::from("  prune_every_ticks: 0\n");
    if let Some(git) = &setup.git {
        workspace.push_str(&format!("  git: {git}\n"));
    }
    if let Some(hook) = setup.after_create {
        workspace.push_str(&format!("  hooks: {{after_create: {hook}}}\n"));
    }
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "echo $$SORTIE_ROLE >> {agent_log}; echo x > work-$$SORTIE_ROLE.txt"], timeout_seconds: 60}}
retry: {{max_attempts: 3, backoff_base_seconds: 60, backoff_max_seconds: 60}}
workspace:
{workspace}pipeline_stages:
  - {{role: architect, claim_status: todo, success_status: review}}
  - {{role: backend, claim_status: review, success_status: approved, requires_prior_role: architect}}
"#,
        roles = common::repo().join("roles").display(),
        agent_log = dir.path().join("agent.log").display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

/// `workspace.git` pointing at `url`, branching from `base`, pushing nothing.
fn git_section(url: &str, base: &str) -> String {
    format!("{{url: \"{url}\", base: {base}, push: false}}")
}

/// A sandbox whose workspaces are worktrees of a bare remote in its own folder,
/// branching from `base`; returns the remote too.
fn git_sandbox(base: &str, after_create: Option<&str>) -> (Sandbox, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let remote = bare_remote(dir.path());
    let url = format!("file://{}", remote.display());
    let setup = Setup {
        git: Some(git_section(&url, base)),
        after_create,
    };
    (sandbox(dir, setup), remote)
}

/// The failure says `detail`, and is of `category` with `next` to do.
fn assert_failure(failure: &FailureBlock, detail: &str, category: Category, next: NextAction) {
    assert!(failure.detail.contains(detail), "{}", failure.detail);
    assert_eq!(
        (failure.category, failure.next_action),
        (category, next),
        "{failure:?}"
    );
}

fn agent_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("agent.log")).unwrap_or_default()
}

fn workspace(sb: &Sandbox, id: &str) -> PathBuf {
    sb.path().join("state/workspaces").join(id)
}

/// One tick that ran one run, which failed: its failure block.
fn tick_fails(sb: &Sandbox, id: &str, reason_code: &str) -> FailureBlock {
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"].as_array().map(Vec::len),
        Some(1),
        "{report:#}"
    );
    assert_eq!(report["runs"][0]["outcome"], "failure", "{report:#}");
    assert_eq!(report["runs"][0]["reason_code"], reason_code, "{report:#}");
    match sb.blocks(id).pop() {
        Some(OutcomeBlock::Failure(f)) => f,
        other => panic!("the last block on {id} is not a failure: {other:?}"),
    }
}

#[test]
fn workspace_population_errors_a_failing_clone_is_a_git_failed_run() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("missing.git").display());
    let sb = sandbox(
        dir,
        Setup {
            git: Some(git_section(&url, "main")),
            after_create: None,
        },
    );
    let id = sb.add("t", "todo", &[]);
    let failure = tick_fails(&sb, &id, "workspace.git_failed");
    assert_failure(
        &failure,
        "`git clone` failed",
        Category::Transient,
        NextAction::Retry,
    );
    assert_eq!(agent_log(&sb), "", "the agent did not run");
    assert!(
        !workspace(&sb, &id).exists(),
        "the empty workspace made for the run was removed"
    );
}

#[test]
fn workspace_population_errors_a_failing_fetch_is_a_git_failed_run() {
    let (sb, remote) = git_sandbox("main", None);
    let id = sb.add("t", "todo", &[]);
    let first = sb.tick_json(&[]);
    assert_eq!(first["runs"][0]["outcome"], "success", "{first:#}");
    assert_eq!(sb.ticket(&id).status, "review");
    std::fs::write(workspace(&sb, &id).join("notes.txt"), "kept").unwrap();

    // The mirror is cloned; now the remote is unreachable.
    std::fs::rename(&remote, remote.with_extension("moved")).unwrap();
    let failure = tick_fails(&sb, &id, "workspace.git_failed");
    assert_failure(
        &failure,
        "`git fetch` failed",
        Category::Transient,
        NextAction::Retry,
    );
    assert_eq!(agent_log(&sb), "architect\n", "backend's agent did not run");
    assert_eq!(
        std::fs::read_to_string(workspace(&sb, &id).join("notes.txt")).unwrap(),
        "kept",
        "the existing worktree and what it holds are kept"
    );
}

#[test]
fn workspace_population_errors_a_missing_base_branch_is_a_git_failed_run() {
    let (sb, _) = git_sandbox("trunk", None);
    let id = sb.add("t", "todo", &[]);
    let failure = tick_fails(&sb, &id, "workspace.git_failed");
    // A person fixes the config.
    let detail = "base branch \"trunk\" is not on the remote";
    assert_failure(&failure, detail, Category::Policy, NextAction::Manual);
    assert_eq!(agent_log(&sb), "", "the agent did not run");
    assert!(
        !workspace(&sb, &id).exists(),
        "no half-made workspace is left"
    );
}

/// A workspace path holding `make`'s files before the first run.
fn not_a_work_tree(make: impl FnOnce(&Path, &Path)) {
    let (sb, remote) = git_sandbox("main", None);
    let id = sb.add("t", "todo", &[]);
    let ws = workspace(&sb, &id);
    std::fs::create_dir_all(&ws).unwrap();
    make(&ws, &remote);
    std::fs::write(ws.join("precious.txt"), "mine").unwrap();

    let failure = tick_fails(&sb, &id, "workspace.git_failed");
    // A person moves it away.
    let detail = "is not a git worktree";
    assert_failure(&failure, detail, Category::Policy, NextAction::Manual);
    assert_eq!(agent_log(&sb), "", "the agent did not run");
    assert_eq!(
        std::fs::read_to_string(ws.join("precious.txt")).unwrap(),
        "mine",
        "nothing in it was touched"
    );
}

#[test]
fn workspace_population_errors_a_path_that_is_not_a_work_tree_is_a_git_failed_run() {
    not_a_work_tree(|_, _| {});
}

/// Regression: any `.git` passed for a worktree, so sortie ran the agent in a clone of
/// its own, outside the ticket's branch in the mirror.
#[test]
fn workspace_population_errors_a_clone_of_its_own_at_the_workspace_path_is_not_a_work_tree() {
    not_a_work_tree(|ws, remote| {
        git(
            ws.parent().unwrap(),
            &[
                "clone",
                "--quiet",
                &remote.display().to_string(),
                &ws.display().to_string(),
            ],
        );
    });
}

#[test]
fn workspace_population_errors_a_failing_after_create_fails_the_run_and_removes_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let sb = sandbox(
        dir,
        Setup {
            git: None,
            after_create: Some(
                r#"["sh", "-c", "echo half > half-made.txt; echo no npm >&2; exit 3"]"#,
            ),
        },
    );
    let id = sb.add("t", "todo", &[]);
    let failure = tick_fails(&sb, &id, "workspace.hook_failed");
    assert!(
        failure.detail.contains("after_create hook failed") && failure.detail.contains("no npm"),
        "{}",
        failure.detail
    );
    assert_eq!(agent_log(&sb), "", "the agent did not run");
    assert!(
        !workspace(&sb, &id).exists(),
        "the half-made workspace went"
    );
    assert!(
        !sb.path().join("state/workspace-ids").join(&id).exists(),
        "and its owner record"
    );
}

#[test]
fn workspace_population_errors_a_failing_after_create_in_a_git_workspace_removes_the_worktree() {
    let (sb, _) = git_sandbox(
        "main",
        Some(r#"["sh", "-c", "echo half > half-made.txt; exit 3"]"#),
    );
    let id = sb.add("t", "todo", &[]);
    let failure = tick_fails(&sb, &id, "workspace.hook_failed");
    assert!(
        failure.detail.contains("after_create hook failed"),
        "{}",
        failure.detail
    );
    assert_eq!(agent_log(&sb), "", "the agent did not run");
    let ws = workspace(&sb, &id);
    assert!(!ws.exists(), "the half-made worktree went");
    // The mirror forgot it too: only the mirror itself is listed.
    let mirrors: Vec<PathBuf> = std::fs::read_dir(sb.path().join("state/git"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.extension().is_some_and(|e| e == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    let listed = git(&mirrors[0], &["worktree", "list", "--porcelain"]);
    assert_eq!(
        listed
            .lines()
            .filter(|l| l.starts_with("worktree "))
            .count(),
        1,
        "{listed}"
    );
}

//! Issue #33: handoff evidence. The real binary, a scripted agent, a local board: a
//! success that changed nothing is withheld under `observed` and `strict` and handed on
//! under `off`; a commit is handed on with its figures in `evidence.change`; a workspace
//! that is not a git work tree proceeds under `observed` and is withheld under `strict`;
//! `no_change_needed` with its reason is honoured and shown; `expects_changes` is an
//! alias of `evidence` and the two together are refused.

use crate::common;
use crate::git_workspaces::{bare_remote, successes};

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Sandbox;
use sortie::block::{FailureBlock, OutcomeBlock, SuccessBlock};

/// What the agent does.
#[derive(Clone, Copy)]
enum Agent {
    /// Says success and changes nothing.
    Idles,
    /// Commits a two-line file, then says success.
    Commits,
    /// Changes nothing and says nothing needed changing, with its reason.
    DeclaresNoChange,
}

fn agent_script(dir: &Path, agent: Agent) -> PathBuf {
    let body = match agent {
        Agent::Idles => "printf 'outcome: success\\nsummary: looked around\\n' > \"$SORTIE_RESULT_FILE\"\n",
        Agent::Commits => {
            "printf 'one\\ntwo\\n' > feature.txt\n\
             git add feature.txt\n\
             git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"feature for $SORTIE_TICKET_ID\"\n\
             printf 'outcome: success\\nsummary: added the feature\\n' > \"$SORTIE_RESULT_FILE\"\n"
        }
        Agent::DeclaresNoChange => {
            "printf 'outcome: success\\nno_change_needed: true\\nsummary: already fixed upstream\\n' > \"$SORTIE_RESULT_FILE\"\n"
        }
    };
    let path = dir.join("agent.sh");
    std::fs::write(&path, format!("#!/bin/sh\ncat > /dev/null\n{body}")).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// One stage, `todo` -> `done`, with `stage_extra` appended to its mapping; in git
/// worktrees of a bare remote when `git` is set, else in plain directories (a temp dir
/// outside any repository).
fn sandbox(agent: Agent, git: bool, stage_extra: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let script = agent_script(dir.path(), agent);
    let git_line = if git {
        let remote = bare_remote(dir.path());
        format!(
            "  git: {{url: \"file://{}\", base: main}}\n",
            remote.display()
        )
    } else {
        String::new()
    };
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
{git_line}pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: done, failure_status: blocked, entry: true, exit: true{stage_extra}}}
"#,
        roles = common::repo().join("roles").display(),
        agent = script.display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

/// Add a ticket, run one tick, return it with its last block.
fn run_once(sb: &Sandbox) -> (String, OutcomeBlock) {
    let id = sb.add("widget", "todo", &[]);
    sb.tick();
    let blocks = sb.blocks(&id);
    let last = blocks.last().cloned().expect("a block on the ticket");
    (id, last)
}

fn held(sb: &Sandbox, id: &str, block: &OutcomeBlock) -> FailureBlock {
    let OutcomeBlock::Failure(f) = block else {
        panic!("expected the handoff withheld, got {block:?}")
    };
    assert_eq!(f.reason_code, "agent.no_changes", "{f:?}");
    assert_eq!(f.category.as_str(), "policy");
    assert_eq!(f.next_action.as_str(), "manual");
    assert_eq!(
        sb.ticket(id).status,
        "todo",
        "held where it was, not blocked"
    );
    // Held: the next tick does not run it again.
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
    f.clone()
}

fn handed_on(sb: &Sandbox, id: &str, block: &OutcomeBlock) -> SuccessBlock {
    let OutcomeBlock::Success(s) = block else {
        panic!("expected a handoff, got {block:?}")
    };
    assert_eq!(sb.ticket(id).status, "done");
    s.clone()
}

fn work(s: &SuccessBlock) -> Option<&str> {
    s.evidence.as_ref().and_then(|e| e.work.as_deref())
}

#[test]
fn a_success_that_changed_nothing_is_withheld_by_default_and_under_observed() {
    for extra in ["", ", evidence: observed", ", expects_changes: true"] {
        let sb = sandbox(Agent::Idles, true, extra);
        let (id, last) = run_once(&sb);
        let f = held(&sb, &id, &last);
        assert!(f.detail.contains("no new commit"), "{extra}: {}", f.detail);
        assert!(
            f.detail.contains("no_change_needed"),
            "the way out is named: {}",
            f.detail
        );
    }
}

#[test]
fn a_success_that_changed_nothing_is_withheld_under_strict() {
    let sb = sandbox(Agent::Idles, true, ", evidence: strict");
    let (id, last) = run_once(&sb);
    held(&sb, &id, &last);
}

#[test]
fn a_success_that_changed_nothing_is_handed_on_under_off_and_shown_absent() {
    for extra in [", evidence: off", ", expects_changes: false"] {
        let sb = sandbox(Agent::Idles, true, extra);
        let (id, last) = run_once(&sb);
        let s = handed_on(&sb, &id, &last);
        assert_eq!(work(&s), Some("absent"), "{extra}: {s:?}");
    }
}

#[test]
fn a_stage_that_reviews_is_not_checked_unless_asked() {
    let sb = sandbox(Agent::Idles, true, ", review: {fresh_session: true}");
    let (id, last) = run_once(&sb);
    handed_on(&sb, &id, &last);
    let sb = sandbox(
        Agent::Idles,
        true,
        ", review: {fresh_session: true}, evidence: observed",
    );
    let (id, last) = run_once(&sb);
    held(&sb, &id, &last);
}

#[test]
fn a_commit_is_handed_on_with_its_figures_in_the_block() {
    let sb = sandbox(Agent::Commits, true, ", evidence: strict");
    let (id, last) = run_once(&sb);
    let s = handed_on(&sb, &id, &last);
    assert_eq!(work(&s), Some("observed"));
    let change = s
        .evidence
        .as_ref()
        .and_then(|e| e.change.clone())
        .expect("evidence.change");
    assert_eq!(change.commits, 1);
    assert_eq!(change.files_changed, 1);
    assert_eq!((change.insertions, change.deletions), (2, 0));
    assert_eq!(change.head, s.artifacts["head"]);
    assert_ne!(change.head, change.base);
}

#[test]
fn a_workspace_that_is_not_a_work_tree_proceeds_under_observed() {
    let sb = sandbox(Agent::Idles, false, "");
    let (id, last) = run_once(&sb);
    let s = handed_on(&sb, &id, &last);
    assert_eq!(work(&s), Some("not_determinable"), "{s:?}");
}

#[test]
fn a_workspace_that_is_not_a_work_tree_is_withheld_under_strict_saying_why() {
    let sb = sandbox(Agent::Idles, false, ", evidence: strict");
    let (id, last) = run_once(&sb);
    let f = held(&sb, &id, &last);
    assert!(f.detail.contains("cannot be told"), "{}", f.detail);
    assert!(f.detail.contains("not a git work tree"), "{}", f.detail);
    assert!(f.detail.contains("strict"), "{}", f.detail);
}

#[test]
fn a_plain_workspace_that_is_a_work_tree_is_judged_by_its_baseline() {
    // The workspace becomes a repository when it is created (`after_create`), as a
    // team that clones its own checkout does; the run is judged against its head then.
    for (agent, handed) in [(Agent::Idles, false), (Agent::Commits, true)] {
        let sb = sandbox(agent, false, "");
        let config = std::fs::read_to_string(sb.config_path()).unwrap().replace(
            "  prune_every_ticks: 0\n",
            "  prune_every_ticks: 0\n  hooks:\n    after_create: [sh, -c, \"git init -q && git -c user.name=S -c user.email=s@example.com commit -q --allow-empty -m seed\"]\n",
        );
        std::fs::write(sb.config_path(), config).unwrap();
        let (id, last) = run_once(&sb);
        if handed {
            let s = handed_on(&sb, &id, &last);
            assert_eq!(work(&s), Some("observed"));
            let change = s
                .evidence
                .as_ref()
                .and_then(|e| e.change.clone())
                .expect("evidence.change");
            assert_eq!((change.commits, change.insertions), (1, 2));
        } else {
            let f = held(&sb, &id, &last);
            assert!(f.detail.contains("workspace"), "{}", f.detail);
        }
    }
}

#[test]
fn no_change_needed_with_its_reason_is_honoured_and_shown() {
    for (git, extra) in [
        (true, ""),
        (true, ", evidence: strict"),
        (false, ", evidence: strict"),
    ] {
        let sb = sandbox(Agent::DeclaresNoChange, git, extra);
        let (id, last) = run_once(&sb);
        let s = handed_on(&sb, &id, &last);
        assert_eq!(
            work(&s),
            Some("no_change_needed"),
            "git {git}{extra}: {s:?}"
        );
        assert_eq!(s.summary, "already fixed upstream");
        let all = sb.blocks(&id);
        assert_eq!(successes(&all).len(), 1);
    }
}

#[test]
fn expects_changes_and_evidence_together_are_refused_with_file_and_line() {
    let sb = sandbox(
        Agent::Idles,
        true,
        ", expects_changes: true, evidence: strict",
    );
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2), "a config error exits 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pipeline.yaml:11:"), "file and line:\n{err}");
    assert!(err.contains("expects_changes"), "the key is named:\n{err}");
    assert!(err.contains("evidence"), "{err}");
}

//! The real Claude Code and Codex CLIs confined by bubblewrap (`agent.sandbox`, `kind:
//! bubblewrap`, `network: host`, `home: persistent`; issue #35) through sortie's pipeline on
//! the local board, against the scripted model server on 127.0.0.1: the agent writes a file
//! in its workspace with a tool, the model server fails the next call (a 500), and the retry
//! resumes the session kept in the ticket's private home: its first model call carries the
//! first run's turns. Every block records `sandbox: bubblewrap`. A shell probe in run 1
//! shows what the agent's tools see: not the host's files, and a private home they may
//! write, except under Codex's own `workspace-write` sandbox, which still works nested.

use sortie::block::OutcomeBlock;

use crate::agent_pipeline::{agent_yaml, Cli};
use crate::common::{repo, Sandbox};
use crate::model_server::{ModelServer, Step};

/// Codex's own `--sandbox` inside bwrap. `workspace-write` makes Codex confine its tool
/// commands itself (codex 0.171 ships a bwrap of its own in its npm package), nested in
/// sortie's sandbox; the probe's `PROBE-HOME:denied` shows it took effect (with
/// `danger-full-access` the probe writes the home).
const CODEX_MODE: &str = "workspace-write";

/// `agent_yaml`'s agent for `cli`, confined: the bubblewrap mapping instead of Codex's
/// string `sandbox:`, and no `HOME` in `agent.env` (the sandbox's private home wins).
fn sandboxed_agent_yaml(cli: Cli, server: &ModelServer, home: &std::path::Path) -> String {
    let yaml = agent_yaml(cli, server, home);
    let mut out: String = yaml
        .lines()
        .filter(|line| !line.trim_start().starts_with("HOME:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let jail = "kind: bubblewrap, network: host, home: persistent";
    match cli {
        Cli::Claude => {
            out = out.replacen(
                "agent:\n",
                &format!("agent:\n  sandbox: {{{jail}}}\n  allowed_tools: [Bash]\n"),
                1,
            );
        }
        Cli::Codex => {
            assert!(out.contains("  sandbox: workspace-write\n"), "{out}");
            out = out.replacen(
                "  sandbox: workspace-write\n",
                &format!("  sandbox: {{{jail}, codex: {CODEX_MODE}}}\n"),
                1,
            );
        }
    }
    assert!(
        !out.lines().any(|l| l.trim_start().starts_with("HOME:")),
        "{out}"
    );
    out
}

fn config(agent: &str) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
{agent}retry:
  max_attempts: 3
  backoff_base_seconds: 1
  backoff_max_seconds: 1
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    in_progress_status: designing
    success_status: design-approved
    failure_status: design-blocked
"#,
        roles = repo().join("roles").display()
    )
}

/// The conversation a model call carried, as text.
fn conversation(body: &serde_json::Value) -> String {
    if body["messages"].is_array() {
        body["messages"].to_string()
    } else {
        body["input"].to_string()
    }
}

/// The agent log of every run so far (for a failure's message).
fn agent_logs(state: &std::path::Path) -> String {
    let mut out = String::new();
    if let Ok(runs) = std::fs::read_dir(state.join("runs")) {
        let mut runs: Vec<_> = runs.flatten().map(|e| e.path()).collect();
        runs.sort();
        for run in runs {
            let log = std::fs::read_to_string(run.join("agent.log")).unwrap_or_default();
            out.push_str(&format!("--- {}\n{log}\n", run.display()));
        }
    }
    out
}

/// A state root outside the system's temporary directory, as in production: the
/// sandbox's `/tmp` is a fresh tmpfs, and Codex warns and makes no helper binaries (its
/// "PATH aliases", which its file edits need) when CODEX_HOME is under a temporary
/// directory. The target's own scratch directory is used unless the checkout itself is
/// under it (a clone in `/tmp`, issue #52 item 16), then `/var/tmp`.
fn state_dir_outside_the_temporary_directory() -> tempfile::TempDir {
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let system_tmp = std::env::temp_dir();
    let under_tmp = |p: &std::path::Path| {
        let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        p.starts_with(
            system_tmp
                .canonicalize()
                .unwrap_or_else(|_| system_tmp.clone()),
        ) || p.starts_with("/tmp")
    };
    let parent = if under_tmp(target_tmp) {
        std::path::PathBuf::from("/var/tmp")
    } else {
        target_tmp.to_path_buf()
    };
    tempfile::Builder::new()
        .prefix("sortie-sandbox-state-")
        .tempdir_in(&parent)
        .unwrap_or_else(|e| {
            panic!(
                "a state root outside the temporary directory, under {}: {e}",
                parent.display()
            )
        })
}

fn sandboxed_resume(cli: Cli) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start(vec![], None, "/nonexistent"));
    // Only CODEX_HOME's config.toml is read from here (bound read-only into the private
    // home); Claude's settings come from the environment.
    let host_config = tempfile::tempdir().unwrap();
    let agent = sandboxed_agent_yaml(cli, &server, host_config.path());
    // The state root (and so the private home and the workspace) outside `/tmp`.
    let state_dir = state_dir_outside_the_temporary_directory();
    let state = state_dir.path().canonicalize().unwrap();
    let config = config(&agent).replace(
        "state_root: state",
        &format!("state_root: {}", state.display()),
    );
    let sb = Sandbox::with_config(&config);
    let id = sb.add("Say hello from the sandbox", "ready-for-design", &[]);
    let workspace = sortie::agent::workspace_dir(&state, &id);
    server.set_workspace(&workspace.display().to_string());
    server.script(
        vec![
            // Run 1: a tool call writing a file in the workspace, then a server error.
            Step::WriteFile {
                file: "sandboxed.txt".into(),
                content: "written inside bwrap\n".into(),
            },
            // What the agent's tools see: not the host's files; a home they may write
            // (bwrap's private home) unless the CLI confines them itself.
            Step::Shell(format!(
                "echo \"PROBE-HOST:$(test -e {host} && echo visible || echo hidden)\"; \
                 echo \"PROBE-HOME:$(touch \"$HOME/probe\" && echo writable || echo denied)\"",
                host = sb.config_path().display()
            )),
            Step::Status(500),
            // Run 2, the retry: resumed, it finishes.
            Step::Text("MOCK-DONE sandboxed".into()),
        ],
        None,
    );

    // Run 1 fails transiently; run 2 resumes after the backoff.
    let mut calls_before_retry = None;
    for _ in 0..6 {
        if sb.ticket(&id).status == "design-approved" {
            break;
        }
        let report = sb.tick_json(&[]);
        if calls_before_retry.is_none() && report["runs"][0]["outcome"] == "failure" {
            calls_before_retry = Some(server.model_calls().len());
        }
        std::thread::sleep(std::time::Duration::from_millis(1200));
    }
    let blocks = sb.blocks(&id);
    assert_eq!(
        sb.ticket(&id).status,
        "design-approved",
        "{cli:?}: blocks: {blocks:#?}\nagent logs:\n{}",
        agent_logs(&state)
    );
    let codes: Vec<String> = blocks
        .iter()
        .map(|b| match b {
            OutcomeBlock::Success(s) => format!("{} success", s.role),
            OutcomeBlock::Failure(f) => format!(
                "{} {} {}",
                f.role,
                f.category.as_str(),
                f.next_action.as_str()
            ),
        })
        .collect();
    assert_eq!(
        codes,
        ["architect transient retry", "architect success"],
        "{cli:?}: a transient failure, then the resumed retry's success"
    );
    for block in &blocks {
        let extra = match block {
            OutcomeBlock::Success(s) => &s.extra,
            OutcomeBlock::Failure(f) => &f.extra,
        };
        assert_eq!(
            extra.get("sandbox").and_then(|v| v.as_str()),
            Some("bubblewrap"),
            "{cli:?}: {block:#?}"
        );
    }
    let Some(OutcomeBlock::Success(s)) = blocks.last() else {
        panic!("{cli:?}: {blocks:#?}")
    };
    assert_eq!(s.summary, "MOCK-DONE sandboxed", "{cli:?}");

    // The tool ran inside the sandbox and wrote the ticket's workspace.
    let written = std::fs::read_to_string(workspace.join("sandboxed.txt")).unwrap_or_else(|e| {
        panic!(
            "{cli:?}: the agent's tool did not write {} ({e}); agent logs:\n{}",
            workspace.join("sandboxed.txt").display(),
            agent_logs(&state)
        )
    });
    assert_eq!(written, "written inside bwrap\n", "{cli:?}");

    // The retry resumed the session from the persistent private home: its first model
    // call carries run 1's tool call.
    let calls = server.model_calls();
    let before = calls_before_retry.expect("run 1 failed and was recorded");
    assert!(calls.len() > before, "{cli:?}: the retry called the model");
    // Run 1's probe, as its output came back to the model.
    let probed = conversation(&calls[before - 1].body);
    assert!(
        probed.contains("PROBE-HOST:hidden"),
        "{cli:?}: the host's files are not in the sandbox: {probed}"
    );
    let home_probe = match cli {
        // Claude Code's Bash runs unconfined inside bwrap: the private home is writable.
        Cli::Claude => "PROBE-HOME:writable",
        // Codex's own workspace-write sandbox still works nested in bwrap: only the
        // workspace (and /tmp) are writable to its commands.
        Cli::Codex => "PROBE-HOME:denied",
    };
    assert!(
        probed.contains(home_probe),
        "{cli:?}: {home_probe}: {probed}"
    );
    let resumed = conversation(&calls[before].body);
    assert!(
        resumed.contains("sandboxed.txt"),
        "{cli:?}: the resumed call carries run 1's turns: {resumed}"
    );

    // The sessions live in the ticket's private home under state_root, not the host's.
    let home = state
        .join("sandbox/homes")
        .join(sortie::agent::workspace_name(&id));
    let sessions = match cli {
        Cli::Claude => home.join(".claude/projects"),
        Cli::Codex => home.join(".codex/sessions"),
    };
    assert!(
        sessions.is_dir(),
        "{cli:?}: {} holds the CLI's sessions",
        sessions.display()
    );
    assert_eq!(
        home.join("probe").exists(),
        matches!(cli, Cli::Claude),
        "{cli:?}: the probe's file in the private home"
    );
}

#[test]
fn claude_code_in_bubblewrap_resumes_its_session_from_the_persistent_home() {
    sandboxed_resume(Cli::Claude);
}

#[test]
fn codex_in_bubblewrap_resumes_its_thread_from_the_persistent_home() {
    sandboxed_resume(Cli::Codex);
}

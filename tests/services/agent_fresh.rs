//! Issue #33, a fresh reviewer, against the real Claude Code and Codex CLIs and the scripted
//! model server: a `review.fresh_session` stage whose first attempt failed after a tool call
//! runs its second attempt without the resume flag, and the model server's first call of
//! that attempt carries nothing of the first attempt's conversation. The success block
//! records the model that reviewed.

use sortie::block::OutcomeBlock;

use crate::common::Sandbox;
use crate::model_server::{ModelServer, Step};

#[derive(Clone, Copy, Debug)]
enum Cli {
    Claude,
    Codex,
}

/// A wrapper that records each attempt's argv in `dir/<attempt>.argv`, then runs `bin`.
fn wrapper(dir: &std::path::Path, bin: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("record-argv");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"{}/$SORTIE_STAGE_ATTEMPT.argv\"\nexec \"{bin}\" \"$@\"\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The `agent:` section running `cli` (through `wrapper`) against `server`, on a named
/// model, with a throwaway HOME under `home`.
fn agent_yaml(cli: Cli, server: &ModelServer, home: &std::path::Path) -> String {
    std::fs::create_dir_all(home).unwrap();
    match cli {
        Cli::Claude => format!(
            "agent:\n  preset: claude-code\n  command: [\"{wrap}\"]\n  model: mock-sonnet\n\
             \x20 permission_mode: acceptEdits\n  max_turns: 10\n  timeout_seconds: 120\n\
             \x20 stall_timeout_seconds: 60\n  env:\n    ANTHROPIC_BASE_URL: \"{url}\"\n\
             \x20   ANTHROPIC_API_KEY: sk-ant-test-key\n\
             \x20   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: \"1\"\n\
             \x20   CLAUDE_CODE_MAX_RETRIES: \"0\"\n    DISABLE_AUTOUPDATER: \"1\"\n\
             \x20   HOME: \"{home}\"\n",
            wrap = wrapper(home, &crate::agent_clis::cli("SORTIE_TEST_CLAUDE")).display(),
            url = server.url(),
            home = home.display()
        ),
        Cli::Codex => {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            std::fs::write(
                codex_home.join("config.toml"),
                crate::agent_clis::codex_config(server),
            )
            .unwrap();
            format!(
                "agent:\n  preset: codex\n  command: [\"{wrap}\"]\n  model: mock-gpt\n\
                 \x20 sandbox: workspace-write\n  extra_args: [--skip-git-repo-check]\n\
                 \x20 timeout_seconds: 120\n  stall_timeout_seconds: 60\n  env:\n\
                 \x20   CODEX_HOME: \"{codex_home}\"\n    MOCK_OPENAI_API_KEY: sk-test-key\n\
                 \x20   HOME: \"{home}\"\n",
                wrap = wrapper(home, &crate::agent_clis::cli("SORTIE_TEST_CODEX")).display(),
                codex_home = codex_home.display(),
                home = home.display()
            )
        }
    }
}

/// The conversation a model call sent: Anthropic `messages`, OpenAI `input`.
fn conversation(body: &serde_json::Value) -> String {
    if body["messages"].is_array() {
        body["messages"].to_string()
    } else {
        body["input"].to_string()
    }
}

fn fresh_reviewer(cli: Cli) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start(vec![], None, "/nonexistent"));
    let home = crate::agent_clis::scratch_dir();
    let home = home.path().canonicalize().unwrap();
    // A template of the ticket alone: what reaches the model on attempt 2 is the prompt
    // and whatever the CLI itself carries over, and the CLI must carry nothing.
    let roles = home.join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("qa.md"),
        "Review ticket {{ ticket.id }}: {{ ticket.title }}. Attempt {{ attempt }}.\n",
    )
    .unwrap();
    let config = format!(
        "tracker: {{kind: local, path: board}}\nstate_root: state\nroles_dir: {roles}\n\
         {agent}retry: {{max_attempts: 2, backoff_base_seconds: 1, backoff_max_seconds: 1}}\n\
         pipeline_stages:\n  - role: qa\n    claim_status: code-review\n    success_status: done\n\
         \x20   failure_status: qa-failed\n    review: {{fresh_session: true}}\n",
        roles = roles.display(),
        agent = agent_yaml(cli, &server, &home),
    );
    let sb = Sandbox::with_config(&config);
    let id = sb.add("Check the greeting", "code-review", &[]);
    let workspace = sortie::agent::workspace_dir(&sb.path().join("state"), &id);
    server.set_workspace(&workspace.display().to_string());
    server.script(
        vec![
            // Attempt 1: a tool call writing a file, then a server error ends the run.
            Step::WriteFile {
                file: "first-attempt.txt".into(),
                content: "FIRST-ATTEMPT-MARKER\n".into(),
            },
            Step::Status(500),
            // Attempt 2: done at once.
            Step::Text("MOCK-DONE qa".into()),
        ],
        None,
    );
    sb.tick_json(&[]);
    let blocks = sb.blocks(&id);
    assert!(
        matches!(blocks.last(), Some(OutcomeBlock::Failure(_))),
        "{cli:?}: attempt 1 fails: {blocks:#?}"
    );
    let calls_before = server.model_calls().len();
    assert!(
        server
            .model_calls()
            .iter()
            .any(|c| conversation(&c.body).contains("first-attempt.txt")),
        "{cli:?}: attempt 1's conversation reached the server"
    );
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["attempt"], 2, "{cli:?}: {report:#}");
    assert_eq!(
        sb.ticket(&id).status,
        "done",
        "{cli:?}: {:#?}",
        sb.blocks(&id)
    );

    let argv = std::fs::read_to_string(home.join("2.argv")).unwrap();
    let argv: Vec<&str> = argv.lines().collect();
    assert!(
        !argv.contains(&"--resume") && !argv.contains(&"resume"),
        "{cli:?}: attempt 2 starts fresh: {argv:?}"
    );
    let calls = server.model_calls();
    assert!(
        calls.len() > calls_before,
        "{cli:?}: attempt 2 called the model"
    );
    for call in &calls[calls_before..] {
        let sent = conversation(&call.body);
        assert!(
            !sent.contains("first-attempt.txt") && !sent.contains("FIRST-ATTEMPT-MARKER"),
            "{cli:?}: attempt 2 sent attempt 1's conversation: {sent}"
        );
    }
    let model = sb.blocks(&id).into_iter().find_map(|b| match b {
        OutcomeBlock::Success(s) => s.evidence.and_then(|e| e.model),
        OutcomeBlock::Failure(_) => None,
    });
    let expected = match cli {
        Cli::Claude => "mock-sonnet",
        Cli::Codex => "mock-gpt",
    };
    assert_eq!(model.as_deref(), Some(expected), "{cli:?}");
}

#[test]
fn claude_fresh_reviewer_resumes_nothing_and_sends_no_earlier_transcript() {
    fresh_reviewer(Cli::Claude);
}

#[test]
fn codex_fresh_reviewer_resumes_nothing_and_sends_no_earlier_transcript() {
    fresh_reviewer(Cli::Codex);
}

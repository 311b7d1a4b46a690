//! The real Claude Code and Codex CLIs through sortie's three-stage pipeline on the local
//! board, against the scripted model server: a tool writing files, a 529 then success on
//! retry, a resumed retry, a 401, and the recorded usage equal to the server's count.
//! Issue #19.

use sortie::block::OutcomeBlock;

use crate::common::{repo, Sandbox};
use crate::model_server::{ModelServer, Step};

#[derive(Clone, Copy, Debug)]
pub(crate) enum Cli {
    Claude,
    Codex,
}

/// The `agent:` section pointing `cli` at `server`, with a throwaway HOME under `home`.
pub(crate) fn agent_yaml(cli: Cli, server: &ModelServer, home: &std::path::Path) -> String {
    std::fs::create_dir_all(home).unwrap();
    match cli {
        Cli::Claude => format!(
            r#"agent:
  preset: claude-code
  command: ["{bin}"]
  permission_mode: acceptEdits
  max_turns: 10
  timeout_seconds: 120
  stall_timeout_seconds: 60
  env:
    ANTHROPIC_BASE_URL: "{url}"
    ANTHROPIC_API_KEY: sk-ant-test-key
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1"
    CLAUDE_CODE_MAX_RETRIES: "0"
    DISABLE_AUTOUPDATER: "1"
    HOME: "{home}"
"#,
            bin = crate::agent_clis::cli("SORTIE_TEST_CLAUDE"),
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
                r#"agent:
  preset: codex
  command: ["{bin}"]
  sandbox: workspace-write
  extra_args: [--skip-git-repo-check]
  timeout_seconds: 120
  stall_timeout_seconds: 60
  env:
    CODEX_HOME: "{codex_home}"
    MOCK_OPENAI_API_KEY: sk-test-key
    HOME: "{home}"
"#,
                bin = crate::agent_clis::cli("SORTIE_TEST_CODEX"),
                codex_home = codex_home.display(),
                home = home.display()
            )
        }
    }
}

fn config(agent: &str) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
# A done ticket's workspace is removed (issue #14): keep a copy to look at.
workspace:
  hooks:
    before_remove: ["sh", "-c", "mkdir -p ../../kept && cp -R . ../../kept/$$SORTIE_TICKET_ID"]
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
  - role: backend
    claim_status: design-approved
    success_status: code-review
    failure_status: blocked
    requires_prior_role: architect
  - role: qa
    claim_status: code-review
    success_status: done
    failure_status: qa-failed
    requires_prior_role: backend
"#,
        roles = repo().join("roles").display()
    )
}

fn write(file: &str) -> Step {
    Step::WriteFile {
        file: file.into(),
        content: format!("{file} by the mock model\n"),
    }
}

/// Tick (waiting out retry backoffs) until `id` reaches `status`, at most `max` ticks.
fn tick_until(sb: &Sandbox, id: &str, status: &str, max: usize) {
    for _ in 0..max {
        if sb.ticket(id).status == status {
            return;
        }
        sb.tick_json(&[]);
        std::thread::sleep(std::time::Duration::from_millis(1200));
    }
    let blocks = sb.blocks(id);
    panic!(
        "ticket {id} is {} after {max} ticks, not {status}; blocks: {blocks:#?}",
        sb.ticket(id).status
    );
}

fn outcome_codes(blocks: &[OutcomeBlock]) -> Vec<String> {
    blocks
        .iter()
        .map(|b| match b {
            OutcomeBlock::Success(s) => format!("{} success", s.role),
            OutcomeBlock::Failure(f) => format!("{} {}", f.role, f.reason_code),
        })
        .collect()
}

fn three_stages(cli: Cli) {
    // The server runs on its own runtime; the test drives the real binary synchronously.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start(vec![], None, "/nonexistent"));
    let home = crate::agent_clis::scratch_dir();
    let sb = Sandbox::with_config(&config(&agent_yaml(cli, &server, home.path())));
    let id = sb.add("Say hello", "ready-for-design", &[]);
    let workspace = sortie::agent::workspace_dir(&sb.path().join("state"), &id);
    server.set_workspace(&workspace.display().to_string());
    server.script(
        vec![
            // architect: a tool call writing a file, then the final text.
            write("design.md"),
            Step::Text("MOCK-DONE architect".into()),
            // backend: overloaded, then success on the retry.
            Step::Status(529),
            write("impl.txt"),
            Step::Text("MOCK-DONE backend".into()),
            // qa: a tool call, then a server error; the retry resumes the session.
            write("qa.txt"),
            Step::Status(500),
            Step::Text("MOCK-DONE qa".into()),
        ],
        None,
    );
    tick_until(&sb, &id, "done", 12);
    let codes = outcome_codes(&sb.blocks(&id));
    assert_eq!(
        codes.iter().filter(|c| c.ends_with("success")).count(),
        3,
        "{cli:?}: {codes:?}"
    );
    assert_eq!(codes.len(), 5, "{cli:?}: two transient failures: {codes:?}");
    // The workspace went with the ticket reaching done; `before_remove` kept a copy.
    assert!(!workspace.exists(), "{cli:?}");
    let kept = sb.path().join("state/kept").join(&id);
    for file in ["design.md", "impl.txt", "qa.txt"] {
        assert_eq!(
            std::fs::read_to_string(kept.join(file)).unwrap(),
            format!("{file} by the mock model\n"),
            "{cli:?}"
        );
    }
    // The qa retry resumed its session: its first model call carries attempt 1's tool call.
    let calls = server.model_calls();
    let last = calls.last().unwrap();
    let conversation = if last.body["messages"].is_array() {
        last.body["messages"].to_string()
    } else {
        last.body["input"].to_string()
    };
    assert!(
        conversation.contains("qa.txt"),
        "{cli:?}: the resumed qa call carries the first attempt's conversation"
    );

    // Accounting: the ledger's totals equal what the server billed, token for token.
    let status: serde_json::Value = serde_json::from_str(&sb.ok(&[
        "pipeline",
        "status",
        "--config",
        "pipeline.yaml",
        "--json",
    ]))
    .unwrap();
    let sum = |field: &str| -> u64 {
        status["usage"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row[field].as_u64().unwrap_or(0))
            .sum()
    };
    let billed = server.billed();
    assert_eq!(
        (
            sum("tokens_in"),
            sum("cache_read_tokens"),
            sum("cache_write_tokens"),
            sum("tokens_out"),
            sum("reasoning_tokens")
        ),
        (
            billed.input,
            billed.cache_read,
            billed.cache_write,
            billed.output,
            billed.reasoning
        ),
        "{cli:?}: ledger {:#} vs server {billed:?}",
        status["usage"]
    );

    // A 401: permanent, manual, not retried.
    server.script(vec![], Some(Step::Status(401)));
    let second = sb.add("Bad key", "ready-for-design", &[]);
    sb.tick_json(&[]);
    let blocks = sb.blocks(&second);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{cli:?}: {blocks:#?}")
    };
    assert_eq!(
        (
            f.reason_code.as_str(),
            f.category.as_str(),
            f.next_action.as_str()
        ),
        ("agent.auth", "permanent", "manual"),
        "{cli:?}: {}",
        f.detail
    );
    let calls_after_401 = server.model_calls().len();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"].as_array().map(Vec::len),
        Some(0),
        "{cli:?}: no retry of an auth failure: {report:#}"
    );
    assert_eq!(server.model_calls().len(), calls_after_401);
}

#[test]
fn claude_code_runs_three_stages_with_retries_resume_and_exact_usage() {
    three_stages(Cli::Claude);
}

#[test]
fn codex_runs_three_stages_with_retries_resume_and_exact_usage() {
    three_stages(Cli::Codex);
}

//! The `acp` preset against real Agent Client Protocol agents from npm (pinned in
//! scripts/services/agent-clis/package.json): Claude Code's ACP adapter (the Anthropic
//! Messages API), Gemini CLI (the Gemini API), Qwen Code and OpenCode (OpenAI Chat
//! Completions), each pointed at the scripted model server through its own setting for a
//! custom endpoint (`/work/shared/acp-agents.md`). One scenario per behaviour, run against
//! each agent: an edit and a result file through a pipeline tick with the usage the agent
//! reported, a model that hangs (stalled and killed), a write outside the workspace (not
//! done), a retry that resumes its session. Issue #36.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sortie::agent::{AgentOutcome, RunReport, SessionStart};
use sortie::block::OutcomeBlock;
use sortie::config::{AcpPermissions, AgentConfig, AgentPreset};

use crate::agent_clis::{base_agent, cli, log_of, plan, run, scratch_dir, Sandbox};
use crate::common::repo;
use crate::model_server::{Billed, ModelServer, Step};

/// An ACP agent under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcpAgent {
    ClaudeCodeAcp,
    Gemini,
    Qwen,
    OpenCode,
}

/// How an agent reports usage (`/work/shared/acp-agents.md`), as the test expects it.
enum Reports {
    /// None at all: usage is unknown.
    Nothing,
    /// Every model call of the turn, summed (side calls left out).
    EveryTurnCall,
    /// Only the last model call of the turn.
    LastCall,
}

impl AcpAgent {
    fn program(self) -> String {
        cli(match self {
            AcpAgent::ClaudeCodeAcp => "SORTIE_TEST_CLAUDE_ACP",
            AcpAgent::Gemini => "SORTIE_TEST_GEMINI",
            AcpAgent::Qwen => "SORTIE_TEST_QWEN",
            AcpAgent::OpenCode => "SORTIE_TEST_OPENCODE",
        })
    }

    /// The agent pointed at `server`, with a throwaway HOME `home` holding the settings
    /// files it needs.
    fn agent(self, server: &ModelServer, home: &Path) -> AgentConfig {
        std::fs::create_dir_all(home).unwrap();
        let mut agent = base_agent(AgentPreset::Acp, self.program());
        let home_dir = home.display().to_string();
        let url = server.url();
        let env: Vec<(&str, String)> = match self {
            AcpAgent::ClaudeCodeAcp => vec![
                ("ANTHROPIC_BASE_URL", url),
                ("ANTHROPIC_API_KEY", "sk-ant-test-key".into()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
                ("DISABLE_AUTOUPDATER", "1".into()),
                // The adapter's bundled CLI refuses to run as root without it.
                ("IS_SANDBOX", "1".into()),
            ],
            AcpAgent::Gemini => {
                settings(
                    home,
                    ".gemini/settings.json",
                    r#"{"security": {"auth": {"selectedType": "gemini-api-key"}},
                        "privacy": {"usageStatisticsEnabled": false},
                        "general": {"disableAutoUpdate": true}}"#,
                );
                agent.command.push("--acp".into());
                agent.model = Some("gemini-2.5-flash".into());
                vec![
                    ("GEMINI_API_KEY", "gm-test-key".into()),
                    ("GOOGLE_GEMINI_BASE_URL", url),
                ]
            }
            AcpAgent::Qwen => {
                // Approval mode `default` (its own default asks the model to classify every
                // tool call); follow-up suggestions and auto-memory off (extra model calls).
                settings(
                    home,
                    ".qwen/settings.json",
                    r#"{"security": {"auth": {"selectedType": "openai"}},
                        "tools": {"approvalMode": "default"},
                        "ui": {"enableFollowupSuggestions": false},
                        "memory": {"enableManagedAutoMemory": false,
                                   "enableManagedAutoDream": false}}"#,
                );
                agent.command.push("--acp".into());
                vec![
                    ("OPENAI_API_KEY", "sk-qwen-test-key".into()),
                    ("OPENAI_BASE_URL", format!("{url}/v1")),
                    ("OPENAI_MODEL", "mock-qwen".into()),
                ]
            }
            AcpAgent::OpenCode => {
                let config = home.join("opencode.json");
                let text = serde_json::json!({
                    "provider": {"mock": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "mock",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": "{env:MOCK_API_KEY}"},
                        "models": {"mock-model": {"name": "mock model"}}
                    }},
                    "model": "mock/mock-model",
                    "small_model": "mock/mock-model",
                    "autoupdate": false,
                    "share": "disabled"
                });
                std::fs::write(&config, text.to_string()).unwrap();
                agent.command.push("acp".into());
                vec![
                    ("OPENCODE_CONFIG", config.display().to_string()),
                    ("MOCK_API_KEY", "sk-opencode-test-key".into()),
                    ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
                    ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
                    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
                ]
            }
        };
        agent.env = env
            .into_iter()
            .chain([("HOME", home_dir)])
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>();
        agent
    }

    /// The model calls the agent makes of its own before the script's (claude-code-acp's
    /// bundled CLI: a small call, model haiku, one user message "count").
    fn preamble(self) -> Vec<Step> {
        match self {
            AcpAgent::ClaudeCodeAcp => vec![Step::Text("ok".into())],
            _ => Vec::new(),
        }
    }

    fn reports(self) -> Reports {
        match self {
            AcpAgent::ClaudeCodeAcp => Reports::Nothing,
            AcpAgent::Gemini | AcpAgent::Qwen => Reports::EveryTurnCall,
            AcpAgent::OpenCode => Reports::LastCall,
        }
    }

    /// The usage sortie must record for a turn, given what the server billed for it.
    fn expected_usage(self, turn: Billed, last_call: Billed) -> Option<(u64, u64, u64, u64)> {
        let of = |b: Billed| Some((b.input, b.cache_read, b.cache_write, b.output));
        match self.reports() {
            Reports::Nothing => None,
            Reports::EveryTurnCall => of(turn),
            Reports::LastCall => of(last_call),
        }
    }
}

/// `text` at `rel` under `home`.
fn settings(home: &Path, rel: &str, text: &str) {
    let path = home.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The shell line that writes a success result file.
fn result_file(summary: &str) -> Step {
    Step::Shell(format!(
        "printf 'outcome: success\\nsummary: {summary}\\n' > \"$SORTIE_RESULT_FILE\""
    ))
}

fn edit_and_report() -> Vec<Step> {
    vec![
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        result_file("MOCK-DONE wrote hello.txt"),
        Step::Text("MOCK-DONE".into()),
    ]
}

fn one_stage_config(agent: &AgentConfig) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|s| serde_json::to_string(s).unwrap())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let env: String = agent
        .env
        .iter()
        .map(|(k, v)| format!("    {k}: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    let model = agent
        .model
        .as_ref()
        .map(|m| format!("  model: {m}\n"))
        .unwrap_or_default();
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
workspace:
  hooks:
    before_remove: ["sh", "-c", "mkdir -p ../../kept && cp -R . ../../kept/$$SORTIE_TICKET_ID"]
agent:
  preset: acp
  command: [{command}]
  permissions: workspace
{model}  timeout_seconds: 240
  stall_timeout_seconds: 120
  env:
{env}pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    in_progress_status: designing
    success_status: done
    failure_status: design-blocked
"#,
        roles = repo().join("roles").display(),
        command = list(&agent.command),
    )
}

/// Through a pipeline tick: the agent edits a file in the ticket's workspace and writes the
/// result file; the ticket reaches its success status with the result's summary, and the
/// ledger's usage is what the agent reported ("unknown" where it reports none).
fn edits_and_reports_through_a_tick(acp: AcpAgent) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start(vec![], None, "/nonexistent"));
    let home = scratch_dir();
    let agent = acp.agent(&server, &home.path().join("home"));
    let sb = crate::common::Sandbox::with_config(&one_stage_config(&agent));
    let id = sb.add("Say hello", "ready-for-design", &[]);
    let workspace = sortie::agent::workspace_dir(&sb.path().join("state"), &id);
    server.set_workspace(&workspace.display().to_string());
    let mut steps = acp.preamble();
    steps.extend(edit_and_report());
    server.script(steps, None);
    let report = sb.tick_json(&[]);
    let blocks = sb.blocks(&id);
    let calls = model_calls(&server);
    let Some(OutcomeBlock::Success(success)) = blocks.last() else {
        panic!("{acp:?}: {blocks:#?}\ntick: {report:#}\nmodel calls: {calls}")
    };
    assert_eq!(
        success.summary.trim(),
        "MOCK-DONE wrote hello.txt",
        "{acp:?}"
    );
    assert_eq!(sb.ticket(&id).status, "done", "{acp:?}");
    let kept = sb.path().join("state/kept").join(&id);
    assert_eq!(
        std::fs::read_to_string(kept.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hello from the mock model\n"),
        "{acp:?}: the edit is in the workspace"
    );

    // What the run kept of the agent's report, and what the ledger totals.
    let run_dir = Path::new(report["runs"][0]["log_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    let kept = sortie::agent::read_session_record(&run_dir).expect("the run kept its session");
    let reported = kept.reported_usage.map(|u| {
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.output_tokens,
        )
    });
    let billed = server.billed();
    let expected = acp.expected_usage(
        billed.minus(&server.side_billed()),
        server.last_call_billed(),
    );
    assert_eq!(
        reported,
        expected,
        "{acp:?}: server billed {billed:?}, of which side calls {:?}",
        server.side_billed()
    );
    let status = sb.status_json();
    let row = &status["usage"][0];
    let field = |f: &str| row[f].as_u64().unwrap_or(0);
    if let Some(expected) = expected {
        assert_eq!(
            (
                field("tokens_in"),
                field("cache_read_tokens"),
                field("cache_write_tokens"),
                field("tokens_out")
            ),
            expected,
            "{acp:?}: ledger {row:#}"
        );
    }
}

/// A model that starts answering and never ends: the run is stalled at the ACP level, and
/// the agent's whole process tree goes (the server sees the hung connection close).
async fn a_hung_model_is_stalled_and_killed(acp: AcpAgent) {
    let sb = Sandbox::new();
    let mut steps = acp.preamble();
    steps.push(Step::Hang);
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let mut agent = acp.agent(&server, &sb.home);
    // Above each agent's start-up on a loaded machine.
    agent.stall_timeout = Some(Duration::from_secs(20));
    let report = run(&plan(&agent, &sb, 1)).await;
    assert_eq!(failure_code(&report), "agent.stalled", "{acp:?}");
    for _ in 0..300 {
        if server.hanging() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{acp:?}: the hung model call is still connected 30 s after the run ended: \
         something of the agent's outlived it\n{}",
        log_of(&report)
    );
}

/// A write outside the workspace under `permissions: workspace` is not done: sortie denies
/// the permission request (Gemini CLI refuses it before asking).
async fn a_write_outside_the_workspace_is_denied(acp: AcpAgent) {
    let sb = Sandbox::new();
    let outside = sb.home.join("outside.txt");
    let mut steps = acp.preamble();
    steps.push(Step::WriteFile {
        file: outside.display().to_string(),
        content: "escaped\n".into(),
    });
    steps.push(Step::Text("MOCK-DONE could not write".into()));
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let mut agent = acp.agent(&server, &sb.home);
    agent.permissions = AcpPermissions::Workspace;
    let report = run(&plan(&agent, &sb, 1)).await;
    let log = log_of(&report);
    assert!(!outside.exists(), "{acp:?}: the write happened\n{log}");
    if acp == AcpAgent::Gemini {
        // Gemini CLI refuses by itself: no request reaches sortie, the model is told.
        let told = server.model_calls().last().map(|c| c.body.to_string());
        assert!(
            told.is_some_and(|t| t.contains("outside")),
            "{acp:?}: the refusal reached the model\n{log}"
        );
        return;
    }
    assert!(
        log.contains("permission denied (policy workspace)")
            && log.contains("outside the workspace"),
        "{acp:?}: sortie answered the request by its policy\n{log}"
    );
    assert_eq!(failure_code(&report), "agent.permission_denied", "{acp:?}");
}

/// The retry loads the first attempt's session: its first model call carries the first
/// attempt's conversation, and the log says the session was loaded.
async fn a_retry_resumes_the_session(acp: AcpAgent) {
    let sb = Sandbox::new();
    let mut steps = acp.preamble();
    steps.extend([
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        Step::Text("MOCK-DONE first attempt".into()),
    ]);
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let agent = acp.agent(&server, &sb.home);
    let first = run(&plan(&agent, &sb, 1)).await;
    assert!(first.outcome.is_success(), "{acp:?}\n{}", log_of(&first));
    let session = first.session_id.clone().expect("a session id");
    if acp == AcpAgent::Gemini {
        // Gemini CLI refuses to load a session in the minute it was written ("No previous
        // sessions found"); the fallback is what `session_resume_falls_back...` covers.
        wait_for_the_next_minute().await;
    }
    let mut steps = acp.preamble();
    steps.push(Step::Text("MOCK-DONE resumed".into()));
    server.script(steps, None);
    let calls_before = server.model_calls().len();
    let mut second = plan(&agent, &sb, 2);
    second.resume_session(&agent, &session, first.usage);
    let report = run(&second).await;
    let log = log_of(&report);
    assert!(report.outcome.is_success(), "{acp:?}\n{log}");
    assert!(report.notes.is_empty(), "{acp:?}: {:?}", report.notes);
    assert_eq!(report.session_start, Some(SessionStart::Resumed), "{acp:?}");
    assert_eq!(first.session_start, Some(SessionStart::New), "{acp:?}");
    assert!(
        log.contains(&format!("resumed session {session} with session/load")),
        "{acp:?}\n{log}"
    );
    let carried = server.model_calls()[calls_before..]
        .iter()
        .any(|c| c.body.to_string().contains("MOCK-DONE first attempt"));
    assert!(
        carried,
        "{acp:?}: a model call of the retry carries the first attempt's conversation"
    );
}

/// Until the wall clock's minute is not the current one (at most a minute).
async fn wait_for_the_next_minute() {
    let minute = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    let start = minute();
    while minute() == start {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Each model call so far, in short: path, model, the last 200 characters of its body.
fn model_calls(server: &ModelServer) -> String {
    server
        .model_calls()
        .iter()
        .map(|c| {
            let body = c.body.to_string();
            let tail: String = body
                .chars()
                .rev()
                .take(200)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("\n- {} {}: ...{tail}", c.path, c.body["model"])
        })
        .collect()
}

fn failure_code(report: &RunReport) -> String {
    match &report.outcome {
        AgentOutcome::Failure { reason_code, .. } => reason_code.clone(),
        other => panic!(
            "expected a failure, got {other:?}\nlog:\n{}",
            log_of(report)
        ),
    }
}

/// The scenarios, one test each per agent.
macro_rules! acp_agent_tests {
    ($module:ident, $acp:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn edits_a_file_and_reports_through_a_pipeline_tick_with_its_usage() {
                edits_and_reports_through_a_tick($acp);
            }

            #[tokio::test]
            async fn a_model_that_never_ends_is_stalled_and_killed() {
                a_hung_model_is_stalled_and_killed($acp).await;
            }

            #[tokio::test]
            async fn a_write_outside_the_workspace_is_denied_under_workspace() {
                a_write_outside_the_workspace_is_denied($acp).await;
            }

            #[tokio::test]
            async fn a_retry_resumes_its_session_with_session_load() {
                a_retry_resumes_the_session($acp).await;
            }
        }
    };
}

acp_agent_tests!(claude_code_acp, AcpAgent::ClaudeCodeAcp);
acp_agent_tests!(gemini, AcpAgent::Gemini);
acp_agent_tests!(qwen, AcpAgent::Qwen);
acp_agent_tests!(opencode, AcpAgent::OpenCode);

#[tokio::test]
async fn claude_code_acp_is_refused_a_write_under_deny_all() {
    let sb = Sandbox::new();
    let mut steps = AcpAgent::ClaudeCodeAcp.preamble();
    steps.extend([
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        Step::Text("MOCK-DONE could not write".into()),
    ]);
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let mut agent = AcpAgent::ClaudeCodeAcp.agent(&server, &sb.home);
    agent.permissions = AcpPermissions::DenyAll;
    let report = run(&plan(&agent, &sb, 1)).await;
    assert!(
        !sb.workspace.join("hello.txt").exists(),
        "{}",
        log_of(&report)
    );
    assert_eq!(failure_code(&report), "agent.permission_denied");
}

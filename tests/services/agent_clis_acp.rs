//! The `acp` preset against a real Agent Client Protocol agent: Claude Code's ACP adapter
//! (`@zed-industries/claude-code-acp`, pinned in scripts/services/agent-clis/package.json),
//! which speaks the Anthropic Messages API the scripted model server already serves.
//! Issue #36.

use std::collections::BTreeMap;

use sortie::agent::{AgentOutcome, RunReport};
use sortie::config::{AcpPermissions, AgentConfig, AgentPreset};

use crate::agent_clis::{base_agent, cli, log_of, plan, run, Sandbox};
use crate::model_server::{ModelServer, Step};

/// claude-code-acp against `server`: the Claude Code settings of `claude_agent`, and
/// `IS_SANDBOX` (the adapter's bundled CLI refuses to run as root without it).
fn acp_agent(server: &ModelServer, sb: &Sandbox) -> AgentConfig {
    let mut agent = base_agent(AgentPreset::Acp, cli("SORTIE_TEST_CLAUDE_ACP"));
    agent.env = BTreeMap::from(
        [
            ("ANTHROPIC_BASE_URL", server.url()),
            ("ANTHROPIC_API_KEY", "sk-ant-test-key".to_string()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
            ("DISABLE_AUTOUPDATER", "1".to_string()),
            ("IS_SANDBOX", "1".to_string()),
            ("HOME", sb.home.display().to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    agent
}

/// The adapter's bundled CLI first makes a small call of its own (model haiku, one user
/// message "count"): that answer, before the script's.
fn warm_up() -> Step {
    Step::Text("ok".into())
}

fn outcome_text(report: &RunReport) -> String {
    match &report.outcome {
        AgentOutcome::Success { summary, .. } => format!("success: {summary}"),
        other => format!("{other:?}\nlog:\n{}", log_of(report)),
    }
}

#[tokio::test]
async fn claude_code_acp_writes_a_file_inside_the_workspace_and_reports_no_usage() {
    let sb = Sandbox::new();
    let steps = vec![
        warm_up(),
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        Step::Text("MOCK-DONE: wrote hello.txt".into()),
    ];
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let report = run(&plan(&acp_agent(&server, &sb), &sb, 1)).await;
    assert_eq!(outcome_text(&report), "success: MOCK-DONE: wrote hello.txt");
    assert_eq!(
        std::fs::read_to_string(sb.workspace.join("hello.txt")).ok(),
        Some("hello from the mock model\n".to_string()),
        "{}",
        log_of(&report)
    );
    // claude-code-acp reports no usage: unknown, never zero.
    assert_eq!(report.usage, None);
    assert!(report.session_id.is_some());
    assert_eq!(server.billed().calls, 3);
}

#[tokio::test]
async fn claude_code_acp_is_refused_a_write_under_deny_all() {
    let sb = Sandbox::new();
    let steps = vec![
        warm_up(),
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        Step::Text("MOCK-DONE: could not write".into()),
    ];
    let server = ModelServer::start(steps, None, &sb.workspace.display().to_string()).await;
    let mut agent = acp_agent(&server, &sb);
    agent.permissions = AcpPermissions::DenyAll;
    let report = run(&plan(&agent, &sb, 1)).await;
    assert!(
        !sb.workspace.join("hello.txt").exists(),
        "{}",
        log_of(&report)
    );
    match &report.outcome {
        AgentOutcome::Failure { reason_code, .. } => {
            assert_eq!(
                reason_code,
                "agent.permission_denied",
                "{}",
                log_of(&report)
            )
        }
        other => panic!("{other:?}\n{}", log_of(&report)),
    }
}

//! The claude-code and codex presets against the real CLIs (pinned in
//! scripts/services/agent-clis/package.json, installed by scripts/services/agent-clis.sh),
//! pointed at the scripted model server on 127.0.0.1 (`model_server`). Issue #19.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sortie::agent::{run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan, RunReport, Usage};
use sortie::block::{Category, NextAction};
use sortie::config::{AgentConfig, AgentPreset};
use tokio_util::sync::CancellationToken;

use crate::model_server::{Billed, ModelServer, Step};

const HOW: &str =
    "start it with `./scripts/test`, or by hand: `export SORTIE_TEST_SERVICES=$(mktemp -d); \
bash scripts/services/agent-clis.sh; set -a; . $SORTIE_TEST_SERVICES/agent-clis.env; set +a` \
(see scripts/services/README.md)";

/// The installed CLI named by `var`; fails (never skips) with how to install it.
fn cli(var: &str) -> String {
    match std::env::var(var) {
        Ok(path) if Path::new(&path).exists() => path,
        Ok(path) => panic!("{var}={path} does not exist; {HOW}"),
        Err(_) => panic!("{var} is not set: the real agent CLIs are not installed; {HOW}"),
    }
}

/// A ticket's directories: a workspace, a run directory, a throwaway HOME.
pub struct Sandbox {
    _dir: tempfile::TempDir,
    pub workspace: PathBuf,
    pub home: PathBuf,
    root: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        // A canonical path: the CLIs resolve symlinks, and Claude keys sessions by cwd.
        let root = dir.path().canonicalize().unwrap();
        let workspace = root.join("ws");
        let home = root.join("home");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Sandbox {
            _dir: dir,
            workspace,
            home,
            root,
        }
    }

    pub fn run_dir(&self, n: u32) -> PathBuf {
        self.root.join(format!("run-{n}"))
    }
}

fn base_agent(preset: AgentPreset, program: String) -> AgentConfig {
    AgentConfig {
        preset,
        command: vec![program],
        model: None,
        permission_mode: None,
        max_turns: None,
        allowed_tools: Vec::new(),
        sandbox: None,
        extra_args: Vec::new(),
        timeout: Duration::from_secs(120),
        stall_timeout: Some(Duration::from_secs(60)),
        env: BTreeMap::new(),
        resume: true,
        allow_permission_denials: false,
    }
}

/// Claude Code against `server`: base URL and key from the environment, nonessential
/// traffic off, no retries of its own (sortie's retry is under test), a throwaway HOME.
pub fn claude_agent(server: &ModelServer, sb: &Sandbox) -> AgentConfig {
    let mut agent = base_agent(AgentPreset::ClaudeCode, cli("SORTIE_TEST_CLAUDE"));
    agent.permission_mode = Some("acceptEdits".into());
    agent.max_turns = Some(10);
    agent.env = BTreeMap::from(
        [
            ("ANTHROPIC_BASE_URL", server.url()),
            ("ANTHROPIC_API_KEY", "sk-ant-test-key".to_string()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
            ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
            ("DISABLE_AUTOUPDATER", "1".to_string()),
            ("HOME", sb.home.display().to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    agent
}

/// Codex against `server`: a CODEX_HOME whose config.toml defines the `mock` provider
/// (Responses wire API, key from MOCK_OPENAI_API_KEY, one retry), a throwaway HOME.
pub fn codex_agent(server: &ModelServer, sb: &Sandbox) -> AgentConfig {
    let codex_home = sb.home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"mock-gpt\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\n\
             name = \"mock\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
             env_key = \"MOCK_OPENAI_API_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            server.url()
        ),
    )
    .unwrap();
    let mut agent = base_agent(AgentPreset::Codex, cli("SORTIE_TEST_CODEX"));
    agent.sandbox = Some("workspace-write".into());
    agent.extra_args = vec!["--skip-git-repo-check".into()];
    agent.env = BTreeMap::from(
        [
            ("CODEX_HOME", codex_home.display().to_string()),
            ("MOCK_OPENAI_API_KEY", "sk-test-key".to_string()),
            ("HOME", sb.home.display().to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    agent
}

pub fn plan(agent: &AgentConfig, sb: &Sandbox, n: u32) -> RunPlan {
    RunPlan::for_agent(
        agent,
        "Write hello.txt in the working directory.\n".to_string(),
        sb.workspace.clone(),
        sb.run_dir(n),
    )
}

fn vars(run: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("SORTIE_RUN_ID".to_string(), run.to_string())])
}

pub async fn run(plan: &RunPlan) -> RunReport {
    let run_id = format!("agent-clis-{}", uuid::Uuid::new_v4().simple());
    let spec = AgentSpec {
        plan,
        vars: vars(&run_id),
    };
    match run_agent(spec, CancellationToken::new(), |_| {}).await {
        RunEnd::Finished(report) => report,
        RunEnd::Cancelled { .. } => panic!("unexpected cancel"),
    }
}

fn log_of(report: &RunReport) -> String {
    std::fs::read_to_string(&report.log_path).unwrap_or_default()
}

fn failure(report: &RunReport) -> (&str, Category, NextAction, &str) {
    match &report.outcome {
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => (reason_code, *category, *next_action, detail),
        AgentOutcome::Success { summary, .. } => panic!(
            "expected a failure, got success: {summary}\nlog:\n{}",
            log_of(report)
        ),
    }
}

fn summary(report: &RunReport) -> &str {
    match &report.outcome {
        AgentOutcome::Success { summary, .. } => summary,
        AgentOutcome::Failure { detail, .. } => {
            panic!("expected success, got {detail}\nlog:\n{}", log_of(report))
        }
    }
}

/// The usage the run recorded equals what the server billed, token for token.
fn assert_matches_billed(usage: Option<Usage>, billed: Billed) {
    let usage = usage.expect("usage reported");
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            usage.reasoning_tokens
        ),
        (
            billed.input,
            billed.cache_read,
            billed.cache_write,
            billed.output,
            billed.reasoning
        ),
        "recorded {usage:?}, server billed {billed:?}"
    );
}

fn write_then_done() -> Vec<Step> {
    vec![
        Step::WriteFile {
            file: "hello.txt".into(),
            content: "hello from the mock model\n".into(),
        },
        Step::Text("MOCK-DONE: wrote hello.txt".into()),
    ]
}

#[tokio::test]
async fn claude_writes_a_file_with_a_tool_and_its_usage_matches_the_server() {
    let sb = Sandbox::new();
    let server =
        ModelServer::start(write_then_done(), None, &sb.workspace.display().to_string()).await;
    let report = run(&plan(&claude_agent(&server, &sb), &sb, 1)).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
    assert_eq!(
        std::fs::read_to_string(sb.workspace.join("hello.txt")).unwrap(),
        "hello from the mock model\n"
    );
    assert_eq!(server.billed().calls, 2);
    assert_matches_billed(report.usage, server.billed());
    assert!(report.session_id.is_some());
    for call in server.model_calls() {
        assert_eq!(call.credential.as_deref(), Some("sk-ant-test-key"));
    }
}

#[tokio::test]
async fn codex_writes_a_file_with_a_tool_and_its_usage_matches_the_server() {
    let sb = Sandbox::new();
    let server =
        ModelServer::start(write_then_done(), None, &sb.workspace.display().to_string()).await;
    let report = run(&plan(&codex_agent(&server, &sb), &sb, 1)).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
    assert_eq!(
        std::fs::read_to_string(sb.workspace.join("hello.txt")).unwrap(),
        "hello from the mock model\n"
    );
    assert_eq!(server.billed().calls, 2);
    assert_matches_billed(report.usage, server.billed());
    assert!(report.session_id.is_some());
    for call in server.model_calls() {
        assert_eq!(call.credential.as_deref(), Some("Bearer sk-test-key"));
    }
}

//! The claude-code and codex presets against the real CLIs (pinned in
//! scripts/services/agent-clis/package.json, installed by scripts/services/agent-clis.sh),
//! pointed at the scripted model server on 127.0.0.1 (`model_server`). Issue #19.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sortie::agent::{
    run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan, RunReport, SessionStart, Usage,
};
use sortie::block::{Category, NextAction};
use sortie::config::{AgentConfig, AgentPreset};
use tokio_util::sync::CancellationToken;

use crate::model_server::{Billed, ModelServer, Step};

const HOW: &str =
    "start it with `./scripts/test`, or by hand: `export SORTIE_TEST_SERVICES=$(mktemp -d); \
bash scripts/services/agent-clis.sh; set -a; . $SORTIE_TEST_SERVICES/agent-clis.env; set +a` \
(see scripts/services/README.md)";

/// The installed CLI named by `var`; fails (never skips) with how to install it.
pub fn cli(var: &str) -> String {
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
        let dir = scratch_dir();
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

/// A directory for a CLI's home and workspace: not under `/tmp`, because Codex, finding a
/// system `bwrap` on PATH (Debian's, which the sandbox tests install), makes helper aliases
/// in `CODEX_HOME` and refuses to under a temporary directory, and then every tool call
/// fails; and not inside a git repository (`target/`), where the CLIs behave otherwise.
pub fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").expect("/var/tmp exists and is writable")
}

pub fn base_agent(preset: AgentPreset, program: String) -> AgentConfig {
    AgentConfig {
        preset,
        command: vec![program],
        model: None,
        permission_mode: None,
        max_turns: None,
        allowed_tools: Vec::new(),
        sandbox: None,
        bubblewrap: None,
        extra_args: Vec::new(),
        timeout: Duration::from_secs(120),
        stall_timeout: Some(Duration::from_secs(60)),
        handshake_timeout: Duration::from_secs(60),
        env: BTreeMap::new(),
        resume: true,
        allow_permission_denials: false,
        permissions: Default::default(),
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
    std::fs::write(codex_home.join("config.toml"), codex_config(server)).unwrap();
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

/// A CODEX_HOME `config.toml` with the `mock` provider at `server`: the Responses wire API,
/// the key from MOCK_OPENAI_API_KEY, no retries of its own.
pub fn codex_config(server: &ModelServer) -> String {
    format!(
        "model = \"mock-gpt\"\nmodel_provider = \"mock\"\n\n[model_providers.mock]\n\
         name = \"mock\"\nbase_url = \"{}/v1\"\nwire_api = \"responses\"\n\
         env_key = \"MOCK_OPENAI_API_KEY\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
        server.url()
    )
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

/// The run's `agent.log`; when it cannot be read, why, with what its directory holds
/// (an empty log once failed a resume test, and the reason was not kept).
pub fn log_of(report: &RunReport) -> String {
    std::fs::read_to_string(&report.log_path).unwrap_or_else(|err| {
        let dir = report.log_path.parent().unwrap_or(&report.log_path);
        let listing: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "(cannot read {}: {err}; its directory holds {listing:?})",
            report.log_path.display()
        )
    })
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
        AgentOutcome::Question(q) => panic!(
            "expected a failure, got a question: {q:?}\nlog:\n{}",
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
        AgentOutcome::Question(q) => panic!(
            "expected success, got a question: {q:?}\nlog:\n{}",
            log_of(report)
        ),
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

fn ws(sb: &Sandbox) -> String {
    sb.workspace.display().to_string()
}

/// Issue #19: a bad key is not retried: permanent, manual, in the CLI's words.
#[tokio::test]
async fn a_401_is_an_auth_failure_for_both_clis() {
    let sb = Sandbox::new();
    let server = ModelServer::start(vec![], Some(Step::Status(401)), &ws(&sb)).await;
    let report = run(&plan(&claude_agent(&server, &sb), &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.auth", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("API Error: 401"), "{detail}");

    let report = run(&plan(&codex_agent(&server, &sb), &sb, 2)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.auth", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("401 Unauthorized"), "{detail}");
}

#[tokio::test]
async fn a_400_and_a_missing_key_are_config_and_auth_failures_for_codex() {
    let sb = Sandbox::new();
    let server = ModelServer::start(vec![], Some(Step::Status(400)), &ws(&sb)).await;
    let report = run(&plan(&codex_agent(&server, &sb), &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.config", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("mock: the request is invalid"), "{detail}");

    let mut agent = codex_agent(&server, &sb);
    agent.env.remove("MOCK_OPENAI_API_KEY");
    let report = run(&plan(&agent, &sb, 2)).await;
    let (code, _, next, detail) = failure(&report);
    assert_eq!((code, next), ("agent.auth", NextAction::Manual), "{detail}");
    assert!(detail.contains("MOCK_OPENAI_API_KEY"), "{detail}");
}

/// Issue #19: outside a git repository, without `--skip-git-repo-check`.
#[tokio::test]
async fn codex_outside_a_git_repository_is_a_config_failure_with_the_fix() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let mut agent = codex_agent(&server, &sb);
    agent.extra_args.clear();
    let report = run(&plan(&agent, &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.config", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("--skip-git-repo-check"), "{detail}");
    assert!(server.model_calls().is_empty());
}

/// Issue #19: 529 overloaded is transient; the next attempt succeeds.
#[tokio::test]
async fn claude_overloaded_is_transient_and_the_retry_succeeds() {
    let sb = Sandbox::new();
    let server = ModelServer::start(vec![Step::Status(529)], None, &ws(&sb)).await;
    let agent = claude_agent(&server, &sb);
    let report = run(&plan(&agent, &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.api_error", Category::Transient, NextAction::Retry),
        "{detail}"
    );
    server.script(write_then_done(), None);
    let report = run(&plan(&agent, &sb, 2)).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
    assert_matches_billed(report.usage, server.billed());
}

/// Issue #19: an SSE error mid-stream, or a cut stream: Claude Code calls again (streaming
/// or not) and its `result.usage` may not count every call; sortie still counts what the
/// server billed.
#[tokio::test]
async fn claude_stream_error_or_cut_is_retried_by_the_cli_and_usage_still_matches() {
    for trouble in [Step::StreamError, Step::Cut] {
        let sb = Sandbox::new();
        let mut steps = vec![trouble.clone()];
        steps.extend(write_then_done());
        let server = ModelServer::start(steps, None, &ws(&sb)).await;
        let mut agent = claude_agent(&server, &sb);
        // The CLI's own retry of the broken call.
        agent
            .env
            .insert("CLAUDE_CODE_MAX_RETRIES".into(), "1".into());
        let report = run(&plan(&agent, &sb, 1)).await;
        let streamed: Vec<_> = server
            .model_calls()
            .iter()
            .map(|c| c.body["stream"].clone())
            .collect();
        assert!(
            report.outcome.is_success(),
            "{trouble:?}: calls (stream flag): {streamed:?}\n{}",
            log_of(&report)
        );
        assert_eq!(server.billed().calls, 2, "{trouble:?}");
        assert_matches_billed(report.usage, server.billed());
    }
}

#[tokio::test]
async fn claude_max_turns_is_a_policy_failure() {
    let sb = Sandbox::new();
    let looping = Step::Shell("true".into());
    let server = ModelServer::start(vec![], Some(looping), &ws(&sb)).await;
    let mut agent = claude_agent(&server, &sb);
    agent.max_turns = Some(2);
    let report = run(&plan(&agent, &sb, 1)).await;
    let (code, category, _, detail) = failure(&report);
    assert_eq!(
        (code, category),
        ("agent.max_turns", Category::Policy),
        "{detail}"
    );
    assert_matches_billed(report.usage, server.billed());
}

/// The text of every message of a model call, flattened (to find an earlier attempt's words).
fn conversation(call: &crate::model_server::Logged) -> String {
    let messages = if call.body["messages"].is_array() {
        &call.body["messages"]
    } else {
        &call.body["input"]
    };
    messages.to_string()
}

/// Issue #19: the retry resumes the session: its first model call carries the first
/// attempt's conversation, and the usage of each attempt is its own.
#[tokio::test]
async fn claude_resumes_the_previous_session_on_the_next_attempt() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let agent = claude_agent(&server, &sb);
    let first = run(&plan(&agent, &sb, 1)).await;
    assert!(first.outcome.is_success());
    let session = first.session_id.clone().expect("a session id");
    let billed_first = server.billed();

    server.script(vec![Step::Text("MOCK-DONE: resumed".into())], None);
    let calls_before = server.model_calls().len();
    let mut second = plan(&agent, &sb, 2);
    second.resume_session(&agent, &session, first.usage);
    let report = run(&second).await;
    assert_eq!(summary(&report), "MOCK-DONE: resumed");
    assert!(report.notes.is_empty(), "{:?}", report.notes);
    assert_eq!(report.session_start, Some(SessionStart::Resumed));
    assert_eq!(first.session_start, Some(SessionStart::New));
    let resumed_call = &server.model_calls()[calls_before];
    assert!(
        conversation(resumed_call).contains("MOCK-DONE: wrote hello.txt"),
        "the resumed call carries the first attempt's conversation"
    );
    let billed = server.billed();
    let usage = report.usage.unwrap();
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (
            billed.input - billed_first.input,
            billed.output - billed_first.output
        ),
        "only this attempt's tokens"
    );
}

#[tokio::test]
async fn codex_resumes_the_previous_thread_and_records_only_this_attempts_share() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let agent = codex_agent(&server, &sb);
    let first = run(&plan(&agent, &sb, 1)).await;
    assert!(first.outcome.is_success(), "{}", log_of(&first));
    let thread = first.session_id.clone().expect("a thread id");
    let billed_first = server.billed();
    // What the run kept for the next resume (the pipeline reads it from the run directory).
    let kept = sortie::agent::read_session_record(&sb.run_dir(1)).expect("session.json");
    assert_eq!(kept.session_id, thread);

    server.script(vec![Step::Text("MOCK-DONE: resumed".into())], None);
    let calls_before = server.model_calls().len();
    let mut second = plan(&agent, &sb, 2);
    second.resume_session(&agent, &thread, kept.reported_usage);
    let report = run(&second).await;
    assert_eq!(summary(&report), "MOCK-DONE: resumed");
    assert_eq!(report.session_id.as_deref(), Some(thread.as_str()));
    assert_eq!(report.session_start, Some(SessionStart::Resumed));
    assert!(
        conversation(&server.model_calls()[calls_before]).contains("MOCK-DONE: wrote hello.txt"),
        "the resumed call carries the first attempt's conversation"
    );
    let billed = server.billed();
    let share = Billed {
        calls: billed.calls - billed_first.calls,
        input: billed.input - billed_first.input,
        cache_read: billed.cache_read - billed_first.cache_read,
        cache_write: 0,
        output: billed.output - billed_first.output,
        reasoning: billed.reasoning - billed_first.reasoning,
    };
    assert_matches_billed(report.usage, share);
}

/// Issue #19: a session the CLI no longer has: a fresh start, with a note.
#[tokio::test]
async fn a_session_the_cli_cannot_find_falls_back_to_a_fresh_start() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let agent = claude_agent(&server, &sb);
    let mut p = plan(&agent, &sb, 1);
    p.resume_session(&agent, "0b9f7a3e-1111-4222-8333-944455556666", None);
    let report = run(&p).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert_eq!(report.session_start, Some(SessionStart::FellBack));
    assert!(log_of(&report).contains("starting a fresh session"));

    server.script(write_then_done(), None);
    let agent = codex_agent(&server, &sb);
    let mut p = plan(&agent, &sb, 2);
    p.resume_session(&agent, "01a230e9-4562-7c71-b46d-3e9f3280217b", None);
    let report = run(&p).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert_eq!(report.session_start, Some(SessionStart::FellBack));
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z"))
}

/// Issue #19: Claude Code's Bash tool runs commands in a session of their own; a cancel
/// still kills them.
#[tokio::test]
async fn a_cancelled_run_kills_the_bash_tools_long_command() {
    let sb = Sandbox::new();
    let pidfile = sb.workspace.join("sleep.pid");
    let command = format!("sh -c 'echo $$ > {}; exec sleep 300'", pidfile.display());
    let server = ModelServer::start(vec![Step::Shell(command)], None, &ws(&sb)).await;
    let mut agent = claude_agent(&server, &sb);
    agent.allowed_tools = vec!["Bash".into()];
    let p = plan(&agent, &sb, 1);
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let watch = pidfile.clone();
    let watcher = tokio::spawn(async move {
        for _ in 0..600 {
            if let Some(pid) = std::fs::read_to_string(&watch)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                canceller.cancel();
                return Some(pid);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        canceller.cancel();
        None
    });
    let spec = AgentSpec {
        plan: &p,
        vars: vars(&format!("agent-clis-{}", uuid::Uuid::new_v4().simple())),
    };
    let end = run_agent(spec, cancel, |_| {}).await;
    let pid = watcher
        .await
        .unwrap()
        .expect("the Bash tool started the command");
    let RunEnd::Cancelled { usage, .. } = &end else {
        panic!("{end:?}")
    };
    // The cancelled run still reports what the stream said: the message that called Bash.
    assert_eq!(usage.map(|u| u.input_tokens), Some(1000), "{end:?}");
    for _ in 0..50 {
        if !alive(pid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Bash tool's sleep {pid} outlived the cancelled run");
}

/// Issue #19: a silent tool call that burns CPU (a compile) is alive; a silent one that
/// does nothing is a stall.
#[tokio::test]
async fn a_busy_silent_tool_call_is_not_a_stall_but_an_idle_one_is() {
    let sb = Sandbox::new();
    let busy = Step::Shell("timeout 12 sh -c 'while :; do :; done'; echo done".into());
    let server = ModelServer::start(
        vec![busy, Step::Text("MOCK-DONE: compiled".into())],
        None,
        &ws(&sb),
    )
    .await;
    let mut agent = claude_agent(&server, &sb);
    agent.allowed_tools = vec!["Bash".into()];
    // Above the CLI's own start-up time on a loaded machine; the busy loop lasts longer.
    agent.stall_timeout = Some(Duration::from_secs(5));
    let report = run(&plan(&agent, &sb, 1)).await;
    assert_eq!(summary(&report), "MOCK-DONE: compiled");

    server.script(
        vec![
            Step::Shell("sleep 20".into()),
            Step::Text("MOCK-DONE: slept".into()),
        ],
        None,
    );
    let report = run(&plan(&agent, &sb, 2)).await;
    let (code, ..) = failure(&report);
    assert_eq!(code, "agent.stalled");
}

/// Issue #19: no credentials at all ("Not logged in") is an auth failure, not a retry.
#[tokio::test]
async fn claude_without_a_key_is_an_auth_failure() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let mut agent = claude_agent(&server, &sb);
    agent.env.remove("ANTHROPIC_API_KEY");
    let mut p = plan(&agent, &sb, 1);
    p.env_remove = vec!["ANTHROPIC_API_KEY".into(), "ANTHROPIC_AUTH_TOKEN".into()];
    let report = run(&p).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.auth", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("Not logged in"), "{detail}");
    assert!(server.model_calls().is_empty());
}

/// Issue #19: a denied Write is not a success, unless the config allows denials.
#[tokio::test]
async fn claude_denied_tool_calls_fail_the_run_unless_allowed() {
    let sb = Sandbox::new();
    let server = ModelServer::start(write_then_done(), None, &ws(&sb)).await;
    let mut agent = claude_agent(&server, &sb);
    agent.permission_mode = Some("default".into());
    let report = run(&plan(&agent, &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        (
            "agent.permission_denied",
            Category::Policy,
            NextAction::Manual
        ),
        "{detail}"
    );
    assert!(detail.contains("- Write "), "{detail}");
    assert!(!sb.workspace.join("hello.txt").exists());

    server.script(write_then_done(), None);
    agent.allow_permission_denials = true;
    let report = run(&plan(&agent, &sb, 2)).await;
    assert_eq!(summary(&report), "MOCK-DONE: wrote hello.txt");
}

/// Issue #19: an unknown model is a config failure whose detail names the model.
#[tokio::test]
async fn claude_unknown_model_is_a_config_failure_naming_it() {
    let sb = Sandbox::new();
    let server = ModelServer::start(vec![], Some(Step::Status(404)), &ws(&sb)).await;
    let mut agent = claude_agent(&server, &sb);
    agent.model = Some("no-such-model-7".into());
    let report = run(&plan(&agent, &sb, 1)).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.config", Category::Permanent, NextAction::Manual),
        "{detail}"
    );
    assert!(detail.contains("no-such-model-7"), "{detail}");
}

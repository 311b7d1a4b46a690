//! The `acp` preset (issue #36) end to end: the real runner converses with a fake Agent
//! Client Protocol agent (tests/fixtures/agents/fake-acp, a python3 script) over stdio, and
//! the outcome, usage, permission answers, cancellation and resume are what a person sees.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sortie::agent::{
    run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan, RunReport, SessionStart, Usage,
};
use sortie::block::{Category, NextAction};
use sortie::config::{AcpPermissions, AgentConfig, AgentPreset, Config};
use tokio_util::sync::CancellationToken;

use crate::common::{self, Sandbox};

const PROMPT: &str = "Fix the empty-input case in parse.\nTicket 42.\n";

fn fake() -> String {
    common::repo()
        .join("tests/fixtures/agents/fake-acp")
        .display()
        .to_string()
}

/// The `agent:` section for the fake agent playing `scenario`; `options` are more keys
/// (two-space indented lines), `env` more variables for it.
fn agent(scenario: &str, dir: &Path, options: &str, env: &str) -> AgentConfig {
    let text = format!(
        "tracker: {{kind: local, path: board}}\nagent:\n  preset: acp\n  command: [\"{}\"]\n\
         {options}  env:\n    FAKE_SCENARIO: {scenario}\n    FAKE_LOG: \"{}\"\n{env}\
         active_states: [todo]\n",
        fake(),
        dir.join("received").display(),
    );
    Config::parse_str(&text, Some(Path::new("/srv/sortie/pipeline.yaml")))
        .expect("valid config")
        .agent
}

fn plan(agent: &AgentConfig, dir: &Path) -> RunPlan {
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    RunPlan::for_agent(agent, PROMPT.to_string(), dir.join("ws"), dir.join("run"))
}

async fn run_plan(plan: &RunPlan, cancel: CancellationToken) -> RunEnd {
    run_watched(plan, cancel).await.0
}

/// The run's end, and the process ids it started.
async fn run_watched(plan: &RunPlan, cancel: CancellationToken) -> (RunEnd, Vec<u32>) {
    let vars = BTreeMap::from([("SORTIE_TICKET_ID".to_string(), "42".to_string())]);
    let mut pids = Vec::new();
    let end = run_agent(AgentSpec { plan, vars }, cancel, |pid| pids.push(pid)).await;
    (end, pids)
}

/// Whether process `pid` still exists (the runner reaps its agent, so no zombie is left).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Run to the end; whatever ended it, the agent (which keeps running after its turn) is
/// gone.
async fn run(agent: &AgentConfig, dir: &Path) -> RunReport {
    let (end, pids) = run_watched(&plan(agent, dir), CancellationToken::new()).await;
    assert!(
        !pids.is_empty() && !pids.iter().any(|p| alive(*p)),
        "{pids:?}"
    );
    match end {
        RunEnd::Finished(report) => report,
        RunEnd::Cancelled { .. } => panic!("unexpected cancel"),
    }
}

/// What the fake agent received from sortie, one JSON-RPC message each.
fn received(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("received"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("sortie sends JSON, one message a line"))
        .collect()
}

fn sent_method<'a>(messages: &'a [serde_json::Value], method: &str) -> Vec<&'a serde_json::Value> {
    messages.iter().filter(|m| m["method"] == method).collect()
}

/// The answer sortie gave to the agent's request `id`.
fn answer_to(messages: &[serde_json::Value], id: serde_json::Value) -> &serde_json::Value {
    messages
        .iter()
        .find(|m| m["id"] == id && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer to {id}: {messages:#?}"))
}

fn failure(report: &RunReport) -> (&str, Category, NextAction, &str) {
    match &report.outcome {
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => (reason_code, *category, *next_action, detail),
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn summary(report: &RunReport) -> &str {
    match &report.outcome {
        AgentOutcome::Success { summary, .. } => summary,
        other => panic!("expected success, got {other:?}"),
    }
}

fn log(report: &RunReport) -> String {
    std::fs::read_to_string(&report.log_path).unwrap()
}

#[tokio::test]
async fn a_turn_ending_normally_reports_the_result_file_and_the_handshake_is_honest() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("success", dir.path(), "", ""), dir.path()).await;
    assert_eq!(summary(&report), "fixed the empty-input case");
    assert_eq!(
        report
            .session_id
            .as_deref()
            .map(|s| s.starts_with("sess-new-")),
        Some(true)
    );
    // The agent reported no usage: unknown, not zero.
    assert_eq!(report.usage, None);
    let got = received(dir.path());
    let init = &sent_method(&got, "initialize")[0]["params"];
    assert_eq!(init["clientCapabilities"]["fs"]["writeTextFile"], true);
    assert_eq!(init["clientCapabilities"]["terminal"], false);
    let new = &sent_method(&got, "session/new")[0]["params"];
    let ws = dir.path().join("ws").canonicalize().unwrap();
    assert_eq!(new["cwd"], ws.display().to_string());
    let prompt = sent_method(&got, "session/prompt")[0]["params"]["prompt"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.starts_with(PROMPT), "{prompt}");
    assert!(
        prompt.contains("result.yaml"),
        "the prompt names the result file: {prompt}"
    );
    // The edit inside the workspace was allowed with a once-option, and logged.
    assert_eq!(
        answer_to(&got, serde_json::json!(1001))["result"]["outcome"]["optionId"],
        "yes"
    );
    assert!(
        log(&report).contains(
            "permission allowed (policy workspace): Edit src/parse.rs [edit] on src/parse.rs"
        ),
        "{}",
        log(&report)
    );
    // No model configured: none chosen.
    assert!(sent_method(&got, "session/set_model").is_empty());
}

#[tokio::test]
async fn a_write_outside_the_workspace_is_denied_at_once_and_the_run_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("outside", dir.path(), "", ""), dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        (
            "agent.permission_denied",
            Category::Policy,
            NextAction::Manual
        )
    );
    assert!(
        detail.contains("/etc/sortie-outside is outside the workspace"),
        "{detail}"
    );
    let got = received(dir.path());
    assert_eq!(
        answer_to(&got, serde_json::json!(1001))["result"]["outcome"]["optionId"],
        "reject"
    );
    assert!(
        log(&report).contains("permission denied (policy workspace): Write /etc/sortie-outside on /etc/sortie-outside"),
        "{}",
        log(&report)
    );
}

#[tokio::test]
async fn allow_all_allows_the_same_write_and_deny_all_refuses_even_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let permissive = agent("outside", dir.path(), "  permissions: allow_all\n", "");
    let report = run(&permissive, dir.path()).await;
    assert_eq!(summary(&report), "fixed the empty-input case");

    let dir = tempfile::tempdir().unwrap();
    let strict = agent("success", dir.path(), "  permissions: deny_all\n", "");
    let report = run(&strict, dir.path()).await;
    // The edit was refused; the result file, sortie's own channel, was still written.
    let got = received(dir.path());
    assert_eq!(
        answer_to(&got, serde_json::json!(1001))["result"]["outcome"]["optionId"],
        "no"
    );
    assert_eq!(summary(&report), "fixed the empty-input case");
}

#[tokio::test]
async fn malformed_messages_are_skipped_and_unknown_requests_refused() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("malformed", dir.path(), "", ""), dir.path()).await;
    assert_eq!(summary(&report), "fixed the empty-input case");
    let got = received(dir.path());
    let refused = answer_to(&got, serde_json::json!("t1"));
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
}

#[tokio::test]
async fn a_notification_flood_is_read_through_and_the_run_still_ends() {
    let dir = tempfile::tempdir().unwrap();
    let flood = agent("flood", dir.path(), "", "    FAKE_FLOOD: \"30000\"\n");
    let report = run(&flood, dir.path()).await;
    assert_eq!(summary(&report), "fixed the empty-input case");
    assert!(log(&report).contains("thinking 29999"));
}

#[tokio::test]
async fn an_agent_exiting_mid_turn_is_an_incomplete_stream_retried() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("exit-mid-turn", dir.path(), "", ""), dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        (
            "agent.stream_incomplete",
            Category::Transient,
            NextAction::Retry
        )
    );
    assert!(
        detail.contains("before it answered `session/prompt`"),
        "{detail}"
    );
    assert!(detail.contains("exit status 3"), "{detail}");
    assert!(detail.contains("Half way"), "{detail}");
}

/// Silence is judged once the handshake is over: a start slower than the stall timeout
/// is not a stall (the handshake has its own bound), and an agent that never answers
/// `initialize` is killed at that bound.
#[tokio::test]
async fn a_slow_handshake_is_not_a_stall_and_a_missing_one_is_killed_at_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let slow = agent(
        "success",
        dir.path(),
        "  stall_timeout_seconds: 1\n",
        "    FAKE_INIT_DELAY: \"2\"\n",
    );
    let report = run(&slow, dir.path()).await;
    assert!(
        matches!(report.outcome, AgentOutcome::Success { .. }),
        "{:?}",
        report.outcome
    );
    let silent = agent(
        "no-init",
        dir.path(),
        "  stall_timeout_seconds: 1\n  handshake_timeout_seconds: 2\n",
        "",
    );
    let report = run(&silent, dir.path()).await;
    let (code, category, _, detail) = failure(&report);
    assert_eq!(
        (code, category),
        ("agent.acp_handshake", Category::Transient)
    );
    assert!(
        detail.contains("did not answer `initialize` within 2s"),
        "{detail}"
    );
}

/// Issue #36: the handshake has a bound of its own, so an agent that never answers
/// `initialize` is not left running for the whole run timeout when stalls are off.
#[tokio::test]
async fn the_handshake_is_bounded_by_its_own_timeout_with_stall_detection_off() {
    let dir = tempfile::tempdir().unwrap();
    let silent = agent(
        "no-init",
        dir.path(),
        "  stall_timeout_seconds: 0
  handshake_timeout_seconds: 1
",
        "",
    );
    assert_eq!(silent.stall_timeout, None);
    let report = run(&silent, dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        (
            "agent.acp_handshake",
            Category::Transient,
            NextAction::Retry
        )
    );
    assert!(
        detail.contains("did not answer `initialize` within 1s"),
        "{detail}"
    );
}

#[tokio::test]
async fn a_silent_model_is_stalled_cancelled_then_killed() {
    let dir = tempfile::tempdir().unwrap();
    let stalled = agent("stall", dir.path(), "  stall_timeout_seconds: 1\n", "");
    let (end, pids) = run_watched(&plan(&stalled, dir.path()), CancellationToken::new()).await;
    let RunEnd::Finished(report) = end else {
        panic!("cancelled")
    };
    assert!(
        !pids.is_empty() && !pids.iter().any(|p| alive(*p)),
        "{pids:?}"
    );
    let (code, _, _, detail) = failure(&report);
    assert_eq!(code, "agent.stalled");
    assert!(detail.contains("no ACP message for 1s"), "{detail}");
    // The turn was cancelled over the protocol before the process was stopped (the
    // silent agent does not read it: the run log shows what was sent).
    let sent = log(&report);
    let cancels = sent
        .lines()
        .filter(|l| l.starts_with("[sortie -> agent]") && l.contains("\"session/cancel\""))
        .count();
    assert_eq!(cancels, 1, "{sent}");
}

#[tokio::test]
async fn a_cancelled_run_sends_session_cancel_and_stops_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let flags = dir.path().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    let env = format!("    FAKE_FLAG_DIR: \"{}\"\n", flags.display());
    let waiting = agent("wait-cancel", dir.path(), "", &env);
    let plan = plan(&waiting, dir.path());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let started = flags.join("turn-started");
    tokio::spawn(async move {
        // Cancel once the turn runs (a cancel before the prompt is simply a kill).
        while !started.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        trigger.cancel();
    });
    let (end, pids) = run_watched(&plan, cancel).await;
    assert!(matches!(end, RunEnd::Cancelled { .. }), "{end:?}");
    // The agent kept running after its turn ended: the runner stopped it.
    assert!(
        !pids.is_empty() && !pids.iter().any(|p| alive(*p)),
        "{pids:?}"
    );
    let got = received(dir.path());
    let cancels = sent_method(&got, "session/cancel");
    assert_eq!(cancels.len(), 1, "{got:#?}");
    assert!(cancels[0]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .starts_with("sess-new-"));
}

#[tokio::test]
async fn a_stop_reason_other_than_end_turn_is_a_failure_whatever_the_result_file() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("max-tokens", dir.path(), "", ""), dir.path()).await;
    assert!(dir.path().join("run/result.yaml").exists());
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.max_tokens", Category::Policy, NextAction::Escalate)
    );
    assert!(detail.contains("`max_tokens`"), "{detail}");
}

#[tokio::test]
async fn a_turn_ended_without_a_result_file_reports_the_last_message() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(&agent("no-result", dir.path(), "", ""), dir.path()).await;
    assert_eq!(summary(&report), "Fixed the empty-input case.");
}

#[tokio::test]
async fn usage_is_read_as_each_agent_reports_it() {
    let cases = [
        // Gemini CLI: the prompt answer's `_meta.quota.token_count`.
        (
            "gemini",
            Some(Usage {
                input_tokens: 2300,
                output_tokens: 120,
                ..Usage::default()
            }),
        ),
        // Qwen Code: `_meta.usage` on each update, one per model call, summed (three here);
        // the total shows thoughts are apart from the output count.
        (
            "qwen",
            Some(Usage {
                input_tokens: 3000,
                output_tokens: 180,
                cache_read_tokens: 600,
                reasoning_tokens: 30,
                ..Usage::default()
            }),
        ),
        // OpenCode: the standard `usage` on the answer.
        (
            "opencode",
            Some(Usage {
                input_tokens: 700,
                output_tokens: 150,
                cache_read_tokens: 50,
                ..Usage::default()
            }),
        ),
        // claude-code-acp: none, so unknown.
        ("none", None),
    ];
    for (shape, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let env = format!("    FAKE_USAGE: {shape}\n");
        let report = run(&agent("success", dir.path(), "", &env), dir.path()).await;
        assert_eq!(report.usage, want, "{shape}");
    }
}

#[tokio::test]
async fn the_model_is_chosen_over_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(
        &agent("success", dir.path(), "  model: gemini-2.5-pro\n", ""),
        dir.path(),
    )
    .await;
    assert_eq!(summary(&report), "fixed the empty-input case");
    let got = received(dir.path());
    let set = sent_method(&got, "session/set_model");
    assert_eq!(set.len(), 1);
    assert_eq!(set[0]["params"]["modelId"], "gemini-2.5-pro");
}

#[tokio::test]
async fn a_resumed_run_loads_its_session_and_falls_back_when_the_load_fails() {
    let dir = tempfile::tempdir().unwrap();
    let resumable = agent("success", dir.path(), "", "");
    let mut plan = plan(&resumable, dir.path());
    plan.resume_session(&resumable, "sess-old", None);
    let RunEnd::Finished(report) = run_plan(&plan, CancellationToken::new()).await else {
        panic!("cancelled")
    };
    assert_eq!(report.session_id.as_deref(), Some("sess-old"));
    assert_eq!(report.session_start, Some(SessionStart::Resumed));
    assert!(report.notes.is_empty(), "{:?}", report.notes);
    // The replayed history is not this run's: the summary and turns are the new turn's.
    assert_eq!(summary(&report), "fixed the empty-input case");
    let got = received(dir.path());
    assert_eq!(
        sent_method(&got, "session/load")[0]["params"]["sessionId"],
        "sess-old"
    );
    assert!(sent_method(&got, "session/new").is_empty());

    let dir = tempfile::tempdir().unwrap();
    let refusing = agent("success", dir.path(), "", "    FAKE_LOAD: fail\n");
    let mut plan = self::plan(&refusing, dir.path());
    plan.resume_session(&refusing, "sess-old", None);
    let RunEnd::Finished(report) = run_plan(&plan, CancellationToken::new()).await else {
        panic!("cancelled")
    };
    assert_eq!(summary(&report), "fixed the empty-input case");
    assert!(report
        .session_id
        .as_deref()
        .unwrap()
        .starts_with("sess-new-"));
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert!(
        report.notes[0]
            .contains("session/load of session sess-old failed (No previous sessions found)"),
        "{:?}",
        report.notes
    );
    assert_eq!(sent_method(&received(dir.path()), "session/new").len(), 1);
    assert_eq!(report.session_start, Some(SessionStart::FellBack));
}

fn pipeline(scenario: &str, received: &Path, usage: &str) -> Sandbox {
    pipeline_with(scenario, received, usage, "")
}

/// `pipeline`, with `more` variables for the fake agent (`, NAME: value`).
fn pipeline_with(scenario: &str, received: &Path, usage: &str, more: &str) -> Sandbox {
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent:
  preset: acp
  command: ["{fake}"]
  permissions: workspace
  env: {{FAKE_SCENARIO: {scenario}, FAKE_LOG: "{received}", FAKE_USAGE: {usage}{more}}}
retry: {{max_attempts: 2, backoff_base_seconds: 1, backoff_max_seconds: 1}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: done, failure_status: blocked}}
"#,
        roles = common::repo().join("roles").display(),
        fake = fake(),
        received = received.display(),
    );
    Sandbox::with_config(&config)
}

#[test]
fn a_pipeline_tick_runs_an_acp_agent_to_a_success_block_with_its_usage() {
    let out = tempfile::tempdir().unwrap();
    let sb = pipeline("success", &out.path().join("received"), "gemini");
    let id = sb.add("Fix parse", "ready-for-design", &[]);
    sb.tick();
    assert_eq!(sb.ticket(&id).status, "done");
    let blocks = sb.blocks(&id);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    assert!(
        format!("{:?}", blocks[0]).contains("fixed the empty-input case"),
        "{:?}",
        blocks[0]
    );
    let status = sb.status_json();
    let row = &status["usage"][0];
    assert_eq!(row["tokens_in"], 2300, "{status:#}");
    assert_eq!(row["tokens_out"], 120, "{status:#}");
}

#[test]
fn a_retry_loads_the_previous_session() {
    let out = tempfile::tempdir().unwrap();
    let received = out.path().join("received");
    let sb = pipeline("exit-mid-turn", &received, "none");
    let id = sb.add("Fix parse", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    // Issue #36: the tick report says how each run's session began.
    assert_eq!(report["runs"][0]["session"], "new", "{report:#}");
    let first = self::received(out.path());
    assert!(sent_method(&first, "session/load").is_empty());
    std::fs::remove_file(&received).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["attempt"], 2, "{report:#}");
    assert_eq!(report["runs"][0]["session"], "resumed", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "blocked");
    let second = self::received(out.path());
    let load = sent_method(&second, "session/load");
    assert_eq!(load.len(), 1, "{second:#?}");
    assert!(load[0]["params"]["sessionId"]
        .as_str()
        .unwrap()
        .starts_with("sess-new-"));
}

/// Issue #36: a retry whose `session/load` the agent refuses starts a new session, and the
/// tick report says it fell back (the agent lost the first attempt's context).
#[test]
fn a_retry_whose_load_fails_is_reported_as_fallen_back() {
    let out = tempfile::tempdir().unwrap();
    let received = out.path().join("received");
    let sb = pipeline_with("exit-mid-turn", &received, "none", ", FAKE_LOAD: fail");
    let id = sb.add("Fix parse", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["session"], "new", "{report:#}");
    std::fs::remove_file(&received).unwrap();
    let report = tick_until_attempt(&sb, 2);
    assert_eq!(report["runs"][0]["session"], "fell_back", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "blocked");
    let second = self::received(out.path());
    assert_eq!(sent_method(&second, "session/load").len(), 1, "{second:#?}");
    assert_eq!(sent_method(&second, "session/new").len(), 1, "{second:#?}");
}

/// Tick until a tick runs attempt `attempt` (the retry's backoff is 1 s); its report.
fn tick_until_attempt(sb: &Sandbox, attempt: u64) -> serde_json::Value {
    for _ in 0..30 {
        let report = sb.tick_json(&[]);
        if report["runs"][0]["attempt"] == attempt {
            return report;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("attempt {attempt} never ran");
}

// ---- config ----

fn problems(agent_yaml: &str) -> Vec<String> {
    let text = format!(
        "tracker: {{kind: local, path: board}}\nagent:\n{agent_yaml}active_states: [todo]\n"
    );
    match Config::parse_str(&text, Some(Path::new("/srv/sortie/pipeline.yaml"))) {
        Ok(cfg) => panic!("should be refused: {:#?}", cfg.agent),
        Err(err) => err.diagnostics().iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_acp_preset_takes_a_policy_a_model_and_extra_args() {
    let dir = tempfile::tempdir().unwrap();
    let plain = agent("success", dir.path(), "", "");
    assert_eq!(plain.permissions, AcpPermissions::Workspace, "the default");
    assert_eq!(
        plain.handshake_timeout,
        Duration::from_secs(60),
        "the default"
    );
    let set = agent(
        "success",
        dir.path(),
        "  permissions: deny_all\n  model: qwen3-coder\n  extra_args: [--debug]\n",
        "",
    );
    assert_eq!(set.preset, AgentPreset::Acp);
    assert_eq!(set.permissions, AcpPermissions::DenyAll);
    assert_eq!(set.model.as_deref(), Some("qwen3-coder"));
    // The model goes over the protocol, not on the command line.
    assert_eq!(
        sortie::agent::preset_argv(&set),
        [fake(), "--debug".to_string()]
    );
}

#[test]
fn bad_acp_settings_are_refused_at_their_key() {
    let got = problems("  preset: acp\n  command: [gemini, --acp]\n  permissions: workspaces\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("/srv/sortie/pipeline.yaml:5:16: agent.permissions: unknown permissions policy \"workspaces\" (expected one of: `workspace`, `allow_all`, `deny_all`)"),
        "{got:?}"
    );
    let got = problems("  preset: claude-code\n  permissions: allow_all\n");
    assert!(
        got[0].contains("4:3: agent.permissions: `permissions` is an option of preset `acp`, not of `claude-code`"),
        "{got:?}"
    );
    let got = problems("  preset: acp\n  command: [qwen, --acp]\n  handshake_timeout_seconds: 0\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains(
            "5:30: agent.handshake_timeout_seconds: expected a whole number >= 1, found 0"
        ),
        "{got:?}"
    );
    let got = problems("  preset: codex\n  handshake_timeout_seconds: 30\n");
    assert!(
        got[0].contains("agent.handshake_timeout_seconds: `handshake_timeout_seconds` is an option of preset `acp`, not of `codex`"),
        "{got:?}"
    );
    // An ACP agent is any program: it must be named.
    let got = problems("  preset: acp\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("missing required key `command`"), "{got:?}");
}

#[test]
fn validate_shows_the_policy_and_a_role_file_can_change_it() {
    let out = tempfile::tempdir().unwrap();
    let sb = pipeline("success", &out.path().join("received"), "none");
    let shown = sb.ok(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert!(
        shown.contains(&format!(
            "agent: {}, over ACP, permissions workspace (timeout 3600s, stall 300s)",
            fake()
        )),
        "{shown}"
    );
    // A role whose front matter denies everything: the edit inside the workspace is refused.
    let roles = sb.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    std::fs::write(
        roles.join("architect.md"),
        "---\npermissions: deny_all\n---\nDesign {{ ticket.title }}.\n",
    )
    .unwrap();
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    let config = config
        .lines()
        .map(|l| {
            if l.starts_with("roles_dir:") {
                "roles_dir: roles".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb.add("Design it", "ready-for-design", &[]);
    sb.tick();
    assert_eq!(sb.ticket(&id).status, "done");
    let got = received(out.path());
    assert_eq!(
        answer_to(&got, serde_json::json!(1001))["result"]["outcome"]["optionId"],
        "no",
        "{got:#?}"
    );
    std::fs::write(
        roles.join("architect.md"),
        "---\npermissions: none\n---\nDesign.\n",
    )
    .unwrap();
    // Issue #36: a bad policy is said as the config says it: file, line and column of the
    // value, the key, and the policies there are (not serde's "unknown variant").
    let refused = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let file = roles.join("architect.md").display().to_string();
    assert!(
        stderr.contains(&format!(
            "{file}:2:14: permissions: unknown permissions policy \"none\" (expected one of: \
             `workspace`, `allow_all`, `deny_all`)"
        )),
        "{stderr}"
    );
    std::fs::write(
        roles.join("architect.md"),
        "---\ndescription: the design\npermissions:   [workspace]\n---\nDesign.\n",
    )
    .unwrap();
    let refused = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "{file}:3:16: permissions: expected one of: `workspace`, `allow_all`, `deny_all`, \
             found a list"
        )),
        "{stderr}"
    );
}

#[test]
fn a_route_may_change_the_policy_and_only_for_an_acp_agent() {
    let text = |preset: &str| {
        format!(
            "tracker: {{kind: local, path: board}}\nagent:\n  preset: {preset}\n  \
             command: [my-agent]\npipeline_stages:\n  - role: backend\n    claim_status: todo\n    \
             success_status: review\n    routes:\n      - when: {{labels: [trusted]}}\n        \
             agent: {{permissions: allow_all, handshake_timeout_seconds: 300}}\n"
        )
    };
    let cfg = Config::parse_str(&text("acp"), Some(Path::new("/srv/sortie/pipeline.yaml")))
        .expect("valid config");
    let route = &cfg.stages[0].routes[0];
    assert_eq!(route.agent.permissions, Some(AcpPermissions::AllowAll));
    assert_eq!(
        route.agent.apply(&cfg.agent).permissions,
        AcpPermissions::AllowAll
    );
    assert_eq!(cfg.agent.permissions, AcpPermissions::Workspace);
    // The handshake bound too (a slow `session/load` on one route).
    assert_eq!(
        route.agent.apply(&cfg.agent).handshake_timeout,
        Duration::from_secs(300)
    );
    assert_eq!(cfg.agent.handshake_timeout, Duration::from_secs(60));
    let refused = Config::parse_str(&text("codex"), Some(Path::new("/srv/sortie/pipeline.yaml")))
        .expect_err("permissions belong to acp");
    let got: Vec<String> = refused
        .diagnostics()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        got[0].contains(
            "agent.permissions: `permissions` is an option of preset `acp`, not of `codex`"
        ),
        "{got:?}"
    );
}

#[tokio::test]
async fn the_live_run_shows_the_last_event_turns_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = agent("success", dir.path(), "", "    FAKE_USAGE: qwen\n");
    let mut plan = plan(&qwen, dir.path());
    let progress = sortie::agent::ProgressHandle::default();
    plan.stream.progress = Some(progress.clone());
    let RunEnd::Finished(report) = run_plan(&plan, CancellationToken::new()).await else {
        panic!("cancelled")
    };
    assert_eq!(summary(&report), "fixed the empty-input case");
    let seen = progress.snapshot();
    let last = seen.last_event.expect("an event");
    assert_eq!(
        (last.kind.as_str(), last.text.as_str()),
        ("stop", "end_turn")
    );
    // Three model calls reported usage (one per message chunk in the fake).
    assert_eq!(seen.turns, Some(3));
    assert_eq!(seen.usage, report.usage);
    assert_eq!(seen.usage.map(|u| u.input_tokens), Some(3000));
}

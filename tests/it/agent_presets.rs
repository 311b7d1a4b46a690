//! Agent CLI presets end to end: a config naming a preset, the argv it builds, the real runner
//! starting a fake `claude` / `codex` (tests/fixtures/agents) that replays a recorded event
//! stream, and the outcome, summary and usage read from that stream. Also the loader's checks
//! of the preset fields.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sortie::agent::{run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan, RunReport, Usage};
use sortie::block::{Category, NextAction};
use sortie::config::{AgentConfig, AgentPreset, Config, ConfigError};
use tokio_util::sync::CancellationToken;

const PROMPT: &str = "Fix the empty-input case in parse.\nTicket 42.\n";

fn fake(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(name)
        .display()
        .to_string()
}

fn parse(agent_yaml: &str) -> Result<Config, ConfigError> {
    let text = format!(
        "tracker: {{kind: local, path: board}}\nagent:\n{agent_yaml}active_states: [todo]\n"
    );
    Config::parse_str(&text, Some(Path::new("/srv/sortie/pipeline.yaml")))
}

/// The `agent:` section for a preset run against the fake CLI in `dir`.
fn agent(preset: &str, program: &str, scenario: &str, dir: &Path, options: &str) -> AgentConfig {
    let yaml = format!(
        "  preset: {preset}\n  command: [\"{}\"]\n{options}  env:\n    FAKE_SCENARIO: {scenario}\n    \
         FAKE_ARGV_FILE: \"{}\"\n    FAKE_STDIN_FILE: \"{}\"\n",
        fake(program),
        dir.join("argv").display(),
        dir.join("stdin").display(),
    );
    parse(&yaml).expect("valid config").agent
}

async fn run(agent: &AgentConfig, dir: &Path) -> RunReport {
    let plan = RunPlan::for_agent(agent, PROMPT.to_string(), dir.join("ws"), dir.join("run"));
    let vars = BTreeMap::from([("SORTIE_TICKET_ID".to_string(), "42".to_string())]);
    match run_agent(
        AgentSpec { plan: &plan, vars },
        CancellationToken::new(),
        |_| {},
    )
    .await
    {
        RunEnd::Finished(report) => report,
        RunEnd::Cancelled { .. } => panic!("unexpected cancel"),
    }
}

async fn claude(scenario: &str, dir: &Path) -> RunReport {
    run(&agent("claude-code", "fake-claude", scenario, dir, ""), dir).await
}

async fn codex(scenario: &str, dir: &Path) -> RunReport {
    run(&agent("codex", "fake-codex", scenario, dir, ""), dir).await
}

fn summary(report: &RunReport) -> &str {
    match &report.outcome {
        AgentOutcome::Success { summary, .. } => summary,
        AgentOutcome::Failure { detail, .. } => panic!("expected success, got {detail}"),
        AgentOutcome::Question(q) => panic!("expected success, got a question: {q:?}"),
    }
}

fn failure(report: &RunReport) -> (&str, Category, NextAction, &str) {
    match &report.outcome {
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => (reason_code, *category, *next_action, detail),
        AgentOutcome::Success { summary, .. } => panic!("expected a failure, got {summary}"),
        AgentOutcome::Question(q) => panic!("expected a failure, got a question: {q:?}"),
    }
}

fn recorded_argv(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("argv"))
        .expect("the fake CLI recorded its argv")
        .lines()
        .map(str::to_string)
        .collect()
}

const CLAUDE_SUMMARY: &str = "MOCK-CLAUDE-DONE: wrote claude_hello.txt in the working directory.";
const CODEX_SUMMARY: &str = "MOCK-CODEX-DONE: wrote codex_hello.txt in the working directory.";

#[tokio::test]
async fn claude_code_success_reports_result_text_usage_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let options = "  model: sonnet\n  permission_mode: acceptEdits\n  max_turns: 40\n  \
                   allowed_tools: [Read, Edit, \"Bash(cargo test:*)\"]\n";
    let agent = agent("claude-code", "fake-claude", "success", dir.path(), options);
    let report = run(&agent, dir.path()).await;
    assert_eq!(summary(&report), CLAUDE_SUMMARY);
    assert_eq!(
        report.usage,
        Some(Usage {
            input_tokens: 2000,
            output_tokens: 80,
            cache_read_tokens: 60,
            cache_write_tokens: 400,
            reasoning_tokens: 0,
            cost_usd: Some(0.01453)
        })
    );
    assert_eq!(report.exit_code, Some(0));
    assert_eq!(
        recorded_argv(dir.path()),
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "sonnet",
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "40",
            "--allowedTools",
            "Read,Edit,Bash(cargo test:*)",
        ],
        "the prompt is not in argv"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("stdin")).unwrap(),
        PROMPT,
        "the prompt goes on stdin"
    );
    let log = std::fs::read_to_string(&report.log_path).unwrap();
    assert!(
        log.contains("\"type\":\"result\""),
        "the run log keeps the stream"
    );
}

#[tokio::test]
async fn claude_code_error_result_is_a_failure_with_usage() {
    let dir = tempfile::tempdir().unwrap();
    let report = claude("max-turns", dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.max_turns", Category::Policy, NextAction::Escalate)
    );
    assert!(detail.contains("error_max_turns"), "{detail}");
    let cost = report.usage.and_then(|u| u.cost_usd).unwrap();
    assert!((cost - 0.007265).abs() < 1e-9, "{cost}");

    // A 401 (the real CLI's stream, after its own retries) is not retried by sortie.
    let report = claude("api-error", dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        ("agent.auth", Category::Permanent, NextAction::Manual)
    );
    assert!(detail.contains("Invalid API key"), "{detail}");
}

#[tokio::test]
async fn claude_code_cut_off_mid_stream_is_incomplete_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let report = claude("cut", dir.path()).await;
    let (code, category, next, detail) = failure(&report);
    assert_eq!(
        (code, category, next),
        (
            "agent.stream_incomplete",
            Category::Transient,
            NextAction::Retry
        )
    );
    assert!(detail.contains("exit status 1; 4 events"), "{detail}");
    assert!(
        detail.contains("stderr:\nclaude: connection reset by peer"),
        "{detail}"
    );
    // What the one message streamed so far reported (the CLI's streamed usage counts one
    // output token until the message ends).
    assert_eq!(
        report.usage,
        Some(Usage {
            input_tokens: 1000,
            output_tokens: 1,
            cache_read_tokens: 30,
            cache_write_tokens: 200,
            reasoning_tokens: 0,
            cost_usd: None
        })
    );

    let report = claude("killed", dir.path()).await;
    let (code, _, _, detail) = failure(&report);
    assert_eq!(code, "agent.stream_incomplete");
    assert!(detail.contains("killed by a signal"), "{detail}");
}

#[tokio::test]
async fn the_result_file_wins_over_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let report = claude("cut-with-result-file", dir.path()).await;
    assert_eq!(summary(&report), "the result file wins");
}

#[tokio::test]
async fn claude_code_noise_lines_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let report = claude("noise", dir.path()).await;
    assert_eq!(summary(&report), CLAUDE_SUMMARY);
    assert_eq!(report.usage.map(|u| u.output_tokens), Some(80));
}

#[tokio::test]
async fn a_giant_line_is_skipped_and_the_run_still_reads_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let report = claude("giant", dir.path()).await;
    assert_eq!(summary(&report), CLAUDE_SUMMARY);
    let logged = std::fs::metadata(&report.log_path).unwrap().len();
    assert!(
        logged > 10_000_000,
        "the whole line still reaches the log ({logged} bytes)"
    );
    let report = codex("giant", dir.path()).await;
    assert_eq!(summary(&report), CODEX_SUMMARY);
}

#[tokio::test]
async fn codex_success_reports_last_message_and_usage_without_cost() {
    let dir = tempfile::tempdir().unwrap();
    let options =
        "  model: gpt-5-codex\n  sandbox: workspace-write\n  extra_args: [--skip-git-repo-check]\n";
    let agent = agent("codex", "fake-codex", "success", dir.path(), options);
    let report = run(&agent, dir.path()).await;
    assert_eq!(summary(&report), CODEX_SUMMARY);
    assert_eq!(
        report.usage,
        Some(Usage {
            input_tokens: 600,
            output_tokens: 120,
            cache_read_tokens: 2400,
            cache_write_tokens: 0,
            reasoning_tokens: 14,
            cost_usd: None
        })
    );
    // The run's directory is writable too: the result file is there.
    let run_dir = dir.path().join("run").display().to_string();
    assert_eq!(
        recorded_argv(dir.path()),
        [
            "exec",
            "--json",
            "--add-dir",
            run_dir.as_str(),
            "--model",
            "gpt-5-codex",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "-"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("stdin")).unwrap(),
        PROMPT
    );
}

#[tokio::test]
async fn codex_failures_cuts_and_noise() {
    let dir = tempfile::tempdir().unwrap();
    let report = codex("failed", dir.path()).await;
    let (code, category, _, detail) = failure(&report);
    assert_eq!(
        (code, category),
        ("agent.error_result", Category::Transient)
    );
    assert!(detail.contains("stream disconnected"), "{detail}");

    let report = codex("cut", dir.path()).await;
    let (code, _, _, detail) = failure(&report);
    assert_eq!(code, "agent.stream_incomplete");
    assert!(
        detail.contains("last words:\nstream disconnected before completion"),
        "{detail}"
    );

    let report = codex("killed", dir.path()).await;
    assert_eq!(failure(&report).0, "agent.stream_incomplete");

    let report = codex("noise", dir.path()).await;
    assert_eq!(summary(&report), CODEX_SUMMARY);
}

#[tokio::test]
async fn the_command_preset_reports_no_usage() {
    let dir = tempfile::tempdir().unwrap();
    let agent = parse("  command: [sh, -c, \"echo '{\\\"type\\\":\\\"result\\\"}'; echo done\"]\n")
        .unwrap()
        .agent;
    let report = run(&agent, dir.path()).await;
    assert_eq!(summary(&report), "{\"type\":\"result\"}\ndone");
    assert_eq!(report.usage, None);
}

// ---- config ----

fn problems(agent_yaml: &str) -> Vec<String> {
    match parse(agent_yaml) {
        Ok(cfg) => panic!("should be refused: {:#?}", cfg.agent),
        Err(err) => err.diagnostics().iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_preset_without_command_runs_its_cli_from_path() {
    let cfg = parse("  preset: claude-code\n").unwrap();
    assert_eq!(cfg.agent.preset, AgentPreset::ClaudeCode);
    assert_eq!(cfg.agent.command, ["claude"]);
    let cfg = parse("  preset: codex\n  command: [./bin/codex]\n").unwrap();
    assert_eq!(cfg.agent.command, ["/srv/sortie/bin/codex"]);
    let cfg = parse("  command: [my-agent]\n").unwrap();
    assert_eq!(cfg.agent.preset, AgentPreset::Command);
}

#[test]
fn an_unknown_preset_names_the_known_ones_with_its_position() {
    let got = problems("  preset: claude\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].starts_with("/srv/sortie/pipeline.yaml:3:11: agent.preset: unknown preset `claude`; did you mean `claude-code`? (expected one of: `command`, `claude-code`, `codex`, `acp`)"),
        "{got:?}"
    );
    let got = problems("  preset: [codex]\n");
    assert!(
        got[0].contains("3:11: agent.preset: expected a preset name"),
        "{got:?}"
    );
}

#[test]
fn options_of_another_preset_are_refused_at_their_key() {
    let got = problems("  preset: codex\n  max_turns: 10\n  permission_mode: plan\n");
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].contains("4:3: agent.max_turns: `max_turns` is an option of preset `claude-code`, not of `codex`"),
        "{got:?}"
    );
    assert!(got[1].contains("5:3: agent.permission_mode"), "{got:?}");
    let got = problems("  command: [my-agent]\n  model: sonnet\n");
    assert!(
        got[0].contains("4:3: agent.model: `model` is an option of preset `claude-code`, `codex` and `acp`; this agent has preset `command`"),
        "{got:?}"
    );
    let got = problems("  preset: claude-code\n  sandbox: read-only\n");
    assert!(got[0].contains("4:3: agent.sandbox"), "{got:?}");
}

#[test]
fn preset_option_values_are_checked() {
    let got = problems(
        "  preset: claude-code\n  max_turns: 0\n  permission_mode: \"accept edits\"\n  \
         allowed_tools: [Read, \"Edit,Write\"]\n  model: --fast\n",
    );
    let fields: Vec<&str> = got
        .iter()
        .map(|d| d.split(": ").nth(1).unwrap_or_default())
        .collect();
    assert_eq!(
        fields,
        [
            "agent.max_turns",
            "agent.permission_mode",
            "agent.allowed_tools[1]",
            "agent.model"
        ],
        "{got:?}"
    );
    let got = problems("  preset: codex\n  sandbox: full\n");
    assert!(got[0].contains("4:12: agent.sandbox: unknown sandbox \"full\" (expected one of: `read-only`, `workspace-write`, `danger-full-access`)"), "{got:?}");
    let got = problems("  preset: codex\n  extra_args: --skip-git-repo-check\n");
    assert!(
        got[0].contains("agent.extra_args: expected a list of arguments"),
        "{got:?}"
    );
    // A section that does not parse reports its one problem, not a missing `command` too.
    let got = problems("  max_turns: ten\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("3:14: agent.max_turns: expected"),
        "{got:?}"
    );
}

#[test]
fn the_command_preset_still_requires_a_command() {
    let got = problems("  timeout_seconds: 60\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("missing required key `command`") && got[0].contains("`preset`"),
        "{got:?}"
    );
}

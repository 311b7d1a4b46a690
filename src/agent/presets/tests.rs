//! Unit tests: the argv each preset builds, and recorded streams parsed without a process.

use std::time::Duration;

use super::*;

const CLAUDE_SUCCESS: &[u8] = include_bytes!("../../../tests/fixtures/agents/claude-success.jsonl");
const CLAUDE_MAX_TURNS: &[u8] =
    include_bytes!("../../../tests/fixtures/agents/claude-max-turns.jsonl");
const CLAUDE_API_ERROR: &[u8] =
    include_bytes!("../../../tests/fixtures/agents/claude-api-error.jsonl");
const CODEX_SUCCESS: &[u8] = include_bytes!("../../../tests/fixtures/agents/codex-success.jsonl");
const CODEX_FAILED: &[u8] = include_bytes!("../../../tests/fixtures/agents/codex-failed.jsonl");

fn agent(preset: AgentPreset) -> AgentConfig {
    AgentConfig {
        preset,
        command: preset
            .default_program()
            .map(|p| vec![p.to_string()])
            .unwrap_or_else(|| vec!["my-agent".to_string()]),
        model: None,
        permission_mode: None,
        max_turns: None,
        allowed_tools: Vec::new(),
        sandbox: None,
        extra_args: Vec::new(),
        timeout: Duration::from_secs(60),
        stall_timeout: None,
        env: Default::default(),
    }
}

fn failure(outcome: &AgentOutcome) -> (&str, Category, NextAction, &str) {
    match outcome {
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => (reason_code, *category, *next_action, detail),
        AgentOutcome::Success { summary, .. } => {
            panic!("expected a failure, got success: {summary}")
        }
    }
}

fn summary(outcome: &AgentOutcome) -> &str {
    match outcome {
        AgentOutcome::Success { summary, .. } => summary,
        AgentOutcome::Failure { detail, .. } => panic!("expected success, got {detail}"),
    }
}

#[test]
fn command_preset_runs_the_argv_as_configured() {
    let mut a = agent(AgentPreset::Command);
    a.command = vec!["sh".into(), "-c".into(), "echo hi".into()];
    assert_eq!(preset_argv(&a), ["sh", "-c", "echo hi"]);
}

#[test]
fn claude_code_argv_carries_the_configured_flags_in_order() {
    let bare = agent(AgentPreset::ClaudeCode);
    assert_eq!(
        preset_argv(&bare),
        [
            "claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose"
        ]
    );
    let mut a = agent(AgentPreset::ClaudeCode);
    a.command = vec!["/opt/claude/bin/claude".into()];
    a.model = Some("sonnet".into());
    a.permission_mode = Some("acceptEdits".into());
    a.max_turns = Some(30);
    a.allowed_tools = vec!["Read".into(), "Edit".into(), "Bash(git diff:*)".into()];
    a.extra_args = vec!["--append-system-prompt".into(), "Be brief.".into()];
    assert_eq!(
        preset_argv(&a),
        [
            "/opt/claude/bin/claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            "sonnet",
            "--permission-mode",
            "acceptEdits",
            "--max-turns",
            "30",
            "--allowedTools",
            "Read,Edit,Bash(git diff:*)",
            "--append-system-prompt",
            "Be brief.",
        ]
    );
}

#[test]
fn codex_argv_reads_the_prompt_from_stdin_last() {
    assert_eq!(
        preset_argv(&agent(AgentPreset::Codex)),
        ["codex", "exec", "--json", "-"]
    );
    let mut a = agent(AgentPreset::Codex);
    a.command = vec!["npx".into(), "@openai/codex".into()];
    a.model = Some("gpt-5-codex".into());
    a.sandbox = Some("workspace-write".into());
    a.extra_args = vec!["--skip-git-repo-check".into()];
    assert_eq!(
        preset_argv(&a),
        [
            "npx",
            "@openai/codex",
            "exec",
            "--json",
            "--model",
            "gpt-5-codex",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "-",
        ]
    );
}

#[test]
fn claude_success_gives_the_result_text_usage_and_cost() {
    let s = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_SUCCESS).unwrap();
    assert_eq!(
        summary(&s.outcome(Some(0), "")),
        "Fixed the empty-input case in parse and added a regression test; cargo test passes."
    );
    assert_eq!(
        s.usage(),
        Some(Usage {
            input_tokens: 3120 + 10240 + 52000,
            output_tokens: 1530,
            cost_usd: Some(0.1842),
        })
    );
}

#[test]
fn claude_stream_split_at_every_byte_parses_the_same() {
    let mut s = EventStream::new(AgentPreset::ClaudeCode).unwrap();
    for byte in CLAUDE_SUCCESS.chunks(1) {
        s.feed(byte);
    }
    s.end();
    assert!(s.outcome(Some(0), "").is_success());
    assert_eq!(s.counts.events, 7);
    assert_eq!(s.usage().unwrap().output_tokens, 1530);
}

#[test]
fn claude_max_turns_is_a_policy_failure_with_usage() {
    let s = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_MAX_TURNS).unwrap();
    let outcome = s.outcome(Some(1), "");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.max_turns", Category::Policy, NextAction::Escalate)
    );
    assert!(
        detail.contains("error_max_turns") && detail.contains("2 turns"),
        "{detail}"
    );
    assert!(detail.contains("session 5f0c6a2e"), "{detail}");
    assert_eq!(s.usage().unwrap().input_tokens, 3400);
    assert_eq!(s.usage().unwrap().cost_usd, Some(0.0311));
}

#[test]
fn claude_api_errors_split_by_status() {
    let s = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_API_ERROR).unwrap();
    let outcome = s.outcome(Some(1), "");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.api_error", Category::Permanent, NextAction::Escalate)
    );
    assert!(
        detail.contains("invalid x-api-key") && detail.contains("API status 401"),
        "{detail}"
    );
    let overloaded = String::from_utf8_lossy(CLAUDE_API_ERROR).replace("401", "529");
    let s = EventStream::parse(AgentPreset::ClaudeCode, overloaded.as_bytes()).unwrap();
    let outcome = s.outcome(Some(1), "");
    let (code, category, next, _) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.api_error", Category::Transient, NextAction::Retry)
    );
}

#[test]
fn claude_other_error_subtypes() {
    let line = |subtype: &str| {
        format!(
            "{{\"type\":\"result\",\"subtype\":\"{subtype}\",\"is_error\":true,\"errors\":[\"tool crashed\"]}}\n"
        )
    };
    let parse = |text: String| {
        EventStream::parse(AgentPreset::ClaudeCode, text.as_bytes())
            .unwrap()
            .outcome(Some(1), "")
    };
    let outcome = parse(line("error_during_execution"));
    let (code, category, _, detail) = failure(&outcome);
    assert_eq!(
        (code, category),
        ("agent.error_result", Category::Transient)
    );
    assert!(detail.starts_with("tool crashed"), "{detail}");
    let outcome = parse(line("error_max_budget_usd"));
    assert_eq!(failure(&outcome).0, "agent.max_budget");
    let outcome = parse(line("error_something_new"));
    let (code, category, _, _) = failure(&outcome);
    assert_eq!((code, category), ("agent.error_result", Category::Unknown));
}

#[test]
fn a_stream_without_its_final_event_is_incomplete_and_says_what_it_saw() {
    let half: Vec<u8> = CLAUDE_SUCCESS
        .split_inclusive(|&b| b == b'\n')
        .take(4)
        .flatten()
        .copied()
        .collect();
    let s = EventStream::parse(AgentPreset::ClaudeCode, &half).unwrap();
    let outcome = s.outcome(Some(1), "claude: connection reset\n");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        (
            "agent.stream_incomplete",
            Category::Transient,
            NextAction::Retry
        )
    );
    assert!(
        detail.contains("without a `result` event (exit status 1; 4 events"),
        "{detail}"
    );
    assert!(
        detail.contains("last words:\nI'll run the tests first."),
        "{detail}"
    );
    assert!(
        detail.contains("stderr:\nclaude: connection reset"),
        "{detail}"
    );
    assert_eq!(s.usage(), None, "claude reports usage only in its result");
    let empty = EventStream::parse(AgentPreset::Codex, b"").unwrap();
    let outcome = empty.outcome(None, "");
    let (code, _, _, detail) = failure(&outcome);
    assert_eq!(code, "agent.stream_incomplete");
    assert!(detail.contains("killed by a signal; 0 events"), "{detail}");
}

#[test]
fn codex_success_gives_the_last_agent_message_and_usage_without_cost() {
    let s = EventStream::parse(AgentPreset::Codex, CODEX_SUCCESS).unwrap();
    assert_eq!(
        summary(&s.outcome(Some(0), "")),
        "Fixed the empty-input case in parse; cargo test passes."
    );
    assert_eq!(
        s.usage(),
        Some(Usage {
            input_tokens: 24763,
            output_tokens: 122,
            cost_usd: None,
        })
    );
}

#[test]
fn codex_failed_turn_is_a_failure_and_recoverable_errors_are_not() {
    let s = EventStream::parse(AgentPreset::Codex, CODEX_FAILED).unwrap();
    let outcome = s.outcome(Some(1), "");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.error_result", Category::Transient, NextAction::Retry)
    );
    assert!(
        detail.contains("stream disconnected before completion"),
        "{detail}"
    );
    assert!(!detail.contains("Reconnecting"), "{detail}");
    // A reconnect notice followed by a completed turn is a success.
    let recovered = [
        &CODEX_SUCCESS[..CODEX_SUCCESS.len() / 2],
        b"\n{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n",
    ]
    .concat();
    let text =
        String::from_utf8_lossy(&recovered).into_owned() + &String::from_utf8_lossy(CODEX_SUCCESS);
    let s = EventStream::parse(AgentPreset::Codex, text.as_bytes()).unwrap();
    assert!(s.outcome(Some(0), "").is_success());
}

#[test]
fn noise_and_overlong_lines_are_counted_not_fatal() {
    let mut text = b"progress: 10%\n{not json\n[1]\n\xff\xfe\n".to_vec();
    text.extend_from_slice(CODEX_SUCCESS);
    let mut s = EventStream::parse(AgentPreset::Codex, &text).unwrap();
    assert!(s.outcome(Some(0), "").is_success());
    assert_eq!((s.counts.noise, s.counts.events), (4, 9));
    s.feed(&vec![b'{'; MAX_EVENT_LINE_BYTES + 1]);
    s.feed(b"\n");
    assert_eq!(s.counts.overlong, 1);
}

#[test]
fn long_texts_are_clipped_at_a_char_boundary() {
    let long = "é".repeat(MAX_STREAM_TEXT_BYTES);
    let clipped = clip(&long);
    assert!(clipped.len() < MAX_STREAM_TEXT_BYTES + 100);
    assert!(clipped.ends_with("the run log has the whole stream]"));
    assert_eq!(clip("short"), "short");
}

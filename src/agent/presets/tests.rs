//! Unit tests: the argv each preset builds, and recorded streams parsed without a process.

use std::time::Duration;

use super::*;

const CLAUDE_SUCCESS: &[u8] = include_bytes!("../../../tests/fixtures/agents/claude-success.jsonl");
const CLAUDE_MAX_TURNS: &[u8] =
    include_bytes!("../../../tests/fixtures/agents/claude-max-turns.jsonl");
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
        bubblewrap: None,
        extra_args: Vec::new(),
        timeout: Duration::from_secs(60),
        stall_timeout: None,
        handshake_timeout: Duration::from_secs(60),
        env: Default::default(),
        resume: true,
        allow_permission_denials: false,
        permissions: Default::default(),
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
        AgentOutcome::Question(q) => panic!("expected a failure, got a question: {q:?}"),
    }
}

fn summary(outcome: &AgentOutcome) -> &str {
    match outcome {
        AgentOutcome::Success { summary, .. } => summary,
        AgentOutcome::Failure { detail, .. } => panic!("expected success, got {detail}"),
        AgentOutcome::Question(q) => panic!("expected success, got a question: {q:?}"),
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

/// A stream the real CLI printed (tests/fixtures/agents/real, from Claude Code 2.1.197 and
/// Codex 0.171.0 against a scripted model server; see its README).
fn real(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/agents/real/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn real_stderr(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/agents/real/{name}.stderr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn claude(name: &str) -> EventStream {
    EventStream::parse(AgentPreset::ClaudeCode, &real(name)).unwrap()
}

fn codex(name: &str) -> EventStream {
    EventStream::parse(AgentPreset::Codex, &real(name)).unwrap()
}

/// The usage the scripted server billed for two Claude calls (1000 in, 200 cache writes,
/// 30 cache reads, 40 out each) and the cost the CLI computed for them.
const CLAUDE_TWO_CALLS: Usage = Usage {
    input_tokens: 2000,
    output_tokens: 80,
    cache_read_tokens: 60,
    cache_write_tokens: 400,
    reasoning_tokens: 0,
    cost_usd: Some(0.01453),
};

#[test]
fn claude_success_gives_the_result_text_usage_and_cost() {
    let s = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_SUCCESS).unwrap();
    assert_eq!(
        summary(&s.outcome(Some(0), "")),
        "MOCK-CLAUDE-DONE: wrote claude_hello.txt in the working directory."
    );
    assert_eq!(s.usage(), Some(CLAUDE_TWO_CALLS));
    assert_eq!(s.usage().unwrap().total_tokens(), 2000 + 80 + 60 + 400);
    assert_eq!(s.session_id(), Some("09b1754f-359d-4c69-baa7-874073bec825"));
}

/// Issue #19: after a stream error or a cut stream the CLI falls back to a non-streaming
/// request and its `result.usage` is all zeros; `modelUsage` has the truth.
#[test]
fn claude_usage_comes_from_model_usage_after_a_non_streaming_fallback() {
    for name in ["claude-stream-error", "claude-stream-cut"] {
        let s = claude(name);
        assert!(s.outcome(Some(0), "").is_success(), "{name}");
        assert_eq!(s.usage(), Some(CLAUDE_TWO_CALLS), "{name}");
    }
}

/// Issue #19: `error_max_budget_usd` after two calls: `usage` counts one, `modelUsage` both.
#[test]
fn claude_max_budget_counts_both_calls_and_is_a_policy_failure() {
    let s = claude("claude-max-budget");
    assert_eq!(s.usage(), Some(CLAUDE_TWO_CALLS));
    let outcome = s.outcome(Some(1), "");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.max_budget", Category::Policy, NextAction::Escalate)
    );
    assert!(
        detail.contains("Reached maximum budget ($0.01)"),
        "{detail}"
    );
}

#[test]
fn model_usage_is_summed_over_models() {
    let text = String::from_utf8(real("claude-default")).unwrap().replace(
        r#""modelUsage":{"#,
        r#""modelUsage":{"claude-haiku":{"inputTokens":7,"outputTokens":3,"cacheReadInputTokens":2,"cacheCreationInputTokens":1,"costUSD":0.001},"#,
    );
    let s = EventStream::parse(AgentPreset::ClaudeCode, text.as_bytes()).unwrap();
    let usage = s.usage().unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens
        ),
        (2007, 83, 62, 401)
    );
    // The CLI's own total wins over the sum of per-model costs.
    assert_eq!(usage.cost_usd, Some(0.01453));
}

#[test]
fn claude_stream_split_at_every_byte_parses_the_same() {
    let mut s = EventStream::new(AgentPreset::ClaudeCode).unwrap();
    for byte in CLAUDE_SUCCESS.chunks(1) {
        s.feed(byte);
    }
    s.end();
    assert!(s.outcome(Some(0), "").is_success());
    assert_eq!(s.counts.events, 6);
    assert_eq!(s.usage(), Some(CLAUDE_TWO_CALLS));
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
        detail.contains("Reached maximum number of turns (1)") && detail.contains("2 turns"),
        "{detail}"
    );
    assert!(detail.contains("session f5ff40ab"), "{detail}");
    assert_eq!(s.usage().unwrap().input_tokens, 1000);
    assert_eq!(s.usage().unwrap().cost_usd, Some(0.007265000000000001));
}

/// Issue #19: credentials and bad requests are not retried; the CLI's words are kept.
#[test]
fn claude_auth_and_config_errors_are_permanent_and_manual() {
    for (name, code, words) in [
        (
            "claude-http401",
            "agent.auth",
            "Invalid API key · Fix external API key",
        ),
        (
            "claude-no-key",
            "agent.auth",
            "Not logged in · Please run /login",
        ),
        (
            "claude-http400",
            "agent.config",
            "API Error: 400 mock: the request is invalid",
        ),
    ] {
        let s = claude(name);
        let outcome = s.outcome(Some(1), "");
        let (got, category, next, detail) = failure(&outcome);
        assert_eq!(
            (got, category, next),
            (code, Category::Permanent, NextAction::Manual),
            "{name}"
        );
        assert!(detail.starts_with(words), "{name}: {detail}");
        assert_eq!(s.usage().map(|u| u.total_tokens()), Some(0), "{name}");
    }
}

#[test]
fn claude_server_errors_and_overload_stay_transient() {
    for name in ["claude-http500", "claude-overloaded"] {
        let s = claude(name);
        let outcome = s.outcome(Some(1), "");
        let (code, category, next, detail) = failure(&outcome);
        assert_eq!(
            (code, category, next),
            ("agent.api_error", Category::Transient, NextAction::Retry),
            "{name}"
        );
        assert!(detail.starts_with("API Error: 5"), "{detail}");
    }
}

/// Issue #19: a run whose Write was denied is not a success, unless allowed.
#[test]
fn claude_permission_denials_fail_the_run_unless_allowed() {
    let s = claude("claude-perm-denied");
    let outcome = s.outcome(Some(0), "");
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        (
            "agent.permission_denied",
            Category::Policy,
            NextAction::Manual
        )
    );
    assert!(
        detail.contains("- Write {\"content\":\"hello from the mock model\\n\",\"file_path\":\"/workspace/claude_hello.txt\"}"),
        "{detail}"
    );
    let allow = StreamOptions {
        allow_permission_denials: true,
        ..Default::default()
    };
    let mut s = EventStream::with_options(AgentPreset::ClaudeCode, &allow).unwrap();
    s.feed(&real("claude-perm-denied"));
    s.end();
    assert!(s.outcome(Some(0), "").is_success());
}

#[test]
fn claude_session_the_cli_cannot_find_is_its_own_reason() {
    let line = br#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"0b9f7a3e","total_cost_usd":0,"modelUsage":{},"errors":["No conversation found with session ID: 0b9f7a3e"]}"#;
    let s = EventStream::parse(AgentPreset::ClaudeCode, line).unwrap();
    assert_eq!(failure(&s.outcome(Some(1), "")).0, SESSION_NOT_FOUND);
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

/// Issue #19: a run killed before its `result` still reports what its messages used, each
/// message once although the CLI prints one `assistant` event per content block.
#[test]
fn a_stream_without_its_final_event_is_incomplete_and_says_what_it_saw() {
    let full = real("claude-stream-error");
    let half: Vec<u8> = full
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
        detail.contains("last words:\nI'll write the file."),
        "{detail}"
    );
    assert!(
        detail.contains("stderr:\nclaude: connection reset"),
        "{detail}"
    );
    // Two assistant events of one message, then the tool result: one call's usage.
    assert_eq!(
        s.usage(),
        Some(Usage {
            input_tokens: 1000,
            output_tokens: 40,
            cache_read_tokens: 30,
            cache_write_tokens: 200,
            reasoning_tokens: 0,
            cost_usd: None,
        })
    );
    let sigterm = claude("claude-sigterm");
    assert_eq!(
        failure(&sigterm.outcome(None, "")).0,
        "agent.stream_incomplete"
    );
    let empty = EventStream::parse(AgentPreset::Codex, b"").unwrap();
    let outcome = empty.outcome(None, "");
    let (code, _, _, detail) = failure(&outcome);
    assert_eq!(code, "agent.stream_incomplete");
    assert!(detail.contains("killed by a signal; 0 events"), "{detail}");
}

/// What the scripted server billed for Codex's two calls: 1500 in (1200 cached), 60 out
/// (7 reasoning) each.
const CODEX_TWO_CALLS: Usage = Usage {
    input_tokens: 600,
    output_tokens: 120,
    cache_read_tokens: 2400,
    cache_write_tokens: 0,
    reasoning_tokens: 14,
    cost_usd: None,
};

#[test]
fn codex_success_gives_the_last_agent_message_and_usage_without_cost() {
    let s = EventStream::parse(AgentPreset::Codex, CODEX_SUCCESS).unwrap();
    assert_eq!(
        summary(&s.outcome(Some(0), "")),
        "MOCK-CODEX-DONE: wrote codex_hello.txt in the working directory."
    );
    assert_eq!(s.usage(), Some(CODEX_TWO_CALLS));
    // Cached input is a part of Codex's input_tokens: the total is not inflated.
    assert_eq!(s.usage().unwrap().total_tokens(), 3000 + 120);
    assert_eq!(s.session_id(), Some("01a230e9-4562-7c71-b46d-3e9f3280217b"));
}

/// Issue #19: after `exec resume` Codex reports the thread's cumulative usage; the earlier
/// attempts' share is taken away.
#[test]
fn codex_resumed_usage_is_this_attempts_share() {
    let cumulative = String::from_utf8(real("codex-default")).unwrap().replace(
        r#""usage":{"input_tokens":3000,"cached_input_tokens":2400,"cache_write_input_tokens":0,"output_tokens":120,"reasoning_output_tokens":14}"#,
        r#""usage":{"input_tokens":4500,"cached_input_tokens":3600,"cache_write_input_tokens":0,"output_tokens":180,"reasoning_output_tokens":21}"#,
    );
    let options = StreamOptions {
        usage_baseline: Some(CODEX_TWO_CALLS),
        ..Default::default()
    };
    let mut s = EventStream::with_options(AgentPreset::Codex, &options).unwrap();
    s.feed(cumulative.as_bytes());
    s.end();
    assert_eq!(
        s.usage(),
        Some(Usage {
            input_tokens: 300,
            output_tokens: 60,
            cache_read_tokens: 1200,
            cache_write_tokens: 0,
            reasoning_tokens: 7,
            cost_usd: None,
        })
    );
    assert_eq!(s.reported_usage().unwrap().total_tokens(), 4500 + 180);
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
    // Warnings (non-fatal error items) are the failure's last words.
    assert!(
        detail.contains("last words:\nModel metadata for `mock-gpt` not found."),
        "{detail}"
    );
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

/// Issue #19: Codex's 401, 400 and missing key are not retried.
#[test]
fn codex_auth_and_config_failures_are_permanent_and_manual() {
    for (name, code, words) in [
        (
            "codex-http401",
            "agent.auth",
            "unexpected status 401 Unauthorized",
        ),
        (
            "codex-no-key",
            "agent.auth",
            "Missing environment variable: `MOCK_OPENAI_API_KEY`",
        ),
        (
            "codex-http400",
            "agent.config",
            "mock: the request is invalid",
        ),
    ] {
        let outcome = codex(name).outcome(Some(1), &real_stderr(name));
        let (got, category, next, detail) = failure(&outcome);
        assert_eq!(
            (got, category, next),
            (code, Category::Permanent, NextAction::Manual),
            "{name}"
        );
        assert!(detail.contains(words), "{name}: {detail}");
    }
    for name in ["codex-http500", "codex-stream-error", "codex-stream-cut"] {
        let outcome = codex(name).outcome(Some(1), &real_stderr(name));
        assert_eq!(failure(&outcome).1, Category::Transient, "{name}");
    }
}

/// Issue #19: outside a git repository Codex prints no JSON, one stderr line, exit 1.
#[test]
fn codex_trusted_directory_refusal_is_a_config_error_with_the_fix() {
    let outcome = codex("codex-no-git").outcome(Some(1), &real_stderr("codex-no-git"));
    let (code, category, next, detail) = failure(&outcome);
    assert_eq!(
        (code, category, next),
        ("agent.config", Category::Permanent, NextAction::Manual)
    );
    assert!(detail.contains("--skip-git-repo-check"), "{detail}");
    assert!(detail.contains("git repository"), "{detail}");
    assert!(
        detail.contains(
            "Not inside a trusted directory and --skip-git-repo-check was not specified."
        ),
        "{detail}"
    );
}

#[test]
fn resume_argv_per_preset() {
    let mut a = agent(AgentPreset::ClaudeCode);
    a.extra_args = vec!["--x".into()];
    assert_eq!(
        resume_argv(&a, Some("s-1")),
        [
            "claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--resume",
            "s-1",
            "--x"
        ]
    );
    let mut a = agent(AgentPreset::Codex);
    a.sandbox = Some("workspace-write".into());
    assert_eq!(
        resume_argv(&a, Some("t-1")),
        [
            "codex",
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "resume",
            "t-1",
            "-"
        ]
    );
    assert_eq!(resume_argv(&a, None), preset_argv(&a));
}

#[test]
fn noise_and_overlong_lines_are_counted_not_fatal() {
    let mut text = b"progress: 10%\n{not json\n[1]\n\xff\xfe\n".to_vec();
    text.extend_from_slice(CODEX_SUCCESS);
    let mut s = EventStream::parse(AgentPreset::Codex, &text).unwrap();
    assert!(s.outcome(Some(0), "").is_success());
    assert_eq!((s.counts.noise, s.counts.events), (4, 8));
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

/// Feed `stream` one line at a time to a stream publishing its progress; the progress
/// after each line.
fn progress_per_line(preset: AgentPreset, stream: &[u8]) -> Vec<crate::agent::Progress> {
    let handle = crate::agent::ProgressHandle::default();
    let options = StreamOptions {
        progress: Some(handle.clone()),
        ..Default::default()
    };
    let mut s = EventStream::with_options(preset, &options).unwrap();
    let mut seen = Vec::new();
    for line in stream.split_inclusive(|b| *b == b'\n') {
        s.feed(line);
        seen.push(handle.snapshot());
    }
    s.end();
    seen
}

/// Issue #22/#14: a live Claude Code run shows its last event, turns and tokens as the
/// stream arrives, and its cost once the `result` reports it.
#[test]
fn claude_progress_grows_while_the_stream_is_read() {
    let seen = progress_per_line(AgentPreset::ClaudeCode, CLAUDE_SUCCESS);
    let event = |i: usize| {
        let e = seen[i].last_event.as_ref().expect("an event");
        (e.kind.as_str(), e.text.as_str())
    };
    assert_eq!(event(0), ("init", "session started"));
    assert_eq!(seen[0].turns, None);
    assert_eq!(event(1), ("message", "I'll write the file."));
    assert_eq!(seen[1].turns, Some(1));
    let first_tokens = seen[1]
        .usage
        .expect("tokens after the first message")
        .total_tokens();
    assert!(first_tokens > 0);
    assert_eq!(
        seen[1].usage.unwrap().cost_usd,
        None,
        "no cost before the result"
    );
    assert_eq!(event(2), ("tool_use", "Write /workspace/claude_hello.txt"));
    assert_eq!(event(3).0, "tool_result");
    assert!(
        event(3).1.starts_with("File created successfully"),
        "{:?}",
        event(3)
    );
    assert_eq!(seen[4].turns, Some(2));
    assert!(
        seen[4].usage.unwrap().total_tokens() > first_tokens,
        "tokens grow"
    );
    let last = seen.last().unwrap();
    assert_eq!(last.last_event.as_ref().unwrap().kind, "result");
    assert!(last.usage.unwrap().cost_usd.is_some_and(|c| c > 0.0));
}

/// Codex: turns count `turn.started`, commands show as they start, tokens arrive with
/// `turn.completed`, and there is no cost.
#[test]
fn codex_progress_grows_while_the_stream_is_read() {
    let seen = progress_per_line(AgentPreset::Codex, CODEX_SUCCESS);
    let kinds: Vec<&str> = seen
        .iter()
        .map(|p| p.last_event.as_ref().map_or("", |e| e.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        ["thread", "warning", "turn", "message", "command", "command", "message", "turn"]
    );
    assert_eq!(seen[1].turns, None);
    assert_eq!(seen[2].turns, Some(1));
    let cmd = seen[5].last_event.as_ref().unwrap();
    assert!(
        cmd.text.ends_with("codex_hello.txt' (exit 0)"),
        "{}",
        cmd.text
    );
    assert_eq!(
        seen[6].usage, None,
        "Codex reports usage at the end of a turn"
    );
    let usage = seen[7].usage.expect("usage after turn.completed");
    assert_eq!(usage.total_tokens(), 3120);
    assert_eq!(usage.cost_usd, None);
}

/// Without a progress handle nothing is published, and the parse is unchanged.
#[test]
fn a_stream_without_a_progress_handle_still_reports_its_last_event() {
    let s = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_SUCCESS).unwrap();
    assert_eq!(s.last_event().map(|e| e.0), Some("result"));
    assert_eq!(s.turns(), Some(2));
}

// Found with #34's real-CLI test: Codex's workspace-write sandbox let the agent write the
// workspace and /tmp only, not the result file in the run's directory under state_root.
#[test]
fn codex_in_workspace_write_may_write_the_run_directory_fresh_or_resumed() {
    let mut a = agent(AgentPreset::Codex);
    a.sandbox = Some("workspace-write".into());
    let run_dir = std::path::PathBuf::from("/srv/sortie/state/runs/r1");
    let mut plan = crate::agent::RunPlan::for_agent(
        &a,
        String::new(),
        "/srv/sortie/state/workspaces/7".into(),
        run_dir.clone(),
    );
    let at = |argv: &[String]| argv.iter().position(|x| x == "--add-dir");
    let fresh = plan.command.clone();
    assert_eq!(&fresh[..4], ["codex", "exec", "--json", "--add-dir"]);
    assert_eq!(fresh[4], run_dir.display().to_string());
    plan.resume_session(&a, "thread-1", None);
    let resumed = plan.resume_command.clone().unwrap();
    let i = at(&resumed).expect("--add-dir on resume");
    assert!(
        i < resumed.iter().position(|x| x == "resume").unwrap(),
        "{resumed:?}"
    );
    // Other sandboxes, and other presets, are left alone.
    a.sandbox = Some("read-only".into());
    let p = crate::agent::RunPlan::for_agent(&a, String::new(), "/w".into(), run_dir.clone());
    assert_eq!(at(&p.command), None);
    let c = agent(AgentPreset::ClaudeCode);
    let p = crate::agent::RunPlan::for_agent(&c, String::new(), "/w".into(), run_dir);
    assert_eq!(at(&p.command), None);
}

/// Issue #37: the budget watch sees the usage as each event arrives, and trips at the
/// event that reaches the limit, not before. Issue #52: the final event's figures trip
/// it too (usage reported all at once, at the end, is still over the limit).
#[test]
fn the_budget_watch_trips_at_the_usage_event_that_reaches_the_limit() {
    use crate::budget::{BudgetWatch, Limit, Measure, RunLimits};
    let watch_for = |max: f64| {
        BudgetWatch::new(RunLimits {
            limits: vec![Limit {
                key: "budgets.per_stage.qa.max_tokens_per_run".into(),
                measure: Measure::Tokens,
                max,
                before: 0.0,
            }],
            ..Default::default()
        })
    };
    // claude-success.jsonl: two model calls of 1231 tokens each (lines 2 and 5), then the
    // result (line 6).
    let watch = watch_for(2462.0);
    let options = StreamOptions {
        budget: Some(watch.clone()),
        ..Default::default()
    };
    let mut s = EventStream::with_options(AgentPreset::ClaudeCode, &options).unwrap();
    let mut tripped_at = None;
    for (i, line) in CLAUDE_SUCCESS.split_inclusive(|b| *b == b'\n').enumerate() {
        s.feed(line);
        if tripped_at.is_none() && watch.tripped().is_some() {
            tripped_at = Some(i + 1);
        }
    }
    assert_eq!(tripped_at, Some(5), "the second call reaches 2462 tokens");
    assert_eq!(watch.tripped().unwrap().run, 2462.0);

    // A limit only the result's figures reach, the whole stream read at once (a fast
    // agent): the result is over the limit, and the watch says so.
    let watch = watch_for(2500.0);
    let options = StreamOptions {
        budget: Some(watch.clone()),
        ..Default::default()
    };
    let mut s = EventStream::with_options(AgentPreset::ClaudeCode, &options).unwrap();
    s.feed(CLAUDE_SUCCESS);
    s.end();
    let total = s.usage().unwrap().total_tokens();
    assert!(total >= 2500);
    assert_eq!(watch.tripped().map(|e| e.run), Some(total as f64));
}

const CLAUDE_RATE_LIMITS: &[u8] =
    include_bytes!("../../../tests/fixtures/agents/claude-rate-limits.jsonl");

/// Issue #39 (items 16, 18): Claude Code's `rate_limit_event`s are parsed (unknown
/// statuses, limit types and fields tolerated), the latest one of each limit type is what
/// a run keeps, and reports from several runs add up per agent and limit: the latest
/// report wins whatever its status, two read at the same instant keep the worse, and the
/// agent's status is the worst of its limits.
#[test]
fn agent_rate_limits_from_claude_rate_limit_event_are_kept_per_run_and_aggregated() {
    use crate::rate_limit::{aggregate, RateLimit};
    let stream = EventStream::parse(AgentPreset::ClaudeCode, CLAUDE_RATE_LIMITS).unwrap();
    // The events do not disturb the rest of the stream.
    assert!(matches!(
        stream.outcome(Some(0), ""),
        AgentOutcome::Success { .. }
    ));
    assert_eq!(stream.counts.noise, 0);
    let kept = stream.rate_limits();
    let brief: Vec<(&str, &str, Option<f64>)> = kept
        .iter()
        .map(|l| (l.limit_type.as_str(), l.status.as_str(), l.utilization))
        .collect();
    // five_hour went allowed_warning -> rejected -> allowed: the run keeps the last.
    assert_eq!(
        brief,
        [
            ("five_hour", "allowed", Some(0.05)),
            ("seven_day", "allowed", Some(0.31)),
            // Unknown words kept as spelled; a utilization that is not a number dropped.
            ("seven_day_fable", "queued", None),
        ]
    );
    let five_hour = &kept[0];
    assert_eq!(
        five_hour.resets_at,
        chrono::DateTime::from_timestamp(1_796_551_200, 0)
    );
    assert_eq!(five_hour.is_using_overage, Some(false));
    // The first report carried the overage and the threshold.
    let mut first_only = EventStream::parse(
        AgentPreset::ClaudeCode,
        CLAUDE_RATE_LIMITS.split(|b| *b == b'\n').nth(2).unwrap(),
    )
    .unwrap()
    .rate_limits();
    let first = first_only.remove(0);
    assert_eq!(
        (
            first.status.as_str(),
            first.overage_status.as_deref(),
            first.surpassed_threshold
        ),
        ("allowed_warning", Some("rejected"), Some(0.8))
    );
    // A line without `rate_limit_info` is an event, not a report.
    let empty = EventStream::parse(
        AgentPreset::ClaudeCode,
        b"{\"type\":\"rate_limit_event\"}\n",
    )
    .unwrap();
    assert!(empty.rate_limits().is_empty());

    // Several runs' reports, in no particular order.
    let t = |s: i64| chrono::DateTime::from_timestamp(1_796_500_000 + s, 0).unwrap();
    let report = |limit_type: &str, status: &str, at: i64| RateLimit {
        observed_at: t(at),
        limit_type: limit_type.into(),
        status: status.into(),
        ..five_hour.clone()
    };
    let runs = [
        ("claude-code", "r1", report("five_hour", "rejected", 10)),
        (
            "claude-code",
            "r2",
            report("five_hour", "allowed_warning", 30),
        ),
        ("claude-code", "r3", report("five_hour", "allowed", 20)),
        ("claude-code", "r1", report("seven_day", "allowed", 10)),
        (
            "claude-code",
            "r4",
            report("seven_day", "allowed_warning", 40),
        ),
        ("claude-code", "r5", report("seven_day", "rejected", 40)),
        ("claude-code", "r6", report("seven_day", "allowed", 40)),
        ("codex", "r7", report("five_hour", "allowed", 5)),
    ];
    let agents = aggregate(runs.iter().map(|(a, r, l)| (*a, *r, l)));
    type Limit<'a> = (&'a str, &'a str, &'a str, u32);
    let summary: Vec<(&str, &str, Vec<Limit<'_>>)> = agents
        .iter()
        .map(|a| {
            (
                a.agent.as_str(),
                a.status.as_str(),
                a.limits
                    .iter()
                    .map(|l| {
                        (
                            l.limit.limit_type.as_str(),
                            l.limit.status.as_str(),
                            l.run_id.as_str(),
                            l.reports,
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "claude-code",
                "rejected",
                vec![
                    // The latest report (r2, at 30) wins over an older rejection.
                    ("five_hour", "allowed_warning", "r2", 3),
                    // Three at the same instant: the worst.
                    ("seven_day", "rejected", "r5", 4),
                ]
            ),
            ("codex", "allowed", vec![("five_hour", "allowed", "r7", 1)]),
        ]
    );
    // Another update moves the aggregate on: the rejection is over.
    let mut more = runs.to_vec();
    more.push(("claude-code", "r8", report("seven_day", "allowed", 50)));
    let agents = aggregate(more.iter().map(|(a, r, l)| (*a, *r, l)));
    assert_eq!(agents[0].status, "allowed_warning");
    assert_eq!(agents[0].limits[1].limit.status, "allowed");
    assert_eq!(agents[0].limits[1].reports, 5);
}

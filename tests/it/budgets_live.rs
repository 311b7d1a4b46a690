//! Issue #37: budgets enforced while a run runs (a run stopped at its stage's token
//! limit, its partial usage kept, the next ticket running), prices for agents that
//! report tokens without a cost, and the day limit holding dispatch until midnight.

use crate::common;

use common::Sandbox;
use sortie::block::OutcomeBlock;

/// A sandbox with one stage (`architect`: ready -> done), `agent`, and the extra
/// top-level `keys` (budgets, prices).
fn sandbox(agent: &str, keys: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
{agent}
{keys}
pipeline_stages:
  - {{role: architect, claim_status: ready, success_status: done, failure_status: failed}}
"#,
        roles = common::repo().join("roles").display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

fn fixture(name: &str) -> String {
    common::repo()
        .join("tests/fixtures/agents")
        .join(name)
        .display()
        .to_string()
}

/// A Claude Code stand-in: a ticket titled `grows` reports three model calls of 1000
/// tokens each, then works on (30 s) before three more and a success; any other ticket
/// succeeds after one call.
const GROWING_CLAUDE: &str = r#"#!/bin/sh
cat > /dev/null
call() {
  printf '{"type":"assistant","message":{"id":"msg_%s","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"step %s"}],"usage":{"input_tokens":900,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":100}},"session_id":"s-1"}\n' "$1" "$1"
}
printf '{"type":"system","subtype":"init","session_id":"s-1","model":"claude-test"}\n'
call 1
if [ "$SORTIE_TICKET_TITLE" = grows ]; then
  call 2
  call 3
  # Past the limit: sortie stops it here. Left alone, it would sit here until the stall
  # timeout and end `agent.stalled`, never `budget.exceeded`.
  sleep 600
  call 4; call 5; call 6
fi
printf '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"done","session_id":"s-1","total_cost_usd":0.001,"usage":{"input_tokens":900,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":100}}\n'
"#;

fn growing_claude(sb: &Sandbox) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = sb.path().join("grow-claude");
    std::fs::write(&path, GROWING_CLAUDE).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn status_usage(sb: &Sandbox) -> Vec<serde_json::Value> {
    let status = sb.status_json();
    status["usage"].as_array().cloned().unwrap_or_default()
}

/// Issue #37: a run whose usage grows past `max_tokens_per_run` is stopped at the
/// usage event that reaches the limit, the ticket gets a `budget.exceeded` block
/// naming the limit and the figures, the usage until then is recorded, and the next
/// ticket runs.
#[test]
fn a_run_past_its_stage_token_limit_is_stopped_and_the_next_ticket_runs() {
    let sb = sandbox("", "");
    let agent = growing_claude(&sb);
    let config = std::fs::read_to_string(sb.path().join("pipeline.yaml")).unwrap();
    let config = config.replace(
        "pipeline_stages:",
        &format!(
            "agent: {{preset: claude-code, command: [\"{agent}\"]}}\n\
             budgets: {{per_stage: {{architect: {{max_tokens_per_run: 3000}}}}}}\n\
             pipeline_stages:"
        ),
    );
    std::fs::write(sb.path().join("pipeline.yaml"), config).unwrap();
    let grows = sb.add("grows", "ready", &[]);
    let next = sb.add("small", "ready", &[]);

    let report = sb.tick_json(&[]);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{report:#}");
    assert_eq!(runs[0]["ticket"], grows.as_str());
    assert_eq!(runs[0]["reason_code"], "budget.exceeded", "{report:#}");
    let blocks = sb.blocks(&grows);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(
        (f.category.as_str(), f.next_action.as_str()),
        ("policy", "escalate")
    );
    // Three calls of 1000 tokens: the third reaches the limit, none after it counted.
    assert!(
        f.detail.starts_with(
            "stopped at 3000 tokens in this run; \
             budgets.per_stage.architect.max_tokens_per_run is 3000 tokens"
        ),
        "{}",
        f.detail
    );
    assert_eq!(sb.ticket(&grows).status, "failed");
    let usage = status_usage(&sb);
    let row = usage
        .iter()
        .find(|u| u["ticket_id"] == grows.as_str())
        .expect("the stopped run's usage is recorded");
    assert_eq!(
        (row["tokens_in"].as_u64(), row["tokens_out"].as_u64()),
        (Some(2700), Some(300)),
        "{row}"
    );

    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], next.as_str(), "{report:#}");
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(sb.ticket(&next).status, "done");
}

fn codex(model: &str) -> String {
    format!(
        r#"agent: {{preset: codex, command: ["{}"], model: {model}}}"#,
        fixture("fake-codex")
    )
}

/// Issue #37: Codex reports tokens and no cost; its model's entry in `prices` prices
/// them exactly, and a model without one leaves the cost unknown (never $0).
#[test]
fn codex_usage_is_priced_from_the_table_and_an_unknown_model_stays_unknown() {
    let prices = "prices: {gpt-5-codex: {input: 1.25, cached_input: 0.125, output: 10}}";
    let sb = sandbox(&codex("gpt-5-codex"), prices);
    let id = sb.add("t", "ready", &[]);
    sb.tick();
    let usage = status_usage(&sb);
    let row = usage
        .iter()
        .find(|u| u["ticket_id"] == id.as_str())
        .unwrap();
    // tests/fixtures/agents/codex-success.jsonl: 3000 input of which 2400 cached, 120
    // output: 600 x 1.25 + 2400 x 0.125 + 120 x 10 = 2250 dollars per million tokens.
    let cost = row["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00225).abs() < 1e-12, "{row}");
    assert_eq!(row["runs_without_cost"], 0, "{row}");
    // The run's usage names its agent and model: `sortie stats --by model` groups by it.
    let out = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--by",
        "model",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["groups"][0]["group"], "gpt-5-codex", "{stats:#}");
    let cost = stats["groups"][0]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00225).abs() < 1e-12, "{stats:#}");

    let sb = sandbox(&codex("gpt-unpriced"), prices);
    let id = sb.add("t", "ready", &[]);
    sb.tick();
    let usage = status_usage(&sb);
    let row = usage
        .iter()
        .find(|u| u["ticket_id"] == id.as_str())
        .unwrap();
    assert_eq!(row["runs_without_cost"], 1, "{row}");
    // Issue #52: unknown is `null`, never 0; the tokens the run reported stay.
    assert_eq!(row["cost_usd"], serde_json::Value::Null, "{row}");
    assert_eq!(row["tokens_in"], 600, "{row}");
    let text = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        text.contains("cost unknown (1 run(s) reported none)"),
        "{text}"
    );
    let out = sb.ok(&["stats", "--config", "pipeline.yaml", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    let total = &stats["total"];
    assert_eq!(total["cost_usd"], serde_json::Value::Null, "{stats:#}");
    assert_eq!(total["tokens"], 3120, "{stats:#}");
    assert_eq!(total["runs_cost_unknown"], 1, "{stats:#}");
    let text = sb.ok(&["stats", "--config", "pipeline.yaml"]);
    let all = text
        .lines()
        .find(|l| l.starts_with("all "))
        .unwrap_or(&text);
    assert!(all.ends_with("unknown (1 run(s))"), "{text}");
    assert!(!text.contains("$0.0000"), "{text}");
}

/// Issue #37: a dollar limit over runs whose cost cannot be known is said once, in
/// `pipeline validate` and in the run's log.
#[test]
fn a_dollar_limit_over_unpriced_runs_is_reported_once() {
    let sb = sandbox(
        &codex("gpt-unpriced"),
        "budgets: {max_cost_usd_per_ticket: 1}\nprices: {gpt-5-codex: {input: 1, output: 2}}",
    );
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.matches("cannot be checked").count(),
        1,
        "once in validate: {text}"
    );
    assert!(
        text.contains("`architect` runs Codex, which reports no cost, with model `gpt-unpriced`, which has no entry in `prices`"),
        "{text}"
    );
    sb.add("t", "ready", &[]);
    let out = sb.sortie(&["pipeline", "tick", "--config", "pipeline.yaml"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        log.matches("cannot be checked").count(),
        1,
        "once in the log: {log}"
    );
    assert!(log.contains("budgets.max_cost_usd_per_ticket"), "{log}");
}

/// Issue #52: a token limit over runs of an agent that reports no usage (a `command`
/// agent) cannot be checked: `pipeline validate` says so once per limit and stage, as
/// it does for a dollar limit over runs of unknown cost.
#[test]
fn a_token_limit_over_an_agent_without_usage_is_warned_in_validate() {
    let sb = sandbox(
        r#"agent: {command: ["true"]}"#,
        "budgets: {max_tokens_per_ticket: 1000}",
    );
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("cannot be checked").count(), 1, "{text}");
    assert!(
        text.contains(
            "`architect` runs a `command` agent, which reports no usage: its runs' tokens \
             are unknown, and this token limit cannot be checked against them"
        ),
        "{text}"
    );
    assert!(text.contains("budgets.max_tokens_per_ticket"), "{text}");

    // The stage's own limit carries it when there is one.
    let sb = sandbox(
        r#"agent: {command: ["true"]}"#,
        "budgets: {per_stage: {architect: {max_tokens_per_run: 10}}}",
    );
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("budgets.per_stage.architect.max_tokens_per_run"),
        "{text}"
    );
    assert_eq!(text.matches("cannot be checked").count(), 1, "{text}");
}

/// `pipeline tick --json` with the clock moved `offset` seconds.
fn tick_at(sb: &Sandbox, offset: i64, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["pipeline", "tick", "--config", "pipeline.yaml", "--json"];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(&args)
        .current_dir(sb.path())
        .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
        .env_remove("SORTIE_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue #37: once the day's runs cost `max_cost_usd_per_day`, nothing is dispatched
/// (a skip reason, also in a dry run) until midnight, when it lifts.
#[test]
fn the_day_limit_holds_dispatch_until_midnight() {
    let agent = format!(
        r#"agent: {{preset: claude-code, command: ["{}"]}}"#,
        fixture("fake-claude")
    );
    let sb = sandbox(&agent, "budgets: {max_cost_usd_per_day: 0.01}");
    let first = sb.add("a", "ready", &[]);
    let second = sb.add("b", "ready", &[]);
    // 01:00 UTC tomorrow, whenever the test runs: far from the day's ends.
    let now = chrono::Utc::now();
    let tomorrow = (now + chrono::Duration::days(1))
        .date_naive()
        .and_hms_opt(1, 0, 0)
        .unwrap()
        .and_utc();
    let morning = (tomorrow - now).num_seconds();

    let report = tick_at(&sb, morning, &[]);
    assert_eq!(report["runs"][0]["ticket"], first.as_str(), "{report:#}");
    // The run cost $0.01453 (tests/fixtures/agents/claude-success.jsonl), reported at
    // its end: over $0.01, so its result is not handed on (issue #52).
    assert_eq!(
        report["runs"][0]["reason_code"], "budget.exceeded",
        "{report:#}"
    );
    let blocks = sb.blocks(&first);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    // Stopped as it exited, or found over its limit once it had: not handed on either way.
    assert!(
        f.detail.starts_with(
            "stopped at $0.0145 in this run; budgets.max_cost_usd_per_day is $0.0100;"
        ),
        "{}",
        f.detail
    );
    for extra in [&["--dry-run"][..], &[]] {
        let report = tick_at(&sb, morning, extra);
        assert_eq!(
            report["runs"].as_array().map(Vec::len),
            Some(0),
            "{report:#}"
        );
        let skip = report["skips"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["ticket"] == second.as_str())
            .unwrap_or_else(|| panic!("{report:#}"));
        assert_eq!(skip["reason"], "day_budget_spent", "{skip}");
        let until = (tomorrow + chrono::Duration::hours(23))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        assert_eq!(skip["until"], until.as_str(), "{skip}");
    }

    // The next day: lifted (the run crosses the day's limit in its turn).
    let report = tick_at(&sb, morning + 86_400, &[]);
    assert_eq!(report["runs"][0]["ticket"], second.as_str(), "{report:#}");
}

/// Issue #37: a `command` agent reports no usage, so its run has no usage row; the
/// agent is on the run's history itself, so `sortie stats --by agent` names it instead
/// of `unknown`, and its cost stays unknown.
#[test]
fn a_run_without_usage_is_grouped_under_the_agent_its_history_names() {
    let sb = sandbox(r#"agent: {command: ["true"]}"#, "");
    sb.add("t", "ready", &[]);
    sb.tick();
    let out = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--by",
        "agent",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    let groups = stats["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{stats:#}");
    assert_eq!(groups[0]["group"], "command", "{stats:#}");
    assert_eq!(groups[0]["runs"], 1, "{stats:#}");
    assert_eq!(groups[0]["runs_cost_unknown"], 1, "{stats:#}");
}

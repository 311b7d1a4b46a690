//! Accounting and budgets: token and cost usage per run lands in run history, shows in
//! `pipeline status`, and a ticket over its budget gets one `budget.exceeded` failure
//! block instead of another run.

use crate::common;

use common::Sandbox;
use sortie::block::OutcomeBlock;

fn sandbox(agent: &str, budgets: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
{agent}
retry: {{max_attempts: 5, backoff_base_seconds: 1, backoff_max_seconds: 1}}
budgets: {budgets}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: done, requires_prior_role: architect}}
"#,
        roles = common::repo().join("roles").display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

fn fake_claude() -> String {
    format!(
        r#"agent: {{preset: claude-code, command: ["{}"]}}"#,
        common::repo()
            .join("tests/fixtures/agents/fake-claude")
            .display()
    )
}

#[test]
fn usage_reported_by_the_agent_is_totalled_per_ticket_and_role() {
    let sb = sandbox(&fake_claude(), "{}");
    let id = sb.add("t", "ready-for-design", &[]);
    sb.drain(5);
    assert_eq!(sb.ticket(&id).status, "done");
    let status = sb.status_json();
    let usage = status["usage"].as_array().expect("usage in status");
    assert_eq!(usage.len(), 2, "{status:#}");
    for row in usage {
        assert_eq!(row["ticket_id"], id.as_str());
        assert_eq!(row["runs"], 1);
        // The real stream (tests/fixtures/agents/claude-success.jsonl): two model calls of
        // 1000 input, 30 cache reads, 200 cache writes and 40 output tokens, $0.01453.
        assert_eq!(row["tokens_in"], 2000, "{row}");
        assert_eq!(row["tokens_out"], 80, "{row}");
        assert_eq!(row["cache_read_tokens"], 60, "{row}");
        assert_eq!(row["cache_write_tokens"], 400, "{row}");
        assert_eq!(row["reasoning_tokens"], 0, "{row}");
        assert!(
            (row["cost_usd"].as_f64().unwrap() - 0.01453).abs() < 1e-9,
            "{row}"
        );
    }
    let text = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        text.contains(&format!("{id} architect: 1 run(s), 2000 tokens in, 80 out")),
        "{text}"
    );
}

/// #36: an agent that reports no usage at all (here a bare command) leaves its runs'
/// tokens and cost unknown in `pipeline status`, never 0.
#[test]
fn runs_that_reported_no_usage_show_it_unknown_not_zero() {
    let sb = sandbox("agent: {command: [\"true\"]}", "{}");
    let id = sb.add("t", "ready-for-design", &[]);
    sb.drain(5);
    let status = sb.status_json();
    let usage = status["usage"].as_array().expect("usage in status");
    assert!(!usage.is_empty(), "{status:#}");
    for row in usage {
        assert_eq!(row["runs_without_usage"], row["runs"], "{row}");
        // Issue #52: unknown in JSON too, never 0.
        for figure in ["tokens_in", "tokens_out", "cost_usd"] {
            assert_eq!(row[figure], serde_json::Value::Null, "{figure}: {row}");
        }
    }
    let text = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        text.contains(&format!(
            "{id} architect: 1 run(s), usage unknown (none reported)"
        )),
        "{text}"
    );
    assert!(!text.contains("$0.0000"), "{text}");
}

#[test]
fn a_ticket_over_its_cost_budget_gets_one_failure_block_and_no_more_runs() {
    let sb = sandbox(&fake_claude(), "{max_cost_usd_per_ticket: 0.03}");
    let id = sb.add("t", "ready-for-design", &[]);
    // architect costs $0.0145, backend runs at $0.0145 spent and costs $0.0145 more:
    // $0.029, under; a third run would start at $0.029.
    sb.drain(5);
    assert_eq!(
        sb.ticket(&id).status,
        "done",
        "both runs ended under budget"
    );

    let (sb, id) = ticket_over_its_budget_after_one_run();
    let report = sb.tick_json(&[]); // backend: starts at $0.0145 > $0.01
    assert_eq!(
        report["runs"][0]["reason_code"], "budget.exceeded",
        "{report:#}"
    );
    let blocks = sb.blocks(&id);
    let OutcomeBlock::Failure(f) = blocks.last().unwrap() else {
        panic!("{blocks:?}")
    };
    assert_eq!(
        (f.category.as_str(), f.next_action.as_str()),
        ("policy", "escalate")
    );
    assert!(
        f.detail
            .contains("budgets.max_cost_usd_per_ticket is $0.01"),
        "{}",
        f.detail
    );
    // Held: no more runs, no more blocks, until a person changes the status.
    for _ in 0..3 {
        let report = sb.tick_json(&[]);
        assert_eq!(
            report["runs"].as_array().map(Vec::len),
            Some(0),
            "{report:#}"
        );
    }
    assert_eq!(sb.blocks(&id).len(), 2);
    assert_eq!(sb.ticket(&id).status, "design-approved");
}

/// A board whose one ticket (its id returned) had its architect run ($0.0145, under
/// `max_cost_usd_per_ticket: 0.02`), after which the limit was lowered to $0.01: the
/// ticket is over it before its backend run.
fn ticket_over_its_budget_after_one_run() -> (Sandbox, String) {
    let sb = sandbox(&fake_claude(), "{max_cost_usd_per_ticket: 0.02}");
    let id = sb.add("t", "ready-for-design", &[]);
    sb.tick(); // architect: starts at $0, costs $0.0145
    assert_eq!(sb.ticket(&id).status, "design-approved");
    let path = sb.path().join("pipeline.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    let lowered = config.replace(
        "max_cost_usd_per_ticket: 0.02",
        "max_cost_usd_per_ticket: 0.01",
    );
    std::fs::write(&path, lowered).unwrap();
    (sb, id)
}

#[test]
fn max_runs_per_ticket_counts_every_attempt() {
    let sb = sandbox(
        r#"agent: {command: ["sh", "-c", "exit 1"]}"#,
        "{max_runs_per_ticket: 2}",
    );
    let id = sb.add("t", "ready-for-design", &[]);
    let first = sb.tick_json(&[]);
    assert_eq!(first["runs"][0]["reason_code"], "agent.exit_nonzero");
    let mut offset = 0;
    let mut codes = Vec::new();
    for _ in 0..4 {
        offset += 5; // past the 1 s retry backoff
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(["pipeline", "tick", "--config", "pipeline.yaml", "--json"])
            .current_dir(sb.path())
            .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for run in report["runs"].as_array().unwrap() {
            codes.push(run["reason_code"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(
        codes,
        ["agent.exit_nonzero", "budget.exceeded"],
        "two runs, then the budget block, then nothing"
    );
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
}

/// Issue #52: an agent that reports all its usage at once, at the end of its stream
/// (here the whole recorded stream in one write: 2,540 tokens), is over
/// `max_tokens_per_run: 100`: its success is not handed on, the ticket gets a
/// `budget.exceeded` block naming the limit and the figures.
#[test]
fn a_fast_stream_over_its_run_limit_is_never_handed_on() {
    let sb = sandbox(
        &fake_claude(),
        "{per_stage: {architect: {max_tokens_per_run: 100}}}",
    );
    let id = sb.add("t", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    let run = &report["runs"][0];
    assert_eq!(run["ticket"], id.as_str(), "{report:#}");
    assert_eq!(run["reason_code"], "budget.exceeded", "{report:#}");
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(
        (f.category.as_str(), f.next_action.as_str()),
        ("policy", "escalate")
    );
    assert!(
        f.detail.starts_with(
            "stopped at 2540 tokens in this run; \
             budgets.per_stage.architect.max_tokens_per_run is 100 tokens"
        ),
        "{}",
        f.detail
    );
    assert_eq!(sb.ticket(&id).status, "ready-for-design", "not handed on");
}

/// Issue #52: a run a budget refuses before its agent starts gets its
/// `budget.exceeded` block, but it is not a run: `pipeline status` and `sortie stats`
/// count only the run that did start.
#[test]
fn a_run_refused_by_a_budget_before_its_agent_is_not_counted_as_a_run() {
    let (sb, id) = ticket_over_its_budget_after_one_run();
    let report = sb.tick_json(&[]); // backend: refused at $0.0145 > $0.01
    assert_eq!(
        report["runs"][0]["reason_code"], "budget.exceeded",
        "{report:#}"
    );
    let status = sb.status_json();
    let usage = status["usage"].as_array().expect("usage in status");
    let rows: Vec<(&str, u64)> = usage
        .iter()
        .map(|u| (u["role"].as_str().unwrap(), u["runs"].as_u64().unwrap()))
        .collect();
    assert_eq!(rows, [("architect", 1)], "{status:#}");
    let text = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(text.contains("usage per ticket and role (1):"), "{text}");
    assert!(!text.contains(&format!("{id} backend: 1 run(s)")), "{text}");
    assert_eq!(
        sb.blocks(&id).len(),
        2,
        "the refusal's block is on the ticket"
    );
    let out = sb.ok(&["stats", "--config", "pipeline.yaml", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["total"]["runs"], 1, "{stats:#}");
    assert_eq!(stats["total"]["runs_cost_unknown"], 0, "{stats:#}");
}

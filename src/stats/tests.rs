//! `stats::compute` on a seeded history, against figures computed by hand.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::ledger::ClaimKey;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()
}

/// A run of `role` on `ticket` starting `start` minutes after t0 and lasting `secs`
/// seconds (`None`: still running), ending with `outcome`.
fn run(
    id: &str,
    ticket: &str,
    role: &str,
    start: i64,
    secs: Option<i64>,
    outcome: &str,
) -> RunRecord {
    let started_at = t0() + Duration::minutes(start);
    RunRecord {
        run_id: id.into(),
        key: ClaimKey::new("local", ticket, role),
        stage: format!("{role}-ready"),
        stage_attempt: 1,
        claimer_id: "h:1:x".into(),
        phase: if secs.is_some() {
            RunPhase::Finished
        } else {
            RunPhase::Running
        },
        outcome: secs.map(|_| outcome.to_string()),
        reason_code: None,
        log_path: None,
        started_at,
        finished_at: secs.map(|s| started_at + Duration::seconds(s)),
        session_id: None,
        route: None,
        title: None,
        agent: None,
        model: None,
        rate_limits: Vec::new(),
    }
}

fn usage(id: &str, tokens: u64, cost: Option<f64>) -> RunUsage {
    RunUsage {
        run_id: id.into(),
        key: ClaimKey::new("local", "?", "?"),
        tokens_in: tokens,
        tokens_out: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        cost_usd: cost,
        recorded_at: t0(),
        agent: Some(
            if cost.is_some() {
                "claude-code"
            } else {
                "codex"
            }
            .into(),
        ),
        model: cost.map(|_| "opus".into()),
    }
}

/// Ticket 1: architect succeeds (r1), backend fails (r2) and sends it back, architect
/// runs again (r3, a rework round, cost unknown), backend succeeds (r4), a reaction
/// sends it back to backend (r8, a rework round). Ticket 2: architect fails (r5, no
/// usage) then succeeds (r6, not a rework round), backend still running (r7).
fn history() -> (Vec<RunRecord>, Vec<RunUsage>) {
    let runs = vec![
        run("r8", "1", "backend", 60, Some(5), "failure"),
        run("r1", "1", "architect", 0, Some(60), "success"),
        run("r2", "1", "backend", 10, Some(120), "failure"),
        run("r3", "1", "architect", 20, Some(30), "success"),
        run("r4", "1", "backend", 30, Some(90), "success"),
        run("r5", "2", "architect", 40, Some(10), "failure"),
        run("r6", "2", "architect", 50, Some(20), "success"),
        run("r7", "2", "backend", 55, None, ""),
    ];
    let usage = vec![
        usage("r1", 1000, Some(0.10)),
        usage("r2", 2000, Some(0.20)),
        usage("r3", 500, None),
        usage("r4", 3000, Some(0.30)),
        usage("r6", 100, Some(0.05)),
        usage("r8", 10, Some(0.01)),
    ];
    (runs, usage)
}

/// Each group's name and run count.
fn groups(stats: &Stats) -> Vec<(&str, u32)> {
    stats
        .groups
        .iter()
        .map(|g| (g.group.as_str(), g.runs))
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn figures_by_role_match_the_hand_computation() {
    let (runs, usage) = history();
    let stats = compute(&runs, &usage, &[], GroupBy::Role, "backend", t0());
    let [architect, backend] = &stats.groups[..] else {
        panic!("{:#?}", stats.groups)
    };
    // architect: r1 r3 r5 r6; 3 of 4 succeeded; durations 10 20 30 60 s.
    assert_eq!(architect.group, "architect");
    assert_eq!(
        (architect.runs, architect.finished, architect.succeeded),
        (4, 4, 3)
    );
    assert_eq!(architect.success_rate, Some(0.75));
    assert_eq!(
        (architect.p50_seconds, architect.p95_seconds),
        (Some(20.0), Some(60.0))
    );
    assert_eq!(architect.tokens, Some(1600));
    assert!(close(architect.cost_usd.unwrap(), 0.15), "{architect:?}");
    assert_eq!(
        architect.runs_cost_unknown, 2,
        "r3 reported no cost, r5 no usage"
    );
    assert_eq!(architect.rework_rounds, 1, "r3");
    // backend: r2 r4 r7 r8; r7 still runs; 1 of 3 succeeded; durations 5 90 120 s.
    assert_eq!(
        (backend.runs, backend.finished, backend.succeeded),
        (4, 3, 1)
    );
    assert!(close(backend.success_rate.unwrap(), 1.0 / 3.0));
    assert_eq!(
        (backend.p50_seconds, backend.p95_seconds),
        (Some(90.0), Some(120.0))
    );
    assert_eq!(backend.tokens, Some(5010));
    assert!(close(backend.cost_usd.unwrap(), 0.51), "{backend:?}");
    assert_eq!(
        backend.runs_cost_unknown, 0,
        "a running run is not unknown yet"
    );
    assert_eq!(backend.rework_rounds, 1, "r8, after r4's success");

    let total = &stats.total;
    assert_eq!((total.runs, total.finished, total.succeeded), (8, 7, 4));
    // Durations 5 10 20 30 60 90 120: the 4th and the 7th of 7.
    assert_eq!(
        (total.p50_seconds, total.p95_seconds),
        (Some(30.0), Some(120.0))
    );
    assert_eq!(
        (total.tokens, total.runs_cost_unknown, total.rework_rounds),
        (Some(6610), 2, 2)
    );
    assert!(close(total.cost_usd.unwrap(), 0.66));

    // Ticket 1 reached backend's success: its runs cost 0.10 + 0.20 + 0.30 + 0.01, and
    // r3's cost is unknown.
    assert_eq!(stats.finished_tickets, 1);
    assert!(close(stats.cost_per_finished_ticket.unwrap(), 0.61));
    assert_eq!(stats.finished_tickets_runs_cost_unknown, 1);
}

#[test]
fn figures_by_ticket_and_by_stage_group_the_same_runs() {
    let (runs, usage) = history();
    let by_ticket = compute(&runs, &usage, &[], GroupBy::Ticket, "backend", t0());
    let names: Vec<&str> = by_ticket.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["1", "2"]);
    assert_eq!(by_ticket.groups[0].rework_rounds, 2);
    assert_eq!(by_ticket.groups[1].runs_cost_unknown, 1);
    let by_stage = compute(&runs, &usage, &[], GroupBy::Stage, "backend", t0());
    let names: Vec<&str> = by_stage.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["architect-ready", "backend-ready"]);
    assert_eq!(by_stage.total, by_ticket.total);
}

#[test]
fn figures_by_agent_and_by_model_come_from_the_usage_rows() {
    let (runs, usage) = history();
    let by_model = compute(&runs, &usage, &[], GroupBy::Model, "backend", t0());
    let names = groups(&by_model);
    // r3 reported tokens and no cost (no model known); r5 and r7 reported nothing.
    assert_eq!(names, [("opus", 5), ("unknown", 3)]);
    let by_agent = compute(&runs, &usage, &[], GroupBy::Agent, "backend", t0());
    let names = groups(&by_agent);
    assert_eq!(names, [("claude-code", 5), ("codex", 1), ("unknown", 2)]);
}

/// Issue #52: a group none of whose runs reported a cost has an unknown cost (`null`),
/// never $0; one none of whose runs reported usage has unknown tokens too. A group with
/// some known runs keeps its lower bound and the count of the others.
#[test]
fn a_group_with_no_known_cost_or_usage_is_unknown_not_zero() {
    let (runs, usage) = history();
    let by_agent = compute(&runs, &usage, &[], GroupBy::Agent, "backend", t0());
    let group = |name: &str| {
        by_agent
            .groups
            .iter()
            .find(|g| g.group == name)
            .unwrap_or_else(|| panic!("{by_agent:?}"))
            .clone()
    };
    // r5 ended and reported nothing (r7, still running, has not reported yet).
    let nothing = group("unknown");
    assert_eq!(
        (nothing.tokens, nothing.cost_usd, nothing.runs_cost_unknown),
        (None, None, 1)
    );
    // r3 reported tokens and no cost.
    let codex = group("codex");
    assert_eq!((codex.tokens, codex.cost_usd), (Some(500), None));
    let json = serde_json::to_value(&nothing).unwrap();
    assert_eq!(
        (&json["tokens"], &json["cost_usd"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );
    // Known and unknown together: the known part, with the unknown runs counted.
    let all = &by_agent.total;
    assert!(
        close(all.cost_usd.unwrap(), 0.66) && all.runs_cost_unknown == 2,
        "{all:?}"
    );
}

#[test]
fn nothing_to_count_gives_no_rates_and_no_percentiles() {
    let stats = compute(&[], &[], &[], GroupBy::Role, "backend", t0());
    assert!(stats.groups.is_empty());
    assert_eq!(stats.total.success_rate, None);
    assert_eq!(stats.total.p50_seconds, None);
    assert_eq!(stats.cost_per_finished_ticket, None);
}

#[test]
fn nearest_rank_percentiles() {
    let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    assert_eq!(nearest_rank(&v, 50.0), Some(5.0));
    assert_eq!(nearest_rank(&v, 95.0), Some(10.0));
    assert_eq!(nearest_rank(&[7.0], 95.0), Some(7.0));
    assert_eq!(nearest_rank(&[], 50.0), None);
}

#[test]
fn figures_per_window_count_each_run_in_the_window_it_started_in() {
    let (runs, usage) = history();
    // Minutes 0-29 (r1 r2 r3), 30-59 (r4 r5 r6 r7), 60-89 (r8), then an empty window.
    let window = |name: &str, from: i64, to: i64| {
        (
            name.to_string(),
            t0() + Duration::minutes(from),
            t0() + Duration::minutes(to),
        )
    };
    let windows = [
        window("a", 0, 30),
        window("b", 30, 60),
        window("c", 60, 90),
        window("d", 90, 120),
    ];
    let days = per_window(&runs, &usage, &windows);
    let seen: Vec<(&str, u32, u32, u32)> = days
        .iter()
        .map(|d| (d.group.as_str(), d.runs, d.finished, d.succeeded))
        .collect();
    assert_eq!(
        seen,
        [
            ("a", 3, 3, 2),
            ("b", 4, 3, 2),
            ("c", 1, 1, 0),
            ("d", 0, 0, 0)
        ]
    );
    assert!(close(days[0].cost_usd.unwrap(), 0.30), "{:?}", days[0]);
    assert_eq!(days[0].runs_cost_unknown, 1, "r3");
    assert_eq!(days[0].rework_rounds, 1, "r3");
    assert_eq!(
        days[2].rework_rounds, 1,
        "r8 is a rework round though r4's success is in another window"
    );
    assert_eq!(days[3].success_rate, None);
}

#[test]
fn agent_and_model_come_from_the_run_row_first_then_the_usage_row() {
    let (mut runs, usage) = history();
    // r5 (no usage row) and r7 (running) name their agent on the run itself; r3's run
    // row names the model its usage row does not.
    for run in runs.iter_mut() {
        match run.run_id.as_str() {
            "r5" | "r7" => {
                run.agent = Some("command".into());
            }
            "r3" => {
                run.agent = Some("codex".into());
                run.model = Some("gpt-5-codex".into());
            }
            _ => {}
        }
    }
    let by_agent = compute(&runs, &usage, &[], GroupBy::Agent, "backend", t0());
    let names = groups(&by_agent);
    assert_eq!(names, [("claude-code", 5), ("codex", 1), ("command", 2)]);
    let by_model = compute(&runs, &usage, &[], GroupBy::Model, "backend", t0());
    let names = groups(&by_model);
    assert_eq!(
        names,
        [("gpt-5-codex", 1), ("opus", 5), ("unknown", 2)],
        "a command agent has no model sortie can tell"
    );
}

#[test]
fn cost_per_merged_pull_request_matches_the_hand_computation() {
    use crate::ledger::MergedPull;
    let (runs, usage) = history();
    let merge = |ticket: &str, pull_request: u64, minutes: i64| MergedPull {
        ticket_id: ticket.into(),
        pull_request,
        merged_at: t0() + Duration::minutes(minutes),
    };
    // Ticket 1's pull request 7 and ticket 2's 8 merged in the window; ticket 9's
    // before it (not counted, and ticket 9 has no run anyway).
    let merged = [merge("1", 7, 70), merge("2", 8, 80), merge("9", 3, -60)];
    let stats = compute(&runs, &usage, &merged, GroupBy::Role, "backend", t0());
    assert_eq!(stats.merged_pull_requests, 2);
    // Ticket 1: 0.10 + 0.20 + 0.30 + 0.01 (r3 unknown); ticket 2: 0.05 (r5 unknown, r7
    // still running): 0.66 over 2 pull requests.
    assert!(close(stats.cost_per_merged_pull_request.unwrap(), 0.33));
    assert_eq!(stats.merged_pull_requests_runs_cost_unknown, 2);
    let none = compute(&runs, &usage, &[], GroupBy::Role, "backend", t0());
    assert_eq!(
        (none.merged_pull_requests, none.cost_per_merged_pull_request),
        (0, None)
    );
}

#[test]
fn since_is_a_span_back_from_now_or_an_instant() {
    let now = DateTime::parse_from_rfc3339("2026-12-08T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let at = |t: &str| parse_since(t, now).map(|d| d.to_rfc3339());
    assert_eq!(at("7d").unwrap(), "2026-12-01T12:00:00+00:00");
    assert_eq!(at("24h").unwrap(), "2026-12-07T12:00:00+00:00");
    assert_eq!(at("90m").unwrap(), "2026-12-08T10:30:00+00:00");
    assert_eq!(
        at("2026-12-01T00:00:00Z").unwrap(),
        "2026-12-01T00:00:00+00:00"
    );
    assert!(at("7w").unwrap_err().contains("expected a span"));
    assert!(at("").is_err());
    assert!(at("-1d").is_err());
}

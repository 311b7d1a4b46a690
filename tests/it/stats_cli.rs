//! Issue #37: `sortie stats` on a seeded ledger gives the figures computed by hand
//! (success rate, nearest-rank percentiles, cost measured and unknown apart, rework
//! rounds, cost per ticket that reached the last stage), as text and as JSON.

use chrono::{DateTime, Duration, TimeZone, Utc};
use sortie::config::Config;
use sortie::ledger::{ClaimKey, Ledger, RunPhase, RunRecord, RunUsage, SqliteLedger};

use crate::common::Sandbox;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap()
}

/// Two stages (architect, then backend) and a ledger holding: ticket 1's architect
/// success (r1, 60 s, $0.10), backend failure (r2, 120 s, $0.20), architect again
/// (r3, 30 s, no cost reported: a rework round), backend success (r4, 90 s, $0.30);
/// ticket 2's architect failure (r5, 10 s, no usage).
fn seeded() -> Sandbox {
    let sb = Sandbox::with_config(
        "tracker: {kind: local, path: board}
state_root: state
agent: {command: [true]}
pipeline_stages:
  - {role: architect, claim_status: ready, success_status: designed}
  - {role: backend, claim_status: designed, success_status: done, requires_prior_role: architect}
",
    );
    let config = Config::load(&sb.config_path()).unwrap();
    let tracker = config.tracker.name();
    let ledger = SqliteLedger::open(&config.ledger_path()).unwrap();
    let runs = [
        (
            "r1",
            "1",
            "architect",
            0,
            60,
            "success",
            Some((1000, Some(0.10))),
        ),
        (
            "r2",
            "1",
            "backend",
            10,
            120,
            "failure",
            Some((2000, Some(0.20))),
        ),
        ("r3", "1", "architect", 20, 30, "success", Some((500, None))),
        (
            "r4",
            "1",
            "backend",
            30,
            90,
            "success",
            Some((3000, Some(0.30))),
        ),
        ("r5", "2", "architect", 40, 10, "failure", None),
    ];
    for (id, ticket, role, start, secs, outcome, usage) in runs {
        let key = ClaimKey::new(tracker.clone(), ticket, role);
        let started_at = t0() + Duration::minutes(start);
        ledger
            .record_run(&RunRecord {
                run_id: id.into(),
                key: key.clone(),
                stage: if role == "architect" {
                    "ready"
                } else {
                    "designed"
                }
                .into(),
                stage_attempt: 1,
                claimer_id: "h:1:x".into(),
                phase: RunPhase::Finished,
                outcome: Some(outcome.into()),
                reason_code: None,
                log_path: None,
                started_at,
                finished_at: Some(started_at + Duration::seconds(secs)),
                session_id: None,
                route: None,
                title: None,
                agent: None,
                model: None,
                rate_limits: Vec::new(),
            })
            .unwrap();
        if let Some((tokens, cost_usd)) = usage {
            ledger
                .record_usage(&RunUsage {
                    run_id: id.into(),
                    key,
                    tokens_in: tokens,
                    tokens_out: 0,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                    reasoning_tokens: 0,
                    cost_usd,
                    recorded_at: started_at,
                    agent: Some("codex".into()),
                    model: cost_usd.map(|_| "gpt-5-codex".into()),
                })
                .unwrap();
        }
    }
    sb
}

#[test]
fn stats_by_role_on_a_seeded_ledger_as_text() {
    let sb = seeded();
    let text = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--since",
        "2026-12-01T00:00:00Z",
        "--by",
        "role",
    ]);
    let expected = "\
runs started since 2026-12-01 00:00 UTC, by role
role                  runs  success      p50      p95     tokens  rework  cost
architect                3      67%      30s      60s       1500       1  $0.1000 + 2 run(s) unknown
backend                  2      50%      90s     120s       5000       0  $0.5000
all                      5      60%      60s     120s       6500       1  $0.6000 + 2 run(s) unknown
tickets that reached the last stage (backend): 1, at least $0.6000 per ticket (1 run(s) of unknown cost left out)
pull requests merged: 0, none merged
";
    assert_eq!(text, expected, "\n{text}");
}

#[test]
fn stats_as_json_by_ticket() {
    let sb = seeded();
    let out = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--since",
        "2026-12-01T00:00:00Z",
        "--by",
        "ticket",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["by"], "ticket");
    let one = &stats["groups"][0];
    assert_eq!(one["group"], "1");
    assert_eq!(
        (one["runs"].as_u64(), one["succeeded"].as_u64()),
        (Some(4), Some(3))
    );
    assert_eq!(one["success_rate"], 0.75);
    // Durations 30 60 90 120 s: the 2nd and the 4th of 4.
    assert_eq!(
        (one["p50_seconds"].as_f64(), one["p95_seconds"].as_f64()),
        (Some(60.0), Some(120.0))
    );
    assert_eq!(one["rework_rounds"], 1);
    assert_eq!(one["runs_cost_unknown"], 1);
    let two = &stats["groups"][1];
    assert_eq!(
        (two["runs"].as_u64(), two["success_rate"].as_f64()),
        (Some(1), Some(0.0))
    );
    // Issue #52 item 7: no run of the group reported a cost, so its cost is null.
    assert_eq!(two["cost_usd"], serde_json::Value::Null);
    assert_eq!(two["runs_cost_unknown"], 1, "no usage is unknown, not $0");
    assert_eq!(stats["finished_tickets"], 1);
    assert!((stats["cost_per_finished_ticket"].as_f64().unwrap() - 0.6).abs() < 1e-9);
    // A window after every run: nothing.
    let out = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--since",
        "2026-12-02T00:00:00Z",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["total"]["runs"], 0);
    assert_eq!(stats["cost_per_finished_ticket"], serde_json::Value::Null);
}

#[test]
fn stats_by_model_groups_runs_by_the_model_their_usage_names() {
    let sb = seeded();
    let out = sb.ok(&[
        "stats",
        "--config",
        "pipeline.yaml",
        "--since",
        "2026-12-01T00:00:00Z",
        "--by",
        "model",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    let groups: Vec<(String, u64)> = stats["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap().to_string(),
                g["runs"].as_u64().unwrap(),
            )
        })
        .collect();
    // r1, r2, r4 priced; r3 without a price has no model named; r5 reported nothing.
    assert_eq!(
        groups,
        [("gpt-5-codex".to_string(), 3), ("unknown".to_string(), 2)]
    );
}

#[test]
fn a_bad_since_is_a_usage_error() {
    let sb = seeded();
    let out = sb.sortie(&["stats", "--config", "pipeline.yaml", "--since", "a week"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected a span"));
}

/// Issue #37: the cost per merged pull request: the window's runs of the tickets whose
/// pull request a `merged` reaction recorded in the window, over the number of those
/// pull requests.
#[test]
fn cost_per_merged_pull_request_on_a_seeded_ledger() {
    let sb = seeded();
    let config = Config::load(&sb.config_path()).unwrap();
    let ledger = SqliteLedger::open(&config.ledger_path()).unwrap();
    let tracker = config.tracker.name();
    // Ticket 1's pull request 12 and ticket 2's 13 merged after their runs; ticket 3's
    // pull request 11 merged the day before the window.
    let merge = |ticket: &str, number: u64, at: DateTime<Utc>| {
        crate::common::store_merged_reaction(&ledger, &tracker, ticket, number, at);
    };
    merge("3", 11, t0() - Duration::days(1));
    merge("1", 12, t0() + Duration::hours(2));
    merge("2", 13, t0() + Duration::hours(3));
    let args = [
        "stats",
        "--config",
        "pipeline.yaml",
        "--since",
        "2026-12-01T00:00:00Z",
    ];
    let text = sb.ok(&args);
    // Ticket 1: $0.10 + $0.20 + $0.30 (r3 unknown); ticket 2: nothing known (r5
    // unknown): $0.60 over 2 pull requests.
    assert!(
        text.ends_with(
            "pull requests merged: 2, at least $0.3000 per pull request \
             (2 run(s) of unknown cost left out)\n"
        ),
        "\n{text}"
    );
    let out = sb.ok(&[&args[..], &["--json"]].concat());
    let stats: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stats["merged_pull_requests"], 2);
    assert!((stats["cost_per_merged_pull_request"].as_f64().unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(stats["merged_pull_requests_runs_cost_unknown"], 2);
}

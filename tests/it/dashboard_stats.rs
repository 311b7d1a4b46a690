//! Issue #37: the `sortie stats` figures on the dashboard (a table by stage over the
//! last 7 days and a 7-day chart drawn by the server), in `GET /api/v1/stats` and as
//! metrics, on a seeded ledger against a hand computation.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use sortie::ledger::{ClaimKey, RunPhase, RunRecord, RunUsage};
use sortie::pipeline::Clock;
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::Tracker;

use crate::dashboard_pages::{config_text, decoded, Daemon};

/// The pages' clock: 2026-12-08 10:00 UTC, standing still.
struct Still;

impl Clock for Still {
    fn now(&self) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 8, 10, 0, 0).unwrap()
    }
}

/// One run of the seeded history.
struct Seed {
    id: &'static str,
    ticket: &'static str,
    role: &'static str,
    /// Day of December 2026 and the hour it started.
    day: u32,
    hour: u32,
    /// Wall time in seconds; `None`: cancelled.
    secs: Option<i64>,
    outcome: Option<&'static str>,
    /// Tokens and cost reported; `None`: no usage row.
    usage: Option<(u64, Option<f64>)>,
}

const fn seed(
    id: &'static str,
    ticket: &'static str,
    role: &'static str,
    (day, hour): (u32, u32),
    secs: Option<i64>,
    outcome: Option<&'static str>,
    usage: Option<(u64, Option<f64>)>,
) -> Seed {
    Seed {
        id,
        ticket,
        role,
        day,
        hour,
        secs,
        outcome,
        usage,
    }
}

/// Ticket 1 goes architect (a1, $0.10) -> backend fails (b1, $0.20) -> architect again
/// (a2, no usage: a rework round) -> backend (b2, $0.30) -> qa (q1, $0.05), the last
/// stage. Ticket 2: architect fails (a3, tokens without a cost) and is cancelled (a4).
/// Ticket 3's run of 8 days ago (a0) is outside every window.
const HISTORY: [Seed; 8] = [
    seed(
        "a0",
        "3",
        "architect",
        (1, 9),
        Some(5),
        Some("success"),
        Some((9, Some(9.0))),
    ),
    seed(
        "a1",
        "1",
        "architect",
        (6, 9),
        Some(60),
        Some("success"),
        Some((1000, Some(0.10))),
    ),
    seed(
        "b1",
        "1",
        "backend",
        (6, 11),
        Some(120),
        Some("failure"),
        Some((2000, Some(0.20))),
    ),
    seed(
        "a2",
        "1",
        "architect",
        (7, 8),
        Some(30),
        Some("success"),
        None,
    ),
    seed(
        "b2",
        "1",
        "backend",
        (7, 9),
        Some(90),
        Some("success"),
        Some((3000, Some(0.30))),
    ),
    seed(
        "q1",
        "1",
        "qa",
        (7, 12),
        Some(40),
        Some("success"),
        Some((500, Some(0.05))),
    ),
    seed(
        "a3",
        "2",
        "architect",
        (8, 1),
        Some(10),
        Some("failure"),
        Some((100, None)),
    ),
    seed("a4", "2", "architect", (8, 2), None, None, None),
];

fn stage_of(role: &str) -> &'static str {
    match role {
        "architect" => "ready-for-design",
        "backend" => "design-approved",
        _ => "code-review",
    }
}

async fn seeded() -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    let d = Daemon::start_at(path, board.clone() as Arc<dyn Tracker>, Arc::new(Still)).await;
    for s in HISTORY {
        let key = ClaimKey::new(board.name(), s.ticket, s.role);
        let started_at = Utc.with_ymd_and_hms(2026, 12, s.day, s.hour, 0, 0).unwrap();
        let ended_at = started_at + chrono::Duration::seconds(s.secs.unwrap_or(3));
        d.ledger
            .record_run(&RunRecord {
                run_id: s.id.into(),
                key: key.clone(),
                stage: stage_of(s.role).into(),
                stage_attempt: 1,
                claimer_id: "cron".into(),
                phase: if s.secs.is_some() {
                    RunPhase::Finished
                } else {
                    RunPhase::Cancelled
                },
                outcome: s.outcome.map(str::to_string),
                reason_code: None,
                log_path: None,
                started_at,
                finished_at: Some(ended_at),
                session_id: None,
                route: None,
                title: None,
                agent: None,
                model: None,
                rate_limits: Vec::new(),
            })
            .unwrap();
        if let Some((tokens, cost_usd)) = s.usage {
            d.ledger
                .record_usage(&RunUsage {
                    run_id: s.id.into(),
                    key,
                    tokens_in: tokens,
                    tokens_out: 0,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                    reasoning_tokens: 0,
                    cost_usd,
                    recorded_at: ended_at,
                    agent: None,
                    model: None,
                })
                .unwrap();
        }
    }
    (dir, d)
}

/// The rows of the table `id` as text, one string per row, cells joined by `|`.
fn table_rows(page: &str, id: &str) -> Vec<String> {
    let from = page
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no table {id}: {page}"));
    let table = &page[from..];
    let table = &table[..table.find("</table>").unwrap()];
    let cell = regex::Regex::new(r"<t[dh][^>]*>(.*?)</t[dh]>").unwrap();
    table
        .split("<tr")
        .skip(1)
        .map(|row| {
            cell.captures_iter(row)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect()
}

/// The table by stage: per stage (by claim status) and for all runs of the last 7
/// days, the figures a hand computation gives; the cost per ticket that reached qa.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_last_7_days_by_stage_as_computed_by_hand() {
    let (_dir, d) = seeded().await;
    // Ticket 1's pull request merged after its qa run (ticket 3's, 9 days ago, is out
    // of the window).
    let tracker = MemoryTracker::new().name().to_string();
    let at = |day, hour| Utc.with_ymd_and_hms(2026, 12, day, hour, 0, 0).unwrap();
    crate::common::store_merged_reaction(&*d.ledger, &tracker, "1", 41, at(7, 13));
    crate::common::store_merged_reaction(&*d.ledger, &tracker, "3", 40, at(1, 0));
    let page = d
        .page_with(
            "/?part=body",
            "<td>ready-for-design</td>",
            Duration::from_secs(20),
        )
        .await;
    let page = decoded(page);
    let rows = table_rows(&page, "stats");
    assert_eq!(
        rows,
        [
            "stage|runs|success rate|p50|p95|tokens|cost|runs of unknown cost|rework rounds",
            // q1: 40 s, $0.05.
            "code-review|1|100%|40s|40s|500|$0.05|0|0",
            // b1 failed in 120 s, b2 succeeded in 90 s: nearest rank, p50 the 1st of 2.
            "design-approved|2|50%|1m 30s|2m 0s|5000|$0.50|0|0",
            // a1 a2 a3 a4 (a0 is 8 days old): 2 of 3 finished succeeded (a4 was
            // cancelled); durations 10 30 60 s; a2 (no usage), a3 (no cost) and a4 of
            // unknown cost; a2 ran after a1's success: a rework round.
            "ready-for-design|4|67%|30s|1m 0s|1100|$0.10|3|1",
            // 4 of 6 finished; durations 10 30 40 60 90 120: the 3rd and the 6th.
            "all|7|67%|40s|2m 0s|6600|$0.65|3|1",
        ]
    );
    assert!(
        page.contains(
            "1 ticket(s) reached the last stage (qa): $0.65 per ticket \
             (at least: 1 run(s) of unknown cost left out)"
        ),
        "{page}"
    );
    assert!(
        page.contains(
            "1 pull request(s) merged: $0.65 per merged pull request \
             (at least: 1 run(s) of unknown cost left out)"
        ),
        "{page}"
    );
    d.stop().await;
}

/// The 7-day chart: one bar per day from 2 to 8 December, each with its run count and
/// its figures in its title; days without a run have an empty bar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_7_day_chart_has_one_bar_per_day_with_its_figures() {
    let (_dir, d) = seeded().await;
    let page = d
        .page_with("/?part=body", r#"id="days-chart""#, Duration::from_secs(20))
        .await;
    let page = decoded(page);
    let svg = &page[page.find(r#"<svg id="days-chart""#).unwrap()..];
    let svg = &svg[..svg.find("</svg>").unwrap()];
    let day = regex::Regex::new(
        r#"<g class="day" data-day="([0-9-]+)"><title>([^<]*)</title>.*?<text class="runs"[^>]*>(\d+)</text>"#,
    )
    .unwrap();
    let days: Vec<(String, String, String)> = day
        .captures_iter(svg)
        .map(|c| (c[1].to_string(), c[2].to_string(), c[3].to_string()))
        .collect();
    let dates: Vec<&str> = days.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(
        dates,
        [
            "2026-12-02",
            "2026-12-03",
            "2026-12-04",
            "2026-12-05",
            "2026-12-06",
            "2026-12-07",
            "2026-12-08"
        ],
        "{svg}"
    );
    let counts: Vec<&str> = days.iter().map(|d| d.2.as_str()).collect();
    assert_eq!(counts, ["0", "0", "0", "0", "2", "3", "2"]);
    assert_eq!(
        days[0].1,
        "2026-12-02: 0 runs (0 success, 0 failure, 0 other); no run finished; 0 tokens; $0.00"
    );
    assert_eq!(
        days[4].1,
        "2026-12-06: 2 runs (1 success, 1 failure, 0 other); success rate 50%, \
         p50 60s, p95 120s; 3000 tokens; $0.30"
    );
    assert_eq!(
        days[5].1,
        "2026-12-07: 3 runs (3 success, 0 failure, 0 other); success rate 100%, \
         p50 40s, p95 90s; 3500 tokens; $0.35 + 1 run(s) of unknown cost"
    );
    assert_eq!(
        days[6].1,
        "2026-12-08: 2 runs (0 success, 1 failure, 1 other); success rate 0%, \
         p50 10s, p95 10s; 100 tokens; cost unknown (2 run(s))"
    );
    // The bars: 6 December has one success and one failure, 8 December one failure
    // and one other; nothing is drawn for an empty day.
    assert_eq!(svg.matches(r#"class="bar-success""#).count(), 2, "{svg}");
    assert_eq!(svg.matches(r#"class="bar-failure""#).count(), 2, "{svg}");
    assert_eq!(svg.matches(r#"class="bar-other""#).count(), 1, "{svg}");
    d.stop().await;
}

/// `GET /api/v1/stats` answers what `sortie stats --json` prints (default: the last 7
/// days by stage) with the chart's days; `since` and `by` work as the flags do; bad
/// ones are `400 bad_request`. `/metrics` has the same figures per stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stats_api_and_the_metrics_give_the_same_figures() {
    let (_dir, d) = seeded().await;
    d.page_with(
        "/?part=body",
        "<td>ready-for-design</td>",
        Duration::from_secs(20),
    )
    .await;
    let (status, body) = d.get("/api/v1/stats").await;
    assert_eq!(status, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(stats["by"], "stage");
    assert_eq!(stats["since"], "2026-12-01T10:00:00Z");
    let architect = &stats["groups"][2];
    assert_eq!(architect["group"], "ready-for-design");
    assert_eq!(
        (architect["runs"].as_u64(), architect["finished"].as_u64()),
        (Some(4), Some(3))
    );
    assert_eq!(architect["p50_seconds"], 30.0);
    assert_eq!(stats["total"]["runs_cost_unknown"], 3);
    assert_eq!(stats["finished_tickets"], 1);
    let days = stats["days"].as_array().unwrap();
    assert_eq!(days.len(), 7);
    assert_eq!(days[6]["group"], "2026-12-08");
    assert_eq!(days[6]["runs"], 2);

    // Since 8 days ago by role: a0 counts too.
    let (_, body) = d.get("/api/v1/stats?since=8d&by=role").await;
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    let roles: Vec<(&str, u64)> = stats["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap(), g["runs"].as_u64().unwrap()))
        .collect();
    assert_eq!(roles, [("architect", 5), ("backend", 2), ("qa", 1)]);

    for bad in ["/api/v1/stats?since=a%20week", "/api/v1/stats?by=colour"] {
        let (status, body) = d.get(bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "bad_request", "{body}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("expected")),
            "{body}"
        );
    }

    let (_, metrics) = d.get("/metrics").await;
    for line in [
        r#"sortie_stage_7d_runs{stage="ready-for-design",outcome="success"} 2"#,
        r#"sortie_stage_7d_runs{stage="ready-for-design",outcome="failure"} 1"#,
        r#"sortie_stage_7d_runs{stage="ready-for-design",outcome="other"} 1"#,
        r#"sortie_stage_7d_success_ratio{stage="design-approved"} 0.5"#,
        r#"sortie_stage_7d_run_duration_seconds{stage="design-approved",quantile="0.5"} 90"#,
        r#"sortie_stage_7d_run_duration_seconds{stage="design-approved",quantile="0.95"} 120"#,
        r#"sortie_stage_7d_rework_rounds{stage="ready-for-design"} 1"#,
        r#"sortie_stage_7d_runs_cost_unknown{stage="ready-for-design"} 3"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
    d.stop().await;
}

/// Issue #52: a row none of whose runs has a known cost says so: `null` in
/// `/api/v1/state` (`usage_today`) and in `/api/v1/stats`, `unknown` on the dashboard,
/// never `$0.00`; a row with some known runs keeps its lower bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_no_run_reported_is_null_in_the_api_and_unknown_on_the_dashboard() {
    let (_dir, d) = seeded().await;
    let page = d
        .page_with("/?part=body", "<td>architect</td>", Duration::from_secs(20))
        .await;
    let page = decoded(page);
    let rows = table_rows(&page, "totals");
    // Today (since 00:00 UTC on the 8th): a3 (tokens, no cost) and a4 (cancelled, no
    // usage). The 7 days: a1 ($0.10) too, a lower bound.
    assert!(
        rows.iter()
            .any(|r| r == "architect|2|100|unknown|4|1100|$0.10+"),
        "{rows:?}"
    );

    let (status, body) = d.get("/api/v1/state").await;
    assert_eq!(status, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    let role = |window: &str| {
        state[window]["roles"]
            .as_array()
            .and_then(|r| r.iter().find(|u| u["role"] == "architect"))
            .cloned()
            .unwrap_or_else(|| panic!("{state:#}"))
    };
    let today = role("usage_today");
    assert_eq!(today["cost_usd"], serde_json::Value::Null, "{today}");
    assert_eq!(today["tokens_in"], 100, "{today}");
    let week = role("usage_7_days");
    assert_eq!(week["cost_usd"], 0.1, "{week}");

    let (_, body) = d.get("/api/v1/stats").await;
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    let day = &stats["days"][6];
    assert_eq!(day["group"], "2026-12-08");
    assert_eq!(day["cost_usd"], serde_json::Value::Null, "{day}");
    assert_eq!(day["tokens"], 100, "{day}");
    d.stop().await;
}

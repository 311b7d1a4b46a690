//! What the daemon knows about itself between ticks: last tick, recent runs, config
//! error and the counters `/metrics` exposes.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::pipeline::report::RunLine;

/// How many finished runs `/api/v1/state` keeps.
const RECENT_RUNS: usize = 50;

/// Upper bounds of the run duration histogram, seconds.
const RUN_BUCKETS: &[f64] = &[0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0];

/// Upper bounds of the tick duration histogram, seconds.
const TICK_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The last tick's summary.
#[derive(Debug, Clone, Serialize)]
pub struct TickSummary {
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took, seconds (runs it started are not waited for).
    pub duration_seconds: f64,
    /// Whether it completed.
    pub ok: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Runs it started.
    pub runs_started: usize,
    /// Tickets it did not dispatch.
    pub skipped: usize,
    /// Claims it asked to stop.
    pub cancels: usize,
    /// Outbox write-backs it replayed.
    pub replays: usize,
    /// What each watched ticket's pull request called for (`reactions:`), as this
    /// tick saw it.
    pub reactions: Vec<crate::pipeline::report::ReactionLine>,
    /// Questions agents asked on tickets that wait for a person's answer, as this tick
    /// saw them (issue #34).
    pub questions: Vec<WaitingQuestion>,
}

/// A question on a ticket waiting for a person's answer.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WaitingQuestion {
    /// The ticket.
    pub ticket: String,
    /// The role whose agent asked.
    pub role: String,
    /// The ticket's status (the stage's claim status).
    pub status: String,
    /// The question's id.
    pub question_id: String,
    /// When it was posted.
    pub asked_at: DateTime<Utc>,
    /// When it times out, if it does.
    pub deadline: Option<DateTime<Utc>>,
    /// Comments that tried to answer it and do not count, with why.
    pub ignored: Vec<String>,
}

impl WaitingQuestion {
    /// The waiting questions among a tick's skips.
    pub fn from_skips(skips: &[crate::pipeline::report::SkipLine]) -> Vec<Self> {
        skips
            .iter()
            .filter_map(|s| match &s.reason {
                crate::pipeline::eligibility::SkipReason::WaitingForAnswer {
                    question_id,
                    asked_at,
                    deadline,
                    ignored,
                } => Some(WaitingQuestion {
                    ticket: s.ticket.clone(),
                    role: s.role.clone(),
                    status: s.status.clone(),
                    question_id: question_id.clone(),
                    asked_at: *asked_at,
                    deadline: *deadline,
                    ignored: ignored.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// A finished run, as the daemon saw it end.
#[derive(Debug, Clone, Serialize)]
pub struct FinishedRun {
    /// When the daemon collected it.
    pub finished_at: DateTime<Utc>,
    /// What the run did.
    #[serde(flatten)]
    pub line: RunLine,
}

/// Mutable daemon state behind one lock.
#[derive(Debug, Default)]
pub struct DaemonStatus {
    /// The last tick, if any.
    pub last_tick: Option<TickSummary>,
    /// When the last tick that succeeded ended.
    pub last_ok_at: Option<DateTime<Utc>>,
    /// Why the config on disk is not the one running, if it is not.
    pub config_error: Option<String>,
    /// Whether a shutdown has started.
    pub shutting_down: bool,
    /// Why no pipeline could be built yet (the tracker or the ledger unreachable).
    pub not_ready: Option<String>,
    /// A tick was asked for (refresh, webhook, an ended run) and has not started yet.
    pub tick_requested: bool,
    /// Finished runs, newest first.
    pub recent: VecDeque<FinishedRun>,
    /// Counters.
    pub counters: Counters,
    /// The last board read for the dashboard, reused for a few seconds; an async lock
    /// so that concurrent page loads wait for one read instead of each making one.
    pub board: std::sync::Arc<tokio::sync::Mutex<Option<CachedBoard>>>,
    /// Titles of tickets seen on board reads, kept after a ticket leaves the listing,
    /// so a finished run's row keeps the title its ticket had (at most [`TITLES_KEPT`]).
    pub titles: BTreeMap<String, String>,
}

/// How many ticket titles the daemon remembers.
pub const TITLES_KEPT: usize = 5_000;

impl DaemonStatus {
    /// Remember `titles` (a board read's): newer ones win; past [`TITLES_KEPT`], the
    /// titles of tickets the read did not list go first.
    pub fn remember_titles(&mut self, titles: &BTreeMap<String, String>) {
        for (id, title) in titles {
            self.titles.insert(id.clone(), title.clone());
        }
        if self.titles.len() > TITLES_KEPT {
            self.titles.retain(|id, _| titles.contains_key(id));
        }
    }
}

/// A board read and when it was made.
#[derive(Debug)]
pub struct CachedBoard {
    /// When it was read.
    pub at: tokio::time::Instant,
    /// Which pipeline it was read through (a reload invalidates it).
    pub pipeline: usize,
    /// The board, or why it could not be read.
    pub board: Result<std::sync::Arc<super::board::BoardView>, String>,
}

/// Monotonic counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Ticks by result (`ok`, `error`).
    pub ticks: BTreeMap<&'static str, u64>,
    /// Tick duration histogram: counts per bucket (non-cumulative), sum, count.
    pub tick_buckets: Vec<u64>,
    /// Sum of tick durations.
    pub tick_sum: f64,
    /// Run duration histogram: counts per bucket (non-cumulative).
    pub run_buckets: Vec<u64>,
    /// Sum of run durations.
    pub run_sum: f64,
    /// Runs by (role, outcome).
    pub runs: BTreeMap<(String, String), u64>,
    /// Write-backs by (role, outcome).
    pub handoffs: BTreeMap<(String, String), u64>,
    /// `verify` commands run after an agent's success, by (role, result: `passed`,
    /// `failed`, `timed_out`).
    pub verify: BTreeMap<(String, String), u64>,
    /// Reactions to pull requests by (kind, outcome); waiting is not counted.
    pub reactions: BTreeMap<(String, String), u64>,
    /// Config reloads that failed validation.
    pub reload_failures: u64,
    /// Config reloads applied.
    pub reloads: u64,
}

impl DaemonStatus {
    /// Record a finished tick that ended at `now`.
    pub fn record_tick(&mut self, summary: TickSummary, now: DateTime<Utc>) {
        let c = &mut self.counters;
        *c.ticks
            .entry(if summary.ok { "ok" } else { "error" })
            .or_default() += 1;
        if c.tick_buckets.is_empty() {
            c.tick_buckets = vec![0; TICK_BUCKETS.len() + 1];
        }
        let idx = TICK_BUCKETS
            .iter()
            .position(|b| summary.duration_seconds <= *b)
            .unwrap_or(TICK_BUCKETS.len());
        c.tick_buckets[idx] += 1;
        c.tick_sum += summary.duration_seconds;
        for line in &summary.reactions {
            if line.outcome == "waiting" || line.outcome == "would_react" {
                continue;
            }
            let kind = line.kind.clone().unwrap_or_else(|| "none".to_string());
            *c.reactions.entry((kind, line.outcome.clone())).or_default() += 1;
        }
        if summary.ok {
            self.last_ok_at = Some(now);
        }
        self.last_tick = Some(summary);
    }

    /// Record a run that ended (collected at `now`).
    pub fn record_run(&mut self, line: RunLine, now: DateTime<Utc>) {
        if let Some(secs) = line.duration_seconds {
            let c = &mut self.counters;
            if c.run_buckets.is_empty() {
                c.run_buckets = vec![0; RUN_BUCKETS.len() + 1];
            }
            let idx = RUN_BUCKETS
                .iter()
                .position(|b| secs <= *b)
                .unwrap_or(RUN_BUCKETS.len());
            c.run_buckets[idx] += 1;
            c.run_sum += secs;
        }
        for result in &line.verify {
            *self
                .counters
                .verify
                .entry((line.role.clone(), result.clone()))
                .or_default() += 1;
        }
        let key = (line.role.clone(), line.outcome.clone());
        *self.counters.runs.entry(key.clone()).or_default() += 1;
        if line.to_status.is_some() && (line.outcome == "success" || line.outcome == "failure") {
            *self.counters.handoffs.entry(key).or_default() += 1;
        }
        self.recent.push_front(FinishedRun {
            finished_at: now,
            line,
        });
        self.recent.truncate(RECENT_RUNS);
    }
}

/// Gauges read at scrape time.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Runs of this daemon whose agent may be running.
    pub runs_in_flight: usize,
    /// Unexpired claims in the ledger for this tracker (any process).
    pub claims_held: usize,
    /// Queued retries.
    pub retries_queued: usize,
    /// Held tickets.
    pub held_tickets: usize,
    /// Hook deliveries that failed and are not yet delivered.
    pub hook_failures: usize,
    /// 1 when the config on disk is invalid and the last good one runs.
    pub config_error: bool,
    /// Tracker requests of this process by `(kind, result)`.
    pub tracker_requests: Vec<((String, String), u64)>,
    /// The tracker's rate limit left, when it has one.
    pub rate_limit_remaining: Option<u64>,
    /// Agent tokens in and out, and cost, recorded in run history for this tracker.
    pub agent_tokens_in: u64,
    /// See `agent_tokens_in`.
    pub agent_tokens_out: u64,
    /// See `agent_tokens_in`.
    pub agent_cost_usd: f64,
    /// Runs in run history whose cost is unknown (not counted in `agent_cost_usd`).
    pub agent_runs_cost_unknown: u64,
    /// With `budgets.max_cost_usd_per_day`: today's spending and the limit.
    pub day_budget: Option<(f64, f64)>,
}

/// Escape a Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Render counters and gauges in the Prometheus text exposition format.
pub fn render_metrics(status: &DaemonStatus, gauges: &Gauges) -> String {
    let g = gauges;
    let c = &status.counters;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP sortie_ticks_total Ticks run by the daemon, by result."
    );
    let _ = writeln!(out, "# TYPE sortie_ticks_total counter");
    for result in ["ok", "error"] {
        let n = c.ticks.get(result).copied().unwrap_or(0);
        let _ = writeln!(out, "sortie_ticks_total{{result=\"{result}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP sortie_tick_duration_seconds How long ticks took (runs not included)."
    );
    let _ = writeln!(out, "# TYPE sortie_tick_duration_seconds histogram");
    let mut cumulative = 0;
    for (i, bound) in TICK_BUCKETS.iter().enumerate() {
        cumulative += c.tick_buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "sortie_tick_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
        );
    }
    cumulative += c.tick_buckets.get(TICK_BUCKETS.len()).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "sortie_tick_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(out, "sortie_tick_duration_seconds_sum {}", c.tick_sum);
    let _ = writeln!(out, "sortie_tick_duration_seconds_count {cumulative}");
    let _ = writeln!(
        out,
        "# HELP sortie_run_duration_seconds How long runs took, from start to write-back."
    );
    let _ = writeln!(out, "# TYPE sortie_run_duration_seconds histogram");
    let mut cumulative = 0;
    for (i, bound) in RUN_BUCKETS.iter().enumerate() {
        cumulative += c.run_buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "sortie_run_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
        );
    }
    cumulative += c.run_buckets.get(RUN_BUCKETS.len()).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "sortie_run_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
    );
    let _ = writeln!(out, "sortie_run_duration_seconds_sum {}", c.run_sum);
    let _ = writeln!(out, "sortie_run_duration_seconds_count {cumulative}");
    for (name, help, map) in [
        (
            "sortie_runs_total",
            "Runs ended, by role and outcome.",
            &c.runs,
        ),
        (
            "sortie_handoffs_total",
            "Outcomes written back to the tracker, by role and outcome.",
            &c.handoffs,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for ((role, outcome), n) in map {
            let _ = writeln!(
                out,
                "{name}{{role=\"{}\",outcome=\"{}\"}} {n}",
                label(role),
                label(outcome)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP sortie_verify_total Verify commands run after an agent's success, by role and result."
    );
    let _ = writeln!(out, "# TYPE sortie_verify_total counter");
    for ((role, result), n) in &c.verify {
        let _ = writeln!(
            out,
            "sortie_verify_total{{role=\"{}\",result=\"{}\"}} {n}",
            label(role),
            label(result)
        );
    }
    let _ = writeln!(
        out,
        "# HELP sortie_reactions_total Reactions to watched pull requests, by kind and outcome."
    );
    let _ = writeln!(out, "# TYPE sortie_reactions_total counter");
    for ((kind, outcome), n) in &c.reactions {
        let _ = writeln!(
            out,
            "sortie_reactions_total{{kind=\"{}\",outcome=\"{}\"}} {n}",
            label(kind),
            label(outcome)
        );
    }
    let counters = [
        (
            "sortie_config_reload_failures_total",
            "Config edits that failed validation (the last good config kept running).",
            c.reload_failures,
        ),
        (
            "sortie_config_reloads_total",
            "Config edits applied.",
            c.reloads,
        ),
    ];
    for (name, help, n) in counters {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {n}");
    }
    let gauges = [
        (
            "sortie_runs_in_flight",
            "Runs of this daemon still going.",
            gauges.runs_in_flight,
        ),
        (
            "sortie_claims_held",
            "Unexpired claims on this tracker, any holder.",
            gauges.claims_held,
        ),
        (
            "sortie_retries_queued",
            "Failed attempts waiting for their retry.",
            gauges.retries_queued,
        ),
        (
            "sortie_held_tickets",
            "Tickets held until a person changes their status.",
            gauges.held_tickets,
        ),
        (
            "sortie_hook_failures",
            "Hook deliveries that failed and are not delivered yet.",
            gauges.hook_failures,
        ),
        (
            "sortie_config_error",
            "1 while the config on disk is invalid.",
            usize::from(gauges.config_error),
        ),
    ];
    for (name, help, n) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {n}");
    }
    let _ = writeln!(out, "# HELP sortie_tracker_requests_total Tracker requests of this process, by kind and result.");
    let _ = writeln!(out, "# TYPE sortie_tracker_requests_total counter");
    for ((kind, result), n) in &g.tracker_requests {
        let _ = writeln!(
            out,
            "sortie_tracker_requests_total{{kind=\"{}\",result=\"{}\"}} {n}",
            label(kind),
            label(result)
        );
    }
    if let Some(left) = g.rate_limit_remaining {
        let _ = writeln!(out, "# HELP sortie_tracker_rate_limit_remaining Requests left in the tracker's rate-limit window, as last seen.");
        let _ = writeln!(out, "# TYPE sortie_tracker_rate_limit_remaining gauge");
        let _ = writeln!(out, "sortie_tracker_rate_limit_remaining {left}");
    }
    let _ = writeln!(
        out,
        "# HELP sortie_agent_tokens_total Tokens agents reported, in run history, by direction."
    );
    let _ = writeln!(out, "# TYPE sortie_agent_tokens_total counter");
    let _ = writeln!(
        out,
        "sortie_agent_tokens_total{{direction=\"in\"}} {}",
        g.agent_tokens_in
    );
    let _ = writeln!(
        out,
        "sortie_agent_tokens_total{{direction=\"out\"}} {}",
        g.agent_tokens_out
    );
    let _ = writeln!(
        out,
        "# HELP sortie_agent_cost_usd_total Cost agents reported, in run history, in US dollars."
    );
    let _ = writeln!(out, "# TYPE sortie_agent_cost_usd_total counter");
    let _ = writeln!(out, "sortie_agent_cost_usd_total {}", g.agent_cost_usd);
    let _ = writeln!(
        out,
        "# HELP sortie_agent_runs_cost_unknown_total Runs in run history whose cost is unknown (left out of sortie_agent_cost_usd_total)."
    );
    let _ = writeln!(out, "# TYPE sortie_agent_runs_cost_unknown_total counter");
    let _ = writeln!(
        out,
        "sortie_agent_runs_cost_unknown_total {}",
        g.agent_runs_cost_unknown
    );
    if let Some((spent, limit)) = g.day_budget {
        for (name, help, value) in [
            (
                "sortie_day_cost_usd",
                "What the runs that started today cost, in US dollars (budgets.timezone's day).",
                spent,
            ),
            (
                "sortie_day_budget_usd",
                "budgets.max_cost_usd_per_day; at it, no run starts until the day ends.",
                limit,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {value}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::report::ReactionLine;

    fn line(role: &str, outcome: &str, to: Option<&str>) -> RunLine {
        RunLine {
            outcome: outcome.into(),
            to_status: to.map(str::to_string),
            ..RunLine::not_started("T-1", role, 1, "todo")
        }
    }

    #[test]
    fn cancelled_runs_count_as_runs_but_not_handoffs() {
        let mut s = DaemonStatus::default();
        s.record_run(line("backend", "success", Some("qa")), Utc::now());
        s.record_run(line("backend", "cancelled", None), Utc::now());
        let text = render_metrics(&s, &Gauges::default());
        assert!(text.contains("sortie_runs_total{role=\"backend\",outcome=\"success\"} 1"));
        assert!(text.contains("sortie_runs_total{role=\"backend\",outcome=\"cancelled\"} 1"));
        assert!(text.contains("sortie_handoffs_total{role=\"backend\",outcome=\"success\"} 1"));
        assert!(!text.contains("sortie_handoffs_total{role=\"backend\",outcome=\"cancelled\"}"));
    }

    /// Issue #33: each verify command a run ran is counted by role and result.
    #[test]
    fn verify_results_are_counted_by_role_and_result() {
        let mut s = DaemonStatus::default();
        let mut passed = line("backend", "success", Some("code-review"));
        passed.verify = vec!["passed".into(), "passed".into()];
        let mut failed = line("backend", "failure", Some("design-approved"));
        failed.verify = vec!["passed".into(), "timed_out".into()];
        s.record_run(passed, Utc::now());
        s.record_run(failed, Utc::now());
        s.record_run(line("qa", "success", Some("done")), Utc::now());
        let text = render_metrics(&s, &Gauges::default());
        assert!(
            text.contains("# TYPE sortie_verify_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("sortie_verify_total{role=\"backend\",result=\"passed\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("sortie_verify_total{role=\"backend\",result=\"timed_out\"} 1\n"),
            "{text}"
        );
        assert!(
            !text.contains("sortie_verify_total{role=\"qa\""),
            "a stage without verify is not counted: {text}"
        );
    }

    #[test]
    fn tick_histogram_is_cumulative() {
        let mut s = DaemonStatus::default();
        for d in [0.01, 0.3, 100.0] {
            s.record_tick(
                TickSummary {
                    started_at: Utc::now(),
                    duration_seconds: d,
                    ok: true,
                    error: None,
                    runs_started: 0,
                    questions: Vec::new(),
                    skipped: 0,
                    cancels: 0,
                    replays: 0,
                    reactions: vec![
                        ReactionLine {
                            ticket: "1".into(),
                            pull_request: Some(7),
                            kind: Some("ci_failure".into()),
                            outcome: "reacted".into(),
                            round: Some(1),
                            detail: String::new(),
                        },
                        ReactionLine {
                            ticket: "2".into(),
                            pull_request: Some(8),
                            kind: None,
                            outcome: "waiting".into(),
                            round: None,
                            detail: "checks running".into(),
                        },
                    ],
                },
                Utc::now(),
            );
        }
        let text = render_metrics(&s, &Gauges::default());
        assert!(text.contains("sortie_tick_duration_seconds_bucket{le=\"0.05\"} 1\n"));
        assert!(text.contains("sortie_tick_duration_seconds_bucket{le=\"0.5\"} 2\n"));
        assert!(text.contains("sortie_tick_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("sortie_ticks_total{result=\"ok\"} 3\n"));
        assert!(
            text.contains("sortie_reactions_total{kind=\"ci_failure\",outcome=\"reacted\"} 3\n"),
            "{text}"
        );
        assert!(
            !text.contains("outcome=\"waiting\""),
            "waiting is not a reaction"
        );
    }

    /// Issue #37: unknown costs are counted apart, and the day's spending shows with its
    /// limit when one is set.
    #[test]
    fn unknown_costs_and_the_day_budget_are_metrics() {
        let s = DaemonStatus::default();
        let gauges = Gauges {
            agent_runs_cost_unknown: 3,
            ..Gauges::default()
        };
        let text = render_metrics(&s, &gauges);
        assert!(
            text.contains("sortie_agent_runs_cost_unknown_total 3\n"),
            "{text}"
        );
        assert!(!text.contains("sortie_day_cost_usd"), "{text}");
        let gauges = Gauges {
            day_budget: Some((12.5, 40.0)),
            ..Gauges::default()
        };
        let text = render_metrics(&s, &gauges);
        assert!(text.contains("sortie_day_cost_usd 12.5\n"), "{text}");
        assert!(text.contains("sortie_day_budget_usd 40\n"), "{text}");
    }

    #[test]
    fn run_durations_land_in_their_histogram() {
        let mut s = DaemonStatus::default();
        for secs in [0.4, 0.6, 7.0] {
            let mut l = line("qa", "success", Some("done"));
            l.duration_seconds = Some(secs);
            s.record_run(l, Utc::now());
        }
        let text = render_metrics(&s, &Gauges::default());
        assert!(
            text.contains("sortie_run_duration_seconds_bucket{le=\"0.5\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("sortie_run_duration_seconds_bucket{le=\"1\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("sortie_run_duration_seconds_count 3\n"),
            "{text}"
        );
    }
}

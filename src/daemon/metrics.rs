//! The Prometheus text `/metrics` serves: the daemon's counters and histograms, and the
//! gauges read at scrape time.

use std::fmt::Write as _;

use super::state::{DaemonStatus, RUN_BUCKETS, TICK_BUCKETS};
use crate::stats::Figures;

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
    /// The `sortie stats` figures of the runs that started in the last 7 days, one per
    /// stage (`group` is its claim status).
    pub stages_7_days: Vec<Figures>,
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
        let _ = writeln!(out, "# HELP sortie_tracker_rate_limit_remaining Requests (GraphQL points on a GitHub Project) left in the tracker's rate-limit window, as last seen.");
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
    render_stages(&mut out, &g.stages_7_days);
    out
}

/// The `sortie_stage_7d_*` gauges: per stage, the `sortie stats` figures of the runs
/// that started in the last 7 days (`docs/api.md`).
fn render_stages(out: &mut String, stages: &[Figures]) {
    type Value = fn(&Figures) -> Vec<(Option<(&'static str, &'static str)>, Option<f64>)>;
    let series: [(&str, &str, Value); 6] = [
        (
            "sortie_stage_7d_runs",
            "Runs that started in the last 7 days, by stage and outcome (other: cancelled, a question, still running).",
            |f| {
                vec![
                    (Some(("outcome", "success")), Some(f64::from(f.succeeded))),
                    (
                        Some(("outcome", "failure")),
                        Some(f64::from(f.finished - f.succeeded)),
                    ),
                    (
                        Some(("outcome", "other")),
                        Some(f64::from(f.runs - f.finished)),
                    ),
                ]
            },
        ),
        (
            "sortie_stage_7d_success_ratio",
            "Successes among the stage's finished runs (success or failure) of the last 7 days; absent without one.",
            |f| vec![(None, f.success_rate)],
        ),
        (
            "sortie_stage_7d_run_duration_seconds",
            "Nearest-rank percentiles of the wall time of the stage's finished runs of the last 7 days.",
            |f| {
                vec![
                    (Some(("quantile", "0.5")), f.p50_seconds),
                    (Some(("quantile", "0.95")), f.p95_seconds),
                ]
            },
        ),
        (
            "sortie_stage_7d_rework_rounds",
            "Runs of the last 7 days that ran the stage again on a ticket after its success there.",
            |f| vec![(None, Some(f64::from(f.rework_rounds)))],
        ),
        (
            "sortie_stage_7d_cost_usd",
            "Known cost of the stage's runs of the last 7 days, in US dollars (runs of unknown cost left out); absent when no run's cost is known.",
            |f| vec![(None, f.cost_usd)],
        ),
        (
            "sortie_stage_7d_runs_cost_unknown",
            "The stage's ended runs of the last 7 days whose cost is unknown.",
            |f| vec![(None, Some(f64::from(f.runs_cost_unknown)))],
        ),
    ];
    if stages.is_empty() {
        return;
    }
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for f in stages {
            for (extra, v) in value(f) {
                let Some(v) = v else { continue };
                let extra = extra.map_or(String::new(), |(k, v)| format!(",{k}=\"{v}\""));
                let _ = writeln!(out, "{name}{{stage=\"{}\"{extra}}} {v}", label(&f.group));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    use crate::daemon::state::TickSummary;
    use crate::pipeline::report::ReactionLine;
    use crate::pipeline::report::RunLine;

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

    /// Issue #37: per stage, run counts by outcome, the success ratio and the duration
    /// percentiles of the last 7 days (as `sortie stats --by stage` computes them).
    #[test]
    fn stage_figures_of_the_last_7_days_are_gauges() {
        let s = DaemonStatus::default();
        let text = render_metrics(&s, &Gauges::default());
        assert!(!text.contains("sortie_stage_7d"), "no stage, no series");
        let ready = Figures {
            group: "ready".into(),
            runs: 5,
            finished: 4,
            succeeded: 3,
            success_rate: Some(0.75),
            p50_seconds: Some(20.0),
            p95_seconds: Some(60.0),
            tokens: Some(100),
            cost_usd: Some(0.5),
            runs_cost_unknown: 2,
            rework_rounds: 1,
        };
        let idle = Figures {
            group: "re\"view".into(),
            runs: 1,
            ..Figures::default()
        };
        let gauges = Gauges {
            stages_7_days: vec![ready, idle],
            ..Gauges::default()
        };
        let text = render_metrics(&s, &gauges);
        for line in [
            "# TYPE sortie_stage_7d_runs gauge\n",
            "sortie_stage_7d_runs{stage=\"ready\",outcome=\"success\"} 3\n",
            "sortie_stage_7d_runs{stage=\"ready\",outcome=\"failure\"} 1\n",
            "sortie_stage_7d_runs{stage=\"ready\",outcome=\"other\"} 1\n",
            "sortie_stage_7d_runs{stage=\"re\\\"view\",outcome=\"other\"} 1\n",
            "sortie_stage_7d_success_ratio{stage=\"ready\"} 0.75\n",
            "sortie_stage_7d_run_duration_seconds{stage=\"ready\",quantile=\"0.5\"} 20\n",
            "sortie_stage_7d_run_duration_seconds{stage=\"ready\",quantile=\"0.95\"} 60\n",
            "sortie_stage_7d_rework_rounds{stage=\"ready\"} 1\n",
            "sortie_stage_7d_cost_usd{stage=\"ready\"} 0.5\n",
            "sortie_stage_7d_runs_cost_unknown{stage=\"ready\"} 2\n",
        ] {
            assert!(text.contains(line), "{line}in\n{text}");
        }
        assert!(
            !text.contains("sortie_stage_7d_success_ratio{stage=\"re\\\""),
            "a stage without a finished run has no ratio: {text}"
        );
        assert!(!text.contains("sortie_stage_7d_run_duration_seconds{stage=\"re\\\""));
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

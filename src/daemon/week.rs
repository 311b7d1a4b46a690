//! The `sortie stats` figures the dashboard, `/api/v1/stats` and `/metrics` show (issue
//! #37): the last 7 days by stage, and each of the last 7 days of `budgets.timezone`,
//! computed by `crate::stats` from the ledger's run history.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::board::human_duration;
use super::pages::{cost, tokens, UNKNOWN};
use crate::config::{Config, DayZone};
use crate::ledger::{Ledger, LedgerError};
use crate::stats::{compute, per_window, Figures, GroupBy, Stats};

/// How many days the chart draws (today and the ones before it).
pub(super) const CHART_DAYS: i64 = 7;

/// The figures since a moment, grouped, with the chart's days.
#[derive(Debug, Serialize)]
pub(super) struct Week {
    /// What `sortie stats --json` prints for the same window and grouping.
    #[serde(flatten)]
    pub(super) stats: Stats,
    /// One entry per day of the chart, oldest first, `group` being the day
    /// (`YYYY-MM-DD` in `budgets.timezone`): today and the 6 days before it.
    pub(super) days: Vec<Figures>,
}

/// The runs of `tracker` since `since` grouped `by`, and the chart's days up to `now`.
pub(super) fn week(
    ledger: &dyn Ledger,
    tracker: &str,
    config: &Config,
    since: DateTime<Utc>,
    by: GroupBy,
    now: DateTime<Utc>,
) -> Result<Week, LedgerError> {
    let windows = chart_days(config.budgets.timezone, now);
    // One read covers both: the first day starts after `now - 7 days`.
    let from = windows.first().map_or(since, |w| w.1).min(since);
    let runs = ledger.runs_since(tracker, from)?;
    let usage = ledger.usage_since(tracker, from)?;
    let merged = ledger.merges_since(tracker, since)?;
    let last_role = config.stages.last().map_or("", |s| s.role.as_str());
    let days = per_window(&runs, &usage, &windows);
    let runs: Vec<_> = runs.into_iter().filter(|r| r.started_at >= since).collect();
    Ok(Week {
        stats: compute(&runs, &usage, &merged, by, last_role, since),
        days,
    })
}

/// The chart's days: today in `budgets.timezone` and the 6 before it, oldest first, as
/// (`YYYY-MM-DD`, first instant, first instant of the next day).
fn chart_days(zone: DayZone, now: DateTime<Utc>) -> Vec<(String, DateTime<Utc>, DateTime<Utc>)> {
    (0..CHART_DAYS)
        .rev()
        .map(|back| {
            let day = crate::budget::day_window(now - Duration::days(back), zone);
            let name = day
                .start
                .with_timezone(&zone.offset())
                .format("%Y-%m-%d")
                .to_string();
            (name, day.start, day.end)
        })
        .collect()
}

/// One stage's `sortie stats` figures over the last 7 days, written for people.
#[derive(Serialize)]
pub(super) struct StageRow {
    stage: String,
    runs: u32,
    success_rate: String,
    p50: String,
    p95: String,
    tokens: String,
    cost: String,
    cost_unknown: u32,
    rework: u32,
}

impl StageRow {
    fn of(f: &crate::stats::Figures) -> Self {
        let secs =
            |s: Option<f64>| s.map_or("–".to_string(), |s| human_duration(s.round() as i64));
        StageRow {
            stage: f.group.clone(),
            runs: f.runs,
            success_rate: f
                .success_rate
                .map_or("–".to_string(), |r| format!("{:.0}%", r * 100.0)),
            p50: secs(f.p50_seconds),
            p95: secs(f.p95_seconds),
            tokens: f.tokens.map_or(UNKNOWN.to_string(), tokens),
            // The unknown runs have a column of their own: no lower-bound mark here.
            cost: f
                .cost_usd
                .map_or(UNKNOWN.to_string(), |usd| cost(usd, false)),
            cost_unknown: f.runs_cost_unknown,
            rework: f.rework_rounds,
        }
    }
}

/// The last 7 days' figures by stage, the cost per finished ticket, and the chart.
#[derive(Serialize, Default)]
pub(super) struct WeekPanel {
    rows: Vec<StageRow>,
    finished: String,
    merged: String,
    chart: String,
    legend: String,
}

impl WeekPanel {
    pub(super) fn of(week: &Week, last_role: &str) -> Self {
        let s = &week.stats;
        let finished = per(
            &format!("ticket(s) reached the last stage ({last_role})"),
            "ticket",
            s.finished_tickets,
            s.cost_per_finished_ticket,
            s.finished_tickets_runs_cost_unknown,
        );
        WeekPanel {
            rows: s
                .groups
                .iter()
                .chain(std::iter::once(&s.total))
                .map(StageRow::of)
                .collect(),
            finished,
            merged: per(
                "pull request(s) merged",
                "merged pull request",
                s.merged_pull_requests,
                s.cost_per_merged_pull_request,
                s.merged_pull_requests_runs_cost_unknown,
            ),
            chart: super::svg::days_chart(&week.days),
            legend: super::svg::days_legend(),
        }
    }
}

/// `3 ticket(s) reached ...: $0.65 per ticket`, a lower bound when `unknown` runs are
/// left out; `0 ticket(s) reached ...` without any.
fn per(what: &str, unit: &str, n: u32, usd: Option<f64>, unknown: u32) -> String {
    match (usd, unknown) {
        _ if n == 0 => format!("{n} {what}"),
        (None, u) => format!("{n} {what}: cost per {unit} unknown ({u} run(s) of unknown cost)"),
        (Some(usd), 0) => format!("{n} {what}: {} per {unit}", cost(usd, false)),
        (Some(usd), u) => format!(
            "{n} {what}: {} per {unit} (at least: {u} run(s) of unknown cost left out)",
            cost(usd, false)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart's days are those of `budgets.timezone`: at 20:00 UTC, 01:00 the next
    /// day at +05:00, today there is the 9th, which began at 19:00 UTC on the 8th.
    #[test]
    fn the_chart_days_are_those_of_the_budget_timezone() {
        let now: DateTime<Utc> = "2026-12-08T20:00:00Z".parse().unwrap();
        let utc = chart_days(DayZone::default(), now);
        let names: Vec<&str> = utc.iter().map(|d| d.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "2026-12-02",
                "2026-12-03",
                "2026-12-04",
                "2026-12-05",
                "2026-12-06",
                "2026-12-07",
                "2026-12-08"
            ]
        );
        let east = chart_days(
            DayZone {
                offset_seconds: 5 * 3600,
            },
            now,
        );
        let last = east.last().unwrap();
        assert_eq!(last.0, "2026-12-09");
        assert_eq!(
            last.1,
            "2026-12-08T19:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(last.2 - last.1, Duration::days(1));
        assert_eq!(east[0].0, "2026-12-03");
    }
}

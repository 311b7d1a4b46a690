//! `sortie stats`: figures over run history (issue #37), computed from ledger rows with
//! no I/O: runs, success rate, duration percentiles, tokens, cost (measured and unknown
//! kept apart), rework rounds and the cost of a ticket that reached the last stage.
//! `docs/stats.md` explains each figure.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::ledger::{MergedPull, RunPhase, RunRecord, RunUsage};

/// What the figures are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The stage, by its claim status.
    Stage,
    /// The role.
    Role,
    /// The ticket.
    Ticket,
    /// The agent preset (`claude-code`, `codex`, `acp`, `command`) its run-history row
    /// names, else its usage row.
    Agent,
    /// The model its run-history row names, else its usage row.
    Model,
}

/// The group of a run whose rows do not name its agent or model (recorded before sortie
/// kept them, or a model sortie could not tell from the agent's argv).
pub const UNKNOWN_GROUP: &str = "unknown";

impl std::str::FromStr for GroupBy {
    type Err = String;

    /// `stage`, `role`, `ticket`, `agent` or `model`.
    fn from_str(text: &str) -> Result<Self, String> {
        Ok(match text {
            "stage" => GroupBy::Stage,
            "role" => GroupBy::Role,
            "ticket" => GroupBy::Ticket,
            "agent" => GroupBy::Agent,
            "model" => GroupBy::Model,
            _ => {
                return Err(format!(
                    "by {text:?}: expected stage, role, ticket, agent or model"
                ))
            }
        })
    }
}

impl GroupBy {
    /// The group a run (with its usage row, if any) belongs to: agent and model from the
    /// run's own row, else from its usage row (runs recorded before the run kept them).
    fn of<'r>(self, run: &'r RunRecord, usage: Option<&'r RunUsage>) -> &'r str {
        match self {
            GroupBy::Stage => &run.stage,
            GroupBy::Role => &run.key.role,
            GroupBy::Ticket => &run.key.ticket_id,
            GroupBy::Agent => run
                .agent
                .as_deref()
                .or(usage.and_then(|u| u.agent.as_deref()))
                .unwrap_or(UNKNOWN_GROUP),
            GroupBy::Model => run
                .model
                .as_deref()
                .or(usage.and_then(|u| u.model.as_deref()))
                .unwrap_or(UNKNOWN_GROUP),
        }
    }
}

/// The figures of one group of runs (or of all of them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// The group's name (the stage, role or ticket; `all` for the total).
    pub group: String,
    /// Runs started.
    pub runs: u32,
    /// Runs that ended with an outcome of success or failure.
    pub finished: u32,
    /// Of those, successes.
    pub succeeded: u32,
    /// `succeeded / finished`; none without a finished run.
    pub success_rate: Option<f64>,
    /// Median wall time of the finished runs, seconds (nearest rank).
    pub p50_seconds: Option<f64>,
    /// 95th percentile of the same (nearest rank).
    pub p95_seconds: Option<f64>,
    /// Tokens billed: input, cache reads and writes, output, of the runs that reported
    /// usage; `None` (JSON `null`) when no ended run did (issue #52: unknown, never 0).
    pub tokens: Option<u64>,
    /// Dollars of the runs whose cost is known (reported or priced); `None` (JSON
    /// `null`) when no run's cost is known and some run's is not (issue #52).
    pub cost_usd: Option<f64>,
    /// Ended runs whose cost is unknown (no usage, or tokens without a cost or a price):
    /// `cost_usd` leaves them out, never counts them as $0.
    pub runs_cost_unknown: u32,
    /// Runs that started a ticket's stage again after its success there (the ticket
    /// was sent back by a later stage or a reaction).
    pub rework_rounds: u32,
}

/// Every figure `sortie stats` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Runs that started at or after this.
    pub since: DateTime<Utc>,
    /// How the groups are made.
    pub by: GroupBy,
    /// One entry per group, by name.
    pub groups: Vec<Figures>,
    /// All runs together.
    pub total: Figures,
    /// Tickets with a success of the last stage's role among these runs.
    pub finished_tickets: u32,
    /// What the runs of those tickets cost, divided by their number (known costs only).
    pub cost_per_finished_ticket: Option<f64>,
    /// Runs of those tickets whose cost is unknown (the figure above is then a lower
    /// bound).
    pub finished_tickets_runs_cost_unknown: u32,
    /// Pull requests whose merge a `merged` reaction recorded in the window.
    pub merged_pull_requests: u32,
    /// What the window's runs of their tickets cost (known costs only), divided by
    /// their number.
    pub cost_per_merged_pull_request: Option<f64>,
    /// Runs of those tickets whose cost is unknown (the figure above is then a lower
    /// bound).
    pub merged_pull_requests_runs_cost_unknown: u32,
}

/// When `--since` (and `/api/v1/stats?since=`) starts, at `now`: a span back from now
/// (`7d`, `24h`, `90m`) or an RFC 3339 instant; the error's text when it cannot be read.
pub fn parse_since(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    let split = t.len().saturating_sub(1);
    let (number, unit) = t.split_at(split);
    let amount: i64 = number
        .parse()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| since_error(text))?;
    let span = match unit {
        "d" => Duration::days(amount),
        "h" => Duration::hours(amount),
        "m" => Duration::minutes(amount),
        _ => return Err(since_error(text)),
    };
    Ok(now - span)
}

fn since_error(text: &str) -> String {
    format!(
        "--since {text:?}: expected a span back from now such as 7d, 24h or 90m, or an \
         RFC 3339 instant such as 2026-12-01T00:00:00Z"
    )
}

/// The percentile `p` (0-100) of sorted `values` by nearest rank: the smallest value
/// with at least `p`% of the values at or below it.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The figures of `runs` (those of one tracker since `since`, any order) with their
/// `usage` rows and the pull requests `merged` since then, grouped `by`; `last_role` is
/// the role of the pipeline's last stage.
pub fn compute(
    runs: &[RunRecord],
    usage: &[RunUsage],
    merged: &[MergedPull],
    by: GroupBy,
    last_role: &str,
    since: DateTime<Utc>,
) -> Stats {
    let usage: HashMap<&str, &RunUsage> = usage.iter().map(|u| (u.run_id.as_str(), u)).collect();
    let ordered = in_order(runs);
    let rework = rework_runs(&ordered);

    let mut groups: BTreeMap<&str, Vec<&RunRecord>> = BTreeMap::new();
    for run in &ordered {
        let own = usage.get(run.run_id.as_str()).copied();
        groups.entry(by.of(run, own)).or_default().push(run);
    }
    let figures = |name: &str, runs: &[&RunRecord]| figures(name, runs, &usage, &rework);
    let total = figures("all", &ordered);

    let finished = tickets(
        ordered
            .iter()
            .filter(|r| r.key.role == last_role && r.outcome.as_deref() == Some("success"))
            .map(|r| r.key.ticket_id.as_str()),
    );
    let cost = figures("finished", &runs_of(&ordered, &finished));
    let merged: Vec<&MergedPull> = merged.iter().filter(|m| m.merged_at >= since).collect();
    let merged_tickets = tickets(merged.iter().map(|m| m.ticket_id.as_str()));
    let merged_cost = figures("merged", &runs_of(&ordered, &merged_tickets));
    Stats {
        since,
        by,
        groups: groups
            .iter()
            .map(|(name, runs)| figures(name, runs))
            .collect(),
        total,
        finished_tickets: finished.len() as u32,
        cost_per_finished_ticket: per_item(cost.cost_usd, finished.len()),
        finished_tickets_runs_cost_unknown: cost.runs_cost_unknown,
        merged_pull_requests: merged.len() as u32,
        cost_per_merged_pull_request: per_item(merged_cost.cost_usd, merged.len()),
        merged_pull_requests_runs_cost_unknown: merged_cost.runs_cost_unknown,
    }
}

/// `cost` divided among `n` items; none without an item or a known cost.
fn per_item(cost: Option<f64>, n: usize) -> Option<f64> {
    cost.filter(|_| n > 0).map(|usd| usd / n as f64)
}

/// The distinct ticket ids of `ids`, sorted.
fn tickets<'r>(ids: impl Iterator<Item = &'r str>) -> Vec<&'r str> {
    let mut ids: Vec<&str> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The runs of `ordered` on one of `tickets` (sorted).
fn runs_of<'r>(ordered: &[&'r RunRecord], tickets: &[&str]) -> Vec<&'r RunRecord> {
    ordered
        .iter()
        .filter(|r| tickets.binary_search(&r.key.ticket_id.as_str()).is_ok())
        .copied()
        .collect()
}

/// The figures of the runs of `runs` that started in each of `windows` (a name, its
/// first instant, the first instant after it), in the order given: the dashboard's
/// days. A rework round is told from every run of `runs`, so a ticket's success on one
/// day makes its next run of that role, on a later day, a rework round.
pub fn per_window(
    runs: &[RunRecord],
    usage: &[RunUsage],
    windows: &[(String, DateTime<Utc>, DateTime<Utc>)],
) -> Vec<Figures> {
    let usage: HashMap<&str, &RunUsage> = usage.iter().map(|u| (u.run_id.as_str(), u)).collect();
    let ordered = in_order(runs);
    let rework = rework_runs(&ordered);
    windows
        .iter()
        .map(|(name, start, end)| {
            let inside: Vec<&RunRecord> = ordered
                .iter()
                .filter(|r| r.started_at >= *start && r.started_at < *end)
                .copied()
                .collect();
            figures(name, &inside, &usage, &rework)
        })
        .collect()
}

/// `runs` by start, then id.
fn in_order(runs: &[RunRecord]) -> Vec<&RunRecord> {
    let mut ordered: Vec<&RunRecord> = runs.iter().collect();
    ordered.sort_by(|a, b| {
        a.started_at
            .cmp(&b.started_at)
            .then(a.run_id.cmp(&b.run_id))
    });
    ordered
}

/// The run ids that are rework rounds: for each ticket and role, the first run after a
/// success of that role on that ticket.
fn rework_runs<'r>(ordered: &[&'r RunRecord]) -> std::collections::HashSet<&'r str> {
    let mut done: HashMap<(&str, &str), bool> = HashMap::new();
    let mut out = std::collections::HashSet::new();
    for run in ordered {
        let key = (run.key.ticket_id.as_str(), run.key.role.as_str());
        let succeeded_before = done.get(&key).copied().unwrap_or(false);
        if succeeded_before {
            out.insert(run.run_id.as_str());
        }
        done.insert(key, run.outcome.as_deref() == Some("success"));
    }
    out
}

fn figures(
    name: &str,
    runs: &[&RunRecord],
    usage: &HashMap<&str, &RunUsage>,
    rework: &std::collections::HashSet<&str>,
) -> Figures {
    let mut f = Figures {
        group: name.to_string(),
        runs: runs.len() as u32,
        ..Figures::default()
    };
    let mut durations = Vec::new();
    // What the runs reported: usage (tokens), a known cost, and ended runs with no usage.
    let (mut tokens, mut cost) = (0u64, 0.0f64);
    let (mut with_usage, mut with_cost, mut without_usage) = (0u32, 0u32, 0u32);
    for run in runs {
        let ended = run.phase == RunPhase::Finished;
        match run.outcome.as_deref() {
            Some("success") if ended => {
                f.finished += 1;
                f.succeeded += 1;
            }
            Some("failure") if ended => f.finished += 1,
            _ => {}
        }
        if let (true, Some(end)) = (ended, run.finished_at) {
            durations.push((end - run.started_at).num_milliseconds().max(0) as f64 / 1000.0);
        }
        match usage.get(run.run_id.as_str()) {
            Some(u) => {
                with_usage += 1;
                tokens += u.total_tokens();
                match u.cost_usd {
                    Some(usd) => {
                        with_cost += 1;
                        cost += usd;
                    }
                    None => f.runs_cost_unknown += 1,
                }
            }
            // A run still going has not reported yet: neither known nor unknown.
            None if run.phase == RunPhase::Running => {}
            None => {
                without_usage += 1;
                f.runs_cost_unknown += 1;
            }
        }
        if rework.contains(run.run_id.as_str()) {
            f.rework_rounds += 1;
        }
    }
    // Unknown only when nothing was reported at all: a partial figure is a lower bound
    // (with the count of unknown runs beside it), and no run at all is a true 0.
    f.tokens = (with_usage > 0 || without_usage == 0).then_some(tokens);
    f.cost_usd = (with_cost > 0 || f.runs_cost_unknown == 0).then_some(cost);
    f.success_rate = (f.finished > 0).then(|| f64::from(f.succeeded) / f64::from(f.finished));
    durations.sort_by(f64::total_cmp);
    f.p50_seconds = nearest_rank(&durations, 50.0);
    f.p95_seconds = nearest_rank(&durations, 95.0);
    f
}

#[cfg(test)]
mod tests;

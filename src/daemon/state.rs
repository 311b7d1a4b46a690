//! What the daemon knows about itself between ticks: last tick, recent runs, config
//! error and the counters `/metrics` exposes.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::pipeline::report::RunLine;

/// How many finished runs `/api/v1/state` keeps.
const RECENT_RUNS: usize = 50;

/// Upper bounds of the run duration histogram, seconds.
pub(super) const RUN_BUCKETS: &[f64] = &[0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0];

/// Upper bounds of the tick duration histogram, seconds.
pub(super) const TICK_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

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
    /// The question, as the agent asked it.
    pub question: String,
    /// The choices it offers (`/answer 2` picks the second); empty when none.
    pub options: Vec<String>,
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
                    question,
                    options,
                    asked_at,
                    deadline,
                    ignored,
                } => Some(WaitingQuestion {
                    ticket: s.ticket.clone(),
                    role: s.role.clone(),
                    status: s.status.clone(),
                    question_id: question_id.clone(),
                    question: question.clone(),
                    options: options.clone(),
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
    /// Whether that is because the ledger could not be opened.
    pub ledger_unavailable: bool,
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

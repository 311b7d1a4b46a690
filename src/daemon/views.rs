//! What `/api/v1/state` and the dashboard both show: the runs in flight and the usage
//! per role, built from the shared state and the ledger.

use chrono::Utc;
use serde::Serialize;

use super::Shared;
use crate::agent::{AgentEvent, EVENT_TEXT_CHARS};
use crate::pipeline::LiveRun;

/// A run in flight, as `/api/v1/state` and the dashboard show it.
#[derive(Serialize)]
pub(super) struct LiveRunView {
    #[serde(flatten)]
    pub(super) run: LiveRun,
    pub(super) elapsed_seconds: i64,
    /// The agent's last event on its stream (Claude Code, Codex); for the `command`
    /// preset, or before the stream had one, the last line of its log (`kind: "output"`).
    pub(super) last_event: Option<AgentEvent>,
    /// Model turns so far: `null` until the stream reports one.
    pub(super) turns: Option<u32>,
    /// Tokens so far (input, output, cache reads and writes): `null` until the stream
    /// reports usage.
    pub(super) tokens: Option<u64>,
    /// Cost so far in US dollars: `null` while the CLI has not reported one.
    pub(super) cost_usd: Option<f64>,
    /// Tokens so far by kind.
    pub(super) usage: Option<crate::agent::Usage>,
    /// The latest rate-limit report of each limit type the agent's stream carried so far
    /// (Claude Code's `rate_limit_event`); empty before one.
    pub(super) rate_limits: Vec<crate::rate_limit::RateLimit>,
    /// Seconds since the run started, fractional (the sum of these is a part of
    /// `seconds_running`).
    #[serde(skip)]
    pub(super) running_seconds: f64,
    /// Where the log tail is served.
    pub(super) log_url: String,
}

/// Runs in flight of every pipeline (retired ones included), oldest first.
pub(super) async fn live_runs(shared: &Shared) -> Vec<LiveRunView> {
    let now = shared.now();
    let mut views = Vec::new();
    for run in shared.all_pipelines().iter().flat_map(|p| p.live_runs()) {
        let progress = run.progress.snapshot();
        let last_event = match progress.last_event {
            Some(event) => Some(event),
            None => super::logs::last_line(std::path::Path::new(&run.log_path), EVENT_TEXT_CHARS)
                .await
                .map(|(text, at)| AgentEvent {
                    kind: "output".to_string(),
                    text,
                    at,
                }),
        };
        let running = now - run.started_at;
        views.push(LiveRunView {
            elapsed_seconds: running.num_seconds(),
            running_seconds: (running.num_milliseconds() as f64 / 1000.0).max(0.0),
            rate_limits: progress.rate_limits,
            log_url: format!("/runs/{}/log", run.run_id),
            last_event,
            turns: progress.turns,
            tokens: progress.usage.map(|u| u.total_tokens()),
            cost_usd: progress.usage.and_then(|u| u.cost_usd),
            usage: progress.usage,
            run,
        });
    }
    views
}

/// Runs, tokens and cost per role since a moment.
#[derive(Serialize)]
pub(super) struct UsageSince {
    pub(super) since: chrono::DateTime<Utc>,
    pub(super) roles: Vec<crate::ledger::UsageTotal>,
}

/// Usage per role today (since 00:00 UTC) and over the last 7 days.
pub(super) fn usage(
    ledger: &dyn crate::ledger::Ledger,
    tracker: &str,
    now: chrono::DateTime<Utc>,
) -> Result<(UsageSince, UsageSince), crate::ledger::LedgerError> {
    let midnight = now
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(now);
    let week = now - chrono::Duration::days(7);
    Ok((
        UsageSince {
            since: midnight,
            roles: ledger.usage_by_role_since(tracker, midnight)?,
        },
        UsageSince {
            since: week,
            roles: ledger.usage_by_role_since(tracker, week)?,
        },
    ))
}

//! The dashboard's HTML pages, rendered on the server with minijinja (autoescaped)
//! from views whose times and numbers are already written for people.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use minijinja::Environment;
use serde::Serialize;

use super::board::{self, exact, human_duration, relative, BoardView};
use super::state::CachedBoard;
use super::views::{live_runs, usage};
use super::Shared;

/// The templates, compiled once.
fn templates() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        for (name, text) in [
            ("dashboard.html", include_str!("dashboard.html")),
            ("board.html", include_str!("board.html")),
            ("column.html", include_str!("column.html")),
            ("ticket.html", include_str!("ticket.html")),
            ("login.html", include_str!("login.html")),
            ("error.html", include_str!("error.html")),
        ] {
            // The templates are part of the binary: a syntax error is caught by the tests.
            if let Err(e) = env.add_template(name, text) {
                tracing::error!(template = name, error = %e, "dashboard template does not compile");
            }
        }
        env
    })
}

/// Render one template with `view`.
pub(super) fn render(name: &str, view: &impl Serialize) -> Result<String, String> {
    templates()
        .get_template(name)
        .and_then(|t| t.render(view))
        .map_err(|e| {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            text
        })
}

/// A time as the pages show it: relative, with the exact time for hover.
#[derive(Serialize)]
pub(super) struct When {
    ago: String,
    exact: String,
}

impl When {
    pub(super) fn of(at: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        When {
            ago: relative(at, now),
            exact: exact(at),
        }
    }
}

/// A banner at the top of the page.
#[derive(Serialize)]
struct Banner {
    kind: &'static str,
    text: String,
}

/// A live run row.
#[derive(Serialize)]
struct LiveRow {
    ticket: String,
    title: Option<String>,
    url: Option<String>,
    role: String,
    attempt: u32,
    elapsed: String,
    started: When,
    last_event: Option<(String, String, When)>,
    turns: String,
    tokens: String,
    cost: String,
    log_url: String,
}

/// A finished run row.
#[derive(Serialize)]
struct RecentRow {
    finished: When,
    ticket: String,
    title: Option<String>,
    role: String,
    outcome: String,
    reason: String,
    from: String,
    to: String,
    note: String,
}

/// A question waiting for a person's answer.
#[derive(Serialize)]
struct QuestionRow {
    ticket: String,
    title: Option<String>,
    url: Option<String>,
    role: String,
    question_id: String,
    /// The question, as the agent asked it (escaped by the template like all text).
    question: String,
    options: Vec<String>,
    asked: When,
    deadline: Option<When>,
    /// Comments that tried to answer and do not count, with why.
    ignored: Vec<String>,
}

/// One role's totals.
#[derive(Serialize, Default)]
struct TotalRow {
    role: String,
    runs_today: u32,
    tokens_today: String,
    cost_today: String,
    runs_week: u32,
    tokens_week: String,
    cost_week: String,
}

/// Everything `GET /` shows.
#[derive(Serialize)]
pub(super) struct DashboardView {
    /// A token is configured and this browser has not logged in: links need a login.
    pub(super) login_needed: bool,
    /// A token is configured and this browser logged in.
    pub(super) logged_in: bool,
    tracker: String,
    poll_seconds: u64,
    refresh_ms: u64,
    last_tick: Option<String>,
    banners: Vec<Banner>,
    board: Option<BoardView>,
    board_read: Option<When>,
    live: Vec<LiveRow>,
    questions: Vec<QuestionRow>,
    recent: Vec<RecentRow>,
    totals: Vec<TotalRow>,
    rate_limit: String,
    chart: String,
    legend: String,
    runs_24h: usize,
    week: super::week::WeekPanel,
}

pub(super) fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.2}M", n as f64 / 1_000_000.0),
    }
}

pub(super) fn cost(usd: f64, lower_bound: bool) -> String {
    format!("${usd:.2}{}", if lower_bound { "+" } else { "" })
}

/// What the dashboard shows for a figure no run reported (issue #52): never `$0.00`.
pub(super) const UNKNOWN: &str = "unknown";

/// The cost of a role's runs: `unknown` when no run's cost is known (an agent that
/// reports no usage at all, as a `command` agent, or usage without a cost or a price);
/// a lower bound (`$1.25+`) when some runs' is not.
fn total_cost(u: &crate::ledger::UsageTotal) -> String {
    let unknown = u.runs_without_cost + u.runs_without_usage;
    u.known_cost()
        .map_or(UNKNOWN.to_string(), |usd| cost(usd, unknown > 0))
}

/// The tokens of a role's runs: `unknown` when no run reported usage.
fn total_tokens(u: &crate::ledger::UsageTotal) -> String {
    if u.tokens_known() {
        tokens(u.total_tokens())
    } else {
        UNKNOWN.to_string()
    }
}

/// The board, read at most once per [`board::reuse_for`] (shared by every open page).
async fn cached_board(shared: &Shared) -> Option<Result<Arc<BoardView>, String>> {
    let pipeline = shared.pipeline()?;
    let cell = shared.status().board.clone();
    let mut cache = cell.lock().await;
    let key = Arc::as_ptr(&pipeline) as usize;
    let fresh = board::reuse_for(shared.config().poll_interval);
    if let Some(c) = cache.as_ref() {
        if c.pipeline == key && c.at.elapsed() < fresh {
            return Some(c.board.clone());
        }
    }
    let live: Vec<_> = shared
        .all_pipelines()
        .iter()
        .flat_map(|p| p.live_runs())
        .collect();
    let read = board::read(&pipeline, &live, shared.now())
        .await
        .map(Arc::new);
    if let Ok(b) = &read {
        shared.status().remember_titles(&b.titles);
    }
    *cache = Some(CachedBoard {
        at: tokio::time::Instant::now(),
        pipeline: key,
        board: read.clone(),
    });
    Some(read)
}

/// Gather the dashboard.
pub(super) async fn dashboard(shared: &Shared) -> DashboardView {
    let config = shared.config();
    let now = shared.now();
    let mut banners = Vec::new();
    let board = match cached_board(shared).await {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => {
            banners.push(Banner {
                kind: "error",
                text: format!("the board could not be read: {e}"),
            });
            None
        }
        None => None,
    };
    let titles: BTreeMap<&str, (&str, Option<&str>)> = board
        .iter()
        .flat_map(|b| b.columns.iter().chain(b.other.iter()))
        .flat_map(|c| c.tickets.iter())
        .map(|t| (t.id.as_str(), (t.title.as_str(), t.url.as_deref())))
        .collect();
    // Tickets that left the columns (done, closed, gone): the title last seen.
    let seen_titles = shared.status().titles.clone();
    let live = live_runs(shared)
        .await
        .into_iter()
        .map(|v| {
            let (title, url) = titles
                .get(v.run.ticket.as_str())
                .map(|(t, u)| (Some(t.to_string()), u.map(str::to_string)))
                .unwrap_or((None, None));
            LiveRow {
                title,
                url,
                role: v.run.role.clone(),
                attempt: v.run.attempt,
                elapsed: human_duration(v.elapsed_seconds),
                started: When::of(v.run.started_at, now),
                last_event: v
                    .last_event
                    .map(|e| (e.kind.to_string(), e.text, When::of(e.at, now))),
                turns: v.turns.map_or("–".to_string(), |t| t.to_string()),
                tokens: v.tokens.map_or("–".to_string(), tokens),
                cost: v.cost_usd.map_or("–".to_string(), |c| cost(c, false)),
                log_url: v.log_url,
                ticket: v.run.ticket,
            }
        })
        .collect();

    let (last_tick, not_ready, config_error, shutting_down, questions) = {
        let status = shared.status();
        let questions = status
            .last_tick
            .iter()
            .flat_map(|t| t.questions.iter())
            .map(|q| {
                let (title, url) = match titles.get(q.ticket.as_str()) {
                    Some((t, u)) => (Some(t.to_string()), u.map(str::to_string)),
                    None => (seen_titles.get(&q.ticket).cloned(), None),
                };
                QuestionRow {
                    ticket: q.ticket.clone(),
                    title,
                    url,
                    role: q.role.clone(),
                    question_id: q.question_id.clone(),
                    question: q.question.clone(),
                    options: q.options.clone(),
                    asked: When::of(q.asked_at, now),
                    deadline: q.deadline.map(|d| When::of(d, now)),
                    ignored: q.ignored.clone(),
                }
            })
            .collect::<Vec<_>>();
        let last_tick = status.last_tick.as_ref().map(|t| {
            if t.ok {
                format!(
                    "last tick {} ({} started, {} waiting)",
                    relative(t.started_at, now),
                    t.runs_started,
                    t.skipped
                )
            } else {
                format!("last tick {} failed", relative(t.started_at, now))
            }
        });
        if let Some(t) = status.last_tick.as_ref().filter(|t| !t.ok) {
            banners.push(Banner {
                kind: "error",
                text: format!(
                    "the last tick failed ({}): {}",
                    exact(t.started_at),
                    t.error.clone().unwrap_or_default()
                ),
            });
        }
        (
            last_tick,
            status.not_ready.clone(),
            status.config_error.clone(),
            status.shutting_down,
            questions,
        )
    };
    if let Some(e) = config_error {
        banners.insert(
            0,
            Banner {
                kind: "error",
                text: format!(
                    "the config on disk is invalid; still running the last good one. {e}"
                ),
            },
        );
    }
    if let Some(reason) = not_ready {
        banners.push(Banner {
            kind: "warn",
            text: format!("the daemon is not ready: {reason}"),
        });
    } else if shared.pipeline().is_none() {
        banners.push(Banner {
            kind: "warn",
            text: "the daemon is not ready: starting".to_string(),
        });
    }
    if shutting_down {
        banners.push(Banner {
            kind: "warn",
            text: "shutting down: no new claims".to_string(),
        });
    }

    let mut tracker = config.tracker.name();
    let mut totals = Vec::new();
    let mut rate_limit = "not reported by this tracker".to_string();
    let mut chart_hours = svg_hours(&[], now);
    let mut runs_24h = 0;
    let mut recent = Vec::new();
    let mut seven_days = super::week::WeekPanel::default();
    if let Some(pipeline) = shared.pipeline() {
        // Ledger rows are keyed by the tracker's own name.
        tracker = pipeline.tracker().name().to_string();
        if let Some(left) = pipeline.tracker().rate_limit_remaining() {
            rate_limit = format!("{left} {} left", pipeline.tracker().rate_limit_unit());
        }
        let ledger = pipeline.ledger();
        match recent_rows(
            shared,
            ledger.as_ref(),
            &tracker,
            &titles,
            &seen_titles,
            now,
        ) {
            Ok(rows) => recent = rows,
            Err(e) => banners.push(Banner {
                kind: "error",
                text: format!("run history could not be read: {e}"),
            }),
        }
        match usage(ledger.as_ref(), &tracker, now) {
            Ok((today, week)) => {
                let mut rows: BTreeMap<String, TotalRow> = BTreeMap::new();
                for u in &week.roles {
                    let row = rows.entry(u.role.clone()).or_default();
                    row.role = u.role.clone();
                    row.runs_week = u.runs;
                    row.tokens_week = total_tokens(u);
                    row.cost_week = total_cost(u);
                    row.tokens_today = "0".to_string();
                    row.cost_today = cost(0.0, false);
                }
                for u in &today.roles {
                    let row = rows.entry(u.role.clone()).or_default();
                    row.role = u.role.clone();
                    row.runs_today = u.runs;
                    row.tokens_today = total_tokens(u);
                    row.cost_today = total_cost(u);
                }
                totals = rows.into_values().collect();
            }
            Err(e) => banners.push(Banner {
                kind: "error",
                text: format!("usage could not be read: {e}"),
            }),
        }
        let config = pipeline.config();
        let last_role = config.stages.last().map_or("", |s| s.role.as_str());
        let since = now - chrono::Duration::days(super::week::CHART_DAYS);
        let by = crate::stats::GroupBy::Stage;
        match super::week::week(ledger.as_ref(), &tracker, config, since, by, now) {
            Ok(w) => seven_days = super::week::WeekPanel::of(&w, last_role),
            Err(e) => banners.push(Banner {
                kind: "error",
                text: format!("run history could not be read: {e}"),
            }),
        }
        match ledger.runs_since(&tracker, now - chrono::Duration::hours(24)) {
            Ok(runs) => {
                runs_24h = runs.len();
                chart_hours = svg_hours(&runs, now);
            }
            Err(e) => banners.push(Banner {
                kind: "error",
                text: format!("run history could not be read: {e}"),
            }),
        }
    }
    let refresh = board::reuse_for(config.poll_interval).min(std::time::Duration::from_secs(5));
    DashboardView {
        login_needed: false,
        logged_in: false,
        tracker,
        poll_seconds: config.poll_interval.as_secs(),
        refresh_ms: refresh.as_millis() as u64,
        last_tick,
        banners,
        board_read: board.as_ref().map(|b| When::of(b.read_at, now)),
        board: board.map(|b| (*b).clone()),
        live,
        questions,
        recent,
        totals,
        rate_limit,
        chart: super::svg::chart(&chart_hours),
        legend: super::svg::legend(),
        runs_24h,
        week: seven_days,
    }
}

/// How many finished runs the dashboard lists.
const RECENT_ROWS: usize = 20;

/// The last finished runs of `tracker`, newest first, from the ledger's run history (so
/// a restarted daemon, and runs of cron ticks or other hosts, show too): where each went
/// from the outbox entry of its outcome, the note from this daemon's memory when it saw
/// the run end, the title from the board (else the one the run recorded when it started).
fn recent_rows(
    shared: &Shared,
    ledger: &dyn crate::ledger::Ledger,
    tracker: &str,
    titles: &BTreeMap<&str, (&str, Option<&str>)>,
    seen_titles: &BTreeMap<String, String>,
    now: DateTime<Utc>,
) -> Result<Vec<RecentRow>, crate::ledger::LedgerError> {
    use crate::ledger::{OutboxState, RunPhase, Scope};
    // Newest by start; a few more than shown, as runs still going are left out.
    let mut runs: Vec<_> = ledger
        .recent_runs(Scope::Tracker(tracker), RECENT_ROWS * 3)?
        .into_iter()
        .filter(|r| r.phase != RunPhase::Running)
        .filter_map(|r| r.finished_at.map(|at| (at, r)))
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.0));
    runs.truncate(RECENT_ROWS);
    let notes: BTreeMap<(String, String, u32), String> = shared
        .status()
        .recent
        .iter()
        .filter_map(|f| {
            let l = &f.line;
            // A write-back that is `done` is what the "from → to" column says already.
            let writeback = l.writeback.clone().filter(|w| w != "done");
            let note = l.note.clone().or(writeback)?;
            Some(((l.ticket.clone(), l.role.clone(), l.attempt), note))
        })
        .collect();
    let mut rows = Vec::with_capacity(runs.len());
    for (finished_at, r) in runs {
        let key = crate::block::idempotency_key(
            tracker,
            &r.key.ticket_id,
            &r.key.role,
            &r.stage,
            r.stage_attempt,
        );
        let entry = match r.phase {
            RunPhase::Finished => ledger.outbox_get(&key)?,
            _ => None,
        };
        let (to, state_note) = match &entry {
            Some(e) if e.state == OutboxState::Done => (e.to_status.clone(), None),
            Some(e) if e.state == OutboxState::Dropped => (
                String::new(),
                Some(format!(
                    "not written back: {}",
                    e.last_error.clone().unwrap_or_default()
                )),
            ),
            Some(e) => (
                String::new(),
                Some(format!("write-back to {} pending", e.to_status)),
            ),
            None => (String::new(), None),
        };
        let remembered = notes
            .get(&(r.key.ticket_id.clone(), r.key.role.clone(), r.stage_attempt))
            .cloned();
        rows.push(RecentRow {
            finished: When::of(finished_at, now),
            title: titles
                .get(r.key.ticket_id.as_str())
                .map(|(t, _)| t.to_string())
                .or(r.title)
                .or_else(|| seen_titles.get(&r.key.ticket_id).cloned()),
            ticket: r.key.ticket_id,
            role: r.key.role,
            outcome: r.outcome.unwrap_or_else(|| "cancelled".to_string()),
            reason: r.reason_code.unwrap_or_default(),
            from: r.stage,
            to,
            note: remembered.or(state_note).unwrap_or_default(),
        });
    }
    Ok(rows)
}

fn svg_hours(
    runs: &[crate::ledger::RunRecord],
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, super::svg::HourCounts)> {
    super::svg::runs_per_hour(runs, now)
}

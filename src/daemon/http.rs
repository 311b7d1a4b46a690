//! The daemon's HTTP surface: health, state, refresh, metrics, the GitHub, GitLab,
//! Gitea, Linear and Jira webhooks, the dashboard pages and run logs (`docs/api.md`).
//! Every API error is JSON `{"error": {"code", "message"}}` ([`ApiError`]); a ticket
//! page's error is an HTML page.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use serde::Serialize;

use super::api_error::{no_pipeline, unauthorized, ApiError};
use super::metrics::{render_metrics, Gauges};
use super::state::{FinishedRun, TickSummary};
use super::views::{live_runs, usage, LiveRunView, UsageSince};
use super::Shared;
use crate::config::Config;
use crate::ledger::{Hold, Ledger, LedgerError, RetryEntry, RunRecord, Scope};
use crate::rate_limit::AgentRateLimits;
use crate::tracker::webhook::Vendor;

/// The routes of the HTTP surface.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new();
    for vendor in Vendor::ALL {
        let hook = move |State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes| async move {
            webhook(vendor, &shared, &headers, &body).await
        };
        router = router.route(&format!("/hooks/{}", vendor.path()), post(hook));
    }
    router
        .route("/", get(dashboard))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/state", get(state))
        .route("/api/v1/refresh", post(refresh))
        .route("/api/v1/stats", get(stats))
        .route("/metrics", get(metrics))
        .route("/api/v1/tickets/{id}", get(ticket))
        .route("/tickets/{id}", get(ticket_page))
        .route("/runs/{run_id}/log", get(super::logs::run_log))
        .route("/login", get(super::login::form).post(super::login::login))
        .route("/logout", post(super::login::logout))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such page") })
        .with_state(shared)
}

/// `?part=body`: only the part of the page that refreshes.
#[derive(serde::Deserialize, Default)]
struct PageQuery {
    part: Option<String>,
}

/// `GET /`: the dashboard, or with `?part=body` the part its script swaps in.
async fn dashboard(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let mut view = super::pages::dashboard(&shared).await;
    if super::login::token_required(&shared) {
        let allowed = super::login::may_view(&shared, &headers);
        view.login_needed = !allowed;
        view.logged_in = allowed;
    }
    let html = if q.part.as_deref() == Some("body") {
        super::pages::render("board.html", &view)
    } else {
        super::pages::render("dashboard.html", &view)
    };
    match html {
        Ok(html) => Html(html).into_response(),
        Err(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "render", e).into_response(),
    }
}

/// `GET /tickets/{id}`: one ticket's page.
async fn ticket_page(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !super::login::may_view(&shared, &headers) {
        return super::login::refused(&headers, &format!("/tickets/{id}"));
    }
    let view = match super::ticket::ticket_view(&shared, &id).await {
        Ok(v) => v,
        Err(e) => return e.into_page(),
    };
    let page = super::ticket_page::ticket(&shared, &view);
    match super::pages::render("ticket.html", &page) {
        Ok(html) => Html(html).into_response(),
        Err(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "render", e).into_page(),
    }
}

/// 401: the variable holding a webhook secret is not set.
fn secret_unavailable() -> Response {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "secret_unavailable",
        "webhook secret not available",
    )
    .into_response()
}

/// Ready when a pipeline is built, the ledger answers, and a tick succeeded within
/// three poll intervals; otherwise 503 with the reason.
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let unavailable = |reason: String| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", reason).into_response()
    };
    let Some(pipeline) = shared.pipeline() else {
        let reason = shared
            .status()
            .not_ready
            .clone()
            .unwrap_or_else(|| "starting".to_string());
        return unavailable(format!("not ready: {reason}"));
    };
    if let Err(err) = pipeline.ledger().ping() {
        return unavailable(format!("not ready: {err}"));
    }
    let window = shared.config().poll_interval * 3;
    let (last_ok, last_error) = {
        let status = shared.status();
        let error = status
            .last_tick
            .as_ref()
            .filter(|t| !t.ok)
            .and_then(|t| t.error.clone());
        (status.last_ok_at, error)
    };
    let fresh =
        last_ok.is_some_and(|at| (shared.now() - at).to_std().unwrap_or_default() <= window);
    if fresh {
        (StatusCode::OK, "ready\n").into_response()
    } else if let Some(error) = last_error {
        unavailable(format!("not ready: the last tick failed: {error}"))
    } else {
        unavailable("not ready: no successful tick within three poll intervals".to_string())
    }
}

/// The config as `/api/v1/state` shows it.
#[derive(Serialize)]
struct ConfigSummary {
    path: String,
    tracker: String,
    poll_interval_seconds: u64,
    shutdown_grace_seconds: u64,
    max_in_flight: u32,
    stages: Vec<StageSummary>,
}

#[derive(Serialize)]
struct StageSummary {
    role: String,
    claim_status: String,
    in_progress_status: Option<String>,
    success_status: Option<String>,
    failure_status: Option<String>,
}

impl ConfigSummary {
    fn of(path: &std::path::Path, config: &Config) -> Self {
        ConfigSummary {
            path: path.display().to_string(),
            tracker: config.tracker.name(),
            poll_interval_seconds: config.poll_interval.as_secs(),
            shutdown_grace_seconds: config.shutdown_grace.as_secs(),
            max_in_flight: config.concurrency.max_in_flight,
            stages: config
                .stages
                .iter()
                .map(|s| StageSummary {
                    role: s.role.clone(),
                    claim_status: s.claim_status.clone(),
                    in_progress_status: s.in_progress_status.clone(),
                    success_status: s.success_status.clone(),
                    failure_status: s.failure_status.clone(),
                })
                .collect(),
        }
    }
}

/// `GET /api/v1/state`.
#[derive(Serialize)]
struct StateView {
    started_at: chrono::DateTime<Utc>,
    shutting_down: bool,
    config: ConfigSummary,
    config_error: Option<String>,
    not_ready: Option<String>,
    last_tick: Option<TickSummary>,
    last_ok_tick_at: Option<chrono::DateTime<Utc>>,
    live_runs: Vec<LiveRunView>,
    /// Seconds agents have run: the runs this daemon saw end plus the runs going now.
    seconds_running: f64,
    retry_queue: Vec<RetryEntry>,
    held: Vec<Hold>,
    /// Questions agents asked on tickets, waiting for a person's answer (the last
    /// tick's view).
    waiting_questions: Vec<super::state::WaitingQuestion>,
    recent_runs: Vec<FinishedRun>,
    ledger_runs: Vec<RunRecord>,
    usage_today: Option<UsageSince>,
    usage_7_days: Option<UsageSince>,
    /// Agents' rate limits: the runs of the last 7 days and the runs going now, added up.
    agent_rate_limits: Vec<AgentRateLimits>,
    rate_limit_remaining: Option<u64>,
    errors: Vec<String>,
    /// Set (with a 503) when the ledger cannot be read: `{"code", "message"}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Value>,
}

/// What `/api/v1/state` reads from the ledger, off the async threads.
#[derive(Default)]
struct LedgerReads {
    retry_queue: Vec<RetryEntry>,
    held: Vec<Hold>,
    ledger_runs: Vec<RunRecord>,
    usage_today: Option<UsageSince>,
    usage_7_days: Option<UsageSince>,
    /// Run history of the last 7 days, for the agents' rate limits.
    week_runs: Vec<RunRecord>,
    /// The reads that failed while the ledger answered.
    errors: Vec<String>,
}

impl LedgerReads {
    /// Read what the state shows of tracker `own`; `Err` when the ledger does not answer
    /// at all (its `ping` fails), the reads that fail after it are noted in `errors`.
    fn read(
        ledger: &dyn Ledger,
        own: &str,
        now: chrono::DateTime<Utc>,
    ) -> Result<LedgerReads, LedgerError> {
        ledger.ping()?;
        let mut errors = Vec::new();
        let scope = Scope::Tracker(own);
        let (usage_today, usage_7_days) = match usage(ledger, own, now) {
            Ok((today, week)) => (Some(today), Some(week)),
            Err(e) => {
                errors.push(format!("usage: {e}"));
                (None, None)
            }
        };
        let week = now - chrono::Duration::days(7);
        Ok(LedgerReads {
            retry_queue: or_note(&mut errors, "retries", ledger.retries(scope)),
            held: or_note(&mut errors, "holds", ledger.holds(scope)),
            ledger_runs: or_note(&mut errors, "recent runs", ledger.recent_runs(scope, 20)),
            week_runs: or_note(&mut errors, "rate limits", ledger.runs_since(own, week)),
            usage_today,
            usage_7_days,
            errors,
        })
    }
}

/// `GET /api/v1/state`: what the daemon knows, with what the ledger says. The ledger is
/// read off the async threads and waited for at most `state_timeout`: past it (a lock
/// held), the answer leaves the ledger's parts out and says so in `errors`. A ledger that
/// cannot be read (removed, corrupt, its server down) is a 503 with the rest of the
/// state, `errors` and the `error` envelope.
async fn state(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.config();
    let config = &*config;
    let now = shared.now();
    let mut errors = Vec::new();
    let mut unavailable = None;
    let mut rate_limit_remaining = None;
    let mut reads = LedgerReads::default();
    match shared.pipeline() {
        Some(pipeline) => {
            rate_limit_remaining = pipeline.tracker().rate_limit_remaining();
            let ledger = pipeline.ledger().clone();
            // Everything the pipeline writes is keyed by its tracker's own name (the
            // config's name for it in production; a test's stand-in tracker has its own).
            let own = pipeline.tracker().name().to_string();
            let read =
                tokio::task::spawn_blocking(move || LedgerReads::read(ledger.as_ref(), &own, now));
            match tokio::time::timeout(shared.state_timeout, read).await {
                Ok(Ok(Ok(read))) => reads = read,
                Ok(Ok(Err(err))) => {
                    errors.push(format!("ledger: {err}"));
                    unavailable = Some(format!("the ledger cannot be read: {err}"));
                }
                Ok(Err(panicked)) => errors.push(format!("ledger: the read failed: {panicked}")),
                Err(_) => errors.push(format!(
                    "ledger: timeout: no answer within {:.1}s (a lock held, or the ledger busy); \
                     retry_queue, held, ledger_runs, usage_today, usage_7_days and the rate \
                     limits of finished runs are left out of this answer",
                    shared.state_timeout.as_secs_f64()
                )),
            }
        }
        None => {
            let status = shared.status();
            let reason = status.not_ready.clone().unwrap_or_default();
            errors.push(format!("no pipeline yet: {reason}"));
            if status.ledger_unavailable {
                unavailable = Some(format!("the ledger cannot be opened: {reason}"));
            }
        }
    }
    errors.append(&mut reads.errors);
    let live_runs = live_runs(&shared).await;
    let agent_rate_limits = agent_rate_limits(&reads.week_runs, &live_runs);
    let status = shared.status();
    let seconds_running =
        status.counters.run_sum + live_runs.iter().map(|r| r.running_seconds).sum::<f64>();
    let view = StateView {
        started_at: shared.started_at,
        shutting_down: status.shutting_down,
        config: ConfigSummary::of(&shared.config_path, config),
        config_error: status.config_error.clone(),
        not_ready: status.not_ready.clone(),
        last_tick: status.last_tick.clone(),
        last_ok_tick_at: status.last_ok_at,
        live_runs,
        seconds_running,
        retry_queue: reads.retry_queue,
        held: reads.held,
        waiting_questions: status
            .last_tick
            .as_ref()
            .map(|t| t.questions.clone())
            .unwrap_or_default(),
        recent_runs: status.recent.iter().cloned().collect(),
        ledger_runs: reads.ledger_runs,
        usage_today: reads.usage_today,
        usage_7_days: reads.usage_7_days,
        agent_rate_limits,
        rate_limit_remaining,
        errors,
        error: unavailable
            .as_ref()
            .map(|message| serde_json::json!({"code": "ledger_unavailable", "message": message})),
    };
    let code = if unavailable.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(view)).into_response()
}

/// The agents' rate limits: the reports kept on the last week's run history and those of
/// the runs going now (whose history row gets them only when they end), added up by
/// [`crate::rate_limit::aggregate`].
fn agent_rate_limits(week_runs: &[RunRecord], live: &[LiveRunView]) -> Vec<AgentRateLimits> {
    let agent_of = |run_id: &str| {
        week_runs
            .iter()
            .find(|r| r.run_id == run_id)
            .and_then(|r| r.agent.as_deref())
            .unwrap_or("unknown")
    };
    let recorded = week_runs.iter().flat_map(|r| {
        let agent = r.agent.as_deref().unwrap_or("unknown");
        r.rate_limits
            .iter()
            .map(move |l| (agent, r.run_id.as_str(), l))
    });
    let going = live.iter().flat_map(|v| {
        let agent = agent_of(&v.run.run_id);
        v.rate_limits
            .iter()
            .map(move |l| (agent, v.run.run_id.as_str(), l))
    });
    crate::rate_limit::aggregate(recorded.chain(going))
}

/// `/api/v1/stats` parameters: as `sortie stats --since --by`.
#[derive(serde::Deserialize, Default)]
struct StatsQuery {
    since: Option<String>,
    by: Option<String>,
}

/// `GET /api/v1/stats`: what `sortie stats --json` prints (default: the last 7 days
/// by stage), with the dashboard chart's days.
async fn stats(State(shared): State<Arc<Shared>>, Query(q): Query<StatsQuery>) -> Response {
    let Some(pipeline) = shared.pipeline() else {
        return no_pipeline(&shared);
    };
    let now = shared.now();
    let since = match crate::stats::parse_since(q.since.as_deref().unwrap_or("7d"), now) {
        Ok(since) => since,
        Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e).into_response(),
    };
    let by = match q.by.as_deref().unwrap_or("stage").parse() {
        Ok(by) => by,
        Err(e) => return ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e).into_response(),
    };
    let tracker = pipeline.tracker().name().to_string();
    let ledger = pipeline.ledger();
    match super::week::week(ledger.as_ref(), &tracker, pipeline.config(), since, by, now) {
        Ok(week) => Json(week).into_response(),
        Err(e) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "ledger", e.to_string()).into_response()
        }
    }
}

/// The rows of `result`, or none with the error noted.
fn or_note<T>(
    errors: &mut Vec<String>,
    what: &str,
    result: Result<Vec<T>, crate::ledger::LedgerError>,
) -> Vec<T> {
    result.unwrap_or_else(|e| {
        errors.push(format!("{what}: {e}"));
        Vec::new()
    })
}

async fn refresh(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !super::login::may_act(&shared, &headers) {
        return unauthorized();
    }
    let coalesced = shared.request_tick();
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"queued": true, "coalesced": coalesced})),
    )
        .into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let Some(pipeline) = shared.pipeline() else {
        return no_pipeline(&shared);
    };
    let config = pipeline.config();
    let tracker = config.tracker.name();
    let ledger = pipeline.ledger();
    let now = shared.now();
    let gauges = Gauges {
        runs_in_flight: shared
            .all_pipelines()
            .iter()
            .map(|p| p.live_runs().len())
            .sum(),
        claims_held: ledger
            .claims(Scope::Tracker(&tracker))
            .map(|c| c.iter().filter(|c| c.lease_expires_at > now).count())
            .unwrap_or(0),
        retries_queued: ledger
            .retries(Scope::Tracker(&tracker))
            .map(|r| r.len())
            .unwrap_or(0),
        held_tickets: ledger
            .holds(Scope::Tracker(&tracker))
            .map(|h| h.len())
            .unwrap_or(0),
        hook_failures: ledger.hook_failures(10_000).map(|h| h.len()).unwrap_or(0),
        config_error: shared.status().config_error.is_some(),
        tracker_requests: crate::tracker::counting::request_counts()
            .into_iter()
            .map(|((kind, result), n)| ((kind.to_string(), result.to_string()), n))
            .collect(),
        rate_limit_remaining: pipeline.tracker().rate_limit_remaining(),
        agent_tokens_in: 0,
        agent_tokens_out: 0,
        agent_cost_usd: 0.0,
        agent_runs_cost_unknown: 0,
        day_budget: None,
        stages_7_days: Vec::new(),
    };
    let mut gauges = gauges;
    if let Ok(usage) = ledger.usage_totals(&tracker) {
        for u in usage {
            gauges.agent_tokens_in += u.tokens_in;
            gauges.agent_tokens_out += u.tokens_out;
            gauges.agent_cost_usd += u.cost_usd;
            gauges.agent_runs_cost_unknown += u64::from(u.runs_without_cost);
        }
    }
    if let Some(limit) = config.budgets.max_cost_usd_per_day {
        let day = crate::budget::day_window(now, config.budgets.timezone);
        if let Ok(spent) = crate::budget::day_spent(&**ledger, &tracker, day.start) {
            gauges.day_budget = Some((spent, limit));
        }
    }
    let since = now - chrono::Duration::days(super::week::CHART_DAYS);
    let by = crate::stats::GroupBy::Stage;
    // Run history is keyed by the tracker's own name.
    let own = pipeline.tracker().name();
    if let Ok(week) = super::week::week(&**ledger, own, config, since, by, now) {
        gauges.stages_7_days = week.stats.groups;
    }
    let body = render_metrics(&shared.status(), &gauges);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `POST /hooks/{vendor}`: a delivery the vendor's check accepts (its adapter's
/// `webhook::verify`, with the secret in the variable its `http.*_webhook_secret_env`
/// names) triggers a tick; its payload is not otherwise read. 404 when the key is not
/// configured, 401 when the variable is unset or the delivery is refused.
async fn webhook(vendor: Vendor, shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Response {
    let Some(var) = vendor.secret_env(&shared.config().http).map(str::to_string) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_configured",
            format!("{} is not configured", vendor.secret_key()),
        )
        .into_response();
    };
    let Ok(secret) = std::env::var(&var) else {
        tracing::error!(var = %var, vendor = vendor.display(), "the webhook secret variable is not set");
        return secret_unavailable();
    };
    let header = headers.get(vendor.header()).and_then(|v| v.to_str().ok());
    if let Err(why) = vendor.verify(&secret, header, body, Utc::now()) {
        return ApiError::new(StatusCode::UNAUTHORIZED, "bad_signature", why).into_response();
    }
    shared.request_tick();
    (StatusCode::ACCEPTED, "tick scheduled\n").into_response()
}

/// Why a ticket is or is not eligible now: a dry-run tick (nothing claimed, run or
/// written), filtered to the ticket, with its claims and outcome blocks.
async fn ticket(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !super::login::may_view(&shared, &headers) {
        return unauthorized();
    }
    match super::ticket::ticket_view(&shared, &id).await {
        Ok(view) => Json(view).into_response(),
        Err(e) => e.into_response(),
    }
}

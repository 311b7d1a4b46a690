//! The daemon's HTTP surface: health, state, refresh, metrics, GitHub/GitLab/Gitea webhooks and
//! the dashboard (`docs/api.md`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

use super::state::{render_metrics, FinishedRun, Gauges, TickSummary};
use super::Shared;
use crate::config::Config;
use crate::ledger::{Hold, RetryEntry, RunRecord, Scope};
use crate::pipeline::LiveRun;

/// The dashboard page; it polls `/api/v1/state`.
const DASHBOARD: &str = include_str!("dashboard.html");

/// The routes of the HTTP surface.
pub(super) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/state", get(state))
        .route("/api/v1/refresh", post(refresh))
        .route("/metrics", get(metrics))
        .route("/hooks/github", post(github))
        .route("/hooks/gitlab", post(gitlab))
        .route("/hooks/gitea", post(gitea))
        .route("/hooks/linear", post(linear))
        .route("/hooks/jira", post(jira))
        .route("/api/v1/tickets/{id}", get(ticket))
        .with_state(shared)
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

/// Ready when a pipeline is built, the ledger answers, and a tick succeeded within
/// three poll intervals; otherwise 503 with the reason.
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let unavailable =
        |reason: String| (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response();
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

/// 503 for endpoints that need a pipeline before one could be built.
fn no_pipeline(shared: &Shared) -> Response {
    let reason = shared
        .status()
        .not_ready
        .clone()
        .unwrap_or_else(|| "starting".to_string());
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("no pipeline yet: {reason}\n"),
    )
        .into_response()
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

#[derive(Serialize)]
struct LiveRunView {
    #[serde(flatten)]
    run: LiveRun,
    elapsed_seconds: i64,
}

/// `GET /api/v1/state`.
#[derive(Serialize)]
struct StateView {
    started_at: chrono::DateTime<Utc>,
    shutting_down: bool,
    config: ConfigSummary,
    config_error: Option<String>,
    last_tick: Option<TickSummary>,
    last_ok_tick_at: Option<chrono::DateTime<Utc>>,
    live_runs: Vec<LiveRunView>,
    retry_queue: Vec<RetryEntry>,
    held: Vec<Hold>,
    recent_runs: Vec<FinishedRun>,
    ledger_runs: Vec<RunRecord>,
    errors: Vec<String>,
}

async fn state(State(shared): State<Arc<Shared>>) -> Json<StateView> {
    let config = shared.config();
    let config = &*config;
    let tracker = config.tracker.name();
    let mut errors = Vec::new();
    let scope = Scope::Tracker(&tracker);
    let (retry_queue, held, ledger_runs): (Vec<RetryEntry>, Vec<Hold>, Vec<RunRecord>) =
        match shared.pipeline() {
            Some(pipeline) => {
                let ledger = pipeline.ledger();
                (
                    or_note(&mut errors, "retries", ledger.retries(scope)),
                    or_note(&mut errors, "holds", ledger.holds(scope)),
                    or_note(&mut errors, "recent runs", ledger.recent_runs(scope, 20)),
                )
            }
            None => {
                let reason = shared.status().not_ready.clone().unwrap_or_default();
                errors.push(format!("no pipeline yet: {reason}"));
                (Vec::new(), Vec::new(), Vec::new())
            }
        };
    let now = shared.now();
    let live_runs = shared
        .all_pipelines()
        .iter()
        .flat_map(|p| p.live_runs())
        .map(|run| LiveRunView {
            elapsed_seconds: (now - run.started_at).num_seconds(),
            run,
        })
        .collect();
    let status = shared.status();
    Json(StateView {
        started_at: shared.started_at,
        shutting_down: status.shutting_down,
        config: ConfigSummary::of(&shared.config_path, config),
        config_error: status.config_error.clone(),
        last_tick: status.last_tick.clone(),
        last_ok_tick_at: status.last_ok_at,
        live_runs,
        retry_queue,
        held,
        recent_runs: status.recent.iter().cloned().collect(),
        ledger_runs,
        errors,
    })
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

/// Whether a POST may go on: no token configured, or the right bearer token.
fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(var) = shared.config().http.token_env.clone() else {
        return true;
    };
    let Ok(token) = std::env::var(&var) else {
        return false;
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn refresh(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return (StatusCode::UNAUTHORIZED, "bearer token required\n").into_response();
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
    };
    let mut gauges = gauges;
    if let Ok(usage) = ledger.usage_totals(&tracker) {
        for u in usage {
            gauges.agent_tokens_in += u.tokens_in;
            gauges.agent_tokens_out += u.tokens_out;
            gauges.agent_cost_usd += u.cost_usd;
        }
    }
    let body = render_metrics(&shared.status(), &gauges);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `POST /hooks/github`: a signed delivery triggers a tick; its payload is not read.
async fn github(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(var) = shared.config().http.github_webhook_secret_env.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "http.github_webhook_secret_env is not configured\n",
        )
            .into_response();
    };
    let Ok(secret) = std::env::var(&var) else {
        tracing::error!(var = %var, "the GitHub webhook secret variable is not set");
        return (StatusCode::UNAUTHORIZED, "webhook secret not available\n").into_response();
    };
    let signature = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("sha256="))
        .and_then(|v| hex::decode(v).ok());
    let Some(signature) = signature else {
        return (
            StatusCode::UNAUTHORIZED,
            "missing or malformed X-Hub-Signature-256\n",
        )
            .into_response();
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "bad secret\n").into_response();
    };
    mac.update(&body);
    if mac.verify_slice(&signature).is_err() {
        return (StatusCode::UNAUTHORIZED, "signature does not match\n").into_response();
    }
    shared.request_tick();
    (StatusCode::ACCEPTED, "tick scheduled\n").into_response()
}

/// `POST /hooks/gitlab`: a delivery with the right `X-Gitlab-Token` triggers a tick.
async fn gitlab(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let var = shared.config().http.gitlab_webhook_secret_env.clone();
    forge_hook(&shared, var, "http.gitlab_webhook_secret_env", |secret| {
        let token = headers.get("x-gitlab-token").and_then(|v| v.to_str().ok());
        crate::tracker::forge_webhook::verify_gitlab(secret, token)
    })
}

/// `POST /hooks/gitea`: a delivery signed in `X-Gitea-Signature` triggers a tick.
async fn gitea(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let var = shared.config().http.gitea_webhook_secret_env.clone();
    forge_hook(&shared, var, "http.gitea_webhook_secret_env", |secret| {
        let sig = headers
            .get("x-gitea-signature")
            .and_then(|v| v.to_str().ok());
        crate::tracker::forge_webhook::verify_gitea(secret, sig, &body)
    })
}

/// The secret in the variable `var` names, `verify` on the delivery, then a tick.
fn forge_hook(
    shared: &Shared,
    var: Option<String>,
    key: &str,
    verify: impl FnOnce(&str) -> Result<(), crate::tracker::forge_webhook::WebhookError>,
) -> Response {
    let Some(var) = var else {
        return (StatusCode::NOT_FOUND, format!("{key} is not configured\n")).into_response();
    };
    let Ok(secret) = std::env::var(&var) else {
        tracing::error!(var = %var, "the webhook secret variable is not set");
        return (StatusCode::UNAUTHORIZED, "webhook secret not available\n").into_response();
    };
    if let Err(err) = verify(&secret) {
        return (StatusCode::UNAUTHORIZED, format!("{err}\n")).into_response();
    }
    shared.request_tick();
    (StatusCode::ACCEPTED, "tick scheduled\n").into_response()
}

/// `POST /hooks/linear`: a delivery signed with the Linear webhook secret and at most a
/// minute old triggers a tick; its payload is not otherwise read.
async fn linear(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(var) = shared.config().http.linear_webhook_secret_env.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "http.linear_webhook_secret_env is not configured\n",
        )
            .into_response();
    };
    let Ok(secret) = std::env::var(&var) else {
        tracing::error!(var = %var, "the Linear webhook secret variable is not set");
        return (StatusCode::UNAUTHORIZED, "webhook secret not available\n").into_response();
    };
    let signature = headers
        .get("linear-signature")
        .and_then(|v| v.to_str().ok());
    if let Err(err) =
        crate::tracker::linear::webhook::verify(secret.as_bytes(), signature, &body, Utc::now())
    {
        return (StatusCode::UNAUTHORIZED, format!("{err}\n")).into_response();
    }
    shared.request_tick();
    (StatusCode::ACCEPTED, "tick scheduled\n").into_response()
}

/// `POST /hooks/jira`: a delivery signed with `X-Hub-Signature: sha256=...` triggers a
/// tick; its payload is not read.
async fn jira(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let config = shared.config().http.jira_webhook_secret_env.clone();
    let Some(var) = config else {
        let text = "http.jira_webhook_secret_env is not configured\n";
        return (StatusCode::NOT_FOUND, text).into_response();
    };
    let Ok(secret) = std::env::var(&var) else {
        tracing::error!(var = %var, "the Jira webhook secret variable is not set");
        return (StatusCode::UNAUTHORIZED, "webhook secret not available\n").into_response();
    };
    let signature = headers.get("x-hub-signature").and_then(|v| v.to_str().ok());
    if let Err(e) = crate::tracker::jira::webhook::verify(secret.as_bytes(), signature, &body) {
        return (StatusCode::UNAUTHORIZED, format!("{e}\n")).into_response();
    }
    shared.request_tick();
    (StatusCode::ACCEPTED, "tick scheduled\n").into_response()
}

/// One outcome block on a ticket, with the comment that carries it.
#[derive(Serialize)]
struct BlockView {
    author: String,
    created_at: chrono::DateTime<Utc>,
    #[serde(flatten)]
    block: crate::block::ParsedBlock,
}

/// `GET /api/v1/tickets/{id}`.
#[derive(Serialize)]
struct TicketView {
    ticket: crate::tracker::Ticket,
    /// What a tick now would do with it: `would_run` lines and skip reasons, per stage.
    would_run: Vec<crate::pipeline::report::RunLine>,
    skipped: Vec<crate::pipeline::report::SkipLine>,
    claims: Vec<crate::ledger::Claim>,
    retry_queue: Vec<RetryEntry>,
    held: Vec<Hold>,
    blocks: Vec<BlockView>,
}

/// The skip line of a ticket on a stage's status that its stage's filter keeps out.
async fn filtered_out(
    config: &crate::config::Config,
    tracker: &dyn crate::tracker::Tracker,
    ticket: &crate::tracker::Ticket,
) -> Option<crate::pipeline::report::SkipLine> {
    let mut ticket = ticket.clone();
    if let Some(status) = config.canonical_status(&ticket.status) {
        ticket.status = status.to_string();
    }
    let stage =
        &config.stages[crate::pipeline::eligibility::stage_for_status(config, &ticket.status)?];
    let identity = tracker.identity().await.ok()?;
    let detail = crate::pipeline::decide::filter::mismatch(&stage.filter, &ticket, &identity)?;
    Some(crate::pipeline::report::SkipLine {
        ticket: ticket.id.clone(),
        role: stage.role.clone(),
        status: ticket.status.clone(),
        reason: crate::pipeline::eligibility::SkipReason::Filtered { detail },
    })
}

/// Why a ticket is or is not eligible now: a dry-run tick (nothing claimed, run or
/// written), filtered to the ticket, with its claims and outcome blocks.
async fn ticket(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let Some(pipeline) = shared.pipeline() else {
        return no_pipeline(&shared);
    };
    let tracker = pipeline.tracker();
    let ticket = match tracker.get(&id).await {
        Ok(t) => t,
        Err(crate::tracker::TrackerError::NotFound(_)) => {
            return (StatusCode::NOT_FOUND, format!("no ticket {id}\n")).into_response()
        }
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("tracker: {e}\n")).into_response(),
    };
    let report = match pipeline
        .tick(crate::pipeline::TickOptions { dry_run: true })
        .await
    {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("dry-run tick: {e}\n")).into_response(),
    };
    let comments = match tracker.comments(&id).await {
        Ok(c) => c,
        Err(e) => return (StatusCode::BAD_GATEWAY, format!("tracker: {e}\n")).into_response(),
    };
    let blocks = comments
        .iter()
        .flat_map(|c| {
            crate::block::parse_blocks(&c.body)
                .into_iter()
                .filter_map(Result::ok)
                .map(|block| BlockView {
                    author: c.author.clone(),
                    created_at: c.created_at,
                    block,
                })
        })
        .collect();
    let name = tracker.name().to_string();
    let ledger = pipeline.ledger();
    let scope = Scope::Tracker(&name);
    let mut skipped: Vec<_> = report
        .skips
        .into_iter()
        .filter(|s| s.ticket == id)
        .collect();
    let would_run: Vec<_> = report.runs.into_iter().filter(|r| r.ticket == id).collect();
    if skipped.is_empty() && would_run.is_empty() {
        // A tracker that filters server-side did not list it: say which filter.
        skipped.extend(filtered_out(pipeline.config(), tracker.as_ref(), &ticket).await);
    }
    let view = TicketView {
        would_run,
        skipped,
        claims: ledger
            .claims(scope)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.key.ticket_id == id)
            .collect(),
        retry_queue: ledger
            .retries(scope)
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.key.ticket_id == id)
            .collect(),
        held: ledger
            .holds(scope)
            .unwrap_or_default()
            .into_iter()
            .filter(|h| h.key.ticket_id == id)
            .collect(),
        blocks,
        ticket,
    };
    Json(view).into_response()
}

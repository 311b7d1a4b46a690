//! Run log tails for `GET /runs/{run_id}/log`: only the log of a run the ledger knows,
//! and only when that file is inside `state_root/runs/` (a path never comes from the request).

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::api_error::ApiError;
use super::Shared;

use crate::ledger::{Ledger, RunPhase};

/// How much of a log the tail shows.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// How often a followed log is checked for new bytes.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// Why a log cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The ledger knows no run with this id.
    #[error("no run {0}")]
    UnknownRun(String),
    /// The run recorded no log, or the file is gone.
    #[error("run {0} has no log on this machine")]
    NoLog(String),
    /// The recorded path is outside `state_root/runs/` (or resolves there through a link).
    #[error("the log of run {0} is not under the state directory's runs/")]
    Outside(String),
    /// The ledger could not be read.
    #[error("ledger: {0}")]
    Ledger(String),
}

/// The log file of `run_id`, checked to lie inside `state_root/runs/` once every link
/// is resolved.
pub fn locate(ledger: &dyn Ledger, state_root: &Path, run_id: &str) -> Result<PathBuf, LogError> {
    let run = ledger
        .run(run_id)
        .map_err(|e| LogError::Ledger(e.to_string()))?
        .ok_or_else(|| LogError::UnknownRun(run_id.to_string()))?;
    let path = run
        .log_path
        .ok_or_else(|| LogError::NoLog(run_id.to_string()))?;
    let runs = state_root
        .join("runs")
        .canonicalize()
        .map_err(|_| LogError::NoLog(run_id.to_string()))?;
    let file = Path::new(&path)
        .canonicalize()
        .map_err(|_| LogError::NoLog(run_id.to_string()))?;
    if !file.starts_with(&runs) || !file.is_file() {
        return Err(LogError::Outside(run_id.to_string()));
    }
    Ok(file)
}

/// Whether the run is still going, as the ledger says.
pub fn running(ledger: &dyn Ledger, run_id: &str) -> bool {
    matches!(ledger.run(run_id), Ok(Some(r)) if r.phase == RunPhase::Running)
}

/// The last [`TAIL_BYTES`] of `file` (starting after the first line break when cut, so
/// no half line shows) and the offset its end was at.
pub async fn tail(file: &Path) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = tokio::fs::File::open(file).await?;
    let len = f.metadata().await?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start)).await?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    f.take(len - start).read_to_end(&mut bytes).await?;
    if start > 0 {
        if let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            bytes.drain(..=nl);
        }
    }
    Ok((bytes, len))
}

/// Write what `file` gains after `offset` to `out` until the run ends (then once more,
/// for its last lines) or the reader goes away.
pub async fn follow(
    file: PathBuf,
    mut offset: u64,
    mut out: tokio::io::DuplexStream,
    still_running: impl Fn() -> bool + Send + 'static,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let going = still_running();
        let Ok(mut f) = tokio::fs::File::open(&file).await else {
            return;
        };
        let len = f.metadata().await.map(|m| m.len()).unwrap_or(offset);
        if len < offset {
            // Truncated: start over from its beginning.
            offset = 0;
        }
        if len > offset && f.seek(SeekFrom::Start(offset)).await.is_ok() {
            while let Ok(n) = f.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                offset += n as u64;
                if out.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            if out.flush().await.is_err() {
                return;
            }
        }
        if !going {
            return;
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// The last non-empty line of a log, cut to `max` characters: the agent's last output
/// while the preset does not stream events.
pub async fn last_line(file: &Path, max: usize) -> Option<(String, chrono::DateTime<chrono::Utc>)> {
    let modified = tokio::fs::metadata(file).await.ok()?.modified().ok()?;
    let mut f = tokio::fs::File::open(file).await.ok()?;
    let len = f.metadata().await.ok()?.len();
    let start = len.saturating_sub(4096);
    f.seek(SeekFrom::Start(start)).await.ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).await.ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let mut short: String = line.chars().take(max).collect();
    if line.chars().count() > max {
        short.push('…');
    }
    Some((short, modified.into()))
}

/// `?follow=1`: keep the response open and stream new lines until the run ends.
#[derive(serde::Deserialize, Default)]
pub(super) struct LogQuery {
    follow: Option<String>,
}

/// `GET /runs/{run_id}/log`: the last 64 KiB of a known run's log, plain text.
pub(super) async fn run_log(
    State(shared): State<Arc<Shared>>,
    UrlPath(run_id): UrlPath<String>,
    Query(q): Query<LogQuery>,
    headers: HeaderMap,
) -> Response {
    if !super::login::may_view(&shared, &headers) {
        return super::login::refused(&headers, &format!("/runs/{run_id}/log"));
    }
    let Some(pipeline) = shared.pipeline() else {
        return super::api_error::no_pipeline(&shared);
    };
    let state_root = pipeline.config().state_root.clone();
    let file = match locate(pipeline.ledger().as_ref(), &state_root, &run_id) {
        Ok(f) => f,
        Err(e @ LogError::Ledger(_)) => {
            return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "ledger", e.to_string())
                .into_response()
        }
        Err(e @ LogError::Outside(_)) => {
            tracing::warn!(run_id = %run_id, "refused a run log outside state_root/runs");
            return ApiError::new(StatusCode::NOT_FOUND, "no_log", e.to_string()).into_response();
        }
        Err(e @ LogError::UnknownRun(_)) => {
            return ApiError::new(StatusCode::NOT_FOUND, "unknown_run", e.to_string())
                .into_response()
        }
        Err(e @ LogError::NoLog(_)) => {
            return ApiError::new(StatusCode::NOT_FOUND, "no_log", e.to_string()).into_response()
        }
    };
    let (bytes, end) = match tail(&file).await {
        Ok(t) => t,
        Err(e) => {
            return ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "log_unreadable",
                format!("cannot read the log of run {run_id}: {e}"),
            )
            .into_response()
        }
    };
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if !matches!(q.follow.as_deref(), Some("1" | "true" | "yes")) {
        return (text, bytes).into_response();
    }
    let (mut writer, reader) = tokio::io::duplex(64 * 1024);
    let ledger = pipeline.ledger().clone();
    tokio::spawn(async move {
        if writer.write_all(&bytes).await.is_err() {
            return;
        }
        let id = run_id.clone();
        follow(file, end, writer, move || running(ledger.as_ref(), &id)).await;
    });
    let stream = tokio_util::io::ReaderStream::new(reader);
    (
        text,
        [(header::CACHE_CONTROL, "no-cache")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

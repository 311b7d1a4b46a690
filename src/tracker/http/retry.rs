//! At most one retry after a server or connection error, for the adapters whose
//! tracker asks for it (GitHub, Linear); the others leave retrying to the next tick.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;

use super::client::{HttpClient, Reply};
use crate::tracker::TrackerError;

/// Which failures a request may be retried after (once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Idempotent: retry after a 5xx, a timeout or a connection error.
    Safe,
    /// Not idempotent (posting a comment): retry only when the connection failed
    /// before anything was sent.
    ConnectOnly,
}

/// How one request is retried: what it is called in errors and logs, which failures
/// allow the retry, and the wait before it.
pub(crate) struct RetryOnce<'a> {
    /// `GET /repos/o/r/issues`, `Linear SortieIssues`.
    pub what: &'a str,
    /// Which failures allow the retry.
    pub retry: Retry,
    /// The wait before the retry.
    pub backoff: Duration,
}

impl RetryOnce<'_> {
    /// Send `method url` (with `body`) through `client`, asking `gate` before each
    /// attempt and showing each answer's status and headers to `answered` before
    /// its body is read; any status that is not retried is the caller's to judge.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        client: &HttpClient,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        gate: impl Fn() -> Result<(), TrackerError>,
        headers: impl Fn(RequestBuilder) -> RequestBuilder,
        mut answered: impl FnMut(u16, &HeaderMap),
    ) -> Result<Reply, TrackerError> {
        let what = self.what;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let may_retry = attempt == 1;
            gate()?;
            let answer = match client.send(method, url, body, &headers).await {
                Ok(answer) => answer,
                Err(err) => {
                    let retryable = err.is_connect() || self.retry == Retry::Safe;
                    if may_retry && retryable {
                        tracing::debug!(%what, %err, "retrying once");
                        tokio::time::sleep(self.backoff).await;
                        continue;
                    }
                    let kind = if err.is_timeout() {
                        "timed out"
                    } else {
                        "failed"
                    };
                    return Err(TrackerError::Unavailable(format!("{what} {kind}: {err}")));
                }
            };
            let (status, headers) = (answer.status, answer.headers.clone());
            answered(status, &headers);
            let body = match answer.text().await {
                Ok(body) => body,
                Err(err) if may_retry && self.retry == Retry::Safe => {
                    tracing::debug!(%what, %err, "retrying once");
                    tokio::time::sleep(self.backoff).await;
                    continue;
                }
                Err(err) => {
                    return Err(TrackerError::Unavailable(format!(
                        "{what}: reading the response failed: {err}"
                    )))
                }
            };
            if status >= 500 && may_retry && self.retry == Retry::Safe {
                tracing::debug!(%what, status, "server error; retrying once");
                tokio::time::sleep(self.backoff).await;
                continue;
            }
            return Ok(Reply {
                status,
                headers,
                body,
            });
        }
    }
}

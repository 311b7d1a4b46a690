//! Sending one request to GitHub: the standard headers, the rate-limit gate, at most
//! one retry after a server or connection error, and failures mapped onto
//! [`TrackerError`].
//!
//! GitHub asks clients to stop when `x-ratelimit-remaining` reaches 0 until
//! `x-ratelimit-reset`, and to wait `retry-after` seconds after a secondary limit
//! (403 or 429). The wait is recorded (and persisted with the ETag cache); until it
//! is over nothing is sent and every call answers [`TrackerError::RateLimited`]
//! at once, so a rate-limited tick finishes with what it read instead of hammering.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, IF_NONE_MATCH};
use reqwest::Method;

use super::etag::ResponseCache;
use crate::tracker::TrackerError;

/// Where "now" comes from, so tests can move time instead of sleeping.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// One request and the response headers it got, as shown to an [`ExchangeObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// HTTP method.
    pub method: String,
    /// Full request URL.
    pub url: String,
    /// Response status.
    pub status: u16,
    /// Response headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Exchange {
    /// The first value of response header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sees every response the adapter gets (contract tests, diagnostics).
pub type ExchangeObserver = Arc<dyn Fn(&Exchange) + Send + Sync>;

/// Which failures a request may be retried after (once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Idempotent: retry after a 5xx, a timeout or a connection error.
    Safe,
    /// Not idempotent (posting a comment): retry only when the connection failed
    /// before anything was sent.
    ConnectOnly,
}

/// A response GitHub answered with 2xx or 304.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

/// The HTTP side of the adapter.
pub(crate) struct Transport {
    http: reqwest::Client,
    token: String,
    clock: Clock,
    retry_backoff: Duration,
    cache: Arc<ResponseCache>,
    observer: Option<ExchangeObserver>,
    remaining: Mutex<Option<u64>>,
}

/// Longest wait we accept from a reset time (guards against a skewed clock).
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// GitHub's advice for a secondary limit that names no `retry-after`: a minute.
const DEFAULT_SECONDARY_WAIT: Duration = Duration::from_secs(60);

impl Transport {
    /// A transport sending `token`, with the given timeout and retry backoff.
    pub fn new(
        token: String,
        timeout: Duration,
        retry_backoff: Duration,
        clock: Clock,
        cache: Arc<ResponseCache>,
        observer: Option<ExchangeObserver>,
    ) -> Result<Self, TrackerError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        headers.insert(
            "x-github-api-version",
            HeaderValue::from_static("2022-11-28"),
        );
        let http = reqwest::Client::builder()
            .user_agent(concat!("sortie/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| TrackerError::Unavailable(format!("cannot build the HTTP client: {e}")))?;
        Ok(Transport {
            http,
            token,
            clock,
            retry_backoff,
            cache,
            observer,
            remaining: Mutex::new(None),
        })
    }

    /// Requests left in the current window, from the last response that said.
    pub fn rate_limit_remaining(&self) -> Option<u64> {
        *self.remaining.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Send one request; 2xx and 304 are `Ok`, anything else a [`TrackerError`].
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&serde_json::Value>,
        if_none_match: Option<&str>,
        retry: Retry,
    ) -> Result<Reply, TrackerError> {
        let what = format!("{method} {}", path_of(url));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let may_retry = attempt == 1;
            self.gate()?;
            let mut request = self
                .http
                .request(method.clone(), url)
                .bearer_auth(&self.token);
            if let Some(tag) = if_none_match {
                request = request.header(IF_NONE_MATCH, tag);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(err) => {
                    let retryable = err.is_connect() || retry == Retry::Safe;
                    if may_retry && retryable {
                        tracing::debug!(%what, %err, "retrying once");
                        tokio::time::sleep(self.retry_backoff).await;
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
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            self.observe(&method, url, status, &headers);
            let now = self.now();
            let limits = RateHeaders::read(&headers);
            if let Some(left) = limits.remaining {
                *self.remaining.lock().unwrap_or_else(|e| e.into_inner()) = Some(left);
            }
            let body = match response.text().await {
                Ok(body) => body,
                Err(err) if may_retry && retry == Retry::Safe => {
                    tracing::debug!(%what, %err, "retrying once");
                    tokio::time::sleep(self.retry_backoff).await;
                    continue;
                }
                Err(err) => {
                    return Err(TrackerError::Unavailable(format!(
                        "{what}: reading the response failed: {err}"
                    )))
                }
            };
            if (200..300).contains(&status) || status == 304 {
                if limits.remaining == Some(0) {
                    self.block(limits.wait_for_reset(now), now);
                }
                return Ok(Reply {
                    status,
                    headers,
                    body,
                });
            }
            if status >= 500 && may_retry && retry == Retry::Safe {
                tracing::debug!(%what, status, "server error; retrying once");
                tokio::time::sleep(self.retry_backoff).await;
                continue;
            }
            let (err, wait) = failure(&what, status, &limits, &body, now);
            if let Some(wait) = wait {
                self.block(wait, now);
            }
            return Err(err);
        }
    }

    /// Refuse to send while GitHub's wait is not over.
    fn gate(&self) -> Result<(), TrackerError> {
        if let Some(until) = self.cache.blocked_until() {
            let now = self.now();
            if now < until {
                let left = (until - now).to_std().unwrap_or_default();
                return Err(TrackerError::RateLimited {
                    retry_after: Some(round_up(left)),
                });
            }
        }
        Ok(())
    }

    fn block(&self, wait: Duration, now: DateTime<Utc>) {
        let wait = chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
        tracing::warn!(
            wait_seconds = wait.num_seconds(),
            "GitHub rate limit: waiting"
        );
        self.cache.set_blocked_until(Some(now + wait));
        self.cache.save();
    }

    fn observe(&self, method: &Method, url: &str, status: u16, headers: &HeaderMap) {
        let Some(observer) = &self.observer else {
            return;
        };
        let exchange = Exchange {
            method: method.to_string(),
            url: url.to_string(),
            status,
            headers: headers
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        };
        observer(&exchange);
    }
}

/// The rate-limit headers of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RateHeaders {
    remaining: Option<u64>,
    /// Epoch seconds when the window resets.
    reset: Option<i64>,
    /// Seconds to wait, from `retry-after`.
    retry_after: Option<u64>,
}

impl RateHeaders {
    fn read(headers: &HeaderMap) -> Self {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        RateHeaders {
            remaining: number("x-ratelimit-remaining").and_then(|n| u64::try_from(n).ok()),
            reset: number("x-ratelimit-reset"),
            retry_after: number("retry-after").and_then(|n| u64::try_from(n).ok()),
        }
    }

    /// How long until the window resets (at least a second, at most an hour).
    fn wait_for_reset(&self, now: DateTime<Utc>) -> Duration {
        let secs = self
            .reset
            .map(|reset| reset - now.timestamp())
            .unwrap_or(DEFAULT_SECONDARY_WAIT.as_secs() as i64);
        Duration::from_secs(secs.max(1) as u64).min(MAX_WAIT)
    }
}

/// The error for a non-2xx answer, and how long to stop sending (rate limits).
fn failure(
    what: &str,
    status: u16,
    limits: &RateHeaders,
    body: &str,
    now: DateTime<Utc>,
) -> (TrackerError, Option<Duration>) {
    let message = error_message(body);
    match status {
        403 | 429 => {
            let wait = if let Some(secs) = limits.retry_after {
                Some(Duration::from_secs(secs.max(1)).min(MAX_WAIT))
            } else if limits.remaining == Some(0) {
                Some(limits.wait_for_reset(now))
            } else if status == 429 || message.to_ascii_lowercase().contains("rate limit") {
                Some(DEFAULT_SECONDARY_WAIT)
            } else {
                None
            };
            match wait {
                Some(wait) => (
                    TrackerError::RateLimited {
                        retry_after: Some(wait),
                    },
                    Some(wait),
                ),
                None => (
                    TrackerError::Unauthorized(format!(
                        "{what}: GitHub refused it ({message}); the token needs Issues read/write \
                         and Metadata read on the repository"
                    )),
                    None,
                ),
            }
        }
        401 => (
            TrackerError::Unauthorized(format!("{what}: GitHub rejected the token ({message})")),
            None,
        ),
        404 | 410 => (TrackerError::NotFound(format!("{what}: {message}")), None),
        422 => (TrackerError::Invalid(format!("{what}: {message}")), None),
        s if s >= 500 => (
            TrackerError::Unavailable(format!("{what}: HTTP {s} ({message})")),
            None,
        ),
        s => (
            TrackerError::Invalid(format!("{what}: HTTP {s} ({message})")),
            None,
        ),
    }
}

/// GitHub's `message` (and validation `errors`) from an error body, or the body itself.
fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let Some(value) = parsed else {
        let trimmed: String = body.trim().chars().take(200).collect();
        return if trimmed.is_empty() {
            "no message".to_string()
        } else {
            trimmed
        };
    };
    let mut message = value
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("no message")
        .to_string();
    if let Some(errors) = value.get("errors").and_then(|e| e.as_array()) {
        let details: Vec<String> = errors
            .iter()
            .map(|e| {
                e.get("message")
                    .or_else(|| e.get("code"))
                    .and_then(|m| m.as_str())
                    .map_or_else(|| e.to_string(), str::to_string)
            })
            .collect();
        if !details.is_empty() {
            message = format!("{message}: {}", details.join("; "));
        }
    }
    message
}

/// The path and query of a URL, for error messages (never the host or a token).
fn path_of(url: &str) -> &str {
    url.find("://")
        .and_then(|scheme| url[scheme + 3..].find('/').map(|p| &url[scheme + 3 + p..]))
        .unwrap_or(url)
}

fn round_up(d: Duration) -> Duration {
    if d.subsec_nanos() > 0 {
        Duration::from_secs(d.as_secs() + 1)
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(remaining: Option<u64>, retry_after: Option<u64>) -> RateHeaders {
        RateHeaders {
            remaining,
            reset: Some(Utc::now().timestamp() + 120),
            retry_after,
        }
    }

    #[test]
    fn secondary_limits_wait_retry_after_and_primary_ones_until_reset() {
        let (err, wait) = failure("GET /x", 429, &limits(Some(10), Some(30)), "{}", Utc::now());
        assert!(
            matches!(err, TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 30)
        );
        assert_eq!(wait, Some(Duration::from_secs(30)));

        let (err, wait) = failure("GET /x", 403, &limits(Some(0), None), "{}", Utc::now());
        assert!(matches!(err, TrackerError::RateLimited { .. }), "{err}");
        let wait = wait.unwrap().as_secs();
        assert!((118..=120).contains(&wait), "{wait}");

        let body = r#"{"message":"You have exceeded a secondary rate limit"}"#;
        let (err, wait) = failure("GET /x", 403, &limits(Some(10), None), body, Utc::now());
        assert!(matches!(err, TrackerError::RateLimited { .. }));
        assert_eq!(wait, Some(DEFAULT_SECONDARY_WAIT));
    }

    #[test]
    fn other_statuses_map_onto_the_tracker_errors() {
        let plain = limits(Some(10), None);
        let body = r#"{"message":"Validation Failed","errors":[{"code":"already_exists"}]}"#;
        let cases = [
            (401, "unauthorized"),
            (403, "unauthorized"),
            (404, "not found"),
            (410, "not found"),
            (422, "invalid request"),
            (502, "tracker unavailable"),
            (418, "invalid request"),
        ];
        for (status, start) in cases {
            let (err, wait) = failure("POST /repos/o/r/labels", status, &plain, body, Utc::now());
            assert!(err.to_string().starts_with(start), "{status}: {err}");
            assert_eq!(wait, None);
        }
        let (err, _) = failure("POST /repos/o/r/labels", 422, &plain, body, Utc::now());
        assert_eq!(
            err.to_string(),
            "invalid request: POST /repos/o/r/labels: Validation Failed: already_exists"
        );
    }

    #[test]
    fn error_messages_name_the_path_and_never_the_host() {
        assert_eq!(
            path_of("https://ghe.example/api/v3/user?x=1"),
            "/api/v3/user?x=1"
        );
        assert_eq!(error_message("<html>oops</html>"), "<html>oops</html>");
        assert_eq!(error_message(""), "no message");
    }
}

//! GitHub's part of the HTTP layer: its standard headers and bearer token, its
//! primary and secondary rate limits, and its failures mapped onto [`TrackerError`].
//!
//! GitHub asks clients to stop when `x-ratelimit-remaining` reaches 0 until
//! `x-ratelimit-reset`, and to wait `retry-after` seconds after a secondary limit
//! (403 or 429). The wait is recorded (and persisted with the ETag cache); until it
//! is over nothing is sent and every call answers [`TrackerError::RateLimited`]
//! at once, so a rate-limited tick finishes with what it read instead of hammering.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, IF_NONE_MATCH};
use reqwest::Method;

use crate::tracker::http::{
    path_of, refuse_until, Clock, ExchangeObserver, HttpClient, Remaining, Reply, ResponseCache,
    Retry, RetryOnce, DEFAULT_WAIT, MAX_WAIT,
};
use crate::tracker::TrackerError;

/// GitHub's advice for a secondary limit that names no `retry-after`: a minute.
const DEFAULT_SECONDARY_WAIT: Duration = DEFAULT_WAIT;

/// The GitHub side of the HTTP layer: its headers, its rate limits, its errors.
pub(crate) struct GithubClient {
    http: HttpClient,
    token: String,
    clock: Clock,
    retry_backoff: Duration,
    cache: Arc<ResponseCache>,
    remaining: Remaining,
}

impl GithubClient {
    /// A client sending `token`, with the given timeout and retry backoff.
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
        let http = HttpClient::new(timeout, headers)
            .map_err(|e| TrackerError::Unavailable(format!("cannot build the HTTP client: {e}")))?
            .with_observer(observer);
        Ok(GithubClient {
            http,
            token,
            clock,
            retry_backoff,
            cache,
            remaining: Remaining::default(),
        })
    }

    /// Requests left in the current window, from the last response that said.
    pub fn rate_limit_remaining(&self) -> Option<u64> {
        self.remaining.get()
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
        let attempts = RetryOnce {
            what: &what,
            retry,
            backoff: self.retry_backoff,
        };
        let mut answered_at = None;
        let reply = attempts
            .send(
                &self.http,
                &method,
                url,
                body,
                || refuse_until(self.cache.blocked_until(), || self.now()),
                |request| {
                    let request = request.bearer_auth(&self.token);
                    match if_none_match {
                        Some(tag) => request.header(IF_NONE_MATCH, tag),
                        None => request,
                    }
                },
                |_, headers| {
                    answered_at = Some(self.now());
                    if let Some(left) = RateHeaders::read(headers).remaining {
                        self.remaining.set(left);
                    }
                },
            )
            .await?;
        let now = answered_at.unwrap_or_else(|| self.now());
        let limits = RateHeaders::read(&reply.headers);
        if (200..300).contains(&reply.status) || reply.status == 304 {
            if limits.remaining == Some(0) {
                self.block(limits.wait_for_reset(now), now);
            }
            return Ok(reply);
        }
        let (err, wait) = failure(&what, reply.status, &limits, &reply.body, now);
        if let Some(wait) = wait {
            self.block(wait, now);
        }
        Err(err)
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

//! Sending one GraphQL document to Linear: the `Authorization` header, the
//! rate-limit gate, at most one retry after a server or connection error, the
//! complexity Linear reports logged at debug, and failures mapped onto
//! [`TrackerError`].
//!
//! Linear signals rate limiting with a GraphQL error whose `extensions.code` is
//! `RATELIMITED`, often with HTTP 400 rather than 429, so the body decides, not the
//! status. Its reset headers are epoch milliseconds. Once limited, nothing is sent
//! until the reset: every call answers [`TrackerError::RateLimited`] at once, so a
//! tick finishes with what it read instead of hammering. The wait is kept in a file
//! under the state root, so the next `sortie pipeline tick` process waits too. Any other `errors` entry,
//! even with HTTP 200, is an error, never an empty result.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{json, Value};

use crate::tracker::http::{
    graphql, round_up, Clock, HttpClient, Retry, RetryOnce, WaitGate, DEFAULT_WAIT, MAX_WAIT,
};
use crate::tracker::TrackerError;

/// What the last responses said about the budget left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Requests left in the window.
    pub requests_remaining: Option<u64>,
    /// Complexity points left in the window.
    pub complexity_remaining: Option<u64>,
    /// Complexity of the last query, as Linear reported it.
    pub last_complexity: Option<u64>,
}

/// Linear's part of the HTTP layer: its authorization, its budget, its GraphQL errors.
pub(crate) struct LinearClient {
    http: HttpClient,
    url: String,
    authorization: String,
    retry_backoff: Duration,
    gate: WaitGate,
    budget: Mutex<Budget>,
}

impl LinearClient {
    /// A client posting to `url` with `authorization` as the header value; a
    /// rate-limit wait is persisted in `wait_file` when given.
    pub fn new(
        url: String,
        authorization: String,
        timeout: Duration,
        retry_backoff: Duration,
        clock: Clock,
        wait_file: Option<PathBuf>,
    ) -> Result<Self, TrackerError> {
        let http = HttpClient::new(timeout, HeaderMap::new())
            .map_err(|e| TrackerError::Unavailable(format!("cannot build the HTTP client: {e}")))?;
        Ok(LinearClient {
            http,
            url,
            authorization,
            retry_backoff,
            gate: WaitGate::new(clock, wait_file, "Linear"),
            budget: Mutex::new(Budget::default()),
        })
    }

    /// The budget as last seen.
    pub fn budget(&self) -> Budget {
        *crate::tracker::unpoisoned(&self.budget)
    }

    /// Send operation `operation` (`query` is its document) and return its `data`.
    pub async fn send(
        &self,
        operation: &str,
        query: &str,
        variables: Value,
        retry: Retry,
    ) -> Result<Value, TrackerError> {
        let body = json!({ "operationName": operation, "query": query, "variables": variables });
        let what = format!("Linear {operation}");
        let attempts = RetryOnce {
            what: &what,
            retry,
            backoff: self.retry_backoff,
        };
        let mut limits = RateHeaders::default();
        let reply = attempts
            .send(
                &self.http,
                &Method::POST,
                &self.url,
                Some(&body),
                || self.gate.check(),
                |request| {
                    request
                        .header(AUTHORIZATION, &self.authorization)
                        .header(CONTENT_TYPE, "application/json")
                },
                |_, headers| {
                    limits = RateHeaders::read(headers);
                    self.record(operation, &limits);
                },
            )
            .await?;
        let now = self.gate.now();
        match interpret(operation, reply.status, &reply.body, &limits, now) {
            Ok(data) => Ok(data),
            Err(failure) => {
                let Failure { error, wait } = *failure;
                if let Some(wait) = wait {
                    self.block(wait, now);
                }
                Err(error)
            }
        }
    }

    fn record(&self, operation: &str, limits: &RateHeaders) {
        let mut budget = crate::tracker::unpoisoned(&self.budget);
        if limits.requests_remaining.is_some() {
            budget.requests_remaining = limits.requests_remaining;
        }
        if limits.complexity_remaining.is_some() {
            budget.complexity_remaining = limits.complexity_remaining;
        }
        budget.last_complexity = limits.complexity;
        tracing::debug!(
            operation,
            complexity = limits.complexity,
            complexity_remaining = limits.complexity_remaining,
            requests_remaining = limits.requests_remaining,
            "Linear query cost"
        );
    }

    fn block(&self, wait: Duration, now: DateTime<Utc>) {
        tracing::warn!(wait_seconds = wait.as_secs(), "Linear rate limit: waiting");
        let wait = chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
        self.gate.block_until(now + wait);
    }
}

/// The rate-limit headers of one response (resets in epoch milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RateHeaders {
    pub requests_remaining: Option<u64>,
    pub requests_reset_ms: Option<i64>,
    pub complexity_remaining: Option<u64>,
    pub complexity_reset_ms: Option<i64>,
    pub complexity: Option<u64>,
}

impl RateHeaders {
    pub fn read(headers: &HeaderMap) -> Self {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let unsigned = |name: &str| number(name).filter(|n| *n >= 0.0).map(|n| n as u64);
        RateHeaders {
            requests_remaining: unsigned("x-ratelimit-requests-remaining"),
            requests_reset_ms: number("x-ratelimit-requests-reset").map(|n| n as i64),
            complexity_remaining: unsigned("x-ratelimit-complexity-remaining"),
            complexity_reset_ms: number("x-ratelimit-complexity-reset").map(|n| n as i64),
            complexity: unsigned("x-complexity"),
        }
    }

    /// How long until the exhausted budget resets: the reset of a budget at 0, else
    /// the later of the resets given, else a minute; at least a second, at most an hour.
    fn wait(&self, now: DateTime<Utc>) -> Duration {
        let exhausted = [
            (self.requests_remaining, self.requests_reset_ms),
            (self.complexity_remaining, self.complexity_reset_ms),
        ];
        let reset = exhausted
            .iter()
            .filter(|(left, _)| *left == Some(0))
            .filter_map(|(_, reset)| *reset)
            .max()
            .or_else(|| exhausted.iter().filter_map(|(_, reset)| *reset).max());
        match reset {
            Some(ms) => {
                let left = ms - now.timestamp_millis();
                Duration::from_millis(left.max(1000) as u64).min(MAX_WAIT)
            }
            None => DEFAULT_WAIT,
        }
    }
}

/// A failed request: the error, and how long to stop sending (rate limits).
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: TrackerError,
    pub wait: Option<Duration>,
}

impl From<TrackerError> for Box<Failure> {
    fn from(error: TrackerError) -> Self {
        Box::new(Failure { error, wait: None })
    }
}

/// Where Linear puts an error's code and its text for people.
static LINEAR_ERRORS: graphql::Dialect = graphql::Dialect {
    code: "/extensions/code",
    text: &["/extensions/userPresentableMessage", "/message"],
};

/// Turn one answer into its `data` or a [`Failure`].
pub(crate) fn interpret(
    operation: &str,
    status: u16,
    body: &str,
    limits: &RateHeaders,
    now: DateTime<Utc>,
) -> Result<Value, Box<Failure>> {
    let answer = graphql::Answer::read(body, &LINEAR_ERRORS);
    let (errors, message) = (&answer.errors, answer.message.clone());
    let code = |e: &Value| answer.code(e);
    let what = format!("Linear {operation}");
    if status == 429 || answer.has("RATELIMITED") {
        let wait = limits.wait(now);
        return Err(Box::new(Failure {
            error: TrackerError::RateLimited {
                retry_after: Some(round_up(wait)),
            },
            wait: Some(wait),
        }));
    }
    if status == 401
        || errors
            .iter()
            .any(|e| matches!(code(e).as_str(), "AUTHENTICATION_ERROR" | "UNAUTHENTICATED"))
    {
        let detail = if message.is_empty() {
            "HTTP 401".to_string()
        } else {
            message
        };
        return Err(TrackerError::Unauthorized(format!(
            "{what}: Linear rejected the key ({detail}); check the key in the variable tracker.token_env names and tracker.token_type"
        ))
        .into());
    }
    if answer.has("FORBIDDEN") {
        return Err(TrackerError::Unauthorized(format!(
            "{what}: Linear refused it ({message}); the key needs read and write access to the team"
        ))
        .into());
    }
    if !errors.is_empty() {
        let not_found = errors.iter().any(|e| {
            let text = e.to_string().to_ascii_lowercase();
            text.contains("not found") || text.contains("could not find")
        });
        return Err(if not_found {
            TrackerError::NotFound(format!("{what}: {message}"))
        } else if status >= 500 {
            TrackerError::Unavailable(format!("{what}: HTTP {status} ({message})"))
        } else {
            TrackerError::Invalid(format!("{what}: {message}"))
        }
        .into());
    }
    if status >= 500 {
        return Err(TrackerError::Unavailable(format!("{what}: HTTP {status}")).into());
    }
    if !(200..300).contains(&status) {
        let snippet: String = body.trim().chars().take(200).collect();
        return Err(TrackerError::Invalid(format!("{what}: HTTP {status} ({snippet})")).into());
    }
    match answer.data() {
        Some(data) => Ok(data),
        None => Err(TrackerError::Invalid(format!("{what}: the answer has no data")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now: DateTime<Utc>, secs: i64) -> RateHeaders {
        RateHeaders {
            requests_remaining: Some(0),
            requests_reset_ms: Some(now.timestamp_millis() + secs * 1000),
            ..RateHeaders::default()
        }
    }

    #[test]
    fn ratelimited_with_http_400_waits_until_the_reset_in_epoch_milliseconds() {
        let now = Utc::now();
        let body =
            r#"{"errors":[{"message":"Rate limit exceeded","extensions":{"code":"RATELIMITED"}}]}"#;
        let failure = interpret("SortieIssues", 400, body, &at(now, 90), now).unwrap_err();
        assert!(
            matches!(failure.error, TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 90),
            "{:?}",
            failure.error
        );
        assert_eq!(failure.wait, Some(Duration::from_secs(90)));
        // No reset header: a minute.
        let failure = interpret("q", 400, body, &RateHeaders::default(), now).unwrap_err();
        assert_eq!(failure.wait, Some(DEFAULT_WAIT));
    }

    #[test]
    fn errors_with_http_200_are_errors_not_empty_results() {
        let now = Utc::now();
        let none = RateHeaders::default();
        let body = r#"{"data":null,"errors":[{"message":"Argument Validation Error","extensions":{"code":"INVALID_INPUT"}}]}"#;
        let err = interpret("q", 200, body, &none, now).unwrap_err().error;
        assert_eq!(
            err.to_string(),
            "invalid request: Linear q: Argument Validation Error (INVALID_INPUT)"
        );
        let body = r#"{"errors":[{"message":"Entity not found: Issue","extensions":{"code":"INVALID_INPUT"}}]}"#;
        let err = interpret("q", 200, body, &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::NotFound(_)), "{err}");
        let err = interpret("q", 401, "", &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::Unauthorized(_)), "{err}");
        let body = r#"{"errors":[{"message":"x","extensions":{"code":"AUTHENTICATION_ERROR"}}]}"#;
        let err = interpret("q", 400, body, &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::Unauthorized(_)), "{err}");
        let err = interpret("q", 502, "<html>", &none, now).unwrap_err().error;
        assert!(err.is_retryable(), "{err}");
        let err = interpret("q", 200, r#"{"data":null}"#, &none, now)
            .unwrap_err()
            .error;
        assert!(matches!(err, TrackerError::Invalid(_)), "{err}");
        let data = interpret("q", 200, r#"{"data":{"viewer":{"id":"u"}}}"#, &none, now).unwrap();
        assert_eq!(data["viewer"]["id"], "u");
    }
}

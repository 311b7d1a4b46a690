//! Sending one GraphQL document to GitHub: `Authorization: bearer`, the rate-limit gate,
//! at most one retry after a server or connection error, the points each query costs,
//! and failures mapped onto [`TrackerError`].
//!
//! GitHub's GraphQL API has no conditional requests: every query costs points from an
//! hourly budget (5,000 for a user token). Each document asks for
//! `rateLimit { cost remaining resetAt }`; the client keeps the last figures, and when
//! at most [`RESERVE`] points are left it sends nothing more until the reset, so a
//! pipeline never spends the budget the people on the same token need. The primary
//! limit answers `errors[].type == "RATE_LIMITED"` (often with HTTP 200); the secondary
//! limits answer 403 or 429 with `Retry-After`. Both stop sending until the wait is over,
//! kept in a file under the state root for the next process.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{json, Value};

use crate::tracker::http::{
    graphql, header_u64, round_up, Clock, HttpClient, Retry, RetryOnce, WaitGate, DEFAULT_WAIT,
    MAX_WAIT,
};
use crate::tracker::TrackerError;

/// Points kept back: with this many or fewer left, nothing is sent until the hourly reset.
pub const RESERVE: u64 = 100;

/// What the last answers said about the points.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Points {
    /// Points left in the hour.
    pub remaining: Option<u64>,
    /// What the last query cost.
    pub last_cost: Option<u64>,
    /// Points spent by this client (this process), summed from each query's cost.
    pub spent: u64,
}

/// GitHub's GraphQL endpoint with its authorization, points and errors.
pub(crate) struct ProjectClient {
    http: HttpClient,
    url: String,
    authorization: String,
    retry_backoff: Duration,
    gate: WaitGate,
    points: Mutex<Points>,
}

impl ProjectClient {
    /// A client posting to `url` with the token; a rate-limit wait is persisted in
    /// `wait_file` when given.
    pub fn new(
        url: String,
        token: &str,
        timeout: Duration,
        retry_backoff: Duration,
        clock: Clock,
        wait_file: Option<PathBuf>,
    ) -> Result<Self, TrackerError> {
        let http = HttpClient::new(timeout, HeaderMap::new())
            .map_err(|e| TrackerError::Unavailable(format!("cannot build the HTTP client: {e}")))?;
        Ok(ProjectClient {
            http,
            url,
            authorization: format!("bearer {token}"),
            retry_backoff,
            gate: WaitGate::new(clock, wait_file, "GitHub GraphQL"),
            points: Mutex::new(Points::default()),
        })
    }

    /// The points as last seen.
    pub fn points(&self) -> Points {
        *crate::tracker::unpoisoned(&self.points)
    }

    /// Send operation `operation` (`query` is its document) and return its `data`.
    pub async fn send(
        &self,
        operation: &str,
        query: &str,
        variables: Value,
    ) -> Result<Value, TrackerError> {
        let body = json!({ "operationName": operation, "query": query, "variables": variables });
        let what = format!("GitHub GraphQL {operation}");
        // Queries are safe to repeat; the one mutation sets a field to a fixed option.
        let attempts = RetryOnce {
            what: &what,
            retry: Retry::Safe,
            backoff: self.retry_backoff,
        };
        let mut headers = HeaderMap::new();
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
                |_, h| headers = h.clone(),
            )
            .await?;
        let now = self.gate.now();
        match interpret(operation, reply.status, &reply.body, &headers, now) {
            Ok(answer) => {
                self.record(operation, &answer.rate, now);
                Ok(answer.data)
            }
            Err(failure) => {
                let Failure { error, wait } = *failure;
                if let Some(wait) = wait {
                    tracing::warn!(
                        wait_seconds = wait.as_secs(),
                        "GitHub GraphQL rate limit: waiting"
                    );
                    self.block(wait, now);
                }
                Err(error)
            }
        }
    }

    fn record(&self, operation: &str, rate: &Option<RateLimit>, now: DateTime<Utc>) {
        let Some(rate) = rate else { return };
        {
            let mut points = crate::tracker::unpoisoned(&self.points);
            points.remaining = Some(rate.remaining);
            points.last_cost = Some(rate.cost);
            points.spent += rate.cost;
        }
        tracing::debug!(
            operation,
            cost = rate.cost,
            remaining = rate.remaining,
            "GitHub GraphQL points"
        );
        if rate.remaining <= RESERVE {
            let wait = rate
                .reset_at
                .and_then(|at| (at - now).to_std().ok())
                .unwrap_or(DEFAULT_WAIT)
                .min(MAX_WAIT);
            tracing::warn!(
                remaining = rate.remaining,
                reserve = RESERVE,
                wait_seconds = wait.as_secs(),
                "GitHub GraphQL points are nearly spent: sending nothing until the hourly reset"
            );
            self.block(wait, now);
        }
    }

    fn block(&self, wait: Duration, now: DateTime<Utc>) {
        let wait = chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(60));
        self.gate.block_until(now + wait);
    }
}

/// The `rateLimit` a query asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateLimit {
    pub cost: u64,
    pub remaining: u64,
    pub reset_at: Option<DateTime<Utc>>,
}

/// A successful answer: its `data`, and the points it reported.
#[derive(Debug)]
pub(crate) struct Answer {
    pub data: Value,
    pub rate: Option<RateLimit>,
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

/// How long a rate-limited answer asks to wait: `Retry-After`, else until
/// `x-ratelimit-reset` (epoch seconds) when the budget is spent, else a minute.
fn wait_of(headers: &HeaderMap, now: DateTime<Utc>) -> Duration {
    if let Some(secs) = header_u64(headers, "retry-after") {
        return Duration::from_secs(secs.max(1)).min(MAX_WAIT);
    }
    let spent = header_u64(headers, "x-ratelimit-remaining") == Some(0);
    match header_u64(headers, "x-ratelimit-reset") {
        Some(reset) if spent => {
            let left = reset as i64 - now.timestamp();
            Duration::from_secs(left.max(1) as u64).min(MAX_WAIT)
        }
        _ => DEFAULT_WAIT,
    }
}

/// Where GitHub puts an error's code (`type`) and its text.
static GITHUB_ERRORS: graphql::Dialect = graphql::Dialect {
    code: "/type",
    text: &["/message"],
};

/// Turn one answer into its `data` and points, or a [`Failure`].
pub(crate) fn interpret(
    operation: &str,
    status: u16,
    body: &str,
    headers: &HeaderMap,
    now: DateTime<Utc>,
) -> Result<Answer, Box<Failure>> {
    let what = format!("GitHub GraphQL {operation}");
    let answer = graphql::Answer::read(body, &GITHUB_ERRORS);
    let (errors, message) = (&answer.errors, answer.message.clone());
    let body_says = |needle: &str| body.to_ascii_lowercase().contains(needle);
    let limited = answer.has("RATE_LIMITED")
        || status == 429
        || (status == 403
            && (headers.contains_key("retry-after")
                || header_u64(headers, "x-ratelimit-remaining") == Some(0)
                || body_says("rate limit")));
    if limited {
        let wait = wait_of(headers, now);
        return Err(Box::new(Failure {
            error: TrackerError::RateLimited {
                retry_after: Some(round_up(wait)),
            },
            wait: Some(wait),
        }));
    }
    if status == 401 {
        return Err(TrackerError::Unauthorized(format!(
            "{what}: GitHub rejected the token (HTTP 401); check the token in the variable tracker.token_env names"
        ))
        .into());
    }
    if status == 403 || answer.has("FORBIDDEN") {
        let detail = if message.is_empty() {
            format!("HTTP {status}")
        } else {
            message
        };
        return Err(TrackerError::Unauthorized(format!(
            "{what}: GitHub refused it ({detail}); the token needs the `project` scope (read and write) and access to the project's repositories (see docs/trackers/github-project.md)"
        ))
        .into());
    }
    if status >= 500 {
        return Err(TrackerError::Unavailable(format!("{what}: HTTP {status}")).into());
    }
    if !errors.is_empty() {
        let not_found = answer.has("NOT_FOUND");
        return Err(if not_found {
            TrackerError::NotFound(format!("{what}: {message}"))
        } else {
            TrackerError::Invalid(format!("{what}: {message}"))
        }
        .into());
    }
    if !(200..300).contains(&status) {
        let snippet: String = body.trim().chars().take(200).collect();
        return Err(TrackerError::Invalid(format!("{what}: HTTP {status} ({snippet})")).into());
    }
    let Some(data) = answer.data() else {
        return Err(TrackerError::Invalid(format!("{what}: the answer has no data")).into());
    };
    let rate = data.get("rateLimit").and_then(|r| {
        Some(RateLimit {
            cost: r.get("cost")?.as_u64()?,
            remaining: r.get("remaining")?.as_u64()?,
            reset_at: r
                .get("resetAt")
                .and_then(Value::as_str)
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc)),
        })
    });
    Ok(Answer { data, rate })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_primary_limit_with_http_200_waits_until_the_reset() {
        let now = Utc::now();
        let body = r#"{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded for user ID 1."}]}"#;
        let reset = (now.timestamp() + 600).to_string();
        let h = headers(&[
            ("x-ratelimit-remaining", "0".into()),
            ("x-ratelimit-reset", reset),
        ]);
        let failure = interpret("q", 200, body, &h, now).unwrap_err();
        assert!(
            matches!(failure.error, TrackerError::RateLimited { retry_after: Some(d) } if (599..=600).contains(&d.as_secs())),
            "{:?}",
            failure.error
        );
    }

    #[test]
    fn a_secondary_limit_waits_its_retry_after() {
        let now = Utc::now();
        let body = r#"{"message":"You have exceeded a secondary rate limit."}"#;
        let h = headers(&[("retry-after", "42".into())]);
        let failure = interpret("q", 403, body, &h, now).unwrap_err();
        assert_eq!(failure.wait, Some(Duration::from_secs(42)));
        let failure = interpret("q", 429, "", &HeaderMap::new(), now).unwrap_err();
        assert_eq!(failure.wait, Some(DEFAULT_WAIT));
    }

    #[test]
    fn errors_map_onto_the_categories_the_pipeline_branches_on() {
        let now = Utc::now();
        let none = HeaderMap::new();
        let body = r#"{"data":{"repositoryOwner":null},"errors":[{"type":"NOT_FOUND","message":"Could not resolve to a ProjectV2 with the number 9."}]}"#;
        let err = interpret("q", 200, body, &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::NotFound(_)), "{err}");
        let err = interpret("q", 401, "", &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::Unauthorized(_)), "{err}");
        let body = r#"{"errors":[{"type":"FORBIDDEN","message":"Resource not accessible by integration"}]}"#;
        let err = interpret("q", 200, body, &none, now).unwrap_err().error;
        assert!(err.to_string().contains("`project` scope"), "{err}");
        let err = interpret("q", 502, "<html>", &none, now).unwrap_err().error;
        assert!(err.is_retryable(), "{err}");
        let body = r#"{"errors":[{"message":"Field 'x' doesn't exist on type 'Query'"}]}"#;
        let err = interpret("q", 200, body, &none, now).unwrap_err().error;
        assert!(matches!(err, TrackerError::Invalid(_)), "{err}");
        let err = interpret("q", 200, r#"{"data":null}"#, &none, now)
            .unwrap_err()
            .error;
        assert!(matches!(err, TrackerError::Invalid(_)), "{err}");
    }

    #[test]
    fn the_points_a_query_reports_are_read() {
        let now = Utc::now();
        let body = r#"{"data":{"rateLimit":{"cost":1,"remaining":4321,"resetAt":"2026-12-06T03:00:00Z"},"viewer":{"login":"bot"}}}"#;
        let answer = interpret("q", 200, body, &HeaderMap::new(), now).unwrap();
        let rate = answer.rate.unwrap();
        assert_eq!((rate.cost, rate.remaining), (1, 4321));
        assert_eq!(answer.data["viewer"]["login"], "bot");
    }
}

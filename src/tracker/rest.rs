//! GitLab's and Gitea's part of the HTTP layer: one authenticated JSON request at a
//! time, the rate-limit headers read (`RateLimit-Remaining`, `X-RateLimit-Remaining`),
//! a 429's `Retry-After` honoured by sending nothing until it is over, and failures
//! mapped onto [`TrackerError`] with the forge's `message`.
//!
//! No retries here: a failed read fails the tick's listing or the write-back, which the
//! next tick retries from the board and the outbox.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Method;
use serde::de::DeserializeOwned;

use super::http::{
    header_u64, no_answer, path_of, strip_query, Clock, ExchangeObserver, HttpClient, Remaining,
    Reply, WaitGate, DEFAULT_WAIT, MAX_WAIT,
};
use super::TrackerError;

/// Who the client talks to, for error messages.
#[derive(Debug, Clone)]
pub struct Vendor {
    /// `GitLab`, `Gitea`.
    pub name: &'static str,
    /// What a refused token needs, said after a 401/403 (`the token needs the api scope`).
    pub token_hint: String,
}

/// An authenticated JSON client for one forge (GitLab, Gitea).
pub struct ForgeClient {
    http: HttpClient,
    base: String,
    vendor: Vendor,
    gate: WaitGate,
    remaining: Remaining,
}

impl std::fmt::Debug for ForgeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token (it is in the default headers).
        f.debug_struct("ForgeClient")
            .field("base", &self.base)
            .field("vendor", &self.vendor.name)
            .finish_non_exhaustive()
    }
}

impl ForgeClient {
    /// A client for the API at `base` (no trailing `/`), sending `auth` (header name and
    /// value) with every request.
    pub fn new(
        base: &str,
        auth: (&'static str, String),
        vendor: Vendor,
        timeout: Duration,
        clock: Clock,
    ) -> Result<Self, TrackerError> {
        let mut headers = HeaderMap::new();
        let mut value = HeaderValue::from_str(&auth.1).map_err(|_| {
            TrackerError::Unauthorized(format!(
                "the {} token contains characters a header cannot carry",
                vendor.name
            ))
        })?;
        value.set_sensitive(true);
        headers.insert(HeaderName::from_static(auth.0), value);
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        let http = HttpClient::new(timeout, headers)
            .map_err(|e| TrackerError::Unavailable(format!("cannot build the HTTP client: {e}")))?;
        Ok(ForgeClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            gate: WaitGate::new(clock, None, vendor.name),
            vendor,
            remaining: Remaining::default(),
        })
    }

    /// Show every response to `observer` (contract tests, diagnostics).
    pub fn with_observer(mut self, observer: Option<ExchangeObserver>) -> Self {
        self.http.set_observer(observer);
        self
    }

    /// The API base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Requests left in the rate-limit window, from the last response that said.
    pub fn rate_limit_remaining(&self) -> Option<u64> {
        self.remaining.get()
    }

    /// `GET` a path (relative to the base, with its query) and decode the answer.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, TrackerError> {
        let reply = self.send(Method::GET, path, None).await?;
        reply.json(&format!("GET {}", strip_query(path)))
    }

    /// Send one request to a path or a full URL on the API; 2xx is `Ok`.
    pub async fn send(
        &self,
        method: Method,
        path_or_url: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Reply, TrackerError> {
        self.send_accepting(method, path_or_url, body, &[]).await
    }

    /// [`ForgeClient::send`], with the statuses in `accept` answered as `Ok` too (a 403
    /// the caller explains better than "refused").
    pub async fn send_accepting(
        &self,
        method: Method,
        path_or_url: &str,
        body: Option<&serde_json::Value>,
        accept: &[u16],
    ) -> Result<Reply, TrackerError> {
        self.exchange(method, path_or_url, body, accept, None).await
    }

    /// `GET` a path that answers plain text (a GitLab job trace), asking for
    /// `text/plain` rather than JSON.
    pub async fn get_text(&self, path: &str) -> Result<Reply, TrackerError> {
        self.exchange(Method::GET, path, None, &[], Some("text/plain"))
            .await
    }

    /// One request; `media`, when given, replaces the JSON `Accept` header.
    async fn exchange(
        &self,
        method: Method,
        path_or_url: &str,
        body: Option<&serde_json::Value>,
        accept: &[u16],
        media: Option<&'static str>,
    ) -> Result<Reply, TrackerError> {
        let url = if path_or_url.starts_with("http://") || path_or_url.starts_with("https://") {
            path_or_url.to_string()
        } else {
            format!("{}{path_or_url}", self.base)
        };
        let what = format!("{method} {}", strip_query(path_of(&url)));
        self.gate.check()?;
        let answer = self
            .http
            .send(&method, &url, body, |request| match media {
                Some(media) => request.header(reqwest::header::ACCEPT, media),
                None => request,
            })
            .await
            .map_err(|e| no_answer(&what, &e))?;
        let (status, headers) = (answer.status, answer.headers.clone());
        if let Some(left) = header_u64(&headers, "ratelimit-remaining")
            .or_else(|| header_u64(&headers, "x-ratelimit-remaining"))
        {
            self.remaining.set(left);
        }
        let body = answer.text().await.map_err(|e| no_answer(&what, &e))?;
        if (200..300).contains(&status) || accept.contains(&status) {
            return Ok(Reply {
                status,
                headers,
                body,
            });
        }
        let now = self.gate.now();
        let err = failure(&self.vendor, &what, status, &headers, &body, now);
        if let TrackerError::RateLimited {
            retry_after: Some(wait),
        } = &err
        {
            let until = now + chrono::Duration::from_std(*wait).unwrap_or_default();
            self.gate.block_until(until);
        }
        Err(err)
    }
}

/// The error for a non-2xx answer.
fn failure(
    vendor: &Vendor,
    what: &str,
    status: u16,
    headers: &HeaderMap,
    body: &str,
    now: DateTime<Utc>,
) -> TrackerError {
    let message = error_message(body);
    let name = vendor.name;
    match status {
        429 => {
            let wait = retry_after(headers)
                .or_else(|| {
                    let reset = header_u64(headers, "ratelimit-reset")
                        .or_else(|| header_u64(headers, "x-ratelimit-reset"))?;
                    let secs = (reset as i64 - now.timestamp()).max(1) as u64;
                    Some(Duration::from_secs(secs))
                })
                .unwrap_or(DEFAULT_WAIT)
                .min(MAX_WAIT);
            TrackerError::RateLimited {
                retry_after: Some(wait),
            }
        }
        401 => TrackerError::Unauthorized(format!(
            "{what}: {name} rejected the token ({message}); {}",
            vendor.token_hint
        )),
        403 => TrackerError::Unauthorized(format!(
            "{what}: {name} refused it ({message}); {}",
            vendor.token_hint
        )),
        404 | 410 => TrackerError::NotFound(format!("{what}: {message}")),
        s if s >= 500 => TrackerError::Unavailable(format!("{what}: HTTP {s} ({message})")),
        s => TrackerError::Invalid(format!("{what}: HTTP {s} ({message})")),
    }
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: u64 = value.trim().parse().ok()?;
    Some(Duration::from_secs(secs.max(1)))
}

/// The `message` (GitLab also says `error`) of an error body, or the body itself.
pub(crate) fn error_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let text = parsed.as_ref().and_then(|v| {
        let m = v.get("message").or_else(|| v.get("error"))?;
        Some(m.as_str().map_or_else(|| m.to_string(), str::to_string))
    });
    match text {
        Some(t) => t,
        None => {
            let trimmed: String = body.trim().chars().take(200).collect();
            if trimmed.is_empty() {
                "no message".to_string()
            } else {
                trimmed
            }
        }
    }
}

/// A pull (merge) request from a forge's JSON: its number under `number_key` and its
/// link under `url_key`.
pub fn forge_pull(
    value: &serde_json::Value,
    number_key: &str,
    url_key: &str,
    reused: bool,
) -> Result<super::PullRequest, TrackerError> {
    let number = value.get(number_key).and_then(serde_json::Value::as_u64);
    let url = value.get(url_key).and_then(serde_json::Value::as_str);
    match (number, url) {
        (Some(number), Some(url)) => Ok(super::PullRequest {
            url: url.to_string(),
            number,
            reused,
        }),
        _ => Err(TrackerError::Invalid(format!(
            "the pull request the forge returned has no {number_key} or {url_key}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vendor() -> Vendor {
        Vendor {
            name: "GitLab",
            token_hint: "the token needs the api scope".into(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_429_waits_retry_after_or_until_the_reset() {
        let now = Utc::now();
        let e = failure(
            &vendor(),
            "GET /x",
            429,
            &headers(&[("retry-after", "7")]),
            "",
            now,
        );
        assert!(
            matches!(e, TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 7)
        );
        let reset = (now.timestamp() + 30).to_string();
        let e = failure(
            &vendor(),
            "GET /x",
            429,
            &headers(&[("ratelimit-reset", &reset)]),
            "",
            now,
        );
        assert!(
            matches!(e, TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 30)
        );
    }

    #[test]
    fn statuses_map_onto_typed_errors_with_the_forge_message() {
        let h = HeaderMap::new();
        let now = Utc::now();
        let e = failure(
            &vendor(),
            "GET /x",
            401,
            &h,
            r#"{"message":"401 Unauthorized"}"#,
            now,
        );
        assert!(
            matches!(&e, TrackerError::Unauthorized(m) if m.contains("401 Unauthorized") && m.contains("api scope")),
            "{e}"
        );
        assert!(matches!(
            failure(&vendor(), "GET /x", 404, &h, r#"{"error":"404 Not Found"}"#, now),
            TrackerError::NotFound(m) if m.contains("404 Not Found")
        ));
        assert!(matches!(
            failure(&vendor(), "GET /x", 502, &h, "", now),
            TrackerError::Unavailable(_)
        ));
        assert!(matches!(
            failure(&vendor(), "PUT /x", 400, &h, "{}", now),
            TrackerError::Invalid(_)
        ));
    }
}

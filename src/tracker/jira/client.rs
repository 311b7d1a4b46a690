//! The HTTP edge of the Jira adapter: authentication (Basic e-mail:token on Cloud,
//! a bearer personal access token on Data Center), timeouts, rate-limit headers,
//! and HTTP errors mapped onto [`TrackerError`] with Jira's own error text.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::tracker::http::{header_u64, no_answer, ExchangeObserver, HttpClient, Remaining};
use crate::tracker::TrackerError;

/// Per-request timeout (connect, send, and read the whole answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How requests authenticate.
#[derive(Clone)]
pub enum Auth {
    /// Jira Cloud: Basic `email:api-token`.
    Basic {
        /// The account's e-mail address.
        email: String,
        /// The API token.
        token: String,
    },
    /// Jira Data Center: `Authorization: Bearer <personal access token>`.
    Bearer(String),
}

/// Jira's part of the HTTP layer: an authenticated connection to one Jira site.
pub struct JiraClient {
    http: HttpClient,
    base: String,
    api: String,
    auth: Auth,
    /// Where the credentials come from, for error messages (`$JIRA_EMAIL / $JIRA_TOKEN`).
    credentials: String,
    project: String,
    remaining: Remaining,
    /// Set when an answer said no requests are left (`X-RateLimit-Remaining: 0`)
    /// until `X-RateLimit-Reset`: requests before then are not sent.
    not_before: Mutex<Option<DateTime<Utc>>>,
}

impl std::fmt::Debug for JiraClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("JiraClient")
            .field("base", &self.base)
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl JiraClient {
    /// A client for the site at `base`, REST version `version` (2 or 3).
    pub fn new(
        base: &str,
        version: u8,
        auth: Auth,
        credentials: String,
        project: &str,
    ) -> Result<Self, TrackerError> {
        let http = HttpClient::new(REQUEST_TIMEOUT, HeaderMap::new())
            .map_err(|e| TrackerError::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(JiraClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            api: format!("/rest/api/{version}"),
            auth,
            credentials,
            project: project.to_string(),
            remaining: Remaining::default(),
            not_before: Mutex::new(None),
        })
    }

    /// Report every exchange to `observer`.
    pub fn observe(&mut self, observer: ExchangeObserver) {
        self.http.set_observer(Some(observer));
    }

    /// The site's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `X-RateLimit-Remaining` as last seen.
    pub fn remaining(&self) -> Option<u64> {
        self.remaining.get()
    }

    /// `GET <api>path` and decode the JSON answer.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, TrackerError> {
        let text = self.send(Method::GET, path, None).await?;
        decode(&text, "GET", path)
    }

    /// `POST <api>path` with a JSON body; the answer decoded (`Value::Null` for 204).
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, TrackerError> {
        let text = self.send(Method::POST, path, Some(body)).await?;
        let text = if text.trim().is_empty() {
            "null"
        } else {
            &text
        };
        decode(text, "POST", path)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<String, TrackerError> {
        let url = format!("{}{}{path}", self.base, self.api);
        let what = format!("{method} {url}");
        let wait = self
            .not_before
            .lock()
            .expect("rate-limit gate")
            .and_then(|t| (t - Utc::now()).to_std().ok());
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            return Err(TrackerError::RateLimited {
                retry_after: Some(Duration::from_secs(wait.as_secs().max(1))),
            });
        }
        let authenticated = |request: reqwest::RequestBuilder| {
            let request = request.header(reqwest::header::ACCEPT, "application/json");
            match &self.auth {
                Auth::Basic { email, token } => request.basic_auth(email, Some(token)),
                Auth::Bearer(token) => request.bearer_auth(token),
            }
        };
        let answer = match self.http.send(&method, &url, body, authenticated).await {
            Ok(answer) => answer,
            Err(e) => {
                self.http.observe_no_answer(&method, &url, body);
                return Err(no_answer(&what, &e));
            }
        };
        // Always a valid code: reqwest parsed it.
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let headers = answer.headers.clone();
        if let Some(n) = header_u64(&headers, "x-ratelimit-remaining") {
            self.remaining.set(n);
            let reset = if n == 0 { reset_at(&headers) } else { None };
            *self.not_before.lock().expect("rate-limit gate") = reset;
        }
        let text = answer.text().await.map_err(|e| no_answer(&what, &e))?;
        if status.is_success() {
            return Ok(text);
        }
        Err(self.http_error(status, &headers, &text, &what))
    }

    fn http_error(
        &self,
        status: StatusCode,
        headers: &reqwest::header::HeaderMap,
        text: &str,
        what: &str,
    ) -> TrackerError {
        let said = jira_said(text);
        let retry_after = header_u64(headers, "retry-after")
            .map(Duration::from_secs)
            .or_else(|| {
                let wait = (reset_at(headers)? - Utc::now()).to_std().ok()?;
                Some(Duration::from_secs(wait.as_secs().max(1)))
            });
        match status.as_u16() {
            401 => TrackerError::Unauthorized(format!(
                "{what}: Jira rejected the credentials from {} for project {}: {said}",
                self.credentials, self.project
            )),
            403 => TrackerError::Unauthorized(format!(
                "{what}: the account from {} may not do this in project {} (it needs \
                 Browse projects, Add comments and Transition issues): {said}",
                self.credentials, self.project
            )),
            404 => TrackerError::NotFound(format!("{what}: {said}")),
            429 => TrackerError::RateLimited { retry_after },
            503 if retry_after.is_some() => TrackerError::RateLimited { retry_after },
            500..=599 => TrackerError::Unavailable(format!("{what}: HTTP {status}: {said}")),
            _ => TrackerError::Invalid(format!("{what}: HTTP {status}: {said}")),
        }
    }
}

fn decode<T: DeserializeOwned>(text: &str, method: &str, path: &str) -> Result<T, TrackerError> {
    serde_json::from_str(text).map_err(|e| {
        TrackerError::Invalid(format!(
            "{method} {path}: the answer is not the JSON Jira sends: {e}"
        ))
    })
}

/// `X-RateLimit-Reset`: when the window resets. Jira Cloud sends an ISO 8601 time
/// (`2026-12-01T12:30Z`); RFC 3339 is accepted too.
fn reset_at(headers: &reqwest::header::HeaderMap) -> Option<DateTime<Utc>> {
    let value = headers.get("x-ratelimit-reset")?.to_str().ok()?.trim();
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%MZ")
                .ok()
                .map(|t| t.and_utc())
        })
}

/// Jira's own error text: `errorMessages` and `errors` of its error body, or the
/// body itself (shortened) when it is not that JSON.
pub fn jira_said(text: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        let mut parts: Vec<String> = value
            .get("errorMessages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_string))
            .collect();
        if let Some(errors) = value.get("errors").and_then(Value::as_object) {
            for (field, message) in errors {
                let message = message.as_str().map_or(message.to_string(), str::to_string);
                parts.push(format!("{field}: {message}"));
            }
        }
        if !parts.is_empty() {
            return parts.join("; ");
        }
    }
    let text = text.trim();
    if text.is_empty() {
        return "(no details)".to_string();
    }
    text.chars().take(300).collect()
}

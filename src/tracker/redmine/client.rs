//! The HTTP edge of the Redmine adapter: authenticated JSON requests with timeouts,
//! and transport and status errors mapped onto [`TrackerError`].

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::wire::http_error;
use crate::tracker::http::{header_u64, no_answer, HttpClient};
use crate::tracker::TrackerError;

/// Per-request timeout (connect, send, and read the whole answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Redmine's part of the HTTP layer: an authenticated connection to one server.
#[derive(Clone)]
pub struct RedmineClient {
    http: HttpClient,
    base: String,
    key: String,
    key_env: String,
}

impl std::fmt::Debug for RedmineClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("RedmineClient")
            .field("base", &self.base)
            .field("key_env", &self.key_env)
            .finish_non_exhaustive()
    }
}

impl RedmineClient {
    /// A client for the server at `base` (no trailing `/`) using `key`, read from `key_env`.
    pub fn new(base: &str, key: String, key_env: &str) -> Result<Self, TrackerError> {
        let http = HttpClient::new(REQUEST_TIMEOUT, HeaderMap::new())
            .map_err(|e| TrackerError::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(RedmineClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            key,
            key_env: key_env.to_string(),
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path` (relative to the base, with its query) and decode the JSON answer.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, TrackerError> {
        let text = self.send(Method::GET, path, None).await?;
        serde_json::from_str(&text).map_err(|e| {
            TrackerError::Invalid(format!(
                "GET {path}: the answer is not the JSON Redmine sends: {e}"
            ))
        })
    }

    /// `PUT path` with a JSON body; Redmine answers 204 without a body.
    pub async fn put(&self, path: &str, body: &serde_json::Value) -> Result<(), TrackerError> {
        self.send(Method::PUT, path, Some(body)).await.map(drop)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<String, TrackerError> {
        let what = format!("{method} {}{path}", self.base);
        let url = format!("{}{path}", self.base);
        let answer = self
            .http
            .send(&method, &url, body, |request| {
                request
                    .header("X-Redmine-API-Key", &self.key)
                    .header(reqwest::header::ACCEPT, "application/json")
            })
            .await
            .map_err(|e| no_answer(&what, &e))?;
        let status = answer.status;
        let retry_after = (status == StatusCode::TOO_MANY_REQUESTS.as_u16())
            .then(|| header_u64(&answer.headers, "retry-after").map(Duration::from_secs))
            .flatten();
        let text = answer.text().await.map_err(|e| no_answer(&what, &e))?;
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            Err(http_error(status, &text, retry_after, &what, &self.key_env))
        }
    }
}

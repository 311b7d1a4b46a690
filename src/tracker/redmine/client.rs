//! The HTTP edge of the Redmine adapter: authenticated JSON requests with timeouts,
//! and transport and status errors mapped onto [`TrackerError`].

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::wire::http_error;
use crate::tracker::TrackerError;

/// Per-request timeout (connect, send, and read the whole answer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect timeout, shorter so an unreachable server is reported quickly.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An authenticated connection to one Redmine server.
#[derive(Clone)]
pub struct RestClient {
    http: reqwest::Client,
    base: String,
    key: String,
    key_env: String,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("RestClient")
            .field("base", &self.base)
            .field("key_env", &self.key_env)
            .finish_non_exhaustive()
    }
}

impl RestClient {
    /// A client for the server at `base` (no trailing `/`) using `key`, read from `key_env`.
    pub fn new(base: &str, key: String, key_env: &str) -> Result<Self, TrackerError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("sortie/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TrackerError::Invalid(format!("cannot build an HTTP client: {e}")))?;
        Ok(RestClient {
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
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("X-Redmine-API-Key", &self.key)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| transport(&what, &e))?;
        let status = response.status();
        let retry_after = retry_after(&response);
        let text = response.text().await.map_err(|e| transport(&what, &e))?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(http_error(
                status.as_u16(),
                &text,
                retry_after,
                &what,
                &self.key_env,
            ))
        }
    }
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// A request that got no HTTP answer: the server may be down, slow or unreachable.
fn transport(what: &str, e: &reqwest::Error) -> TrackerError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "failed"
    };
    // reqwest's Display hides the cause (connection refused, DNS, ...); add the chain.
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    TrackerError::Unavailable(format!("{what}: {kind}: {detail}"))
}

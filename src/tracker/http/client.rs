//! The one HTTP client: built with sortie's user agent and timeouts, sending one
//! request at a time and showing every answer to the observer.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::observer::{Exchange, ExchangeObserver};
use crate::tracker::TrackerError;

/// Longest wait for a connection, whatever the request timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP client for one tracker, with an optional observer.
#[derive(Clone)]
pub(crate) struct HttpClient {
    http: reqwest::Client,
    observer: Option<ExchangeObserver>,
}

/// The status and headers of an answer, its body not read yet.
pub(crate) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    response: reqwest::Response,
}

impl Answer {
    /// Read the body as text.
    pub async fn text(self) -> Result<String, reqwest::Error> {
        self.response.text().await
    }
}

/// An answer with its body read.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Body text.
    pub body: String,
}

impl Reply {
    /// Response header `name`, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body decoded as `T`; `what` names the request in the error.
    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, TrackerError> {
        serde_json::from_str(&self.body)
            .map_err(|e| TrackerError::Invalid(format!("{what}: the answer is unreadable: {e}")))
    }
}

impl HttpClient {
    /// A client with a per-request `timeout` (the connect timeout is the shorter of it
    /// and 10 s), sending `headers` with every request.
    pub fn new(timeout: Duration, headers: HeaderMap) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("sortie/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .timeout(timeout)
            .connect_timeout(timeout.min(CONNECT_TIMEOUT))
            .build()?;
        Ok(HttpClient {
            http,
            observer: None,
        })
    }

    /// Show every response to `observer` (contract tests, diagnostics).
    pub fn with_observer(mut self, observer: Option<ExchangeObserver>) -> Self {
        self.set_observer(observer);
        self
    }

    /// Show every response from now on to `observer`.
    pub fn set_observer(&mut self, observer: Option<ExchangeObserver>) {
        self.observer = observer;
    }

    /// Send `method url` with the headers `headers` adds, then `body` as JSON; the
    /// observer sees the answer's status and headers.
    pub async fn send(
        &self,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        headers: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<Answer, reqwest::Error> {
        let mut request = headers(self.http.request(method.clone(), url));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        self.observe(|| Exchange::new(method, url, body, status, &headers));
        Ok(Answer {
            status,
            headers,
            response,
        })
    }

    /// Show the observer a request that got no answer (status 0).
    pub fn observe_no_answer(&self, method: &Method, url: &str, body: Option<&Value>) {
        self.observe(|| Exchange::new(method, url, body, 0, &HeaderMap::new()));
    }

    fn observe(&self, exchange: impl FnOnce() -> Exchange) {
        if let Some(observer) = &self.observer {
            observer(&exchange());
        }
    }
}

/// A request that got no HTTP answer: the server may be down, slow or unreachable.
pub(crate) fn no_answer(what: &str, e: &reqwest::Error) -> TrackerError {
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

/// Per-request timeout of every adapter by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Wait before the one retry after a server or connection error, by default.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// The `Debug` form of an adapter's options `name`: its timeouts and the file it keeps
/// state in (`field`), never the clock or the observer.
pub(crate) fn fmt_options(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    (timeout, retry_backoff): (Duration, Duration),
    (field, file): (&str, &Option<std::path::PathBuf>),
) -> std::fmt::Result {
    f.debug_struct(name)
        .field("timeout", &timeout)
        .field("retry_backoff", &retry_backoff)
        .field(field, file)
        .finish_non_exhaustive()
}

//! The request observer: every response an adapter gets, shown to a callback
//! (contract tests, diagnostics).

use std::sync::Arc;

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::Value;

/// One request and the response headers it got, as shown to an [`ExchangeObserver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// HTTP method.
    pub method: String,
    /// Full request URL.
    pub url: String,
    /// The JSON body sent, if any.
    pub body: Option<Value>,
    /// Response status (0 when no answer came).
    pub status: u16,
    /// Response headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Exchange {
    /// The exchange of `method url` (with `body`) answered `status` with `headers`.
    pub(crate) fn new(
        method: &Method,
        url: &str,
        body: Option<&Value>,
        status: u16,
        headers: &HeaderMap,
    ) -> Self {
        Exchange {
            method: method.to_string(),
            url: url.to_string(),
            body: body.cloned(),
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
        }
    }

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

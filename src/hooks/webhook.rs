//! The webhook sink: POSTs the payload as JSON, signed with HMAC-SHA256 of the body under a
//! secret read from an environment variable at delivery time.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Event, HookError, HookSink};

/// Bytes of a failed response's body kept for the error message.
const BODY_TAIL: usize = 512;

/// Looks up an environment variable (injected so tests need not touch the process env).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The `X-Sortie-Signature-256` value for `body` under `secret`: `sha256=<hex HMAC-SHA256>`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail here.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// POSTs each event to a URL.
#[derive(Clone)]
pub struct WebhookSink {
    url: String,
    secret_env: Option<String>,
    env: EnvLookup,
    timeout: Duration,
    client: Result<reqwest::Client, String>,
}

impl std::fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSink")
            .field("url", &self.url)
            .field("secret_env", &self.secret_env)
            .finish_non_exhaustive()
    }
}

impl WebhookSink {
    /// A sink POSTing to `url`, each request bounded by `timeout`; unsigned until
    /// [`WebhookSink::with_secret_env`]. Redirects are not followed.
    pub fn new(url: impl Into<String>, timeout: Duration) -> WebhookSink {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("sortie/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {err}"));
        WebhookSink {
            url: url.into(),
            secret_env: None,
            env: Arc::new(|name| std::env::var(name).ok()),
            timeout,
            client,
        }
    }

    /// Sign with the secret in environment variable `name`, read through `env` at each
    /// delivery (so a rotated secret takes effect without a restart).
    pub fn with_secret_env(mut self, name: impl Into<String>, env: EnvLookup) -> WebhookSink {
        self.secret_env = Some(name.into());
        self.env = env;
        self
    }

    /// The receiver's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[async_trait]
impl HookSink for WebhookSink {
    async fn deliver(&self, event: &Event) -> Result<(), HookError> {
        let client = self
            .client
            .as_ref()
            .map_err(|err| HookError::Sink(err.clone().into()))?;
        let body = event.body();
        let mut request = client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Sortie-Event", &event.name)
            .header("X-Sortie-Delivery", &event.delivery_id);
        if let Some(name) = &self.secret_env {
            let secret = (self.env)(name).ok_or_else(|| HookError::MissingSecret(name.clone()))?;
            request = request.header(
                "X-Sortie-Signature-256",
                signature(secret.as_bytes(), body.as_bytes()),
            );
        }
        let mut response = request.body(body).send().await.map_err(|err| {
            if err.is_timeout() {
                HookError::TimedOut(self.timeout)
            } else {
                HookError::Request(err)
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let mut kept = Vec::new();
        while kept.len() < BODY_TAIL {
            match response.chunk().await {
                Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                _ => break,
            }
        }
        kept.truncate(BODY_TAIL);
        Err(HookError::Status {
            status: status.as_u16(),
            body: String::from_utf8_lossy(&kept).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_published_hmac_vector() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}

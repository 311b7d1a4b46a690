//! Webhook deliveries, for every vendor the daemon accepts them from (`POST
//! /hooks/{vendor}`): which config key names the secret's variable, which header carries
//! the token or signature, and the vendor's own check, which lives with its adapter
//! (`github::webhook`, `gitlab::webhook`, ...). A verified delivery only hints that the
//! board changed: the daemon ticks, and the tick reads the board.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// A vendor whose webhook deliveries the daemon accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    Github,
    /// `X-Gitlab-Token`: the secret itself.
    Gitlab,
    /// `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`.
    Gitea,
    /// `Linear-Signature: <hex HMAC-SHA256>`, and a `webhookTimestamp` under a minute old.
    Linear,
    /// `X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body>`.
    Jira,
}

impl Vendor {
    /// Every vendor, in the order the daemon's routes list them.
    pub const ALL: [Vendor; 5] = [
        Vendor::Github,
        Vendor::Gitlab,
        Vendor::Gitea,
        Vendor::Linear,
        Vendor::Jira,
    ];

    /// The last segment of its route, `/hooks/{path}`.
    pub fn path(self) -> &'static str {
        match self {
            Vendor::Github => "github",
            Vendor::Gitlab => "gitlab",
            Vendor::Gitea => "gitea",
            Vendor::Linear => "linear",
            Vendor::Jira => "jira",
        }
    }

    /// Its name in messages.
    pub fn display(self) -> &'static str {
        match self {
            Vendor::Github => "GitHub",
            Vendor::Gitlab => "GitLab",
            Vendor::Gitea => "Gitea",
            Vendor::Linear => "Linear",
            Vendor::Jira => "Jira",
        }
    }

    /// The config key naming the variable that holds its secret.
    pub fn secret_key(self) -> &'static str {
        match self {
            Vendor::Github => "http.github_webhook_secret_env",
            Vendor::Gitlab => "http.gitlab_webhook_secret_env",
            Vendor::Gitea => "http.gitea_webhook_secret_env",
            Vendor::Linear => "http.linear_webhook_secret_env",
            Vendor::Jira => "http.jira_webhook_secret_env",
        }
    }

    /// The variable `http` names for its secret, if configured.
    pub fn secret_env(self, http: &crate::config::HttpConfig) -> Option<&str> {
        match self {
            Vendor::Github => http.github_webhook_secret_env.as_deref(),
            Vendor::Gitlab => http.gitlab_webhook_secret_env.as_deref(),
            Vendor::Gitea => http.gitea_webhook_secret_env.as_deref(),
            Vendor::Linear => http.linear_webhook_secret_env.as_deref(),
            Vendor::Jira => http.jira_webhook_secret_env.as_deref(),
        }
    }

    /// The (lower-case) header carrying the token or signature.
    pub fn header(self) -> &'static str {
        match self {
            Vendor::Github => "x-hub-signature-256",
            Vendor::Gitlab => "x-gitlab-token",
            Vendor::Gitea => "x-gitea-signature",
            Vendor::Linear => "linear-signature",
            Vendor::Jira => "x-hub-signature",
        }
    }

    /// Check one delivery: `header` is the value of [`Vendor::header`], if sent. The
    /// error says why it is refused.
    pub fn verify(
        self,
        secret: &str,
        header: Option<&str>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<(), String> {
        let secret_bytes = secret.as_bytes();
        match self {
            Vendor::Github => super::github::webhook::verify(secret_bytes, header, body)
                .map_err(|e| e.to_string()),
            Vendor::Gitlab => {
                super::gitlab::webhook::verify(secret, header).map_err(|e| e.to_string())
            }
            Vendor::Gitea => {
                super::gitea::webhook::verify(secret, header, body).map_err(|e| e.to_string())
            }
            Vendor::Linear => super::linear::webhook::verify(secret_bytes, header, body, now)
                .map_err(|e| e.to_string()),
            Vendor::Jira => {
                super::jira::webhook::verify(secret_bytes, header, body).map_err(|e| e.to_string())
            }
        }
    }
}

/// Why a GitLab or Gitea delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The header carrying the token or signature is absent.
    #[error("missing {0} header")]
    Missing(&'static str),
    /// The signature is not hex.
    #[error("malformed {0} header (expected hex HMAC-SHA256)")]
    Malformed(&'static str),
    /// The token or signature does not match the configured secret.
    #[error("{0} does not match the configured secret")]
    Mismatch(&'static str),
}

/// Why a `sha256=<hex>` signature (GitHub's `X-Hub-Signature-256`, Jira's
/// `X-Hub-Signature`) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubSignatureError {
    /// No header (named), or not `sha256=<hex>`.
    #[error("missing or malformed {0} (expected sha256=<hex>)")]
    Malformed(&'static str),
    /// Not the body's HMAC under the secret.
    #[error("signature does not match")]
    Mismatch,
}

/// Check `value`, the `header` a delivery carries (if any): `sha256=<hex HMAC-SHA256 of
/// the body>`.
pub(crate) fn verify_hub_signature(
    header: &'static str,
    secret: &[u8],
    value: Option<&str>,
    body: &[u8],
) -> Result<(), HubSignatureError> {
    let expected = value
        .map(str::trim)
        .and_then(|v| v.strip_prefix("sha256="))
        .and_then(|v| hex::decode(v).ok())
        .ok_or(HubSignatureError::Malformed(header))?;
    if hmac_sha256_matches(secret, body, &expected) {
        Ok(())
    } else {
        Err(HubSignatureError::Mismatch)
    }
}

/// Whether `expected` is the HMAC-SHA256 of `body` keyed with `secret` (compared in
/// constant time by the MAC).
pub(crate) fn hmac_sha256_matches(secret: &[u8], body: &[u8], expected: &[u8]) -> bool {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(expected).is_ok()
}

/// The hex HMAC-SHA256 of `body` keyed with `secret` (tests, and signing helpers).
pub fn hmac_sha256_hex(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `a == b` in time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vendor_has_its_own_route_key_and_header() {
        let paths: std::collections::BTreeSet<_> = Vendor::ALL.iter().map(|v| v.path()).collect();
        let headers: std::collections::BTreeSet<_> =
            Vendor::ALL.iter().map(|v| v.header()).collect();
        assert_eq!(paths.len(), 5);
        assert_eq!(headers.len(), 5);
        for v in Vendor::ALL {
            assert_eq!(
                v.secret_key(),
                format!("http.{}_webhook_secret_env", v.path())
            );
        }
    }

    #[test]
    fn a_signed_delivery_passes_for_every_vendor_and_a_wrong_secret_does_not() {
        let now = Utc::now();
        let body = format!(r#"{{"webhookTimestamp":{}}}"#, now.timestamp_millis());
        let body = body.as_bytes();
        let hex = hmac_sha256_hex(b"s3cret", body);
        let signed = |v: Vendor| match v {
            Vendor::Github | Vendor::Jira => format!("sha256={hex}"),
            Vendor::Gitlab => "s3cret".to_string(),
            Vendor::Gitea | Vendor::Linear => hex.clone(),
        };
        for v in Vendor::ALL {
            let header = signed(v);
            assert_eq!(
                v.verify("s3cret", Some(&header), body, now),
                Ok(()),
                "{v:?}"
            );
            assert!(
                v.verify("other", Some(&header), body, now).is_err(),
                "{v:?}"
            );
            assert!(v.verify("s3cret", None, body, now).is_err(), "{v:?}");
        }
    }
}

//! Verifying the webhook deliveries of GitLab and Gitea (daemon refresh hints): GitLab
//! sends the shared secret itself in `X-Gitlab-Token`, Gitea signs the body with it
//! (`X-Gitea-Signature`, hex HMAC-SHA256). Pure: the daemon passes the header and body.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why a delivery is refused.
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

/// The GitLab header carrying the secret token.
pub const GITLAB_HEADER: &str = "x-gitlab-token";
/// The Gitea header carrying the body's signature.
pub const GITEA_HEADER: &str = "x-gitea-signature";

/// A GitLab delivery: `X-Gitlab-Token` equals `secret`, compared in constant time.
pub fn verify_gitlab(secret: &str, token: Option<&str>) -> Result<(), WebhookError> {
    let token = token.ok_or(WebhookError::Missing("X-Gitlab-Token"))?;
    if constant_time_eq(token.as_bytes(), secret.as_bytes()) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch("X-Gitlab-Token"))
    }
}

/// A Gitea delivery: `X-Gitea-Signature` is the hex HMAC-SHA256 of `body` keyed with
/// `secret` (checked in constant time by the MAC).
pub fn verify_gitea(
    secret: &str,
    signature: Option<&str>,
    body: &[u8],
) -> Result<(), WebhookError> {
    let signature = signature.ok_or(WebhookError::Missing("X-Gitea-Signature"))?;
    let signature =
        hex::decode(signature.trim()).map_err(|_| WebhookError::Malformed("X-Gitea-Signature"))?;
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|_| WebhookError::Mismatch("X-Gitea-Signature"))?;
    mac.update(body);
    mac.verify_slice(&signature)
        .map_err(|_| WebhookError::Mismatch("X-Gitea-Signature"))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_wants_the_exact_token() {
        assert_eq!(verify_gitlab("s3cret", Some("s3cret")), Ok(()));
        assert_eq!(
            verify_gitlab("s3cret", Some("s3cre")),
            Err(WebhookError::Mismatch("X-Gitlab-Token"))
        );
        assert_eq!(
            verify_gitlab("s3cret", None),
            Err(WebhookError::Missing("X-Gitlab-Token"))
        );
    }

    #[test]
    fn gitea_wants_the_hmac_of_the_body() {
        let body = br#"{"action":"label_updated"}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body);
        let good = hex::encode(mac.finalize().into_bytes());
        assert_eq!(verify_gitea("s3cret", Some(&good), body), Ok(()));
        assert_eq!(
            verify_gitea("other", Some(&good), body),
            Err(WebhookError::Mismatch("X-Gitea-Signature"))
        );
        assert_eq!(
            verify_gitea("s3cret", Some(&good), b"{}"),
            Err(WebhookError::Mismatch("X-Gitea-Signature"))
        );
        assert_eq!(
            verify_gitea("s3cret", Some("zz"), body),
            Err(WebhookError::Malformed("X-Gitea-Signature"))
        );
        assert_eq!(
            verify_gitea("s3cret", None, body),
            Err(WebhookError::Missing("X-Gitea-Signature"))
        );
    }

    #[test]
    fn gitea_signature_matches_a_published_hmac_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let sig = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(
            verify_gitea("Jefe", Some(sig), b"what do ya want for nothing?"),
            Ok(())
        );
    }
}

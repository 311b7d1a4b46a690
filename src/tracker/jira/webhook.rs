//! Verifying Jira webhook deliveries: `X-Hub-Signature: sha256=<hex HMAC-SHA256 of
//! the body>` with the webhook's secret. Pure, so the daemon's handler stays small.

use crate::tracker::webhook::{hmac_sha256_hex, verify_hub_signature};

/// Why a delivery was not accepted.
pub use crate::tracker::webhook::HubSignatureError as WebhookError;

/// Check `signature` (the `X-Hub-Signature` header value, if any) against `body`.
pub fn verify(secret: &[u8], signature: Option<&str>, body: &[u8]) -> Result<(), WebhookError> {
    verify_hub_signature("X-Hub-Signature", secret, signature, body)
}

/// The header value Jira would send for `body` (tests, and people checking a setup).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hmac_sha256_hex(secret, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correct_signature_passes_and_anything_else_does_not() {
        let body = br#"{"webhookEvent":"jira:issue_updated"}"#;
        let good = sign(b"s3cret", body);
        assert_eq!(verify(b"s3cret", Some(&good), body), Ok(()));
        assert_eq!(
            verify(b"other", Some(&good), body),
            Err(WebhookError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", Some(&good), b"{}"),
            Err(WebhookError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", None, body),
            Err(WebhookError::Malformed("X-Hub-Signature"))
        );
        assert_eq!(
            verify(b"s3cret", Some("sha1=abcd"), body),
            Err(WebhookError::Malformed("X-Hub-Signature"))
        );
        assert_eq!(
            verify(b"s3cret", Some("sha256=zz"), body),
            Err(WebhookError::Malformed("X-Hub-Signature"))
        );
    }

    #[test]
    fn a_known_vector_matches() {
        // HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
        assert_eq!(
            sign(b"key", b"The quick brown fox jumps over the lazy dog"),
            "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }
}

//! Verifying GitHub webhook deliveries: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of
//! the body>` with the webhook's secret. Pure: the daemon passes the header and body.

use crate::tracker::webhook::hmac_sha256_matches;

/// Why a delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No `X-Hub-Signature-256` header, or not `sha256=<hex>`.
    #[error("missing or malformed X-Hub-Signature-256")]
    Malformed,
    /// The signature is not the body's HMAC under the secret.
    #[error("signature does not match")]
    Mismatch,
}

/// Check `signature` (the `X-Hub-Signature-256` header value, if any) against `body`.
pub fn verify(secret: &[u8], signature: Option<&str>, body: &[u8]) -> Result<(), WebhookError> {
    let expected = signature
        .and_then(|v| v.strip_prefix("sha256="))
        .and_then(|v| hex::decode(v).ok())
        .ok_or(WebhookError::Malformed)?;
    if hmac_sha256_matches(secret, body, &expected) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::webhook::hmac_sha256_hex;

    #[test]
    fn the_body_hmac_passes_and_anything_else_does_not() {
        let body = br#"{"action":"labeled"}"#;
        let good = format!("sha256={}", hmac_sha256_hex(b"s3cret", body));
        assert_eq!(verify(b"s3cret", Some(&good), body), Ok(()));
        assert_eq!(
            verify(b"other", Some(&good), body),
            Err(WebhookError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", Some(&good), b"{}"),
            Err(WebhookError::Mismatch)
        );
        assert_eq!(verify(b"s3cret", None, body), Err(WebhookError::Malformed));
        assert_eq!(
            verify(b"s3cret", Some("sha256=zz"), body),
            Err(WebhookError::Malformed)
        );
        assert_eq!(
            verify(b"s3cret", Some("sha1=abcd"), body),
            Err(WebhookError::Malformed)
        );
    }
}

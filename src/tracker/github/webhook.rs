//! Verifying GitHub webhook deliveries: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of
//! the body>` with the webhook's secret. Pure: the daemon passes the header and body.

use crate::tracker::webhook::{verify_hub_signature, HubSignatureError};

/// Check `signature` (the `X-Hub-Signature-256` header value, if any) against `body`.
pub fn verify(
    secret: &[u8],
    signature: Option<&str>,
    body: &[u8],
) -> Result<(), HubSignatureError> {
    verify_hub_signature("X-Hub-Signature-256", secret, signature, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::webhook::hmac_sha256_hex;

    #[test]
    fn a_refusal_names_githubs_header() {
        let body = br#"{"action":"labeled"}"#;
        let good = format!("sha256={}", hmac_sha256_hex(b"s3cret", body));
        assert_eq!(verify(b"s3cret", Some(&good), body), Ok(()));
        assert_eq!(
            verify(b"other", Some(&good), body),
            Err(HubSignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"s3cret", Some("sha256=zz"), body),
            Err(HubSignatureError::Malformed("X-Hub-Signature-256"))
        );
    }
}

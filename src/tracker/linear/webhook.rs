//! Verifying a Linear webhook delivery: `Linear-Signature` is the hex HMAC-SHA256 of
//! the raw body with the webhook's signing secret, and the body's `webhookTimestamp`
//! (epoch milliseconds) must be at most a minute old, so a captured delivery cannot
//! be replayed later. A verified delivery only hints that the board changed.

use crate::tracker::webhook::{hmac_sha256_hex, hmac_sha256_matches};
use chrono::{DateTime, Utc};

/// How old a delivery may be.
pub const MAX_AGE_MS: i64 = 60_000;

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// No `Linear-Signature` header, or not hex.
    #[error("missing or malformed Linear-Signature header")]
    MissingSignature,
    /// The signature does not match the body and the secret.
    #[error("signature does not match")]
    BadSignature,
    /// The body is not JSON with a numeric `webhookTimestamp`.
    #[error("the body has no webhookTimestamp (epoch milliseconds)")]
    MissingTimestamp,
    /// `webhookTimestamp` is more than a minute away from now.
    #[error("webhookTimestamp is {age_ms} ms old; deliveries older than a minute are refused")]
    Stale {
        /// How old it is (negative: from the future).
        age_ms: i64,
    },
}

/// Check one delivery: `signature` is the `Linear-Signature` header value.
pub fn verify(
    secret: &[u8],
    signature: Option<&str>,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<(), WebhookError> {
    let signature = signature
        .and_then(|s| hex::decode(s.trim()).ok())
        .ok_or(WebhookError::MissingSignature)?;
    if !hmac_sha256_matches(secret, body, &signature) {
        return Err(WebhookError::BadSignature);
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| WebhookError::MissingTimestamp)?;
    let sent = value
        .get("webhookTimestamp")
        .and_then(|t| t.as_i64().or_else(|| t.as_f64().map(|f| f as i64)))
        .ok_or(WebhookError::MissingTimestamp)?;
    let age_ms = now.timestamp_millis() - sent;
    if age_ms.abs() > MAX_AGE_MS {
        return Err(WebhookError::Stale { age_ms });
    }
    Ok(())
}

/// The `Linear-Signature` value for `body` (tests, tools).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    hmac_sha256_hex(secret, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(ts: i64) -> Vec<u8> {
        format!(r#"{{"action":"update","type":"Issue","webhookTimestamp":{ts}}}"#).into_bytes()
    }

    #[test]
    fn a_fresh_signed_delivery_passes() {
        let now = Utc::now();
        let b = body(now.timestamp_millis() - 5_000);
        let sig = sign(b"s3cret", &b);
        assert_eq!(verify(b"s3cret", Some(&sig), &b, now), Ok(()));
    }

    #[test]
    fn wrong_secret_tampered_body_or_missing_header_are_refused() {
        let now = Utc::now();
        let b = body(now.timestamp_millis());
        let sig = sign(b"s3cret", &b);
        assert_eq!(
            verify(b"other", Some(&sig), &b, now),
            Err(WebhookError::BadSignature)
        );
        let mut tampered = b.clone();
        tampered[3] ^= 1;
        assert_eq!(
            verify(b"s3cret", Some(&sig), &tampered, now),
            Err(WebhookError::BadSignature)
        );
        assert_eq!(
            verify(b"s3cret", None, &b, now),
            Err(WebhookError::MissingSignature)
        );
        assert_eq!(
            verify(b"s3cret", Some("zz"), &b, now),
            Err(WebhookError::MissingSignature)
        );
    }

    #[test]
    fn a_delivery_older_than_a_minute_is_refused_even_when_signed() {
        let now = Utc::now();
        let b = body(now.timestamp_millis() - 61_000);
        let sig = sign(b"s3cret", &b);
        assert!(matches!(
            verify(b"s3cret", Some(&sig), &b, now),
            Err(WebhookError::Stale { age_ms }) if age_ms >= 61_000
        ));
        let b = br#"{"action":"update"}"#;
        let sig = sign(b"s3cret", b);
        assert_eq!(
            verify(b"s3cret", Some(&sig), b, now),
            Err(WebhookError::MissingTimestamp)
        );
    }
}

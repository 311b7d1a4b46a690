//! Verifying Gitea webhook deliveries: Gitea signs the body with the shared secret
//! (`X-Gitea-Signature`, hex HMAC-SHA256). Pure: the daemon passes the header and body.

use crate::tracker::webhook::{hmac_sha256_matches, WebhookError};

/// A delivery: `X-Gitea-Signature` is the hex HMAC-SHA256 of `body` keyed with `secret`
/// (checked in constant time by the MAC).
pub fn verify(secret: &str, signature: Option<&str>, body: &[u8]) -> Result<(), WebhookError> {
    let signature = signature.ok_or(WebhookError::Missing("X-Gitea-Signature"))?;
    let signature =
        hex::decode(signature.trim()).map_err(|_| WebhookError::Malformed("X-Gitea-Signature"))?;
    if hmac_sha256_matches(secret.as_bytes(), body, &signature) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch("X-Gitea-Signature"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    #[test]
    fn gitea_wants_the_hmac_of_the_body() {
        let body = br#"{"action":"label_updated"}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body);
        let good = hex::encode(mac.finalize().into_bytes());
        assert_eq!(verify("s3cret", Some(&good), body), Ok(()));
        assert_eq!(
            verify("other", Some(&good), body),
            Err(WebhookError::Mismatch("X-Gitea-Signature"))
        );
        assert_eq!(
            verify("s3cret", Some(&good), b"{}"),
            Err(WebhookError::Mismatch("X-Gitea-Signature"))
        );
        assert_eq!(
            verify("s3cret", Some("zz"), body),
            Err(WebhookError::Malformed("X-Gitea-Signature"))
        );
        assert_eq!(
            verify("s3cret", None, body),
            Err(WebhookError::Missing("X-Gitea-Signature"))
        );
    }

    #[test]
    fn gitea_signature_matches_a_published_hmac_vector() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let sig = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        assert_eq!(
            verify("Jefe", Some(sig), b"what do ya want for nothing?"),
            Ok(())
        );
    }
}

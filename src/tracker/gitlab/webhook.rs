//! Verifying GitLab webhook deliveries: GitLab sends the shared secret itself in
//! `X-Gitlab-Token`. Pure: the daemon passes the header.

use crate::tracker::webhook::{constant_time_eq, WebhookError};

/// A delivery: `X-Gitlab-Token` equals `secret`, compared in constant time.
pub fn verify(secret: &str, token: Option<&str>) -> Result<(), WebhookError> {
    let token = token.ok_or(WebhookError::Missing("X-Gitlab-Token"))?;
    if constant_time_eq(token.as_bytes(), secret.as_bytes()) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch("X-Gitlab-Token"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_wants_the_exact_token() {
        assert_eq!(verify("s3cret", Some("s3cret")), Ok(()));
        assert_eq!(
            verify("s3cret", Some("s3cre")),
            Err(WebhookError::Mismatch("X-Gitlab-Token"))
        );
        assert_eq!(
            verify("s3cret", None),
            Err(WebhookError::Missing("X-Gitlab-Token"))
        );
    }
}

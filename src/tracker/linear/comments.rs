//! Comments with ids sortie chooses: the same outcome always gets the same comment id,
//! so Linear refuses a replayed post, and the refused post is found by its id.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::wire::WireComment;
use super::{decode, queries, LinearTracker};
use crate::tracker::http::Retry;
use crate::tracker::TrackerError;

/// The id sortie gives the comment carrying the outcome with `idempotency_key`: the
/// first 16 bytes of SHA-256 over a sortie prefix and the key, as a UUID (version 8,
/// RFC 9562's custom version). The same outcome always gets the same id, so Linear
/// refuses a replayed post as a duplicate.
pub fn comment_id(idempotency_key: &str) -> uuid::Uuid {
    let digest = Sha256::digest(format!("sortie-comment\x1f{idempotency_key}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Uuid::new_v8(bytes)
}

impl LinearTracker {
    /// The comment with id `comment_id` and its issue's identifier, `None` when Linear
    /// has none.
    pub(super) async fn comment_by_id(
        &self,
        comment_id: &str,
    ) -> Result<Option<(String, WireComment)>, TrackerError> {
        #[derive(serde::Deserialize)]
        struct Owner {
            identifier: String,
        }
        #[derive(serde::Deserialize)]
        struct Found {
            #[serde(flatten)]
            comment: WireComment,
            issue: Option<Owner>,
        }
        match self
            .transport
            .send(
                "SortieComment",
                queries::COMMENT,
                json!({ "id": comment_id }),
                Retry::Safe,
            )
            .await
        {
            Ok(data) => {
                let found: Found = decode("SortieComment", &data["comment"])?;
                Ok(Some((
                    found.issue.map(|o| o.identifier).unwrap_or_default(),
                    found.comment,
                )))
            }
            Err(TrackerError::NotFound(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

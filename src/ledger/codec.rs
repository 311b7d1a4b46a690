//! Conversions between ledger types and the integers and strings both backends store
//! (SQLite and PostgreSQL keep the same column types: milliseconds, names, JSON text).

use std::time::Duration;

use chrono::DateTime;

use crate::ledger::{FollowUp, LedgerError, OutboxState, ReactionRecord, RunPhase, Timestamp};
use crate::rate_limit::RateLimit;

/// A timestamp as stored: integer milliseconds since the Unix epoch (UTC).
pub(in crate::ledger) fn to_millis(t: Timestamp) -> i64 {
    t.timestamp_millis()
}

/// Decode stored milliseconds; a value outside chrono's range is a corrupt row.
pub(in crate::ledger) fn from_millis(ms: i64) -> Result<Timestamp, LedgerError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| LedgerError::Corrupt(format!("timestamp {ms} ms is out of range")))
}

/// `now + ttl` in stored milliseconds, saturating instead of overflowing on absurd TTLs.
pub(in crate::ledger) fn expiry_millis(now: Timestamp, ttl: Duration) -> i64 {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    to_millis(now).saturating_add(ttl_ms)
}

/// Decode a stored attempt or counter that must fit a `u32`.
pub(in crate::ledger) fn to_u32(value: i64, what: &str) -> Result<u32, LedgerError> {
    u32::try_from(value).map_err(|_| LedgerError::Corrupt(format!("{what} {value} is not a u32")))
}

/// A run's rate-limit reports as stored: JSON text, `NULL` for none (so that the upsert's
/// `COALESCE` keeps reports recorded earlier).
pub(in crate::ledger) fn rate_limits_text(limits: &[RateLimit]) -> Option<String> {
    if limits.is_empty() {
        return None;
    }
    serde_json::to_string(limits).ok()
}

/// Decode stored rate-limit reports (`NULL`, in rows from before they were kept: none).
pub(in crate::ledger) fn parse_rate_limits(
    text: Option<&str>,
) -> Result<Vec<RateLimit>, LedgerError> {
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| LedgerError::Corrupt(format!("rate limits {text:?}: {e}"))),
    }
}

/// The stored name of a run phase.
pub(in crate::ledger) fn phase_name(phase: RunPhase) -> &'static str {
    match phase {
        RunPhase::Running => "running",
        RunPhase::Finished => "finished",
        RunPhase::Cancelled => "cancelled",
    }
}

/// Decode a stored run phase.
pub(in crate::ledger) fn parse_phase(name: &str) -> Result<RunPhase, LedgerError> {
    match name {
        "running" => Ok(RunPhase::Running),
        "finished" => Ok(RunPhase::Finished),
        "cancelled" => Ok(RunPhase::Cancelled),
        other => Err(LedgerError::Corrupt(format!("unknown run phase {other:?}"))),
    }
}

/// The stored name of an outbox state.
pub(in crate::ledger) fn outbox_state_name(state: OutboxState) -> &'static str {
    match state {
        OutboxState::Pending => "pending",
        OutboxState::CommentPosted => "comment_posted",
        OutboxState::Done => "done",
        OutboxState::Dropped => "dropped",
    }
}

/// Decode a stored outbox state.
pub(in crate::ledger) fn parse_outbox_state(name: &str) -> Result<OutboxState, LedgerError> {
    match name {
        "pending" => Ok(OutboxState::Pending),
        "comment_posted" => Ok(OutboxState::CommentPosted),
        "done" => Ok(OutboxState::Done),
        "dropped" => Ok(OutboxState::Dropped),
        other => Err(LedgerError::Corrupt(format!(
            "unknown outbox state {other:?}"
        ))),
    }
}

/// A follow-up as stored: its JSON.
pub(in crate::ledger) fn follow_up_text(follow_up: &FollowUp) -> String {
    serde_json::to_string(follow_up).unwrap_or_else(|_| "{\"kind\":\"clear\"}".to_string())
}

/// Decode a stored follow-up.
pub(in crate::ledger) fn parse_follow_up(text: &str) -> Result<FollowUp, LedgerError> {
    serde_json::from_str(text)
        .map_err(|err| LedgerError::Corrupt(format!("follow-up {text:?}: {err}")))
}

/// The follow-up of an entry stored before follow-ups were (schema 3 or older), from
/// what the row itself says: a ticket that moved on clears; a success that stays runs
/// again; a failure that stays is retried (bounded by `retry.max_attempts` like any
/// other failure), never held on a guess. `docs/operations.md` (upgrades) says so.
pub(in crate::ledger) fn legacy_follow_up(outcome: &str, stays: bool) -> FollowUp {
    match (outcome, stays) {
        (_, false) => FollowUp::Clear,
        ("success", true) => FollowUp::Continue { after_seconds: 1 },
        (_, true) => FollowUp::Retry {
            after_seconds: 10,
            reason_code: "upgrade.replayed".to_string(),
        },
    }
}

/// The reaction columns stored as JSON text: the handed ids and the prompt payload.
pub(in crate::ledger) fn reaction_json(reaction: &ReactionRecord) -> (String, String) {
    (
        serde_json::to_string(&reaction.handed).unwrap_or_else(|_| "[]".to_string()),
        reaction.payload.to_string(),
    )
}

/// The reaction columns read back from their JSON text.
pub(in crate::ledger) fn parse_reaction_json(
    handed: &str,
    payload: &str,
) -> Result<(Vec<String>, serde_json::Value), LedgerError> {
    let handed = serde_json::from_str(handed)
        .map_err(|e| LedgerError::Corrupt(format!("reaction handed ids `{handed}`: {e}")))?;
    let payload = serde_json::from_str(payload)
        .map_err(|e| LedgerError::Corrupt(format!("reaction payload: {e}")))?;
    Ok((handed, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_trip_keeps_millisecond_precision() {
        let t = from_millis(1_700_000_000_123).unwrap();
        assert_eq!(to_millis(t), 1_700_000_000_123);
    }

    #[test]
    fn out_of_range_millis_is_corrupt_not_a_panic() {
        assert!(matches!(
            from_millis(i64::MAX),
            Err(LedgerError::Corrupt(_))
        ));
    }

    #[test]
    fn huge_ttl_saturates() {
        let now = from_millis(1_000).unwrap();
        assert_eq!(expiry_millis(now, Duration::MAX), i64::MAX);
    }

    #[test]
    fn enum_names_round_trip() {
        for phase in [RunPhase::Running, RunPhase::Finished, RunPhase::Cancelled] {
            assert_eq!(parse_phase(phase_name(phase)).unwrap(), phase);
        }
        for state in [
            OutboxState::Pending,
            OutboxState::CommentPosted,
            OutboxState::Done,
            OutboxState::Dropped,
        ] {
            assert_eq!(parse_outbox_state(outbox_state_name(state)).unwrap(), state);
        }
        assert!(parse_phase("bogus").is_err());
        assert!(parse_outbox_state("bogus").is_err());
    }
}

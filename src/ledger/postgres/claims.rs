//! SQL for claims and attempts.

use std::time::Duration;

use postgres::Row;

use super::pool::Conn;
use crate::ledger::sqlite::codec::{expiry_millis, from_millis, to_millis, to_u32};
use crate::ledger::{
    CeilingScope, Claim, ClaimKey, ClaimOutcome, ClaimRequest, LedgerError, RenewOutcome, Timestamp,
};

/// The claim columns in the order [`decode`] reads them.
macro_rules! claim_columns {
    () => {
        "tracker, ticket_id, role, stage, claimer_id, claimed_at, lease_expires_at, \
         stage_attempt, run_id, cancel_requested, agent_pid"
    };
}

fn decode(row: &Row) -> Result<Claim, LedgerError> {
    let agent_pid: Option<i64> = row.try_get(10).map_err(corrupt)?;
    Ok(Claim {
        key: ClaimKey::new(
            row.try_get::<_, String>(0).map_err(corrupt)?,
            row.try_get::<_, String>(1).map_err(corrupt)?,
            row.try_get::<_, String>(2).map_err(corrupt)?,
        ),
        stage: row.try_get(3).map_err(corrupt)?,
        claimer_id: row.try_get(4).map_err(corrupt)?,
        claimed_at: from_millis(row.try_get(5).map_err(corrupt)?)?,
        lease_expires_at: from_millis(row.try_get(6).map_err(corrupt)?)?,
        stage_attempt: to_u32(row.try_get(7).map_err(corrupt)?, "stage_attempt")?,
        run_id: row.try_get(8).map_err(corrupt)?,
        cancel_requested: row.try_get(9).map_err(corrupt)?,
        agent_pid: agent_pid.map(|pid| to_u32(pid, "agent_pid")).transpose()?,
    })
}

/// A column that does not decode as its type.
pub(super) fn corrupt(err: postgres::Error) -> LedgerError {
    LedgerError::Corrupt(err.to_string())
}

fn find(conn: &mut Conn, key: &ClaimKey) -> Result<Option<Claim>, LedgerError> {
    conn.row(
        concat!(
            "SELECT ",
            claim_columns!(),
            " FROM claims WHERE tracker = $1 AND ticket_id = $2 AND role = $3"
        ),
        &[&key.tracker, &key.ticket_id, &key.role],
    )?
    .as_ref()
    .map(decode)
    .transpose()
}

/// The claim, as one call of the `sortie_try_claim` SQL function (migrations.rs), which
/// runs as one statement in its own `READ COMMITTED` transaction and first takes a
/// transaction-scoped advisory lock on the tracker (released by that commit):
///
/// 1. a live row of another claimer: `Held`; of the same claimer: renewed, `Acquired`
///    with the unchanged attempt; an expired row is deleted (nobody's);
/// 2. count the tracker's live claims (role, all, stage): every claim of this tracker
///    that committed before the lock was granted is counted, and no other claim can
///    commit while it is held, so the check and the insert are one step for every host;
/// 3. insert the claim with attempt `max(last + 1, floor, 1)` and record that attempt.
///
/// Release, expiry and cancel only lower the counts, so they take no lock. One round
/// trip instead of six (BEGIN, lock, read, count, insert, COMMIT) is what makes a claim
/// cheap: `docs/ledger.md` has both measured.
pub(super) fn try_claim(
    conn: &mut Conn,
    req: &ClaimRequest,
    now: Timestamp,
) -> Result<ClaimOutcome, LedgerError> {
    let key = &req.key;
    let now_ms = to_millis(now);
    let expires_ms = expiry_millis(now, req.ttl);
    let row = conn
        .row(
            "SELECT o_outcome, o_claimer, o_stage, o_claimed_at, o_expires, o_attempt, o_run, \
                    o_cancel, o_pid \
             FROM sortie_try_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &key.tracker,
                &key.ticket_id,
                &key.role,
                &req.stage,
                &req.claimer_id,
                &req.run_id,
                &now_ms,
                &expires_ms,
                &i64::from(req.limits.role),
                &i64::from(req.limits.global),
                &req.limits.status.map(i64::from),
                &i64::from(req.attempt_floor),
            ],
        )?
        .ok_or_else(|| LedgerError::Corrupt("sortie_try_claim returned no row".into()))?;
    let outcome: String = row.try_get(0).map_err(corrupt)?;
    let claim = || -> Result<Claim, LedgerError> {
        let agent_pid: Option<i64> = row.try_get(8).map_err(corrupt)?;
        Ok(Claim {
            key: key.clone(),
            stage: row.try_get(2).map_err(corrupt)?,
            claimer_id: row.try_get(1).map_err(corrupt)?,
            claimed_at: from_millis(row.try_get(3).map_err(corrupt)?)?,
            lease_expires_at: from_millis(row.try_get(4).map_err(corrupt)?)?,
            stage_attempt: to_u32(row.try_get(5).map_err(corrupt)?, "stage_attempt")?,
            run_id: row.try_get(6).map_err(corrupt)?,
            cancel_requested: row.try_get(7).map_err(corrupt)?,
            agent_pid: agent_pid.map(|pid| to_u32(pid, "agent_pid")).transpose()?,
        })
    };
    Ok(match outcome.as_str() {
        "acquired" => ClaimOutcome::Acquired(claim()?),
        "held" => {
            let held = claim()?;
            ClaimOutcome::Held {
                holder: held.claimer_id,
                lease_expires_at: held.lease_expires_at,
            }
        }
        "ceiling_role" => ClaimOutcome::Ceiling(CeilingScope::Role),
        "ceiling_global" => ClaimOutcome::Ceiling(CeilingScope::Global),
        "ceiling_status" => ClaimOutcome::Ceiling(CeilingScope::Status),
        other => {
            return Err(LedgerError::Corrupt(format!(
                "sortie_try_claim answered {other:?}"
            )))
        }
    })
}

/// Extend the lease while `claimer_id`'s row is still there (one statement).
pub(super) fn renew(
    conn: &mut Conn,
    key: &ClaimKey,
    claimer_id: &str,
    ttl: Duration,
    now: Timestamp,
) -> Result<RenewOutcome, LedgerError> {
    let expires_ms = expiry_millis(now, ttl);
    let row = conn.row(
        "UPDATE claims SET lease_expires_at = $5 \
         WHERE tracker = $1 AND ticket_id = $2 AND role = $3 AND claimer_id = $4 \
         RETURNING cancel_requested",
        &[
            &key.tracker,
            &key.ticket_id,
            &key.role,
            &claimer_id,
            &expires_ms,
        ],
    )?;
    Ok(match row {
        Some(row) => RenewOutcome::Renewed {
            lease_expires_at: from_millis(expires_ms)?,
            cancel_requested: row.try_get(0).map_err(corrupt)?,
        },
        None => RenewOutcome::Lost,
    })
}

/// Delete the key's row: only `claimer_id`'s if given, else whoever holds it.
pub(super) fn release(
    conn: &mut Conn,
    key: &ClaimKey,
    claimer_id: Option<&str>,
) -> Result<bool, LedgerError> {
    let deleted = match claimer_id {
        Some(claimer_id) => conn.exec(
            "DELETE FROM claims \
             WHERE tracker = $1 AND ticket_id = $2 AND role = $3 AND claimer_id = $4",
            &[&key.tracker, &key.ticket_id, &key.role, &claimer_id],
        )?,
        None => conn.exec(
            "DELETE FROM claims WHERE tracker = $1 AND ticket_id = $2 AND role = $3",
            &[&key.tracker, &key.ticket_id, &key.role],
        )?,
    };
    Ok(deleted > 0)
}

/// Claim rows of `tracker` (every tracker's when `None`), ordered by key.
pub(super) fn all(conn: &mut Conn, tracker: Option<&str>) -> Result<Vec<Claim>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT ",
            claim_columns!(),
            " FROM claims WHERE $1::text IS NULL OR tracker = $1::text \
             ORDER BY tracker, ticket_id, role"
        ),
        &[&tracker],
    )?
    .iter()
    .map(decode)
    .collect()
}

/// The claim row of `key`, if any.
pub(super) fn one(conn: &mut Conn, key: &ClaimKey) -> Result<Option<Claim>, LedgerError> {
    find(conn, key)
}

/// Whether `claimer_id` holds the row of `key`, locking the row against a concurrent
/// takeover (which deletes it) until the transaction ends.
pub(super) fn is_held_by_locked(
    conn: &mut Conn,
    key: &ClaimKey,
    claimer_id: &str,
) -> Result<bool, LedgerError> {
    let row = conn.row(
        "SELECT claimer_id FROM claims WHERE tracker = $1 AND ticket_id = $2 AND role = $3 \
         FOR SHARE",
        &[&key.tracker, &key.ticket_id, &key.role],
    )?;
    Ok(match row {
        Some(row) => row.try_get::<_, String>(0).map_err(corrupt)? == claimer_id,
        None => false,
    })
}

/// Set the cancel flag; whether a row exists.
pub(super) fn request_cancel(conn: &mut Conn, key: &ClaimKey) -> Result<bool, LedgerError> {
    let updated = conn.exec(
        "UPDATE claims SET cancel_requested = TRUE \
         WHERE tracker = $1 AND ticket_id = $2 AND role = $3",
        &[&key.tracker, &key.ticket_id, &key.role],
    )?;
    Ok(updated > 0)
}

/// Record the agent pid on `claimer_id`'s row (no-op if it no longer holds the key).
pub(super) fn set_agent_pid(
    conn: &mut Conn,
    key: &ClaimKey,
    claimer_id: &str,
    pid: Option<u32>,
) -> Result<(), LedgerError> {
    conn.exec(
        "UPDATE claims SET agent_pid = $5 \
         WHERE tracker = $1 AND ticket_id = $2 AND role = $3 AND claimer_id = $4",
        &[
            &key.tracker,
            &key.ticket_id,
            &key.role,
            &claimer_id,
            &pid.map(i64::from),
        ],
    )?;
    Ok(())
}

/// The highest attempt ever recorded for `key` (0 if none).
pub(super) fn last_attempt(conn: &mut Conn, key: &ClaimKey) -> Result<u32, LedgerError> {
    let row = conn.row(
        "SELECT last_attempt FROM attempts WHERE tracker = $1 AND ticket_id = $2 AND role = $3",
        &[&key.tracker, &key.ticket_id, &key.role],
    )?;
    match row {
        Some(row) => to_u32(row.try_get(0).map_err(corrupt)?, "last_attempt"),
        None => Ok(0),
    }
}

//! SQL for claims and attempts.

use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, Row};

use crate::ledger::codec::{expiry_millis, from_millis, to_millis, to_u32};
use crate::ledger::{
    CeilingScope, Claim, ClaimKey, ClaimOutcome, ClaimRequest, LedgerError, RenewOutcome, Timestamp,
};

/// The claim columns in the order [`StoredClaim::from_row`] reads them. A macro so the SQL
/// built with it stays a `&'static str` (the statement cache key), with no allocation per call.
macro_rules! claim_columns {
    () => {
        "tracker, ticket_id, role, stage, claimer_id, claimed_at, lease_expires_at, \
         stage_attempt, run_id, cancel_requested, agent_pid"
    };
}

/// A claim row as stored, before its integers are checked.
struct StoredClaim {
    key: ClaimKey,
    stage: String,
    claimer_id: String,
    claimed_at: i64,
    lease_expires_at: i64,
    stage_attempt: i64,
    run_id: String,
    cancel_requested: bool,
    agent_pid: Option<i64>,
}

impl StoredClaim {
    /// Read a row selected with `claim_columns!()`.
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(StoredClaim {
            key: ClaimKey::new(
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ),
            stage: row.get(3)?,
            claimer_id: row.get(4)?,
            claimed_at: row.get(5)?,
            lease_expires_at: row.get(6)?,
            stage_attempt: row.get(7)?,
            run_id: row.get(8)?,
            cancel_requested: row.get(9)?,
            agent_pid: row.get(10)?,
        })
    }

    fn into_claim(self) -> Result<Claim, LedgerError> {
        Ok(Claim {
            stage_attempt: to_u32(self.stage_attempt, "stage_attempt")?,
            agent_pid: self
                .agent_pid
                .map(|pid| to_u32(pid, "agent_pid"))
                .transpose()?,
            claimed_at: from_millis(self.claimed_at)?,
            lease_expires_at: from_millis(self.lease_expires_at)?,
            key: self.key,
            stage: self.stage,
            claimer_id: self.claimer_id.into(),
            run_id: self.run_id,
            cancel_requested: self.cancel_requested,
        })
    }
}

fn find(conn: &Connection, key: &ClaimKey) -> Result<Option<StoredClaim>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        claim_columns!(),
        " FROM claims WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3"
    ))?;
    Ok(stmt
        .query_row(
            (&key.tracker, &key.ticket_id, &key.role),
            StoredClaim::from_row,
        )
        .optional()?)
}

fn held_by(stored: StoredClaim) -> Result<ClaimOutcome, LedgerError> {
    Ok(ClaimOutcome::Held {
        holder: stored.claimer_id.into(),
        lease_expires_at: from_millis(stored.lease_expires_at)?,
    })
}

/// The claim algorithm described in the parent module's docs; runs inside `BEGIN IMMEDIATE`.
///
/// Steps 1 and 2 share one lookup (the row is deleted only when it turns out to be expired),
/// and the ceiling counts and the last attempt come from one query: fewer statements per
/// claim is most of what makes a claim cheap.
pub(super) fn try_claim(
    tx: &Connection,
    req: &ClaimRequest,
    now: Timestamp,
) -> Result<ClaimOutcome, LedgerError> {
    let key = &req.key;
    let now_ms = to_millis(now);
    let expires_ms = expiry_millis(now, req.ttl);

    if let Some(mut stored) = find(tx, key)? {
        if stored.lease_expires_at > now_ms {
            // 2. A live lease: the holder renews, anyone else learns who holds it.
            if req.claimer_id != stored.claimer_id {
                return held_by(stored);
            }
            tx.prepare_cached(
                "UPDATE claims SET lease_expires_at = ?4 \
                 WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3",
            )?
            .execute((&key.tracker, &key.ticket_id, &key.role, expires_ms))?;
            stored.lease_expires_at = expires_ms;
            return Ok(ClaimOutcome::Acquired(stored.into_claim()?));
        }
        // 1. An expired lease is nobody's.
        release(tx, key, None)?;
    }

    // 3. Ceilings count live claims of this tracker only.
    let (role_live, global_live, stage_live, last): (i64, i64, i64, Option<i64>) = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(role = ?3), 0), COUNT(*), COALESCE(SUM(stage = ?5), 0), \
                    (SELECT last_attempt FROM attempts \
                     WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3) \
             FROM claims WHERE tracker = ?1 AND lease_expires_at > ?4",
        )?
        .query_row(
            (&key.tracker, &key.ticket_id, &key.role, now_ms, &req.stage),
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )?;
    if role_live >= i64::from(req.limits.role) {
        return Ok(ClaimOutcome::Ceiling(CeilingScope::Role));
    }
    if global_live >= i64::from(req.limits.global) {
        return Ok(ClaimOutcome::Ceiling(CeilingScope::Global));
    }
    if req
        .limits
        .status
        .is_some_and(|cap| stage_live >= i64::from(cap))
    {
        return Ok(ClaimOutcome::Ceiling(CeilingScope::Status));
    }
    // 3b. The fleet has room; this host may still hold its share of it.
    if let Some(scope) = host_share_reached(tx, req, now_ms)? {
        return Ok(ClaimOutcome::HostShare(scope));
    }

    // 4. Insert with the next attempt, and remember that attempt for good.
    let last = last.map_or(Ok(0), |last| to_u32(last, "last_attempt"))?;
    let attempt = last.saturating_add(1).max(req.attempt_floor).max(1);
    let inserted = tx
        .prepare_cached(concat!(
            "INSERT OR FAIL INTO claims (",
            claim_columns!(),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, NULL)"
        ))?
        .execute((
            &key.tracker,
            &key.ticket_id,
            &key.role,
            &req.stage,
            req.claimer_id.as_str(),
            now_ms,
            expires_ms,
            attempt,
            &req.run_id,
        ));
    match inserted {
        Ok(_) => {}
        Err(rusqlite::Error::SqliteFailure(err, _))
            if err.code == ErrorCode::ConstraintViolation =>
        {
            // Unreachable while the transaction holds the write lock, but if a row appeared
            // anyway its holder is the answer, not an error.
            if let Some(stored) = find(tx, key)? {
                return held_by(stored);
            }
            return Err(rusqlite::Error::SqliteFailure(err, None).into());
        }
        Err(other) => return Err(other.into()),
    }
    tx.prepare_cached(
        "INSERT INTO attempts (tracker, ticket_id, role, last_attempt) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (tracker, ticket_id, role) DO UPDATE SET last_attempt = excluded.last_attempt",
    )?
    .execute((&key.tracker, &key.ticket_id, &key.role, attempt))?;

    Ok(ClaimOutcome::Acquired(Claim {
        key: key.clone(),
        stage: req.stage.clone(),
        claimer_id: req.claimer_id.clone(),
        claimed_at: from_millis(now_ms)?,
        lease_expires_at: from_millis(expires_ms)?,
        stage_attempt: attempt,
        run_id: req.run_id.clone(),
        cancel_requested: false,
        agent_pid: None,
    }))
}

/// The first scope (role, global, status) in which the claimer's host already holds its
/// share of the caps ([`crate::ledger::ClaimLimits::host`]), counting the live claims of
/// every process of that host.
fn host_share_reached(
    tx: &Connection,
    req: &ClaimRequest,
    now_ms: i64,
) -> Result<Option<CeilingScope>, LedgerError> {
    let Some(share) = req.limits.host else {
        return Ok(None);
    };
    let (role, global, stage): (i64, i64, i64) = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(role = ?2), 0), COUNT(*), COALESCE(SUM(stage = ?3), 0) \
             FROM claims WHERE tracker = ?1 AND lease_expires_at > ?4 \
              AND (claimer_id = ?5 OR substr(claimer_id, 1, length(?5) + 1) = ?5 || ':')",
        )?
        .query_row(
            (
                &req.key.tracker,
                &req.key.role,
                &req.stage,
                now_ms,
                req.claimer_id.host(),
            ),
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?;
    Ok(share.reached(role, global, stage))
}

/// Extend the lease while `claimer_id`'s row is still there.
pub(super) fn renew(
    tx: &Connection,
    key: &ClaimKey,
    claimer_id: &str,
    ttl: Duration,
    now: Timestamp,
) -> Result<RenewOutcome, LedgerError> {
    let expires_ms = expiry_millis(now, ttl);
    let cancel_requested: Option<bool> = tx
        .prepare_cached(
            "UPDATE claims SET lease_expires_at = ?5 \
             WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3 AND claimer_id = ?4 \
             RETURNING cancel_requested",
        )?
        .query_row(
            (
                &key.tracker,
                &key.ticket_id,
                &key.role,
                claimer_id,
                expires_ms,
            ),
            |row| row.get(0),
        )
        .optional()?;
    Ok(match cancel_requested {
        Some(cancel_requested) => RenewOutcome::Renewed {
            lease_expires_at: from_millis(expires_ms)?,
            cancel_requested,
        },
        None => RenewOutcome::Lost,
    })
}

/// Delete the key's row: only `claimer_id`'s if given, else whoever holds it.
pub(super) fn release(
    conn: &Connection,
    key: &ClaimKey,
    claimer_id: Option<&str>,
) -> Result<bool, LedgerError> {
    let deleted = match claimer_id {
        Some(claimer_id) => conn
            .prepare_cached(
                "DELETE FROM claims \
                 WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3 AND claimer_id = ?4",
            )?
            .execute((&key.tracker, &key.ticket_id, &key.role, claimer_id))?,
        None => conn
            .prepare_cached(
                "DELETE FROM claims WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3",
            )?
            .execute((&key.tracker, &key.ticket_id, &key.role))?,
    };
    Ok(deleted > 0)
}

/// Claim rows of `tracker` (every tracker's when `None`), live or expired, ordered by key.
pub(super) fn all(conn: &Connection, tracker: Option<&str>) -> Result<Vec<Claim>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        claim_columns!(),
        " FROM claims WHERE ?1 IS NULL OR tracker = ?1 ORDER BY tracker, ticket_id, role"
    ))?;
    let rows = stmt.query_map([tracker], StoredClaim::from_row)?;
    rows.map(|row| row?.into_claim()).collect()
}

/// The claim row of `key`, if any.
pub(super) fn one(conn: &Connection, key: &ClaimKey) -> Result<Option<Claim>, LedgerError> {
    find(conn, key)?.map(StoredClaim::into_claim).transpose()
}

/// Whether `claimer_id` holds the row of `key` (live or not yet taken over).
pub(super) fn is_held_by(
    conn: &Connection,
    key: &ClaimKey,
    claimer_id: &str,
) -> Result<bool, LedgerError> {
    Ok(find(conn, key)?.is_some_and(|stored| stored.claimer_id == claimer_id))
}

/// Set the cancel flag; whether a row exists.
pub(super) fn request_cancel(conn: &Connection, key: &ClaimKey) -> Result<bool, LedgerError> {
    let updated = conn
        .prepare_cached(
            "UPDATE claims SET cancel_requested = 1 \
             WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3",
        )?
        .execute((&key.tracker, &key.ticket_id, &key.role))?;
    Ok(updated > 0)
}

/// Record the agent pid on `claimer_id`'s row (no-op if it no longer holds the key).
pub(super) fn set_agent_pid(
    conn: &Connection,
    key: &ClaimKey,
    claimer_id: &str,
    pid: Option<u32>,
) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "UPDATE claims SET agent_pid = ?5 \
         WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3 AND claimer_id = ?4",
    )?
    .execute((&key.tracker, &key.ticket_id, &key.role, claimer_id, pid))?;
    Ok(())
}

/// The highest attempt ever recorded for `key` (0 if none).
pub(super) fn last_attempt(conn: &Connection, key: &ClaimKey) -> Result<u32, LedgerError> {
    let last: Option<i64> = conn
        .prepare_cached(
            "SELECT last_attempt FROM attempts WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3",
        )?
        .query_row((&key.tracker, &key.ticket_id, &key.role), |row| row.get(0))
        .optional()?;
    last.map_or(Ok(0), |last| to_u32(last, "last_attempt"))
}

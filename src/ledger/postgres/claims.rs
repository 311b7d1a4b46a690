//! SQL for claims and attempts.

use std::time::Duration;

use postgres::Row;

use super::pool::Conn;
use crate::ledger::codec::{expiry_millis, from_millis, to_millis, to_u32};
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
        claimer_id: row.try_get::<_, String>(4).map_err(corrupt)?.into(),
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

/// The claim's insert and attempts upsert, after a `WITH` of the statement has chosen the
/// slots as `pick (r, g, st)` (shared by [`CLAIM_SQL`] and [`FAST_SQL`]; parameters as
/// in [`try_claim`]).
macro_rules! insert_claim {
    () => {
        "ins AS (
  INSERT INTO claims (tracker, ticket_id, role, stage, claimer_id, claimed_at, lease_expires_at,
                      stage_attempt, run_id, cancel_requested, agent_pid,
                      role_slot, global_slot, status_slot)
  SELECT $1, $2, $3, $4, $5, $7, $8,
         GREATEST(COALESCE((SELECT a.last_attempt FROM attempts a
                             WHERE a.tracker = $1 AND a.ticket_id = $2 AND a.role = $3), 0) + 1,
                  $12, 1),
         $6, FALSE, NULL, pick.r, pick.g, pick.st
    FROM pick WHERE pick.r IS NOT NULL AND pick.g IS NOT NULL
                AND ($11::BIGINT IS NULL OR pick.st IS NOT NULL)
  ON CONFLICT DO NOTHING
  RETURNING stage_attempt
), up AS (
  INSERT INTO attempts (tracker, ticket_id, role, last_attempt)
  SELECT $1, $2, $3, stage_attempt FROM ins
  ON CONFLICT (tracker, ticket_id, role) DO UPDATE SET last_attempt = excluded.last_attempt
)"
    };
}

/// The claim of a free key of a status without a cap, without reading the tracker's rows:
/// two index probes check that no row of the role or of the tracker sits at or above its
/// cap, and the insert takes the key's hashed slot in each scope (`seed % cap`); the
/// unique indexes refuse it if the key has a row or a slot is taken. Its answer is the
/// attempt, or NULL when nothing was inserted (then [`CLAIM_SQL`] decides). Exact for the
/// same reasons as [`CLAIM_SQL`]: with no row at or above a cap, every row of the scope
/// holds one of its N slots, so the unique index bounds the scope. Nothing else is in the
/// statement: every plan node costs its start-up on each execution, run or not, and the
/// tracker read the answer would need costs more than a second round trip when it is
/// needed (measured: `docs/benchmarks.md`).
const FAST_SQL: &str = concat!(
    "WITH pick AS (
  SELECT CASE WHEN $9::BIGINT > 0 THEN $13::BIGINT % $9::BIGINT END AS r,
         CASE WHEN $10::BIGINT > 0 THEN $13::BIGINT % $10::BIGINT END AS g, NULL::BIGINT AS st
   WHERE $11::BIGINT IS NULL AND $9::BIGINT > 0 AND $10::BIGINT > 0
     AND NOT EXISTS (SELECT 1 FROM claims c
                      WHERE c.tracker = $1 AND c.role = $3 AND c.role_slot >= $9)
     AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.tracker = $1 AND c.global_slot >= $10)
), ",
    insert_claim!(),
    "
SELECT stage_attempt FROM ins"
);

/// The common claim in one statement: one read of the tracker's rows (the live counts
/// of the role, of all roles and of the stage; the slots taken; whether the key has a row;
/// whether a row sits at or above a cap), then, if the key is free and every scope has
/// room, the insert with a free slot per scope and the attempts upsert. No lock: the
/// unique slot indexes (migration 2, `migrations::SLOTS`) are what keep two racing
/// claims from both fitting under a cap. Its answer row is `(attempt, role_live,
/// global_live, stage_live, key_taken, above)`; `attempt` is NULL when nothing was
/// inserted.
const CLAIM_SQL: &str = concat!(
    "WITH s AS (
  SELECT COUNT(*) FILTER (WHERE c.role = $3 AND c.lease_expires_at > $7) AS role_live,
         COUNT(*) FILTER (WHERE c.lease_expires_at > $7) AS global_live,
         COUNT(*) FILTER (WHERE c.stage = $4 AND c.lease_expires_at > $7) AS stage_live,
         COALESCE(bool_or(c.ticket_id = $2 AND c.role = $3), FALSE) AS key_taken,
         COALESCE(bool_or((c.role = $3 AND c.role_slot >= $9) OR c.global_slot >= $10
                          OR ($11::BIGINT IS NOT NULL AND c.stage = $4
                              AND (c.status_slot IS NULL OR c.status_slot >= $11::BIGINT))),
                  FALSE) AS above,
         COALESCE(array_agg(c.role_slot) FILTER (WHERE c.role = $3), '{}') AS role_taken,
         COALESCE(array_agg(c.global_slot), '{}') AS global_taken,
         COALESCE(array_agg(c.status_slot)
                  FILTER (WHERE $11::BIGINT IS NOT NULL AND c.stage = $4), '{}') AS status_taken
    FROM claims c WHERE c.tracker = $1
), pick AS MATERIALIZED (
  SELECT CASE WHEN $9 > 0 AND NOT ($13 % $9 = ANY (s.role_taken)) THEN $13 % $9
              ELSE sortie_free_slot(s.role_taken, $9, $13) END AS r,
         CASE WHEN $10 > 0 AND NOT ($13 % $10 = ANY (s.global_taken)) THEN $13 % $10
              ELSE sortie_free_slot(s.global_taken, $10, $13) END AS g,
         CASE WHEN $11::BIGINT IS NOT NULL
              THEN sortie_free_slot(s.status_taken, $11::BIGINT, $13) END AS st
    FROM s
   WHERE NOT s.key_taken AND NOT s.above AND s.role_live < $9 AND s.global_live < $10
     AND ($11::BIGINT IS NULL OR s.stage_live < $11::BIGINT)
), ",
    insert_claim!(),
    "
SELECT (SELECT stage_attempt FROM ins), s.role_live, s.global_live, s.stage_live,
       s.key_taken, s.above
  FROM s"
);

/// The release of `claimer_id`'s row.
const RELEASE_SQL: &str = "DELETE FROM claims \
     WHERE tracker = $1 AND ticket_id = $2 AND role = $3 AND claimer_id = $4";

/// The statements of a claim + release cycle, for the bench (`PostgresLedger::claim_statements`).
pub(super) const STATEMENTS: [(&str, &str); 3] = [
    ("fast", FAST_SQL),
    ("claim", CLAIM_SQL),
    ("release", RELEASE_SQL),
];

/// Every case of a claim, as the `sortie_try_claim` SQL function (migration 2).
const CLAIM_FUNCTION_SQL: &str = "\
SELECT o_outcome, o_claimer, o_stage, o_claimed_at, o_expires, o_attempt, o_run, o_cancel, o_pid \
  FROM sortie_try_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/// How often the one-statement claim is tried after it lost a slot to a racing claim,
/// before the function (which loops until it has an answer) takes over.
const STATEMENT_TRIES: usize = 2;

/// The claim: [`FAST_SQL`] first when the status has no cap (a free key on its hashed
/// slots, reading nothing else), then [`CLAIM_SQL`], which answers the common cases in
/// one round trip (acquired on any free slot; a ceiling), and the `sortie_try_claim`
/// function for the rest (the key has a row: held, renewed, or expired and taken over; a
/// row sits at or above a cap; the free slots are held by expired rows). Each is one
/// statement in its own `READ COMMITTED` transaction. Why the caps hold fleet-wide without a lock:
///
/// - a claim under cap N takes a slot of 0..N-1 in each scope, and the slot indexes are
///   unique, so however many claims race, at most N rows hold slots below N;
/// - a claim inserts only if no row of the scope sits at or above its cap (a row claimed
///   under a larger cap before a config change, or a parked expired row that a late
///   renewal could bring back), so when it inserts, every row of the scope is one of
///   those N;
/// - when such a row exists, the function takes the tracker's advisory lock and counts
///   (the version 1 claim, exact for the same reason as before: every claim that takes
///   the lock sees every claim committed before it, and one that does not take it
///   inserts only once no such row is left).
///
/// Ceilings are answered from the live counts, as in SQLite, in the same order (role,
/// global, status). A claim that loses its slot to a racing one learns it from the
/// unique index (`ON CONFLICT DO NOTHING` waits for the racer's commit) and looks again.
pub(super) fn try_claim(
    conn: &mut Conn,
    req: &ClaimRequest,
    now: Timestamp,
) -> Result<ClaimOutcome, LedgerError> {
    match req.limits.host {
        None => claim(conn, req, now),
        Some(share) => conn.transaction("BEGIN", |tx| claim_within_share(tx, req, share, now)),
    }
}

/// The lock of (tracker, host) a claim within a host share holds until its transaction
/// ends: processes of one host claim one after the other, so their share holds exactly
/// (other hosts' claims do not count toward it, and the fleet's caps are the slots'
/// business). A statement of its own: a `READ COMMITTED` statement reads the state as of
/// its start, so the count must start after the lock is held.
const HOST_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(hashtext('sortie.host_share'), \
                                                        hashtext($1 || chr(31) || $2))";

/// The live claims of the host `$5` (every process of it): of the role, of all roles, of
/// the stage; then the tracker's (every host's), the same three.
const HOST_SHARE_SQL: &str = "\
SELECT COUNT(*) FILTER (WHERE c.role = $2 AND c.host_claim),
       COUNT(*) FILTER (WHERE c.host_claim),
       COUNT(*) FILTER (WHERE c.stage = $3 AND c.host_claim),
       COUNT(*) FILTER (WHERE c.role = $2), COUNT(*), COUNT(*) FILTER (WHERE c.stage = $3)
  FROM (SELECT role, stage,
               (claimer_id = $5 OR substr(claimer_id, 1, length($5) + 1) = $5 || ':')
                 AS host_claim
          FROM claims WHERE tracker = $1 AND lease_expires_at > $4) c";

/// [`claim`] when the host holds less than its share of every cap; else `HostShare`, or
/// `Ceiling` when the fleet's cap is full as well (the better answer, as in SQLite,
/// which checks the fleet's caps first). The claim runs in the same transaction, as it
/// would alone (each statement sees what committed before it).
fn claim_within_share(
    tx: &mut Conn,
    req: &ClaimRequest,
    share: crate::ledger::HostShare,
    now: Timestamp,
) -> Result<ClaimOutcome, LedgerError> {
    let host = req.claimer_id.host();
    tx.row(HOST_LOCK_SQL, &[&req.key.tracker, &host])?;
    let row = tx
        .row(
            HOST_SHARE_SQL,
            &[
                &req.key.tracker,
                &req.key.role,
                &req.stage,
                &to_millis(now),
                &host,
            ],
        )?
        .ok_or_else(|| LedgerError::Corrupt("the host share count returned no row".into()))?;
    let count = |index: usize| -> Result<i64, LedgerError> {
        row.try_get::<_, i64>(index).map_err(corrupt)
    };
    let Some(scope) = share.reached(count(0)?, count(1)?, count(2)?) else {
        return claim(tx, req, now);
    };
    let limits = req.limits;
    let (role, global, stage) = (count(3)?, count(4)?, count(5)?);
    Ok(if role >= i64::from(limits.role) {
        ClaimOutcome::Ceiling(CeilingScope::Role)
    } else if global >= i64::from(limits.global) {
        ClaimOutcome::Ceiling(CeilingScope::Global)
    } else if limits.status.is_some_and(|cap| stage >= i64::from(cap)) {
        ClaimOutcome::Ceiling(CeilingScope::Status)
    } else {
        ClaimOutcome::HostShare(scope)
    })
}

/// The claim against the fleet's caps (the steps above).
fn claim(conn: &mut Conn, req: &ClaimRequest, now: Timestamp) -> Result<ClaimOutcome, LedgerError> {
    let key = &req.key;
    let now_ms = to_millis(now);
    let expires_ms = expiry_millis(now, req.ttl);
    let role_cap = i64::from(req.limits.role);
    let global_cap = i64::from(req.limits.global);
    let status_cap = req.limits.status.map(i64::from);
    let floor = i64::from(req.attempt_floor);
    let seed = slot_seed(req);
    let params: [&(dyn postgres::types::ToSql + Sync); 13] = [
        &key.tracker,
        &key.ticket_id,
        &key.role,
        &req.stage,
        &req.claimer_id.as_str(),
        &req.run_id,
        &now_ms,
        &expires_ms,
        &role_cap,
        &global_cap,
        &status_cap,
        &floor,
        &seed,
    ];
    // A status with a cap needs its rows counted (a claim of it may hold no status slot),
    // so only claims of statuses without one try the probe-only statement first.
    if status_cap.is_none() {
        if let Some(row) = conn.row(FAST_SQL, &params)? {
            let attempt: i64 = row.try_get(0).map_err(corrupt)?;
            return acquired(req, now_ms, expires_ms, attempt);
        }
    }
    for _ in 0..STATEMENT_TRIES {
        let row = conn
            .row(CLAIM_SQL, &params)?
            .ok_or_else(|| LedgerError::Corrupt("the claim statement returned no row".into()))?;
        let attempt: Option<i64> = row.try_get(0).map_err(corrupt)?;
        if let Some(attempt) = attempt {
            return acquired(req, now_ms, expires_ms, attempt);
        }
        let count = |index: usize| -> Result<i64, LedgerError> {
            row.try_get::<_, i64>(index).map_err(corrupt)
        };
        let (role_live, global_live, stage_live) = (count(1)?, count(2)?, count(3)?);
        let key_taken: bool = row.try_get(4).map_err(corrupt)?;
        let above: bool = row.try_get(5).map_err(corrupt)?;
        if key_taken || above {
            break;
        }
        if role_live >= role_cap {
            return Ok(ClaimOutcome::Ceiling(CeilingScope::Role));
        }
        if global_live >= global_cap {
            return Ok(ClaimOutcome::Ceiling(CeilingScope::Global));
        }
        if status_cap.is_some_and(|cap| stage_live >= cap) {
            return Ok(ClaimOutcome::Ceiling(CeilingScope::Status));
        }
        // Room in every scope but no insert: a racing claim took the slot (or the key)
        // first, or expired rows hold the free slots. Look again.
    }
    let row = conn
        .row(CLAIM_FUNCTION_SQL, &params)?
        .ok_or_else(|| LedgerError::Corrupt("sortie_try_claim returned no row".into()))?;
    let outcome: String = row.try_get(0).map_err(corrupt)?;
    let claim = || -> Result<Claim, LedgerError> {
        let agent_pid: Option<i64> = row.try_get(8).map_err(corrupt)?;
        Ok(Claim {
            key: key.clone(),
            stage: row.try_get(2).map_err(corrupt)?,
            claimer_id: row.try_get::<_, String>(1).map_err(corrupt)?.into(),
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

/// The claim a statement inserted for `req`.
fn acquired(
    req: &ClaimRequest,
    now_ms: i64,
    expires_ms: i64,
    attempt: i64,
) -> Result<ClaimOutcome, LedgerError> {
    Ok(ClaimOutcome::Acquired(Claim {
        key: req.key.clone(),
        stage: req.stage.clone(),
        claimer_id: req.claimer_id.clone(),
        claimed_at: from_millis(now_ms)?,
        lease_expires_at: from_millis(expires_ms)?,
        stage_attempt: to_u32(attempt, "stage_attempt")?,
        run_id: req.run_id.clone(),
        cancel_requested: false,
        agent_pid: None,
    }))
}

/// Where a claim starts looking for a free slot in each scope: a hash of the key, so
/// claims of different tickets racing for one scope mostly try different slots, and a
/// ticket claimed again lands on the slot it had, where the unique index's check marks
/// the entries of its released rows dead (entries of released rows on slots nobody
/// reuses stay until vacuum, and every read of the scope walks them). Any value is
/// correct; this one only spreads the claims.
fn slot_seed(req: &ClaimRequest) -> i64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (&req.key.tracker, &req.key.ticket_id, &req.key.role).hash(&mut hasher);
    // Non-negative and below 2^62, so `abs(seed) % cap` never overflows in SQL.
    (hasher.finish() >> 2) as i64
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
            RELEASE_SQL,
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

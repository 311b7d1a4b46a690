//! SQL for the retry queue, holds, run history and the outbox.

use rusqlite::{Connection, OptionalExtension, Row};

use crate::ledger::codec::{
    expiry_millis, follow_up_text, from_millis, legacy_follow_up, outbox_state_name,
    parse_follow_up, parse_outbox_state, parse_phase, parse_rate_limits, phase_name,
    rate_limits_text, to_millis, to_u32,
};
use crate::ledger::{ClaimKey, Hold, LedgerError, OutboxEntry, RetryEntry, RunRecord, Timestamp};

/// Read the three key columns starting at `first`.
fn key_at(row: &Row<'_>, first: usize) -> rusqlite::Result<ClaimKey> {
    Ok(ClaimKey::new(
        row.get::<_, String>(first)?,
        row.get::<_, String>(first + 1)?,
        row.get::<_, String>(first + 2)?,
    ))
}

/// Collect rows whose decoding can fail twice: in SQLite, then in our checks.
fn collect<T, S>(
    rows: impl Iterator<Item = rusqlite::Result<S>>,
    decode: impl Fn(S) -> Result<T, LedgerError>,
) -> Result<Vec<T>, LedgerError> {
    rows.map(|row| decode(row?)).collect()
}

// ----- retry queue -----

/// Queue or replace the retry of `entry.key`.
pub(super) fn schedule_retry(conn: &Connection, entry: &RetryEntry) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO retries \
         (tracker, ticket_id, role, stage, failed_attempt, due_at, reason_code) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute((
        &entry.key.tracker,
        &entry.key.ticket_id,
        &entry.key.role,
        &entry.stage,
        entry.failed_attempt,
        to_millis(entry.due_at),
        &entry.reason_code,
    ))?;
    Ok(())
}

/// Queued retries of `tracker` (every tracker's when `None`), soonest first.
pub(super) fn retries(
    conn: &Connection,
    tracker: Option<&str>,
) -> Result<Vec<RetryEntry>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT tracker, ticket_id, role, stage, failed_attempt, due_at, reason_code \
         FROM retries WHERE ?1 IS NULL OR tracker = ?1 ORDER BY due_at, tracker, ticket_id, role",
    )?;
    let rows = stmt.query_map([tracker], |row| {
        Ok((
            key_at(row, 0)?,
            row.get::<_, String>(3)?,
            row.get::<_, i64>(4)?,
            row.get::<_, i64>(5)?,
            row.get::<_, String>(6)?,
        ))
    })?;
    collect(rows, |(key, stage, failed, due, reason_code)| {
        Ok(RetryEntry {
            key,
            stage,
            failed_attempt: to_u32(failed, "failed_attempt")?,
            due_at: from_millis(due)?,
            reason_code,
        })
    })
}

/// Drop the retry of `key`; whether there was one.
pub(super) fn clear_retry(conn: &Connection, key: &ClaimKey) -> Result<bool, LedgerError> {
    let deleted = conn
        .prepare_cached("DELETE FROM retries WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3")?
        .execute((&key.tracker, &key.ticket_id, &key.role))?;
    Ok(deleted > 0)
}

// ----- holds -----

/// Record or replace a hold.
pub(super) fn put_hold(conn: &Connection, hold: &Hold) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO holds \
         (tracker, ticket_id, role, status, reason_code, created_at, ticket_updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute((
        &hold.key.tracker,
        &hold.key.ticket_id,
        &hold.key.role,
        &hold.status,
        &hold.reason_code,
        to_millis(hold.created_at),
        hold.ticket_updated_at.map(to_millis),
    ))?;
    Ok(())
}

/// Holds of `tracker` (every tracker's when `None`), ordered by key.
pub(super) fn holds(conn: &Connection, tracker: Option<&str>) -> Result<Vec<Hold>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT tracker, ticket_id, role, status, reason_code, created_at, ticket_updated_at \
         FROM holds WHERE ?1 IS NULL OR tracker = ?1 ORDER BY tracker, ticket_id, role",
    )?;
    let rows = stmt.query_map([tracker], |row| {
        Ok((
            key_at(row, 0)?,
            row.get::<_, String>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, i64>(5)?,
            row.get::<_, Option<i64>>(6)?,
        ))
    })?;
    collect(rows, |(key, status, reason_code, created, updated)| {
        Ok(Hold {
            key,
            status,
            reason_code,
            created_at: from_millis(created)?,
            ticket_updated_at: updated.map(from_millis).transpose()?,
        })
    })
}

/// Remove the hold of `key`; whether there was one.
pub(super) fn clear_hold(conn: &Connection, key: &ClaimKey) -> Result<bool, LedgerError> {
    let deleted = conn
        .prepare_cached("DELETE FROM holds WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3")?
        .execute((&key.tracker, &key.ticket_id, &key.role))?;
    Ok(deleted > 0)
}

// ----- run history -----

/// The run columns in the order [`decode_run`] reads them.
macro_rules! run_columns {
    () => {
        "run_id, tracker, ticket_id, role, stage, stage_attempt, claimer_id, phase, \
         outcome, reason_code, log_path, started_at, finished_at, session_id, route, title, \
         agent, model, rate_limits"
    };
}

/// Insert or replace the run-history row of `run.run_id`.
pub(super) fn record_run(conn: &Connection, run: &RunRecord) -> Result<(), LedgerError> {
    conn.prepare_cached(concat!(
        "INSERT INTO runs (",
        run_columns!(),
        ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) \
         ON CONFLICT (run_id) DO UPDATE SET tracker = excluded.tracker, \
         ticket_id = excluded.ticket_id, role = excluded.role, stage = excluded.stage, \
         stage_attempt = excluded.stage_attempt, claimer_id = excluded.claimer_id, \
         phase = excluded.phase, outcome = excluded.outcome, \
         reason_code = excluded.reason_code, log_path = excluded.log_path, \
         started_at = excluded.started_at, finished_at = excluded.finished_at, \
         session_id = COALESCE(excluded.session_id, runs.session_id), \
         route = COALESCE(excluded.route, runs.route), \
         title = COALESCE(excluded.title, runs.title), \
         agent = COALESCE(excluded.agent, runs.agent), \
         model = COALESCE(excluded.model, runs.model), \
         rate_limits = COALESCE(excluded.rate_limits, runs.rate_limits)"
    ))?
    .execute(rusqlite::params![
        &run.run_id,
        &run.key.tracker,
        &run.key.ticket_id,
        &run.key.role,
        &run.stage,
        run.stage_attempt,
        run.claimer_id.as_str(),
        phase_name(run.phase),
        &run.outcome,
        &run.reason_code,
        &run.log_path,
        to_millis(run.started_at),
        run.finished_at.map(to_millis),
        &run.session_id,
        &run.route,
        &run.title,
        &run.agent,
        &run.model,
        rate_limits_text(&run.rate_limits),
    ])?;
    Ok(())
}

/// Run history as stored, before decoding.
type StoredRun = (
    String,
    ClaimKey,
    String,
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn stored_run(row: &Row<'_>) -> rusqlite::Result<StoredRun> {
    Ok((
        row.get(0)?,
        key_at(row, 1)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
        row.get(12)?,
        row.get(13)?,
        row.get(14)?,
        row.get(15)?,
        row.get(16)?,
        row.get(17)?,
        row.get(18)?,
    ))
}

fn decode_run(stored: StoredRun) -> Result<RunRecord, LedgerError> {
    let (
        run_id,
        key,
        stage,
        attempt,
        claimer_id,
        phase,
        outcome,
        reason,
        log,
        start,
        end,
        session,
        route,
        title,
        agent,
        model,
        rate_limits,
    ) = stored;
    Ok(RunRecord {
        run_id,
        key,
        stage,
        stage_attempt: to_u32(attempt, "stage_attempt")?,
        claimer_id: claimer_id.into(),
        phase: parse_phase(&phase)?,
        outcome,
        reason_code: reason,
        log_path: log,
        started_at: from_millis(start)?,
        finished_at: end.map(from_millis).transpose()?,
        session_id: session,
        route,
        title,
        agent,
        model,
        rate_limits: parse_rate_limits(rate_limits.as_deref())?,
    })
}

fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The `limit` most recent runs of `tracker` (every tracker's when `None`), newest first.
pub(super) fn recent_runs(
    conn: &Connection,
    tracker: Option<&str>,
    limit: usize,
) -> Result<Vec<RunRecord>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE ?1 IS NULL OR tracker = ?1 \
         ORDER BY started_at DESC, run_id DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(rusqlite::params![tracker, limit_param(limit)], stored_run)?;
    collect(rows, decode_run)
}

/// Runs of `tracker` started at or after `since`, oldest first.
pub(super) fn runs_since(
    conn: &Connection,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<RunRecord>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE tracker = ?1 AND started_at >= ?2 ORDER BY started_at, run_id"
    ))?;
    let rows = stmt.query_map(rusqlite::params![tracker, to_millis(since)], stored_run)?;
    collect(rows, decode_run)
}

/// One run by id.
pub(super) fn run(conn: &Connection, run_id: &str) -> Result<Option<RunRecord>, LedgerError> {
    let stored = conn
        .prepare_cached(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE run_id = ?1"
        ))?
        .query_row([run_id], stored_run)
        .optional()?;
    stored.map(decode_run).transpose()
}

/// The runs of one ticket, newest first.
pub(super) fn ticket_runs(
    conn: &Connection,
    tracker: &str,
    ticket_id: &str,
    limit: usize,
) -> Result<Vec<RunRecord>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE tracker = ?1 AND ticket_id = ?2 \
         ORDER BY started_at DESC, run_id DESC LIMIT ?3"
    ))?;
    let rows = stmt.query_map(
        rusqlite::params![tracker, ticket_id, limit_param(limit)],
        stored_run,
    )?;
    collect(rows, decode_run)
}

/// The latest run of `key` with a session id.
pub(super) fn last_session(
    conn: &Connection,
    key: &ClaimKey,
) -> Result<Option<RunRecord>, LedgerError> {
    let stored = conn
        .prepare_cached(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE tracker = ?1 AND ticket_id = ?2 AND role = ?3 \
             AND session_id IS NOT NULL ORDER BY stage_attempt DESC, started_at DESC LIMIT 1"
        ))?
        .query_row((&key.tracker, &key.ticket_id, &key.role), stored_run)
        .optional()?;
    stored.map(decode_run).transpose()
}

// ----- blocker checks -----

/// When each ticket of `tracker` last had its blockers read.
pub(super) fn blocker_checks(
    conn: &Connection,
    tracker: &str,
) -> Result<Vec<(String, Timestamp)>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT ticket_id, checked_at FROM blocker_checks WHERE tracker = ?1 ORDER BY ticket_id",
    )?;
    let rows = stmt.query_map([tracker], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })?;
    collect(rows, |(id, at)| Ok((id, from_millis(at)?)))
}

/// Record a blocker read.
pub(super) fn record_blocker_check(
    conn: &Connection,
    tracker: &str,
    ticket_id: &str,
    at: Timestamp,
) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO blocker_checks (tracker, ticket_id, checked_at) VALUES (?1, ?2, ?3)",
    )?
    .execute((tracker, ticket_id, to_millis(at)))?;
    Ok(())
}

// ----- outbox -----

/// The outbox columns in the order [`StoredOutbox::from_row`] reads them (a macro, so the
/// SQL stays a `&'static str`).
macro_rules! outbox_columns {
    () => {
        "idempotency_key, tracker, ticket_id, role, stage, stage_attempt, run_id, outcome, \
         from_status, to_status, comment_body, state, write_attempts, next_attempt_at, \
         last_error, created_at, follow_up"
    };
}

/// Insert `entry` unless its idempotency key is already stored, with its write lease
/// held by `holder` until `lease_until` (ms); whether it was inserted.
pub(super) fn outbox_put(
    tx: &Connection,
    entry: &OutboxEntry,
    holder: &str,
    lease_until: i64,
) -> Result<bool, LedgerError> {
    let inserted = tx
        .prepare_cached(concat!(
            "INSERT OR IGNORE INTO outbox (",
            outbox_columns!(),
            ", lease_holder, lease_expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, \
             ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
        ))?
        .execute(rusqlite::params![
            &entry.idempotency_key,
            &entry.key.tracker,
            &entry.key.ticket_id,
            &entry.key.role,
            &entry.stage,
            entry.stage_attempt,
            &entry.run_id,
            &entry.outcome,
            &entry.from_status,
            &entry.to_status,
            &entry.comment_body,
            outbox_state_name(entry.state),
            entry.write_attempts,
            to_millis(entry.next_attempt_at),
            &entry.last_error,
            to_millis(entry.created_at),
            follow_up_text(&entry.follow_up),
            holder,
            lease_until,
        ])?;
    Ok(inserted > 0)
}

/// Take the write lease of a pending entry; whether `holder` now holds it.
pub(super) fn outbox_take(
    conn: &Connection,
    idempotency_key: &str,
    holder: &str,
    lease: std::time::Duration,
    now: Timestamp,
) -> Result<bool, LedgerError> {
    let taken = conn
        .prepare_cached(
            "UPDATE outbox SET lease_holder = ?2, lease_expires_at = ?4 \
             WHERE idempotency_key = ?1 AND state IN ('pending', 'comment_posted') \
             AND (lease_holder IS NULL OR lease_holder = ?2 OR lease_expires_at <= ?3)",
        )?
        .execute((
            idempotency_key,
            holder,
            to_millis(now),
            expiry_millis(now, lease),
        ))?;
    Ok(taken > 0)
}

/// Give up `holder`'s write lease.
pub(super) fn outbox_release(
    conn: &Connection,
    idempotency_key: &str,
    holder: &str,
) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "UPDATE outbox SET lease_holder = NULL, lease_expires_at = NULL \
         WHERE idempotency_key = ?1 AND lease_holder = ?2",
    )?
    .execute((idempotency_key, holder))?;
    Ok(())
}

/// Update the progress columns of an entry (a no-op if the key is unknown).
pub(super) fn outbox_update(tx: &Connection, entry: &OutboxEntry) -> Result<(), LedgerError> {
    tx.prepare_cached(
        "UPDATE outbox SET state = ?2, write_attempts = ?3, next_attempt_at = ?4, \
         last_error = ?5 WHERE idempotency_key = ?1",
    )?
    .execute((
        &entry.idempotency_key,
        outbox_state_name(entry.state),
        entry.write_attempts,
        to_millis(entry.next_attempt_at),
        &entry.last_error,
    ))?;
    Ok(())
}

/// Entries of `tracker` still to be written back, oldest first.
pub(super) fn outbox_pending(
    conn: &Connection,
    tracker: &str,
) -> Result<Vec<OutboxEntry>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        outbox_columns!(),
        " FROM outbox WHERE tracker = ?1 AND state IN ('pending', 'comment_posted') \
         ORDER BY created_at, idempotency_key"
    ))?;
    let rows = stmt.query_map([tracker], StoredOutbox::from_row)?;
    collect(rows, StoredOutbox::into_entry)
}

/// One entry by idempotency key.
pub(super) fn outbox_get(
    conn: &Connection,
    idempotency_key: &str,
) -> Result<Option<OutboxEntry>, LedgerError> {
    let stored = conn
        .prepare_cached(concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE idempotency_key = ?1"
        ))?
        .query_row([idempotency_key], StoredOutbox::from_row)
        .optional()?;
    stored.map(StoredOutbox::into_entry).transpose()
}

/// An outbox row as stored, before its integers and state are checked.
struct StoredOutbox {
    entry: OutboxEntry,
    stage_attempt: i64,
    state: String,
    write_attempts: i64,
    next_attempt_at: i64,
    created_at: i64,
    follow_up: Option<String>,
}

impl StoredOutbox {
    /// Read a row selected with `outbox_columns!()`; the checked fields get placeholders.
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        let epoch = chrono::DateTime::UNIX_EPOCH;
        Ok(StoredOutbox {
            entry: OutboxEntry {
                idempotency_key: row.get(0)?,
                key: key_at(row, 1)?,
                stage: row.get(4)?,
                stage_attempt: 0,
                run_id: row.get(6)?,
                outcome: row.get(7)?,
                from_status: row.get(8)?,
                to_status: row.get(9)?,
                comment_body: row.get(10)?,
                state: crate::ledger::OutboxState::Pending,
                write_attempts: 0,
                next_attempt_at: epoch,
                last_error: row.get(14)?,
                created_at: epoch,
                follow_up: crate::ledger::FollowUp::Clear,
            },
            stage_attempt: row.get(5)?,
            state: row.get(11)?,
            write_attempts: row.get(12)?,
            next_attempt_at: row.get(13)?,
            created_at: row.get(15)?,
            follow_up: row.get(16)?,
        })
    }

    fn into_entry(self) -> Result<OutboxEntry, LedgerError> {
        let follow_up = match &self.follow_up {
            Some(text) => parse_follow_up(text)?,
            None => legacy_follow_up(
                &self.entry.outcome,
                self.entry.to_status == self.entry.stage,
            ),
        };
        Ok(OutboxEntry {
            follow_up,
            stage_attempt: to_u32(self.stage_attempt, "stage_attempt")?,
            state: parse_outbox_state(&self.state)?,
            write_attempts: to_u32(self.write_attempts, "write_attempts")?,
            next_attempt_at: from_millis(self.next_attempt_at)?,
            created_at: from_millis(self.created_at)?,
            ..self.entry
        })
    }
}

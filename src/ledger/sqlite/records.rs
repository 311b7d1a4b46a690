//! SQL for the retry queue, holds, run history and the outbox.

use rusqlite::{Connection, OptionalExtension, Row};

use super::codec::{
    from_millis, outbox_state_name, parse_outbox_state, parse_phase, phase_name, to_millis, to_u32,
};
use crate::ledger::{ClaimKey, Hold, LedgerError, OutboxEntry, RetryEntry, RunRecord};

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

/// Every queued retry, soonest first.
pub(super) fn retries(conn: &Connection) -> Result<Vec<RetryEntry>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT tracker, ticket_id, role, stage, failed_attempt, due_at, reason_code \
         FROM retries ORDER BY due_at, tracker, ticket_id, role",
    )?;
    let rows = stmt.query_map([], |row| {
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
        "INSERT OR REPLACE INTO holds (tracker, ticket_id, role, status, reason_code, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute((
        &hold.key.tracker,
        &hold.key.ticket_id,
        &hold.key.role,
        &hold.status,
        &hold.reason_code,
        to_millis(hold.created_at),
    ))?;
    Ok(())
}

/// Every hold, ordered by key.
pub(super) fn holds(conn: &Connection) -> Result<Vec<Hold>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT tracker, ticket_id, role, status, reason_code, created_at \
         FROM holds ORDER BY tracker, ticket_id, role",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((
            key_at(row, 0)?,
            row.get::<_, String>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, i64>(5)?,
        ))
    })?;
    collect(rows, |(key, status, reason_code, created)| {
        Ok(Hold {
            key,
            status,
            reason_code,
            created_at: from_millis(created)?,
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

/// Insert or replace the run-history row of `run.run_id`.
pub(super) fn record_run(conn: &Connection, run: &RunRecord) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO runs (run_id, tracker, ticket_id, role, stage, stage_attempt, claimer_id, \
         phase, outcome, reason_code, log_path, started_at, finished_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
         ON CONFLICT (run_id) DO UPDATE SET tracker = excluded.tracker, \
         ticket_id = excluded.ticket_id, role = excluded.role, stage = excluded.stage, \
         stage_attempt = excluded.stage_attempt, claimer_id = excluded.claimer_id, \
         phase = excluded.phase, outcome = excluded.outcome, \
         reason_code = excluded.reason_code, log_path = excluded.log_path, \
         started_at = excluded.started_at, finished_at = excluded.finished_at",
    )?
    .execute((
        &run.run_id,
        &run.key.tracker,
        &run.key.ticket_id,
        &run.key.role,
        &run.stage,
        run.stage_attempt,
        &run.claimer_id,
        phase_name(run.phase),
        &run.outcome,
        &run.reason_code,
        &run.log_path,
        to_millis(run.started_at),
        run.finished_at.map(to_millis),
    ))?;
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
);

/// The `limit` most recent runs, newest first.
pub(super) fn recent_runs(conn: &Connection, limit: usize) -> Result<Vec<RunRecord>, LedgerError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT run_id, tracker, ticket_id, role, stage, stage_attempt, claimer_id, phase, \
         outcome, reason_code, log_path, started_at, finished_at \
         FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |row| -> rusqlite::Result<StoredRun> {
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
        ))
    })?;
    collect(rows, |stored| {
        let (run_id, key, stage, attempt, claimer_id, phase, outcome, reason, log, start, end) =
            stored;
        Ok(RunRecord {
            run_id,
            key,
            stage,
            stage_attempt: to_u32(attempt, "stage_attempt")?,
            claimer_id,
            phase: parse_phase(&phase)?,
            outcome,
            reason_code: reason,
            log_path: log,
            started_at: from_millis(start)?,
            finished_at: end.map(from_millis).transpose()?,
        })
    })
}

// ----- outbox -----

/// The outbox columns in the order [`StoredOutbox::from_row`] reads them (a macro, so the
/// SQL stays a `&'static str`).
macro_rules! outbox_columns {
    () => {
        "idempotency_key, tracker, ticket_id, role, stage, stage_attempt, run_id, outcome, \
         from_status, to_status, comment_body, state, write_attempts, next_attempt_at, \
         last_error, created_at"
    };
}

/// Insert `entry` unless its idempotency key is already stored; whether it was inserted.
pub(super) fn outbox_put(tx: &Connection, entry: &OutboxEntry) -> Result<bool, LedgerError> {
    let inserted = tx
        .prepare_cached(concat!(
            "INSERT OR IGNORE INTO outbox (",
            outbox_columns!(),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
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
        ])?;
    Ok(inserted > 0)
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
            },
            stage_attempt: row.get(5)?,
            state: row.get(11)?,
            write_attempts: row.get(12)?,
            next_attempt_at: row.get(13)?,
            created_at: row.get(15)?,
        })
    }

    fn into_entry(self) -> Result<OutboxEntry, LedgerError> {
        Ok(OutboxEntry {
            stage_attempt: to_u32(self.stage_attempt, "stage_attempt")?,
            state: parse_outbox_state(&self.state)?,
            write_attempts: to_u32(self.write_attempts, "write_attempts")?,
            next_attempt_at: from_millis(self.next_attempt_at)?,
            created_at: from_millis(self.created_at)?,
            ..self.entry
        })
    }
}

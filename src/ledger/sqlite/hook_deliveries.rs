//! SQL for hook delivery records: which hook has which event, and failed ones to retry.

use rusqlite::{Connection, OptionalExtension, Row};

use crate::ledger::codec::{from_millis, to_millis, to_u32};
use crate::ledger::{HookDelivery, HookDeliveryState, LedgerError, Timestamp};

const COLUMNS: &str = "delivery_id, sink_id, event, payload, state, attempts, last_error, \
                       next_attempt_at, created_at, updated_at";

/// The stored name of a delivery state.
fn state_name(state: HookDeliveryState) -> &'static str {
    match state {
        HookDeliveryState::Delivered => "delivered",
        HookDeliveryState::Failed => "failed",
        HookDeliveryState::GaveUp => "gave_up",
    }
}

/// Decode a stored delivery state.
fn parse_state(name: &str) -> Result<HookDeliveryState, LedgerError> {
    match name {
        "delivered" => Ok(HookDeliveryState::Delivered),
        "failed" => Ok(HookDeliveryState::Failed),
        "gave_up" => Ok(HookDeliveryState::GaveUp),
        other => Err(LedgerError::Corrupt(format!(
            "unknown hook delivery state {other:?}"
        ))),
    }
}

/// The columns of one row, before our own decoding.
type RawRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<i64>,
    i64,
    i64,
);

fn read_row(row: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    ))
}

fn decode(raw: RawRow) -> Result<HookDelivery, LedgerError> {
    let (delivery_id, sink_id, event, payload, state, attempts, last_error, next, created, updated) =
        raw;
    Ok(HookDelivery {
        delivery_id,
        sink_id,
        event,
        payload,
        state: parse_state(&state)?,
        attempts: to_u32(attempts, "hook attempts")?,
        last_error,
        next_attempt_at: next.map(from_millis).transpose()?,
        created_at: from_millis(created)?,
        updated_at: from_millis(updated)?,
    })
}

fn query(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<HookDelivery>, LedgerError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, read_row)?;
    rows.map(|row| decode(row?)).collect()
}

/// One record by key.
pub(super) fn get(
    conn: &Connection,
    delivery_id: &str,
    sink_id: &str,
) -> Result<Option<HookDelivery>, LedgerError> {
    let sql =
        format!("SELECT {COLUMNS} FROM hook_deliveries WHERE delivery_id = ?1 AND sink_id = ?2");
    let raw = conn
        .prepare_cached(&sql)?
        .query_row((delivery_id, sink_id), read_row)
        .optional()?;
    raw.map(decode).transpose()
}

/// Insert or update a record, keeping the first `created_at`.
pub(super) fn record(conn: &Connection, d: &HookDelivery) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO hook_deliveries \
         (delivery_id, sink_id, event, payload, state, attempts, last_error, next_attempt_at, \
          created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT (delivery_id, sink_id) DO UPDATE SET \
         event = excluded.event, payload = excluded.payload, state = excluded.state, \
         attempts = excluded.attempts, last_error = excluded.last_error, \
         next_attempt_at = excluded.next_attempt_at, updated_at = excluded.updated_at",
    )?
    .execute((
        &d.delivery_id,
        &d.sink_id,
        &d.event,
        &d.payload,
        state_name(d.state),
        d.attempts,
        &d.last_error,
        d.next_attempt_at.map(to_millis),
        to_millis(d.created_at),
        to_millis(d.updated_at),
    ))?;
    Ok(())
}

/// Failed and given-up records, most recently changed first.
pub(super) fn failures(conn: &Connection, limit: usize) -> Result<Vec<HookDelivery>, LedgerError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM hook_deliveries WHERE state IN ('failed', 'gave_up') \
         ORDER BY updated_at DESC, delivery_id, sink_id LIMIT ?1"
    );
    query(conn, &sql, [i64::try_from(limit).unwrap_or(i64::MAX)])
}

/// Failed records due at `now`, soonest first.
pub(super) fn due(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<HookDelivery>, LedgerError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM hook_deliveries \
         WHERE state = 'failed' AND next_attempt_at <= ?1 \
         ORDER BY next_attempt_at, delivery_id, sink_id LIMIT ?2"
    );
    query(
        conn,
        &sql,
        (to_millis(now), i64::try_from(limit).unwrap_or(i64::MAX)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_round_trip() {
        for state in [
            HookDeliveryState::Delivered,
            HookDeliveryState::Failed,
            HookDeliveryState::GaveUp,
        ] {
            assert_eq!(parse_state(state_name(state)).unwrap(), state);
        }
        assert!(parse_state("bogus").is_err());
    }
}

//! SQL for run accounting: tokens and cost per run, totals per ticket and role.

use rusqlite::{Connection, OptionalExtension, Row};

use crate::ledger::codec::{from_millis, to_millis};
use crate::ledger::{ClaimKey, LedgerError, RunUsage, Timestamp, UsageTotal};

/// A stored count (never negative) as a `u64`.
fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// Insert or replace one run's usage.
pub(super) fn record(conn: &Connection, u: &RunUsage) -> Result<(), LedgerError> {
    let stored = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "INSERT OR REPLACE INTO run_usage (run_id, tracker, ticket_id, role, tokens_in, tokens_out, \
         cost_usd, recorded_at, cache_read_tokens, cache_write_tokens, reasoning_tokens, \
         agent, model) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(rusqlite::params![
        &u.run_id,
        &u.key.tracker,
        &u.key.ticket_id,
        &u.key.role,
        stored(u.tokens_in),
        stored(u.tokens_out),
        u.cost_usd,
        to_millis(u.recorded_at),
        stored(u.cache_read_tokens),
        stored(u.cache_write_tokens),
        stored(u.reasoning_tokens),
        &u.agent,
        &u.model,
    ])?;
    Ok(())
}

/// The aggregate columns every total selects, in the order [`total_from`] reads them
/// (after the two grouping columns).
macro_rules! total_columns {
    () => {
        "COUNT(*), COALESCE(SUM(u.tokens_in), 0), COALESCE(SUM(u.tokens_out), 0), \
         COALESCE(SUM(u.cache_read_tokens), 0), COALESCE(SUM(u.cache_write_tokens), 0), \
         COALESCE(SUM(u.reasoning_tokens), 0), COALESCE(SUM(u.cost_usd), 0.0), \
         COALESCE(SUM(u.run_id IS NOT NULL AND u.cost_usd IS NULL), 0), \
         COALESCE(SUM(u.run_id IS NULL), 0)"
    };
}

/// A total from the columns of `total_columns!()` starting at `first`.
fn total_from(
    row: &Row<'_>,
    first: usize,
    ticket_id: String,
    role: String,
) -> rusqlite::Result<UsageTotal> {
    Ok(UsageTotal {
        ticket_id,
        role,
        runs: u32::try_from(row.get::<_, i64>(first)?).unwrap_or(u32::MAX),
        tokens_in: count(row.get(first + 1)?),
        tokens_out: count(row.get(first + 2)?),
        cache_read_tokens: count(row.get(first + 3)?),
        cache_write_tokens: count(row.get(first + 4)?),
        reasoning_tokens: count(row.get(first + 5)?),
        cost_usd: row.get(first + 6)?,
        runs_without_cost: u32::try_from(row.get::<_, i64>(first + 7)?).unwrap_or(u32::MAX),
        runs_without_usage: u32::try_from(row.get::<_, i64>(first + 8)?).unwrap_or(u32::MAX),
    })
}

/// Runs and usage per (ticket, role) of `tracker`: runs from run history, usage from
/// the runs that reported any.
pub(super) fn totals(conn: &Connection, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT r.ticket_id, r.role, ",
        total_columns!(),
        " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
         WHERE r.tracker = ?1 GROUP BY r.ticket_id, r.role ORDER BY r.ticket_id, r.role"
    ))?;
    let rows = stmt.query_map([tracker], |row| {
        total_from(row, 2, row.get(0)?, row.get(1)?)
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Totals per role of the runs of `tracker` started at or after `since`.
pub(super) fn by_role_since(
    conn: &Connection,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<UsageTotal>, LedgerError> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT r.role, ",
        total_columns!(),
        " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
         WHERE r.tracker = ?1 AND r.started_at >= ?2 GROUP BY r.role ORDER BY r.role"
    ))?;
    let rows = stmt.query_map(rusqlite::params![tracker, to_millis(since)], |row| {
        total_from(row, 1, String::new(), row.get(0)?)
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Totals of one ticket across its roles.
pub(super) fn ticket(
    conn: &Connection,
    tracker: &str,
    ticket_id: &str,
) -> Result<UsageTotal, LedgerError> {
    let total = conn
        .prepare_cached(concat!(
            "SELECT ",
            total_columns!(),
            " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
             WHERE r.tracker = ?1 AND r.ticket_id = ?2"
        ))?
        .query_row([tracker, ticket_id], |row| {
            total_from(row, 0, ticket_id.to_string(), String::new())
        })
        .optional()?;
    Ok(total.unwrap_or_default())
}

/// The usage rows of the runs of `tracker` started at or after `since`, by run id.
pub(super) fn since(
    conn: &Connection,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<RunUsage>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT u.run_id, u.tracker, u.ticket_id, u.role, u.tokens_in, u.tokens_out, \
         u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens, u.cost_usd, \
         u.recorded_at, u.agent, u.model FROM run_usage u JOIN runs r ON r.run_id = u.run_id \
         WHERE r.tracker = ?1 AND r.started_at >= ?2 ORDER BY u.run_id",
    )?;
    let rows = stmt.query_map(rusqlite::params![tracker, to_millis(since)], |row| {
        Ok((
            RunUsage {
                run_id: row.get(0)?,
                key: ClaimKey::new(
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                ),
                tokens_in: count(row.get(4)?),
                tokens_out: count(row.get(5)?),
                cache_read_tokens: count(row.get(6)?),
                cache_write_tokens: count(row.get(7)?),
                reasoning_tokens: count(row.get(8)?),
                cost_usd: row.get(9)?,
                recorded_at: Timestamp::default(),
                agent: row.get(11)?,
                model: row.get(12)?,
            },
            row.get::<_, i64>(10)?,
        ))
    })?;
    rows.map(|row| {
        let (mut usage, at) = row?;
        usage.recorded_at = from_millis(at)?;
        Ok(usage)
    })
    .collect()
}

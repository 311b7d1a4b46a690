//! SQL for run accounting: tokens and cost per run, totals per ticket and role.

use rusqlite::{Connection, OptionalExtension};

use super::codec::to_millis;
use crate::ledger::{LedgerError, RunUsage, UsageTotal};

/// Insert or replace one run's usage.
pub(super) fn record(conn: &Connection, u: &RunUsage) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO run_usage (run_id, tracker, ticket_id, role, tokens_in, tokens_out, cost_usd, recorded_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute((
        &u.run_id,
        &u.key.tracker,
        &u.key.ticket_id,
        &u.key.role,
        i64::try_from(u.tokens_in).unwrap_or(i64::MAX),
        i64::try_from(u.tokens_out).unwrap_or(i64::MAX),
        u.cost_usd,
        to_millis(u.recorded_at),
    ))?;
    Ok(())
}

/// Runs and usage per (ticket, role) of `tracker`: runs from run history, usage from
/// the runs that reported any.
pub(super) fn totals(conn: &Connection, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT r.ticket_id, r.role, COUNT(*), \
                COALESCE(SUM(u.tokens_in), 0), COALESCE(SUM(u.tokens_out), 0), COALESCE(SUM(u.cost_usd), 0.0) \
         FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
         WHERE r.tracker = ?1 GROUP BY r.ticket_id, r.role ORDER BY r.ticket_id, r.role",
    )?;
    let rows = stmt.query_map([tracker], |row| {
        Ok(UsageTotal {
            ticket_id: row.get(0)?,
            role: row.get(1)?,
            runs: u32::try_from(row.get::<_, i64>(2)?).unwrap_or(u32::MAX),
            tokens_in: u64::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
            tokens_out: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
            cost_usd: row.get(5)?,
        })
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
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(u.tokens_in), 0), COALESCE(SUM(u.tokens_out), 0), \
                    COALESCE(SUM(u.cost_usd), 0.0) \
             FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
             WHERE r.tracker = ?1 AND r.ticket_id = ?2",
        )?
        .query_row([tracker, ticket_id], |row| {
            Ok(UsageTotal {
                ticket_id: ticket_id.to_string(),
                role: String::new(),
                runs: u32::try_from(row.get::<_, i64>(0)?).unwrap_or(u32::MAX),
                tokens_in: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
                tokens_out: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
                cost_usd: row.get(3)?,
            })
        })
        .optional()?;
    Ok(total.unwrap_or_default())
}

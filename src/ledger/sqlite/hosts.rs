//! SQL for the hosts ticking each tracker (their presence rows).

use rusqlite::Connection;

use crate::ledger::codec::{from_millis, to_millis};
use crate::ledger::{HostPresence, LedgerError, Timestamp};

/// Write `host`'s rows of `stages` until `expires_at`; delete the tracker's expired rows.
pub(super) fn announce(
    conn: &Connection,
    tracker: &str,
    host: &str,
    stages: &[(String, String)],
    expires_at: Timestamp,
    now: Timestamp,
) -> Result<(), LedgerError> {
    conn.prepare_cached("DELETE FROM hosts WHERE tracker = ?1 AND expires_at <= ?2")?
        .execute((tracker, to_millis(now)))?;
    let mut upsert = conn.prepare_cached(
        "INSERT INTO hosts (tracker, host, role, status, expires_at) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (tracker, host, role, status) DO UPDATE SET expires_at = excluded.expires_at",
    )?;
    for (role, status) in stages {
        upsert.execute((tracker, host, role, status, to_millis(expires_at)))?;
    }
    Ok(())
}

/// The presence rows of `tracker`, ordered by host, role and status.
pub(super) fn list(conn: &Connection, tracker: &str) -> Result<Vec<HostPresence>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT host, role, status, expires_at FROM hosts WHERE tracker = ?1 \
         ORDER BY host, role, status",
    )?;
    let rows = stmt.query_map([tracker], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, i64>(3)?,
        ))
    })?;
    rows.map(|row| {
        let (host, role, status, expires_at) = row?;
        Ok(HostPresence {
            host,
            role,
            status,
            expires_at: from_millis(expires_at)?,
        })
    })
    .collect()
}

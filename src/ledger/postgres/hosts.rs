//! SQL for the hosts ticking each tracker (their presence rows).

use super::claims::corrupt;
use super::pool::Conn;
use crate::ledger::codec::{from_millis, to_millis};
use crate::ledger::{HostPresence, LedgerError, Timestamp};

/// Write `host`'s rows of `stages` until `expires_at`; delete the tracker's expired rows.
/// One statement: the stages go as two arrays.
pub(super) fn announce(
    conn: &mut Conn,
    tracker: &str,
    host: &str,
    stages: &[(String, String)],
    expires_at: Timestamp,
    now: Timestamp,
) -> Result<(), LedgerError> {
    let roles: Vec<&str> = stages.iter().map(|(role, _)| role.as_str()).collect();
    let statuses: Vec<&str> = stages.iter().map(|(_, status)| status.as_str()).collect();
    conn.exec(
        "WITH gone AS (DELETE FROM hosts WHERE tracker = $1 AND expires_at <= $5)
         INSERT INTO hosts (tracker, host, role, status, expires_at)
         SELECT $1, $2, s.role, s.status, $6
           FROM unnest($3::text[], $4::text[]) AS s (role, status)
         ON CONFLICT (tracker, host, role, status) DO UPDATE SET expires_at = excluded.expires_at",
        &[
            &tracker,
            &host,
            &roles,
            &statuses,
            &to_millis(now),
            &to_millis(expires_at),
        ],
    )?;
    Ok(())
}

/// The presence rows of `tracker`, ordered by host, role and status.
pub(super) fn list(conn: &mut Conn, tracker: &str) -> Result<Vec<HostPresence>, LedgerError> {
    conn.rows(
        "SELECT host, role, status, expires_at FROM hosts WHERE tracker = $1 \
         ORDER BY host, role, status",
        &[&tracker],
    )?
    .iter()
    .map(|row| {
        Ok(HostPresence {
            host: row.try_get(0).map_err(corrupt)?,
            role: row.try_get(1).map_err(corrupt)?,
            status: row.try_get(2).map_err(corrupt)?,
            expires_at: from_millis(row.try_get(3).map_err(corrupt)?)?,
        })
    })
    .collect()
}

//! SQL for reactions to pull requests (issue #32): stored with the outbox entry that
//! writes their block, in one transaction.

use rusqlite::{Connection, OptionalExtension};

use super::records;
use crate::ledger::codec::{from_millis, parse_reaction_json, reaction_json, to_millis, to_u32};
use crate::ledger::{LedgerError, OutboxEntry, ReactionPut, ReactionRecord};

/// Insert `reaction` and its outbox `entry` (in the caller's transaction), unless the
/// reaction, or its kind's round on the ticket, is stored already.
pub(super) fn put(
    tx: &Connection,
    reaction: &ReactionRecord,
    entry: &OutboxEntry,
    holder: &str,
    lease_until: i64,
) -> Result<ReactionPut, LedgerError> {
    let taken: Option<i64> = tx
        .prepare_cached(
            "SELECT 1 FROM reactions WHERE fingerprint = ?1 \
             OR (tracker = ?2 AND ticket_id = ?3 AND kind = ?4 AND round = ?5)",
        )?
        .query_row(
            rusqlite::params![
                &reaction.fingerprint,
                &reaction.tracker,
                &reaction.ticket_id,
                &reaction.kind,
                reaction.round,
            ],
            |row| row.get(0),
        )
        .optional()?;
    if taken.is_some() {
        return Ok(ReactionPut::Exists);
    }
    let (handed, payload) = reaction_json(reaction);
    tx.prepare_cached(
        "INSERT INTO reactions (fingerprint, tracker, ticket_id, kind, round, to_role, \
         pull_request, head_sha, handed, payload, decided_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(rusqlite::params![
        &reaction.fingerprint,
        &reaction.tracker,
        &reaction.ticket_id,
        &reaction.kind,
        reaction.round,
        &reaction.to_role,
        i64::try_from(reaction.pull_request).unwrap_or(i64::MAX),
        &reaction.head_sha,
        handed,
        payload,
        to_millis(reaction.decided_at),
    ])?;
    if !records::outbox_put(tx, entry, holder, lease_until)? {
        // The block's key is the fingerprint: an entry without its reaction row was
        // stored by nothing this ledger knows. Keep both as they are, and say so.
        return Err(LedgerError::Corrupt(format!(
            "the outbox holds {} but no reaction with that fingerprint",
            entry.idempotency_key
        )));
    }
    Ok(ReactionPut::Stored)
}

/// The reactions of `tracker` (of one ticket when given), oldest first.
pub(super) fn list(
    conn: &Connection,
    tracker: &str,
    ticket_id: Option<&str>,
) -> Result<Vec<ReactionRecord>, LedgerError> {
    let mut stmt = conn.prepare_cached(
        "SELECT fingerprint, tracker, ticket_id, kind, round, to_role, pull_request, head_sha, \
         handed, payload, decided_at FROM reactions \
         WHERE tracker = ?1 AND (?2 IS NULL OR ticket_id = ?2) \
         ORDER BY decided_at, ticket_id, kind, round",
    )?;
    let rows = stmt.query_map((tracker, ticket_id), |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, i64>(4)?,
            row.get::<_, Option<String>>(5)?,
            row.get::<_, i64>(6)?,
            row.get::<_, String>(7)?,
            row.get::<_, String>(8)?,
            row.get::<_, String>(9)?,
            row.get::<_, i64>(10)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (
            fingerprint,
            tracker,
            ticket_id,
            kind,
            round,
            to_role,
            pr,
            head_sha,
            handed,
            payload,
            at,
        ) = row?;
        let (handed, payload) = parse_reaction_json(&handed, &payload)?;
        out.push(ReactionRecord {
            tracker,
            ticket_id,
            kind,
            fingerprint,
            round: to_u32(round, "reaction round")?,
            to_role,
            pull_request: u64::try_from(pr)
                .map_err(|_| LedgerError::Corrupt(format!("pull request number {pr}")))?,
            head_sha,
            handed,
            payload,
            decided_at: from_millis(at)?,
        });
    }
    Ok(out)
}

//! SQL for reactions to pull requests: the SQLite ledger's (`sqlite/reactions.rs`) in
//! Postgres' dialect. `ON CONFLICT DO NOTHING` covers both unique keys, so two hosts
//! storing the same reaction at once store it once.

use super::claims::corrupt;
use super::pool::Conn;
use super::records;
use crate::ledger::codec::{from_millis, parse_reaction_json, reaction_json, to_millis, to_u32};
use crate::ledger::{LedgerError, OutboxEntry, ReactionPut, ReactionRecord};

/// Insert `reaction` and its outbox `entry` (in the caller's transaction), unless the
/// reaction, or its kind's round on the ticket, is stored already.
pub(super) fn put(
    tx: &mut Conn,
    reaction: &ReactionRecord,
    entry: &OutboxEntry,
    holder: &str,
    lease_until: i64,
) -> Result<ReactionPut, LedgerError> {
    let (handed, payload) = reaction_json(reaction);
    let inserted = tx.exec(
        "INSERT INTO reactions (fingerprint, tracker, ticket_id, kind, round, to_role, \
         pull_request, head_sha, handed, payload, decided_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
        &[
            &reaction.fingerprint,
            &reaction.tracker,
            &reaction.ticket_id,
            &reaction.kind,
            &i64::from(reaction.round),
            &reaction.to_role,
            &i64::try_from(reaction.pull_request).unwrap_or(i64::MAX),
            &reaction.head_sha,
            &handed,
            &payload,
            &to_millis(reaction.decided_at),
        ],
    )?;
    if inserted == 0 {
        return Ok(ReactionPut::Exists);
    }
    if !records::outbox_put(tx, entry, holder, lease_until)? {
        return Err(LedgerError::Corrupt(format!(
            "the outbox holds {} but no reaction with that fingerprint",
            entry.idempotency_key
        )));
    }
    Ok(ReactionPut::Stored)
}

/// The reactions of `tracker` (of one ticket when given), oldest first.
pub(super) fn list(
    conn: &mut Conn,
    tracker: &str,
    ticket_id: Option<&str>,
) -> Result<Vec<ReactionRecord>, LedgerError> {
    let rows = conn.rows(
        "SELECT fingerprint, tracker, ticket_id, kind, round, to_role, pull_request, head_sha, \
         handed, payload, decided_at FROM reactions \
         WHERE tracker = $1 AND ($2::TEXT IS NULL OR ticket_id = $2) \
         ORDER BY decided_at, ticket_id, kind, round",
        &[&tracker, &ticket_id],
    )?;
    let mut out = Vec::new();
    for row in &rows {
        let get_s = |i: usize| row.try_get::<_, String>(i).map_err(corrupt);
        let round: i64 = row.try_get(4).map_err(corrupt)?;
        let pr: i64 = row.try_get(6).map_err(corrupt)?;
        let at: i64 = row.try_get(10).map_err(corrupt)?;
        let (handed, payload) = parse_reaction_json(&get_s(8)?, &get_s(9)?)?;
        out.push(ReactionRecord {
            fingerprint: get_s(0)?,
            tracker: get_s(1)?,
            ticket_id: get_s(2)?,
            kind: get_s(3)?,
            round: to_u32(round, "reaction round")?,
            to_role: row.try_get(5).map_err(corrupt)?,
            pull_request: u64::try_from(pr)
                .map_err(|_| LedgerError::Corrupt(format!("pull request number {pr}")))?,
            head_sha: get_s(7)?,
            handed,
            payload,
            decided_at: from_millis(at)?,
        });
    }
    Ok(out)
}

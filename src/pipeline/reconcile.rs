//! Reconcile: runs whose ticket left their stage (a person moved it, closed it, deleted
//! it) are asked to stop; retries of tickets that left are dropped, and holds a person
//! released (a move, a change after the hold, a `/retry`); claims whose holder is gone
//! are reaped.
//!
//! [`reconcile`] only reads and returns what to do ([`Reconciliation`]); [`apply`]
//! writes it. A dry run reports the cancels and applies nothing.

use super::context::{run_ref, Context};
use std::collections::HashMap;

use super::decide::placement::{place_claim, retry_still_due, ClaimPlacement, Whereabouts};
use super::decide::release::{judge_hold, HoldVerdict};
use super::history::Answerers;
use super::observe::{where_are, Observation};
use super::report::CancelLine;
use super::PipelineError;
use crate::hooks::Event;
use crate::ledger::{claimer_host, Claim, ClaimKey, Hold};
use crate::tracker::{same_name, Comment};

/// What reconcile found to do; [`apply`] does it (a dry run reports `cancels` and
/// applies nothing).
pub(crate) struct Reconciliation {
    /// Claims whose ticket left its stage and whose holder is not yet asked to stop.
    pub cancels: Vec<Cancel>,
    /// Retries of tickets that left where they were due.
    pub stale_retries: Vec<ClaimKey>,
    /// Holds released: their ticket left where it was held, a person changed it after
    /// the hold, or asked `/retry`.
    pub stale_holds: Vec<ReleasedHold>,
    /// Tickets found terminal or closed, by id in order: they lose their workspace
    /// (once the runs asked to stop have ended). Gone, unknown or moved elsewhere is
    /// no evidence: those keep it.
    pub finished: Vec<String>,
}

/// A hold to clear, and why.
pub(crate) struct ReleasedHold {
    /// The held (ticket, role).
    pub key: ClaimKey,
    /// What released it.
    pub why: String,
}

impl Reconciliation {
    /// Whether the hold of `key` is released, so this tick's plan may dispatch it.
    pub(crate) fn releases(&self, key: &ClaimKey) -> bool {
        self.stale_holds.iter().any(|r| &r.key == key)
    }
}

/// A cancel request to set on one claim, and its report line.
pub(crate) struct Cancel {
    /// The claim.
    pub key: ClaimKey,
    /// What the report says.
    pub line: CancelLine,
}

/// Decide which holders of claims whose ticket left its stage to ask to stop, and which
/// retries and holds of tickets that left where they were for to drop. Reads only
/// (tickets missing from the listing are re-read, [`where_are`]).
pub(crate) async fn reconcile(ctx: &Context, obs: &Observation) -> Reconciliation {
    let snapshot = &obs.ledger;
    let ids = snapshot
        .claims
        .iter()
        .map(|c| &c.key.ticket_id)
        .chain(snapshot.retries.iter().map(|r| &r.key.ticket_id))
        .chain(snapshot.holds.iter().map(|h| &h.key.ticket_id));
    let seen = where_are(ctx, &obs.tickets, ids).await;
    let at = |id: &str| seen.get(id).cloned().unwrap_or(Whereabouts::Unknown);

    let mut cancels = Vec::new();
    for claim in &snapshot.claims {
        let ClaimPlacement::Cancel(reason) =
            place_claim(&ctx.config, claim, &at(&claim.key.ticket_id), &ctx.identity)
        else {
            continue;
        };
        if claim.cancel_requested {
            continue;
        }
        cancels.push(Cancel {
            key: claim.key.clone(),
            line: CancelLine {
                ticket: claim.key.ticket_id.clone(),
                role: claim.key.role.clone(),
                holder: claim.claimer_id.clone(),
                reason,
            },
        });
    }
    let stale_retries = snapshot
        .retries
        .iter()
        .filter(|retry| !retry_still_due(&ctx.config, retry, &at(&retry.key.ticket_id)))
        .map(|retry| retry.key.clone())
        .collect();
    let stale_holds = released_holds(ctx, &snapshot.holds, &at).await;
    let mut finished: Vec<String> = seen
        .iter()
        .filter(|(_, place)| {
            matches!(place, Whereabouts::Status { status, closed, .. }
                if *closed || ctx.config.is_terminal(status))
        })
        .map(|(id, _)| id.clone())
        .collect();
    finished.sort();
    Reconciliation {
        cancels,
        stale_retries,
        stale_holds,
        finished,
    }
}

/// The holds that no longer stand ([`judge_hold`]). The comments of each ticket still in
/// its hold's status are read (one read per held ticket per tick): a `/retry` is there,
/// and they tell a person's comment from a change of status.
async fn released_holds(
    ctx: &Context,
    holds: &[Hold],
    at: &impl Fn(&str) -> Whereabouts,
) -> Vec<ReleasedHold> {
    if holds.is_empty() {
        return Vec::new();
    }
    let places: Vec<Whereabouts> = holds.iter().map(|h| at(&h.key.ticket_id)).collect();
    let mut ids: Vec<String> = holds
        .iter()
        .zip(&places)
        .filter(|(hold, place)| {
            matches!(place, Whereabouts::Status { status, .. } if same_name(status, &hold.status))
        })
        .map(|(hold, _)| hold.key.ticket_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    let read = ctx.tracker.comments_of(&ids).await;
    let comments: HashMap<String, Vec<Comment>> = ids
        .into_iter()
        .zip(read)
        .filter_map(|(id, read)| match read {
            Ok(comments) => Some((id, comments)),
            Err(err) => {
                tracing::warn!(ticket = %id, error = %err, "cannot read the held ticket's comments; only a move releases its hold this tick");
                None
            }
        })
        .collect();
    let who = Answerers {
        identity: &ctx.identity,
        trusted_authors: &ctx.config.trusted_authors,
    };
    holds
        .iter()
        .zip(&places)
        .filter_map(|(hold, place)| {
            let read = comments.get(&hold.key.ticket_id).map(Vec::as_slice);
            match judge_hold(hold, place, read, &who, &ctx.trusted) {
                HoldVerdict::Stands => None,
                HoldVerdict::Released(why) => Some(ReleasedHold {
                    key: hold.key.clone(),
                    why,
                }),
            }
        })
        .collect()
}

/// Do what reconcile found: set the cancel requests, drop the stale retries and holds,
/// and remove (or queue for removal) the workspaces of finished tickets. Returns the
/// report's cancel lines.
pub(crate) async fn apply(
    ctx: &Context,
    found: Reconciliation,
) -> Result<Vec<CancelLine>, PipelineError> {
    let mut cancels = Vec::with_capacity(found.cancels.len());
    for cancel in found.cancels {
        ctx.ledger.request_cancel(&cancel.key)?;
        cancels.push(cancel.line);
    }
    for key in &found.stale_retries {
        ctx.ledger.clear_retry(key)?;
    }
    for released in &found.stale_holds {
        let key = &released.key;
        ctx.ledger.clear_hold(key)?;
        tracing::info!(ticket = %key.ticket_id, role = %key.role, why = %released.why, "hold released");
    }
    for id in &found.finished {
        super::prune::ticket_finished(ctx, id, None).await;
    }
    Ok(cancels)
}

/// Clear away claims whose holder stopped renewing or is gone (a crashed tick): kill the
/// agent it left running on this host, so a ticket never has two agents at once, then
/// delete the row. The delete names the dead holder, so a claim someone has taken over
/// meanwhile is left alone.
pub(crate) fn reap(ctx: &Context, expired: &[Claim]) {
    let host = claimer_host(&ctx.claimer_id);
    for claim in expired {
        if claim.agent_pid.is_some() && claimer_host(&claim.claimer_id) == host {
            let run_dir = crate::agent::run_dir(&ctx.config.state_root, &claim.run_id);
            let killed = crate::agent::reap_run(&run_dir);
            if killed > 0 {
                tracing::warn!(ticket = %claim.key.ticket_id, role = %claim.key.role, killed, "reaped the agent of a crashed run");
            }
        }
        ctx.events
            .notify(Event::claim_expired(&run_ref(claim), &claim.claimer_id));
        if let Err(err) = ctx.ledger.release(&claim.key, &claim.claimer_id) {
            tracing::warn!(%err, "could not delete an expired claim");
        }
    }
}

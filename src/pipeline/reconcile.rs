//! Reconcile: runs whose ticket left their stage (a person moved it, closed it, deleted
//! it) are asked to stop; retries and holds of tickets that left are dropped; claims
//! whose holder is gone are reaped.

use super::context::{run_ref, Context};
use super::decide::placement::{
    hold_still_stands, place_claim, retry_still_due, ClaimPlacement, Whereabouts,
};
use super::observe::{where_are, Observation};
use super::report::CancelLine;
use super::PipelineError;
use crate::hooks::Event;
use crate::ledger::claimer_host;
use crate::ledger::Claim;

/// Ask the holders of claims whose ticket left its stage to stop (nothing is written in
/// a dry run), and drop retries and holds of tickets that left where they were for.
pub(crate) async fn reconcile(
    ctx: &Context,
    obs: &Observation,
    dry_run: bool,
) -> Result<Vec<CancelLine>, PipelineError> {
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
        if !dry_run {
            ctx.ledger.request_cancel(&claim.key)?;
        }
        cancels.push(CancelLine {
            ticket: claim.key.ticket_id.clone(),
            role: claim.key.role.clone(),
            holder: claim.claimer_id.clone(),
            reason,
        });
    }
    if dry_run {
        return Ok(cancels);
    }
    for retry in &snapshot.retries {
        if !retry_still_due(&ctx.config, retry, &at(&retry.key.ticket_id)) {
            ctx.ledger.clear_retry(&retry.key)?;
        }
    }
    for hold in &snapshot.holds {
        if !hold_still_stands(hold, &at(&hold.key.ticket_id)) {
            ctx.ledger.clear_hold(&hold.key)?;
        }
    }
    // Tickets found terminal lose their workspace (once the runs asked to stop above
    // have ended). Gone, unknown or moved elsewhere is no evidence: those keep it.
    let mut finished: Vec<&String> = seen
        .iter()
        .filter(|(_, place)| {
            matches!(place, Whereabouts::Status { status, closed, .. }
                if *closed || ctx.config.is_terminal(status))
        })
        .map(|(id, _)| id)
        .collect();
    finished.sort();
    for id in finished {
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
            let killed = crate::agent::reap_run(&claim.run_id);
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

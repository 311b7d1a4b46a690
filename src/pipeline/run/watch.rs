//! Watching a run's claim while its agent runs: the lease renewed every TTL/3, the
//! cancel flag read every [`CANCEL_POLL`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::CancelReason;
use crate::ledger::{Claim, Ledger, RenewOutcome};
use crate::pipeline::context::Clock;
use crate::pipeline::lease::{next_backoff, LeaseEnd, FIRST_BACKOFF};

/// How often a run looks at its claim's cancel flag: a person closing the ticket stops
/// the agent within this (plus the next tick that notices the move).
pub const CANCEL_POLL: Duration = Duration::from_secs(2);

/// Renew the lease every TTL/3 and look at the claim's cancel flag every
/// [`CANCEL_POLL`]; cancel the run when the lease is lost or a cancel is requested. A
/// renewal that fails (the ledger unreachable) is tried again after 250 ms, 500 ms, ...
/// rather than a whole interval later; the agent keeps running meanwhile.
pub(super) async fn watch_claim(
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    claim_ttl: Duration,
    claim: Claim,
    lease: Arc<LeaseEnd>,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
) {
    let renew_every = (claim_ttl / 3).max(Duration::from_millis(100));
    let poll = CANCEL_POLL.min(renew_every);
    let mut since_renewal = Duration::ZERO;
    // After a failed renewal: how soon to try again, and whether the lease's end passed.
    let mut retry_in: Option<Duration> = None;
    let mut expired_warned = false;
    loop {
        let wait = retry_in.map_or(poll, |r| r.min(poll));
        tokio::time::sleep(wait).await;
        since_renewal += wait;
        let due = match retry_in {
            Some(r) => since_renewal >= r,
            None => since_renewal >= renew_every,
        };
        let stop = if due {
            since_renewal = Duration::ZERO;
            match ledger.renew(&claim.key, &claim.claimer_id, claim_ttl, clock.now()) {
                Ok(RenewOutcome::Renewed {
                    cancel_requested,
                    lease_expires_at,
                }) => {
                    lease.renewed(lease_expires_at);
                    retry_in = None;
                    expired_warned = false;
                    cancel_requested.then_some(CancelReason::TicketLeftStage)
                }
                Ok(RenewOutcome::Lost) => Some(CancelReason::LeaseLost),
                Err(err) => {
                    let next = retry_in
                        .map_or(FIRST_BACKOFF, next_backoff)
                        .min(renew_every);
                    retry_in = Some(next);
                    if lease.until() <= clock.now() && !expired_warned {
                        expired_warned = true;
                        tracing::error!(%err, "the lease ran out while the ledger was unreachable; the agent goes on, and its outcome is stored only if no other host took the ticket meanwhile");
                    } else {
                        tracing::warn!(%err, retry_in_ms = next.as_millis() as u64, "lease renewal failed; retrying");
                    }
                    None
                }
            }
        } else {
            // A local read, cheap: the cancel flag set by whichever tick saw the move.
            match ledger.claim(&claim.key) {
                Ok(Some(row)) if row.claimer_id != claim.claimer_id => {
                    Some(CancelReason::LeaseLost)
                }
                Ok(Some(row)) => row
                    .cancel_requested
                    .then_some(CancelReason::TicketLeftStage),
                Ok(None) => Some(CancelReason::LeaseLost),
                Err(_) => None,
            }
        };
        if let Some(why) = stop {
            tracing::info!(reason = ?why, "stopping the agent");
            *reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            cancel.cancel();
            return;
        }
    }
}

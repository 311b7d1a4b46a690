//! Observe: read the board once and the ledger once, and say where tickets are.
//!
//! Everything the plan decides on comes from here; nothing here decides.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::claimer::holder_is_gone;
use super::context::Context;
use super::decide::placement::Whereabouts;
use super::PipelineError;
use crate::config::Config;
use crate::ledger::{Claim, LedgerSnapshot};
use crate::tracker::{Ticket, TrackerError};

/// What one tick sees.
pub(crate) struct Observation {
    /// Tickets on the pipeline's statuses, statuses in the config's spelling.
    pub tickets: Vec<Ticket>,
    /// Board entries skipped as unreadable.
    pub warnings: Vec<String>,
    /// Tickets on statuses the config names nowhere (a typo, a status no stage claims
    /// yet), counted by status, where the tracker reports them.
    pub unclaimed_statuses: std::collections::BTreeMap<String, usize>,
    /// The ledger for this tracker; `claims` holds only claims that still stand.
    pub ledger: LedgerSnapshot,
    /// Claims whose lease ran out, or whose holder on this host is gone: to reap.
    pub expired: Vec<Claim>,
    /// When the ledger was read.
    pub now: DateTime<Utc>,
}

/// Read the board (the pipeline's statuses, narrowed by `tracker.filter` where the
/// tracker can) and the ledger.
pub(crate) async fn observe(ctx: &Context) -> Result<Observation, PipelineError> {
    let config = &ctx.config;
    let listing = ctx
        .tracker
        .list_filtered(&config.pipeline_statuses(), &config.filter)
        .await?;
    let unclaimed_statuses = listing
        .other_statuses
        .into_iter()
        .filter(|(status, _)| config.canonical_status(status).is_none())
        .collect();
    let mut tickets = listing.tickets;
    for ticket in &mut tickets {
        canonicalize(config, ticket);
    }
    let now = ctx.clock.now();
    let mut ledger = ctx.ledger.snapshot(ctx.tracker_name())?;
    let (live, expired): (Vec<Claim>, Vec<Claim>) = std::mem::take(&mut ledger.claims)
        .into_iter()
        .partition(|c| {
            c.lease_expires_at > now
                && !holder_is_gone(&c.claimer_id, c.claimed_at, &ctx.claimer_id)
        });
    ledger.claims = live;
    Ok(Observation {
        tickets,
        warnings: listing.warnings,
        unclaimed_statuses,
        ledger,
        expired,
        now,
    })
}

/// Put `ticket.status` in the config's spelling when the config names it ignoring case
/// and surrounding whitespace, so the rest of the tick compares spellings it knows.
pub(crate) fn canonicalize(config: &Config, ticket: &mut Ticket) {
    if let Some(status) = config.canonical_status(&ticket.status) {
        if status != ticket.status {
            ticket.status = status.to_string();
        }
    }
}

/// Where each of `ids` is: from the listing, or, for ids the listing lacks, from a
/// re-read of the ticket. A listing can come back short (a dropped page, a ticket
/// mid-edit), and absence from it alone must never cancel a run or clear a hold.
pub(crate) async fn where_are<'a>(
    ctx: &Context,
    tickets: &[Ticket],
    ids: impl Iterator<Item = &'a String>,
) -> HashMap<String, Whereabouts> {
    let by_id: HashMap<&str, &Ticket> = tickets.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut seen = HashMap::new();
    for id in ids {
        if seen.contains_key(id.as_str()) {
            continue;
        }
        let place = match by_id.get(id.as_str()) {
            Some(t) => Whereabouts::Status {
                status: t.status.clone(),
                closed: t.closed,
                labels: t.labels.clone(),
                assignees: t.assignees.clone(),
            },
            None => match ctx.tracker.get(id).await {
                Ok(mut t) => {
                    canonicalize(&ctx.config, &mut t);
                    Whereabouts::Status {
                        status: t.status,
                        closed: t.closed,
                        labels: t.labels,
                        assignees: t.assignees,
                    }
                }
                Err(TrackerError::NotFound(_)) => Whereabouts::Gone,
                Err(err) => {
                    tracing::warn!(ticket = %id, error = %err, "cannot tell where the ticket is; leaving its claim, retry and hold alone");
                    Whereabouts::Unknown
                }
            },
        };
        seen.insert(id.clone(), place);
    }
    seen
}

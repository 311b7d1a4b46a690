//! Observe: read the board once and the ledger once, and say where tickets are
//! ([`observe`]); then read what the plan asks for, the histories and blockers of the
//! tickets it may dispatch ([`read_for_plan`]).
//!
//! Everything the plan decides on comes from here; nothing here decides, and nothing
//! here writes but [`record_blocker_checks`], which the tick calls outside a dry run.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::claimer::holder_is_gone;
use super::context::Context;
use super::decide::eligibility;
use super::decide::placement::Whereabouts;
use super::decide::plan::{Facts, Planner};
use super::history::TicketHistory;
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
                updated_at: t.updated_at,
            },
            None => match ctx.tracker.get(id).await {
                Ok(mut t) => {
                    canonicalize(&ctx.config, &mut t);
                    Whereabouts::Status {
                        status: t.status,
                        closed: t.closed,
                        labels: t.labels,
                        assignees: t.assignees,
                        updated_at: t.updated_at,
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

/// Read the histories and blockers the plan asks for until it asks for none: the
/// comments and the blockers of a ticket are read at most once per tick. A ticket
/// whose comments cannot be read is kept out of the plan for this tick, with the
/// reason; so is one whose blockers could not be read, or whose read did not fit in
/// `tracker.blockers.max_reads_per_tick` (the tickets tried least recently go first,
/// whether that try succeeded or not, so reads rotate fairly across ticks). Reads only:
/// the blocker reads tried are in [`Reads::blocker_checks`], for the tick to record.
pub(crate) async fn read_for_plan<'t, 'c>(
    ctx: &'c Context,
    obs: &'t Observation,
) -> (Planner<'t, 'c>, Reads) {
    let mut reads = Reads::default();
    let mut budget = ctx.config.blockers.max_reads_per_tick as usize;
    let mut reserved: Option<HashSet<String>> = None;
    // The candidates are ordered once; each round walks on from where the last one
    // had to stop (issue #29).
    let mut planner = Planner::new(
        &ctx.config,
        &obs.tickets,
        &obs.ledger,
        &ctx.identity,
        ctx.claimer_id.host(),
        obs.now,
    );
    loop {
        let needs =
            planner.round_reading_ahead(&reads.facts(ctx, obs.now), ctx.tracker.read_ahead());
        if needs.is_empty() {
            return (planner, reads);
        }
        let needed: Vec<String> = needs.history.iter().map(|s| s.to_string()).collect();
        let needed_blockers: Vec<String> = needs.blockers.iter().map(|s| s.to_string()).collect();
        let must = needed.len();
        let mut batch = needed;
        batch.extend(needs.ahead.iter().map(|s| s.to_string()));
        let read = ctx.tracker.comments_of(&batch).await;
        for (i, (id, comments)) in batch.into_iter().zip(read).enumerate() {
            match comments {
                Ok(comments) => {
                    reads
                        .histories
                        .insert(id, TicketHistory::from_comments(&comments, &ctx.trusted));
                }
                // A read ahead of need that failed is no fact about the plan: the
                // ticket is read again if the plan comes to need it.
                Err(err) if i < must => {
                    reads.unreadable.insert(id, err.to_string());
                }
                Err(_) => {}
            }
        }
        if needed_blockers.is_empty() {
            continue;
        }
        // The reads go first to the tickets whose blockers were tried longest ago
        // (never tried first), among every ticket that may need them this tick:
        // those keep a reservation, and only spare reads go to others.
        let reserved = reserved.get_or_insert_with(|| {
            let checked: HashMap<String, chrono::DateTime<chrono::Utc>> = ctx
                .ledger
                .blocker_checks(ctx.tracker_name())
                .unwrap_or_default()
                .into_iter()
                .collect();
            let mut potential: Vec<&Ticket> = obs
                .tickets
                .iter()
                .filter(|t| {
                    t.blocked_by.is_none()
                        && !t.closed
                        && !ctx.config.is_terminal(&t.status)
                        && eligibility::stage_for_status(&ctx.config, &t.status).is_some()
                })
                .collect();
            potential.sort_by_key(|t| checked.get(&t.id).copied());
            potential
                .into_iter()
                .take(budget)
                .map(|t| t.id.clone())
                .collect::<HashSet<String>>()
        });
        for id in needed_blockers {
            if !ctx.tracker.capabilities().blockers {
                // The tracker found it has no blockers to read (a GitHub server
                // without issue dependencies): free, and as if blockers were off.
                reads.blockers.insert(id, Ok(Vec::new()));
                continue;
            }
            let mine = reserved.remove(&id);
            if !mine && budget <= reserved.len() {
                let max = ctx.config.blockers.max_reads_per_tick;
                reads.blockers.insert(
                    id,
                    Err(format!(
                        "{max} blocker reads per tick used up (tracker.blockers.max_reads_per_tick); read on a later tick"
                    )),
                );
                continue;
            }
            budget -= 1;
            let read = ctx.tracker.blockers(&id).await.map_err(|e| e.to_string());
            // Failed reads count too: the rotation is by the last try, so a ticket whose
            // read keeps failing takes its turn and no more.
            reads.blocker_checks.push((id.clone(), ctx.clock.now()));
            reads.blockers.insert(id, read);
        }
    }
}

/// Record in the ledger when each blocker read was tried (the next ticks' rotation,
/// [`read_for_plan`]). The only ledger write of the observe step; a dry run skips it.
pub(crate) fn record_blocker_checks(ctx: &Context, reads: &Reads) {
    for (id, at) in &reads.blocker_checks {
        if let Err(err) = ctx.ledger.record_blocker_check(ctx.tracker_name(), id, *at) {
            tracing::warn!(%err, "could not record the blocker read");
        }
    }
}

/// Blockers read this tick, by ticket id: the list, or why it could not be read.
type BlockerReads = HashMap<String, Result<Vec<crate::tracker::Blocker>, String>>;

/// What a tick read for its plan: histories, unreadable comments, blockers, and the
/// blocker reads tried, which the tick records in the ledger ([`record_blocker_checks`]).
#[derive(Default)]
pub(crate) struct Reads {
    /// Histories read, by ticket id.
    pub histories: HashMap<String, TicketHistory>,
    /// Tickets whose comments could not be read, with the error.
    pub unreadable: HashMap<String, String>,
    /// Blockers read (or why not), by ticket id.
    pub blockers: BlockerReads,
    /// Every blocker read tried, with when: the ledger's rotation of those reads.
    pub blocker_checks: Vec<(String, DateTime<Utc>)>,
}

impl Reads {
    /// These reads as the plan's facts.
    pub(crate) fn facts<'a>(&'a self, ctx: &'a Context, now: DateTime<Utc>) -> Facts<'a> {
        Facts {
            config: &ctx.config,
            identity: &ctx.identity,
            blockers: ctx.blockers,
            histories: &self.histories,
            unreadable: &self.unreadable,
            blockers_read: &self.blockers,
            now,
        }
    }
}

//! Apply: claim each dispatch of the plan in order, take a second look at the ticket
//! (`recheck`), and start its run (`run`, which writes back through `writeback`).
//!
//! A dispatch the ledger refuses (held by another claimer, a cap reached meanwhile) or
//! the second look gives back becomes a skip line; nothing else is written for it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use super::context::{run_ref, Context};
use super::decide::caps::Caps;
use super::decide::eligibility::SkipReason;
use super::decide::plan::Dispatch;
use super::decide::question::Continuation;
use super::observe::Reads;
use super::recheck::{self, Recheck};
use super::report::{RunLine, SkipLine};
use super::supervisor::Supervisor;
use super::{run, PipelineError};
use crate::config::Config;
use crate::hooks::Event;
use crate::ledger::{ClaimKey, ClaimOutcome, ClaimRequest};
use crate::tracker::Ticket;

/// The runs the apply step started and the dispatches it could not start.
pub(crate) struct Started {
    /// Runs the tick waits for (none when they are detached).
    pub runs: JoinSet<RunLine>,
    /// Dispatches not started, and why.
    pub skips: Vec<SkipLine>,
}

/// Claim and start `dispatches` in order, until the supervisor stops claiming. With
/// `detach`, the runs go to the supervisor instead of the returned set. `reads` are the
/// plan's (histories and blockers), `now` the time it was made for. A ledger error ends the step; the runs
/// it started and did not detach end with it.
pub(crate) async fn claim_and_start(
    ctx: &Arc<Context>,
    supervisor: &Arc<Supervisor>,
    dispatches: &[Dispatch<'_>],
    reads: &Reads,
    now: DateTime<Utc>,
    detach: bool,
) -> Result<Started, PipelineError> {
    let mut runs = JoinSet::new();
    let mut skips = Vec::new();
    for dispatch in dispatches {
        if supervisor.is_stopping() {
            break;
        }
        let stage_index = dispatch.stage;
        let stage = &ctx.config.stages[stage_index];
        let ticket = dispatch.ticket;
        let request = ClaimRequest {
            key: ClaimKey::new(ctx.tracker_name(), &ticket.id, &stage.role),
            stage: stage.claim_status.clone(),
            claimer_id: ctx.claimer_id.clone(),
            run_id: new_run_id(),
            ttl: ctx.config.claim_ttl,
            limits: dispatch.limits,
            attempt_floor: dispatch.attempt_floor,
        };
        let reason = match ctx.ledger.try_claim(&request, ctx.clock.now())? {
            ClaimOutcome::Acquired(claim) => {
                // The listing may be stale by now: another host may have run this
                // stage and released the key since (one comments read, claims only).
                let history = match recheck::recheck(
                    ctx,
                    ticket,
                    stage,
                    reads.histories.get(&ticket.id),
                )
                .await
                {
                    Recheck::Current(history) => history,
                    Recheck::Stale(reason) => {
                        tracing::info!(ticket = %ticket.id, role = %stage.role, %reason, "claim given back");
                        if let Err(err) = ctx.ledger.release(&claim.key, &claim.claimer_id) {
                            tracing::warn!(%err, "could not release claim; it will expire");
                        }
                        skips.push(skip_line(&ctx.config, ticket, stage_index, reason));
                        continue;
                    }
                };
                // A question the stage asked: the run goes on from its answer, or, when
                // it is waiting still (the answer the plan saw is gone), gives back.
                let who = crate::pipeline::history::Answerers {
                    identity: &ctx.identity,
                    trusted_authors: &ctx.config.trusted_authors,
                };
                let continuation = match history.open_question(&stage.role, &who) {
                    None => None,
                    Some(open) => match Continuation::of(&open, ctx.clock.now()) {
                        Some(c) => Some(c),
                        None => {
                            let reason = SkipReason::WaitingForAnswer {
                                question_id: open.block.question_id.clone(),
                                question: open.block.question.clone(),
                                options: open.block.options.clone(),
                                asked_at: open.posted_at,
                                deadline: open.block.deadline,
                                ignored: open.ignored.clone(),
                            };
                            if let Err(err) = ctx.ledger.release(&claim.key, &claim.claimer_id) {
                                tracing::warn!(%err, "could not release claim; it will expire");
                            }
                            skips.push(skip_line(&ctx.config, ticket, stage_index, reason));
                            continue;
                        }
                    },
                };
                // The asking attempt goes on: its blocks carry that attempt (the
                // ledger's counter has moved on, which only keeps attempts unique).
                let mut claim = claim;
                if let Some(c) = &continuation {
                    claim.stage_attempt = c.question.stage_attempt;
                }
                ctx.events
                    .notify(Event::claim_acquired(&run_ref(&claim), &claim.claimer_id));
                if let Err(err) = ctx.ledger.clear_retry(&claim.key) {
                    tracing::warn!(%err, "could not clear the retry entry");
                }
                let task = run::run_claimed(
                    ctx.clone(),
                    supervisor.clone(),
                    with_blockers_read(ticket, reads),
                    stage_index,
                    claim,
                    history,
                    continuation,
                );
                if detach {
                    supervisor.detach(task);
                } else {
                    runs.spawn(task);
                }
                continue;
            }
            ClaimOutcome::Held {
                holder,
                lease_expires_at,
            } => SkipReason::Claimed {
                holder,
                lease_expires_at,
            },
            ClaimOutcome::Ceiling(scope) => {
                Caps::from_claims(&ctx.config, &[], now).reason(stage, scope)
            }
            ClaimOutcome::HostShare(scope) => Caps::share_reason(&dispatch.limits, scope),
        };
        skips.push(skip_line(&ctx.config, ticket, stage_index, reason));
    }
    Ok(Started { runs, skips })
}

/// The report line of a ticket not dispatched for the stage at `stage_index`.
pub(crate) fn skip_line(
    config: &Config,
    ticket: &Ticket,
    stage_index: usize,
    reason: SkipReason,
) -> SkipLine {
    SkipLine {
        ticket: ticket.id.clone(),
        role: config.stages[stage_index].role.clone(),
        status: ticket.status.clone(),
        reason,
    }
}

fn new_run_id() -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("r{}", &nonce[..16])
}

/// What the apply step would start, for a dry run: one `would_run` line per dispatch.
pub(crate) fn would_start(config: &Config, dispatches: &[Dispatch<'_>]) -> Vec<RunLine> {
    dispatches
        .iter()
        .map(|d| RunLine {
            ticket: d.ticket.id.clone(),
            role: config.stages[d.stage].role.clone(),
            attempt: 0,
            outcome: "would_run".to_string(),
            reason_code: None,
            from_status: d.ticket.status.clone(),
            to_status: None,
            held: false,
            writeback: None,
            note: d.retry.then(|| "retry due".to_string()),
            log_path: None,
            duration_seconds: None,
            route: d.route.map(|i| config.stages[d.stage].routes[i].label(i)),
            cancel_reason: None,
            ledger_error: None,
            verify: Vec::new(),
            session: None,
            rate_limits: Vec::new(),
        })
        .collect()
}

/// The ticket a run starts with: as listed, with the blockers this tick read for it
/// when the listing did not carry them (the prompt's `ticket.blockers`).
fn with_blockers_read(ticket: &Ticket, reads: &Reads) -> Ticket {
    let mut ticket = ticket.clone();
    if ticket.blocked_by.is_none() {
        if let Some(Ok(read)) = reads.blockers.get(&ticket.id) {
            ticket.blocked_by = Some(read.clone());
        }
    }
    ticket
}

//! Applying a stored outcome to the tracker: re-read, comment, transition, follow-ups
//! ([`apply`]); and the tick's first step, replaying the entries earlier runs stored
//! but did not finish writing ([`replay_outbox`]).
//!
//! Every write-back goes through the outbox entry stored before it, so a crash at
//! any point is finished by the next tick from the same entry, without re-running
//! the agent and without posting the comment twice.

use std::collections::HashSet;

use chrono::{DateTime, Duration as ChronoDuration, Utc};

use super::context::Context;
use super::decide::reaction::REACTIONS_ROLE;
use super::history::TicketHistory;
use super::observe::canonicalize;
use super::report::WritebackLine;
use super::PipelineError;

use crate::block::{
    idempotency_key, render_comment, Category, FailureBlock, NextAction, OutcomeBlock,
};
use crate::hooks::{Event, Handoff, RunRef};
use crate::ledger::{FollowUp, Hold, LedgerError, OutboxEntry, OutboxState, RetryEntry};
use crate::tracker::TrackerError;

/// What happened to one write-back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WritebackResult {
    /// Comment and transition are on the tracker.
    Done {
        /// Status the ticket is now in.
        to_status: String,
    },
    /// Dropped on purpose: a person closed or moved the ticket.
    Dropped {
        /// Why.
        reason: String,
        /// The status the ticket is in, when it was read.
        status: Option<String>,
    },
    /// The tracker failed; the entry waits in the outbox for a later tick.
    Deferred {
        /// What failed.
        error: String,
    },
}

impl WritebackResult {
    /// Short text for reports.
    pub(super) fn describe(&self) -> String {
        match self {
            WritebackResult::Done { .. } => "done".to_string(),
            WritebackResult::Dropped { reason, .. } => format!("dropped: {reason}"),
            WritebackResult::Deferred { error } => format!("deferred: {error}"),
        }
    }
}

/// Apply `entry` to the tracker and record progress in the ledger after each step.
pub(super) async fn apply(
    ctx: &Context,
    mut entry: OutboxEntry,
) -> Result<WritebackResult, LedgerError> {
    let id = entry.key.ticket_id.clone();
    // A reaction's entry belongs to the watched status it was decided in; a stage's
    // to the statuses the stage owns.
    let reaction = entry.key.role == REACTIONS_ROLE;
    let stage = ctx.config.stages.iter().find(|s| s.role == entry.key.role);
    if stage.is_none() && !reaction {
        let reason = format!("role {} is no longer in the pipeline", entry.key.role);
        return drop_entry(ctx, &mut entry, reason, None);
    }
    let claim_status = stage.map_or_else(|| entry.from_status.clone(), |s| s.claim_status.clone());

    // Terminal wins: re-read right before writing. A failed re-read is not evidence
    // of anything; the write waits.
    let ticket = match ctx.tracker.get(&id).await {
        Ok(mut ticket) => {
            canonicalize(&ctx.config, &mut ticket);
            ticket
        }
        Err(TrackerError::NotFound(_)) => {
            return drop_entry(ctx, &mut entry, "ticket no longer exists".to_string(), None)
        }
        Err(err) => return defer(ctx, &mut entry, err),
    };
    // A ticket already where this entry moves it got there by this write-back (a crash
    // fell after the transition): finish it, hooks included. Anything else terminal was
    // a person's decision.
    let arrived = !ticket.closed && crate::tracker::same_name(&ticket.status, &entry.to_status);
    if !arrived && (ticket.closed || ctx.config.is_terminal(&ticket.status)) {
        let dropped = drop_entry(
            ctx,
            &mut entry,
            format!("ticket is terminal ({})", ticket.status),
            Some(ticket.status.clone()),
        );
        super::prune::ticket_finished(ctx, &id, Some(&entry.key.role)).await;
        return dropped;
    }
    let owned = match stage {
        Some(stage) => stage
            .owned_statuses()
            .any(|s| crate::tracker::same_name(s, &ticket.status)),
        None => crate::tracker::same_name(&ticket.status, &entry.from_status),
    } || crate::tracker::same_name(&ticket.status, &entry.to_status);
    if !owned {
        return drop_entry(
            ctx,
            &mut entry,
            format!("moved by a person to {}", ticket.status),
            Some(ticket.status.clone()),
        );
    }

    if entry.state == OutboxState::Pending {
        let comments = match ctx.tracker.comments(&id).await {
            Ok(comments) => comments,
            Err(err) => return defer(ctx, &mut entry, err),
        };
        let history = TicketHistory::from_comments(&comments, &ctx.trusted);
        if !history.contains_key(&entry.idempotency_key) {
            if let Err(err) = ctx
                .tracker
                .post_comment(&id, &entry.comment_body, &entry.idempotency_key)
                .await
            {
                return defer(ctx, &mut entry, err);
            }
        }
        ctx.faults.hit("after_comment");
        entry.state = OutboxState::CommentPosted;
        ctx.ledger.outbox_update(&entry)?;
    }

    let question = entry.outcome == super::decide::question::QUESTION_OUTCOME;
    // Where the ticket is once this write-back is done.
    let mut landed = entry.to_status.clone();
    if !crate::tracker::same_name(&ticket.status, &entry.to_status) {
        match ctx
            .tracker
            .transition(&id, &ticket.status, &entry.to_status)
            .await
        {
            Ok(()) => {}
            // A workflow with no way back from the in-progress status (Jira's often
            // has none): the question waits where the ticket is, which the plan
            // reads as the stage's too.
            Err(TrackerError::TransitionRefused { .. }) if question => {
                tracing::info!(ticket = %id, status = %ticket.status, to = %entry.to_status, "the tracker's workflow refuses the move; the question waits where the ticket is");
                landed = ticket.status.clone();
            }
            Err(TrackerError::Conflict { current, .. }) => {
                let reason = format!("moved by a person to {current} during write-back");
                return drop_entry(ctx, &mut entry, reason, Some(current));
            }
            Err(refused @ TrackerError::TransitionRefused { .. }) => {
                return refuse(ctx, &mut entry, &ticket.status, refused).await;
            }
            Err(err) => return defer(ctx, &mut entry, err),
        }
    }
    ctx.faults.hit("after_transition");
    // Hooks fire after the transition and before the entry is marked done, so a crash
    // in between replays the write-back and fires them then; deliveries are recorded,
    // so a replay skips hooks that already have it. A question hands nothing over.
    let handoff = Handoff {
        tracker: entry.key.tracker.clone(),
        ticket_id: entry.key.ticket_id.clone(),
        role: entry.key.role.clone(),
        from_status: entry.from_status.clone(),
        to_status: entry.to_status.clone(),
        stage_attempt: entry.stage_attempt,
        success: entry.outcome == "success",
        idempotency_key: entry.idempotency_key.clone(),
    };
    if question {
        let asked = crate::block::question::parse_question_blocks(&entry.comment_body);
        if let Some(q) = asked.first() {
            let asked = Event::question_asked(
                &run_of(&entry),
                &q.question_id,
                &q.question,
                &landed,
                &entry.idempotency_key,
            );
            ctx.events.deliver(asked).await;
        }
    } else {
        ctx.events.deliver(Event::handoff(&handoff)).await;
    }
    entry.state = OutboxState::Done;
    entry.last_error = None;
    ctx.ledger.outbox_update(&entry)?;
    let updated_at = match entry.follow_up {
        FollowUp::Hold { .. } => updated_after_own_writes(ctx, &id).await,
        _ => None,
    };
    follow_up(ctx, &entry, &claim_status, updated_at)?;
    if ctx.config.is_terminal(&entry.to_status) {
        super::prune::ticket_finished(ctx, &id, Some(&entry.key.role)).await;
    }
    Ok(WritebackResult::Done { to_status: landed })
}

/// Replay outbox entries that are due: the agent already ran; only writes remain. The
/// tick's first step, before anything new: one line per entry replayed.
pub(super) async fn replay_outbox(ctx: &Context) -> Result<Vec<WritebackLine>, PipelineError> {
    let mut replays = Vec::new();
    let now = ctx.clock.now();
    let snapshot = ctx.ledger.snapshot(ctx.tracker_name())?;
    // An entry whose (ticket, role) is still claimed by a live lease is being written
    // by that run right now: its holder finishes it, or its lease expires first.
    let live: HashSet<(&str, &str)> = snapshot
        .claims
        .iter()
        .filter(|c| c.lease_expires_at > now)
        .map(|c| (c.key.ticket_id.as_str(), c.key.role.as_str()))
        .collect();
    for entry in &snapshot.outbox_pending {
        if entry.next_attempt_at > now
            || live.contains(&(entry.key.ticket_id.as_str(), entry.key.role.as_str()))
        {
            continue;
        }
        // One writer per entry: a replay racing another tick's replay of the same
        // entry would pass the "already commented?" check too and post it twice.
        if !ctx.ledger.outbox_take(
            &entry.idempotency_key,
            &ctx.claimer_id,
            ctx.config.claim_ttl,
            now,
        )? {
            continue;
        }
        // Re-read under the lease: another writer may have finished it meanwhile.
        let Some(entry) = ctx.ledger.outbox_get(&entry.idempotency_key)? else {
            continue;
        };
        if !matches!(
            entry.state,
            OutboxState::Pending | OutboxState::CommentPosted
        ) {
            ctx.ledger
                .outbox_release(&entry.idempotency_key, &ctx.claimer_id)?;
            continue;
        }
        let (ticket, role, attempt, key) = (
            entry.key.ticket_id.clone(),
            entry.key.role.clone(),
            entry.stage_attempt,
            entry.idempotency_key.clone(),
        );
        let result = apply(ctx, entry).await;
        if let Err(err) = ctx.ledger.outbox_release(&key, &ctx.claimer_id) {
            tracing::warn!(%err, "could not release the outbox entry's write lease");
        }
        replays.push(WritebackLine {
            ticket,
            role,
            attempt,
            result: result?.describe(),
        });
    }
    Ok(replays)
}

/// The ticket's updated time once sortie's own writes are on it (`None`: the re-read
/// failed), kept with a hold: a later one is someone else's change, which releases it
/// (`decide::release`).
async fn updated_after_own_writes(ctx: &Context, id: &str) -> Option<DateTime<Utc>> {
    match ctx.tracker.get(id).await {
        Ok(ticket) => Some(ticket.updated_at),
        Err(err) => {
            tracing::warn!(ticket = %id, %err, "cannot re-read the held ticket; only a move releases its hold");
            None
        }
    }
}

/// Apply the follow-up decided with the outcome: queue a retry, hold the ticket (with
/// its updated time after sortie's writes), run it again soon, or clear both.
fn follow_up(
    ctx: &Context,
    entry: &OutboxEntry,
    claim_status: &str,
    ticket_updated_at: Option<DateTime<Utc>>,
) -> Result<(), LedgerError> {
    let now = ctx.clock.now();
    let after = |secs: u64| now + ChronoDuration::seconds(i64::try_from(secs).unwrap_or(300));
    match &entry.follow_up {
        FollowUp::Retry {
            after_seconds,
            reason_code,
        } => {
            ctx.ledger.clear_hold(&entry.key)?;
            ctx.ledger.schedule_retry(&RetryEntry {
                key: entry.key.clone(),
                stage: claim_status.to_string(),
                failed_attempt: entry.stage_attempt,
                due_at: after(*after_seconds),
                reason_code: reason_code.clone(),
            })?;
        }
        FollowUp::Hold { reason_code } => {
            ctx.ledger.clear_retry(&entry.key)?;
            ctx.ledger.put_hold(&Hold {
                key: entry.key.clone(),
                status: claim_status.to_string(),
                reason_code: reason_code.clone(),
                created_at: now,
                ticket_updated_at,
            })?;
        }
        FollowUp::Continue { after_seconds } => {
            ctx.ledger.clear_hold(&entry.key)?;
            ctx.ledger.schedule_retry(&RetryEntry {
                key: entry.key.clone(),
                stage: claim_status.to_string(),
                failed_attempt: entry.stage_attempt,
                due_at: after(*after_seconds),
                reason_code: "continuation".to_string(),
            })?;
        }
        FollowUp::Clear => {
            ctx.ledger.clear_retry(&entry.key)?;
            ctx.ledger.clear_hold(&entry.key)?;
        }
    }
    Ok(())
}

/// The run an outbox entry's events are about.
fn run_of(entry: &OutboxEntry) -> RunRef {
    RunRef {
        tracker: entry.key.tracker.clone(),
        ticket_id: entry.key.ticket_id.clone(),
        role: entry.key.role.clone(),
        stage: entry.stage.clone(),
        stage_attempt: entry.stage_attempt,
        run_id: entry.run_id.clone(),
    }
}

fn drop_entry(
    ctx: &Context,
    entry: &mut OutboxEntry,
    reason: String,
    status: Option<String>,
) -> Result<WritebackResult, LedgerError> {
    tracing::info!(ticket = %entry.key.ticket_id, role = %entry.key.role, %reason, "write-back dropped");
    ctx.events.notify(Event::writeback_dropped(
        &run_of(entry),
        &entry.idempotency_key,
        &entry.outcome,
        &reason,
    ));
    entry.state = OutboxState::Dropped;
    entry.last_error = Some(reason.clone());
    ctx.ledger.outbox_update(entry)?;
    ctx.ledger.clear_retry(&entry.key)?;
    ctx.ledger.clear_hold(&entry.key)?;
    Ok(WritebackResult::Dropped { reason, status })
}

fn defer(
    ctx: &Context,
    entry: &mut OutboxEntry,
    err: TrackerError,
) -> Result<WritebackResult, LedgerError> {
    let now = ctx.clock.now();
    entry.write_attempts += 1;
    let mut delay = ctx.config.retry.backoff(entry.write_attempts);
    if let TrackerError::RateLimited {
        retry_after: Some(after),
    } = &err
    {
        delay = delay.max(*after);
    }
    entry.next_attempt_at =
        now + ChronoDuration::from_std(delay).unwrap_or(ChronoDuration::seconds(300));
    entry.last_error = Some(err.to_string());
    ctx.ledger.outbox_update(entry)?;
    tracing::warn!(ticket = %entry.key.ticket_id, role = %entry.key.role, error = %err, "write-back deferred");
    Ok(WritebackResult::Deferred {
        error: err.to_string(),
    })
}

/// The tracker's workflow refused the transition (Redmine answers success and keeps
/// the old status): report it on the ticket as a failure block (`transition.refused`,
/// policy, manual) instead of believing the move, and hold the ticket for a person.
/// The block has its own idempotency key (the stage part suffixed with
/// `#transition.refused`): the attempt's key is already on the outcome comment.
async fn refuse(
    ctx: &Context,
    entry: &mut OutboxEntry,
    current: &str,
    refused: TrackerError,
) -> Result<WritebackResult, LedgerError> {
    let id = entry.key.ticket_id.clone();
    let key = idempotency_key(
        &entry.key.tracker,
        &id,
        &entry.key.role,
        &format!("{}#transition.refused", entry.stage),
        entry.stage_attempt,
    );
    let block = OutcomeBlock::Failure(FailureBlock {
        role: entry.key.role.clone(),
        stage_attempt: entry.stage_attempt,
        idempotency_key: key.clone(),
        from_status: entry.stage.clone(),
        to_status: current.to_string(),
        reason_code: "transition.refused".to_string(),
        category: Category::Policy,
        transient: false,
        next_action: NextAction::Manual,
        detail: refused.to_string(),
        run_id: Some(entry.run_id.clone()),
        duration_seconds: None,
        extra: Default::default(),
    });
    let prose = format!(
        "sortie: the tracker refused to move this ticket from {current} to {}; a person must move it.",
        entry.to_status
    );
    let posted = match ctx.tracker.comments(&id).await {
        Ok(comments)
            if TicketHistory::from_comments(&comments, &ctx.trusted).contains_key(&key) =>
        {
            Ok(())
        }
        Ok(_) => ctx
            .tracker
            .post_comment(&id, &render_comment(&prose, &block), &key)
            .await
            .map(|_| ()),
        Err(err) => Err(err),
    };
    if let Err(err) = posted {
        return defer(ctx, entry, err);
    }
    ctx.ledger.clear_retry(&entry.key)?;
    let ticket_updated_at = updated_after_own_writes(ctx, &id).await;
    ctx.ledger.put_hold(&Hold {
        key: entry.key.clone(),
        status: current.to_string(),
        reason_code: "transition.refused".to_string(),
        created_at: ctx.clock.now(),
        ticket_updated_at,
    })?;
    let reason = format!("transition refused by the tracker; ticket held in {current}");
    entry.state = OutboxState::Dropped;
    entry.last_error = Some(reason.clone());
    ctx.ledger.outbox_update(entry)?;
    Ok(WritebackResult::Dropped {
        reason,
        status: Some(current.to_string()),
    })
}

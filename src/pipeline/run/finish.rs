//! Ending a run: a cancelled run says why and puts the ticket back where it was; any
//! other outcome is decided (block, prose, follow-up), stored in the outbox under the
//! lease, written back and its claim released.

use std::sync::{Arc, Mutex};

use crate::agent::{AgentOutcome, CancelReason};
use crate::block::{render_comment, OutcomeBlock};
use crate::config::Stage;
use crate::hooks::Event;
use crate::ledger::{Claim, OutboxEntry, OutboxPut, OutboxState, RenewOutcome, RunPhase};
use crate::pipeline::context::{run_ref, Context};
use crate::pipeline::decide::outcome::{decide, Decision, RunFacts};
use crate::pipeline::decide::question::{
    self, Ask, Asking, Continuation, ANSWERED_BY_TIMEOUT, QUESTION_OUTCOME,
};
use crate::pipeline::history::TicketHistory;
use crate::pipeline::lease::{retry_within_lease, LeaseEnd};
use crate::pipeline::report::RunLine;
use crate::pipeline::supervisor::Supervisor;
use crate::pipeline::writeback::{self, WritebackResult};
use crate::tracker::{Ticket, Tracker, TrackerError};

use super::{record_run, release};

/// What ending a run needs: the run's facts and where to write.
pub(super) struct Finish<'a> {
    pub ctx: &'a Arc<Context>,
    pub ticket: &'a Ticket,
    pub stage: &'a Stage,
    pub claim: &'a Claim,
    pub history: &'a TicketHistory,
    /// The route the run takes, as recorded (name or index).
    pub route: Option<String>,
    /// The lease as last renewed: storing the outcome is retried until it runs out.
    pub lease: &'a LeaseEnd,
    pub begun_at: chrono::DateTime<chrono::Utc>,
    /// The answered (or timed-out) question this run goes on from, if any: its outcome
    /// says so on the ticket.
    pub continuation: Option<&'a Continuation>,
    /// Whether the run gets a run-history row: false for a run a budget refused before
    /// its agent started, which is not a run (issue #52).
    pub in_history: bool,
}

impl Finish<'_> {
    /// Decide what `outcome` becomes, store it in the outbox, write it back, release.
    pub(super) async fn finish(
        &self,
        outcome: AgentOutcome,
        evidence: Option<&crate::block::Evidence>,
        duration: Option<f64>,
        started_at: chrono::DateTime<chrono::Utc>,
        mut line: RunLine,
    ) -> RunLine {
        let (ctx, stage, claim) = (self.ctx, self.stage, self.claim);
        line.duration_seconds =
            Some(duration.unwrap_or_else(|| seconds_between(started_at, ctx.clock.now())));
        // A run that lost its lease never writes back: someone else owns the ticket now.
        // An unreachable ledger is retried while the lease lasts (issue #20).
        let (renewed, mut failed_tries) = retry_within_lease(
            &*ctx.clock,
            self.lease,
            "renewing the lease to store the outcome",
            || {
                ctx.ledger.renew(
                    &claim.key,
                    &claim.claimer_id,
                    ctx.config.claim_ttl,
                    ctx.clock.now(),
                )
            },
        )
        .await;
        match renewed {
            Ok(RenewOutcome::Renewed {
                lease_expires_at, ..
            }) => self.lease.renewed(lease_expires_at),
            Ok(RenewOutcome::Lost) => {
                line.outcome = "cancelled".to_string();
                line.note = Some("lease lost before write-back; nothing written".to_string());
                return line;
            }
            Err(err) => {
                line.outcome = "cancelled".to_string();
                not_stored(&mut line, &err);
                return line;
            }
        }
        let now = ctx.clock.now();
        let facts = RunFacts {
            tracker: ctx.tracker_name(),
            ticket_id: &self.ticket.id,
            stage,
            attempt: claim.stage_attempt,
            run_id: &claim.run_id,
            duration_seconds: duration,
            route: self.route.as_deref(),
            // Unconfined runs write no `sandbox` field (docs/sandbox.md): their blocks
            // stay as they were before the sandbox existed.
            sandbox: ctx
                .config
                .agent
                .bubblewrap
                .as_ref()
                .map(|_| crate::agent::sandbox::SANDBOX_BUBBLEWRAP),
            failures_before: self
                .history
                .failures_this_round(&stage.role, stage.rework_target()),
            rework_rounds: stage
                .rework_target()
                .map(|to| {
                    self.history
                        .sent_back(&stage.role, to)
                        .into_iter()
                        .map(|f| (f.reason_code.clone(), f.detail.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            evidence,
        };
        let posting = match &outcome {
            AgentOutcome::Question(asked) => {
                let asking = Asking {
                    tracker: ctx.tracker_name(),
                    ticket_id: &self.ticket.id,
                    stage,
                    attempt: claim.stage_attempt,
                    asked_since_success: self.history.questions_since_success(&stage.role),
                    asked_this_attempt: self
                        .history
                        .questions_in_attempt(&stage.role, claim.stage_attempt),
                    config: &ctx.config.questions,
                    now,
                };
                match question::ask(&asking, asked) {
                    Ask::Post { block, to_status } => Posting::question(block, to_status),
                    Ask::OverLimit(failure) => {
                        Posting::decided(decide(&ctx.config.retry, &facts, &failure))
                    }
                }
            }
            other => {
                let mut decision = decide(&ctx.config.retry, &facts, other);
                if let Some(said) = self.continuation.and_then(went_on_from) {
                    decision.prose = format!("{} {said}", decision.prose);
                }
                Posting::decided(decision)
            }
        };
        line.outcome = posting.outcome.clone();
        line.reason_code = posting.reason_code.clone();
        if let crate::ledger::FollowUp::Retry { after_seconds, .. } = &posting.follow_up {
            line.note = Some(format!(
                "attempt {} in {after_seconds}s",
                claim.stage_attempt + 1
            ));
        }
        if let Some(id) = &posting.question_id {
            line.note = Some(format!("waiting for an answer to {id}"));
        }
        line.held = matches!(posting.follow_up, crate::ledger::FollowUp::Hold { .. });
        let entry = OutboxEntry {
            idempotency_key: posting.idempotency_key,
            key: claim.key.clone(),
            stage: stage.claim_status.clone(),
            stage_attempt: claim.stage_attempt,
            run_id: claim.run_id.clone(),
            outcome: posting.outcome,
            from_status: stage.claim_status.clone(),
            to_status: posting.to_status,
            comment_body: posting.comment_body,
            state: OutboxState::Pending,
            write_attempts: 0,
            next_attempt_at: now,
            last_error: None,
            created_at: now,
            follow_up: posting.follow_up,
        };
        // Fenced: stored only while this process still holds the claim. A retry after
        // an answer lost on the way back finds the entry there (`Exists`).
        let (put, failed_puts) =
            retry_within_lease(&*ctx.clock, self.lease, "storing the outcome", || {
                ctx.ledger
                    .outbox_put(&entry, &claim.claimer_id, ctx.config.claim_ttl, now)
            })
            .await;
        failed_tries += failed_puts;
        match put {
            Ok(OutboxPut::Stored | OutboxPut::Exists) => {}
            Ok(OutboxPut::LeaseLost) => {
                line.outcome = "cancelled".to_string();
                line.note = Some("lease lost before write-back; nothing written".to_string());
                return line;
            }
            Err(err) => {
                // Without a durable outcome nothing may be written; the lease runs out
                // and the ticket runs again on whichever host claims it next.
                not_stored(&mut line, &err);
                return line;
            }
        }
        if failed_tries > 0 {
            let retried = format!(
                "outcome stored after {failed_tries} failed ledger call(s) (ledger unavailable)"
            );
            line.note = Some(match line.note.take() {
                Some(note) => format!("{note}; {retried}"),
                None => retried,
            });
        }
        ctx.faults.hit("after_outbox");
        if self.in_history {
            record_run(
                &*ctx.ledger,
                claim,
                self.route.as_deref(),
                None,
                RunPhase::Finished,
                Some(&entry.outcome),
                line.reason_code.as_deref(),
                line.log_path.as_deref().map(std::path::Path::new),
                started_at,
                Some(ctx.clock.now()),
            );
        }
        let idempotency_key = entry.idempotency_key.clone();
        let applied = writeback::apply(ctx, entry).await;
        if let Err(err) = ctx
            .ledger
            .outbox_release(&idempotency_key, &claim.claimer_id)
        {
            tracing::warn!(%err, "could not release the outbox entry's write lease");
        }
        match applied {
            Ok(result) => {
                match &result {
                    WritebackResult::Done { to_status } => line.to_status = Some(to_status.clone()),
                    WritebackResult::Dropped { status, .. } => {
                        // A person closed or moved it: no hold was recorded.
                        line.held = false;
                        if let Some(status) = status {
                            line.to_status = Some(status.clone());
                        }
                    }
                    WritebackResult::Deferred { .. } => {}
                }
                line.writeback = Some(result.describe());
            }
            Err(err) => line.writeback = Some(format!("deferred: ledger error {err}")),
        }
        ctx.faults.hit("before_release");
        release(&*ctx.ledger, claim);
        line
    }

    /// End a run whose agent was cancelled (`reason` as the watch set it, else the
    /// supervisor's): say why, move a ticket sortie moved to its in-progress status back
    /// where the cause asks, record it, release the claim unless the lease was lost.
    pub(super) async fn cancelled(
        &self,
        supervisor: &Supervisor,
        reason: &Mutex<Option<CancelReason>>,
        moved_to: Option<&str>,
        log_path: std::path::PathBuf,
        started_at: chrono::DateTime<chrono::Utc>,
        mut line: RunLine,
    ) -> RunLine {
        let (ctx, ticket, stage, claim) = (self.ctx, self.ticket, self.stage, self.claim);
        let tracker = &*ctx.tracker;
        let reason = reason.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(
            if supervisor.is_cancelled() {
                CancelReason::Shutdown
            } else {
                CancelReason::TicketLeftStage
            },
        );
        line.outcome = "cancelled".to_string();
        line.cancel_reason = Some(reason);
        line.log_path = Some(log_path.display().to_string());
        line.duration_seconds = Some(seconds_between(started_at, ctx.clock.now()));
        line.note = Some(match reason {
            CancelReason::LeaseLost => "lease lost; nothing written".to_string(),
            CancelReason::TicketLeftStage => match moved_to {
                Some(in_progress) => {
                    withdrawn_note(tracker, &ticket.id, in_progress, stage, &mut line).await
                }
                None => cancelled_note(tracker, &ticket.id).await,
            },
            CancelReason::Shutdown => {
                interrupted_note(tracker, ticket, stage, moved_to, &mut line).await
            }
        });
        record_run(
            &*ctx.ledger,
            claim,
            self.route.as_deref(),
            None,
            RunPhase::Cancelled,
            Some("cancelled"),
            None,
            Some(&log_path),
            started_at,
            Some(ctx.clock.now()),
        );
        let why = match reason {
            CancelReason::LeaseLost => "lease_lost",
            CancelReason::TicketLeftStage => "ticket_left_stage",
            CancelReason::Shutdown => "shutdown",
        };
        ctx.events
            .notify(Event::run_cancelled(&run_ref(claim), why));
        if reason != CancelReason::LeaseLost {
            release(&*ctx.ledger, claim);
        }
        line
    }
}

/// What the outcome of a run that went on from a question says of it on the ticket.
fn went_on_from(c: &Continuation) -> Option<String> {
    let (answer, by) = c.answer.as_ref()?;
    let id = &c.question.question_id;
    Some(if by == ANSWERED_BY_TIMEOUT {
        format!("Nobody answered {id} by its deadline, so its default was taken: {answer}.")
    } else {
        format!("It went on from {id}, answered by {by}.")
    })
}

/// What a run's end posts through the outbox: an outcome block, or a question.
struct Posting {
    idempotency_key: String,
    /// `success`, `failure` or `question`.
    outcome: String,
    reason_code: Option<String>,
    to_status: String,
    comment_body: String,
    follow_up: crate::ledger::FollowUp,
    /// The question's id, for a question.
    question_id: Option<String>,
}

impl Posting {
    fn decided(decision: Decision) -> Self {
        let reason_code = match &decision.block {
            OutcomeBlock::Failure(f) => Some(f.reason_code.clone()),
            OutcomeBlock::Success(_) => None,
        };
        Posting {
            idempotency_key: decision.block.idempotency_key().to_string(),
            outcome: decision.block.kind().to_string(),
            reason_code,
            to_status: decision.block.to_status().to_string(),
            comment_body: render_comment(&decision.prose, &decision.block),
            follow_up: decision.follow_up,
            question_id: None,
        }
    }

    /// A question: posted, the ticket kept in `to_status`, nothing queued (the answer on
    /// the ticket is what runs it again).
    fn question(block: crate::block::question::QuestionBlock, to_status: String) -> Self {
        Posting {
            idempotency_key: block.idempotency_key.clone(),
            outcome: QUESTION_OUTCOME.to_string(),
            reason_code: None,
            to_status,
            comment_body: crate::block::question::render_question_comment(&block),
            follow_up: crate::ledger::FollowUp::Clear,
            question_id: Some(block.question_id),
        }
    }
}

/// Log, and mark on the run's line, an outcome the ledger could not store: retried until
/// the lease ran out when the ledger was unreachable (issue #20), given up at once on any
/// other ledger error. The line's `ledger_error` makes the tick exit 1 (issue #29).
fn not_stored(line: &mut RunLine, err: &crate::ledger::LedgerError) {
    if matches!(err, crate::ledger::LedgerError::Unavailable(_)) {
        tracing::error!(%err, "the outcome could not be stored before the lease ran out; nothing is written, and the ticket runs again on whichever host claims it next");
        line.note = Some(format!("outcome not stored before the lease ran out ({err}); nothing written, the ticket runs again on the next claim"));
    } else {
        tracing::error!(%err, "the outcome could not be stored; nothing is written, and the ticket runs again on whichever host claims it next");
        line.note = Some(format!(
            "outcome not stored ({err}); nothing written, the ticket runs again on the next claim"
        ));
    }
    line.ledger_error = Some(err.to_string());
}

/// Seconds from `start` to `end`, never negative.
pub(super) fn seconds_between(
    start: chrono::DateTime<chrono::Utc>,
    end: chrono::DateTime<chrono::Utc>,
) -> f64 {
    ((end - start).num_milliseconds().max(0) as f64) / 1000.0
}

/// The note of a run cancelled because its ticket left the stage: where it is now.
async fn cancelled_note(tracker: &dyn Tracker, id: &str) -> String {
    match tracker.get(id).await {
        Ok(t) if t.closed => format!("ticket closed ({}); nothing written", t.status),
        Ok(t) => format!("ticket is now {}; nothing written", t.status),
        Err(TrackerError::NotFound(_)) => "ticket no longer exists; nothing written".to_string(),
        Err(_) => "ticket left the stage; nothing written".to_string(),
    }
}

/// A run cancelled while its ticket may still be in the in-progress status sortie moved
/// it to (a person withdrew it by removing the opt-in label, not by moving it): the
/// ticket goes back to the claim status. A ticket a person moved stays where it is.
async fn withdrawn_note(
    tracker: &dyn Tracker,
    id: &str,
    in_progress: &str,
    stage: &Stage,
    line: &mut RunLine,
) -> String {
    match tracker
        .transition(id, in_progress, &stage.claim_status)
        .await
    {
        Ok(()) => {
            line.from_status = in_progress.to_string();
            line.to_status = Some(stage.claim_status.clone());
            format!(
                "withdrawn; nothing written, ticket back to {}",
                stage.claim_status
            )
        }
        Err(_) => cancelled_note(tracker, id).await,
    }
}

/// An operator stopped the run (a signal, a shutdown past its grace): nothing is written
/// on the ticket, and a ticket sortie moved to the in-progress status goes back to the
/// claim status, so it runs again from where it was.
async fn interrupted_note(
    tracker: &dyn Tracker,
    ticket: &Ticket,
    stage: &Stage,
    moved_to: Option<&str>,
    line: &mut RunLine,
) -> String {
    let Some(in_progress) = moved_to.or(stage
        .in_progress_status
        .as_deref()
        .filter(|s| *s == ticket.status))
    else {
        return "interrupted; nothing written".to_string();
    };
    match tracker
        .transition(&ticket.id, in_progress, &stage.claim_status)
        .await
    {
        Ok(()) => {
            line.from_status = in_progress.to_string();
            line.to_status = Some(stage.claim_status.clone());
            format!(
                "interrupted; nothing written, ticket back to {}",
                stage.claim_status
            )
        }
        Err(TrackerError::Conflict { current, .. }) => {
            format!("interrupted; nothing written (a person moved the ticket to {current})")
        }
        Err(err) => {
            format!("interrupted; nothing written, but the ticket stays {in_progress}: {err}")
        }
    }
}

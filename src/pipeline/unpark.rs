//! Tickets parked in `questions.waiting_status` (issue #34): each tick reads the
//! tickets there, and one whose question is answered (or timed out) goes back to its
//! stage's claim status, where the plan dispatches it like any ticket with an
//! answered question; one still waiting is reported with why.
//!
//! Level-triggered like the rest: the question and the answer are on the ticket, so
//! a tick that dies between the read and the move is finished by the next one.

use super::context::Context;
use super::decide::eligibility::SkipReason;
use super::decide::question::Continuation;
use super::history::{Answerers, OpenQuestion, TicketHistory};
use super::observe::canonicalize;
use super::report::{SkipLine, UnparkLine};
use super::PipelineError;
use crate::tracker::TrackerError;

/// What this step did: the tickets moved back (or, in a dry run, that would be), and
/// those that wait still.
#[derive(Debug, Default)]
pub(super) struct Unparked {
    pub moved: Vec<UnparkLine>,
    pub waiting: Vec<SkipLine>,
}

/// Read `questions.waiting_status` and move every ticket whose question is answered
/// back to its stage's claim status (nothing without a waiting status).
pub(super) async fn unpark(ctx: &Context, dry_run: bool) -> Result<Unparked, PipelineError> {
    let mut out = Unparked::default();
    let Some(waiting) = ctx.config.questions.waiting_status.clone() else {
        return Ok(out);
    };
    let listing = ctx
        .tracker
        .list_filtered(std::slice::from_ref(&waiting), &ctx.config.filter)
        .await?;
    let mut tickets = listing.tickets;
    tickets.retain(|t| !t.closed);
    for ticket in &mut tickets {
        canonicalize(&ctx.config, ticket);
    }
    let ids: Vec<String> = tickets.iter().map(|t| t.id.clone()).collect();
    let comments = ctx.tracker.comments_of(&ids).await;
    let who = Answerers {
        identity: &ctx.identity,
        trusted_authors: &ctx.config.trusted_authors,
    };
    let now = ctx.clock.now();
    for (ticket, comments) in tickets.iter().zip(comments) {
        let skip = |role: &str, reason: SkipReason| SkipLine {
            ticket: ticket.id.clone(),
            role: role.to_string(),
            status: ticket.status.clone(),
            reason,
        };
        let comments = match comments {
            Ok(comments) => comments,
            Err(err) => {
                out.waiting.push(skip(
                    "-",
                    SkipReason::TrackerError {
                        message: err.to_string(),
                    },
                ));
                continue;
            }
        };
        let history = TicketHistory::from_comments(&comments, &ctx.trusted);
        // The latest open question of any stage is the one the ticket waits for.
        let Some((stage, open)) = ctx
            .config
            .stages
            .iter()
            .filter_map(|s| history.open_question(&s.role, &who).map(|q| (s, q)))
            .max_by_key(|(_, q): &(_, OpenQuestion<'_>)| q.posted_at)
        else {
            // Parked by a person, or its question closed: not sortie's to move.
            continue;
        };
        let Some(continuation) = Continuation::of(&open, now) else {
            out.waiting.push(skip(
                &stage.role,
                SkipReason::WaitingForAnswer {
                    question_id: open.block.question_id.clone(),
                    question: open.block.question.clone(),
                    options: open.block.options.clone(),
                    asked_at: open.posted_at,
                    deadline: open.block.deadline,
                    ignored: open.ignored.clone(),
                },
            ));
            continue;
        };
        let answered = match &continuation.answer {
            Some((_, by)) => format!("answered by {by}"),
            None => "timed out unanswered".to_string(),
        };
        let result = if dry_run {
            "would move".to_string()
        } else {
            match ctx
                .tracker
                .transition(&ticket.id, &ticket.status, &stage.claim_status)
                .await
            {
                Ok(()) => "moved".to_string(),
                Err(TrackerError::Conflict { current, .. }) => {
                    format!("not moved: a person moved it to {current}")
                }
                Err(err) => {
                    tracing::warn!(ticket = %ticket.id, %err, "could not move the answered ticket back to its stage");
                    format!("not moved: {err}")
                }
            }
        };
        out.moved.push(UnparkLine {
            ticket: ticket.id.clone(),
            role: stage.role.clone(),
            question_id: open.block.question_id.clone(),
            answered,
            from_status: ticket.status.clone(),
            to_status: stage.claim_status.clone(),
            result,
        });
    }
    Ok(out)
}

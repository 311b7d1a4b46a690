//! Writing one reaction (the react step's apply): the block and the ledger row stored
//! together, then the write-back, or the line a dry run prints.

use serde_json::json;

use super::line;
use crate::block::{
    render_comment, Category, FailureBlock, NextAction, OutcomeBlock, SuccessBlock,
};
use crate::config::ReactionKind;
use crate::ledger::{ClaimKey, FollowUp, OutboxEntry, OutboxState, ReactionPut, ReactionRecord};
use crate::pipeline::context::Context;
use crate::pipeline::decide::reaction::{exhausted_kind, HandedComment, Reaction, REACTIONS_ROLE};
use crate::pipeline::report::ReactionLine;
use crate::pipeline::writeback;
use crate::pipeline::PipelineError;
use crate::tracker::{PullState, Ticket};

/// Writing one reaction: block, ledger row and move, or the line a dry run prints.
pub(super) struct Written<'a> {
    pub(super) ctx: &'a Context,
    pub(super) ticket: &'a Ticket,
    pub(super) pull: &'a PullState,
    pub(super) dry_run: bool,
}

impl Written<'_> {
    pub(super) async fn send_back(
        &self,
        reaction: &Reaction,
        details: &[String],
    ) -> Result<ReactionLine, PipelineError> {
        let kind = reaction.kind.as_str();
        let payload = payload(reaction, self.pull, details);
        let prose = format!(
            "Pull request #{}: {} (round {} of {}). Sent back to {}.",
            self.pull.number,
            reaction.detail,
            reaction.round,
            reaction.max_rounds,
            reaction.to_role
        );
        let block = self.failure(
            &format!("reaction.{kind}"),
            Category::Transient,
            NextAction::Retry,
            &reaction.to_status,
            reaction.round,
            &reaction.fingerprint,
            &reaction.detail,
        );
        let record = self.record(
            kind.to_string(),
            &reaction.fingerprint,
            reaction.round,
            Some(reaction.to_role.clone()),
            reaction.comments.iter().map(|c| c.id.clone()).collect(),
            payload,
        );
        self.store_and_write(
            record,
            OutcomeBlock::Failure(block),
            &prose,
            FollowUp::Clear,
            Some(reaction.round),
            format!("sent to {} ({})", reaction.to_role, reaction.detail),
        )
        .await
    }

    pub(super) async fn escalate(
        &self,
        kind: ReactionKind,
        rounds: u32,
        to_status: Option<String>,
        fingerprint: String,
        detail: String,
    ) -> Result<ReactionLine, PipelineError> {
        let stays = to_status.is_none();
        let to = to_status.unwrap_or_else(|| self.ticket.status.clone());
        let block = self.failure(
            "reaction.exhausted",
            Category::Permanent,
            NextAction::Escalate,
            &to,
            rounds + 1,
            &fingerprint,
            &detail,
        );
        let prose = format!(
            "Pull request #{}: {detail}. A person takes it from here{}.",
            self.pull.number,
            if stays {
                ""
            } else {
                " (moved to the escalation status)"
            }
        );
        let follow_up = stay_or_move(stays, "reaction.exhausted");
        let record = self.record(
            exhausted_kind(kind),
            &fingerprint,
            rounds + 1,
            None,
            Vec::new(),
            json!({ "kind": kind.as_str(), "rounds": rounds, "detail": detail }),
        );
        self.store_and_write(
            record,
            OutcomeBlock::Failure(block),
            &prose,
            follow_up,
            None,
            format!("escalated to {to}: {detail}"),
        )
        .await
    }

    pub(super) async fn merged(
        &self,
        merge_commit: Option<String>,
        to_status: String,
        fingerprint: String,
    ) -> Result<ReactionLine, PipelineError> {
        let mut artifacts = std::collections::BTreeMap::new();
        artifacts.insert("pull_request".to_string(), self.pull.url.clone());
        artifacts.insert("reaction".to_string(), "merged".to_string());
        if let Some(sha) = &merge_commit {
            artifacts.insert("merge_commit".to_string(), sha.clone());
        }
        let summary = format!(
            "reaction.merged: pull request #{} merged{}",
            self.pull.number,
            merge_commit
                .as_deref()
                .map(|s| format!(" as {s}"))
                .unwrap_or_default()
        );
        let block = SuccessBlock {
            role: REACTIONS_ROLE.to_string(),
            stage_attempt: 1,
            idempotency_key: fingerprint.clone(),
            from_status: self.ticket.status.clone(),
            to_status: to_status.clone(),
            summary: summary.clone(),
            run_id: None,
            duration_seconds: None,
            artifacts,
            evidence: None,
            extra: Default::default(),
        };
        let record = self.record(
            "merged".to_string(),
            &fingerprint,
            0,
            None,
            Vec::new(),
            json!({ "kind": "merged", "merge_commit": merge_commit }),
        );
        self.store_and_write(
            record,
            OutcomeBlock::Success(block),
            &format!("{summary}."),
            FollowUp::Clear,
            None,
            format!("moved to {to_status}"),
        )
        .await
    }

    pub(super) async fn closed(
        &self,
        to_status: Option<String>,
        fingerprint: String,
    ) -> Result<ReactionLine, PipelineError> {
        let stays = to_status.is_none();
        let to = to_status.unwrap_or_else(|| self.ticket.status.clone());
        let detail = format!(
            "pull request #{} was closed without being merged",
            self.pull.number
        );
        let block = self.failure(
            "reaction.closed_unmerged",
            Category::Policy,
            NextAction::Manual,
            &to,
            1,
            &fingerprint,
            &detail,
        );
        let follow_up = stay_or_move(stays, "reaction.closed_unmerged");
        let record = self.record(
            "closed_unmerged".to_string(),
            &fingerprint,
            0,
            None,
            Vec::new(),
            json!({ "kind": "closed_unmerged" }),
        );
        let done = if stays {
            "held where it is until a person moves it".to_string()
        } else {
            format!("moved to {to}")
        };
        self.store_and_write(
            record,
            OutcomeBlock::Failure(block),
            &format!("{}: {detail}.", "Closed"),
            follow_up,
            None,
            done,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    fn failure(
        &self,
        reason_code: &str,
        category: Category,
        next_action: NextAction,
        to_status: &str,
        attempt: u32,
        fingerprint: &str,
        detail: &str,
    ) -> FailureBlock {
        FailureBlock {
            role: REACTIONS_ROLE.to_string(),
            stage_attempt: attempt.max(1),
            idempotency_key: fingerprint.to_string(),
            from_status: self.ticket.status.clone(),
            to_status: to_status.to_string(),
            reason_code: reason_code.to_string(),
            category,
            transient: category == Category::Transient,
            next_action,
            detail: detail.to_string(),
            run_id: None,
            duration_seconds: None,
            extra: Default::default(),
        }
    }

    fn record(
        &self,
        kind: String,
        fingerprint: &str,
        round: u32,
        to_role: Option<String>,
        handed: Vec<String>,
        payload: serde_json::Value,
    ) -> ReactionRecord {
        ReactionRecord {
            tracker: self.ctx.tracker_name().to_string(),
            ticket_id: self.ticket.id.clone(),
            kind,
            fingerprint: fingerprint.to_string(),
            round,
            to_role,
            pull_request: self.pull.number,
            head_sha: self.pull.head_sha.clone(),
            handed,
            payload,
            decided_at: self.ctx.clock.now(),
        }
    }

    /// Store the reaction with its outbox entry (both or neither), then write it back
    /// like any outcome. A reaction stored already (by this host or another) is not
    /// written again here: the replay of its outbox entry finishes it.
    async fn store_and_write(
        &self,
        record: ReactionRecord,
        block: OutcomeBlock,
        prose: &str,
        follow_up: FollowUp,
        round: Option<u32>,
        done: String,
    ) -> Result<ReactionLine, PipelineError> {
        let ctx = self.ctx;
        let kind = record.kind.clone();
        let id = self.ticket.id.clone();
        let number = Some(self.pull.number);
        if self.dry_run {
            return Ok(line(&id, number, Some(&kind), "would_react", round, done));
        }
        ctx.faults.hit("after_reaction_decided");
        let now = ctx.clock.now();
        let entry = OutboxEntry {
            idempotency_key: record.fingerprint.clone(),
            key: ClaimKey::new(ctx.tracker_name(), &id, REACTIONS_ROLE),
            stage: self.ticket.status.clone(),
            stage_attempt: block_attempt(&block),
            run_id: format!("reaction-{}", &record.fingerprint[..16]),
            outcome: block.kind().to_string(),
            from_status: self.ticket.status.clone(),
            to_status: block.to_status().to_string(),
            comment_body: render_comment(prose, &block),
            state: OutboxState::Pending,
            write_attempts: 0,
            next_attempt_at: now,
            last_error: None,
            created_at: now,
            follow_up,
        };
        let put =
            ctx.ledger
                .put_reaction(&record, &entry, &ctx.claimer_id, ctx.config.claim_ttl, now)?;
        if put == ReactionPut::Exists {
            return Ok(line(
                &id,
                number,
                Some(&kind),
                "exists",
                round,
                "stored already (another tick or host decided it)".into(),
            ));
        }
        ctx.faults.hit("after_reaction");
        let key = entry.idempotency_key.clone();
        let result = writeback::apply(ctx, entry).await;
        if let Err(err) = ctx.ledger.outbox_release(&key, &ctx.claimer_id) {
            tracing::warn!(%err, "could not release the reaction's write lease");
        }
        let result = result?;
        Ok(line(
            &id,
            number,
            Some(&kind),
            "reacted",
            round,
            format!("{done}; write-back {}", result.describe()),
        ))
    }
}

/// A ticket that stays where it is is held there (until a person moves it); one that
/// moves clears what was held.
fn stay_or_move(stays: bool, reason_code: &str) -> FollowUp {
    if stays {
        FollowUp::Hold {
            reason_code: reason_code.to_string(),
        }
    } else {
        FollowUp::Clear
    }
}

fn block_attempt(block: &OutcomeBlock) -> u32 {
    match block {
        OutcomeBlock::Success(s) => s.stage_attempt,
        OutcomeBlock::Failure(f) => f.stage_attempt,
    }
}

/// What the fixing stage's prompt receives as `reaction`.
fn payload(reaction: &Reaction, pull: &PullState, details: &[String]) -> serde_json::Value {
    let checks: Vec<serde_json::Value> = reaction
        .checks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "name": c.name,
                "url": c.url,
                "summary": c.summary,
                "details": details.get(i).cloned().unwrap_or_else(|| c.summary.clone()),
            })
        })
        .collect();
    let comments: Vec<&HandedComment> = reaction.comments.iter().collect();
    let conflict = (reaction.kind == ReactionKind::MergeConflict).then(|| {
        json!({
            "base": pull.base_branch,
            "head": pull.head_branch,
            "paths": pull.conflicting_paths,
        })
    });
    json!({
        "kind": reaction.kind.as_str(),
        "round": reaction.round,
        "max_rounds": reaction.max_rounds,
        "detail": reaction.detail,
        "pull_request": {
            "number": pull.number,
            "url": pull.url,
            "head": pull.head_branch,
            "base": pull.base_branch,
            "head_sha": pull.head_sha,
        },
        "checks": checks,
        "comments": comments,
        "conflict": conflict,
    })
}

//! React: the tick step that watches the pull requests of tickets in `reactions.watch`
//! (issue #32). For each watched ticket: its pull request from its blocks' artifacts,
//! the pull request's state from the forge, the decision (`decide::reaction`, pure),
//! and, outside a dry run, the reaction: stored in the ledger with its outbox entry in
//! one transaction (so a crash anywhere never reacts twice and never loses one), then
//! written back like any outcome (block, then move).

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::context::Context;
use super::decide::reaction::{
    decide, exhausted_kind, HandedComment, Reaction, Verdict, Watched, REACTIONS_ROLE,
};
use super::history::TicketHistory;
use super::observe::canonicalize;
use super::report::ReactionLine;
use super::writeback;
use super::PipelineError;
use crate::block::{
    render_comment, Category, FailureBlock, NextAction, OutcomeBlock, SuccessBlock,
};
use crate::config::{ReactionKind, ReactionsConfig};
use crate::ledger::{ClaimKey, FollowUp, OutboxEntry, OutboxState, ReactionPut, ReactionRecord};
use crate::tracker::{Forge, MergeResult, PullState, Ticket};

/// Watched pull requests read per tick at most; the rest wait for a later tick (the
/// window moves every minute, so each is read in turn).
pub const MAX_WATCHED_PER_TICK: usize = 50;
/// Failed checks whose details one reaction reads at most.
const MAX_DETAILED_CHECKS: usize = 5;
/// Characters of one failed check's details handed over.
const CHECK_DETAIL_CHARS: usize = 3000;

/// The react step: one line per watched ticket.
pub(super) async fn react(
    ctx: &Context,
    dry_run: bool,
) -> Result<Vec<ReactionLine>, PipelineError> {
    let Some(reactions) = &ctx.config.reactions else {
        return Ok(Vec::new());
    };
    let Some(forge) = &ctx.forge else {
        return Ok(vec![line(
            "-",
            None,
            None,
            "error",
            None,
            "reactions need a forge: configure `forge:` or use a forge tracker".to_string(),
        )]);
    };
    let listing = match ctx
        .tracker
        .list_filtered(&reactions.watch, &ctx.config.filter)
        .await
    {
        Ok(listing) => listing,
        Err(err) => {
            return Ok(vec![line(
                "-",
                None,
                None,
                "error",
                None,
                format!("cannot list the watched statuses: {err}"),
            )]);
        }
    };
    let mut tickets: Vec<Ticket> = listing
        .tickets
        .into_iter()
        .map(|mut t| {
            canonicalize(&ctx.config, &mut t);
            t
        })
        .filter(|t| !t.closed && reactions.watches(&t.status))
        .collect();
    tickets.sort_by(|a, b| super::decide::eligibility::natural_cmp(&a.id, &b.id));
    let tickets = window(tickets, ctx.clock.now().timestamp() / 60);
    if tickets.is_empty() {
        return Ok(Vec::new());
    }

    let tracker = ctx.tracker_name();
    let snapshot = ctx.ledger.snapshot(tracker)?;
    let pending: HashSet<&str> = snapshot
        .outbox_pending
        .iter()
        .filter(|e| e.key.role == REACTIONS_ROLE)
        .map(|e| e.key.ticket_id.as_str())
        .collect();
    let held: HashMap<&str, &str> = snapshot
        .holds
        .iter()
        .filter(|h| h.key.role == REACTIONS_ROLE)
        .map(|h| (h.key.ticket_id.as_str(), h.reason_code.as_str()))
        .collect();
    let mut past: HashMap<String, Vec<ReactionRecord>> = HashMap::new();
    for r in ctx.ledger.reactions(tracker, None)? {
        past.entry(r.ticket_id.clone()).or_default().push(r);
    }
    let identity = match forge.identity().await {
        Ok(login) => login,
        Err(_) => ctx.identity.clone(),
    };

    let ids: Vec<String> = tickets.iter().map(|t| t.id.clone()).collect();
    let comments = ctx.tracker.comments_of(&ids).await;
    let mut lines = Vec::new();
    for (ticket, comments) in tickets.iter().zip(comments) {
        let id = ticket.id.as_str();
        if pending.contains(id) {
            lines.push(line(
                id,
                None,
                None,
                "waiting",
                None,
                "its last reaction is still being written back".into(),
            ));
            continue;
        }
        if let Some(reason) = held.get(id) {
            lines.push(line(
                id,
                None,
                None,
                "waiting",
                None,
                format!("held ({reason}) until a person moves it"),
            ));
            continue;
        }
        let comments = match comments {
            Ok(c) => c,
            Err(err) => {
                lines.push(line(
                    id,
                    None,
                    None,
                    "error",
                    None,
                    format!("cannot read its comments: {err}"),
                ));
                continue;
            }
        };
        let history = TicketHistory::from_comments(&comments, &ctx.trusted);
        let Some(number) = pull_request_of(&history) else {
            lines.push(line(
                id,
                None,
                None,
                "waiting",
                None,
                "no pull request in its blocks' artifacts".into(),
            ));
            continue;
        };
        let past = past.get(id).map(Vec::as_slice).unwrap_or(&[]);
        let watched = WatchedTicket {
            ticket,
            number,
            past,
            identity: &identity,
        };
        lines.push(react_to(ctx, forge.as_ref(), reactions, &watched, dry_run).await?);
    }
    Ok(lines)
}

/// At most [`MAX_WATCHED_PER_TICK`] of `tickets`, the window moving with `turn`.
fn window(tickets: Vec<Ticket>, turn: i64) -> Vec<Ticket> {
    let n = tickets.len();
    if n <= MAX_WATCHED_PER_TICK {
        return tickets;
    }
    let windows = n.div_ceil(MAX_WATCHED_PER_TICK);
    let start = (turn.unsigned_abs() as usize % windows) * MAX_WATCHED_PER_TICK;
    tickets
        .into_iter()
        .cycle()
        .skip(start)
        .take(MAX_WATCHED_PER_TICK)
        .collect()
}

/// The pull request the latest block naming one carries.
fn pull_request_of(history: &TicketHistory) -> Option<u64> {
    history.blocks().iter().rev().find_map(|b| match b {
        OutcomeBlock::Success(s) => s
            .artifacts
            .get("pull_request")
            .and_then(|url| crate::tracker::pulls::pull_number(url)),
        OutcomeBlock::Failure(_) => None,
    })
}

struct WatchedTicket<'a> {
    ticket: &'a Ticket,
    number: u64,
    past: &'a [ReactionRecord],
    identity: &'a str,
}

async fn react_to(
    ctx: &Context,
    forge: &dyn Forge,
    reactions: &ReactionsConfig,
    w: &WatchedTicket<'_>,
    dry_run: bool,
) -> Result<ReactionLine, PipelineError> {
    let id = w.ticket.id.as_str();
    let number = Some(w.number);
    let pull = match forge.pull_request_state(w.number).await {
        Ok(pull) => pull,
        Err(err) => {
            return Ok(line(
                id,
                number,
                None,
                "error",
                None,
                format!("cannot read it: {err}"),
            ));
        }
    };
    let mut resolved = HashSet::new();
    let now = ctx.clock.now();
    let decide_now = |resolved: &HashSet<String>| {
        decide(
            &ctx.config,
            reactions,
            &Watched {
                tracker: ctx.tracker_name(),
                ticket_id: id,
                ticket_labels: &w.ticket.labels,
                pull: &pull,
                resolved,
                past: w.past,
                identity: w.identity,
                now,
            },
        )
    };
    let mut verdict = decide_now(&resolved);
    if matches!(&verdict, Verdict::React(r) if !r.comments.is_empty()) {
        // Resolved threads are read only when comments are about to be handed over.
        match forge.resolved_comments(w.number).await {
            Ok(found) if !found.is_empty() => {
                resolved = found;
                verdict = decide_now(&resolved);
            }
            Ok(_) => {}
            Err(err) => {
                return Ok(line(
                    id,
                    number,
                    None,
                    "error",
                    None,
                    format!("cannot read its resolved review threads: {err}"),
                ));
            }
        }
    }
    let written = Written {
        ctx,
        ticket: w.ticket,
        pull: &pull,
        dry_run,
    };
    match verdict {
        Verdict::Wait(why) => Ok(line(id, number, None, "waiting", None, why)),
        Verdict::React(reaction) => {
            let details = if dry_run {
                Vec::new()
            } else {
                check_details(forge, &reaction).await
            };
            written.send_back(&reaction, &details).await
        }
        Verdict::Exhausted {
            kind,
            rounds,
            to_status,
            fingerprint,
            detail,
        } => {
            written
                .escalate(kind, rounds, to_status, fingerprint, detail)
                .await
        }
        Verdict::Merge { head_sha, method } => {
            if dry_run {
                return Ok(line(
                    id,
                    number,
                    Some("merge"),
                    "would_react",
                    None,
                    format!("would merge ({}) at {head_sha}", method.as_str()),
                ));
            }
            match forge
                .merge_pull_request(w.number, &head_sha, method)
                .await
            {
                Ok(MergeResult::Merged { sha }) => {
                    let to = reactions.merged_to.clone().unwrap_or_else(|| w.ticket.status.clone());
                    let fingerprint = super::decide::reaction::fingerprint(&[
                        ctx.tracker_name(),
                        id,
                        "merged",
                        &w.number.to_string(),
                    ]);
                    written.merged(Some(sha), to, fingerprint).await
                }
                Ok(MergeResult::Refused { reason }) => Ok(line(
                    id,
                    number,
                    Some("merge"),
                    "merge_refused",
                    None,
                    format!("the forge refused the merge at {head_sha}; trying again next tick: {reason}"),
                )),
                Err(err) => Ok(line(
                    id,
                    number,
                    Some("merge"),
                    "error",
                    None,
                    format!("the merge failed; trying again next tick: {err}"),
                )),
            }
        }
        Verdict::Merged {
            merge_commit,
            to_status,
            fingerprint,
        } => written.merged(merge_commit, to_status, fingerprint).await,
        Verdict::ClosedUnmerged {
            to_status,
            fingerprint,
        } => written.closed(to_status, fingerprint).await,
    }
}

/// The details of the failed checks a reaction hands over (bounded; a check whose
/// details cannot be read keeps its summary).
async fn check_details(forge: &dyn Forge, reaction: &Reaction) -> Vec<String> {
    let mut out = Vec::new();
    for check in reaction.checks.iter().take(MAX_DETAILED_CHECKS) {
        let details = match forge.check_details(check, CHECK_DETAIL_CHARS).await {
            Ok(text) => text,
            Err(err) => {
                tracing::warn!(check = %check.name, %err, "cannot read the check's details");
                crate::tracker::pulls::tail_excerpt(&check.summary, CHECK_DETAIL_CHARS)
            }
        };
        out.push(details);
    }
    out
}

/// Writing one reaction: block, ledger row and move, or the line a dry run prints.
struct Written<'a> {
    ctx: &'a Context,
    ticket: &'a Ticket,
    pull: &'a PullState,
    dry_run: bool,
}

impl Written<'_> {
    async fn send_back(
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

    async fn escalate(
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
        let follow_up = if stays {
            FollowUp::Hold {
                reason_code: "reaction.exhausted".into(),
            }
        } else {
            FollowUp::Clear
        };
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

    async fn merged(
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

    async fn closed(
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
        let follow_up = if stays {
            FollowUp::Hold {
                reason_code: "reaction.closed_unmerged".into(),
            }
        } else {
            FollowUp::Clear
        };
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

fn line(
    ticket: &str,
    pull_request: Option<u64>,
    kind: Option<&str>,
    outcome: &str,
    round: Option<u32>,
    detail: String,
) -> ReactionLine {
    ReactionLine {
        ticket: ticket.to_string(),
        pull_request,
        kind: kind.map(str::to_string),
        outcome: outcome.to_string(),
        round,
        detail,
    }
}

//! React: the tick step that watches the pull requests of tickets in `reactions.watch`
//! (issue #32). For each watched ticket: its pull request from its blocks' artifacts,
//! the pull request's state from the forge, the decision (`decide::reaction`, pure),
//! and, outside a dry run, the reaction: stored in the ledger with its outbox entry in
//! one transaction (so a crash anywhere never reacts twice and never loses one), then
//! written back like any outcome (block, then move).

use std::collections::{HashMap, HashSet};

pub(crate) mod snapshot;
mod write;

use write::Written;

use crate::block::OutcomeBlock;
use crate::config::ReactionsConfig;
use crate::ledger::{ReactionRecord, Scope};
use crate::pipeline::context::Context;
use crate::pipeline::decide::reaction::{
    decide, merged_fingerprint, Reaction, Verdict, Watched, REACTIONS_ROLE,
};
use crate::pipeline::history::TicketHistory;
use crate::pipeline::observe::canonicalize;
use crate::pipeline::report::ReactionLine;
use crate::pipeline::PipelineError;
use crate::tracker::{Forge, MergeResult, Ticket};

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
        return Ok(vec![error(
            "-",
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
            return Ok(vec![error(
                "-",
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
    tickets.sort_by(|a, b| crate::pipeline::decide::eligibility::natural_cmp(&a.id, &b.id));
    let tickets = window(tickets, ctx.clock.now().timestamp() / 60);
    if tickets.is_empty() {
        return Ok(Vec::new());
    }

    let tracker = ctx.tracker_name();
    // Only what this step needs: its own pending write-backs and holds (the tick's
    // snapshot comes later, in observe), and each watched ticket's reactions below.
    let outbox = ctx.ledger.outbox_pending(tracker)?;
    let pending: HashSet<&str> = outbox
        .iter()
        .filter(|e| e.key.role == REACTIONS_ROLE)
        .map(|e| e.key.ticket_id.as_str())
        .collect();
    let holds = ctx.ledger.holds(Scope::Tracker(tracker))?;
    let held: HashMap<&str, &str> = holds
        .iter()
        .filter(|h| h.key.role == REACTIONS_ROLE)
        .map(|h| (h.key.ticket_id.as_str(), h.reason_code.as_str()))
        .collect();
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
            lines.push(waiting(
                id,
                None,
                "its last reaction is still being written back".into(),
            ));
            continue;
        }
        if let Some(reason) = held.get(id) {
            lines.push(waiting(
                id,
                None,
                format!("held ({reason}) until a person moves it"),
            ));
            continue;
        }
        let comments = match comments {
            Ok(c) => c,
            Err(err) => {
                lines.push(error(id, None, format!("cannot read its comments: {err}")));
                continue;
            }
        };
        let history = TicketHistory::from_comments(&comments, &ctx.trusted);
        let Some(number) = pull_request_of(&history) else {
            lines.push(waiting(
                id,
                None,
                "no pull request in its blocks' artifacts".into(),
            ));
            continue;
        };
        // The ticket's own rows (indexed by ticket): the table keeps every reaction
        // ever stored, so the whole tracker's is not read every tick.
        let past = ctx.ledger.reactions(tracker, Some(id))?;
        let watched = WatchedTicket {
            ticket,
            number,
            past: &past,
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
        Ok(pull) => {
            snapshot::record(
                &ctx.config.state_root,
                ctx.tracker_name(),
                id,
                &pull,
                ctx.clock.now(),
            );
            pull
        }
        Err(err) => {
            return Ok(error(id, number, format!("cannot read it: {err}")));
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
                return Ok(error(
                    id,
                    number,
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
        Verdict::Wait(why) => Ok(waiting(id, number, why)),
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
                    let fingerprint = merged_fingerprint(ctx.tracker_name(), id, w.number);
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

fn waiting(ticket: &str, pull_request: Option<u64>, detail: String) -> ReactionLine {
    line(ticket, pull_request, None, "waiting", None, detail)
}

fn error(ticket: &str, pull_request: Option<u64>, detail: String) -> ReactionLine {
    line(ticket, pull_request, None, "error", None, detail)
}

pub(super) fn line(
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

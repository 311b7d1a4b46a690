//! The claim step's second look: right after a claim is acquired, the ticket's comments
//! are read again (one request, the read the history step makes) and the claim is given
//! back without running when another run of the same stage ended after this tick
//! listed the board.
//!
//! Why (issue #20): a tick lists the board, another host finishes the same ticket and
//! stage and releases its claim, then this tick claims the key from its stale listing.
//! The claim is free, so the ledger cannot tell; only the ticket can. A block counts as
//! "newer than the listing" when:
//!
//! - it was not on the ticket when the plan read its history (the history is read after
//!   the listing, so anything new since is newer than the listing too); or
//! - it moved the ticket out of the stage (its `to_status` is neither the stage's claim
//!   nor its in-progress status) and its comment was written after the ticket's
//!   `updated_at` as listed: the listing predates that outcome. Both times come from
//!   the tracker's clock, so host clocks do not matter. A person who moves the ticket
//!   back to the stage afterwards bumps `updated_at` past the comment, and the stage
//!   runs again as asked.
//! - it moved the ticket out of the stage and its comment carries the same time as the
//!   listed `updated_at`. Trackers keep whole seconds, so this is a tie (a run that
//!   ended within the second of the listing's last change, or a person who moved the
//!   card back within the second of the block): one more read of the ticket settles
//!   it, stale when its current status is outside the stage. Only ties cost the read.
//!
//! A status move without a block (a person dragging the card) needs no re-read here:
//! the in-progress transition refuses it (`Conflict`) and the write-back re-reads the
//! ticket before writing.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::context::Context;
use super::decide::eligibility::SkipReason;
use super::history::TicketHistory;
use crate::block::{parse_blocks, OutcomeBlock};
use crate::config::Stage;
use crate::tracker::{same_name, Comment, Ticket};

/// What the second look found.
pub(crate) enum Recheck {
    /// Nothing ended since the listing: run, with the history just read.
    Current(TicketHistory),
    /// Give the claim back without running, for this reason.
    Stale(SkipReason),
}

/// Re-read `ticket`'s comments after claiming it for `stage`; `planned` is the history
/// the plan decided on (every dispatched ticket has one).
pub(crate) async fn recheck(
    ctx: &Context,
    ticket: &Ticket,
    stage: &Stage,
    planned: Option<&TicketHistory>,
) -> Recheck {
    let comments = match ctx.tracker.comments(&ticket.id).await {
        Ok(comments) => comments,
        // Unknown is not "nothing happened": the next tick looks again.
        Err(err) => return unread(err),
    };
    let current = || Recheck::Current(TicketHistory::from_comments(&comments, &ctx.trusted));
    match ended_since_listing(&comments, &ctx.trusted, ticket, stage, planned) {
        Ended::Since(reason) => Recheck::Stale(reason),
        Ended::No => current(),
        Ended::Tie(reason) => match ctx.tracker.get(&ticket.id).await {
            Ok(now) if stage.owned_statuses().any(|s| same_name(s, &now.status)) => current(),
            Ok(_) => Recheck::Stale(reason),
            Err(err) => unread(err),
        },
    }
}

/// A re-read that failed: the claim goes back, and the next tick looks again.
fn unread(err: crate::tracker::TrackerError) -> Recheck {
    Recheck::Stale(SkipReason::TrackerError {
        message: format!("could not re-read the ticket after claiming it: {err}"),
    })
}

/// Whether a run of the stage ended since the listing.
#[derive(Debug)]
pub(crate) enum Ended {
    /// No: nothing newer than the listing.
    No,
    /// Yes, for this reason.
    Since(SkipReason),
    /// A block that moved the ticket out of the stage was written in the same second as
    /// the listed `updated_at`: the ticket's current status decides.
    Tie(SkipReason),
}

/// The newest block of `stage` on the ticket that is newer than the listing (module
/// docs), as a skip reason; pure.
pub(crate) fn ended_since_listing(
    comments: &[Comment],
    trusted: &HashSet<String>,
    listed: &Ticket,
    stage: &Stage,
    planned: Option<&TicketHistory>,
) -> Ended {
    let listed_at: DateTime<Utc> = listed.updated_at;
    let mut tie = None;
    let since = comments
        .iter()
        .filter(|c| trusted.contains(&c.author))
        .flat_map(|c| {
            parse_blocks(&c.body)
                .into_iter()
                .filter_map(Result::ok)
                .map(move |p| (c.created_at, p.block))
        })
        .rfind(|(written_at, block)| {
            if block.role() != stage.role || !same_name(block.from_status(), &stage.claim_status) {
                return false;
            }
            let unseen = planned.is_some_and(|h| !h.contains_key(block.idempotency_key()));
            let moved_out = !stage
                .owned_statuses()
                .any(|owned| same_name(owned, block.to_status()));
            if moved_out && !unseen && *written_at == listed_at && tie.is_none() {
                tie = Some(reason(block));
            }
            unseen || (moved_out && *written_at > listed_at)
        })
        .map(|(_, block)| reason(&block));
    match (since, tie) {
        (Some(reason), _) => Ended::Since(reason),
        (None, Some(reason)) => Ended::Tie(reason),
        (None, None) => Ended::No,
    }
}

fn reason(block: &OutcomeBlock) -> SkipReason {
    SkipReason::EndedSinceListing {
        outcome: match block {
            OutcomeBlock::Success(_) => "success".to_string(),
            OutcomeBlock::Failure(f) => format!("failure ({})", f.reason_code),
        },
        attempt: block.stage_attempt(),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;
    use crate::config::Config;

    fn stage() -> Stage {
        let config = Config::parse_str(
            "tracker: {kind: local, path: board}\nagent: {command: [\"true\"]}\n\
             pipeline_stages:\n  - {role: architect, claim_status: ready, \
             in_progress_status: designing, success_status: designed}\n",
            None,
        )
        .expect("config");
        config.stages[0].clone()
    }

    fn block(key: &str, role: &str, to: &str) -> String {
        // Keys are 64 hex digits: `k1` becomes 000...01.
        let key = format!("{:0>64}", &key[1..]);
        format!(
            "```yaml sortie:success\nrole: {role}\nstage_attempt: 1\nidempotency_key: {key}\n\
             from_status: ready\nto_status: {to}\nsummary: ok\n```\n"
        )
    }

    fn comment(body: String, at: DateTime<Utc>) -> Comment {
        Comment {
            id: "1".into(),
            author: "sortie".into(),
            created_at: at,
            body,
        }
    }

    fn listed(at: DateTime<Utc>) -> Ticket {
        let mut t = crate::tracker::memory::MemoryTracker::ticket("1", "t", "ready");
        t.updated_at = at;
        t
    }

    #[test]
    fn only_blocks_of_this_stage_newer_than_the_listing_count() {
        let trusted = HashSet::from(["sortie".to_string()]);
        let t0 = Utc::now();
        let (before, after) = (t0 - Duration::seconds(5), t0 + Duration::seconds(5));
        let seen = TicketHistory::from_comments(
            &[comment(block("k1", "architect", "designed"), before)],
            &trusted,
        );
        let check = |comments: &[Comment]| {
            ended_since_listing(comments, &trusted, &listed(t0), &stage(), Some(&seen))
        };
        // Seen by the plan and older than the listing: a person moved it back since.
        assert!(matches!(
            check(&[comment(block("k1", "architect", "designed"), before)]),
            Ended::No
        ));
        // Written after the listing and moved the ticket away: stale.
        assert!(matches!(
            check(&[comment(block("k1", "architect", "designed"), after)]),
            Ended::Since(_)
        ));
        // Written in the listing's second (trackers keep whole seconds): a tie, which
        // the ticket's current status settles.
        assert!(matches!(
            check(&[comment(block("k1", "architect", "designed"), t0)]),
            Ended::Tie(_)
        ));
        // Not in the plan's history: stale, even when it keeps the ticket in the stage.
        assert!(matches!(
            check(&[comment(block("k2", "architect", "ready"), before)]),
            Ended::Since(_)
        ));
        assert!(matches!(
            check(&[comment(block("k2", "architect", "designing"), before)]),
            Ended::Since(_)
        ));
        // Another role's block, or one by an untrusted author: not this stage's run.
        assert!(matches!(
            check(&[comment(block("k3", "backend", "designed"), after)]),
            Ended::No
        ));
        let mut pasted = comment(block("k4", "architect", "designed"), after);
        pasted.author = "mallory".into();
        assert!(matches!(check(&[pasted]), Ended::No));
        // A stage block that stayed in the stage, seen by the plan: a retry, not stale.
        let retry = TicketHistory::from_comments(
            &[comment(block("k5", "architect", "ready"), after)],
            &trusted,
        );
        let comments = [comment(block("k5", "architect", "ready"), after)];
        assert!(matches!(
            ended_since_listing(&comments, &trusted, &listed(t0), &stage(), Some(&retry)),
            Ended::No
        ));
    }
}

//! Releasing a held ticket (issue #52, item 8): whether a hold still stands, given where
//! its ticket is, when the tracker says it last changed, and its comments. Pure.
//!
//! A hold stands while its ticket stays in the status it was held in and nobody changed
//! it since. It is released by a move to another status; by a change a person made
//! after the hold, seen as an updated time later than the one sortie read right after
//! its own writes (so a ticket moved away and back before the next tick is released,
//! and sortie's own comment and transition are not); and by a `/retry` comment, after
//! sortie's last block on the ticket, from someone who may answer a question
//! ([`Answerers`]). A comment alone also moves the updated time, and is no status
//! change: a change within [`COMMENT_SLACK`] of a person's comment is taken for it.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};

use super::placement::Whereabouts;
use crate::block::parse_blocks;
use crate::ledger::Hold;
use crate::pipeline::history::Answerers;
use crate::tracker::{same_name, Comment};

/// The command a comment's first line starts with to run a held ticket again.
pub const RETRY_COMMAND: &str = "/retry";

/// How far a ticket's updated time may lie after a person's comment and still be that
/// comment's (trackers stamp the ticket in the same request, a few milliseconds later).
pub const COMMENT_SLACK: Duration = Duration::seconds(2);

/// What becomes of a hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldVerdict {
    /// It stands: the ticket is not dispatched.
    Stands,
    /// It is released, and why (for the log).
    Released(String),
}

/// Whether `hold` stands. `comments` are the ticket's (`None`: not read, so only a move
/// or a disappearance can release it); `who` says whose `/retry` counts; `trusted` are
/// the authors whose blocks count (sortie's identity and `trusted_authors`).
pub fn judge_hold(
    hold: &Hold,
    at: &Whereabouts,
    comments: Option<&[Comment]>,
    who: &Answerers<'_>,
    trusted: &HashSet<String>,
) -> HoldVerdict {
    let updated_at = match at {
        Whereabouts::Unknown => return HoldVerdict::Stands,
        Whereabouts::Gone => {
            return HoldVerdict::Released("the ticket no longer exists".to_string())
        }
        Whereabouts::Status { status, .. } if !same_name(status, &hold.status) => {
            return HoldVerdict::Released(format!("the ticket moved to {status}"))
        }
        Whereabouts::Status { updated_at, .. } => *updated_at,
    };
    let Some(comments) = comments else {
        return HoldVerdict::Stands;
    };
    if let Some(by) = retry_by(comments, who, trusted) {
        return HoldVerdict::Released(format!("{RETRY_COMMAND} by {by}"));
    }
    if changed_after_hold(hold, updated_at, comments, who.identity) {
        return HoldVerdict::Released(format!(
            "the ticket changed at {} after it was held",
            updated_at.to_rfc3339()
        ));
    }
    HoldVerdict::Stands
}

/// Whether the comment asks to run the ticket again: its first line is `/retry`,
/// alone or followed by words (a reason).
pub fn is_retry(body: &str) -> bool {
    body.trim_start()
        .strip_prefix(RETRY_COMMAND)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// The author of the first `/retry` that counts, among the comments after the last one
/// carrying a block by a trusted author (the outcome that held the ticket): an older
/// `/retry` was for an earlier round.
fn retry_by(
    comments: &[Comment],
    who: &Answerers<'_>,
    trusted: &HashSet<String>,
) -> Option<String> {
    let since = comments
        .iter()
        .rposition(|c| {
            trusted.contains(&c.author) && parse_blocks(&c.body).iter().any(Result::is_ok)
        })
        .map_or(0, |at| at + 1);
    comments[since..]
        .iter()
        .filter(|c| is_retry(&c.body))
        .find(|c| match who.refuses(&c.author) {
            Some(why) => {
                tracing::info!(comment = %c.id, %why, "a /retry that does not count");
                false
            }
            None => true,
        })
        .map(|c| c.author.clone())
}

/// Whether the ticket changed after the hold for another reason than a person's comment:
/// its updated time is later (to the millisecond the ledger keeps) than the one read
/// right after sortie's own writes, and no comment by a person explains it.
fn changed_after_hold(
    hold: &Hold,
    updated_at: DateTime<Utc>,
    comments: &[Comment],
    identity: &str,
) -> bool {
    let Some(held) = hold.ticket_updated_at else {
        return false;
    };
    if updated_at.timestamp_millis() <= held.timestamp_millis() {
        return false;
    }
    let a_comment = comments.iter().any(|c| {
        c.author != identity && c.created_at > held && c.created_at + COMMENT_SLACK >= updated_at
    });
    !a_comment
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::ledger::ClaimKey;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    fn hold(updated: Option<i64>) -> Hold {
        Hold {
            key: ClaimKey::new("local", "1", "dev"),
            status: "todo".into(),
            reason_code: "agent.exit_nonzero".into(),
            created_at: t(0),
            ticket_updated_at: updated.map(t),
        }
    }

    fn at(status: &str, updated: i64) -> Whereabouts {
        Whereabouts::Status {
            status: status.into(),
            closed: false,
            labels: Vec::new(),
            assignees: Vec::new(),
            updated_at: t(updated),
        }
    }

    fn comment(id: &str, author: &str, secs: i64, body: &str) -> Comment {
        Comment {
            id: id.into(),
            author: author.into(),
            created_at: t(secs),
            body: body.into(),
        }
    }

    /// The comment that held the ticket: sortie's failure block.
    fn failure(id: &str, secs: i64) -> Comment {
        use crate::block::{render_comment, Category, FailureBlock, NextAction, OutcomeBlock};
        let block = OutcomeBlock::Failure(FailureBlock {
            role: "dev".into(),
            stage_attempt: 1,
            idempotency_key: "ab".repeat(32),
            from_status: "todo".into(),
            to_status: "todo".into(),
            reason_code: "agent.exit_nonzero".into(),
            category: Category::Permanent,
            transient: false,
            next_action: NextAction::Escalate,
            detail: "exit 1".into(),
            run_id: None,
            duration_seconds: None,
            extra: Default::default(),
        });
        comment(id, "sortie", secs, &render_comment("held", &block))
    }

    fn judge(
        hold: &Hold,
        at: &Whereabouts,
        comments: &[Comment],
        trusted_authors: &[String],
    ) -> HoldVerdict {
        let who = Answerers {
            identity: "sortie",
            trusted_authors,
        };
        let trusted: HashSet<String> = std::iter::once("sortie".to_string())
            .chain(trusted_authors.iter().cloned())
            .collect();
        judge_hold(hold, at, Some(comments), &who, &trusted)
    }

    #[test]
    fn a_hold_stands_in_its_status_until_a_move_and_falls_when_the_ticket_is_gone() {
        let h = hold(Some(10));
        assert_eq!(judge(&h, &at("TODO", 10), &[], &[]), HoldVerdict::Stands);
        assert_eq!(
            judge(&h, &Whereabouts::Unknown, &[], &[]),
            HoldVerdict::Stands
        );
        assert_eq!(
            judge(&h, &at("doing", 10), &[], &[]),
            HoldVerdict::Released("the ticket moved to doing".into())
        );
        assert!(matches!(
            judge(&h, &Whereabouts::Gone, &[], &[]),
            HoldVerdict::Released(_)
        ));
    }

    #[test]
    fn a_change_after_the_hold_releases_it_but_a_comment_or_a_hold_without_a_time_does_not() {
        let sortie = failure("1", 9);
        // Moved away and back (no comment since): released.
        assert!(matches!(
            judge(&hold(Some(10)), &at("todo", 70), std::slice::from_ref(&sortie), &[]),
            HoldVerdict::Released(why) if why.contains("changed")
        ));
        // The same time to the millisecond (the ledger keeps milliseconds): stands.
        let mut same = at("todo", 10);
        if let Whereabouts::Status { updated_at, .. } = &mut same {
            *updated_at += Duration::microseconds(400);
        }
        assert_eq!(judge(&hold(Some(10)), &same, &[], &[]), HoldVerdict::Stands);
        // A person's comment moved the time: no status change.
        let talk = comment("2", "ana", 70, "why did this fail?");
        assert_eq!(
            judge(
                &hold(Some(10)),
                &at("todo", 71),
                &[sortie.clone(), talk.clone()],
                &[]
            ),
            HoldVerdict::Stands
        );
        // ... and a move well after that comment is one.
        assert!(matches!(
            judge(&hold(Some(10)), &at("todo", 200), &[sortie, talk], &[]),
            HoldVerdict::Released(_)
        ));
        // A hold from before the ledger kept the time: only a move releases it.
        assert_eq!(
            judge(&hold(None), &at("todo", 500), &[], &[]),
            HoldVerdict::Stands
        );
    }

    #[test]
    fn a_retry_after_the_holding_block_by_someone_who_may_answer_releases_the_hold() {
        let h = hold(Some(10));
        let old = comment("1", "ana", 5, "/retry");
        let block = failure("2", 9);
        let own = comment("3", "sortie", 20, "/retry");
        let stranger = comment("4", "mallory", 30, "/retry please");
        let wordy = comment("5", "ana", 31, "/retrying later");
        let ana = comment("6", "ana", 40, "/retry flaky network");
        let trusted = ["ana".to_string()];
        // The time says nothing here: as on the local board, a comment does not move it.
        let here = at("todo", 10);
        let before = [
            old.clone(),
            block.clone(),
            own.clone(),
            stranger.clone(),
            wordy.clone(),
        ];
        assert_eq!(judge(&h, &here, &before, &trusted), HoldVerdict::Stands);
        let all = [old, block, own, stranger.clone(), wordy, ana];
        assert_eq!(
            judge(&h, &here, &all, &trusted),
            HoldVerdict::Released("/retry by ana".into())
        );
        // Without trusted_authors anyone but sortie counts.
        assert_eq!(
            judge(&h, &here, &[stranger], &[]),
            HoldVerdict::Released("/retry by mallory".into())
        );
        // Comments not read: only the status can tell.
        let who = Answerers {
            identity: "sortie",
            trusted_authors: &[],
        };
        assert_eq!(
            judge_hold(&h, &here, None, &who, &HashSet::new()),
            HoldVerdict::Stands
        );
    }
}

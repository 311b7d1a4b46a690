//! What a watched ticket's pull request calls for (issue #32): a pure function of the
//! pull request as the forge reports it, the reactions already stored for the ticket
//! and the config. Nothing here reads or writes; the tick's react step does.
//!
//! In order: a hold label stops everything; merged and closed end the watch; then,
//! for an open pull request, a conflict, a red check, a bot's review, people's review
//! comments (once quiet), and last, when everything is green and approved, a merge.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::config::{Config, MergeMethod, ReactionKind, ReactionsConfig};
use crate::ledger::ReactionRecord;
use crate::tracker::{
    same_name, Check, CheckState, Mergeability, PullLifecycle, PullState, ReviewVerdict,
};

/// The pseudo-role reaction blocks and ledger rows are written under: no stage may
/// have it (the config refuses it), so a reaction never counts as a stage's outcome.
pub const REACTIONS_ROLE: &str = "reactions";

/// A review comment (or a review's own text) to hand over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandedComment {
    /// The forge's id (`review:ID` for a review's own text).
    pub id: String,
    /// Who wrote it.
    pub author: String,
    /// The file, if on a line.
    pub path: Option<String>,
    /// The line, if on a line.
    pub line: Option<u64>,
    /// Its text.
    pub body: String,
    /// Where a person reads it.
    pub url: Option<String>,
}

/// What a watched ticket's pull request calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing now, and why (shown by `--dry-run` and the dashboard).
    Wait(String),
    /// Send the ticket back to a stage.
    React(Reaction),
    /// A kind ran out of rounds: escalate once.
    Exhausted {
        /// The kind.
        kind: ReactionKind,
        /// Its rounds so far.
        rounds: u32,
        /// Where the ticket goes; none holds it where it is.
        to_status: Option<String>,
        /// The reaction's fingerprint.
        fingerprint: String,
        /// What is still red, for people.
        detail: String,
    },
    /// Green, approved, mergeable: merge with the head SHA as the guard.
    Merge {
        /// The head the merge must still be on.
        head_sha: String,
        /// How.
        method: MergeMethod,
    },
    /// Merged (by anyone): the ticket moves on.
    Merged {
        /// The merge commit, when the forge says.
        merge_commit: Option<String>,
        /// Where the ticket goes.
        to_status: String,
        /// The reaction's fingerprint.
        fingerprint: String,
    },
    /// Closed without a merge.
    ClosedUnmerged {
        /// Where the ticket goes; none holds it.
        to_status: Option<String>,
        /// The reaction's fingerprint.
        fingerprint: String,
    },
}

/// A send-back decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaction {
    /// The kind.
    pub kind: ReactionKind,
    /// Its round on this ticket (1-based).
    pub round: u32,
    /// The kind's `max_rounds`.
    pub max_rounds: u32,
    /// The role of the stage the ticket goes to.
    pub to_role: String,
    /// That stage's claim status.
    pub to_status: String,
    /// Kind, head SHA and what it answers, hashed: the block's idempotency key.
    pub fingerprint: String,
    /// The failed checks (ci_failure).
    pub checks: Vec<Check>,
    /// The comments handed over (review kinds).
    pub comments: Vec<HandedComment>,
    /// What it answers, for people (the block's detail).
    pub detail: String,
}

/// What the decision looks at for one watched ticket.
pub struct Watched<'a> {
    /// The tracker's identity.
    pub tracker: &'a str,
    /// The ticket.
    pub ticket_id: &'a str,
    /// The ticket's labels.
    pub ticket_labels: &'a [String],
    /// Its pull request now.
    pub pull: &'a PullState,
    /// Review comment ids whose thread is resolved (beyond what `pull` marks).
    pub resolved: &'a HashSet<String>,
    /// The reactions stored for the ticket.
    pub past: &'a [ReactionRecord],
    /// sortie's own login on the forge: its comments are never a trigger.
    pub identity: &'a str,
    /// Now.
    pub now: DateTime<Utc>,
}

/// The fingerprint of a reaction: 64 hex digits over its parts.
pub fn fingerprint(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0x1f]);
    }
    hex::encode(hasher.finalize())
}

/// The fingerprint of a pull request's merge: the same whether sortie merged it (the
/// react step writes it at once) or a person did (the next tick's verdict).
pub fn merged_fingerprint(tracker: &str, ticket_id: &str, number: u64) -> String {
    fingerprint(&[tracker, ticket_id, "merged", &number.to_string()])
}

/// Decide for one watched ticket.
pub fn decide(config: &Config, reactions: &ReactionsConfig, w: &Watched<'_>) -> Verdict {
    let pull = w.pull;
    let hold = &reactions.hold_label;
    if w.ticket_labels.iter().any(|l| same_name(l, hold)) {
        return Verdict::Wait(format!("the ticket carries `{hold}`"));
    }
    if pull.labels.iter().any(|l| same_name(l, hold)) {
        return Verdict::Wait(format!("pull request #{} carries `{hold}`", pull.number));
    }
    let number = pull.number.to_string();
    match &pull.lifecycle {
        PullLifecycle::Merged { merge_commit, .. } => {
            return match &reactions.merged_to {
                Some(to) => Verdict::Merged {
                    merge_commit: merge_commit.clone(),
                    to_status: to.clone(),
                    fingerprint: merged_fingerprint(w.tracker, w.ticket_id, pull.number),
                },
                None => Verdict::Wait(format!(
                    "pull request #{} is merged; set `reactions.merged.to` (or a terminal \
                     state) to move the ticket on",
                    pull.number
                )),
            };
        }
        PullLifecycle::Closed => {
            return Verdict::ClosedUnmerged {
                to_status: reactions.closed_unmerged_to.clone(),
                fingerprint: fingerprint(&[w.tracker, w.ticket_id, "closed_unmerged", &number]),
            };
        }
        PullLifecycle::Open => {}
    }

    let handed: HashSet<&str> = w
        .past
        .iter()
        .flat_map(|r| r.handed.iter().map(String::as_str))
        .collect();
    let mut waits = Vec::new();
    for kind in ReactionKind::ALL {
        let Some(rule) = reactions.rule(kind) else {
            continue;
        };
        let found = match kind {
            ReactionKind::MergeConflict => conflict(pull),
            ReactionKind::CiFailure => failed_checks(pull),
            ReactionKind::BotReview => new_comments(w, &handed, |author, bot| {
                is_listed_bot(author, bot, &rule.bots)
            }),
            ReactionKind::ReviewComments => {
                let bot_rule = reactions.rule(ReactionKind::BotReview);
                new_comments(w, &handed, |author, bot| {
                    !bot_rule.is_some_and(|r| is_listed_bot(author, bot, &r.bots))
                })
            }
        };
        let Some(found) = found else { continue };
        if kind == ReactionKind::ReviewComments && !rule.quiet.is_zero() {
            if let Some(last) = found.last_activity {
                let quiet_since = w.now.signed_duration_since(last);
                let quiet = chrono::Duration::from_std(rule.quiet).unwrap_or_default();
                if quiet_since < quiet {
                    waits.push(format!(
                        "{} review comment(s): waiting for {} s without review activity \
                         (last {} s ago)",
                        found.comments.len(),
                        rule.quiet.as_secs(),
                        quiet_since.num_seconds().max(0)
                    ));
                    continue;
                }
            }
        }
        let key = kind.as_str();
        let mut ids: Vec<&str> = found.ids.iter().map(String::as_str).collect();
        ids.sort_unstable();
        let mut parts = vec![w.tracker, w.ticket_id, key, &pull.head_sha];
        parts.extend(ids);
        let fp = fingerprint(&parts);
        if let Some(done) = w.past.iter().find(|r| r.fingerprint == fp) {
            waits.push(format!(
                "{key} on {} was handed over already (round {}); waiting for a new push",
                short(&pull.head_sha),
                done.round
            ));
            continue;
        }
        let rounds = w.past.iter().filter(|r| r.kind == key).count() as u32;
        if rounds >= rule.max_rounds {
            let exhausted_kind = exhausted_kind(kind);
            if w.past.iter().any(|r| r.kind == exhausted_kind) {
                waits.push(format!(
                    "{key}: all {} rounds used, escalated already ({})",
                    rule.max_rounds, found.detail
                ));
                continue;
            }
            return Verdict::Exhausted {
                kind,
                rounds,
                to_status: reactions.escalate_to.clone(),
                fingerprint: fingerprint(&[w.tracker, w.ticket_id, &exhausted_kind]),
                detail: format!(
                    "{key} used all {} rounds; still: {}",
                    rule.max_rounds, found.detail
                ),
            };
        }
        let to_status = config
            .stages
            .iter()
            .find(|s| s.role == rule.to)
            .map(|s| s.claim_status.clone())
            .unwrap_or_default();
        return Verdict::React(Reaction {
            kind,
            round: rounds + 1,
            max_rounds: rule.max_rounds,
            to_role: rule.to.clone(),
            to_status,
            fingerprint: fp,
            checks: found.checks,
            comments: found.comments,
            detail: found.detail,
        });
    }
    if !waits.is_empty() {
        return Verdict::Wait(waits.join("; "));
    }

    let pending: Vec<&str> = pull
        .checks
        .iter()
        .filter(|c| c.state == CheckState::Pending)
        .map(|c| c.name.as_str())
        .collect();
    if !pending.is_empty() {
        return Verdict::Wait(format!("checks running: {}", pending.join(", ")));
    }
    let Some(method) = reactions.auto_merge else {
        return Verdict::Wait(format!(
            "pull request #{} is green; a person merges it (auto_merge is off)",
            pull.number
        ));
    };
    if pull.draft {
        return Verdict::Wait(format!(
            "pull request #{} is a draft: mark it ready for review to let it merge",
            pull.number
        ));
    }
    if pull.checks.is_empty() {
        return Verdict::Wait(format!(
            "no check has reported on {} yet; auto-merge waits for at least one",
            short(&pull.head_sha)
        ));
    }
    if changes_requested(pull, w.identity) {
        return Verdict::Wait("a reviewer's latest review requests changes".to_string());
    }
    match pull.mergeability {
        Mergeability::Clean => Verdict::Merge {
            head_sha: pull.head_sha.clone(),
            method,
        },
        Mergeability::Blocked => Verdict::Wait(format!(
            "pull request #{} is not mergeable yet (an approval or a required check is \
             missing, or the branch is behind)",
            pull.number
        )),
        Mergeability::Unknown => Verdict::Wait(format!(
            "the forge has not computed whether pull request #{} merges yet",
            pull.number
        )),
        Mergeability::Conflict => Verdict::Wait(format!(
            "pull request #{} conflicts with its base",
            pull.number
        )),
    }
}

/// The ledger kind of a kind's escalation.
pub fn exhausted_kind(kind: ReactionKind) -> String {
    format!("exhausted:{}", kind.as_str())
}

/// What one kind found on the pull request.
struct Found {
    ids: Vec<String>,
    checks: Vec<Check>,
    comments: Vec<HandedComment>,
    last_activity: Option<DateTime<Utc>>,
    detail: String,
}

fn conflict(pull: &PullState) -> Option<Found> {
    (pull.mergeability == Mergeability::Conflict).then(|| Found {
        ids: vec![pull.base_branch.clone()],
        checks: Vec::new(),
        comments: Vec::new(),
        last_activity: None,
        detail: if pull.conflicting_paths.is_empty() {
            format!("{} conflicts with {}", pull.head_branch, pull.base_branch)
        } else {
            format!(
                "{} conflicts with {} in {}",
                pull.head_branch,
                pull.base_branch,
                pull.conflicting_paths.join(", ")
            )
        },
    })
}

fn failed_checks(pull: &PullState) -> Option<Found> {
    let failed: Vec<Check> = pull
        .checks
        .iter()
        .filter(|c| c.state == CheckState::Failure)
        .cloned()
        .collect();
    if failed.is_empty() {
        return None;
    }
    let names: Vec<&str> = failed.iter().map(|c| c.name.as_str()).collect();
    Some(Found {
        ids: failed
            .iter()
            .map(|c| format!("{}={}", c.id, c.name))
            .collect(),
        detail: format!("failed on {}: {}", short(&pull.head_sha), names.join(", ")),
        checks: failed,
        comments: Vec::new(),
        last_activity: None,
    })
}

/// Review comments and review texts not handed over before, not resolved, not on
/// outdated lines, not sortie's own, whose author `wanted` accepts.
fn new_comments(
    w: &Watched<'_>,
    handed: &HashSet<&str>,
    wanted: impl Fn(&str, bool) -> bool,
) -> Option<Found> {
    let pull = w.pull;
    let own = |author: &str| same_name(author, w.identity);
    let mut comments = Vec::new();
    let mut last: Option<DateTime<Utc>> = None;
    let mut note = |at: Option<&String>| {
        if let Some(at) = at.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
            let at = at.with_timezone(&Utc);
            last = Some(last.map_or(at, |l| l.max(at)));
        }
    };
    for review in &pull.reviews {
        let id = format!("review:{}", review.id);
        let speaks = matches!(
            review.verdict,
            ReviewVerdict::ChangesRequested | ReviewVerdict::Commented
        ) && !review.body.trim().is_empty();
        if !speaks || own(&review.author) || handed.contains(id.as_str()) {
            continue;
        }
        if !wanted(&review.author, review.bot) {
            continue;
        }
        note(review.submitted_at.as_ref());
        comments.push(HandedComment {
            id,
            author: review.author.clone(),
            path: None,
            line: None,
            body: review.body.clone(),
            url: review.url.clone(),
        });
    }
    for c in &pull.comments {
        if c.resolved
            || w.resolved.contains(&c.id)
            || c.outdated
            || own(&c.author)
            || handed.contains(c.id.as_str())
            || !wanted(&c.author, c.bot)
        {
            continue;
        }
        note(c.updated_at.as_ref());
        comments.push(HandedComment {
            id: c.id.clone(),
            author: c.author.clone(),
            path: c.path.clone(),
            line: c.line,
            body: c.body.clone(),
            url: c.url.clone(),
        });
    }
    if comments.is_empty() {
        return None;
    }
    let authors: Vec<&str> = {
        let mut a: Vec<&str> = comments.iter().map(|c| c.author.as_str()).collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    Some(Found {
        ids: comments.iter().map(|c| c.id.clone()).collect(),
        detail: format!(
            "{} review comment(s) by {} on pull request #{}",
            comments.len(),
            authors.join(", "),
            pull.number
        ),
        checks: Vec::new(),
        comments,
        last_activity: last,
    })
}

fn is_listed_bot(author: &str, bot: bool, bots: &[String]) -> bool {
    if bots.is_empty() {
        bot
    } else {
        bots.iter().any(|b| same_name(b, author))
    }
}

/// Whether some reviewer's latest verdict (approve / request changes) requests changes.
fn changes_requested(pull: &PullState, identity: &str) -> bool {
    let mut latest: Vec<(&str, ReviewVerdict)> = Vec::new();
    for review in &pull.reviews {
        if same_name(&review.author, identity)
            || !matches!(
                review.verdict,
                ReviewVerdict::Approved | ReviewVerdict::ChangesRequested
            )
        {
            continue;
        }
        match latest.iter_mut().find(|(a, _)| *a == review.author) {
            Some(slot) => slot.1 = review.verdict,
            None => latest.push((&review.author, review.verdict)),
        }
    }
    latest
        .iter()
        .any(|(_, v)| *v == ReviewVerdict::ChangesRequested)
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(10)]
}

#[cfg(test)]
#[path = "reaction_tests.rs"]
mod tests;

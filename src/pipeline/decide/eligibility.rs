//! Which tickets each stage wants now, in what order, and why the others wait: the
//! checks that need only the listing and the ledger snapshot (the plan adds the ones
//! that need a ticket's history, and the caps).
//!
//! Pure: a function of values, so it is tested and benchmarked without disk, network
//! or clock.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::{Config, Stage};
use crate::ledger::{CeilingScope, Claim, Hold, LedgerSnapshot, RetryEntry};
use crate::tracker::{same_name, Ticket};

/// Why a ticket on a pipeline status is not dispatched this tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// Closed by the tracker or in a terminal status.
    Terminal {
        /// Its status.
        status: String,
    },
    /// Another run holds the claim.
    Claimed {
        /// Holder's claimer id.
        holder: crate::ledger::ClaimerId,
        /// When its lease runs out.
        lease_expires_at: DateTime<Utc>,
    },
    /// A retry is queued and not yet due.
    RetryNotDue {
        /// When it is due.
        due_at: DateTime<Utc>,
        /// Why the last attempt failed.
        reason_code: String,
    },
    /// Left where it is after a final failure; a person must change its status.
    Held {
        /// Reason code of the final failure.
        reason_code: String,
    },
    /// The previous run's write-back is still waiting in the outbox.
    WritebackPending,
    /// `requires_prior_role` has no trusted success block on the ticket.
    PriorRoleMissing {
        /// The role whose success is required.
        role: String,
    },
    /// This stage sent the ticket back for rework, and the earlier role has not
    /// succeeded since.
    PriorRoleNotRedone {
        /// The role whose newer success is required.
        role: String,
        /// This stage's role.
        since: String,
    },
    /// A tracker-native blocker is not terminal yet.
    Blocked {
        /// The open blockers, as `#id (status)`.
        by: Vec<String>,
    },
    /// The ticket's blockers could not be read this tick: held, never dispatched on a
    /// guess.
    BlockersUnknown {
        /// Why.
        message: String,
    },
    /// A ceiling is reached.
    CapReached {
        /// Which one.
        scope: CeilingScope,
        /// Its limit.
        limit: u32,
    },
    /// The fleet's cap has room, but this host holds its share of it while other hosts
    /// tick the tracker too: another host takes the ticket (issue #52).
    HostShareReached {
        /// Which cap.
        scope: CeilingScope,
        /// This host's share of it.
        share: u32,
        /// The fleet's cap.
        limit: u32,
    },
    /// The ticket does not pass the stage's filter (`tracker.filter` narrowed by the
    /// stage's `filter`): sortie leaves it alone.
    Filtered {
        /// Which part fails (`label agent-ok missing`).
        detail: String,
    },
    /// Claimed from a listing that was already stale: another run of this stage ended
    /// after the tick listed the board (its block is on the ticket), so the claim was
    /// given back without running (issue #20).
    EndedSinceListing {
        /// The newer block's outcome (`success`, `failure (reason_code)`).
        outcome: String,
        /// Its attempt.
        attempt: u32,
    },
    /// The stage's agent asked a question on the ticket (issue #34) and no person has
    /// answered it yet.
    WaitingForAnswer {
        /// The question's id (`<role>-<attempt>-q<n>`).
        question_id: String,
        /// The question itself, as the agent asked it.
        question: String,
        /// The choices it offers (`/answer 2` picks the second); empty when none.
        options: Vec<String>,
        /// When it was posted.
        asked_at: DateTime<Utc>,
        /// When its default is taken (or it fails unanswered), if it times out.
        deadline: Option<DateTime<Utc>>,
        /// Comments that tried to answer and do not count, with why.
        ignored: Vec<String>,
    },
    /// `budgets.max_cost_usd_per_day` is reached: nothing is dispatched until the
    /// day ends (issue #37).
    DayBudgetSpent {
        /// Dollars the pipeline's runs that started today cost (runs of unknown cost
        /// count nothing).
        spent_usd: f64,
        /// The limit.
        limit_usd: f64,
        /// When the day ends and dispatch resumes.
        until: DateTime<Utc>,
    },
    /// The tracker failed while checking this ticket.
    TrackerError {
        /// What it said.
        message: String,
    },
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::Terminal { status } => write!(f, "terminal (status {status})"),
            SkipReason::Claimed {
                holder,
                lease_expires_at,
            } => {
                write!(
                    f,
                    "claimed by {holder} (lease until {}; if that process is gone, \
                     `sortie claims release` the claim with --force)",
                    lease_expires_at.format("%H:%M:%S")
                )
            }
            SkipReason::RetryNotDue {
                due_at,
                reason_code,
            } => {
                write!(
                    f,
                    "retry after {reason_code} not due until {}",
                    due_at.format("%H:%M:%S")
                )
            }
            SkipReason::Held { reason_code } => {
                write!(
                    f,
                    "held after final failure {reason_code}; change its status, comment /retry or run `sortie ticket release` to run it again"
                )
            }
            SkipReason::WritebackPending => write!(f, "write-back of the last run still pending"),
            SkipReason::PriorRoleMissing { role } => {
                write!(f, "prior role {role} has no success block on the ticket")
            }
            SkipReason::PriorRoleNotRedone { role, since } => write!(
                f,
                "waiting for a {role} success newer than {since}'s last failure (rework)"
            ),
            SkipReason::Blocked { by } => write!(f, "blocked by {}", by.join(", ")),
            SkipReason::BlockersUnknown { message } => {
                write!(f, "blockers could not be read ({message}); held this tick")
            }
            SkipReason::CapReached { scope, limit } => {
                let scope = scope_word(*scope);
                write!(f, "{scope} cap reached ({limit} in flight)")
            }
            SkipReason::HostShareReached {
                scope,
                share,
                limit,
            } => write!(
                f,
                "this host's share of the {} cap reached ({share} of {limit} in flight here; other hosts take the rest)",
                scope_word(*scope)
            ),
            SkipReason::Filtered { detail } => write!(f, "{detail} (filter)"),
            SkipReason::EndedSinceListing { outcome, attempt } => write!(
                f,
                "attempt {attempt} of this stage ended ({outcome}) after this tick listed the board; claim given back, nothing run"
            ),
            SkipReason::WaitingForAnswer {
                question_id,
                question,
                options,
                deadline,
                ignored,
                ..
            } => {
                write!(f, "waiting for an answer to {question_id}")?;
                if let Some(deadline) = deadline {
                    write!(f, " (until {})", deadline.format("%Y-%m-%d %H:%M:%S UTC"))?;
                }
                write!(
                    f,
                    ": {}",
                    crate::block::question::one_line(question, options)
                )?;
                if !ignored.is_empty() {
                    write!(f, "; not answers: {}", ignored.join("; "))?;
                }
                Ok(())
            }
            SkipReason::DayBudgetSpent {
                spent_usd,
                limit_usd,
                until,
            } => write!(
                f,
                "the pipeline spent ${spent_usd:.2} today; budgets.max_cost_usd_per_day is \
                 ${limit_usd:.2}; no run starts until {}",
                until.format("%Y-%m-%d %H:%M UTC")
            ),
            SkipReason::TrackerError { message } => write!(f, "tracker error: {message}"),
        }
    }
}

/// A ticket a stage may claim, before comment-based checks and caps.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// The ticket.
    pub ticket: &'a Ticket,
    /// Index of its stage in `config.stages`.
    pub stage: usize,
    /// A due retry (dispatched before new work).
    pub retry: bool,
}

/// A ticket that is not a candidate, and why.
#[derive(Debug, Clone)]
pub struct Skip<'a> {
    /// The ticket.
    pub ticket: &'a Ticket,
    /// Index of its stage in `config.stages`.
    pub stage: usize,
    /// Why.
    pub reason: SkipReason,
}

/// The stage owning `status` (as claim or in-progress status), if any.
pub fn stage_for_status(config: &Config, status: &str) -> Option<usize> {
    config
        .stages
        .iter()
        .position(|s| s.owned_statuses().any(|owned| same_name(owned, status)))
}

/// Split the listed tickets into ordered candidates and skips. `identity` is who a
/// filter's `assignee: me` means.
///
/// Candidates come out in dispatch order: stages from the last to the first (finish
/// work before starting new work), and within a stage due retries first, then by
/// priority (lower first, none last), creation time and id (natural order).
pub fn candidates<'a>(
    config: &Config,
    tickets: &'a [Ticket],
    ledger: &LedgerSnapshot,
    identity: &str,
    now: DateTime<Utc>,
) -> (Vec<Candidate<'a>>, Vec<Skip<'a>>) {
    let pending_writebacks: HashSet<(&str, &str)> = ledger
        .outbox_pending
        .iter()
        .map(|e| (e.key.ticket_id.as_str(), e.key.role.as_str()))
        .collect();
    let claims: HashMap<(&str, &str), &Claim> = ledger
        .claims
        .iter()
        .map(|c| ((c.key.ticket_id.as_str(), c.key.role.as_str()), c))
        .collect();
    let retries: HashMap<(&str, &str), &RetryEntry> = ledger
        .retries
        .iter()
        .map(|r| ((r.key.ticket_id.as_str(), r.key.role.as_str()), r))
        .collect();
    let holds: HashMap<(&str, &str), &Hold> = ledger
        .holds
        .iter()
        .map(|h| ((h.key.ticket_id.as_str(), h.key.role.as_str()), h))
        .collect();

    let mut out = Vec::new();
    let mut skips = Vec::new();
    for ticket in tickets {
        let Some(stage_idx) = stage_for_status(config, &ticket.status) else {
            continue;
        };
        let stage: &Stage = &config.stages[stage_idx];
        let key = (ticket.id.as_str(), stage.role.as_str());
        let mut skip = |reason| {
            skips.push(Skip {
                ticket,
                stage: stage_idx,
                reason,
            })
        };
        if ticket.closed || config.is_terminal(&ticket.status) {
            skip(SkipReason::Terminal {
                status: ticket.status.clone(),
            });
            continue;
        }
        if let Some(detail) = super::filter::mismatch(&stage.filter, ticket, identity) {
            skip(SkipReason::Filtered { detail });
            continue;
        }
        if let Some(claim) = claims.get(&key) {
            if claim.lease_expires_at > now {
                skip(SkipReason::Claimed {
                    holder: claim.claimer_id.clone(),
                    lease_expires_at: claim.lease_expires_at,
                });
                continue;
            }
        }
        if pending_writebacks.contains(&key) {
            skip(SkipReason::WritebackPending);
            continue;
        }
        if let Some(hold) = holds.get(&key) {
            if same_name(&hold.status, &ticket.status) {
                skip(SkipReason::Held {
                    reason_code: hold.reason_code.clone(),
                });
                continue;
            }
        }
        let mut retry = false;
        if let Some(entry) = retries.get(&key) {
            if same_name(&entry.stage, &stage.claim_status) {
                if entry.due_at > now {
                    skip(SkipReason::RetryNotDue {
                        due_at: entry.due_at,
                        reason_code: entry.reason_code.clone(),
                    });
                    continue;
                }
                retry = true;
            }
        }
        out.push(Candidate {
            ticket,
            stage: stage_idx,
            retry,
        });
    }
    out.sort_by(|a, b| {
        b.stage
            .cmp(&a.stage)
            .then(b.retry.cmp(&a.retry))
            .then_with(|| dispatch_order(a.ticket, b.ticket))
    });
    (out, skips)
}

/// Priority (lower first, none last), then creation time, then natural id order.
pub fn dispatch_order(a: &Ticket, b: &Ticket) -> Ordering {
    let prio = |t: &Ticket| t.priority.unwrap_or(i64::MAX);
    prio(a)
        .cmp(&prio(b))
        .then(a.created_at.cmp(&b.created_at))
        .then_with(|| natural_cmp(&a.id, &b.id))
}

/// Compare ids so that `2` sorts before `10` and `T-2` before `T-10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        match (a.is_empty(), b.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let a_digit = a.starts_with(|c: char| c.is_ascii_digit());
        let b_digit = b.starts_with(|c: char| c.is_ascii_digit());
        let (ca, ra) = split_run(a, a_digit);
        let (cb, rb) = split_run(b, b_digit);
        let ord = if a_digit && b_digit {
            let ta = ca.trim_start_matches('0');
            let tb = cb.trim_start_matches('0');
            ta.len()
                .cmp(&tb.len())
                .then_with(|| ta.cmp(tb))
                .then_with(|| ca.len().cmp(&cb.len()))
        } else {
            ca.cmp(cb)
        };
        if ord != Ordering::Equal {
            return ord;
        }
        a = ra;
        b = rb;
    }
}

/// Split `s` after its leading run of digits (or of non-digits).
fn split_run(s: &str, digits: bool) -> (&str, &str) {
    let end = s
        .find(|c: char| c.is_ascii_digit() != digits)
        .unwrap_or(s.len());
    s.split_at(end)
}

/// `global`, `role` or `status`: a cap's scope in a message.
pub(crate) fn scope_word(scope: CeilingScope) -> &'static str {
    match scope {
        CeilingScope::Global => "global",
        CeilingScope::Role => "role",
        CeilingScope::Status => "status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut ids = vec!["10", "2", "T-10", "T-2", "1", "a", "02"];
        ids.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(ids, vec!["1", "2", "02", "10", "T-2", "T-10", "a"]);
    }
}

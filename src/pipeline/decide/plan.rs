//! The plan: a pure function of the board, the ledger snapshot, the tickets' histories
//! and the time, returning what to dispatch (in order) and why everything else waits.
//!
//! A ticket's history (the outcome blocks on it) costs a tracker read, so the plan asks
//! only for the histories it needs: it walks the candidates in dispatch order and, for
//! one that fits under the caps but whose history it has not been given, reserves its
//! slot and lists it in [`Plan::needs_history`]. The caller reads those histories and
//! plans again; a candidate that then fails its history checks frees its slot for the
//! next. The loop ends when nothing more is needed: each round only adds histories.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::caps::Caps;
use super::eligibility::{candidates, Candidate, SkipReason};
use crate::config::Config;
use crate::ledger::{ClaimLimits, LedgerSnapshot};
use crate::pipeline::history::TicketHistory;
use crate::tracker::{Blocker, Ticket};

/// Everything the plan is a function of.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'t, 'a> {
    /// The validated config.
    pub config: &'a Config,
    /// The tickets listed on the pipeline's statuses.
    pub tickets: &'t [Ticket],
    /// The ledger's claims, retries, holds and pending outbox for this tracker.
    pub ledger: &'a LedgerSnapshot,
    /// Histories read so far, by ticket id.
    pub histories: &'a HashMap<String, TicketHistory>,
    /// Tickets whose history could not be read this tick, with the tracker's error:
    /// they wait for the next tick.
    pub unreadable: &'a HashMap<String, String>,
    /// Who sortie is on the tracker (a filter's `assignee: me`).
    pub identity: &'a str,
    /// The host planning (its claims count toward its share of the caps while other
    /// hosts tick the tracker too: [`Caps`]).
    pub host: &'a str,
    /// Whether tracker-native blockers hold tickets back (`tracker.blockers.enabled`,
    /// default: whether the tracker supports them).
    pub blockers: bool,
    /// Blockers read so far this tick (`Tracker::blockers`) for tickets whose listing
    /// did not carry them: the list, or why it could not be read.
    pub blockers_read: &'a HashMap<String, Result<Vec<Blocker>, String>>,
    /// The time the plan is for.
    pub now: DateTime<Utc>,
}

/// One run to start: claim the ticket for the stage, then run it.
#[derive(Debug, Clone)]
pub struct Dispatch<'a> {
    /// The ticket.
    pub ticket: &'a Ticket,
    /// Index of the stage in `config.stages`.
    pub stage: usize,
    /// A due retry rather than new work.
    pub retry: bool,
    /// The lowest attempt number the claim may take (rebuilt from the ticket's blocks).
    pub attempt_floor: u32,
    /// The ceilings the ledger checks with the claim.
    pub limits: ClaimLimits,
    /// The stage route the run takes (its index in the stage's `routes`), when one
    /// matches; the run chooses again from the ticket it starts with.
    pub route: Option<usize>,
}

/// A ticket on a stage's status that is not dispatched, and why.
#[derive(Debug, Clone)]
pub struct Skip<'a> {
    /// The ticket.
    pub ticket: &'a Ticket,
    /// Index of the stage in `config.stages`.
    pub stage: usize,
    /// Why.
    pub reason: SkipReason,
}

/// What a tick would do.
#[derive(Debug, Clone, Default)]
pub struct Plan<'a> {
    /// Runs to start, in dispatch order.
    pub dispatches: Vec<Dispatch<'a>>,
    /// Everything else on the pipeline's statuses, with its reason.
    pub skips: Vec<Skip<'a>>,
    /// Tickets whose history must be read before the plan is final.
    pub needs_history: Vec<&'a str>,
    /// Tickets whose blockers must be read before the plan is final.
    pub needs_blockers: Vec<&'a str>,
}

impl Plan<'_> {
    /// Whether the plan needs no more input.
    pub fn is_final(&self) -> bool {
        self.needs_history.is_empty() && self.needs_blockers.is_empty()
    }
}

/// Plan one tick (see the module docs): every candidate walked once, from scratch.
pub fn plan<'t>(input: PlanInput<'t, '_>) -> Plan<'t> {
    Planner::new(
        input.config,
        input.tickets,
        input.ledger,
        input.identity,
        input.host,
        input.now,
    )
    .finish(&Facts::of(&input))
}

/// What the tick has read so far for the plan: the parts of [`PlanInput`] that grow
/// from one round of reads to the next.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'f> {
    /// The validated config (the same one the planner was made with).
    pub config: &'f Config,
    /// Who sortie is on the tracker.
    pub identity: &'f str,
    /// Whether tracker-native blockers hold tickets back.
    pub blockers: bool,
    /// Histories read so far, by ticket id.
    pub histories: &'f HashMap<String, TicketHistory>,
    /// Tickets whose history could not be read, with the tracker's error.
    pub unreadable: &'f HashMap<String, String>,
    /// Blockers read so far: the list, or why it could not be read.
    pub blockers_read: &'f HashMap<String, Result<Vec<Blocker>, String>>,
    /// The time the plan is for (a question's deadline is against it).
    pub now: DateTime<Utc>,
}

impl<'f> Facts<'f> {
    /// The facts of `input`.
    pub fn of(input: &PlanInput<'_, 'f>) -> Self {
        Facts {
            config: input.config,
            identity: input.identity,
            blockers: input.blockers,
            histories: input.histories,
            unreadable: input.unreadable,
            blockers_read: input.blockers_read,
            now: input.now,
        }
    }
}

/// The tickets the plan still needs read before it is final.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs<'t> {
    /// Tickets whose history must be read.
    pub history: Vec<&'t str>,
    /// Tickets whose blockers must be read.
    pub blockers: Vec<&'t str>,
    /// Tickets whose history may be read in the same round, ahead of need
    /// ([`Planner::round_reading_ahead`]); a failed read of one is not recorded.
    pub ahead: Vec<&'t str>,
}

impl Needs<'_> {
    /// Whether nothing more must be read (reads ahead are never a must).
    pub fn is_empty(&self) -> bool {
        self.history.is_empty() && self.blockers.is_empty()
    }
}

/// The plan of one tick, computed in rounds of reads without walking the whole board
/// each round (issue #29: a board of 3,000 candidates with one slot took 3,000 rounds,
/// each of which filtered, sorted and walked every ticket).
///
/// The candidates are filtered and sorted once. A round walks on from the first
/// candidate that still waited for a read: everything before it was decided on facts
/// that no later read changes (a ticket's history or blockers are read once, and the
/// caps it met were counted from candidates decided before it), so it stays decided.
/// Past that point the round only looks for what to read next, and stops looking in a
/// stage at its first capped candidate: the caps only fill as the walk goes on, so
/// every later candidate of that stage is capped too. [`Planner::finish`] then gives
/// exactly what [`plan`] gives for the same facts.
pub struct Planner<'t, 'c> {
    ordered: Vec<Candidate<'t>>,
    /// For each candidate, the index one past the last candidate of its stage.
    stage_end: Vec<usize>,
    /// The dispatches and skips of the candidates before `next`, decided for good.
    settled: Plan<'t>,
    /// The caps counted from the settled candidates and the ledger.
    caps: Caps<'c>,
    /// The first candidate not decided for good.
    next: usize,
    /// Per stage (by the end of its candidates), how far the read-ahead has looked.
    ahead: HashMap<usize, usize>,
}

impl<'t, 'c> Planner<'t, 'c> {
    /// Filter and order the candidates among `tickets` (the fields of [`PlanInput`]
    /// that stay the same from one round of reads to the next).
    pub fn new(
        config: &'c Config,
        tickets: &'t [Ticket],
        ledger: &LedgerSnapshot,
        identity: &str,
        host: &str,
        now: DateTime<Utc>,
    ) -> Self {
        let (ordered, early) = candidates(config, tickets, ledger, identity, now);
        let mut stage_end = vec![0; ordered.len()];
        let mut end = ordered.len();
        for i in (0..ordered.len()).rev() {
            if i + 1 < ordered.len() && ordered[i + 1].stage != ordered[i].stage {
                end = i + 1;
            }
            stage_end[i] = end;
        }
        Planner {
            ordered,
            stage_end,
            settled: Plan {
                skips: early.into_iter().map(Skip::from).collect(),
                ..Plan::default()
            },
            caps: Caps::from_snapshot(config, ledger, host, now),
            next: 0,
            ahead: HashMap::new(),
        }
    }

    /// What must be read before the plan is final, given what has been read so far.
    pub fn round(&mut self, facts: &Facts<'_>) -> Needs<'t> {
        self.round_reading_ahead(facts, 0)
    }

    /// [`Planner::round`], plus, in each stage whose slots are taken, up to
    /// `read_ahead` histories of the candidates that wait behind them: read in the
    /// same round, they are there when a slot's candidate turns out not to run (a
    /// tracker whose reads cost no request: [`crate::tracker::Tracker::read_ahead`]).
    /// They never change the plan, only how many rounds it takes.
    pub fn round_reading_ahead(&mut self, facts: &Facts<'_>, read_ahead: usize) -> Needs<'t> {
        self.settle(facts);
        let mut caps = self.caps.clone();
        let mut needs = Needs::default();
        let mut i = self.next;
        while i < self.ordered.len() {
            let candidate = &self.ordered[i];
            let stage = &facts.config.stages[candidate.stage];
            match judge(facts, &caps, candidate) {
                Verdict::NeedsHistory => {
                    caps.add(stage);
                    needs.history.push(&candidate.ticket.id);
                }
                Verdict::NeedsBlockers => {
                    caps.add(stage);
                    needs.blockers.push(&candidate.ticket.id);
                }
                Verdict::Dispatch { .. } => caps.add(stage),
                Verdict::Skip(SkipReason::CapReached { .. }) => {
                    let end = self.stage_end[i];
                    if read_ahead > 0 {
                        let from = self.ahead.get(&end).copied().unwrap_or(0).max(i);
                        let mut j = from;
                        let mut taken = 0;
                        while j < end && taken < read_ahead {
                            let id = &self.ordered[j].ticket.id;
                            if !facts.histories.contains_key(id)
                                && !facts.unreadable.contains_key(id)
                            {
                                needs.ahead.push(id);
                                taken += 1;
                            }
                            j += 1;
                        }
                        self.ahead.insert(end, j);
                    }
                    i = end;
                    continue;
                }
                Verdict::Skip(_) => {}
            }
            i += 1;
        }
        needs
    }

    /// The plan for `facts`: every candidate not decided yet walked to the end, those still
    /// waiting for a read listed in its `needs_history` and `needs_blockers` ([`plan`] is a
    /// fresh planner's `finish`, so rounds of reads change how the plan is reached, never what
    /// it is).
    pub fn finish(mut self, facts: &Facts<'_>) -> Plan<'t> {
        self.settle(facts);
        for candidate in &self.ordered[self.next..] {
            let verdict = judge(facts, &self.caps, candidate);
            record(&mut self.settled, &mut self.caps, candidate, verdict);
        }
        self.settled
    }

    /// Decide for good every candidate from `next` up to the first that waits for a read.
    fn settle(&mut self, facts: &Facts<'_>) {
        while let Some(candidate) = self.ordered.get(self.next) {
            let verdict = judge(facts, &self.caps, candidate);
            if matches!(verdict, Verdict::NeedsHistory | Verdict::NeedsBlockers) {
                return;
            }
            record(&mut self.settled, &mut self.caps, candidate, verdict);
            self.next += 1;
        }
    }
}

#[cfg(test)]
thread_local! {
    /// How many candidate verdicts this thread has computed: the work of planning,
    /// counted without a clock (tests of the tick's cost).
    pub(crate) static JUDGED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// What the plan does with one candidate, given the facts so far and the caps counted
/// before it.
enum Verdict {
    Dispatch {
        attempt_floor: u32,
        limits: ClaimLimits,
        route: Option<usize>,
    },
    Skip(SkipReason),
    NeedsHistory,
    NeedsBlockers,
}

fn judge(facts: &Facts<'_>, caps: &Caps<'_>, candidate: &Candidate<'_>) -> Verdict {
    #[cfg(test)]
    JUDGED.with(|n| n.set(n.get() + 1));
    let config = facts.config;
    let stage = &config.stages[candidate.stage];
    let ticket = candidate.ticket;
    if let Some(message) = facts.unreadable.get(&ticket.id) {
        return Verdict::Skip(SkipReason::TrackerError {
            message: message.clone(),
        });
    }
    if let Some(reason) = caps.check(stage) {
        return Verdict::Skip(reason);
    }
    if facts.blockers {
        let listed = ticket.blocked_by.as_deref().map(Ok);
        let read = facts
            .blockers_read
            .get(&ticket.id)
            .map(|r| r.as_deref().map_err(String::as_str));
        match listed.or(read) {
            // Keep its place, as for a history.
            None => return Verdict::NeedsBlockers,
            Some(Err(message)) => {
                return Verdict::Skip(SkipReason::BlockersUnknown {
                    message: message.to_string(),
                })
            }
            Some(Ok(blockers)) => {
                if let Some(reason) = blocked(config, blockers) {
                    return Verdict::Skip(reason);
                }
            }
        }
    }
    let Some(history) = facts.histories.get(&ticket.id) else {
        // Keep its place: whether it runs decides what the next candidates may do.
        return Verdict::NeedsHistory;
    };
    if let Some(prior) = &stage.requires_prior_role {
        if !history.has_success(prior) {
            return Verdict::Skip(SkipReason::PriorRoleMissing {
                role: prior.clone(),
            });
        }
        if !history.has_success_since_sent_back(prior, &stage.role, stage.rework_target()) {
            return Verdict::Skip(SkipReason::PriorRoleNotRedone {
                role: prior.clone(),
                since: stage.role.clone(),
            });
        }
    }
    // A question the stage's agent asked waits for its answer (or its deadline).
    let who = crate::pipeline::history::Answerers {
        identity: facts.identity,
        trusted_authors: &config.trusted_authors,
    };
    if let Some(open) = history.open_question(&stage.role, &who) {
        if super::question::state(&open, facts.now) == super::question::QuestionState::Waiting {
            return Verdict::Skip(SkipReason::WaitingForAnswer {
                question_id: open.block.question_id.clone(),
                question: open.block.question.clone(),
                options: open.block.options.clone(),
                asked_at: open.posted_at,
                deadline: open.block.deadline,
                ignored: open.ignored,
            });
        }
    }
    Verdict::Dispatch {
        attempt_floor: history.max_attempt(&stage.role) + 1,
        limits: caps.limits(stage),
        route: super::route::choose(stage, ticket, facts.identity).map(|(i, _)| i),
    }
}

/// Add `verdict` for `candidate` to `out`, counting the slot it takes.
fn record<'t>(
    out: &mut Plan<'t>,
    caps: &mut Caps<'_>,
    candidate: &Candidate<'t>,
    verdict: Verdict,
) {
    let stage = &caps.config().stages[candidate.stage];
    match verdict {
        Verdict::Skip(reason) => out.skips.push(Skip {
            ticket: candidate.ticket,
            stage: candidate.stage,
            reason,
        }),
        Verdict::NeedsHistory => {
            caps.add(stage);
            out.needs_history.push(&candidate.ticket.id);
        }
        Verdict::NeedsBlockers => {
            caps.add(stage);
            out.needs_blockers.push(&candidate.ticket.id);
        }
        Verdict::Dispatch {
            attempt_floor,
            limits,
            route,
        } => {
            caps.add(stage);
            out.dispatches.push(Dispatch {
                ticket: candidate.ticket,
                stage: candidate.stage,
                retry: candidate.retry,
                attempt_floor,
                limits,
                route,
            });
        }
    }
}

impl<'a> From<super::eligibility::Skip<'a>> for Skip<'a> {
    fn from(s: super::eligibility::Skip<'a>) -> Self {
        Skip {
            ticket: s.ticket,
            stage: s.stage,
            reason: s.reason,
        }
    }
}

/// Why a ticket with `blockers` waits for them, if it does. A blocker is done when the tracker
/// says it is closed or its status is terminal; one whose status is unknown is not.
fn blocked(config: &Config, blockers: &[Blocker]) -> Option<SkipReason> {
    let open: Vec<String> = blockers
        .iter()
        .filter(|b| !(b.closed || b.status.as_deref().is_some_and(|s| config.is_terminal(s))))
        .map(|b| {
            let id = reference(&b.id);
            match &b.status {
                Some(status) => format!("{id} ({status})"),
                None => format!("{id} (status unknown: missing or unreadable)"),
            }
        })
        .collect();
    (!open.is_empty()).then_some(SkipReason::Blocked { by: open })
}

/// A blocker as its tracker writes a reference to it: `#12` for a number (GitHub,
/// GitLab, Gitea, Redmine, the local board), the key itself for a key (`PROJ-12` in Jira,
/// `ENG-12` in Linear), which a `#` would misname.
fn reference(id: &str) -> String {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        format!("#{id}")
    } else {
        id.to_string()
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

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
use super::eligibility::{candidates, SkipReason};
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

/// Plan one tick (see the module docs).
pub fn plan<'t>(input: PlanInput<'t, '_>) -> Plan<'t> {
    let config = input.config;
    let (ordered, early) = candidates(
        config,
        input.tickets,
        input.ledger,
        input.identity,
        input.now,
    );
    let mut out = Plan {
        skips: early
            .into_iter()
            .map(|s| Skip {
                ticket: s.ticket,
                stage: s.stage,
                reason: s.reason,
            })
            .collect(),
        ..Plan::default()
    };
    let mut caps = Caps::from_claims(config, &input.ledger.claims, input.now);
    for candidate in ordered {
        let stage = &config.stages[candidate.stage];
        let ticket = candidate.ticket;
        let skip = |reason| Skip {
            ticket,
            stage: candidate.stage,
            reason,
        };
        if let Some(message) = input.unreadable.get(&ticket.id) {
            out.skips.push(skip(SkipReason::TrackerError {
                message: message.clone(),
            }));
            continue;
        }
        if let Some(reason) = caps.check(stage) {
            out.skips.push(skip(reason));
            continue;
        }
        if input.blockers {
            let listed = ticket.blocked_by.as_deref().map(Ok);
            let read = input
                .blockers_read
                .get(&ticket.id)
                .map(|r| r.as_deref().map_err(String::as_str));
            match listed.or(read) {
                None => {
                    // Keep its place, as for a history.
                    caps.add(stage);
                    out.needs_blockers.push(&ticket.id);
                    continue;
                }
                Some(Err(message)) => {
                    out.skips.push(skip(SkipReason::BlockersUnknown {
                        message: message.to_string(),
                    }));
                    continue;
                }
                Some(Ok(blockers)) => {
                    if let Some(reason) = blocked(config, blockers) {
                        out.skips.push(skip(reason));
                        continue;
                    }
                }
            }
        }
        let Some(history) = input.histories.get(&ticket.id) else {
            // Keep its place: whether it runs decides what the next candidates may do.
            caps.add(stage);
            out.needs_history.push(&ticket.id);
            continue;
        };
        if let Some(prior) = &stage.requires_prior_role {
            if !history.has_success(prior) {
                out.skips.push(skip(SkipReason::PriorRoleMissing {
                    role: prior.clone(),
                }));
                continue;
            }
            if !history.has_success_since_sent_back(prior, &stage.role, stage.rework_target()) {
                out.skips.push(skip(SkipReason::PriorRoleNotRedone {
                    role: prior.clone(),
                    since: stage.role.clone(),
                }));
                continue;
            }
        }
        caps.add(stage);
        out.dispatches.push(Dispatch {
            ticket,
            stage: candidate.stage,
            retry: candidate.retry,
            attempt_floor: history.max_attempt(&stage.role) + 1,
            limits: Caps::limits(config, stage),
            route: super::route::choose(stage, ticket, input.identity).map(|(i, _)| i),
        });
    }
    out
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
mod tests {
    use super::*;
    use crate::tracker::Comment;

    fn config() -> Config {
        Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
             concurrency: {per_role_max_in_flight: 1}\n\
             pipeline_stages:\n\
             - {role: dev, claim_status: todo, success_status: review}\n\
             - {role: qa, claim_status: review, success_status: done, requires_prior_role: dev}\n",
            None,
        )
        .unwrap()
    }

    fn ticket(id: &str, status: &str) -> Ticket {
        let mut t = crate::tracker::memory::MemoryTracker::ticket(id, id, status);
        t.created_at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        t
    }

    fn dev_success_history() -> TicketHistory {
        let key = crate::block::idempotency_key("local", "x", "dev", "todo", 2);
        let body = format!(
            "```yaml sortie:success\nrole: dev\nstage_attempt: 2\nidempotency_key: {key}\nfrom_status: todo\nto_status: review\nsummary: ok\n```\n"
        );
        let comment = Comment {
            id: "1".into(),
            author: "sortie".into(),
            created_at: Utc::now(),
            body,
        };
        TicketHistory::from_comments(&[comment], &["sortie".to_string()].into())
    }

    #[test]
    fn the_plan_asks_only_for_the_histories_that_can_change_what_runs() {
        let config = config();
        let tickets = vec![
            ticket("1", "review"),
            ticket("2", "review"),
            ticket("3", "todo"),
        ];
        let ledger = LedgerSnapshot::default();
        let histories = HashMap::new();
        let unreadable = HashMap::new();
        let now = Utc::now();
        let no_blockers = HashMap::new();
        let input = |histories| PlanInput {
            config: &config,
            tickets: &tickets,
            ledger: &ledger,
            histories,
            unreadable: &unreadable,
            identity: "sortie",
            blockers: false,
            blockers_read: &no_blockers,
            now,
        };
        // Round 1: qa's one slot goes to ticket 1 (needs its history), dev's to 3.
        let first = plan(input(&histories));
        assert_eq!(first.needs_history, vec!["1", "3"]);
        assert!(first.dispatches.is_empty());
        drop(first);
        let mut histories = histories.clone();
        // Ticket 1 has no dev success: its qa slot goes to ticket 2.
        histories.insert("1".to_string(), TicketHistory::default());
        histories.insert("3".to_string(), TicketHistory::default());
        let second = plan(input(&histories));
        assert_eq!(second.needs_history, vec!["2"]);
        drop(second);
        let mut histories = histories.clone();
        histories.insert("2".to_string(), dev_success_history());
        let last = plan(input(&histories));
        assert!(last.is_final());
        let runs: Vec<(&str, usize, u32)> = last
            .dispatches
            .iter()
            .map(|d| (d.ticket.id.as_str(), d.stage, d.attempt_floor))
            .collect();
        assert_eq!(runs, vec![("2", 1, 1), ("3", 0, 1)]);
        let reasons: Vec<(&str, String)> = last
            .skips
            .iter()
            .map(|s| (s.ticket.id.as_str(), s.reason.to_string()))
            .collect();
        assert_eq!(
            reasons,
            vec![(
                "1",
                "prior role dev has no success block on the ticket".to_string()
            )]
        );
    }

    #[test]
    fn blockers_are_named_as_their_tracker_writes_them() {
        let config = config();
        let blocker = |id: &str, status: Option<&str>| Blocker {
            id: id.into(),
            status: status.map(str::to_string),
            closed: false,
        };
        let reason = blocked(
            &config,
            &[
                blocker("12", Some("todo")),
                blocker("PROJ-12", Some("In Review")),
                blocker("ENG-7", None),
                blocker("13", Some("done")),
            ],
        );
        let Some(SkipReason::Blocked { by }) = reason else {
            panic!("not blocked: {reason:?}");
        };
        assert_eq!(
            by,
            vec![
                "#12 (todo)",
                "PROJ-12 (In Review)",
                "ENG-7 (status unknown: missing or unreadable)",
            ]
        );
    }

    #[test]
    fn the_cap_skips_without_reading_any_history() {
        let config = config();
        let tickets: Vec<Ticket> = (1..=50).map(|i| ticket(&i.to_string(), "todo")).collect();
        let ledger = LedgerSnapshot::default();
        let histories = HashMap::new();
        let unreadable = HashMap::new();
        let p = plan(PlanInput {
            config: &config,
            tickets: &tickets,
            ledger: &ledger,
            histories: &histories,
            unreadable: &unreadable,
            identity: "sortie",
            blockers: false,
            blockers_read: &HashMap::new(),
            now: Utc::now(),
        });
        assert_eq!(p.needs_history, vec!["1"], "one slot, one history read");
        assert_eq!(p.skips.len(), 49);
        assert!(p
            .skips
            .iter()
            .all(|s| matches!(s.reason, SkipReason::CapReached { .. })));
    }
}

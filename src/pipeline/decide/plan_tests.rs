//! Tests of the plan (`decide::plan`): what it asks to read, how it names blockers,
//! and, in `planner_tests`, that its rounds match the whole-board walk.

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
        host: "host-1",
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
        host: "host-1",
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

mod planner_tests {
    //! The planner gives, round by round and at the end, exactly what the whole-board
    //! walk gives for the same facts (issue #29 made the tick plan in rounds).
    use super::super::*;
    use crate::tracker::Comment;

    /// A small deterministic generator (no dependency, same boards every run).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    fn config(rng: &mut Lcg) -> Config {
        let global = 1 + rng.next(6);
        let role = 1 + rng.next(3);
        let status = 1 + rng.next(3);
        Config::parse_str(
            &format!(
                "tracker: {{kind: local, path: b}}\nagent: {{command: [\"true\"]}}\n\
                 concurrency: {{max_in_flight: {global}, per_role_max_in_flight: {role}, \
                 per_status_max_in_flight: {{review: {status}}}}}\n\
                 terminal_states: [done]\n\
                 pipeline_stages:\n\
                 - {{role: dev, claim_status: todo, success_status: review}}\n\
                 - {{role: qa, claim_status: review, success_status: test, requires_prior_role: dev}}\n\
                 - {{role: ops, claim_status: test, success_status: done, requires_prior_role: qa}}\n"
            ),
            None,
        )
        .unwrap()
    }

    fn success(role: &str) -> Comment {
        let key = crate::block::idempotency_key("local", "x", role, "s", 1);
        Comment {
            id: "1".into(),
            author: "sortie".into(),
            created_at: Utc::now(),
            body: format!(
                "```yaml sortie:success\nrole: {role}\nstage_attempt: 1\nidempotency_key: {key}\nfrom_status: s\nto_status: t\nsummary: ok\n```\n"
            ),
        }
    }

    fn board(rng: &mut Lcg, n: usize) -> Vec<Ticket> {
        let statuses = ["todo", "review", "test", "done", "backlog"];
        let base = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        (0..n)
            .map(|i| {
                let mut t = crate::tracker::memory::MemoryTracker::ticket(
                    &i.to_string(),
                    "t",
                    statuses[rng.next(5) as usize],
                );
                t.priority = match rng.next(4) {
                    0 => None,
                    p => Some(p as i64),
                };
                t.created_at = base + chrono::Duration::seconds(rng.next(50) as i64);
                t.blocked_by = match rng.next(3) {
                    0 => None,
                    1 => Some(Vec::new()),
                    _ => Some(vec![Blocker {
                        id: "99".into(),
                        status: Some(if rng.next(2) == 0 { "done" } else { "todo" }.into()),
                        closed: false,
                    }]),
                };
                t
            })
            .collect()
    }

    fn describe(plan: &Plan<'_>) -> (Vec<String>, Vec<String>) {
        let dispatches = plan
            .dispatches
            .iter()
            .map(|d| {
                format!(
                    "{} {} {} {} {:?}",
                    d.ticket.id, d.stage, d.retry, d.attempt_floor, d.route
                )
            })
            .collect();
        let skips = plan
            .skips
            .iter()
            .map(|s| format!("{} {} {}", s.ticket.id, s.stage, s.reason))
            .collect();
        (dispatches, skips)
    }

    #[test]
    fn rounds_and_the_final_plan_match_the_whole_board_walk() {
        let trusted = ["sortie".to_string()].into();
        for seed in 0..200 {
            let mut rng = Lcg(seed);
            let config = config(&mut rng);
            let size = 1 + rng.next(40) as usize;
            let tickets = board(&mut rng, size);
            let ledger = LedgerSnapshot::default();
            let now = Utc::now();
            let blockers = rng.next(2) == 0;
            let read_ahead = rng.next(4) as usize;
            let mut histories = HashMap::new();
            let mut unreadable = HashMap::new();
            let mut blockers_read = HashMap::new();
            let mut planner = Planner::new(&config, &tickets, &ledger, "sortie", "host-1", now);
            let mut rounds = 0;
            loop {
                let input = PlanInput {
                    config: &config,
                    tickets: &tickets,
                    ledger: &ledger,
                    histories: &histories,
                    unreadable: &unreadable,
                    identity: "sortie",
                    host: "host-1",
                    blockers,
                    blockers_read: &blockers_read,
                    now,
                };
                let whole = plan(input);
                let needs = planner.round_reading_ahead(&Facts::of(&input), read_ahead);
                assert_eq!(
                    needs.history, whole.needs_history,
                    "seed {seed} round {rounds}"
                );
                assert_eq!(
                    needs.blockers, whole.needs_blockers,
                    "seed {seed} round {rounds}"
                );
                if needs.is_empty() {
                    let finished = planner.finish(&Facts::of(&input));
                    assert_eq!(describe(&finished), describe(&whole), "seed {seed}");
                    assert!(finished.is_final());
                    break;
                }
                rounds += 1;
                for id in needs.ahead {
                    // A read ahead that fails is not recorded, one that works is.
                    if rng.next(3) > 0 {
                        histories.insert(id.to_string(), TicketHistory::default());
                    }
                }
                for id in needs.history {
                    match rng.next(4) {
                        0 => {
                            unreadable.insert(id.to_string(), "boom".to_string());
                        }
                        1 => {
                            histories.insert(id.to_string(), TicketHistory::default());
                        }
                        _ => {
                            let role = ["dev", "qa"][rng.next(2) as usize];
                            let history = TicketHistory::from_comments(&[success(role)], &trusted);
                            histories.insert(id.to_string(), history);
                        }
                    }
                }
                for id in needs.blockers {
                    let read = match rng.next(3) {
                        0 => Err("503".to_string()),
                        1 => Ok(Vec::new()),
                        _ => Ok(vec![Blocker {
                            id: "7".into(),
                            status: None,
                            closed: false,
                        }]),
                    };
                    blockers_read.insert(id.to_string(), read);
                }
            }
        }
    }
}

/// A question history for `id`: the dev stage asked `dev-1-q1`, then `answers` came.
fn asked_history(answers: &[(&str, &str)], deadline: Option<DateTime<Utc>>) -> TicketHistory {
    use crate::block::question::{render_question_comment, QuestionBlock};
    let q = QuestionBlock {
        question_id: "dev-1-q1".into(),
        role: "dev".into(),
        stage_attempt: 1,
        idempotency_key: "q".repeat(64),
        question: "Which API?".into(),
        options: vec!["REST".into(), "GraphQL".into()],
        default: None,
        deadline,
        context: String::new(),
    };
    let mut comments = vec![Comment {
        id: "1".into(),
        author: "sortie".into(),
        created_at: Utc::now(),
        body: render_question_comment(&q),
    }];
    for (i, (author, body)) in answers.iter().enumerate() {
        comments.push(Comment {
            id: (i + 2).to_string(),
            author: author.to_string(),
            created_at: Utc::now(),
            body: body.to_string(),
        });
    }
    TicketHistory::from_comments(&comments, &["sortie".to_string()].into())
}

// Issue #34: a ticket waiting for an answer takes no slot; answered, it runs as the
// attempt that asked; past its deadline with no default it is dispatched to fail.
#[test]
fn a_ticket_waiting_for_an_answer_gives_its_slot_to_the_next() {
    let config = config();
    let tickets = vec![ticket("1", "todo"), ticket("2", "todo")];
    let ledger = LedgerSnapshot::default();
    let (unreadable, no_blockers) = (HashMap::new(), HashMap::new());
    let now = Utc::now();
    let run = |h1: TicketHistory| {
        let histories: HashMap<String, TicketHistory> = [
            ("1".to_string(), h1),
            ("2".to_string(), TicketHistory::default()),
        ]
        .into();
        let p = plan(PlanInput {
            config: &config,
            tickets: &tickets,
            ledger: &ledger,
            histories: &histories,
            unreadable: &unreadable,
            identity: "sortie",
            host: "host-1",
            blockers: false,
            blockers_read: &no_blockers,
            now,
        });
        let runs: Vec<(String, u32)> = p
            .dispatches
            .iter()
            .map(|d| (d.ticket.id.clone(), d.attempt_floor))
            .collect();
        let skips: Vec<(String, String)> = p
            .skips
            .iter()
            .map(|s| (s.ticket.id.clone(), s.reason.to_string()))
            .collect();
        (runs, skips)
    };
    // sortie's own `/answer` is no answer: 1 waits, and dev's one slot goes to 2.
    let (runs, skips) = run(asked_history(&[("sortie", "/answer 2")], None));
    assert_eq!(runs, vec![("2".to_string(), 1)]);
    assert_eq!(skips[0].0, "1");
    assert!(
        skips[0].1.starts_with("waiting for an answer to dev-1-q1: \"Which API?\" (options: 1. REST, 2. GraphQL); not answers: comment 2 by sortie: sortie's own comment is not an answer"),
        "{skips:?}"
    );
    // A person's answer: 1 runs (first in order), 2 waits for the slot.
    let (runs, _) = run(asked_history(&[("ana", "/answer 2")], None));
    assert_eq!(runs, vec![("1".to_string(), 1)]);
    // Past its deadline with no default: dispatched (the run fails it unanswered).
    let past = now - chrono::Duration::seconds(1);
    let (runs, _) = run(asked_history(&[], Some(past)));
    assert_eq!(runs, vec![("1".to_string(), 1)]);
    let future = now + chrono::Duration::seconds(60);
    let (runs, skips) = run(asked_history(&[], Some(future)));
    assert_eq!(runs, vec![("2".to_string(), 1)]);
    assert!(skips[0].1.contains("(until "), "{skips:?}");
}

//! The outcome decision: what an agent's outcome becomes on the ticket (the block and
//! its prose) and in the ledger (the follow-up), decided once, here, with no I/O.
//!
//! The follow-up is stored with the outbox entry and applied by the write-back; nothing
//! parses the rendered comment to learn what to do next.

use std::collections::BTreeMap;

use crate::agent::AgentOutcome;
use crate::block::{
    idempotency_key, Category, Evidence, FailureBlock, NextAction, OutcomeBlock, SuccessBlock,
};
use crate::config::{RetryConfig, Stage};
use crate::ledger::FollowUp;

/// What is known about the run whose outcome is decided.
#[derive(Debug, Clone)]
pub struct RunFacts<'a> {
    /// Tracker identity (part of the idempotency key).
    pub tracker: &'a str,
    /// Ticket id.
    pub ticket_id: &'a str,
    /// The stage that ran.
    pub stage: &'a Stage,
    /// Its stage attempt.
    pub attempt: u32,
    /// Its run id.
    pub run_id: &'a str,
    /// Wall time of the agent, seconds, when an agent ran.
    pub duration_seconds: Option<f64>,
    /// The stage route the run took (name, or index when unnamed), written into the
    /// block as `route`; none for the stage's defaults.
    pub route: Option<&'a str>,
    /// How the agent was confined (`bubblewrap` or `none`), written into the block as
    /// `sandbox`; `None` writes nothing (tests of the decision alone).
    pub sandbox: Option<&'a str>,
    /// Failures of this role on the ticket since its last success (from the ticket's
    /// blocks): the retry budget counts failures, so runs an operator cancelled, which
    /// post no block, never use it up.
    pub failures_before: u32,
    /// The `(reason_code, detail)` of each earlier failure with which this stage sent
    /// the ticket back for rework (from the ticket's blocks), oldest first.
    pub rework_rounds: Vec<(String, String)>,
    /// What sortie itself observed of the run (its `verify` checks, the change): into
    /// a success block's `evidence`.
    pub evidence: Option<&'a Evidence>,
}

/// The reason code of the failure that ends a bounded rework loop.
pub const REWORK_EXHAUSTED: &str = "rework.exhausted";

/// The block, the prose before it, and what the ledger does once it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The outcome block.
    pub block: OutcomeBlock,
    /// One line for people, above the block.
    pub prose: String,
    /// Retry, hold, continue or clear.
    pub follow_up: FollowUp,
}

/// Seconds before a stage that left its ticket in the claim status after a success
/// runs again (single-role pipelines without a `handoff_state`).
pub const CONTINUATION_SECONDS: u64 = 1;

/// Decide what `outcome` becomes under `retry`.
///
/// A transient failure that asked for a retry is retried while the failures in a row
/// stay under `retry.max_attempts`; the last one escalates. A final failure moves the
/// ticket to the stage's `failure_status`, or holds it where it is when there is none.
/// A success moves it to `success_status`, or runs the stage again soon when there is
/// none (continuation). A run that took a stage route says which in the block's
/// `route` field.
pub fn decide(retry: &RetryConfig, facts: &RunFacts<'_>, outcome: &AgentOutcome) -> Decision {
    let mut decision = decide_block(retry, facts, outcome);
    if let Some(route) = facts.route {
        // An unnamed route is its index (names start with a letter, so never a number).
        let value = match route.parse::<u64>() {
            Ok(index) => serde_yaml::Value::Number(index.into()),
            Err(_) => serde_yaml::Value::String(route.to_string()),
        };
        let extra = match &mut decision.block {
            OutcomeBlock::Success(b) => &mut b.extra,
            OutcomeBlock::Failure(b) => &mut b.extra,
        };
        extra.insert(ROUTE_FIELD.to_string(), value);
    }
    if let Some(sandbox) = facts.sandbox {
        let extra = match &mut decision.block {
            OutcomeBlock::Success(b) => &mut b.extra,
            OutcomeBlock::Failure(b) => &mut b.extra,
        };
        extra.insert(
            SANDBOX_FIELD.to_string(),
            serde_yaml::Value::String(sandbox.to_string()),
        );
    }
    decision
}

/// The block field naming the stage route a run took.
pub const ROUTE_FIELD: &str = "route";

/// The block field saying how the run's agent was confined (docs/sandbox.md).
pub const SANDBOX_FIELD: &str = "sandbox";

fn decide_block(retry: &RetryConfig, facts: &RunFacts<'_>, outcome: &AgentOutcome) -> Decision {
    let stage = facts.stage;
    let attempt = facts.attempt;
    let key = idempotency_key(
        facts.tracker,
        facts.ticket_id,
        &stage.role,
        &stage.claim_status,
        attempt,
    );
    match outcome {
        AgentOutcome::Success { summary, artifacts } => {
            let (to, follow_up) = match &stage.success_status {
                Some(to) => (to.clone(), FollowUp::Clear),
                None => (
                    stage.claim_status.clone(),
                    FollowUp::Continue {
                        after_seconds: CONTINUATION_SECONDS,
                    },
                ),
            };
            Decision {
                prose: format!("sortie: **{}** succeeded on attempt {attempt}.", stage.role),
                block: OutcomeBlock::Success(SuccessBlock {
                    role: stage.role.clone(),
                    stage_attempt: attempt,
                    idempotency_key: key,
                    from_status: stage.claim_status.clone(),
                    to_status: to,
                    summary: summary.clone(),
                    run_id: Some(facts.run_id.to_string()),
                    duration_seconds: facts.duration_seconds,
                    artifacts: artifacts.clone(),
                    evidence: facts.evidence.filter(|e| !e.is_empty()).cloned(),
                    extra: BTreeMap::new(),
                }),
                follow_up,
            }
        }
        // A question is posted as one (`decide::question`), never decided here; one
        // that gets here anyway is a failure a person looks at, not a lost run.
        AgentOutcome::Question(asked) => decide_block(
            retry,
            facts,
            &AgentOutcome::failure(
                "question.not_posted",
                Category::Policy,
                NextAction::Manual,
                format!("the agent asked: {}", asked.question),
            ),
        ),
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => {
            let max = retry.max_attempts;
            let tries = facts.failures_before + 1;
            let wants_retry = *category == Category::Transient && *next_action == NextAction::Retry;
            let (to, next, detail, prose, follow_up) = if wants_retry && tries < max {
                let delay = retry.backoff(tries).as_secs();
                (
                    stage.claim_status.clone(),
                    NextAction::Retry,
                    detail.clone(),
                    format!(
                        "sortie: **{}** failed on attempt {attempt} ({reason_code}), try {tries} of {max}; retrying in {delay}s.",
                        stage.role
                    ),
                    FollowUp::Retry {
                        after_seconds: delay,
                        reason_code: reason_code.clone(),
                    },
                )
            } else {
                let mut detail = detail.clone();
                let mut next = *next_action;
                if wants_retry {
                    next = NextAction::Escalate;
                    detail = format!("{detail}\nretry limit reached: try {tries} of {max}")
                        .trim_start()
                        .to_string();
                }
                let rounds = facts.rework_rounds.len() as u32;
                // Issue #21: a run that changed nothing on a stage expecting changes is
                // held where it is for a person, whatever the stage's failure status.
                if reason_code == crate::agent::git::NO_CHANGES {
                    let prose = format!(
                        "sortie: **{}** finished attempt {attempt} without changing anything; the ticket is held for a person.",
                        stage.role
                    );
                    return Decision {
                        prose,
                        block: OutcomeBlock::Failure(FailureBlock {
                            role: stage.role.clone(),
                            stage_attempt: attempt,
                            idempotency_key: key,
                            from_status: stage.claim_status.clone(),
                            to_status: stage.claim_status.clone(),
                            reason_code: reason_code.clone(),
                            category: *category,
                            transient: *category == Category::Transient,
                            next_action: next,
                            detail,
                            run_id: Some(facts.run_id.to_string()),
                            duration_seconds: facts.duration_seconds,
                            extra: BTreeMap::new(),
                        }),
                        follow_up: FollowUp::Hold {
                            reason_code: reason_code.clone(),
                        },
                    };
                }
                if let (Some(rework), Some(_)) = (&stage.rework, stage.rework_target()) {
                    if rounds >= rework.max {
                        return exhausted(facts, key, rework, reason_code, &detail);
                    }
                }
                let (to, follow_up) = match &stage.failure_status {
                    Some(to) => (to.clone(), FollowUp::Clear),
                    None => (
                        stage.claim_status.clone(),
                        FollowUp::Hold {
                            reason_code: reason_code.clone(),
                        },
                    ),
                };
                let prose = match (&stage.rework, stage.rework_target()) {
                    (Some(rework), Some(back)) => format!(
                        "sortie: **{}** failed on attempt {attempt} ({reason_code}); work sent back to {back} (rework {} of {}).",
                        stage.role,
                        rounds + 1,
                        rework.max
                    ),
                    _ => format!(
                        "sortie: **{}** failed on attempt {attempt} ({reason_code}); {next}.",
                        stage.role
                    ),
                };
                (to, next, detail, prose, follow_up)
            };
            Decision {
                prose,
                block: OutcomeBlock::Failure(FailureBlock {
                    role: stage.role.clone(),
                    stage_attempt: attempt,
                    idempotency_key: key,
                    from_status: stage.claim_status.clone(),
                    to_status: to,
                    reason_code: reason_code.clone(),
                    category: *category,
                    transient: *category == Category::Transient,
                    next_action: next,
                    detail,
                    run_id: Some(facts.run_id.to_string()),
                    duration_seconds: facts.duration_seconds,
                    extra: BTreeMap::new(),
                }),
                follow_up,
            }
        }
    }
}

/// The failure that ends a rework loop at its bound: to `rework.then`, or held in the
/// stage's claim status without it, summarising every round.
fn exhausted(
    facts: &RunFacts<'_>,
    key: String,
    rework: &crate::config::Rework,
    reason_code: &str,
    detail: &str,
) -> Decision {
    let stage = facts.stage;
    let mut summary = format!(
        "{} sent the work back {} times (rework.max {}) and failed again:",
        stage.role,
        facts.rework_rounds.len(),
        rework.max
    );
    let first_line = |d: &str| d.lines().next().unwrap_or("").trim().to_string();
    for (i, (code, d)) in facts.rework_rounds.iter().enumerate() {
        summary.push_str(&format!("\nround {}: {code}: {}", i + 1, first_line(d)));
    }
    summary.push_str(&format!("\nfinal: {reason_code}: {}", first_line(detail)));
    let (to, follow_up, next) = match &rework.then {
        Some(then) => (then.clone(), FollowUp::Clear, format!("moved to {then}")),
        None => (
            stage.claim_status.clone(),
            FollowUp::Hold {
                reason_code: REWORK_EXHAUSTED.to_string(),
            },
            "held for a person".to_string(),
        ),
    };
    Decision {
        prose: format!(
            "sortie: **{}** failed on attempt {} ({reason_code}) after {} rework rounds; {next}.",
            stage.role,
            facts.attempt,
            facts.rework_rounds.len()
        ),
        block: OutcomeBlock::Failure(FailureBlock {
            role: stage.role.clone(),
            stage_attempt: facts.attempt,
            idempotency_key: key,
            from_status: stage.claim_status.clone(),
            to_status: to,
            reason_code: REWORK_EXHAUSTED.to_string(),
            category: Category::Policy,
            transient: false,
            next_action: NextAction::Manual,
            detail: summary,
            run_id: Some(facts.run_id.to_string()),
            duration_seconds: facts.duration_seconds,
            extra: BTreeMap::from([(
                "rework".to_string(),
                serde_yaml::to_value(BTreeMap::from([
                    ("rounds", facts.rework_rounds.len() as u64),
                    ("max", u64::from(rework.max)),
                ]))
                .unwrap_or_default(),
            )]),
        }),
        follow_up,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stage(success: Option<&str>, failure: Option<&str>) -> Stage {
        Stage {
            role: "backend".into(),
            claim_status: "todo".into(),
            in_progress_status: None,
            success_status: success.map(Into::into),
            failure_status: failure.map(Into::into),
            requires_prior_role: None,
            max_in_flight: 1,
            filter: Default::default(),
            rework: None,
            routes: Vec::new(),
            verify: None,
            evidence: Default::default(),
            review: None,
        }
    }

    fn retry() -> RetryConfig {
        RetryConfig {
            max_attempts: 3,
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
        }
    }

    fn facts(stage: &Stage, attempt: u32, failures_before: u32) -> RunFacts<'_> {
        RunFacts {
            tracker: "local",
            ticket_id: "7",
            stage,
            attempt,
            run_id: "r1",
            duration_seconds: Some(1.5),
            route: None,
            sandbox: None,
            failures_before,
            rework_rounds: Vec::new(),
            evidence: None,
        }
    }

    // Issue #21: a run that changed nothing is held in the claim status, even on a
    // stage with a failure status.
    #[test]
    fn no_changes_holds_the_ticket_where_it_is() {
        let st = stage(Some("review"), Some("blocked"));
        let outcome = AgentOutcome::failure(
            crate::agent::git::NO_CHANGES,
            Category::Policy,
            NextAction::Manual,
            "nothing",
        );
        let d = decide(&retry(), &facts(&st, 1, 0), &outcome);
        assert_eq!(d.block.to_status(), "todo");
        assert_eq!(
            d.follow_up,
            FollowUp::Hold {
                reason_code: "agent.no_changes".into()
            }
        );
        let OutcomeBlock::Failure(f) = &d.block else {
            panic!("{d:?}")
        };
        assert_eq!(
            (f.category, f.next_action),
            (Category::Policy, NextAction::Manual)
        );
    }

    fn transient() -> AgentOutcome {
        AgentOutcome::failure(
            "agent.timeout",
            Category::Transient,
            NextAction::Retry,
            "slow",
        )
    }

    #[test]
    fn a_routed_run_names_its_route_in_the_block_by_name_or_index() {
        let s = stage(Some("review"), Some("blocked"));
        let success = AgentOutcome::Success {
            summary: "done".into(),
            artifacts: BTreeMap::new(),
        };
        let named = RunFacts {
            route: Some("hard"),
            sandbox: None,
            ..facts(&s, 1, 0)
        };
        let text = crate::block::render_comment("", &decide(&retry(), &named, &success).block);
        assert!(text.contains("\nroute: hard\n"), "{text}");
        let unnamed = RunFacts {
            route: Some("0"),
            sandbox: None,
            ..facts(&s, 1, 0)
        };
        let text =
            crate::block::render_comment("", &decide(&retry(), &unnamed, &transient()).block);
        assert!(
            text.contains("\nroute: 0\n"),
            "an unnamed route is its index: {text}"
        );
        let plain = decide(&retry(), &facts(&s, 1, 0), &success).block;
        assert!(!crate::block::render_comment("", &plain).contains("route:"));
    }

    #[test]
    fn a_transient_failure_is_retried_with_backoff_until_the_failures_in_a_row_run_out() {
        let s = stage(Some("review"), Some("blocked"));
        let first = decide(&retry(), &facts(&s, 1, 0), &transient());
        assert_eq!(
            first.follow_up,
            FollowUp::Retry {
                after_seconds: 10,
                reason_code: "agent.timeout".into()
            }
        );
        assert_eq!(first.block.to_status(), "todo");
        let second = decide(&retry(), &facts(&s, 2, 1), &transient());
        assert_eq!(
            second.follow_up,
            FollowUp::Retry {
                after_seconds: 20,
                reason_code: "agent.timeout".into()
            }
        );
        let last = decide(&retry(), &facts(&s, 3, 2), &transient());
        assert_eq!(last.follow_up, FollowUp::Clear);
        assert_eq!(last.block.to_status(), "blocked");
        let OutcomeBlock::Failure(f) = &last.block else {
            panic!("failure expected")
        };
        assert_eq!(f.next_action, NextAction::Escalate);
        assert!(
            f.detail.contains("retry limit reached: try 3 of 3"),
            "{}",
            f.detail
        );
    }

    #[test]
    fn attempts_an_operator_cancelled_do_not_use_up_the_retry_budget() {
        // Attempt 5 after four cancelled runs is still the first failure in a row.
        let s = stage(Some("review"), Some("blocked"));
        let d = decide(&retry(), &facts(&s, 5, 0), &transient());
        assert!(matches!(d.follow_up, FollowUp::Retry { .. }), "{d:?}");
    }

    #[test]
    fn a_final_failure_without_failure_status_holds_and_a_permanent_one_is_not_retried() {
        let s = stage(Some("review"), None);
        let permanent =
            AgentOutcome::failure("spec.unclear", Category::Permanent, NextAction::Manual, "?");
        let d = decide(&retry(), &facts(&s, 1, 0), &permanent);
        assert_eq!(
            d.follow_up,
            FollowUp::Hold {
                reason_code: "spec.unclear".into()
            }
        );
        assert_eq!(d.block.to_status(), "todo");
    }

    #[test]
    fn a_success_moves_on_or_continues_in_place() {
        let ok = AgentOutcome::Success {
            summary: "done".into(),
            artifacts: BTreeMap::new(),
        };
        let moving = stage(Some("review"), None);
        let d = decide(&retry(), &facts(&moving, 1, 0), &ok);
        assert_eq!(d.follow_up, FollowUp::Clear);
        assert_eq!(d.block.to_status(), "review");
        let staying = stage(None, None);
        let d = decide(&retry(), &facts(&staying, 4, 0), &ok);
        assert_eq!(d.follow_up, FollowUp::Continue { after_seconds: 1 });
        assert_eq!(d.block.idempotency_key().len(), 64);
    }
}

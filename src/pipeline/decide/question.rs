//! Questions through the ticket (issue #34), decided with no I/O: what an agent's
//! question becomes on the ticket ([`ask`]), and what a ticket with an open question
//! does this tick ([`state`]): wait, go on with an answer, or fail unanswered.

use chrono::{DateTime, Utc};

use crate::agent::{AgentOutcome, AskedQuestion};
use crate::block::question::QuestionBlock;
use crate::block::{idempotency_key, Category, NextAction};
use crate::config::{QuestionsConfig, Stage};
use crate::pipeline::history::OpenQuestion;

/// The outcome recorded for a run that asked a question (outbox, run history, report).
pub const QUESTION_OUTCOME: &str = "question";
/// The reason code of a question past `questions.max_per_stage`.
pub const QUESTION_LIMIT: &str = "question.limit";
/// The reason code of a question that timed out with no default to take.
pub const QUESTION_UNANSWERED: &str = "question.unanswered";
/// Who answered a question that timed out and took its default.
pub const ANSWERED_BY_TIMEOUT: &str = "timeout";

/// What is known when an agent asks.
#[derive(Debug, Clone, Copy)]
pub struct Asking<'a> {
    /// Tracker identity (part of the idempotency key).
    pub tracker: &'a str,
    /// Ticket id.
    pub ticket_id: &'a str,
    /// The stage that asked.
    pub stage: &'a Stage,
    /// Its stage attempt.
    pub attempt: u32,
    /// Questions this role asked on the ticket since its last success.
    pub asked_since_success: u32,
    /// Questions this role asked in this attempt.
    pub asked_this_attempt: u32,
    /// `questions:`.
    pub config: &'a QuestionsConfig,
    /// Now.
    pub now: DateTime<Utc>,
}

/// What an agent's question becomes.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// Post the question and keep the ticket where it waits.
    Post {
        /// The block to post.
        block: QuestionBlock,
        /// Where the ticket waits: `questions.waiting_status`, else the stage's claim
        /// status.
        to_status: String,
    },
    /// One question too many: this failure instead.
    OverLimit(AgentOutcome),
}

/// What `asked` becomes under `facts`: a question block with its id
/// (`<role>-<attempt>-q<n>`), its own idempotency key and its deadline; or, past
/// `questions.max_per_stage`, a `question.limit` failure (policy, escalate).
pub fn ask(facts: &Asking<'_>, asked: &AskedQuestion) -> Ask {
    let stage = facts.stage;
    let max = facts.config.max_per_stage;
    if facts.asked_since_success >= max {
        return Ask::OverLimit(AgentOutcome::failure(
            QUESTION_LIMIT,
            Category::Policy,
            NextAction::Escalate,
            format!(
                "{} asked a question again after {} already (questions.max_per_stage is {max}): {}",
                stage.role,
                facts.asked_since_success,
                asked.question.trim()
            ),
        ));
    }
    let n = facts.asked_this_attempt + 1;
    let deadline = facts
        .config
        .timeout
        .and_then(|t| chrono::Duration::from_std(t).ok())
        .map(|t| facts.now + t);
    Ask::Post {
        block: QuestionBlock {
            question_id: format!("{}-{}-q{n}", stage.role, facts.attempt),
            role: stage.role.clone(),
            stage_attempt: facts.attempt,
            idempotency_key: idempotency_key(
                facts.tracker,
                facts.ticket_id,
                &stage.role,
                &format!("{}#question{n}", stage.claim_status),
                facts.attempt,
            ),
            question: asked.question.clone(),
            options: asked.options.clone(),
            default: asked.default.clone(),
            deadline,
            context: asked.context.clone(),
        },
        to_status: facts
            .config
            .waiting_status
            .clone()
            .unwrap_or_else(|| stage.claim_status.clone()),
    }
}

/// Where an open question stands.
#[derive(Debug, Clone, PartialEq)]
pub enum QuestionState {
    /// No answer yet, and no deadline passed.
    Waiting,
    /// Answered: the run goes on with the answer.
    Answered {
        /// The answer's text.
        text: String,
        /// Who answered ([`ANSWERED_BY_TIMEOUT`] for a default taken at the deadline).
        by: String,
    },
    /// Its deadline passed with no answer and no default.
    Unanswered,
}

/// Where `open` stands at `now`: a person's answer wins; past the deadline the default
/// is the answer, and with no default the question is unanswered.
pub fn state(open: &OpenQuestion<'_>, now: DateTime<Utc>) -> QuestionState {
    if let Some((text, by)) = &open.answer {
        return QuestionState::Answered {
            text: text.clone(),
            by: by.clone(),
        };
    }
    match open.block.deadline {
        Some(deadline) if now >= deadline => match &open.block.default {
            Some(default) => QuestionState::Answered {
                text: default.clone(),
                by: ANSWERED_BY_TIMEOUT.to_string(),
            },
            None => QuestionState::Unanswered,
        },
        _ => QuestionState::Waiting,
    }
}

/// A run that goes on from an answered (or timed-out) question: it takes the
/// question's stage attempt and carries the question and the answer to its prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Continuation {
    /// The question as posted.
    pub question: QuestionBlock,
    /// The answer, or `None` when the question timed out unanswered (the run then
    /// fails with `question.unanswered` without running its agent).
    pub answer: Option<(String, String)>,
}

impl Continuation {
    /// The continuation of `open` at `now`, unless it still waits.
    pub fn of(open: &OpenQuestion<'_>, now: DateTime<Utc>) -> Option<Continuation> {
        let answer = match state(open, now) {
            QuestionState::Waiting => return None,
            QuestionState::Answered { text, by } => Some((text, by)),
            QuestionState::Unanswered => None,
        };
        Some(Continuation {
            question: open.block.clone(),
            answer,
        })
    }

    /// The failure of a question that timed out with no default.
    pub fn unanswered(&self) -> AgentOutcome {
        let q = &self.question;
        AgentOutcome::failure(
            QUESTION_UNANSWERED,
            Category::Policy,
            NextAction::Escalate,
            format!(
                "no answer to {} by its deadline{} and no default to take: {}",
                q.question_id,
                q.deadline
                    .map(|d| format!(" ({})", d.to_rfc3339()))
                    .unwrap_or_default(),
                q.question.trim()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Stage;

    fn stage() -> Stage {
        Stage {
            role: "architect".into(),
            claim_status: "todo".into(),
            in_progress_status: None,
            success_status: Some("dev".into()),
            failure_status: None,
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

    fn asked() -> AskedQuestion {
        AskedQuestion {
            question: "Which API?".to_string(),
            options: vec!["REST v2".to_string(), "GraphQL".to_string()],
            default: None,
            context: String::new(),
        }
    }

    fn facts<'a>(stage: &'a Stage, config: &'a QuestionsConfig, before: u32) -> Asking<'a> {
        Asking {
            tracker: "local",
            ticket_id: "7",
            stage,
            attempt: 2,
            asked_since_success: before,
            asked_this_attempt: before,
            config,
            now: DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
        }
    }

    #[test]
    fn a_question_gets_an_id_a_key_of_its_own_and_a_deadline() {
        let stage = stage();
        let config = QuestionsConfig {
            timeout: Some(std::time::Duration::from_secs(3600)),
            ..QuestionsConfig::default()
        };
        let Ask::Post { block, to_status } = ask(&facts(&stage, &config, 1), &asked()) else {
            panic!()
        };
        assert_eq!(block.question_id, "architect-2-q2");
        assert_eq!(to_status, "todo");
        assert_eq!(
            block.deadline.unwrap().to_rfc3339(),
            "2026-12-03T11:00:00+00:00"
        );
        // Not the attempt's outcome key: the attempt still posts its outcome later.
        assert_ne!(
            block.idempotency_key,
            idempotency_key("local", "7", "architect", "todo", 2)
        );
    }

    #[test]
    fn one_question_past_the_bound_is_a_limit_failure() {
        let stage = stage();
        let config = QuestionsConfig::default();
        let out = ask(&facts(&stage, &config, 3), &asked());
        let Ask::OverLimit(AgentOutcome::Failure { reason_code, .. }) = out else {
            panic!("{out:?}")
        };
        assert_eq!(reason_code, QUESTION_LIMIT);
        assert!(matches!(
            ask(&facts(&stage, &config, 2), &asked()),
            Ask::Post { .. }
        ));
    }

    #[test]
    fn a_deadline_takes_the_default_or_leaves_the_question_unanswered() {
        let stage = stage();
        let config = QuestionsConfig {
            timeout: Some(std::time::Duration::from_secs(60)),
            ..QuestionsConfig::default()
        };
        let f = facts(&stage, &config, 0);
        let Ask::Post { mut block, .. } = ask(&f, &asked()) else {
            panic!()
        };
        let open = |block: &QuestionBlock, answer: Option<(String, String)>| {
            state(
                &OpenQuestion {
                    block,
                    posted_at: f.now,
                    answer,
                    ignored: Vec::new(),
                },
                f.now + chrono::Duration::seconds(61),
            )
        };
        assert_eq!(open(&block, None), QuestionState::Unanswered);
        assert_eq!(
            open(&block, Some(("GraphQL".into(), "ana".into()))),
            QuestionState::Answered {
                text: "GraphQL".into(),
                by: "ana".into()
            }
        );
        block.default = Some("REST v2".to_string());
        assert_eq!(
            open(&block, None),
            QuestionState::Answered {
                text: "REST v2".into(),
                by: ANSWERED_BY_TIMEOUT.into()
            }
        );
        block.deadline = None;
        assert_eq!(open(&block, None), QuestionState::Waiting);
    }
}

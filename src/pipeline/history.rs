//! A ticket's outcome history: the outcome blocks its trusted comments carry, the
//! questions sortie asked on it and the comments that may answer them.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::block::question::{parse_answer, parse_question_blocks, QuestionBlock};
use crate::block::{parse_blocks, FailureBlock, OutcomeBlock, SuccessBlock};
use crate::tracker::Comment;

/// The valid outcome blocks written by trusted authors on one ticket, oldest first.
#[derive(Debug, Clone, Default)]
pub struct TicketHistory {
    blocks: Vec<OutcomeBlock>,
    /// For each block, the position of its comment among the ticket's comments.
    block_at: Vec<usize>,
    /// The questions sortie asked (blocks of trusted authors), oldest first.
    questions: Vec<Asked>,
    /// Comments that may answer a question (a first line `/answer`, or a
    /// `sortie:answer` block), by anyone, oldest first.
    answers: Vec<(usize, Comment)>,
    human_comments: Vec<Comment>,
}

/// A question on the ticket, where it is among the comments, and when it was posted.
#[derive(Debug, Clone)]
struct Asked {
    at: usize,
    posted_at: DateTime<Utc>,
    block: QuestionBlock,
}

/// Who may answer a question (or ask for a held ticket's `/retry`): people, never sortie
/// itself, and where `trusted_authors` is configured only them.
#[derive(Debug, Clone, Copy)]
pub struct Answerers<'a> {
    /// sortie's identity on the tracker.
    pub identity: &'a str,
    /// `trusted_authors` (empty: anyone but sortie).
    pub trusted_authors: &'a [String],
}

impl Answerers<'_> {
    /// Why a comment by `author` does not count (an answer, a `/retry`), or `None` when
    /// it does: sortie's own comments never count; with `trusted_authors` configured,
    /// only those authors' do.
    pub fn refuses(&self, author: &str) -> Option<String> {
        if author == self.identity {
            Some("sortie's own comment".to_string())
        } else if !self.trusted_authors.is_empty()
            && !self.trusted_authors.iter().any(|a| a == author)
        {
            Some(format!("{author} is not in trusted_authors"))
        } else {
            None
        }
    }
}

/// The latest question of a role that no block has closed yet, with what people
/// said to it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenQuestion<'h> {
    /// The question as posted.
    pub block: &'h QuestionBlock,
    /// When its comment was posted.
    pub posted_at: DateTime<Utc>,
    /// The first comment that counts as an answer: its text and author.
    pub answer: Option<(String, String)>,
    /// Comments that tried to answer and do not count, with why (oldest first).
    pub ignored: Vec<String>,
}

/// How many recent human comments a prompt sees.
const HUMAN_COMMENTS: usize = 10;
/// How much of each human comment a prompt sees.
const HUMAN_COMMENT_CHARS: usize = 4000;

impl TicketHistory {
    /// Collect the blocks of comments whose author is in `trusted`. Blocks from anyone
    /// else are ignored: a person pasting a success block must not finish a stage.
    pub fn from_comments(comments: &[Comment], trusted: &HashSet<String>) -> Self {
        let mut blocks = Vec::new();
        let mut block_at = Vec::new();
        let mut questions = Vec::new();
        let mut answers = Vec::new();
        for (at, c) in comments.iter().enumerate() {
            if trusted.contains(&c.author) {
                for parsed in parse_blocks(&c.body) {
                    match parsed {
                        Ok(p) => {
                            blocks.push(p.block);
                            block_at.push(at);
                        }
                        Err(err) => tracing::warn!(%err, "ignoring malformed outcome block"),
                    }
                }
                if c.body.contains("sortie:question") {
                    questions.extend(parse_question_blocks(&c.body).into_iter().map(|block| {
                        Asked {
                            at,
                            posted_at: c.created_at,
                            block,
                        }
                    }));
                }
            }
            if looks_like_answer(&c.body) {
                answers.push((at, c.clone()));
            }
        }
        let humans: Vec<&Comment> = comments
            .iter()
            .filter(|c| !trusted.contains(&c.author))
            .collect();
        let human_comments = humans[humans.len().saturating_sub(HUMAN_COMMENTS)..]
            .iter()
            .map(|c| Comment {
                body: c.body.chars().take(HUMAN_COMMENT_CHARS).collect(),
                ..(*c).clone()
            })
            .collect();
        TicketHistory {
            blocks,
            block_at,
            questions,
            answers,
            human_comments,
        }
    }

    /// The latest question `role` asked, unless a block (of any role) came after it:
    /// the run it asked from, or a person's move that another stage answered, closed
    /// it. The first comment after it that answers it and whose author is one of
    /// `who` is its answer; would-be answers that do not count say why.
    pub fn open_question(&self, role: &str, who: &Answerers<'_>) -> Option<OpenQuestion<'_>> {
        let asked = self.questions.iter().rev().find(|q| q.block.role == role)?;
        if self.block_at.iter().any(|at| *at > asked.at) {
            return None;
        }
        let mut open = OpenQuestion {
            block: &asked.block,
            posted_at: asked.posted_at,
            answer: None,
            ignored: Vec::new(),
        };
        for (_, comment) in self.answers.iter().filter(|(at, _)| *at > asked.at) {
            let Some(parsed) = parse_answer(&comment.body, &asked.block) else {
                continue;
            };
            let author = &comment.author;
            let why = if author == who.identity {
                "sortie's own comment is not an answer".to_string()
            } else if let Some(why) = who.refuses(author) {
                why
            } else {
                match parsed {
                    Ok(answer) => {
                        open.answer = Some((answer.text, author.clone()));
                        break;
                    }
                    Err(why) => why.to_string(),
                }
            };
            open.ignored
                .push(format!("comment {} by {author}: {why}", comment.id));
        }
        Some(open)
    }

    /// The open question (see [`Self::open_question`]) of every role that asked one,
    /// the latest asked first.
    pub fn open_questions(&self, who: &Answerers<'_>) -> Vec<OpenQuestion<'_>> {
        let mut roles: Vec<&str> = Vec::new();
        for asked in self.questions.iter().rev() {
            if !roles.contains(&asked.block.role.as_str()) {
                roles.push(&asked.block.role);
            }
        }
        roles
            .into_iter()
            .filter_map(|role| self.open_question(role, who))
            .collect()
    }

    /// How many questions `role` asked since its last success block (all of them when
    /// it has none): what `questions.max_per_stage` bounds.
    pub fn questions_since_success(&self, role: &str) -> u32 {
        let since = self
            .blocks
            .iter()
            .zip(&self.block_at)
            .rev()
            .find(|(b, _)| matches!(b, OutcomeBlock::Success(s) if s.role == role))
            .map(|(_, at)| *at);
        self.questions
            .iter()
            .filter(|q| q.block.role == role && since.is_none_or(|s| q.at > s))
            .count() as u32
    }

    /// How many questions `role` asked in stage attempt `attempt`.
    pub fn questions_in_attempt(&self, role: &str, attempt: u32) -> u32 {
        self.questions
            .iter()
            .filter(|q| q.block.role == role && q.block.stage_attempt == attempt)
            .count() as u32
    }

    /// Whether `role` has a success block.
    pub fn has_success(&self, role: &str) -> bool {
        self.latest_success(role).is_some()
    }

    /// The latest success block of `role`.
    pub fn latest_success(&self, role: &str) -> Option<&SuccessBlock> {
        self.blocks.iter().rev().find_map(|b| match b {
            OutcomeBlock::Success(s) if s.role == role => Some(s),
            _ => None,
        })
    }

    /// The latest failure block of `role`.
    pub fn last_failure(&self, role: &str) -> Option<&FailureBlock> {
        self.blocks.iter().rev().find_map(|b| match b {
            OutcomeBlock::Failure(f) if f.role == role => Some(f),
            _ => None,
        })
    }

    /// The latest block of `role`.
    pub fn last_block(&self, role: &str) -> Option<&OutcomeBlock> {
        self.blocks.iter().rev().find(|b| b.role() == role)
    }

    /// The highest attempt any block of `role` records (0 if none).
    pub fn max_attempt(&self, role: &str) -> u32 {
        self.blocks
            .iter()
            .filter(|b| b.role() == role)
            .map(|b| b.stage_attempt())
            .max()
            .unwrap_or(0)
    }

    /// Failure blocks of `role` since its last success block (0 when its latest block
    /// is a success or it has none): the failures in a row the retry budget counts.
    pub fn failures_in_a_row(&self, role: &str) -> u32 {
        let mut n = 0;
        for block in self.blocks.iter().rev().filter(|b| b.role() == role) {
            match block {
                OutcomeBlock::Failure(_) => n += 1,
                OutcomeBlock::Success(_) => break,
            }
        }
        n
    }

    /// The failure blocks with which `role` sent the ticket back to `to` (an earlier
    /// stage's claim status), oldest first: the rework rounds so far.
    pub fn sent_back(&self, role: &str, to: &str) -> Vec<&FailureBlock> {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                OutcomeBlock::Failure(f)
                    if f.role == role && crate::tracker::same_name(&f.to_status, to) =>
                {
                    Some(f)
                }
                _ => None,
            })
            .collect()
    }

    /// Failures of `role` in a row, counting back no further than its last success or
    /// its last failure that sent work back to `back_to`: each rework round starts a
    /// fresh retry budget.
    pub fn failures_this_round(&self, role: &str, back_to: Option<&str>) -> u32 {
        let mut n = 0;
        for block in self.blocks.iter().rev().filter(|b| b.role() == role) {
            match block {
                OutcomeBlock::Failure(f)
                    if back_to.is_some_and(|to| crate::tracker::same_name(&f.to_status, to)) =>
                {
                    break
                }
                OutcomeBlock::Failure(_) => n += 1,
                OutcomeBlock::Success(_) => break,
            }
        }
        n
    }

    /// Whether `prior` has a success block newer than every failure with which `role`
    /// sent the ticket back to `back_to` (with no such failure: any success counts).
    pub fn has_success_since_sent_back(
        &self,
        prior: &str,
        role: &str,
        back_to: Option<&str>,
    ) -> bool {
        let last_back = back_to.and_then(|to| {
            self.blocks.iter().rposition(|b| {
                matches!(b, OutcomeBlock::Failure(f)
                    if f.role == role && crate::tracker::same_name(&f.to_status, to))
            })
        });
        let start = last_back.map_or(0, |i| i + 1);
        self.blocks[start..]
            .iter()
            .any(|b| matches!(b, OutcomeBlock::Success(s) if s.role == prior))
    }

    /// The work returned to a stage claiming from `claim_status` whose role is `role`:
    /// the latest failure of another role that sent the ticket to `claim_status`, when
    /// `role` has not succeeded since, with how many times that role sent it back.
    pub fn returned_work(&self, role: &str, claim_status: &str) -> Option<(&FailureBlock, u32)> {
        for block in self.blocks.iter().rev() {
            match block {
                OutcomeBlock::Success(s) if s.role == role => return None,
                OutcomeBlock::Failure(f)
                    if f.role != role && crate::tracker::same_name(&f.to_status, claim_status) =>
                {
                    let count = self.sent_back(&f.role, claim_status).len() as u32;
                    return Some((f, count));
                }
                _ => {}
            }
        }
        None
    }

    /// The reaction block (role `reactions`) that sent the ticket to `claim_status`,
    /// when `role` has not succeeded since: the reaction its next run answers.
    pub fn pending_reaction(&self, role: &str, claim_status: &str) -> Option<&FailureBlock> {
        for block in self.blocks.iter().rev() {
            match block {
                OutcomeBlock::Success(s) if s.role == role => return None,
                OutcomeBlock::Failure(f)
                    if f.role == super::decide::reaction::REACTIONS_ROLE
                        && crate::tracker::same_name(&f.to_status, claim_status) =>
                {
                    return Some(f)
                }
                _ => {}
            }
        }
        None
    }

    /// Whether a block (an outcome or a question) carries `idempotency_key`.
    pub fn contains_key(&self, idempotency_key: &str) -> bool {
        self.blocks
            .iter()
            .any(|b| b.idempotency_key() == idempotency_key)
            || self
                .questions
                .iter()
                .any(|q| q.block.idempotency_key == idempotency_key)
    }

    /// The most recent comments by people (authors not trusted as sortie), oldest
    /// first, at most 10, each cut at 4,000 characters.
    pub fn human_comments(&self) -> &[Comment] {
        &self.human_comments
    }

    /// Every block, oldest first.
    pub fn blocks(&self) -> &[OutcomeBlock] {
        &self.blocks
    }
}

/// Whether a comment tries to answer a question: its first line starts with `/answer`,
/// or it holds a `sortie:answer` block (read fully by [`parse_answer`]).
fn looks_like_answer(body: &str) -> bool {
    body.trim_start().starts_with("/answer") || body.contains("sortie:answer")
}

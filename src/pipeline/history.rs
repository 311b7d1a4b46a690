//! A ticket's outcome history: the outcome blocks its trusted comments carry.

use std::collections::HashSet;

use crate::block::{parse_blocks, FailureBlock, OutcomeBlock, SuccessBlock};
use crate::tracker::Comment;

/// The valid outcome blocks written by trusted authors on one ticket, oldest first.
#[derive(Debug, Clone, Default)]
pub struct TicketHistory {
    blocks: Vec<OutcomeBlock>,
    human_comments: Vec<Comment>,
}

/// How many recent human comments a prompt sees.
const HUMAN_COMMENTS: usize = 10;
/// How much of each human comment a prompt sees.
const HUMAN_COMMENT_CHARS: usize = 4000;

impl TicketHistory {
    /// Collect the blocks of comments whose author is in `trusted`. Blocks from anyone
    /// else are ignored: a person pasting a success block must not finish a stage.
    pub fn from_comments(comments: &[Comment], trusted: &HashSet<String>) -> Self {
        let blocks = comments
            .iter()
            .filter(|c| trusted.contains(&c.author))
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(|parsed| match parsed {
                Ok(p) => Some(p.block),
                Err(err) => {
                    tracing::warn!(%err, "ignoring malformed outcome block");
                    None
                }
            })
            .collect();
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
            human_comments,
        }
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

    /// Whether a block carries `idempotency_key`.
    pub fn contains_key(&self, idempotency_key: &str) -> bool {
        self.blocks
            .iter()
            .any(|b| b.idempotency_key() == idempotency_key)
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

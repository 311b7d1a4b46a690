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

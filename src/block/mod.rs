//! Outcome blocks: render and parse the fenced `sortie:success` / `sortie:failure` YAML blocks.
//!
//! A tracker comment carries prose and one or more fenced code blocks whose info
//! string is `yaml sortie:success` or `yaml sortie:failure`. Parsing walks the
//! Markdown with pulldown-cmark (only top-level fences count: a block quoted in a
//! reply is not an outcome), then reads each body with serde_yaml into typed
//! fields. Everything here is pure: no I/O, no clock.
//!
//! The format is specified in `docs/blocks.md`.

mod evidence;
mod fields;
pub mod jira;
mod json;
mod markdown;
mod model;
pub mod question;
mod render;

use sha2::{Digest, Sha256};

pub use evidence::{ChangeEvidence, CheckEvidence, Evidence, TestCounts};
pub use model::{
    BlockKind, Category, FailureBlock, NextAction, OutcomeBlock, ParsedBlock, SuccessBlock,
};
pub use render::{render_block, render_comment};

/// Why a block in a comment is not a valid outcome block.
///
/// Displayed as `line N: <kind> block: field `x`: message`; the `line N: ` part
/// is left out when `line` is 0 (a block checked by [`OutcomeBlock::validate`]
/// before it is in any comment).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.located())]
pub struct BlockError {
    /// 1-based line of the block's opening fence in the comment (0: not in a comment).
    pub line: usize,
    /// The block's kind, from its fence's info string.
    pub kind: Option<BlockKind>,
    /// The offending field (`artifacts.<name>` for one artifact), when one field is at fault.
    pub field: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl BlockError {
    /// An error about a whole block.
    pub(crate) fn block(line: usize, kind: BlockKind, message: String) -> Self {
        Self {
            line,
            kind: Some(kind),
            field: None,
            message,
        }
    }

    /// An error about one field of a block.
    pub(crate) fn field(line: usize, kind: BlockKind, field: &str, message: String) -> Self {
        Self {
            line,
            kind: Some(kind),
            field: Some(field.to_owned()),
            message,
        }
    }

    /// The message without its `line N: ` prefix (for `FILE:LINE: ...` reports).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        match self.kind {
            Some(kind) => out.push_str(&format!("{kind} block: ")),
            None => out.push_str("outcome block: "),
        }
        if let Some(field) = &self.field {
            out.push_str(&format!("field `{field}`: "));
        }
        out.push_str(&self.message);
        out
    }

    fn located(&self) -> String {
        if self.line == 0 {
            self.describe()
        } else {
            format!("line {}: {}", self.line, self.describe())
        }
    }
}

/// The idempotency key of one attempt of one stage on one ticket.
///
/// Lowercase hex of sha256(`tracker` 0x1F `ticket_id` 0x1F `role` 0x1F `stage`
/// 0x1F `stage_attempt` in decimal), where `stage` is the status the ticket was
/// claimed from. 0x1F (ASCII unit separator) cannot be typed into a status or
/// role name, so distinct inputs never join into the same string.
pub fn idempotency_key(
    tracker: &str,
    ticket_id: &str,
    role: &str,
    stage: &str,
    stage_attempt: u32,
) -> String {
    let mut hasher = Sha256::new();
    for part in [tracker, ticket_id, role, stage] {
        hasher.update(part.as_bytes());
        hasher.update([0x1f]);
    }
    hasher.update(stage_attempt.to_string().as_bytes());
    hex::encode(hasher.finalize())
}

/// Every outcome block in `text`, valid or not, in document order.
///
/// Only top-level fenced code blocks count (not ones in block quotes or list
/// items). A fence left open to the end of the comment is an error, since it
/// usually means the comment was cut short.
///
/// `text` may also be a Jira comment body: an Atlassian Document Format document
/// (JSON whose `type` is `doc`) or wiki markup holding a `{code}` / `{noformat}`
/// macro whose text starts with a `# sortie:<kind>` line. It is read as the
/// Markdown it stands for ([`jira`]); lines are those of that Markdown (for wiki
/// markup, the wiki text's own lines; CRLF line endings read as LF).
///
/// A text can read both ways: Markdown whose code block shows a wiki macro, or wiki
/// text whose prose shows a fence. The wiki reading wins when it finds a valid
/// block; when it finds none but the Markdown reading does, the text is Markdown.
pub fn parse_blocks(text: &str) -> Vec<Result<ParsedBlock, BlockError>> {
    if let Some(markdown) = jira::as_adf_markdown(text) {
        return parse_markdown_blocks(&markdown);
    }
    if jira::wiki::has_outcome_macro(text) {
        let wiki = parse_markdown_blocks(&jira::wiki::to_markdown(text));
        if !wiki.iter().any(Result::is_ok) {
            let markdown = parse_markdown_blocks(text);
            if markdown.iter().any(Result::is_ok) {
                return markdown;
            }
        }
        return wiki;
    }
    parse_markdown_blocks(text)
}

fn parse_markdown_blocks(text: &str) -> Vec<Result<ParsedBlock, BlockError>> {
    markdown::outcome_fences(text)
        .into_iter()
        .map(|fence| {
            if !fence.closed {
                return Err(BlockError::block(
                    fence.line,
                    fence.kind,
                    "the closing fence is missing (was the comment cut short?)".into(),
                ));
            }
            fields::parse_body(fence.kind, fence.line, &fence.body).map(|block| ParsedBlock {
                block,
                line: fence.line,
            })
        })
        .collect()
}

/// The valid `sortie:success` blocks in `text`, in document order.
pub fn parse_success_blocks(text: &str) -> Vec<SuccessBlock> {
    parse_blocks(text)
        .into_iter()
        .filter_map(|parsed| match parsed {
            Ok(ParsedBlock {
                block: OutcomeBlock::Success(block),
                ..
            }) => Some(block),
            _ => None,
        })
        .collect()
}

/// The last valid `sortie:failure` block in `text`, if any.
///
/// The last one wins because a comment is written top to bottom: a later block
/// is the more recent word on the run.
pub fn parse_failure_block(text: &str) -> Option<FailureBlock> {
    parse_blocks(text)
        .into_iter()
        .rev()
        .find_map(|parsed| match parsed {
            Ok(ParsedBlock {
                block: OutcomeBlock::Failure(block),
                ..
            }) => Some(block),
            _ => None,
        })
}

/// Whether a valid outcome block in `text` carries `key` (so it was already posted).
///
/// Malformed blocks do not count: a comment whose block was mangled does not
/// record the outcome, so posting it again is the safe choice.
pub fn contains_idempotency_key(text: &str, key: &str) -> bool {
    parse_blocks(text)
        .iter()
        .any(|parsed| matches!(parsed, Ok(p) if p.block.idempotency_key() == key))
}

#[cfg(test)]
mod tests;

//! Finding outcome-block fences in a Markdown comment by walking pulldown-cmark events.
//!
//! Only fenced code blocks at the top level of the document count: a block
//! inside a block quote (a person quoting an earlier outcome in a reply) or a
//! list item is someone talking *about* an outcome, not an outcome. Indented
//! code blocks have no info string, so they never count. Both fence characters
//! (```` ``` ```` and `~~~`) count, because CommonMark treats them alike.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag};

use super::BlockKind;

/// A top-level fenced code block whose info string names a sortie block.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fence<K = BlockKind> {
    /// Which block the info string names.
    pub kind: K,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The code block's content, as CommonMark defines it.
    pub body: String,
    /// Whether a closing fence ends it (an unclosed fence runs to the end of the
    /// comment, which usually means the comment was truncated).
    pub closed: bool,
}

/// Every top-level outcome-block fence in `text`, in document order.
pub(crate) fn outcome_fences(text: &str) -> Vec<Fence> {
    fences_named(text, kind_of_info)
}

/// Every top-level fence in `text` whose info string `kind_of` names, in document order.
pub(crate) fn fences_named<K>(text: &str, kind_of: impl Fn(&str) -> Option<K>) -> Vec<Fence<K>> {
    let mut fences = Vec::new();
    // Open container and inline elements; a code block starting at depth 0 is top level.
    let mut depth = 0usize;
    let mut current: Option<(Fence<K>, Range<usize>)> = None;
    for (event, range) in Parser::new_ext(text, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if let (0, Tag::CodeBlock(CodeBlockKind::Fenced(info))) = (depth, &tag) {
                    if let Some(kind) = kind_of(info) {
                        let fence = Fence {
                            kind,
                            line: line_of(text, range.start),
                            body: String::new(),
                            closed: false,
                        };
                        current = Some((fence, range));
                    }
                }
                depth += 1;
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if let Some((mut fence, range)) = current.take() {
                        fence.closed = has_closing_fence(&text[range]);
                        fences.push(fence);
                    }
                }
            }
            Event::Text(chunk) => {
                if let Some((fence, _)) = current.as_mut() {
                    fence.body.push_str(&chunk);
                }
            }
            _ => {}
        }
    }
    fences
}

/// `yaml sortie:success` / `yaml sortie:failure`, exactly two words.
///
/// Any other `sortie:` word is ignored rather than rejected, so a newer sortie
/// can add block kinds without older readers calling its comments malformed.
fn kind_of_info(info: &str) -> Option<BlockKind> {
    match sortie_marker(info)? {
        "sortie:success" => Some(BlockKind::Success),
        "sortie:failure" => Some(BlockKind::Failure),
        _ => None,
    }
}

/// The `sortie:<word>` of an info string `yaml sortie:<word>` (exactly two words).
pub(crate) fn sortie_marker(info: &str) -> Option<&str> {
    let mut words = info.split_whitespace();
    let (Some("yaml"), Some(marker), None) = (words.next(), words.next(), words.next()) else {
        return None;
    };
    Some(marker)
}

/// Whether the source of a fenced code block ends with a closing fence: a line of
/// the opening fence's character, at least as long as the opening fence.
fn has_closing_fence(source: &str) -> bool {
    let fence_char = match source.trim_start_matches(' ').chars().next() {
        Some(c @ ('`' | '~')) => c,
        _ => return false,
    };
    let opening = source
        .trim_start_matches(' ')
        .chars()
        .take_while(|&c| c == fence_char)
        .count();
    let trimmed = source.trim_end_matches(['\n', '\r']);
    let Some(break_at) = trimmed.rfind(['\n', '\r']) else {
        return false; // a single line: the opening fence alone
    };
    let last = trimmed[break_at + 1..].trim_matches([' ', '\t']);
    last.chars().count() >= opening && last.chars().all(|c| c == fence_char)
}

/// The 1-based line holding byte `offset`; `\n`, `\r\n` and a lone `\r` each end a line.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let breaks = before
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && before.get(i + 1) != Some(&b'\n')))
        .count();
    breaks + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_and_lines(text: &str) -> Vec<(BlockKind, usize, bool)> {
        outcome_fences(text)
            .into_iter()
            .map(|f| (f.kind, f.line, f.closed))
            .collect()
    }

    #[test]
    fn top_level_fences_count_with_their_line() {
        let text = "prose\n\n```yaml sortie:success\na: 1\n```\n\nmore\n\n~~~yaml sortie:failure\nb: 2\n~~~\n";
        assert_eq!(
            kinds_and_lines(text),
            vec![(BlockKind::Success, 3, true), (BlockKind::Failure, 9, true)]
        );
        assert_eq!(outcome_fences(text)[0].body, "a: 1\n");
    }

    #[test]
    fn quoted_and_list_nested_fences_do_not_count() {
        let quoted = "> ```yaml sortie:success\n> role: qa\n> ```\n";
        let listed = "- note\n\n  ```yaml sortie:success\n  role: qa\n  ```\n";
        let nested = "> - x\n>   ```yaml sortie:failure\n>   a: 1\n>   ```\n";
        assert!(outcome_fences(quoted).is_empty());
        assert!(outcome_fences(listed).is_empty());
        assert!(outcome_fences(nested).is_empty());
    }

    #[test]
    fn a_fence_folded_in_details_still_counts() {
        let text = "<details>\n\n```yaml sortie:success\na: 1\n```\n\n</details>\n";
        assert_eq!(kinds_and_lines(text), vec![(BlockKind::Success, 3, true)]);
        // Without the blank line the fence is part of the HTML block.
        assert!(outcome_fences("<details>\n```yaml sortie:success\na: 1\n```\n").is_empty());
    }

    #[test]
    fn indented_code_and_other_info_strings_do_not_count() {
        let text = "para\n\n    ```yaml sortie:success\n    a: 1\n    ```\n\n\
                    ```yaml\na: 1\n```\n\n```yaml sortie:skipped\na: 1\n```\n\n\
                    ```yaml sortie:success extra\na: 1\n```\n\n```sortie:success\na: 1\n```\n";
        assert!(outcome_fences(text).is_empty());
    }

    #[test]
    fn unclosed_fence_is_reported_as_such() {
        assert_eq!(
            kinds_and_lines("x\n\n```yaml sortie:success\nrole: a\n"),
            vec![(BlockKind::Success, 3, false)]
        );
        assert_eq!(
            kinds_and_lines("```yaml sortie:success"),
            vec![(BlockKind::Success, 1, false)]
        );
        // A shorter run of backticks does not close a longer fence.
        assert_eq!(
            kinds_and_lines("````yaml sortie:success\na: 1\n```\n"),
            vec![(BlockKind::Success, 1, false)]
        );
        assert_eq!(
            kinds_and_lines("  ```yaml sortie:success\na: 1\n  ````  \n"),
            vec![(BlockKind::Success, 1, true)]
        );
    }

    #[test]
    fn crlf_and_lone_cr_count_lines() {
        let text = "a\r\n\r\n```yaml sortie:failure\r\nb: 1\r\n```\r\n";
        assert_eq!(kinds_and_lines(text), vec![(BlockKind::Failure, 3, true)]);
        assert_eq!(line_of("a\rb\r\nc\nd", 7), 4);
    }
}

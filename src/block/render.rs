//! Writing outcome blocks (and the comments carrying them) so that parsing gives them back.

use serde_yaml::{Mapping, Value};

use super::jira::wiki::holds_macro_tag;
use super::{fields, parse_blocks, BlockKind, OutcomeBlock};

/// What the YAML text of a block must keep out of itself, beyond reading back as the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A Markdown fence: the fence is chosen to fit the text, so nothing to avoid.
    Markdown,
    /// A Jira wiki `{code}` / `{noformat}` macro, which has no escape: no `{code` or
    /// `{noformat}` (any case) may appear, or Jira (and sortie) would end the box there.
    WikiMacro,
}

/// The fenced block alone: opening fence, YAML body, closing fence, ending with `"\n"`.
///
/// The fence is one backtick longer than the longest run of backticks in the
/// body (at least three), so no line of the body can close it.
pub fn render_block(block: &OutcomeBlock) -> String {
    let body = render_body(block, Target::Markdown);
    let fence = fence_for(&body);
    format!("{fence}yaml sortie:{}\n{body}{fence}\n", block.kind())
}

/// A comment: `prose`, a blank line, then the block.
///
/// The block must be the only outcome block a reader finds in the comment. When
/// the prose would break that (it holds an outcome block of its own, or leaves a
/// code fence open that would swallow the block), the prose is shown verbatim in
/// a plain ```` ```text ```` fence instead.
pub fn render_comment(prose: &str, block: &OutcomeBlock) -> String {
    let rendered = render_block(block);
    let prose = prose.trim_end();
    if prose.trim().is_empty() {
        return rendered;
    }
    let comment = format!("{prose}\n\n{rendered}");
    let found = parse_blocks(&comment);
    if matches!(found.as_slice(), [Ok(parsed)] if parsed.block == *block) {
        return comment;
    }
    let fence = fence_for(prose);
    format!("{fence}text\n{prose}\n{fence}\n\n{rendered}")
}

/// Backticks enough to fence `content`.
fn fence_for(content: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in content.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

/// An outcome block's YAML `body` written again for a Jira wiki code macro: the same
/// block, with every entry whose text would hold `{code` or `{noformat` written
/// double-quoted with `{` as the YAML escape `\x7b`. `None` when `body` is not a
/// valid block of `kind` (then there is no block to keep).
pub(crate) fn wiki_macro_body(kind: BlockKind, body: &str) -> Option<String> {
    let block = fields::parse_body(kind, 0, body).ok()?;
    let text = render_body(&block, Target::WikiMacro);
    debug_assert!(!holds_macro_tag(&text), "{text}");
    Some(text)
}

/// The YAML body: the kind's fields in their documented order, then `extra` sorted by name.
fn render_body(block: &OutcomeBlock, target: Target) -> String {
    let mut out = String::new();
    let text = |s: &str| Value::String(s.to_owned());
    let entry = |key: &str, value: &Value| entry_for(key, value, target);
    out.push_str(&entry("role", &text(block.role())));
    out.push_str(&entry("stage_attempt", &Value::from(block.stage_attempt())));
    out.push_str(&entry("idempotency_key", &text(block.idempotency_key())));
    out.push_str(&entry("from_status", &text(block.from_status())));
    out.push_str(&entry("to_status", &text(block.to_status())));
    let (run_id, duration_seconds) = match block {
        OutcomeBlock::Success(b) => {
            out.push_str(&entry("summary", &text(&b.summary)));
            (&b.run_id, b.duration_seconds)
        }
        OutcomeBlock::Failure(b) => {
            out.push_str(&entry("reason_code", &text(&b.reason_code)));
            out.push_str(&entry("category", &text(b.category.as_str())));
            out.push_str(&entry("transient", &Value::Bool(b.transient)));
            out.push_str(&entry("next_action", &text(b.next_action.as_str())));
            out.push_str(&entry("detail", &text(&b.detail)));
            (&b.run_id, b.duration_seconds)
        }
    };
    if let Some(run_id) = run_id {
        out.push_str(&entry("run_id", &text(run_id)));
    }
    if let Some(seconds) = duration_seconds {
        out.push_str(&entry("duration_seconds", &Value::from(seconds)));
    }
    if let OutcomeBlock::Success(b) = block {
        if !b.artifacts.is_empty() {
            out.push_str("artifacts:\n");
            for (name, value) in &b.artifacts {
                indent(&mut out, &entry(name, &text(value)));
            }
        }
        if let Some(evidence) = b.evidence.as_ref().filter(|e| !e.is_empty()) {
            if let Ok(value) = serde_yaml::to_value(evidence) {
                out.push_str(&entry("evidence", &value));
            }
        }
    }
    for (key, value) in block.extra() {
        out.push_str(&entry(key, value));
    }
    out
}

/// Append `yaml` indented by two spaces, as the value of a mapping entry.
///
/// Every line that is not empty gets the indent, which keeps block scalars
/// intact. Lines end where libyaml ends them: at `\n`, `\r\n`, `\r`, U+0085,
/// U+2028 and U+2029 (YAML 1.1 line breaks, which libyaml still honours).
fn indent(out: &mut String, yaml: &str) {
    let mut at_line_start = true;
    let mut chars = yaml.chars().peekable();
    while let Some(c) = chars.next() {
        let is_break = matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
        if at_line_start && !is_break {
            out.push_str("  ");
        }
        out.push(c);
        at_line_start = is_break && !(c == '\r' && chars.peek() == Some(&'\n'));
    }
}

/// One `key: value` entry as a YAML mapping of its own, ending with `"\n"`.
///
/// serde_yaml (libyaml's emitter) quotes every string a YAML 1.2 reader would
/// take for something else. Strings that only a YAML 1.1 reader (PyYAML, older
/// Ruby) would misread, such as `yes`, `off` or `1_000`, are single-quoted here
/// too, so a block read by any YAML library keeps its strings strings.
///
/// libyaml gets a few exotic strings wrong (U+2028 ending a block scalar leaves
/// the output without a final newline), so every entry is read back, and one
/// that does not come back identical is written in explicit double-quoted flow
/// style instead.
///
/// For a wiki macro, an entry whose text holds `{code` or `{noformat` is written in
/// that style too, with every `{` escaped: the only `{` left are those opening a flow
/// mapping (`{}`, `{? ...`), which never start either word.
fn entry_for(key: &str, value: &Value, target: Target) -> String {
    let text = entry(key, value);
    if target == Target::WikiMacro && holds_macro_tag(&text) {
        explicit_entry(key, value, Braces::Escaped)
    } else {
        text
    }
}

/// One `key: value` entry for a Markdown fence (see [`entry_for`]).
fn entry(key: &str, value: &Value) -> String {
    let mut mapping = Mapping::new();
    mapping.insert(Value::String(key.to_owned()), value.clone());
    let Ok(mut text) = serde_yaml::to_string(&mapping) else {
        return explicit_entry(key, value, Braces::AsThey);
    };
    if let Value::String(s) = value {
        let plain_tail = format!(": {s}\n");
        if yaml11_ambiguous(s) && text.ends_with(&plain_tail) && text.lines().count() == 1 {
            text.truncate(text.len() - s.len() - 1);
            text.push_str(&format!("'{s}'\n"));
        }
    }
    let reads_back = text.ends_with('\n')
        && serde_yaml::from_str::<Mapping>(&text).is_ok_and(|back| back == mapping);
    if reads_back {
        text
    } else {
        explicit_entry(key, value, Braces::AsThey)
    }
}

/// How `{` is written in a double-quoted string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Braces {
    /// As itself.
    AsThey,
    /// As the YAML escape `\x7b` (the same string to a YAML reader).
    Escaped,
}

/// `? "key"\n: value\n` with the value in flow style and every string double-quoted.
fn explicit_entry(key: &str, value: &Value, braces: Braces) -> String {
    let mut out = String::from("? ");
    double_quoted(&mut out, key, braces);
    out.push_str("\n: ");
    flow(&mut out, value, braces);
    out.push('\n');
    out
}

/// A value on one line: `[..]`, `{? k: v}`, double-quoted strings.
fn flow(out: &mut String, value: &Value, braces: Braces) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::String(s) => double_quoted(out, s, braces),
        Value::Sequence(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(out, item, braces);
            }
            out.push(']');
        }
        Value::Mapping(mapping) => {
            out.push('{');
            for (i, (k, v)) in mapping.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str("? ");
                flow(out, k, braces);
                out.push_str(" : ");
                flow(out, v, braces);
            }
            out.push('}');
        }
        Value::Tagged(tagged) => {
            out.push_str(&tagged.tag.to_string());
            out.push(' ');
            flow(out, &tagged.value, braces);
        }
    }
}

/// A number as YAML spells it (`.nan`, `-.inf`, `1.5`, `-3`).
fn number_text(n: &serde_yaml::Number) -> String {
    serde_yaml::to_string(n).map_or_else(|_| n.to_string(), |s| s.trim_end().to_owned())
}

/// A YAML double-quoted scalar: printable characters as they are, everything a
/// YAML or Markdown reader could take for a line break or drop, escaped.
fn double_quoted(out: &mut String, s: &str, braces: Braces) {
    out.push('"');
    for c in s.chars() {
        match c {
            '{' if braces == Braces::Escaped => out.push_str("\\x7b"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{85}' => out.push_str("\\N"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            ' '..='~' => out.push(c),
            c if (c as u32) < 0xa0 => out.push_str(&format!("\\x{:02x}", c as u32)),
            '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether a YAML 1.1 reader could take plain `s` for a boolean, null, number or timestamp.
///
/// Such strings consist only of `[0-9A-Za-z_:.+-]`, so they never contain a quote.
fn yaml11_ambiguous(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let number_like = s.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '+' | '-'));
    // Plain lowercase hex (an idempotency key) is a number only when it is all
    // digits or an exponent form, which serde_yaml quotes already; or `0b...`.
    let lowercase_hex =
        s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) && !s.starts_with("0b");
    number_like && !lowercase_hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml11_words_and_numbers_are_quoted() {
        assert_eq!(entry("summary", &Value::from("yes")), "summary: 'yes'\n");
        assert_eq!(
            entry("summary", &Value::from("1_000")),
            "summary: '1_000'\n"
        );
        assert_eq!(entry("summary", &Value::from("1:20")), "summary: '1:20'\n");
        assert_eq!(
            entry("summary", &Value::from("2001-12-14")),
            "summary: '2001-12-14'\n"
        );
        assert_eq!(entry("summary", &Value::from("null")), "summary: 'null'\n");
        assert_eq!(
            entry("summary", &Value::from("plain words")),
            "summary: plain words\n"
        );
        let key = "3f1c".repeat(16);
        assert_eq!(
            entry("idempotency_key", &Value::from(key.as_str())),
            format!("idempotency_key: {key}\n")
        );
    }

    #[test]
    fn strings_libyaml_gets_wrong_fall_back_to_double_quotes() {
        let exotic = Value::from("\n\u{2028}");
        assert_eq!(entry("detail", &exotic), "? \"detail\"\n: \"\\n\\L\"\n");
        let parsed: Mapping = serde_yaml::from_str(&entry("detail", &exotic)).expect("yaml");
        assert_eq!(parsed.get("detail"), Some(&exotic));
        let nested: Value =
            serde_yaml::from_str("{a: [1, .nan, !t x], 2: \"\\x7f\\uFEFF\"}").expect("yaml");
        let text = explicit_entry("k", &nested, Braces::AsThey);
        let back: Mapping = serde_yaml::from_str(&text).expect(&text);
        assert_eq!(
            format!("{:?}", back.get("k")),
            format!("{:?}", Some(&nested))
        );
    }

    #[test]
    fn fence_outgrows_backtick_runs() {
        assert_eq!(fence_for("no ticks"), "```");
        assert_eq!(fence_for("a ```` b"), "`````");
    }
}

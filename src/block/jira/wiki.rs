//! Jira wiki markup (Data Center REST v2 comments): what sortie writes, and reading it back.
//!
//! Written: paragraphs, `h1.`-`h6.` headings, `{code:lang}` macros (an outcome block
//! is `{code:yaml}` whose first line is `# sortie:<kind>`), `{quote}`, `*` / `#` lists,
//! `----`, inline `*strong*`, `_em_`, `{{code}}` and `[text|url]`. Characters the
//! renderer would take as markup are escaped with `\`. Read back line by line, so a
//! block's line in the Markdown equivalent is its `{code}` line in the wiki text.
//!
//! Nothing can be escaped inside `{code}` or `{noformat}`: the first `{code}` (or
//! `{noformat}`) ends the box, whatever it is part of. So an outcome block's YAML
//! never holds `{code` or `{noformat` (any case): an entry that would is written
//! double-quoted with `{` as `\x7b`, the same string to a YAML reader. Other code
//! goes in the macro its text does not hold, else as escaped lines of text.
//!
//! Jira Data Center may hand a comment back with CRLF line endings (it re-saves an
//! edited one so); it is read as the same text with LF endings.

use std::borrow::Cow;

use super::{
    code_text, escape_markdown, fenced, info_of, outcome_kind, parse_markdown, Inline, Node,
    MARKER_PREFIX,
};
use crate::block::render::wiki_macro_body;
use crate::block::BlockKind;

/// Characters escaped in wiki text (and unescaped when reading).
const SPECIAL: &[char] = &['\\', '{', '}', '[', ']', '*', '_', '|', '!'];

/// The wiki markup for a Markdown comment.
pub fn from_markdown(markdown: &str) -> String {
    let mut out = String::new();
    for node in parse_markdown(markdown) {
        if !out.is_empty() {
            out.push('\n');
        }
        write_node(&node, &mut out);
    }
    out
}

fn write_node(node: &Node, out: &mut String) {
    match node {
        Node::Paragraph(inlines) => {
            out.push_str(&inline(inlines));
            out.push('\n');
        }
        Node::Heading(level, inlines) => {
            out.push_str(&format!(
                "h{level}. {}\n",
                inline(inlines).replace('\n', " ")
            ));
        }
        Node::Code { info, text } => write_code(info, text, out),
        Node::Quote(nodes) => {
            out.push_str("{quote}\n");
            for (i, n) in nodes.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                write_node(n, out);
            }
            out.push_str("{quote}\n");
        }
        Node::List { .. } => write_list(node, "", out),
        Node::Rule => out.push_str("----\n"),
    }
}

/// A code block as a macro no line of its text can end early.
fn write_code(info: &str, text: &str, out: &mut String) {
    let kind = match outcome_kind(info) {
        Some("success") => Some(BlockKind::Success),
        Some("failure") => Some(BlockKind::Failure),
        _ => None,
    };
    let text: Cow<'_, str> = match kind {
        // The node's text lost its last line's `\n`, which a block scalar there keeps.
        Some(kind) if holds_macro_tag(text) => match wiki_macro_body(kind, &format!("{text}\n")) {
            Some(mut body) => {
                body.pop(); // back to the node's form: one `\n` fewer, no more
                Cow::Owned(body)
            }
            None => Cow::Borrowed(text),
        },
        _ => Cow::Borrowed(text),
    };
    let text = code_text(info, &text);
    let lower = text.to_lowercase();
    let (open, close) = match info.split_whitespace().next() {
        _ if lower.contains("{code") && lower.contains("{noformat") => {
            // No macro can hold it: its lines as text, escaped, so none opens a macro.
            for line in text.split('\n') {
                out.push_str(&escape(line));
                out.push('\n');
            }
            return;
        }
        // The kind of an outcome block is in its marker line either way.
        _ if lower.contains("{code") => ("{noformat}".to_string(), "{noformat}"),
        Some(lang) if lang.chars().all(|c| c.is_ascii_alphanumeric()) => {
            (format!("{{code:{lang}}}"), "{code}")
        }
        _ => ("{code}".to_string(), "{code}"),
    };
    out.push_str(&format!("{open}\n{text}\n{close}\n"));
}

/// Whether `text` holds what would end a `{code}` or `{noformat}` macro, in any case.
pub(crate) fn holds_macro_tag(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.contains("{code") || lower.contains("{noformat")
}

/// `text` with CRLF line endings read as LF.
fn lf(text: &str) -> Cow<'_, str> {
    if text.contains("\r\n") {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    }
}

fn write_list(node: &Node, prefix: &str, out: &mut String) {
    let Node::List { ordered, items } = node else {
        return;
    };
    let prefix = format!("{prefix}{}", if *ordered { '#' } else { '*' });
    for item in items {
        let mut text = Vec::new();
        let mut after = Vec::new();
        for n in item {
            match n {
                Node::Paragraph(i) | Node::Heading(_, i) if after.is_empty() => {
                    text.push(inline(i).replace('\n', " "))
                }
                other => after.push(other),
            }
        }
        out.push_str(&format!("{prefix} {}\n", text.join(" ")));
        for n in after {
            match n {
                Node::List { .. } => write_list(n, &prefix, out),
                other => write_node(other, out),
            }
        }
    }
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if SPECIAL.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn inline(inlines: &[Inline]) -> String {
    let mut out = String::new();
    for i in inlines {
        match i {
            Inline::Break => out.push_str("\\\\\n"),
            Inline::Text(text, marks) => {
                let mut piece = if marks.code {
                    format!("{{{{{}}}}}", escape(text))
                } else {
                    escape(text)
                };
                if marks.em && !marks.code {
                    piece = format!("_{piece}_");
                }
                if marks.strong && !marks.code {
                    piece = format!("*{piece}*");
                }
                if let Some(href) = &marks.link {
                    piece = format!("[{piece}|{}]", href.replace([']', '|'], ""));
                }
                out.push_str(&piece);
            }
        }
    }
    out
}

/// Whether `text` holds an outcome block in wiki markup: a `{code}` or `{noformat}`
/// macro at the start of a line whose text starts with the `# sortie:` marker line.
pub fn has_outcome_macro(text: &str) -> bool {
    let text = lf(text);
    let lines: Vec<&str> = text.split('\n').collect();
    lines.iter().enumerate().any(|(i, line)| {
        macro_open(line).is_some_and(|(_, _, rest)| {
            let next = if rest.trim().is_empty() {
                lines.get(i + 1).copied().unwrap_or("")
            } else {
                rest
            };
            next.trim_start().starts_with(MARKER_PREFIX)
        })
    })
}

/// The macro a line opens (`code` with its language, or `noformat`) and the text
/// after the opening tag.
fn macro_open(line: &str) -> Option<(&'static str, Option<String>, &str)> {
    let line = line.trim_start();
    let (name, rest) = if let Some(rest) = line.strip_prefix("{code") {
        ("code", rest)
    } else if let Some(rest) = line.strip_prefix("{noformat") {
        ("noformat", rest)
    } else {
        return None;
    };
    let end = rest.find('}')?;
    let params = &rest[..end];
    if !(params.is_empty() || params.starts_with(':')) {
        return None;
    }
    let language = params
        .trim_start_matches(':')
        .split('|')
        .find_map(|p| match p.split_once('=') {
            Some((k, v)) if k.trim() == "language" => Some(v.trim().to_string()),
            None if !p.trim().is_empty() => Some(p.trim().to_string()),
            _ => None,
        })
        .filter(|_| name == "code");
    Some((name, language, &rest[end + 1..]))
}

/// The Markdown equivalent of wiki markup: `{code}` / `{noformat}` macros become
/// fences (an outcome block's marker line makes its fence `yaml sortie:<kind>`),
/// `{quote}` and `bq.` become `>` quotes, so a block quoted by a person is not top
/// level; other lines keep their text. CRLF line endings are read as LF.
pub fn to_markdown(text: &str) -> String {
    let text = lf(text);
    let mut out = String::new();
    let mut quote = false;
    let mut lines = text.split('\n').peekable();
    while let Some(line) = lines.next() {
        let indent = if quote { "> " } else { "" };
        if line.trim() == "{quote}" {
            // A blank line on either side keeps the quote apart from its neighbours.
            quote = !quote;
            out.push('\n');
            continue;
        }
        if let Some((name, language, rest)) = macro_open(line) {
            let close = format!("{{{name}}}");
            let mut code = Vec::new();
            let mut closed = false;
            let mut first = Some(rest);
            while let Some(l) = first.take().or_else(|| lines.next()) {
                if let Some(at) = l.find(&close) {
                    if !l[..at].is_empty() {
                        code.push(&l[..at]);
                    }
                    closed = true;
                    break;
                }
                code.push(l);
            }
            // The text after the opening tag on its own line is not a line of code.
            if code.first() == Some(&"") {
                code.remove(0);
            }
            let body = code.join("\n");
            let info = info_of(language.as_deref(), &body);
            let block = fenced(&info, &body, indent);
            if closed {
                out.push_str(&block);
            } else {
                // Left open: the last line (the closing fence) goes, so the Markdown
                // reader reports the block as cut short.
                let cut = block.trim_end_matches('\n');
                let cut = &cut[..cut.rfind('\n').map_or(0, |i| i + 1)];
                out.push_str(cut);
            }
            continue;
        }
        let (prefix, rest) = if let Some(rest) = line.strip_prefix("bq. ") {
            ("> ", rest)
        } else if let Some((level, rest)) = heading(line) {
            out.push_str(&format!("{indent}{} {}\n", "#".repeat(level), plain(rest)));
            continue;
        } else {
            ("", line)
        };
        out.push_str(&format!("{indent}{prefix}{}\n", plain(rest)));
    }
    out
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let rest = line.strip_prefix('h')?;
    let level = rest.chars().next()?.to_digit(10)? as usize;
    let rest = rest[1..].strip_prefix(". ")?;
    (1..=6).contains(&level).then_some((level, rest))
}

/// Wiki text as Markdown text: `\x` escapes undone, then Markdown-escaped.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
                continue;
            }
        }
        out.push(c);
    }
    escape_markdown(&out)
}

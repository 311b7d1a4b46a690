//! Jira's two comment formats, for outcome blocks: Atlassian Document Format (ADF,
//! Jira Cloud REST v3) and wiki markup (Jira Data Center REST v2).
//!
//! sortie writes its comments as Markdown (prose, then the fenced block). Going to
//! Jira, the Markdown is read with pulldown-cmark into a small tree ([`Node`]) and
//! written out as ADF or wiki markup; coming back, ADF or wiki markup is turned into
//! Markdown again, so the one block parser reads every tracker. An outcome block
//! becomes a code block whose language is `yaml` and whose first line is the YAML
//! comment `# sortie:success` (or `failure`): Jira may drop or normalise an unusual
//! code language, but it keeps the code's text, so the kind survives in the text.

pub mod adf;
pub mod wiki;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The first line of an outcome block's code text in Jira: `# sortie:<kind>`.
pub(crate) const MARKER_PREFIX: &str = "# sortie:";

/// A block-level element of a comment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A paragraph of inline content.
    Paragraph(Vec<Inline>),
    /// A heading, level 1-6.
    Heading(u8, Vec<Inline>),
    /// A code block: its language (info string's first word) and its text.
    Code {
        /// The info string as written (`yaml sortie:success`, `rust`, empty).
        info: String,
        /// The code, ending without a final newline.
        text: String,
    },
    /// A block quote.
    Quote(Vec<Node>),
    /// A list; each item is a run of nodes.
    List {
        /// Numbered (`1.`) rather than bulleted.
        ordered: bool,
        /// The items.
        items: Vec<Vec<Node>>,
    },
    /// A horizontal rule.
    Rule,
}

/// Inline content of a paragraph or heading.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Inline {
    /// Text with its marks.
    Text(String, Marks),
    /// A hard line break.
    Break,
}

/// Formatting of a run of text.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Marks {
    pub strong: bool,
    pub em: bool,
    pub code: bool,
    pub link: Option<String>,
}

/// The outcome-block kind word (`success`) an info string names, when it is exactly
/// `yaml sortie:<word>`.
pub(crate) fn outcome_kind(info: &str) -> Option<&str> {
    let mut words = info.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("yaml"), Some(marker), None) => marker.strip_prefix("sortie:"),
        _ => None,
    }
}

/// The code text Jira gets for a code block: an outcome block's text starts with
/// its marker line.
pub(crate) fn code_text(info: &str, text: &str) -> String {
    match outcome_kind(info) {
        Some(kind) if !text.starts_with(MARKER_PREFIX) => {
            format!("{MARKER_PREFIX}{kind}\n{text}")
        }
        _ => text.to_string(),
    }
}

/// The Markdown info string for code read back from Jira: `yaml sortie:<kind>` when
/// its first line is a marker, whatever language Jira kept; else the language.
pub(crate) fn info_of(language: Option<&str>, text: &str) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    if let Some(kind) = first.strip_prefix(MARKER_PREFIX) {
        if !kind.is_empty() && !kind.contains(char::is_whitespace) {
            return format!("yaml sortie:{kind}");
        }
    }
    language.unwrap_or("").trim().to_string()
}

/// A Markdown fenced code block holding `text` (a fence longer than any backtick run in it).
pub(crate) fn fenced(info: &str, text: &str, indent: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    let mut out = format!("{indent}{fence}{info}\n");
    for line in text.split('\n') {
        out.push_str(indent);
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(indent);
    out.push_str(&fence);
    out.push('\n');
    out
}

/// Escape text so Markdown reads it back as the same plain text.
pub(crate) fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '~' | '|' | '!'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Read a Markdown comment into nodes.
pub(crate) fn parse_markdown(markdown: &str) -> Vec<Node> {
    let mut builder = TreeBuilder::default();
    for event in Parser::new_ext(markdown, Options::empty()) {
        builder.event(event);
    }
    builder.finish()
}

/// Containers open while walking Markdown events.
#[derive(Debug)]
enum Open {
    Paragraph(Vec<Inline>),
    Heading(u8, Vec<Inline>),
    Code(String, String),
    Quote(Vec<Node>),
    List(bool, Vec<Vec<Node>>),
    Item(Vec<Node>),
}

#[derive(Debug, Default)]
struct TreeBuilder {
    root: Vec<Node>,
    stack: Vec<Open>,
    marks: Marks,
    links: Vec<Option<String>>,
}

impl TreeBuilder {
    fn push_node(&mut self, node: Node) {
        match self.stack.last_mut() {
            Some(Open::Quote(nodes)) | Some(Open::Item(nodes)) => nodes.push(node),
            _ => self.root.push(node),
        }
    }

    /// Inline content outside a paragraph (a tight list item's text) gets one.
    fn inlines(&mut self) -> &mut Vec<Inline> {
        if !matches!(
            self.stack.last(),
            Some(Open::Paragraph(_)) | Some(Open::Heading(..))
        ) {
            self.stack.push(Open::Paragraph(Vec::new()));
        }
        match self.stack.last_mut() {
            Some(Open::Paragraph(v)) | Some(Open::Heading(_, v)) => v,
            _ => unreachable!("a paragraph was just pushed"),
        }
    }

    fn close_implicit_paragraph(&mut self) {
        if let Some(Open::Paragraph(_)) = self.stack.last() {
            if let Some(Open::Paragraph(inlines)) = self.stack.pop() {
                self.push_node(Node::Paragraph(inlines));
            }
        }
    }

    fn text(&mut self, text: &str) {
        if let Some(Open::Code(_, body)) = self.stack.last_mut() {
            body.push_str(text);
            return;
        }
        let marks = self.marks.clone();
        let inlines = self.inlines();
        if let Some(Inline::Text(last, m)) = inlines.last_mut() {
            if *m == marks {
                last.push_str(text);
                return;
            }
        }
        inlines.push(Inline::Text(text.to_string(), marks));
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(end) => self.end(end),
            Event::Text(t) => self.text(&t),
            Event::Code(t) => {
                let saved = self.marks.code;
                self.marks.code = true;
                self.text(&t);
                self.marks.code = saved;
            }
            Event::Html(t) | Event::InlineHtml(t) => self.text(&t),
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.inlines().push(Inline::Break),
            Event::Rule => {
                self.close_implicit_paragraph();
                self.push_node(Node::Rule);
            }
            _ => {}
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.stack.push(Open::Paragraph(Vec::new())),
            Tag::Heading { level, .. } => {
                let n = match level {
                    HeadingLevel::H1 => 1,
                    HeadingLevel::H2 => 2,
                    HeadingLevel::H3 => 3,
                    HeadingLevel::H4 => 4,
                    HeadingLevel::H5 => 5,
                    HeadingLevel::H6 => 6,
                };
                self.stack.push(Open::Heading(n, Vec::new()));
            }
            Tag::CodeBlock(kind) => {
                self.close_implicit_paragraph();
                let info = match kind {
                    CodeBlockKind::Fenced(info) => info.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.stack.push(Open::Code(info, String::new()));
            }
            Tag::BlockQuote(_) => {
                self.close_implicit_paragraph();
                self.stack.push(Open::Quote(Vec::new()));
            }
            Tag::List(first) => {
                self.close_implicit_paragraph();
                self.stack.push(Open::List(first.is_some(), Vec::new()));
            }
            Tag::Item => self.stack.push(Open::Item(Vec::new())),
            Tag::Emphasis => self.marks.em = true,
            Tag::Strong => self.marks.strong = true,
            Tag::Link { dest_url, .. } => {
                self.links.push(self.marks.link.take());
                self.marks.link = Some(dest_url.to_string());
            }
            _ => {}
        }
    }

    fn end(&mut self, end: TagEnd) {
        match end {
            TagEnd::Emphasis => self.marks.em = false,
            TagEnd::Strong => self.marks.strong = false,
            TagEnd::Link => self.marks.link = self.links.pop().flatten(),
            TagEnd::Paragraph
            | TagEnd::Heading(_)
            | TagEnd::CodeBlock
            | TagEnd::BlockQuote(_)
            | TagEnd::List(_)
            | TagEnd::Item => {
                if !matches!(end, TagEnd::Paragraph | TagEnd::Heading(_)) {
                    self.close_implicit_paragraph();
                }
                let node = match self.stack.pop() {
                    Some(Open::Paragraph(v)) => Node::Paragraph(v),
                    Some(Open::Heading(n, v)) => Node::Heading(n, v),
                    Some(Open::Code(info, mut text)) => {
                        if text.ends_with('\n') {
                            text.pop();
                        }
                        Node::Code { info, text }
                    }
                    Some(Open::Quote(nodes)) => Node::Quote(nodes),
                    Some(Open::List(ordered, items)) => Node::List { ordered, items },
                    Some(Open::Item(nodes)) => {
                        if let Some(Open::List(_, items)) = self.stack.last_mut() {
                            items.push(nodes);
                        }
                        return;
                    }
                    None => return,
                };
                self.push_node(node);
            }
            _ => {}
        }
    }

    fn finish(mut self) -> Vec<Node> {
        while !self.stack.is_empty() {
            self.end(TagEnd::Paragraph);
        }
        self.root
    }
}

/// The Markdown equivalent of `text` when it is an ADF document (JSON whose `type`
/// is `doc`); `None` for anything else.
pub fn as_adf_markdown(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if !trimmed.starts_with('{') {
        return None;
    }
    let value = serde_json::from_str::<serde_json::Value>(trimmed).ok()?;
    (value.get("type").and_then(|t| t.as_str()) == Some("doc")).then(|| adf::to_markdown(&value))
}

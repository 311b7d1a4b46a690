//! Atlassian Document Format: what sortie writes to Jira Cloud, and reading it back.
//!
//! Written: `doc` (version 1) holding `paragraph`, `heading`, `codeBlock`,
//! `blockquote`, `bulletList` / `orderedList` of `listItem`, `rule`; inline `text`
//! with the marks `strong`, `em`, `code`, `link`, and `hardBreak`. Read: the same,
//! plus any other node's text (mentions, emoji, panels, tables as their text), so a
//! document a person edited in Jira still reads.

use serde_json::{json, Map, Value};

use super::{code_text, escape_markdown, fenced, info_of, parse_markdown, Inline, Node};

/// The ADF document for a Markdown comment.
pub fn from_markdown(markdown: &str) -> Value {
    let content: Vec<Value> = parse_markdown(markdown).iter().map(block).collect();
    json!({ "type": "doc", "version": 1, "content": content })
}

fn block(node: &Node) -> Value {
    match node {
        Node::Paragraph(inlines) => with_content(json!({"type": "paragraph"}), inline(inlines)),
        Node::Heading(level, inlines) => with_content(
            json!({"type": "heading", "attrs": {"level": level}}),
            inline(inlines),
        ),
        Node::Code { info, text } => {
            let language = info.split_whitespace().next();
            let mut code = json!({"type": "codeBlock"});
            if let Some(language) = language {
                code["attrs"] = json!({ "language": language });
            }
            let text = code_text(info, text);
            if text.is_empty() {
                code
            } else {
                with_content(code, vec![json!({"type": "text", "text": text})])
            }
        }
        Node::Quote(nodes) => {
            // A blockquote holds paragraphs, lists and code blocks only.
            let content: Vec<Value> = nodes.iter().flat_map(quoted).collect();
            let content = if content.is_empty() {
                vec![json!({"type": "paragraph"})]
            } else {
                content
            };
            json!({"type": "blockquote", "content": content})
        }
        Node::List { ordered, items } => {
            let items: Vec<Value> = items
                .iter()
                .map(|nodes| {
                    let mut content: Vec<Value> = nodes.iter().flat_map(in_item).collect();
                    if content.is_empty() {
                        content.push(json!({"type": "paragraph"}));
                    }
                    json!({"type": "listItem", "content": content})
                })
                .collect();
            let kind = if *ordered {
                "orderedList"
            } else {
                "bulletList"
            };
            json!({"type": kind, "content": items})
        }
        Node::Rule => json!({"type": "rule"}),
    }
}

/// A node inside a blockquote: headings and rules are not allowed there, so a heading
/// becomes a paragraph and a rule is dropped.
fn quoted(node: &Node) -> Vec<Value> {
    match node {
        Node::Heading(_, inlines) => vec![block(&Node::Paragraph(inlines.clone()))],
        Node::Rule => Vec::new(),
        Node::Quote(nodes) => nodes.iter().flat_map(quoted).collect(),
        other => vec![block(other)],
    }
}

/// A node inside a list item: paragraphs, lists and code blocks.
fn in_item(node: &Node) -> Vec<Value> {
    match node {
        Node::Heading(_, inlines) => vec![block(&Node::Paragraph(inlines.clone()))],
        Node::Rule => Vec::new(),
        Node::Quote(nodes) => nodes.iter().flat_map(in_item).collect(),
        other => vec![block(other)],
    }
}

/// `content` is left out when empty: ADF refuses empty text nodes, not empty paragraphs.
fn with_content(mut node: Value, content: Vec<Value>) -> Value {
    if !content.is_empty() {
        node["content"] = Value::Array(content);
    }
    node
}

fn inline(inlines: &[Inline]) -> Vec<Value> {
    inlines
        .iter()
        .filter_map(|i| match i {
            Inline::Break => Some(json!({"type": "hardBreak"})),
            Inline::Text(text, _) if text.is_empty() => None,
            Inline::Text(text, marks) => {
                let mut list = Vec::new();
                // The `code` mark may only be combined with `link`.
                if marks.code {
                    list.push(json!({"type": "code"}));
                } else {
                    if marks.strong {
                        list.push(json!({"type": "strong"}));
                    }
                    if marks.em {
                        list.push(json!({"type": "em"}));
                    }
                }
                if let Some(href) = &marks.link {
                    list.push(json!({"type": "link", "attrs": {"href": href}}));
                }
                let mut node = json!({"type": "text", "text": text});
                if !list.is_empty() {
                    node["marks"] = Value::Array(list);
                }
                Some(node)
            }
        })
        .collect()
}

/// The Markdown equivalent of an ADF document: top-level code blocks become fences
/// (an outcome block's marker line makes its fence `yaml sortie:<kind>`), quotes and
/// list items are indented so that a block inside them is not top level.
pub fn to_markdown(doc: &Value) -> String {
    let mut out = String::new();
    for node in children(doc) {
        write_block(node, "", &mut out);
    }
    out
}

fn children(node: &Value) -> &[Value] {
    node.get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn kind(node: &Value) -> &str {
    node.get("type").and_then(Value::as_str).unwrap_or("")
}

fn attrs(node: &Value) -> Option<&Map<String, Value>> {
    node.get("attrs").and_then(Value::as_object)
}

fn write_block(node: &Value, indent: &str, out: &mut String) {
    if !out.is_empty() {
        out.push_str(indent.trim_end());
        out.push('\n');
    }
    match kind(node) {
        "codeBlock" => {
            let text = plain_text(node);
            let language = attrs(node)
                .and_then(|a| a.get("language"))
                .and_then(Value::as_str);
            out.push_str(&fenced(&info_of(language, &text), &text, indent));
        }
        "heading" => {
            let level = attrs(node)
                .and_then(|a| a.get("level"))
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .clamp(1, 6) as usize;
            out.push_str(&format!(
                "{indent}{} {}\n",
                "#".repeat(level),
                inline_markdown(node)
            ));
        }
        "blockquote" => {
            let inner = format!("{indent}> ");
            let mut quoted = String::new();
            for child in children(node) {
                write_block(child, &inner, &mut quoted);
            }
            out.push_str(&quoted);
        }
        "bulletList" | "orderedList" => {
            let ordered = kind(node) == "orderedList";
            for (i, item) in children(node).iter().enumerate() {
                let bullet = if ordered {
                    format!("{}. ", i + 1)
                } else {
                    "- ".to_string()
                };
                let inner = format!("{indent}{}", " ".repeat(bullet.len()));
                let mut text = String::new();
                for child in children(item) {
                    write_block(child, &inner, &mut text);
                }
                // The first line carries the bullet instead of the indentation.
                let text = text.strip_prefix(&inner).unwrap_or(&text);
                out.push_str(&format!("{indent}{bullet}{text}"));
            }
        }
        "rule" => out.push_str(&format!("{indent}---\n")),
        "paragraph" => {
            let text = inline_markdown(node);
            for line in text.split('\n') {
                out.push_str(&format!("{indent}{line}\n"));
            }
        }
        _ => {
            // Panels, tables, media, ...: their text, as a paragraph.
            let text = escape_markdown(&plain_text(node));
            if !text.trim().is_empty() {
                for line in text.lines() {
                    out.push_str(&format!("{indent}{line}\n"));
                }
            }
        }
    }
}

/// Every text in a node, concatenated (hard breaks as newlines).
fn plain_text(node: &Value) -> String {
    let mut out = String::new();
    collect_text(node, &mut out);
    out
}

fn collect_text(node: &Value, out: &mut String) {
    match kind(node) {
        "text" => out.push_str(node.get("text").and_then(Value::as_str).unwrap_or("")),
        "hardBreak" => out.push('\n'),
        "mention" | "emoji" | "status" | "date" | "inlineCard" => {
            let a = attrs(node);
            let text = a
                .and_then(|a| a.get("text").or_else(|| a.get("shortName")))
                .or_else(|| a.and_then(|a| a.get("url")))
                .and_then(Value::as_str)
                .unwrap_or("");
            out.push_str(text);
        }
        _ => {
            for child in children(node) {
                collect_text(child, out);
                if matches!(kind(child), "paragraph" | "heading" | "codeBlock") {
                    out.push('\n');
                }
            }
        }
    }
}

/// A paragraph's or heading's inline content as Markdown.
fn inline_markdown(node: &Value) -> String {
    let mut out = String::new();
    for child in children(node) {
        match kind(child) {
            "text" => {
                let text = child.get("text").and_then(Value::as_str).unwrap_or("");
                let marks: Vec<&Value> = child
                    .get("marks")
                    .and_then(Value::as_array)
                    .map(|m| m.iter().collect())
                    .unwrap_or_default();
                let has = |name: &str| marks.iter().any(|m| kind(m) == name);
                let mut piece = if has("code") {
                    code_span(text)
                } else {
                    escape_markdown(text).replace('\n', " ")
                };
                if has("em") {
                    piece = format!("*{piece}*");
                }
                if has("strong") {
                    piece = format!("**{piece}**");
                }
                if let Some(href) = marks
                    .iter()
                    .find(|m| kind(m) == "link")
                    .and_then(|m| attrs(m))
                    .and_then(|a| a.get("href"))
                    .and_then(Value::as_str)
                {
                    piece = format!("[{piece}](<{}>)", href.replace(['<', '>'], ""));
                }
                out.push_str(&piece);
            }
            "hardBreak" => out.push_str("\\\n"),
            _ => out.push_str(&escape_markdown(&plain_text(child))),
        }
    }
    out
}

/// An inline code span holding `text` (backticks one longer than any run inside).
fn code_span(text: &str) -> String {
    let text = text.replace('\n', " ");
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let ticks = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

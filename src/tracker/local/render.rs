//! Writing the local board's files, as pure functions: new tickets and comments, and
//! in-place edits of a person's `ticket.md` that leave everything else byte for byte.

use chrono::{DateTime, Utc};
use serde_yaml::Value;

use super::format::{is_plain_safe, split_front_matter};

/// Render a timestamp the way the board writes it: `2026-11-30T10:00:00Z`.
pub fn render_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Render `s` as a YAML scalar usable on one line, in block or flow context:
/// plain when that is unambiguous, otherwise double-quoted.
pub fn yaml_scalar(s: &str) -> String {
    if is_plain_safe(s) {
        s.to_owned()
    } else {
        double_quoted(s)
    }
}

/// A YAML double-quoted scalar; every character YAML would not read back verbatim
/// (controls, line and paragraph separators, BOM, non-characters) is escaped.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(
                    c,
                    '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
                ) =>
            {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The fields of a ticket file sortie writes from scratch.
#[derive(Debug, Clone, Copy)]
pub struct TicketFile<'a> {
    /// Title.
    pub title: &'a str,
    /// Status.
    pub status: &'a str,
    /// Priority.
    pub priority: Option<i64>,
    /// Labels.
    pub labels: &'a [String],
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Markdown body, written byte for byte.
    pub body: &'a str,
}

/// Render a new `ticket.md`.
pub fn render_ticket(t: &TicketFile<'_>) -> String {
    let mut out = String::with_capacity(160 + t.body.len());
    out.push_str("---\n");
    out.push_str(&format!("title: {}\n", yaml_scalar(t.title)));
    out.push_str(&format!("status: {}\n", yaml_scalar(t.status)));
    if let Some(p) = t.priority {
        out.push_str(&format!("priority: {p}\n"));
    }
    if !t.labels.is_empty() {
        let labels: Vec<String> = t.labels.iter().map(|l| yaml_scalar(l)).collect();
        out.push_str(&format!("labels: [{}]\n", labels.join(", ")));
    }
    out.push_str(&format!("created_at: {}\n", render_time(t.created_at)));
    out.push_str(&format!("updated_at: {}\n", render_time(t.updated_at)));
    out.push_str("---\n");
    out.push_str(t.body);
    out
}

/// Render a comment file.
pub fn render_comment(author: &str, created_at: DateTime<Utc>, body: &str) -> String {
    format!(
        "---\nauthor: {}\ncreated_at: {}\n---\n{body}",
        yaml_scalar(author),
        render_time(created_at)
    )
}

/// Replace (or add) top-level front-matter keys, leaving every other byte of the file alone.
///
/// `changes` are `(key, rendered YAML value)`. A key present once has its line
/// (and any indented continuation lines) replaced, keeping a trailing `# comment`;
/// a missing key is added before the closing delimiter. Returns `None` when the
/// file is not in a shape this can edit safely (a key present twice, say); the
/// caller then verifies or falls back to [`rewrite_front_matter`].
pub fn edit_front_matter(text: &str, changes: &[(&str, String)]) -> Option<String> {
    let split = split_front_matter(text).ok()?;
    let newline = if text[..split.front_start].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let front = &text[split.front_start..split.front_end];
    let lines: Vec<&str> = front.split_inclusive('\n').collect();
    let mut out_front = String::with_capacity(front.len() + 64);
    let mut found = vec![false; changes.len()];
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let hit = changes
            .iter()
            .position(|(key, _)| top_level_key_is(line, key));
        let Some(k) = hit else {
            out_front.push_str(line);
            i += 1;
            continue;
        };
        if found[k] {
            return None;
        }
        found[k] = true;
        let (key, value) = &changes[k];
        let ending = if line.ends_with("\r\n") {
            "\r\n"
        } else if line.ends_with('\n') {
            "\n"
        } else {
            newline
        };
        out_front.push_str(&format!("{key}: {value}{}{ending}", trailing_comment(line)));
        i += 1;
        while i < lines.len() && (lines[i].starts_with(' ') || lines[i].starts_with('\t')) {
            i += 1;
        }
    }
    if !out_front.is_empty() && !out_front.ends_with('\n') {
        out_front.push_str(newline);
    }
    for (k, (key, value)) in changes.iter().enumerate() {
        if !found[k] {
            out_front.push_str(&format!("{key}: {value}{newline}"));
        }
    }
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(&text[..split.front_start]);
    out.push_str(&out_front);
    out.push_str(&text[split.front_end..]);
    Some(out)
}

fn top_level_key_is(line: &str, key: &str) -> bool {
    line.strip_prefix(key)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// The ` # comment` at the end of a `key: plain value  # comment` line, if any.
fn trailing_comment(line: &str) -> &str {
    let line = line.trim_end_matches(['\n', '\r']);
    let value = line.split_once(':').map_or("", |(_, v)| v);
    if value.contains(['"', '\'']) {
        return "";
    }
    match value.find(" #").or_else(|| value.find("\t#")) {
        Some(i) => &value[i..],
        None => "",
    }
}

/// Rewrite the front matter as YAML with the given keys set, keeping unknown keys and the body.
///
/// The fallback when [`edit_front_matter`] cannot edit in place: comments and
/// formatting inside the front matter are lost, nothing else is.
pub fn rewrite_front_matter(text: &str, changes: &[(&str, String)]) -> Option<String> {
    let split = split_front_matter(text).ok()?;
    let mut map: serde_yaml::Mapping = serde_yaml::from_str(split.front).ok()?;
    for (key, value) in changes {
        let value: Value = serde_yaml::from_str(value).ok()?;
        map.insert(Value::String((*key).to_owned()), value);
    }
    let yaml = serde_yaml::to_string(&map).ok()?;
    Some(format!(
        "{}---\n{yaml}---\n{}",
        &text[..leading_len(text)],
        split.body
    ))
}

/// Length of the byte-order mark, if the file has one (kept on rewrite).
fn leading_len(text: &str) -> usize {
    if text.starts_with('\u{feff}') {
        3
    } else {
        0
    }
}

/// Whether the front matter has a top-level `key:` line (whatever its value).
pub fn has_top_level_key(front: &str, key: &str) -> bool {
    front.lines().any(|l| top_level_key_is(l, key))
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;

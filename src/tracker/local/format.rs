//! The local board's file format, as pure functions: ticket ids, front matter, ticket and comment files.
//!
//! Nothing here touches the disk. Parsing is lenient where a person's hand edit
//! should still work (`priority: "2"`, a single label as a string, a date without
//! a time) and strict where a wrong guess would misroute a ticket (the status).

use std::cmp::Ordering;
use std::sync::LazyLock;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde::Deserialize;
use serde_yaml::Value;

/// Why a ticket or comment file could not be read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file does not start with a `---` line.
    #[error("does not start with a `---` front matter line")]
    NoFrontMatter,
    /// The front matter has no closing `---` line.
    #[error("front matter has no closing `---` line")]
    UnclosedFrontMatter,
    /// The front matter is not a YAML mapping.
    #[error("front matter is not valid YAML: {0}")]
    Yaml(String),
    /// A required field is missing or empty.
    #[error("required field `{0}` is missing or empty")]
    Missing(&'static str),
    /// A field has a value of the wrong kind.
    #[error("field `{field}`: {reason}")]
    Field {
        /// The front-matter key.
        field: &'static str,
        /// What was expected.
        reason: String,
    },
}

/// The longest ticket id the board accepts.
pub const MAX_ID_LEN: usize = 64;

/// Whether `id` is a safe ticket id: `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`.
///
/// Every id that reaches the file system passes this check first, so no id can
/// name a path outside its ticket folder (`..`, `/`, control characters, hidden names).
pub fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ID_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Total "natural" order of ids: numeric ids first, by value; then the others, bytewise.
pub fn compare_ids(a: &str, b: &str) -> Ordering {
    fn numeric(s: &str) -> Option<&str> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.trim_start_matches('0'))
    }
    match (numeric(a), numeric(b)) {
        (Some(x), Some(y)) => x.len().cmp(&y.len()).then(x.cmp(y)).then(a.cmp(b)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// A file cut into its front matter and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split<'a> {
    /// The YAML between the delimiter lines.
    pub front: &'a str,
    /// Everything after the closing delimiter line, byte for byte.
    pub body: &'a str,
    /// Byte offset of `front` in the file.
    pub front_start: usize,
    /// Byte offset of the closing delimiter line.
    pub front_end: usize,
    /// 1-based file line of the first front-matter line.
    pub first_line: usize,
}

/// Cut `text` into front matter and body. A leading byte-order mark is allowed.
pub fn split_front_matter(text: &str) -> Result<Split<'_>, FormatError> {
    let start = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let first_end = match text[start..].find('\n') {
        Some(i) => start + i + 1,
        None => {
            return Err(if is_delimiter(&text[start..]) {
                FormatError::UnclosedFrontMatter
            } else {
                FormatError::NoFrontMatter
            })
        }
    };
    if !is_delimiter(&text[start..first_end]) {
        return Err(FormatError::NoFrontMatter);
    }
    let mut pos = first_end;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
        let line = &text[pos..line_end];
        if is_delimiter(line) || is_document_end(line) {
            return Ok(Split {
                front: &text[first_end..pos],
                body: &text[line_end..],
                front_start: first_end,
                front_end: pos,
                first_line: 2,
            });
        }
        pos = line_end;
    }
    Err(FormatError::UnclosedFrontMatter)
}

/// Whether `text` (a whole file or its beginning) holds a complete front matter.
pub fn has_closed_front_matter(text: &[u8]) -> bool {
    // Only used to decide when to stop reading: a conservative answer is fine.
    let text = match std::str::from_utf8(text) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&text[..e.valid_up_to()]).unwrap_or_default(),
    };
    split_front_matter(text).is_ok()
}

fn is_delimiter(line: &str) -> bool {
    line.trim_end_matches(['\n', '\r', ' ', '\t']) == "---"
}

fn is_document_end(line: &str) -> bool {
    line.trim_end_matches(['\n', '\r', ' ', '\t']) == "..."
}

/// The status of a front matter written the simple way (`status: plain-text`, once,
/// at the top level), found without a YAML parse; `None` when only a full parse can tell.
///
/// Listing uses it to skip tickets in statuses nobody asked for cheaply.
pub fn quick_status(front: &str) -> Option<&str> {
    let mut found = None;
    for line in front.lines() {
        if line.starts_with(['"', '\'', '?', '{', '[', '&', '*', '!', '%']) {
            return None; // YAML that a line scan cannot read with confidence
        }
        if let Some(rest) = line.strip_prefix("status:") {
            if found.is_some() {
                return None;
            }
            found = Some(rest.trim_matches([' ', '\t', '\r']));
        }
    }
    found.filter(|s| is_plain_safe(s))
}

/// The front-matter fields of a ticket, as written (timestamps may be absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TicketFront {
    /// `title`, required.
    pub title: String,
    /// `status`, required, trimmed.
    pub status: String,
    /// `priority`, if present and an integer.
    pub priority: Option<i64>,
    /// `labels`.
    pub labels: Vec<String>,
    /// `assignee` (one name) or `assignees` (a list).
    pub assignees: Vec<String>,
    /// `blocked_by`: ids of the tickets blocking this one.
    pub blocked_by: Vec<String>,
    /// `created_at`, if present and parseable.
    pub created_at: Option<DateTime<Utc>>,
    /// `updated_at`, if present and parseable.
    pub updated_at: Option<DateTime<Utc>>,
    /// Fields that were unusable but not fatal (the ticket still runs without them).
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
struct RawTicketFront {
    #[serde(default)]
    title: Value,
    #[serde(default)]
    status: Value,
    #[serde(default)]
    priority: Value,
    #[serde(default)]
    labels: Value,
    #[serde(default)]
    assignee: Value,
    #[serde(default)]
    assignees: Value,
    #[serde(default)]
    blocked_by: Value,
    #[serde(default)]
    created_at: Value,
    #[serde(default)]
    updated_at: Value,
}

/// Parse a ticket's front matter (the `front` of [`split_front_matter`]).
pub fn parse_ticket_front(split: &Split<'_>) -> Result<TicketFront, FormatError> {
    if split.front.trim().is_empty() {
        return Err(FormatError::Missing("title"));
    }
    let raw: RawTicketFront = serde_yaml::from_str(split.front)
        .map_err(|e| FormatError::Yaml(rebase_yaml_error(&e, split.first_line)))?;
    let title = scalar_text(&raw.title)
        .filter(|t| !t.trim().is_empty())
        .ok_or(FormatError::Missing("title"))?;
    let status = match &raw.status {
        Value::Null => return Err(FormatError::Missing("status")),
        Value::String(s) if s.trim().is_empty() => return Err(FormatError::Missing("status")),
        Value::String(s) if s.chars().any(char::is_control) => {
            return Err(FormatError::Field {
                field: "status",
                reason: "must be a single line of text".into(),
            })
        }
        Value::String(s) => s.trim().to_owned(),
        other => {
            return Err(FormatError::Field {
                field: "status",
                reason: format!("expected text, found {}", kind_of(other)),
            })
        }
    };
    let mut notes = Vec::new();
    let priority = parse_priority(&raw.priority, &mut notes);
    let labels = parse_names("labels", &raw.labels, &mut notes);
    let mut assignees = parse_names("assignee", &raw.assignee, &mut notes);
    assignees.extend(parse_names("assignees", &raw.assignees, &mut notes));
    let blocked_by = parse_names("blocked_by", &raw.blocked_by, &mut notes);
    let created_at = parse_time_field("created_at", &raw.created_at, &mut notes);
    let updated_at = parse_time_field("updated_at", &raw.updated_at, &mut notes);
    Ok(TicketFront {
        title,
        status,
        priority,
        labels,
        assignees,
        blocked_by,
        created_at,
        updated_at,
        notes,
    })
}

/// The front-matter fields of a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentFront {
    /// `author`, required.
    pub author: String,
    /// `created_at`, if present and parseable.
    pub created_at: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
struct RawCommentFront {
    #[serde(default)]
    author: Value,
    #[serde(default)]
    created_at: Value,
}

/// Parse a comment file's front matter.
pub fn parse_comment_front(split: &Split<'_>) -> Result<CommentFront, FormatError> {
    if split.front.trim().is_empty() {
        return Err(FormatError::Missing("author"));
    }
    let raw: RawCommentFront = serde_yaml::from_str(split.front)
        .map_err(|e| FormatError::Yaml(rebase_yaml_error(&e, split.first_line)))?;
    let author = scalar_text(&raw.author)
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .ok_or(FormatError::Missing("author"))?;
    let mut notes = Vec::new();
    let created_at = parse_time_field("created_at", &raw.created_at, &mut notes);
    Ok(CommentFront { author, created_at })
}

/// Re-number the `line N` mentions of a YAML error so they count from the file's first line.
fn rebase_yaml_error(err: &serde_yaml::Error, first_line: usize) -> String {
    static LINE: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"line (\d+)").expect("valid regex"));
    let msg = err.to_string();
    LINE.replace_all(&msg, |caps: &regex::Captures<'_>| {
        let n: usize = caps[1].parse().unwrap_or(0);
        format!("line {}", n + first_line - 1)
    })
    .into_owned()
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_priority(v: &Value, notes: &mut Vec<String>) -> Option<i64> {
    let parsed = match v {
        Value::Null => return None,
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                .map(|f| f as i64)
        }),
        Value::String(s) if s.trim().is_empty() => return None,
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    if parsed.is_none() {
        notes.push(format!(
            "`priority` is not an integer ({}); treated as no priority",
            compact(v)
        ));
    }
    parsed
}

/// A list of names (`labels`, `assignees`), or one name, found under `key`.
fn parse_names(key: &str, v: &Value, notes: &mut Vec<String>) -> Vec<String> {
    match v {
        Value::Null => Vec::new(),
        Value::String(s) if s.trim().is_empty() => Vec::new(),
        Value::String(s) => vec![s.trim().to_owned()],
        Value::Sequence(items) => {
            let mut labels = Vec::with_capacity(items.len());
            for item in items {
                match scalar_text(item) {
                    Some(l) if !l.trim().is_empty() => labels.push(l.trim().to_owned()),
                    Some(_) => {}
                    None => notes.push(format!(
                        "`{key}` entry is not text ({}); ignored",
                        compact(item)
                    )),
                }
            }
            labels
        }
        other => {
            notes.push(format!(
                "`{key}` should be a list, found {}; ignored",
                kind_of(other)
            ));
            Vec::new()
        }
    }
}

fn parse_time_field(
    field: &'static str,
    v: &Value,
    notes: &mut Vec<String>,
) -> Option<DateTime<Utc>> {
    match v {
        Value::Null => None,
        Value::String(s) => {
            let t = parse_time(s);
            if t.is_none() {
                notes.push(format!(
                    "`{field}` is not a date-time ({s:?}); using the file's modification time"
                ));
            }
            t
        }
        other => {
            notes.push(format!(
                "`{field}` is not a date-time ({}); using the file's modification time",
                compact(other)
            ));
            None
        }
    }
}

/// Parse a timestamp: RFC 3339, `YYYY-MM-DD HH:MM[:SS]` (UTC), or a bare date (midnight UTC).
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(&s.replacen(' ', "T", 1)) {
        return Some(t.with_timezone(&Utc));
    }
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

fn compact(v: &Value) -> String {
    let text = serde_yaml::to_string(v).unwrap_or_default();
    let line = text.trim().replace('\n', " ");
    if line.chars().count() > 40 {
        format!("{}...", line.chars().take(40).collect::<String>())
    } else {
        line
    }
}

/// Whether `s` can be written as a plain YAML scalar and read back as the same text.
pub(crate) fn is_plain_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !first.is_alphanumeric() || s.ends_with(' ') {
        return false;
    }
    if !s
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-' | '/'))
    {
        return false;
    }
    // Anything YAML 1.1 or 1.2 would read as a non-string stays quoted.
    let lower = s.to_ascii_lowercase();
    let special = matches!(
        lower.as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "nan" | "inf"
    );
    let numeric = s.parse::<f64>().is_ok()
        || s.bytes()
            .all(|b| b.is_ascii_digit() || b == b'_' || b == b'.' || b == b'-');
    !special && !numeric
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;

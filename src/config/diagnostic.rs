//! Config problems: one `Diagnostic` per problem, with file, line, column and field path,
//! and the translation of serde's messages into ones that say what was expected.

use std::fmt;

use super::locate::{FieldPath, Locator, Position, Segment};

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The config file as given, or `<config>` when parsed from a string.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Field path such as `pipeline_stages[1].success_status`; empty for the whole document.
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// At most this many diagnostics are kept; the rest are counted in a last line.
pub const MAX_DIAGNOSTICS: usize = 100;

/// Problems collected while loading one document, positioned through its `Locator`.
pub(crate) struct Problems<'a> {
    locator: &'a Locator,
    items: Vec<(Position, FieldPath, String)>,
    /// Problems found beyond `MAX_DIAGNOSTICS`.
    dropped: usize,
    /// Things that are valid but probably not meant (a status no stage moves tickets
    /// to): they do not make the config invalid.
    warnings: Vec<(Position, FieldPath, String)>,
}

impl<'a> Problems<'a> {
    /// An empty collection for the document indexed by `locator`.
    pub(crate) fn new(locator: &'a Locator) -> Self {
        Problems {
            locator,
            items: Vec::new(),
            dropped: 0,
            warnings: Vec::new(),
        }
    }

    /// Whether nothing was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// When the collection is full, count one more dropped problem and return true, so a
    /// caller can skip composing an expensive message that would not be shown.
    pub(crate) fn skip_when_full(&mut self) -> bool {
        let full = self.items.len() >= MAX_DIAGNOSTICS;
        if full {
            self.dropped += 1;
        }
        full
    }

    fn push(&mut self, pos: Position, path: &FieldPath, message: String) {
        if self.items.len() < MAX_DIAGNOSTICS {
            self.items.push((pos, path.clone(), message));
        } else {
            self.dropped += 1;
        }
    }

    /// A problem with the value at `path`.
    pub(crate) fn at_value(&mut self, path: &FieldPath, message: impl Into<String>) {
        let pos = self.locator.value(path);
        self.push(pos, path, message.into());
    }

    /// A problem with the key naming `path` (unknown or misplaced keys).
    pub(crate) fn at_key(&mut self, path: &FieldPath, message: impl Into<String>) {
        let pos = self.locator.key(path);
        self.push(pos, path, message.into());
    }

    /// A problem at an explicit position.
    pub(crate) fn at(&mut self, pos: Position, path: &FieldPath, message: impl Into<String>) {
        self.push(pos, path, message.into());
    }

    /// A warning about the value at `path`: the config stays valid.
    pub(crate) fn warn_at_value(&mut self, path: &FieldPath, message: impl Into<String>) {
        if self.warnings.len() < MAX_DIAGNOSTICS {
            let pos = self.locator.value(path);
            self.warnings.push((pos, path.clone(), message.into()));
        }
    }

    /// The warnings collected, as diagnostics for `file`, in file order.
    pub(crate) fn warnings(&self, file: &str) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = self
            .warnings
            .iter()
            .map(|(pos, path, message)| Diagnostic {
                file: file.to_string(),
                line: pos.line,
                column: pos.column,
                field: path.to_string(),
                message: message.clone(),
            })
            .collect();
        out.sort_by_key(|d| (d.line, d.column));
        out.dedup();
        out
    }

    /// A serde error from deserializing the value at `base`.
    pub(crate) fn serde(
        &mut self,
        base: &FieldPath,
        err: &serde_path_to_error::Error<serde_yaml::Error>,
    ) {
        let mut path = base.clone();
        for seg in err.path() {
            match seg {
                serde_path_to_error::Segment::Seq { index } => path.0.push(Segment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => path.0.push(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { .. }
                | serde_path_to_error::Segment::Unknown => {}
            }
        }
        let message = err.inner().to_string();
        let ticks = backticked(&message);
        if message.starts_with("unknown field") {
            let field = ticks.first().cloned().unwrap_or_default();
            // Internally tagged enums buffer their content, so the path may stop at the parent.
            if path.0.last() != Some(&Segment::Key(field.clone())) {
                path = path.key(&field);
            }
            let known: Vec<&str> = ticks.iter().skip(1).map(String::as_str).collect();
            self.at_key(&path, unknown_key_message(&field, &known));
        } else if message.starts_with("missing field") {
            let field = ticks.first().cloned().unwrap_or_default();
            let pos = self.locator.key(&path);
            self.at(
                pos,
                &path.key(&field),
                format!("missing required key `{field}`"),
            );
        } else if message.starts_with("unknown variant") {
            let value = ticks.first().cloned().unwrap_or_default();
            let known = ticks
                .iter()
                .skip(1)
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            self.at_value(
                &path,
                format!("unknown value `{value}`; expected one of: {known}"),
            );
        } else if let Some(rest) = message
            .strip_prefix("invalid type: ")
            .or_else(|| message.strip_prefix("invalid value: "))
        {
            let (found, expected) = rest
                .rsplit_once(", expected ")
                .unwrap_or((rest, "something else"));
            let found = found.split(" at line ").next().unwrap_or(found);
            let expected = match at_least_one(&path) {
                true => describe_positive(expected),
                false => describe_expected(expected),
            };
            self.at_value(&path, format!("expected {expected}, found {found}"));
        } else {
            self.at_value(&path, message);
        }
    }

    /// The collected problems as diagnostics for `file`, in file order.
    pub(crate) fn into_diagnostics(self, file: &str) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = self
            .items
            .into_iter()
            .map(|(pos, path, message)| Diagnostic {
                file: file.to_string(),
                line: pos.line,
                column: pos.column,
                field: path.to_string(),
                message,
            })
            .collect();
        out.sort_by_key(|d| (d.line, d.column));
        out.dedup();
        if self.dropped > 0 {
            let last = out.last().map_or((1, 1), |d| (d.line, d.column));
            out.push(Diagnostic {
                file: file.to_string(),
                line: last.0,
                column: last.1,
                field: String::new(),
                message: format!(
                    "{} more problems not shown; fix the ones above first",
                    self.dropped
                ),
            });
        }
        out
    }
}

/// "unknown key `x`; did you mean `y`? expected one of: ..." naming the closest known key.
pub(crate) fn unknown_key_message(field: &str, known: &[&str]) -> String {
    let mut msg = format!("unknown key `{field}`");
    let best = known
        .iter()
        .map(|k| (strsim::jaro_winkler(field, k), *k))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((score, key)) = best {
        if score >= 0.8 {
            msg.push_str(&format!("; did you mean `{key}`?"));
        }
    }
    if known.is_empty() {
        msg.push_str("; this mapping takes no keys");
    } else {
        let list = known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        msg.push_str(&format!(" (expected one of: {list})"));
    }
    msg
}

/// The texts between backticks in a serde message.
fn backticked(message: &str) -> Vec<String> {
    message
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The number fields whose smallest allowed value is 1 (checked after parsing, with
/// `expected a whole number >= 1`), by their key (`per_status_max_in_flight.<status>` by
/// its parent's): a wrong type there names the same range, not the type's own.
const AT_LEAST_ONE: &[&str] = &[
    "backoff_base_seconds",
    "claim_lock_ttl_seconds",
    "hook_timeout_seconds",
    "max_attempts",
    "max_in_flight",
    "max_reads_per_tick",
    "max_runs_per_ticket",
    "max_tokens_per_ticket",
    "max_turns",
    "per_role_max_in_flight",
    "poll_interval_seconds",
    "timeout_seconds",
];

/// Whether the number at `path` must be at least 1.
fn at_least_one(path: &FieldPath) -> bool {
    let keys: Vec<&str> = path
        .0
        .iter()
        .filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Index(_) => None,
        })
        .collect();
    match keys.as_slice() {
        [.., "per_status_max_in_flight", _] => true,
        [.., last] => AT_LEAST_ONE.contains(last),
        [] => false,
    }
}

/// `describe_expected` for a number field whose smallest allowed value is 1.
fn describe_positive(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" => "a whole number between 1 and 4294967295".to_string(),
        "u64" | "usize" => "a whole number >= 1".to_string(),
        e => describe_expected(e),
    }
}

/// serde's name for an expected type, said the way a config author reads it.
fn describe_expected(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" => "a whole number between 0 and 4294967295".to_string(),
        "u64" | "usize" => "a whole number >= 0".to_string(),
        "a string" | "a borrowed string" => "a string".to_string(),
        "a sequence" => "a list".to_string(),
        "a map" => "a mapping".to_string(),
        e if e.starts_with("struct ") => "a mapping".to_string(),
        e if e.starts_with("internally tagged enum") => "a mapping with a `kind` key".to_string(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_key_only_when_close() {
        let known = ["role", "claim_status", "success_status"];
        assert!(unknown_key_message("claim_statu", &known).contains("did you mean `claim_status`?"));
        assert!(
            unknown_key_message("sucess_status", &known).contains("did you mean `success_status`?")
        );
        assert!(!unknown_key_message("zzz", &known).contains("did you mean"));
    }
}

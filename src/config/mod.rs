//! Pipeline configuration: YAML loading, defaults, `$ENV` expansion and static contract validation.
//!
//! Loading runs in steps, each pure except the first: read the file (`Config::load` only),
//! parse YAML into a `serde_yaml::Value`, index field positions (`locate`), expand `$VAR`s
//! (`expand`), read each section into serde structs that reject unknown keys (`raw`), then
//! apply defaults, resolve paths and check the state contract (`normalize`, `stages`).
//! Every problem found becomes a `Diagnostic` naming file, line, column and field.

mod agent;
mod budgets;
mod defaults;
mod diagnostic;
mod expand;
mod git;
mod hooks;
mod locate;
mod model;
mod normalize;
mod raw;
mod reactions;
mod review;
mod routes;
mod sandbox;
mod stages;
mod tracker;
mod values;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

pub use budgets::{Budgets, DayZone, Price, Prices, StageBudget};
pub use diagnostic::{Diagnostic, MAX_DIAGNOSTICS};
pub use git::{
    board_key, branch_name_problem, render_ticket_template, sanitize_branch, ticket_branch,
    DEFAULT_BASE, DEFAULT_BRANCH, DEFAULT_PR_TITLE,
};
pub use model::*;
pub use reactions::{MergeMethod, ReactionKind, ReactionRule, ReactionsConfig, DEFAULT_HOLD_LABEL};
pub use review::{model_in_argv, model_of};
pub use routes::{AgentOverrides, Route};
pub use sandbox::{sandbox_report, usable_bwrap, BWRAP_ENV};
pub(crate) use values::{expand_home, kind_of};

use diagnostic::Problems;
use locate::{FieldPath, LocateError, Locator, Position, MAX_NESTING};

/// One step of a field path for [`Config::diagnostic_at`].
#[derive(Debug, Clone, Copy)]
pub enum FieldStep<'a> {
    /// A mapping key.
    Key(&'a str),
    /// A list index.
    Index(usize),
}

/// Config files larger than this are refused before parsing (1 MiB).
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// What `Diagnostic::file` says when the config was parsed from a string without a path.
pub const NO_SOURCE: &str = "<config>";

/// Why a config could not be loaded. Both variants are the user's to fix (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be opened or read.
    #[error("cannot read config file {}", path.display())]
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid config: every problem found, in file order.
    #[error("{}", render(diagnostics))]
    Invalid {
        /// One entry per problem.
        diagnostics: Vec<Diagnostic>,
    },
}

impl ConfigError {
    /// The problems found (empty for a read failure).
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { diagnostics } => diagnostics,
        }
    }
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A single problem not tied to a field (whole-file problems).
fn whole_file(file: &str, pos: Position, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        diagnostics: vec![Diagnostic {
            file: file.to_string(),
            line: pos.line,
            column: pos.column,
            field: String::new(),
            message: message.into(),
        }],
    }
}

fn too_large(file: &str, len: u64) -> ConfigError {
    whole_file(
        file,
        Position::START,
        format!("the config file is {len} bytes; expected at most {MAX_CONFIG_BYTES} bytes"),
    )
}

impl Config {
    /// A diagnostic for a problem found after loading (a role file missing, a board
    /// directory that does not exist), pointing at `field` (dotted, `[i]` for list
    /// entries, as diagnostics print them) in this config's file: the value's position,
    /// else the start of the file when the key is not written there.
    pub fn diagnostic_at(&self, field: &[FieldStep<'_>], message: impl Into<String>) -> Diagnostic {
        let file = self
            .source
            .as_deref()
            .map_or_else(|| NO_SOURCE.to_string(), |p| p.display().to_string());
        let mut path = FieldPath::root();
        for step in field {
            path = match step {
                FieldStep::Key(k) => path.key(k),
                FieldStep::Index(i) => path.index(*i),
            };
        }
        let text = self
            .source
            .as_deref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        let pos = Locator::index(&text)
            .map(|l| l.value(&path))
            .unwrap_or(Position::START);
        Diagnostic {
            file,
            line: pos.line,
            column: pos.column,
            field: path.to_string(),
            message: message.into(),
        }
    }

    /// Read, expand, parse and validate the config file at `path` (environment from the process).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read_err = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let label = path.display().to_string();
        let len = file.metadata().map_err(read_err)?.len();
        if len > MAX_CONFIG_BYTES as u64 {
            return Err(too_large(&label, len));
        }
        // The length can change between the check and the read: never read past the limit.
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(too_large(&label, bytes.len() as u64));
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(err) => {
                let valid = &err.as_bytes()[..err.utf8_error().valid_up_to()];
                let valid = std::str::from_utf8(valid).unwrap_or_default();
                let line = valid.matches('\n').count() + 1;
                let column = valid
                    .rsplit('\n')
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .count()
                    + 1;
                return Err(whole_file(
                    &label,
                    Position { line, column },
                    "the file is not valid UTF-8; expected a UTF-8 text file",
                ));
            }
        };
        Config::parse_str(&text, Some(path))
    }

    /// Parse and validate config text, expanding `$VAR`s from the process environment.
    /// `source` names the file in diagnostics and anchors relative paths (else the current directory).
    pub fn parse_str(text: &str, source: Option<&Path>) -> Result<Config, ConfigError> {
        Config::parse_str_with_env(text, source, &|name| std::env::var(name).ok())
    }

    /// `parse_str` with an injected environment lookup (tests, embedding).
    pub fn parse_str_with_env(
        text: &str,
        source: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let label = source.map_or_else(|| NO_SOURCE.to_string(), |p| p.display().to_string());
        if text.len() > MAX_CONFIG_BYTES {
            return Err(too_large(&label, text.len() as u64));
        }
        // Index positions first: the walk is linear and refuses deep nesting before libyaml
        // (inside serde_yaml) would spend quadratic time on it.
        let located = Locator::index(text);
        if let Err(LocateError::TooDeep(pos)) = located {
            return Err(whole_file(&label, pos, too_deep_message()));
        }
        let mut value = match serde_yaml::from_str::<Value>(text) {
            Ok(value) => value,
            Err(err) => return Err(yaml_error(&label, located.as_ref().ok(), &err)),
        };
        // Should yaml-rust2 reject what libyaml accepts, diagnostics fall back to line 1.
        let locator = located.unwrap_or_default();
        let mut problems = Problems::new(&locator);
        expand::expand_tree(
            &mut value,
            &mut FieldPath::root(),
            &locator,
            env,
            &mut problems,
        );
        let top = match value {
            Value::Mapping(top) => top,
            other => {
                let message = match other {
                    Value::Null => "the config is empty; expected a mapping with `tracker`, `agent` and `pipeline_stages`",
                    Value::Sequence(_) => "expected a mapping of settings at the top level, found a list",
                    _ => "expected a mapping of settings at the top level, found a single value",
                };
                return Err(whole_file(&label, Position::START, message));
            }
        };
        let raw = raw::read_raw(top, &mut problems);
        if problems.is_empty() {
            let base = base_dir(source);
            if let Some(mut config) = normalize::normalize(raw, source, &base, &mut problems) {
                config.warnings = problems.warnings(&label);
                return Ok(config);
            }
        }
        Err(ConfigError::Invalid {
            diagnostics: problems.into_diagnostics(&label),
        })
    }
}

/// The directory relative paths resolve against: the config file's, else the current one.
fn base_dir(source: Option<&Path>) -> PathBuf {
    let cwd = || std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    match source {
        Some(path) => {
            let abs = if path.is_absolute() {
                path.to_path_buf()
            } else {
                cwd().join(path)
            };
            abs.parent().map_or_else(cwd, Path::to_path_buf)
        }
        None => cwd(),
    }
}

/// A YAML syntax-level error as one diagnostic, positioned and worded for the config author.
fn yaml_error(label: &str, locator: Option<&Locator>, err: &serde_yaml::Error) -> ConfigError {
    let raw = err.to_string();
    if raw.starts_with("duplicate entry") {
        if let Some((path, pos)) = locator.and_then(Locator::first_duplicate) {
            let key = match path.0.last() {
                Some(locate::Segment::Key(k)) => k.clone(),
                _ => String::from("?"),
            };
            return ConfigError::Invalid {
                diagnostics: vec![Diagnostic {
                    file: label.to_string(),
                    line: pos.line,
                    column: pos.column,
                    field: path.to_string(),
                    message: format!(
                        "key `{key}` is written twice in the same mapping; expected each key once"
                    ),
                }],
            };
        }
    }
    let message = if raw.starts_with("repetition limit exceeded") {
        "YAML aliases expand to too many nodes (an alias bomb?); expected a plain config"
            .to_string()
    } else if raw.starts_with("recursion limit exceeded") {
        too_deep_message()
    } else {
        // The position is printed in front; drop serde_yaml's own copy of it.
        match raw.find(" at line ") {
            Some(at) => format!("invalid YAML: {}{}", &raw[..at], after_position(&raw[at..])),
            None => format!("invalid YAML: {raw}"),
        }
    };
    let pos = err.location().map_or(Position::START, |l| Position {
        line: l.line(),
        column: l.column(),
    });
    whole_file(label, pos, message)
}

fn too_deep_message() -> String {
    format!(
        "YAML is nested too deeply; expected at most {MAX_NESTING} levels of lists and mappings"
    )
}

/// What follows " at line N column M" in a serde_yaml message (often ", while parsing ...").
fn after_position(tail: &str) -> &str {
    tail.find(',').map_or("", |comma| &tail[comma..])
}

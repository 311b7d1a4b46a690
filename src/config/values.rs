//! Checks and conversions of single values that every section uses: numbers with a
//! floor, paths, URLs, environment variable names, argv lists. A leaf: it imports only
//! the diagnostics and field paths, never a section.

use std::path::{Component, Path, PathBuf};

use serde_yaml::Value;

use super::diagnostic::Problems;
use super::locate::FieldPath;

/// `base` joined with `rel` unless `rel` is absolute, without `.` components, and with
/// `..` folded into the component before it (`pipelines/../state` is shown and used as
/// `state`). Folding is lexical, like a person reads the path; a `..` that would climb
/// above the start of a relative path is kept.
pub(crate) fn resolve(base: &Path, rel: &str) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    let joined = base.join(rel);
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            Component::ParentDir if matches!(out.last(), Some(Component::RootDir)) => {}
            other => out.push(other),
        }
    }
    out.iter().collect()
}

/// A number that must be at least `min`; returns it (or `default` when absent).
pub(crate) fn at_least<T: Copy + PartialOrd + std::fmt::Display>(
    problems: &mut Problems,
    path: &FieldPath,
    value: Option<T>,
    default: T,
    min: T,
) -> T {
    let v = value.unwrap_or(default);
    if v < min {
        problems.at_value(path, format!("expected a whole number >= {min}, found {v}"));
    }
    v
}

/// `value` with a leading `~` (the whole value) or `~/` replaced by `home`; `None` when
/// it needs a home and there is none. `~user` forms are left alone.
pub(crate) fn expand_home(value: &str, home: Option<&Path>) -> Option<String> {
    let rest = if value == "~" {
        ""
    } else if let Some(rest) = value.strip_prefix("~/") {
        rest
    } else {
        return Some(value.to_string());
    };
    let home = home.filter(|h| !h.as_os_str().is_empty())?;
    Some(if rest.is_empty() {
        home.to_string_lossy().into_owned()
    } else {
        home.join(rest).to_string_lossy().into_owned()
    })
}

/// [`expand_home`] with the process's `$HOME`, recording a problem when it is needed
/// and not set (the value is then kept as written).
pub(crate) fn expand_home_or_report(
    problems: &mut Problems,
    path: &FieldPath,
    value: &str,
) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    expand_home(value, home.as_deref()).unwrap_or_else(|| {
        problems.at_value(
            path,
            format!("{value:?} starts with `~`, which expands to $HOME, but $HOME is not set; write the full path"),
        );
        value.to_string()
    })
}

/// A path value: non-empty, a leading `~`/`~/` expanded to `$HOME`, resolved against `base`.
pub(crate) fn path_value(
    problems: &mut Problems,
    path: &FieldPath,
    value: Option<String>,
    default: &str,
    base: &Path,
) -> PathBuf {
    let v = value.unwrap_or_else(|| default.to_string());
    if v.trim().is_empty() {
        problems.at_value(path, "expected a directory path, found an empty string");
    }
    let v = expand_home_or_report(problems, path, &v);
    resolve(base, &v)
}

/// An `http://` or `https://` URL with a host.
pub(crate) fn check_url(problems: &mut Problems, path: &FieldPath, url: &str) {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    if !rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/')) {
        problems.at_value(
            path,
            format!("expected an http:// or https:// URL, found {url:?}"),
        );
    }
}

/// The name of an environment variable holding a secret (the secret itself never
/// goes in the config file).
pub(crate) fn env_name(
    problems: &mut Problems,
    path: &FieldPath,
    name: Option<String>,
    default: &str,
) -> String {
    let name = name.unwrap_or_else(|| default.to_string());
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        problems.at_value(
            path,
            format!(
                "expected the name of an environment variable such as `{default}`, found {name:?}"
            ),
        );
    }
    name
}

/// A scalar as the string an argv element or environment value would hold.
pub(crate) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A command given as argv (never a shell string): at least a non-empty program; a
/// leading `~`/`~/` of the program expands to `$HOME`; a relative program path
/// containing a `/` is resolved against `base`.
pub(crate) fn argv_value(
    problems: &mut Problems,
    path: &FieldPath,
    value: Value,
    base: &Path,
) -> Vec<String> {
    if matches!(&value, Value::Sequence(items) if items.is_empty()) {
        problems.at_value(
            path,
            "expected at least the program to run, found an empty list",
        );
    }
    let mut command = argv_list(problems, path, value);
    if command.first().is_some_and(|p| p.is_empty()) {
        problems.at_value(&path.index(0), "the program must not be an empty string");
    }
    if let Some(program) = command.first_mut() {
        *program = expand_home_or_report(problems, &path.index(0), program);
        if program.contains('/') && Path::new(program.as_str()).is_relative() {
            *program = resolve(base, program).to_string_lossy().into_owned();
        }
    }
    command
}

/// An argv-like list: every item a scalar, kept as text (`agent.extra_args`, and the
/// body of every command).
pub(crate) fn argv_list(problems: &mut Problems, path: &FieldPath, value: Value) -> Vec<String> {
    let mut out = Vec::new();
    match value {
        Value::String(s) => problems.at_value(
            path,
            format!(
                "expected a list of arguments (argv), found the string {s:?}; it is not split by a shell: \
                 write e.g. [\"my-program\", \"--flag\"]"
            ),
        ),
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                match scalar_text(item) {
                    Some(text) => out.push(text),
                    None => problems.at_value(
                        &path.index(i),
                        format!("expected a string argument, found {}", kind_of(item)),
                    ),
                }
            }
        }
        other => problems.at_value(
            path,
            format!("expected a list of arguments (argv), found {}", kind_of(&other)),
        ),
    }
    out
}

/// A short name for the kind of a YAML value, for "expected X, found Y" messages.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_tilde_expands_to_home() {
        let home = Some(Path::new("/home/ada"));
        assert_eq!(expand_home("~", home).unwrap(), "/home/ada");
        assert_eq!(expand_home("~/", home).unwrap(), "/home/ada");
        assert_eq!(
            expand_home("~/work/state", home).unwrap(),
            "/home/ada/work/state"
        );
    }

    #[test]
    fn other_tildes_are_left_alone() {
        let home = Some(Path::new("/home/ada"));
        for value in ["~bob/x", "a/~/b", "state~", "./~", ""] {
            assert_eq!(expand_home(value, home).unwrap(), value);
        }
        assert_eq!(expand_home("plain", None).unwrap(), "plain");
    }

    #[test]
    fn a_tilde_without_a_home_is_refused() {
        assert_eq!(expand_home("~/x", None), None);
        assert_eq!(expand_home("~", Some(Path::new(""))), None);
    }
}

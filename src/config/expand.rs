//! `$VAR` / `${VAR}` expansion in the config's string values (`$$` is a literal `$`).

use serde_yaml::Value;

use super::diagnostic::Problems;
use super::locate::{FieldPath, Locator, Segment};

/// Why a string could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `$NAME` or `${NAME}` names a variable that is not set.
    Unset(String),
    /// `${` without a closing `}`.
    Unclosed,
    /// `${...}` whose content is not a variable name.
    BadName(String),
}

impl ExpandError {
    fn message(&self) -> String {
        match self {
            ExpandError::Unset(name) => format!(
                "environment variable `{name}` is not set; set it, or write `$$` for a literal `$`"
            ),
            ExpandError::Unclosed => {
                "`${` is not closed; expected `${NAME}` (write `$$` for a literal `$`)".to_string()
            }
            ExpandError::BadName(inner) => format!(
                "`${{{inner}}}` is not a variable reference; expected `${{NAME}}` with NAME made of letters, digits and `_`"
            ),
        }
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expand `$NAME`, `${NAME}` and `$$` in `text`. A `$` followed by anything else is kept as is.
pub(crate) fn expand_str(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(braced) = after.strip_prefix('{') {
            let close = braced.find('}').ok_or(ExpandError::Unclosed)?;
            let name = &braced[..close];
            let valid =
                name.chars().next().is_some_and(is_name_start) && name.chars().all(is_name_char);
            if !valid {
                return Err(ExpandError::BadName(name.to_string()));
            }
            out.push_str(&env(name).ok_or_else(|| ExpandError::Unset(name.to_string()))?);
            rest = &braced[close + 1..];
        } else if after.chars().next().is_some_and(is_name_start) {
            let len = after
                .find(|c: char| !is_name_char(c))
                .unwrap_or(after.len());
            let name = &after[..len];
            out.push_str(&env(name).ok_or_else(|| ExpandError::Unset(name.to_string()))?);
            rest = &after[len..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Expand every string value under `value` (mapping keys are left alone), recording a
/// problem per string that cannot be expanded. A plain (unquoted) scalar whose expansion is a
/// whole number becomes a number, so `timeout_seconds: ${AGENT_TIMEOUT}` works. `path` is
/// the value's path; it is extended and restored in place, so the walk stays linear.
pub(crate) fn expand_tree(
    value: &mut Value,
    path: &mut FieldPath,
    locator: &Locator,
    env: &dyn Fn(&str) -> Option<String>,
    problems: &mut Problems,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand_str(s, env) {
            Ok(expanded) if expanded == *s => {}
            Ok(expanded) => {
                let number = if locator.is_plain(path) {
                    let unsigned = expanded.parse::<u64>().ok().map(Value::from);
                    unsigned.or_else(|| expanded.parse::<i64>().ok().map(Value::from))
                } else {
                    None
                };
                *value = number.unwrap_or(Value::String(expanded));
            }
            Err(err) => problems.at_value(path, err.message()),
        },
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.0.push(Segment::Index(i));
                expand_tree(item, path, locator, env, problems);
                path.0.pop();
            }
        }
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let name = match k {
                    Value::String(name) => name.clone(),
                    _ => "?".to_string(),
                };
                path.0.push(Segment::Key(name));
                expand_tree(v, path, locator, env, problems);
                path.0.pop();
            }
        }
        Value::Tagged(tagged) => expand_tree(&mut tagged.value, path, locator, env, problems),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/ada".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_both_forms_and_keeps_literal_dollars() {
        assert_eq!(expand_str("$HOME/x", &env).unwrap(), "/home/ada/x");
        assert_eq!(expand_str("${HOME}x", &env).unwrap(), "/home/adax");
        assert_eq!(expand_str("cost $$5 and $", &env).unwrap(), "cost $5 and $");
        assert_eq!(expand_str("a${EMPTY}b", &env).unwrap(), "ab");
        assert_eq!(expand_str("echo $1", &env).unwrap(), "echo $1");
        assert_eq!(expand_str("$$HOME", &env).unwrap(), "$HOME");
    }

    #[test]
    fn names_the_unset_variable_and_malformed_references() {
        assert_eq!(
            expand_str("$NOPE/x", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(
            expand_str("${NOPE}", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(expand_str("${HOME", &env), Err(ExpandError::Unclosed));
        assert_eq!(
            expand_str("${HO ME}", &env),
            Err(ExpandError::BadName("HO ME".into()))
        );
        assert_eq!(
            expand_str("${}", &env),
            Err(ExpandError::BadName(String::new()))
        );
    }
}

//! The `hooks:` section: event selection, filters, the command or webhook target, limits.

use std::path::Path;

use serde_yaml::Value;

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{HookConfig, HookEvents, HookOutcome, HookTarget, Stage};
use super::raw::{RawHook, RawOutcome};
use super::values::{argv_value, at_least, check_url, env_name, kind_of};
use crate::events::EVENT_NAMES;

/// Default timeout of a command hook, seconds.
pub(crate) const DEFAULT_COMMAND_TIMEOUT: u64 = 30;
/// Default timeout of a webhook, seconds.
pub(crate) const DEFAULT_WEBHOOK_TIMEOUT: u64 = 10;
/// Default attempts of a command hook.
pub(crate) const DEFAULT_COMMAND_ATTEMPTS: u32 = 1;
/// Default attempts of a webhook.
pub(crate) const DEFAULT_WEBHOOK_ATTEMPTS: u32 = 5;

/// Build every hook of `raw` (`None` entries already reported their problem), checking
/// role filters against the roles of `stages`.
pub(crate) fn build_hooks(
    raw: Option<Vec<Option<RawHook>>>,
    stages: &[Stage],
    base: &Path,
    problems: &mut Problems,
) -> Vec<HookConfig> {
    let list = FieldPath::root().key("hooks");
    raw.unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, hook)| build_hook(hook?, &list.index(i), stages, base, problems))
        .collect()
}

fn build_hook(
    raw: RawHook,
    path: &FieldPath,
    stages: &[Stage],
    base: &Path,
    problems: &mut Problems,
) -> Option<HookConfig> {
    let events = event_selection(raw.event, &path.key("event"), problems);
    let (target, default_timeout, default_attempts) = match (raw.command, raw.webhook) {
        (Some(_), Some(_)) => {
            problems.at_key(
                &path.key("webhook"),
                "a hook takes either `command` or `webhook`, not both; write two hooks to get both",
            );
            return None;
        }
        (None, None) => {
            problems.at_value(
                path,
                "missing `command` or `webhook`; expected e.g. `command: [\"./notify.sh\"]` or \
                 `webhook: \"https://example.com/sortie\"`",
            );
            return None;
        }
        (Some(command), None) => {
            if raw.secret_env.is_some() {
                problems.at_key(
                    &path.key("secret_env"),
                    "`secret_env` signs webhooks; a command hook takes no secret",
                );
            }
            let argv = argv_value(problems, &path.key("command"), command, base);
            (
                HookTarget::Command { argv },
                DEFAULT_COMMAND_TIMEOUT,
                DEFAULT_COMMAND_ATTEMPTS,
            )
        }
        (None, Some(url)) => {
            check_url(problems, &path.key("webhook"), &url);
            let secret_env = raw.secret_env.map(|name| {
                env_name(
                    problems,
                    &path.key("secret_env"),
                    Some(name),
                    "SORTIE_WEBHOOK_SECRET",
                )
            });
            (
                HookTarget::Webhook { url, secret_env },
                DEFAULT_WEBHOOK_TIMEOUT,
                DEFAULT_WEBHOOK_ATTEMPTS,
            )
        }
    };
    let timeout = at_least(
        problems,
        &path.key("timeout_seconds"),
        raw.timeout_seconds,
        default_timeout,
        1,
    );
    let max_attempts = at_least(
        problems,
        &path.key("max_attempts"),
        raw.max_attempts,
        default_attempts,
        1,
    );
    let roles_path = path.key("roles");
    if raw.roles.as_ref().is_some_and(Vec::is_empty) {
        empty_filter(problems, &roles_path, "roles", "role");
    }
    let roles = raw.roles.unwrap_or_default();
    for (i, role) in roles.iter().enumerate() {
        if !stages.is_empty() && !stages.iter().any(|s| &s.role == role) {
            let known: Vec<&str> = stages.iter().map(|s| s.role.as_str()).collect();
            problems.at_value(
                &roles_path.index(i),
                format!(
                    "`{role}` is no stage's role; expected one of: {}",
                    known.join(", ")
                ),
            );
        }
    }
    if raw.outcomes.as_ref().is_some_and(Vec::is_empty) {
        empty_filter(problems, &path.key("outcomes"), "outcomes", "outcome");
    }
    let outcomes = raw
        .outcomes
        .unwrap_or_default()
        .into_iter()
        .map(|o| match o {
            RawOutcome::Success => HookOutcome::Success,
            RawOutcome::Failure => HookOutcome::Failure,
            RawOutcome::Question => HookOutcome::Question,
        })
        .collect();
    Some(HookConfig {
        events: events?,
        roles,
        outcomes,
        target,
        timeout: std::time::Duration::from_secs(timeout),
        max_attempts,
    })
}

/// A filter written as `[]` would match nothing; leaving the key out means "every".
fn empty_filter(problems: &mut Problems, path: &FieldPath, key: &str, what: &str) {
    problems.at_value(
        path,
        format!("expected at least one {what}, found an empty list; leave `{key}` out to receive every {what}"),
    );
}

/// `event:`: one name, a list of names, or `"*"`.
fn event_selection(value: Value, path: &FieldPath, problems: &mut Problems) -> Option<HookEvents> {
    match value {
        Value::String(s) if s == "*" => Some(HookEvents::All),
        Value::String(s) => known_event(&s, path, problems).then(|| HookEvents::Named(vec![s])),
        Value::Sequence(items) => {
            if items.is_empty() {
                problems.at_value(
                    path,
                    "expected at least one event name, found an empty list; write \"*\" for every event",
                );
                return None;
            }
            let mut names = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let at = path.index(i);
                match item {
                    Value::String(s) if s == "*" => {
                        problems.at_value(
                            &at,
                            "\"*\" selects every event and must stand alone: write `event: \"*\"`",
                        );
                        ok = false;
                    }
                    Value::String(s) => {
                        ok &= known_event(s, &at, problems);
                        names.push(s.clone());
                    }
                    other => {
                        problems.at_value(
                            &at,
                            format!("expected an event name, found {}", kind_of(other)),
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some(HookEvents::Named(names))
        }
        other => {
            problems.at_value(
                path,
                format!(
                    "expected an event name, a list of event names, or \"*\", found {}",
                    kind_of(&other)
                ),
            );
            None
        }
    }
}

/// Whether `name` is an event sortie fires; records a problem naming the closest one if not.
fn known_event(name: &str, path: &FieldPath, problems: &mut Problems) -> bool {
    if EVENT_NAMES.contains(&name) {
        return true;
    }
    let mut message = format!("unknown event `{name}`");
    let best = EVENT_NAMES
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((score, known)) = best {
        if score >= 0.8 {
            message.push_str(&format!("; did you mean `{known}`?"));
        }
    }
    let list = EVENT_NAMES
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    message.push_str(&format!(" (expected one of: {list}, or \"*\")"));
    problems.at_value(path, message);
    false
}

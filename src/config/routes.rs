//! A stage's `routes:`: ordered conditions on a ticket that pick other agent settings and
//! optionally another prompt template for one run; the first route whose condition holds
//! wins, no match runs the stage's defaults.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_yaml::Value;

use super::agent::{agent_preset, check_preset_options};
use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{AcpPermissions, AgentConfig, AgentPreset, TicketFilter};
use super::raw::{RawAgent, RawFilter};
use super::values::{argv_list, argv_value, expand_home_or_report, kind_of, resolve, scalar_text};

/// One entry of a stage's `routes:`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// What the route is called in outcome blocks, run history and reports. Default:
    /// none (the route is then named by its index in `routes`, from 0).
    pub name: Option<String>,
    /// Which tickets take the route: labels all required, excluded labels none present,
    /// assignee (`me` is the tracker identity). Required, with at least one key.
    pub when: TicketFilter,
    /// Agent settings replacing the stage's for a run on this route. Default: none
    /// (every setting is the stage's).
    pub agent: AgentOverrides,
    /// The prompt template of a run on this route (absolute after loading; its front
    /// matter may override agent settings like a role file's). Default: the stage's
    /// `roles/<role>.md`.
    pub role_file: Option<PathBuf>,
}

impl Route {
    /// How the route taken by a run is recorded: its name, or its index in `routes`.
    pub fn label(&self, index: usize) -> String {
        self.name.clone().unwrap_or_else(|| index.to_string())
    }
}

/// The `agent:` keys a route sets; every one not set keeps the stage's value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AgentOverrides {
    /// Replaces the preset. A switch to a CLI preset without a `command` runs the
    /// preset's own program.
    pub preset: Option<AgentPreset>,
    /// Replaces the argv (program resolved like `agent.command`).
    pub command: Option<Vec<String>>,
    /// Replaces `model`.
    pub model: Option<String>,
    /// Replaces `permission_mode`.
    pub permission_mode: Option<String>,
    /// Replaces `max_turns`.
    pub max_turns: Option<u32>,
    /// Replaces `allowed_tools`.
    pub allowed_tools: Option<Vec<String>>,
    /// Replaces `sandbox`.
    pub sandbox: Option<String>,
    /// Replaces `extra_args`.
    pub extra_args: Option<Vec<String>>,
    /// Replaces `timeout_seconds`.
    pub timeout: Option<Duration>,
    /// Replaces `stall_timeout_seconds`; `Some(None)` (0 in the file) disables it.
    pub stall_timeout: Option<Option<Duration>>,
    /// Replaces `handshake_timeout_seconds` (preset `acp`).
    pub handshake_timeout: Option<Duration>,
    /// Added to (and overriding) the stage's environment.
    pub env: BTreeMap<String, String>,
    /// Replaces `resume`.
    pub resume: Option<bool>,
    /// Replaces `allow_permission_denials`.
    pub allow_permission_denials: Option<bool>,
    /// Replaces `permissions` (preset `acp`).
    pub permissions: Option<AcpPermissions>,
}

impl AgentOverrides {
    /// `agent` with these overrides applied.
    pub fn apply(&self, agent: &AgentConfig) -> AgentConfig {
        let mut out = agent.clone();
        out.override_program(self.preset, self.command.as_deref());
        for (value, slot) in [
            (&self.model, &mut out.model),
            (&self.permission_mode, &mut out.permission_mode),
            (&self.sandbox, &mut out.sandbox),
        ] {
            if value.is_some() {
                slot.clone_from(value);
            }
        }
        if self.max_turns.is_some() {
            out.max_turns = self.max_turns;
        }
        if let Some(tools) = &self.allowed_tools {
            out.allowed_tools = tools.clone();
        }
        if let Some(args) = &self.extra_args {
            out.extra_args = args.clone();
        }
        if let Some(timeout) = self.timeout {
            out.timeout = timeout;
        }
        if let Some(stall) = self.stall_timeout {
            out.stall_timeout = stall;
        }
        if let Some(handshake) = self.handshake_timeout {
            out.handshake_timeout = handshake;
        }
        out.env.extend(self.env.clone());
        if let Some(resume) = self.resume {
            out.resume = resume;
        }
        if let Some(allow) = self.allow_permission_denials {
            out.allow_permission_denials = allow;
        }
        if let Some(permissions) = self.permissions {
            out.permissions = permissions;
        }
        out
    }
}

/// One entry of `routes:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoute {
    pub(crate) name: Option<String>,
    pub(crate) when: RawWhen,
    pub(crate) agent: Option<RawAgent>,
    pub(crate) role_file: Option<String>,
}

/// A route's `when:`: the filter keys that say something about one ticket.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWhen {
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) exclude_labels: Option<Vec<String>>,
    pub(crate) assignee: Option<String>,
}

/// Build a stage's routes (found at `path`), recording every problem. `preset` is the
/// preset of `agent:`, against which a route's preset options are checked when the route
/// names no preset of its own; `base` is the config file's directory.
pub(super) fn build_routes(
    raw: Option<Vec<RawRoute>>,
    path: &FieldPath,
    preset: AgentPreset,
    base: &Path,
    problems: &mut Problems,
) -> Vec<Route> {
    let mut routes: Vec<Route> = Vec::new();
    for (i, raw) in raw.unwrap_or_default().into_iter().enumerate() {
        let here = path.index(i);
        if let Some(name) = &raw.name {
            check_name(problems, &here.key("name"), name);
            if let Some(j) = routes
                .iter()
                .position(|r| r.name.as_deref() == Some(name.as_str()))
            {
                problems.at_value(
                    &here.key("name"),
                    format!("route `{name}` is already routes[{j}]; route names must be unique in a stage"),
                );
            }
        }
        let when_path = here.key("when");
        let when = super::tracker::normalize_filter(
            Some(RawFilter {
                labels: raw.when.labels,
                exclude_labels: raw.when.exclude_labels,
                assignee: raw.when.assignee,
                project: None,
            }),
            &when_path,
            false,
            problems,
        );
        if when.is_empty() {
            problems.at_value(
                &when_path,
                "a route needs a condition (`labels`, `exclude_labels` or `assignee`); \
                 one that holds for every ticket would hide the stage's defaults",
            );
        }
        let agent = raw
            .agent
            .map(|a| overrides(a, &here.key("agent"), preset, base, problems))
            .unwrap_or_default();
        let role_file = raw.role_file.map(|file| {
            let p = here.key("role_file");
            if file.trim().is_empty() {
                problems.at_value(
                    &p,
                    "expected a path to a prompt template, found an empty string",
                );
            }
            resolve(base, &expand_home_or_report(problems, &p, &file))
        });
        routes.push(Route {
            name: raw.name,
            when,
            agent,
            role_file,
        });
    }
    routes
}

/// A route name: it is written into outcome blocks and run history, and must not look
/// like the index that names an unnamed route.
fn check_name(problems: &mut Problems, path: &FieldPath, name: &str) {
    let mut chars = name.chars();
    let first = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !(first && rest) {
        problems.at_value(
            path,
            format!(
                "route name {name:?} is not valid; expected lowercase letters, digits, `_` and `-`, \
                 starting with a letter (e.g. `hard`)"
            ),
        );
    }
}

/// A route's `agent:` keys, each checked as `agent:` checks it.
fn overrides(
    raw: RawAgent,
    path: &FieldPath,
    default_preset: AgentPreset,
    base: &Path,
    problems: &mut Problems,
) -> AgentOverrides {
    let preset = match &raw.preset {
        None => None,
        Some(value) => agent_preset(problems, &path.key("preset"), Some(value)),
    };
    if raw.preset.is_none() || preset.is_some() {
        check_preset_options(&raw, preset.unwrap_or(default_preset), path, problems);
    }
    if preset == Some(AgentPreset::Command) && raw.command.is_none() {
        problems.at_key(
            &path.key("preset"),
            "preset `command` needs a `command` (the agent's argv) in the route",
        );
    }
    if let Some(Value::Mapping(_)) = &raw.sandbox {
        problems.at_value(
            &path.key("sandbox"),
            "a route sets only Codex's `--sandbox` (a string such as `workspace-write`); \
             bubblewrap settings belong to `agent.sandbox` and apply to every route",
        );
    }
    let command = raw
        .command
        .map(|value| argv_value(problems, &path.key("command"), value, base));
    let extra_args = raw
        .extra_args
        .map(|value| argv_list(problems, &path.key("extra_args"), value));
    if raw.timeout_seconds == Some(0) {
        problems.at_value(
            &path.key("timeout_seconds"),
            "expected a whole number >= 1, found 0",
        );
    }
    let mut env = BTreeMap::new();
    for (name, value) in raw.env.unwrap_or_default() {
        let p = path.key("env").key(&name);
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            problems.at_key(
                &p,
                format!("{name:?} is not a valid environment variable name"),
            );
        }
        match scalar_text(&value) {
            Some(text) => {
                env.insert(name, text);
            }
            None => problems.at_value(
                &p,
                format!("expected a string value, found {}", kind_of(&value)),
            ),
        }
    }
    AgentOverrides {
        preset,
        command,
        model: raw.model,
        permission_mode: raw.permission_mode,
        max_turns: raw.max_turns,
        allowed_tools: raw.allowed_tools,
        sandbox: super::agent::codex_sandbox(raw.sandbox.as_ref()),
        extra_args,
        timeout: raw.timeout_seconds.map(Duration::from_secs),
        stall_timeout: raw
            .stall_timeout_seconds
            .map(|s| (s > 0).then(|| Duration::from_secs(s))),
        handshake_timeout: raw.handshake_timeout_seconds.map(|s| {
            let path = path.key("handshake_timeout_seconds");
            Duration::from_secs(crate::config::values::at_least(
                problems,
                &path,
                Some(s),
                1,
                1,
            ))
        }),
        env,
        resume: raw.resume,
        allow_permission_denials: raw.allow_permission_denials,
        permissions: super::agent::acp_permissions(
            problems,
            &path.key("permissions"),
            raw.permissions.as_deref(),
        ),
    }
}

/// The preset `agent:` names, read quietly (its problems are reported with `agent:`).
pub(super) fn written_preset(agent: Option<&RawAgent>) -> AgentPreset {
    match agent.and_then(|a| a.preset.as_ref()) {
        Some(Value::String(name)) => AgentPreset::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .unwrap_or_default(),
        _ => AgentPreset::default(),
    }
}

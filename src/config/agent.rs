//! The `agent:` section: preset, argv, preset options, limits and environment, validated.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_yaml::Value;

use super::defaults::{DEFAULT_HANDSHAKE_SECONDS, DEFAULT_STALL_SECONDS, DEFAULT_TIMEOUT_SECONDS};
use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{AcpPermissions, AgentConfig, AgentPreset};
use super::raw::RawAgent;
use super::values::{argv_list, argv_value, at_least, kind_of, scalar_text};

/// Build `AgentConfig` from the raw section, recording every problem; `base` is the directory
/// a relative program path resolves against.
pub(super) fn normalize_agent(
    agent: Option<RawAgent>,
    base: &Path,
    problems: &mut Problems,
) -> Option<AgentConfig> {
    let path = FieldPath::root().key("agent");
    let Some(agent) = agent else {
        problems.at(
            super::locate::Position::START,
            &path,
            "missing required key `agent`; expected e.g. `agent: {command: [\"my-agent\", \"--flag\"]}`",
        );
        return None;
    };
    let named = agent_preset(problems, &path.key("preset"), agent.preset.as_ref());
    let preset = named.unwrap_or_default();
    if named.is_some() {
        check_preset_options(&agent, preset, &path, problems);
    }
    let cmd_path = path.key("command");
    let command = match (agent.command, preset.default_program()) {
        (None, Some(program)) => vec![program.to_string()],
        // Already reported: the section did not parse, or named no known preset.
        (None, None) if agent.unreadable || named.is_none() => Vec::new(),
        (None, None) => {
            problems.at_key(&path, "missing required key `command`; expected the agent's argv, e.g. [\"my-agent\", \"--flag\"], or a `preset` such as `claude-code`");
            Vec::new()
        }
        (Some(value), _) => argv_value(problems, &cmd_path, value, base),
    };
    let extra_args = match agent.extra_args {
        Some(value) => argv_list(problems, &path.key("extra_args"), value),
        None => Vec::new(),
    };
    let timeout = at_least(
        problems,
        &path.key("timeout_seconds"),
        agent.timeout_seconds,
        DEFAULT_TIMEOUT_SECONDS,
        1,
    );
    let stall = agent.stall_timeout_seconds.unwrap_or(DEFAULT_STALL_SECONDS);
    let handshake = at_least(
        problems,
        &path.key("handshake_timeout_seconds"),
        agent.handshake_timeout_seconds,
        DEFAULT_HANDSHAKE_SECONDS,
        1,
    );
    let mut env = BTreeMap::new();
    for (name, value) in agent.env.unwrap_or_default() {
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
    let bubblewrap = match &agent.sandbox {
        Some(value @ Value::Mapping(_)) => {
            super::sandbox::bubblewrap(value, &path.key("sandbox"), base, problems)
        }
        _ => None,
    };
    Some(AgentConfig {
        preset,
        command,
        model: agent.model,
        permission_mode: agent.permission_mode,
        max_turns: agent.max_turns,
        allowed_tools: agent.allowed_tools.unwrap_or_default(),
        sandbox: codex_sandbox(agent.sandbox.as_ref()),
        bubblewrap,
        extra_args,
        timeout: Duration::from_secs(timeout),
        stall_timeout: (stall > 0).then(|| Duration::from_secs(stall)),
        handshake_timeout: Duration::from_secs(handshake),
        env,
        resume: agent.resume.unwrap_or(true),
        allow_permission_denials: agent.allow_permission_denials.unwrap_or(false),
        permissions: acp_permissions(
            problems,
            &path.key("permissions"),
            agent.permissions.as_deref(),
        )
        .unwrap_or_default(),
    })
}

/// `agent.permissions`: one of the policy names; `None` when absent or unknown (reported).
pub(super) fn acp_permissions(
    problems: &mut Problems,
    path: &FieldPath,
    value: Option<&str>,
) -> Option<AcpPermissions> {
    match AcpPermissions::from_name(value?) {
        Ok(policy) => Some(policy),
        Err(message) => {
            problems.at_value(path, message);
            None
        }
    }
}

/// `agent.preset`: one of the known names; `command` when absent; `None` (reported) otherwise.
pub(super) fn agent_preset(
    problems: &mut Problems,
    path: &FieldPath,
    value: Option<&Value>,
) -> Option<AgentPreset> {
    let known = AgentPreset::ALL
        .iter()
        .map(|p| format!("`{}`", p.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let name = match value {
        None => return Some(AgentPreset::Command),
        Some(Value::String(name)) => name,
        Some(other) => {
            problems.at_value(
                path,
                format!("expected a preset name ({known}), found {}", kind_of(other)),
            );
            return None;
        }
    };
    if let Some(preset) = AgentPreset::ALL.into_iter().find(|p| p.as_str() == name) {
        return Some(preset);
    }
    let mut message = format!("unknown preset `{name}`");
    let closest = AgentPreset::ALL
        .iter()
        .map(|p| (strsim::jaro_winkler(name, p.as_str()), p.as_str()))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((score, best)) = closest {
        if score >= 0.8 {
            message.push_str(&format!("; did you mean `{best}`?"));
        }
    }
    message.push_str(&format!(" (expected one of: {known})"));
    problems.at_value(path, message);
    None
}

/// Which presets take each preset option.
const PRESET_OPTIONS: &[(&str, &[AgentPreset])] = &[
    (
        "model",
        &[
            AgentPreset::ClaudeCode,
            AgentPreset::Codex,
            AgentPreset::Acp,
        ],
    ),
    ("permission_mode", &[AgentPreset::ClaudeCode]),
    ("max_turns", &[AgentPreset::ClaudeCode]),
    ("allowed_tools", &[AgentPreset::ClaudeCode]),
    ("sandbox", &[AgentPreset::Codex]),
    (
        "extra_args",
        &[
            AgentPreset::ClaudeCode,
            AgentPreset::Codex,
            AgentPreset::Acp,
        ],
    ),
    ("permissions", &[AgentPreset::Acp]),
    ("handshake_timeout_seconds", &[AgentPreset::Acp]),
];

/// Codex's `--sandbox` value in `sandbox:`: the string itself, or a mapping's `codex`.
pub(super) fn codex_sandbox(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Mapping(map) => map.get("codex").and_then(scalar_text),
        other => scalar_text(other),
    }
}

/// Codex `--sandbox` values.
const CODEX_SANDBOXES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];

/// Each preset option set must belong to the chosen preset and have the shape its flag takes.
pub(super) fn check_preset_options(
    agent: &RawAgent,
    preset: AgentPreset,
    path: &FieldPath,
    problems: &mut Problems,
) {
    let set = [
        agent.model.is_some(),
        agent.permission_mode.is_some(),
        agent.max_turns.is_some(),
        agent.allowed_tools.is_some(),
        codex_sandbox(agent.sandbox.as_ref()).is_some(),
        agent.extra_args.is_some(),
        agent.permissions.is_some(),
        agent.handshake_timeout_seconds.is_some(),
    ];
    for ((key, presets), _) in PRESET_OPTIONS.iter().zip(set).filter(|(_, set)| *set) {
        if presets.contains(&preset) {
            continue;
        }
        let names = presets
            .iter()
            .map(|p| format!("`{}`", p.as_str()))
            .collect::<Vec<_>>();
        let names = match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.concat(),
        };
        let message = if preset == AgentPreset::Command {
            format!(
                "`{key}` is an option of preset {names}; this agent has preset `command` \
                 (the default): set `preset`, or put the flag in `command` yourself"
            )
        } else {
            format!(
                "`{key}` is an option of preset {names}, not of `{}`",
                preset.as_str()
            )
        };
        problems.at_key(&path.key(key), message);
    }
    if let Some(model) = &agent.model {
        if model.is_empty() || model.starts_with('-') || model.contains(char::is_whitespace) {
            problems.at_value(
                &path.key("model"),
                format!("expected a model name such as `sonnet`, found {model:?}"),
            );
        }
    }
    if let Some(mode) = &agent.permission_mode {
        if mode.is_empty() || !mode.chars().all(|c| c.is_ascii_alphabetic()) {
            problems.at_value(
                &path.key("permission_mode"),
                format!(
                    "expected a Claude Code permission mode such as `acceptEdits`, \
                     `bypassPermissions`, `dontAsk` or `plan`, found {mode:?}"
                ),
            );
        }
    }
    if agent.max_turns == Some(0) {
        problems.at_value(
            &path.key("max_turns"),
            "expected a whole number >= 1, found 0",
        );
    }
    for (i, tool) in agent.allowed_tools.iter().flatten().enumerate() {
        if tool.trim().is_empty() || tool.contains(',') {
            problems.at_value(
                &path.key("allowed_tools").index(i),
                format!(
                    "expected one tool or rule per item, such as `Read` or `Bash(git diff:*)`, \
                     found {tool:?}; items are joined with commas for `--allowedTools`"
                ),
            );
        }
    }
    if let Some(sandbox) = codex_sandbox(agent.sandbox.as_ref()) {
        let at = match &agent.sandbox {
            Some(Value::Mapping(_)) => path.key("sandbox").key("codex"),
            _ => path.key("sandbox"),
        };
        if !CODEX_SANDBOXES.contains(&sandbox.as_str()) {
            problems.at_value(
                &at,
                format!(
                    "unknown sandbox {sandbox:?} (expected one of: `{}`)",
                    CODEX_SANDBOXES.join("`, `")
                ),
            );
        }
    }
}

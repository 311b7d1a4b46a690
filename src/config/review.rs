//! A stage's `review:` checked against the other stages (issue #33): `different_model_from`
//! names another stage's role, and the model each run of the two stages would use (the
//! stage's defaults and every route) is known and differs. Also the one reading of "which
//! model does this argv select", shared with the run that records it in its block.

use std::path::Path;

use serde_yaml::Value;

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{AgentConfig, AgentPreset, Stage};

/// The model an agent argv selects, or `None` when it cannot be told from the argv and
/// environment: the last `--model M` (`--model=M`; for Codex also `-m M` and `-c
/// model=M`) of a Claude Code or Codex argv, else Claude Code's `ANTHROPIC_MODEL`.
/// An argv of preset `command` counts only when its program is `claude` or `codex`.
pub fn model_in_argv(
    preset: AgentPreset,
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let program = argv
        .first()
        .and_then(|p| Path::new(p).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let cli = match preset {
        AgentPreset::ClaudeCode => AgentPreset::ClaudeCode,
        AgentPreset::Codex => AgentPreset::Codex,
        AgentPreset::Acp => AgentPreset::Acp,
        AgentPreset::Command if program == "claude" => AgentPreset::ClaudeCode,
        AgentPreset::Command if program == "codex" => AgentPreset::Codex,
        // Any other program: sortie cannot know what it runs.
        AgentPreset::Command => return None,
    };
    let codex = cli == AgentPreset::Codex;
    let mut found = None;
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        if let Some(m) = word.strip_prefix("--model=") {
            found = Some(m.to_string());
        } else if word == "--model" || (codex && word == "-m") {
            found = words.next().cloned().or(found);
        } else if codex && (word == "-c" || word == "--config") {
            if let Some(m) = words.next().and_then(|kv| config_model(kv)) {
                found = Some(m);
            }
        } else if let Some(kv) = word.strip_prefix("--config=").filter(|_| codex) {
            found = config_model(kv).or(found);
        }
    }
    let from_env = || {
        (cli == AgentPreset::ClaudeCode)
            .then(|| env.get("ANTHROPIC_MODEL").cloned())
            .flatten()
    };
    found.or_else(from_env).filter(|m| !m.trim().is_empty())
}

/// `model=M` of a Codex `-c key=value` override (quotes around `M` dropped).
fn config_model(kv: &str) -> Option<String> {
    let (key, value) = kv.split_once('=')?;
    (key.trim() == "model").then(|| value.trim().trim_matches(['"', '\'']).to_string())
}

/// The model `agent` runs, read from the argv its preset builds: `command`, then
/// `--model agent.model`, then `extra_args` (the order `agent::preset_argv` uses).
pub fn model_of(agent: &AgentConfig) -> Option<String> {
    let mut argv = agent.program_argv();
    if agent.preset != AgentPreset::Command {
        if let Some(model) = &agent.model {
            argv.extend(["--model".to_string(), model.clone()]);
        }
        argv.extend(agent.extra_args.iter().cloned());
    }
    model_in_argv(agent.preset, &argv, &agent.env)
}

/// The agent settings a role file's front matter changes that decide the model: its
/// `preset`, `command`, `model` and `env`, read leniently (the front matter's own
/// problems are reported when the templates load). A file that is missing or has no
/// front matter changes nothing.
#[derive(Debug, Default)]
struct FrontMatterModel {
    preset: Option<AgentPreset>,
    command: Option<Vec<String>>,
    model: Option<String>,
    env: Vec<(String, String)>,
}

impl FrontMatterModel {
    /// Read the front matter of `path`.
    // Config loading reads only the config file otherwise; the model a stage runs is
    // decided by its role file too (that is how two stages get two models), so a check
    // of models that ignored it would refuse every config that differs there.
    fn read(path: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Self::default();
        };
        let Some(rest) = text
            .strip_prefix("---\n")
            .or_else(|| text.strip_prefix("---\r\n"))
        else {
            return Self::default();
        };
        let mut yaml = String::new();
        for line in rest.split_inclusive('\n') {
            if line.trim_end() == "---" {
                let Ok(Value::Mapping(map)) = serde_yaml::from_str::<Value>(&yaml) else {
                    return Self::default();
                };
                let text = |key: &str| map.get(key).and_then(Value::as_str).map(String::from);
                return FrontMatterModel {
                    preset: text("preset")
                        .and_then(|p| AgentPreset::ALL.into_iter().find(|a| a.as_str() == p)),
                    command: map
                        .get("command")
                        .and_then(|c| serde_yaml::from_value(c.clone()).ok()),
                    model: text("model"),
                    env: map
                        .get("env")
                        .and_then(Value::as_mapping)
                        .map(|env| {
                            env.iter()
                                .filter_map(|(k, v)| Some((k.as_str()?.into(), v.as_str()?.into())))
                                .collect()
                        })
                        .unwrap_or_default(),
                };
            }
            yaml.push_str(line);
        }
        Self::default()
    }

    /// `agent` with these settings applied, as `RoleSettings::apply` applies them.
    fn apply(&self, agent: &AgentConfig) -> AgentConfig {
        let mut out = agent.clone();
        out.override_program(self.preset, self.command.as_deref());
        if self.model.is_some() {
            out.model.clone_from(&self.model);
        }
        out.env.extend(self.env.iter().cloned());
        out
    }
}

/// One way a stage runs: its defaults (`route` none) or one of its routes.
pub(super) struct StageRun {
    /// `role` or `role route NAME`, as messages name it.
    pub(super) who: String,
    /// The model it runs, when that can be told.
    pub(super) model: Option<String>,
    /// The preset it runs (what its stream reports: a cost, tokens, nothing).
    pub(super) preset: AgentPreset,
}

/// Each way `stage` runs and the model of each: `agent`, then the front matter of
/// `roles_dir/<role>.md`, then a route's `role_file` front matter and `agent:` keys.
pub(super) fn runs_of(stage: &Stage, agent: &AgentConfig, roles_dir: &Path) -> Vec<StageRun> {
    let own = FrontMatterModel::read(&roles_dir.join(format!("{}.md", stage.role))).apply(agent);
    let mut runs = vec![StageRun {
        who: format!("`{}`", stage.role),
        model: model_of(&own),
        preset: own.preset,
    }];
    for (i, route) in stage.routes.iter().enumerate() {
        let base = match &route.role_file {
            Some(file) => FrontMatterModel::read(file).apply(&own),
            None => own.clone(),
        };
        let agent = route.agent.apply(&base);
        runs.push(StageRun {
            who: format!("`{}` route {}", stage.role, route.label(i)),
            model: model_of(&agent),
            preset: agent.preset,
        });
    }
    runs
}

/// Check every stage's `review.different_model_from` against the stage it names,
/// recording a problem at that field: an unknown role, the stage's own role, a model
/// that cannot be told, or the same model on both sides (through any route).
pub(super) fn check_reviews(
    stages: &[Stage],
    agent: Option<&AgentConfig>,
    roles_dir: &Path,
    problems: &mut Problems,
) {
    for (i, stage) in stages.iter().enumerate() {
        let Some(other) = stage
            .review
            .as_ref()
            .and_then(|r| r.different_model_from.as_deref())
        else {
            continue;
        };
        let path = FieldPath::root()
            .key("pipeline_stages")
            .index(i)
            .key("review")
            .key("different_model_from");
        if other == stage.role {
            problems.at_value(
                &path,
                format!(
                    "`{other}` is this stage's own role; expected the role of the stage whose \
                     work this one reviews"
                ),
            );
            continue;
        }
        let Some(target) = stages.iter().find(|s| s.role == other) else {
            let roles: Vec<&str> = stages
                .iter()
                .filter(|s| s.role != stage.role)
                .map(|s| s.role.as_str())
                .collect();
            problems.at_value(
                &path,
                format!(
                    "no stage has role `{other}`; expected one of: {}",
                    roles.join(", ")
                ),
            );
            continue;
        };
        // `agent:` did not load: its own problem is reported already.
        let Some(agent) = agent else { continue };
        if let Some(message) = model_problem(
            &runs_of(stage, agent, roles_dir),
            &runs_of(target, agent, roles_dir),
        ) {
            problems.at_value(&path, message);
        }
    }
}

/// The first reason the reviewing runs and the reviewed runs do not have known, distinct
/// models, or `None` when they all do.
fn model_problem(reviewer: &[StageRun], reviewed: &[StageRun]) -> Option<String> {
    if let Some(unknown) = reviewer.iter().chain(reviewed).find(|r| r.model.is_none()) {
        return Some(format!(
            "cannot tell which model {} uses: set agent.model (or `model` in the role file's \
             front matter or the route's agent), so the two stages can be compared",
            unknown.who
        ));
    }
    for a in reviewer {
        for b in reviewed {
            if a.model == b.model {
                return Some(format!(
                    "{} runs model `{}`, the same as {}; a reviewer on a different model needs \
                     another `model` (in the role file's front matter or a route's agent)",
                    a.who,
                    a.model.as_deref().unwrap_or_default(),
                    b.who
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn the_last_model_flag_wins() {
        let env = BTreeMap::new();
        let got = model_in_argv(
            AgentPreset::ClaudeCode,
            &argv(&["claude", "--model", "haiku", "-p", "--model=opus"]),
            &env,
        );
        assert_eq!(got.as_deref(), Some("opus"));
    }

    #[test]
    fn codex_short_flag_and_config_override_count() {
        let env = BTreeMap::new();
        let short = model_in_argv(AgentPreset::Codex, &argv(&["codex", "-m", "o3"]), &env);
        assert_eq!(short.as_deref(), Some("o3"));
        let config = model_in_argv(
            AgentPreset::Codex,
            &argv(&["codex", "-c", "model=\"gpt-5\"", "exec"]),
            &env,
        );
        assert_eq!(config.as_deref(), Some("gpt-5"));
        // `-m` is not Claude Code's.
        let claude = model_in_argv(AgentPreset::ClaudeCode, &argv(&["claude", "-m", "x"]), &env);
        assert_eq!(claude, None);
    }

    #[test]
    fn a_command_argv_counts_only_for_a_known_cli() {
        let env = BTreeMap::new();
        let known = model_in_argv(
            AgentPreset::Command,
            &argv(&["/usr/bin/claude", "--model", "sonnet"]),
            &env,
        );
        assert_eq!(known.as_deref(), Some("sonnet"));
        let unknown = model_in_argv(
            AgentPreset::Command,
            &argv(&["my-agent", "--model", "sonnet"]),
            &env,
        );
        assert_eq!(unknown, None);
    }

    #[test]
    fn claude_reads_anthropic_model_when_no_flag_names_one() {
        let env = BTreeMap::from([("ANTHROPIC_MODEL".to_string(), "opus".to_string())]);
        let got = model_in_argv(AgentPreset::ClaudeCode, &argv(&["claude", "-p"]), &env);
        assert_eq!(got.as_deref(), Some("opus"));
        let codex = model_in_argv(AgentPreset::Codex, &argv(&["codex", "exec"]), &env);
        assert_eq!(codex, None);
    }
}

//! Role prompt templates (`roles/<role>.md`) and their rendering for one ticket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// A role template that cannot be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The role file is missing or unreadable.
    #[error("cannot read role file {path}: {cause}")]
    Read {
        /// Role file.
        path: PathBuf,
        /// Cause.
        cause: std::io::Error,
    },
    /// The template does not compile, or uses a variable that does not exist.
    #[error("{path}:{line}: {message}")]
    Template {
        /// Role file.
        path: PathBuf,
        /// 1-based line in the role file (front matter included).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A front matter setting has a value it cannot take (said as a config diagnostic is).
    #[error("{path}:{line}:{column}: {field}: {message}")]
    Setting {
        /// Role file.
        path: PathBuf,
        /// 1-based line in the role file.
        line: usize,
        /// 1-based column of the value.
        column: usize,
        /// The front matter key.
        field: String,
        /// What is wrong, and what was expected.
        message: String,
    },
}

/// The variables a role template can use.
#[derive(Debug, Clone, Serialize)]
pub struct PromptContext {
    /// The ticket: id, title, body, url, status, labels, priority.
    pub ticket: TicketVars,
    /// The stage: role, claim_status, in_progress_status, success_status, failure_status.
    pub stage: StageVars,
    /// This run's attempt number (1, 2, ...).
    pub attempt: u32,
    /// Per earlier role: its latest success summary and artifacts.
    pub prior: BTreeMap<String, PriorVars>,
    /// This role's previous failure on the ticket, for retries.
    pub last_failure: Option<FailureVars>,
    /// Work a later stage sent back to this one (`rework.count`, `rework.from_role`,
    /// `rework.failure`); none outside a rework round.
    pub rework: Option<ReworkVars>,
    /// Recent comments by people (not sortie's own), oldest first, bounded.
    pub comments: Vec<CommentVars>,
    /// The pull request reaction this run answers (`reaction.kind`, `.round`,
    /// `.checks`, `.comments`, `.conflict`, `.pull_request`; see docs/reactions.md);
    /// none when the run does not answer one.
    pub reaction: Option<serde_json::Value>,
    /// For a stage with `review:` and `workspace.git`: the change under review
    /// (`review.diff_stat`, `review.diff`, from where the branch left its base to its
    /// head, bounded); none otherwise.
    pub review: Option<ReviewVars>,
    /// For a run that goes on from a question its stage asked on the ticket (issue
    /// #34): the question and its answer (`question.id`, `.question`, `.options`,
    /// `.default`, `.context`, `.answer`, `.answered_by`, `.timed_out`); none otherwise.
    pub question: Option<QuestionVars>,
}

/// A question the stage asked, and the answer it got.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionVars {
    /// The question's id (`<role>-<attempt>-q<n>`).
    pub id: String,
    /// The question itself.
    pub question: String,
    /// The choices it offered.
    pub options: Vec<String>,
    /// Its default, if it had one.
    pub default: Option<String>,
    /// What the agent had found when it asked.
    pub context: String,
    /// The answer.
    pub answer: String,
    /// Who answered (`timeout` when the default was taken at the deadline).
    pub answered_by: String,
    /// Whether nobody answered and the default was taken.
    pub timed_out: bool,
}

impl QuestionVars {
    /// The paragraph a prompt gets when its template says nothing of the question: what
    /// was asked, the answer, and to go on.
    pub fn paragraph(&self) -> String {
        let by = if self.timed_out {
            "nobody answered in time; its default".to_string()
        } else {
            format!("from {}", self.answered_by)
        };
        format!(
            "\n\n# The answer to your question {}\nYou asked: {}\nAnswer ({by}): {}\n\nGo on with the task using this answer, and report your outcome as before.\n",
            self.id,
            self.question.trim(),
            self.answer.trim()
        )
    }
}

/// The change a reviewing stage reviews.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewVars {
    /// `git diff --stat` of the branch against where it left its base.
    pub diff_stat: String,
    /// The diff itself, at most 30,000 characters (a line says what was cut).
    pub diff: String,
}

/// A person's comment visible to templates.
#[derive(Debug, Clone, Serialize)]
pub struct CommentVars {
    /// Who wrote it.
    pub author: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// Markdown body (cut at 4,000 characters).
    pub body: String,
}

/// Per-role overrides from a role file's front matter. Every field is optional;
/// unknown keys are errors.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSettings {
    /// A note for people reading the file; not used.
    pub description: Option<String>,
    /// argv replacing `agent.command` for this role. A relative program path with a
    /// `/` resolves against the role file's directory.
    pub command: Option<Vec<String>>,
    /// Replaces `agent.timeout_seconds`.
    pub timeout_seconds: Option<u64>,
    /// Replaces `agent.stall_timeout_seconds` (0 disables).
    pub stall_timeout_seconds: Option<u64>,
    /// Added to (and overriding) `agent.env`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replaces `agent.preset` (`command`, `claude-code`, `codex`, `acp`).
    pub preset: Option<String>,
    /// Replaces `agent.model`.
    pub model: Option<String>,
    /// Replaces `agent.permission_mode` (claude-code).
    pub permission_mode: Option<String>,
    /// Replaces `agent.max_turns` (claude-code).
    pub max_turns: Option<u32>,
    /// Replaces `agent.allowed_tools` (claude-code).
    pub allowed_tools: Option<Vec<String>>,
    /// Replaces `agent.sandbox` (codex).
    pub sandbox: Option<String>,
    /// Replaces `agent.allow_permission_denials` (claude-code).
    pub allow_permission_denials: Option<bool>,
    /// Replaces `agent.permissions` (acp).
    pub permissions: Option<crate::config::AcpPermissions>,
}

impl RoleSettings {
    /// The agent settings of a run of this role: `agent` with this role's overrides.
    /// A role that switches to a CLI preset without naming a `command` runs the preset's
    /// own program.
    pub fn apply(&self, agent: &crate::config::AgentConfig) -> crate::config::AgentConfig {
        use crate::config::AgentPreset;
        let mut agent = agent.clone();
        agent.override_program(
            self.preset
                .as_deref()
                .and_then(|p| AgentPreset::ALL.into_iter().find(|a| a.as_str() == p)),
            self.command.as_deref(),
        );
        agent.env.extend(self.env.clone());
        if let Some(secs) = self.timeout_seconds {
            agent.timeout = std::time::Duration::from_secs(secs);
        }
        match self.stall_timeout_seconds {
            Some(0) => agent.stall_timeout = None,
            Some(secs) => agent.stall_timeout = Some(std::time::Duration::from_secs(secs)),
            None => {}
        }
        for (value, slot) in [
            (&self.model, &mut agent.model),
            (&self.permission_mode, &mut agent.permission_mode),
            (&self.sandbox, &mut agent.sandbox),
        ] {
            if value.is_some() {
                slot.clone_from(value);
            }
        }
        if self.max_turns.is_some() {
            agent.max_turns = self.max_turns;
        }
        if let Some(tools) = &self.allowed_tools {
            agent.allowed_tools = tools.clone();
        }
        if let Some(allow) = self.allow_permission_denials {
            agent.allow_permission_denials = allow;
        }
        if let Some(permissions) = self.permissions {
            agent.permissions = permissions;
        }
        agent
    }
}

/// Ticket fields visible to templates.
#[derive(Debug, Clone, Serialize)]
pub struct TicketVars {
    /// Id.
    pub id: String,
    /// Title.
    pub title: String,
    /// Markdown body.
    pub body: String,
    /// Link, or empty.
    pub url: String,
    /// Current status.
    pub status: String,
    /// Labels.
    pub labels: Vec<String>,
    /// Priority, if any.
    pub priority: Option<i64>,
    /// Who the ticket is assigned to, as the tracker names people.
    pub assignees: Vec<String>,
    /// When the ticket was created (RFC 3339, UTC).
    pub created_at: String,
    /// When the ticket last changed, as the tracker reports it (RFC 3339, UTC).
    pub updated_at: String,
    /// The tickets blocking this one (`id`, `status`, `closed`), as the tick read them;
    /// empty when there are none or blockers are not read (`tracker.blockers: off`).
    pub blockers: Vec<crate::tracker::Blocker>,
}

impl TicketVars {
    /// Every normalized field of `ticket` a template can use.
    pub fn of(ticket: &crate::tracker::Ticket) -> Self {
        let instant = |t: &chrono::DateTime<chrono::Utc>| {
            t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        };
        TicketVars {
            id: ticket.id.clone(),
            title: ticket.title.clone(),
            body: ticket.body.clone(),
            url: ticket.url.clone().unwrap_or_default(),
            status: ticket.status.clone(),
            labels: ticket.labels.clone(),
            priority: ticket.priority,
            assignees: ticket.assignees.clone(),
            created_at: instant(&ticket.created_at),
            updated_at: instant(&ticket.updated_at),
            blockers: ticket.blocked_by.clone().unwrap_or_default(),
        }
    }
}

/// Stage fields visible to templates.
#[derive(Debug, Clone, Serialize)]
pub struct StageVars {
    /// Role.
    pub role: String,
    /// Claim status.
    pub claim_status: String,
    /// In-progress status, or none.
    pub in_progress_status: Option<String>,
    /// Success status, or none.
    pub success_status: Option<String>,
    /// Failure status, or none.
    pub failure_status: Option<String>,
}

/// An earlier role's latest success.
#[derive(Debug, Clone, Serialize)]
pub struct PriorVars {
    /// Its summary.
    pub summary: String,
    /// Its artifacts.
    pub artifacts: BTreeMap<String, String>,
    /// What sortie observed of that run (its checks, the change, the model), when
    /// anything (`prior.<role>.evidence.checks`, ...).
    pub evidence: Option<crate::block::Evidence>,
}

/// This role's previous failure.
#[derive(Debug, Clone, Serialize)]
pub struct FailureVars {
    /// Attempt that failed.
    pub attempt: u32,
    /// Reason code.
    pub reason_code: String,
    /// Detail.
    pub detail: String,
}

/// Work sent back to this stage by a later one.
#[derive(Debug, Clone, Serialize)]
pub struct ReworkVars {
    /// Which round: 1 the first time the work came back.
    pub count: u32,
    /// The role that sent it back.
    pub from_role: String,
    /// That role's failure: attempt, reason code, detail.
    pub failure: FailureVars,
}

/// Every prompt template a config's runs read, by the name it is loaded under: each
/// stage's `roles/<role>.md`, then each route's `role_file`. The daemon watches these
/// files, so an edit to any of them reaches the next run without a restart.
pub fn template_files(config: &crate::config::Config) -> Vec<(String, PathBuf)> {
    let roles = config.stages.iter().map(|s| {
        (
            s.role.clone(),
            config.roles_dir.join(format!("{}.md", s.role)),
        )
    });
    let routes = config
        .stages
        .iter()
        .flat_map(|s| s.routes.iter().filter_map(|r| r.role_file.clone()))
        .map(|path| (route_key(&path), path));
    roles.chain(routes).collect()
}

/// The compiled prompt templates of every role in a pipeline.
#[derive(Debug)]
pub struct RoleTemplates {
    env: Environment<'static>,
    paths: BTreeMap<String, (PathBuf, usize)>,
    settings: BTreeMap<String, RoleSettings>,
}

impl RoleTemplates {
    /// Load and compile `roles_dir/<role>.md` for each role. Every problem is an error
    /// naming the file and line, before anything runs.
    pub fn load<'a>(
        roles_dir: &Path,
        roles: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, PromptError> {
        let files = roles
            .into_iter()
            .map(|role| (role.to_string(), roles_dir.join(format!("{role}.md"))));
        Self::load_files(files)
    }

    /// Load the templates a config's runs use: each stage's `roles/<role>.md`, then each
    /// route's `role_file`, so a route whose file is missing or does not render is
    /// refused before anything runs.
    pub fn for_config(config: &crate::config::Config) -> Result<Self, PromptError> {
        Self::load_files(template_files(config))
    }

    /// Load and compile each `(name, file)`; a name loaded already is skipped.
    fn load_files(files: impl IntoIterator<Item = (String, PathBuf)>) -> Result<Self, PromptError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        let mut paths = BTreeMap::new();
        let mut settings = BTreeMap::new();
        for (name, path) in files {
            if paths.contains_key(&name) {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|cause| PromptError::Read {
                path: path.clone(),
                cause,
            })?;
            let (offset, template) = strip_front_matter(&text);
            settings.insert(name.clone(), parse_settings(&path, &text, offset)?);
            env.add_template_owned(name.clone(), template.to_string())
                .map_err(|e| template_error(&path, offset, &e))?;
            paths.insert(name, (path, offset));
        }
        let templates = RoleTemplates {
            env,
            paths,
            settings,
        };
        templates.check_variables()?;
        Ok(templates)
    }

    /// The front-matter overrides of `role` (defaults when it has none).
    pub fn settings(&self, role: &str) -> RoleSettings {
        self.settings.get(role).cloned().unwrap_or_default()
    }

    /// The agent settings of a run of `stage` on `route` (none: the stage's defaults):
    /// `agent:`, then the front matter of `roles/<role>.md` (the stage's settings), then
    /// the front matter of the route's `role_file`, then the route's own `agent:` keys.
    /// Whatever a later layer does not set falls back to the earlier one.
    pub fn agent_for(
        &self,
        config: &crate::config::Config,
        stage: &crate::config::Stage,
        route: Option<&crate::config::Route>,
    ) -> crate::config::AgentConfig {
        let agent = self.settings(&stage.role).apply(&config.agent);
        let Some(route) = route else {
            return agent;
        };
        let agent = match &route.role_file {
            Some(file) => self.settings(&route_key(file)).apply(&agent),
            None => agent,
        };
        route.agent.apply(&agent)
    }

    /// Each role (or `role route NAME`) whose agent program (after its overrides) is not
    /// found on this machine, with that program, in stage order.
    pub fn missing_programs(&self, config: &crate::config::Config) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for stage in &config.stages {
            let runs = std::iter::once((stage.role.clone(), None)).chain(
                stage
                    .routes
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (format!("{} route {}", stage.role, r.label(i)), Some(r))),
            );
            for (who, route) in runs {
                let agent = self.agent_for(config, stage, route);
                let program = crate::agent::preset_argv(&agent)
                    .first()
                    .cloned()
                    .unwrap_or_default();
                if crate::agent::find_program(&program).is_none() {
                    out.push((who, program));
                }
            }
        }
        out
    }

    /// Render `role`'s prompt for `ctx`.
    pub fn render(&self, role: &str, ctx: &PromptContext) -> Result<String, PromptError> {
        let (path, offset) = self.paths.get(role).cloned().unwrap_or_default();
        let template = self
            .env
            .get_template(role)
            .map_err(|e| template_error(&path, offset, &e))?;
        template
            .render(ctx)
            .map_err(|e| template_error(&path, offset, &e))
    }

    /// Render the prompt of a run of `role` on `route`: the route's `role_file` when it
    /// names one, else the role's own template.
    pub fn render_for(
        &self,
        role: &str,
        route: Option<&crate::config::Route>,
        ctx: &PromptContext,
    ) -> Result<String, PromptError> {
        match route.and_then(|r| r.role_file.as_deref()) {
            Some(file) => self.render(&route_key(file), ctx),
            None => self.render(role, ctx),
        }
    }

    /// Render every template once with a sample context, so an unknown variable is
    /// reported at load time rather than on a ticket.
    fn check_variables(&self) -> Result<(), PromptError> {
        for role in self.paths.keys() {
            let sample = PromptContext::sample(role);
            self.render(role, &sample)?;
        }
        Ok(())
    }
}

impl PromptContext {
    /// A context with every variable present, used to check templates.
    fn sample(role: &str) -> Self {
        PromptContext {
            ticket: TicketVars {
                id: "1".into(),
                title: "title".into(),
                body: "body".into(),
                url: String::new(),
                status: "status".into(),
                labels: vec!["label".into()],
                priority: Some(1),
                assignees: vec!["someone".into()],
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-02T00:00:00Z".into(),
                blockers: vec![crate::tracker::Blocker {
                    id: "2".into(),
                    status: Some("status".into()),
                    closed: false,
                }],
            },
            stage: StageVars {
                role: role.to_string(),
                claim_status: "claim".into(),
                in_progress_status: None,
                success_status: Some("next".into()),
                failure_status: None,
            },
            attempt: 1,
            prior: BTreeMap::new(),
            last_failure: None,
            rework: None,
            comments: Vec::new(),
            reaction: Some(serde_json::json!({
                "kind": "ci_failure",
                "round": 1,
                "max_rounds": 3,
                "detail": "failed: test",
                "pull_request": {"number": 1, "url": "", "head": "sortie/1", "base": "main", "head_sha": "0"},
                "checks": [{"name": "test", "url": null, "summary": "", "details": ""}],
                "comments": [{"id": "1", "author": "a", "path": "f", "line": 1, "body": "", "url": null}],
                "conflict": {"base": "main", "head": "sortie/1", "paths": []},
            })),
            review: Some(ReviewVars {
                diff_stat: " a | 1 +".into(),
                diff: "+a".into(),
            }),
            question: Some(QuestionVars {
                id: format!("{role}-1-q1"),
                question: "question".into(),
                options: vec!["a".into(), "b".into()],
                default: Some("a".into()),
                context: "context".into(),
                answer: "b".into(),
                answered_by: "person".into(),
                timed_out: false,
            }),
        }
    }
}

/// The name a route's template is compiled under: its path, which no role name (a bare
/// word) can equal.
fn route_key(path: &Path) -> String {
    path.display().to_string()
}

/// Split off YAML front matter (`---` ... `---`), returning the number of lines it
/// used and the template text after it.
fn strip_front_matter(text: &str) -> (usize, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (0, text);
    };
    let mut consumed = text.len() - rest.len();
    let mut lines = 1;
    for line in rest.split_inclusive('\n') {
        consumed += line.len();
        lines += 1;
        if line.trim_end() == "---" {
            return (lines, &text[consumed..]);
        }
    }
    (0, text)
}

/// Parse the front matter (lines 2 .. `offset - 1` of the file) into role settings.
fn parse_settings(path: &Path, text: &str, offset: usize) -> Result<RoleSettings, PromptError> {
    if offset == 0 {
        return Ok(RoleSettings::default());
    }
    let yaml: String = text
        .split_inclusive('\n')
        .skip(1)
        .take(offset - 2)
        .collect();
    if yaml.trim().is_empty() {
        return Ok(RoleSettings::default());
    }
    check_permissions(path, &yaml)?;
    let mut settings: RoleSettings =
        serde_yaml::from_str(&yaml).map_err(|e| PromptError::Template {
            path: path.to_path_buf(),
            line: 1 + e.location().map_or(1, |l| l.line()),
            message: format!("front matter: {e}"),
        })?;
    if let Some(preset) = &settings.preset {
        let known: Vec<&str> = crate::config::AgentPreset::ALL
            .iter()
            .map(|p| p.as_str())
            .collect();
        if !known.contains(&preset.as_str()) {
            return Err(PromptError::Template {
                path: path.to_path_buf(),
                line: 2,
                message: format!(
                    "front matter: unknown preset `{preset}`; expected one of: {}",
                    known.join(", ")
                ),
            });
        }
        if preset == "command" && settings.command.is_none() {
            return Err(PromptError::Template {
                path: path.to_path_buf(),
                line: 2,
                message: "front matter: preset `command` needs a `command` (the agent's argv)"
                    .to_string(),
            });
        }
    }
    if let Some(command) = &mut settings.command {
        if command.is_empty() {
            return Err(PromptError::Template {
                path: path.to_path_buf(),
                line: 2,
                message: "front matter: command must name a program".to_string(),
            });
        }
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        command[0] = match crate::config::expand_home(&command[0], home.as_deref()) {
            Some(program) => program,
            None => {
                return Err(PromptError::Template {
                    path: path.to_path_buf(),
                    line: 2,
                    message: "front matter: the command starts with `~`, which expands to $HOME, but $HOME is not set".to_string(),
                })
            }
        };
        let program = Path::new(&command[0]);
        if program.is_relative() && command[0].contains('/') {
            let base = path.parent().unwrap_or(Path::new("."));
            command[0] = base.join(program).display().to_string();
        }
    }
    Ok(settings)
}

/// `permissions:` in the front matter `yaml` (lines 2.. of the file) names a policy: a value
/// that does not is reported at its line and column, with the policies there are, as
/// `agent.permissions` is in the config (serde would only say "unknown variant").
fn check_permissions(path: &Path, yaml: &str) -> Result<(), PromptError> {
    let Ok(serde_yaml::Value::Mapping(map)) = serde_yaml::from_str::<serde_yaml::Value>(yaml)
    else {
        // Not a mapping: the settings parse reports it.
        return Ok(());
    };
    let Some(value) = map.get("permissions") else {
        return Ok(());
    };
    let message = match value {
        serde_yaml::Value::String(name) => match crate::config::AcpPermissions::from_name(name) {
            Ok(_) => return Ok(()),
            Err(message) => message,
        },
        other => format!(
            "expected one of: {}, found {}",
            crate::config::AcpPermissions::expected(),
            crate::config::kind_of(other)
        ),
    };
    // The key's own line (a top-level key of the front matter), and its value's column.
    let (line, column) = yaml
        .lines()
        .enumerate()
        .find_map(|(i, text)| {
            let rest = text.strip_prefix("permissions")?.trim_start();
            let after = rest.strip_prefix(':')?;
            let value_at = text.len() - after.trim_start().len();
            Some((i + 2, value_at + 1))
        })
        .unwrap_or((2, 1));
    Err(PromptError::Setting {
        path: path.to_path_buf(),
        line,
        column,
        field: "permissions".to_string(),
        message,
    })
}

fn template_error(path: &Path, offset: usize, err: &minijinja::Error) -> PromptError {
    let mut message = err.kind().to_string();
    if let Some(detail) = err.detail() {
        message = format!("{message}: {detail}");
    }
    PromptError::Template {
        path: path.to_path_buf(),
        line: offset + err.line().unwrap_or(1),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_role(dir: &Path, role: &str, text: &str) {
        std::fs::write(dir.join(format!("{role}.md")), text).unwrap();
    }

    #[test]
    fn a_route_layers_its_file_and_agent_keys_over_the_stages_settings() {
        let dir = tempfile::tempdir().unwrap();
        write_role(
            dir.path(),
            "backend",
            "---\ntimeout_seconds: 1800\nenv: {A: role}\n---\nplain {{ ticket.id }}\n",
        );
        write_role(
            dir.path(),
            "hard",
            "---\nmodel: from-file\nenv: {B: file}\n---\nhard {{ ticket.id }}\n",
        );
        let text = "tracker: {kind: local, path: board}\nroles_dir: .\n\
            agent: {preset: claude-code, model: sonnet, stall_timeout_seconds: 100, env: {A: agent, C: agent}}\n\
            pipeline_stages:\n  - role: backend\n    claim_status: todo\n    success_status: done\n    \
            routes:\n      - {name: hard, when: {labels: [hard]}, agent: {model: opus, env: {B: route}}, role_file: hard.md}\n";
        let config =
            crate::config::Config::parse_str(text, Some(&dir.path().join("pipeline.yaml")))
                .unwrap();
        let t = RoleTemplates::for_config(&config).unwrap();
        let stage = &config.stages[0];
        let route = &stage.routes[0];

        let plain = t.agent_for(&config, stage, None);
        assert_eq!(plain.model.as_deref(), Some("sonnet"));
        assert_eq!(
            plain.timeout.as_secs(),
            1800,
            "the role file's front matter"
        );
        let routed = t.agent_for(&config, stage, Some(route));
        assert_eq!(
            routed.model.as_deref(),
            Some("opus"),
            "the route's key wins"
        );
        assert_eq!(
            routed.timeout.as_secs(),
            1800,
            "not set by the route: the stage's"
        );
        assert_eq!(
            routed.stall_timeout.map(|d| d.as_secs()),
            Some(100),
            "agent:"
        );
        let env: Vec<(&str, &str)> = routed
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(env, [("A", "role"), ("B", "route"), ("C", "agent")]);

        let ctx = PromptContext::sample("backend");
        assert_eq!(t.render_for("backend", None, &ctx).unwrap(), "plain 1\n");
        assert_eq!(
            t.render_for("backend", Some(route), &ctx).unwrap(),
            "hard 1\n"
        );
    }

    #[test]
    fn renders_ticket_fields() {
        let dir = tempfile::tempdir().unwrap();
        write_role(dir.path(), "qa", "---\ndescription: x\n---\nTest {{ ticket.id }}: {{ ticket.title }} (attempt {{ attempt }})\n");
        let t = RoleTemplates::load(dir.path(), ["qa"]).unwrap();
        let mut ctx = PromptContext::sample("qa");
        ctx.ticket.title = "Login {{ not a template }}".into();
        assert_eq!(
            t.render("qa", &ctx).unwrap(),
            "Test 1: Login {{ not a template }} (attempt 1)\n"
        );
    }

    #[test]
    fn unknown_variable_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        write_role(
            dir.path(),
            "qa",
            "---\ndescription: x\n---\nline one\n{{ ticket.nope }}\n",
        );
        let err = RoleTemplates::load(dir.path(), ["qa"]).unwrap_err();
        let PromptError::Template { line, path, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 5, "{err}");
        assert!(path.ends_with("qa.md"));
    }

    #[test]
    fn front_matter_settings_are_read_and_unknown_keys_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_role(
            dir.path(),
            "qa",
            "---\ncommand: [./bin/qa-agent, --fast]\ntimeout_seconds: 60\nenv: {A: b}\n---\nhi\n",
        );
        let t = RoleTemplates::load(dir.path(), ["qa"]).unwrap();
        let s = t.settings("qa");
        assert_eq!(s.timeout_seconds, Some(60));
        assert_eq!(s.env["A"], "b");
        let cmd = s.command.unwrap();
        assert_eq!(
            cmd[0],
            dir.path().join("./bin/qa-agent").display().to_string()
        );
        assert_eq!(cmd[1], "--fast");

        write_role(
            dir.path(),
            "qa",
            "---\ndescription: x\ntimeout_secs: 60\n---\nhi\n",
        );
        let err = RoleTemplates::load(dir.path(), ["qa"]).unwrap_err();
        let PromptError::Template { line, message, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(*line, 3, "{err}");
        assert!(message.contains("timeout_secs"), "{err}");
    }

    #[test]
    fn front_matter_can_switch_the_role_to_a_cli_preset() {
        let dir = tempfile::tempdir().unwrap();
        write_role(
            dir.path(),
            "qa",
            "---\npreset: claude-code\nmodel: opus\nmax_turns: 5\n---\nhi\n",
        );
        let t = RoleTemplates::load(dir.path(), ["qa"]).unwrap();
        let base = crate::config::Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [my-agent, --x]}\nactive_states: [todo]\n",
            None,
        )
        .unwrap()
        .agent;
        let agent = t.settings("qa").apply(&base);
        assert_eq!(agent.preset, crate::config::AgentPreset::ClaudeCode);
        assert_eq!(agent.command, vec!["claude".to_string()]);
        assert_eq!(
            (agent.model.as_deref(), agent.max_turns),
            (Some("opus"), Some(5))
        );

        write_role(dir.path(), "qa", "---\npreset: gemini\n---\nhi\n");
        let err = RoleTemplates::load(dir.path(), ["qa"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown preset `gemini`; expected one of: command, claude-code, codex"),
            "{err}"
        );
    }

    #[test]
    fn missing_role_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = RoleTemplates::load(dir.path(), ["ghost"]).unwrap_err();
        assert!(err.to_string().contains("ghost.md"), "{err}");
    }
}

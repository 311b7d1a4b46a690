//! The validated, normalized configuration the rest of sortie consumes.
//!
//! Produced only by the loader in this module (`Config::load` / `Config::parse_str`):
//! every value here has passed static validation and has its default applied,
//! relative paths are resolved against the config file's directory, and the
//! single-role form has been turned into a one-stage pipeline.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::names::same_name;

/// A complete, validated pipeline configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The config file this came from (`None` when parsed from a string without a path).
    pub source: Option<PathBuf>,
    /// Which board to read and write.
    pub tracker: TrackerConfig,
    /// `tracker.filter`: the tickets sortie may touch at all. Default: every ticket.
    pub filter: TicketFilter,
    /// `tracker.blockers`: whether tracker-native blockers hold tickets back.
    pub blockers: BlockersConfig,
    /// Root of ledger, workspaces and run logs. Default `state` (relative to the config file).
    pub state_root: PathBuf,
    /// `ledger:`: which ledger backend. Default SQLite under `state_root`.
    pub ledger: LedgerConfig,
    /// Directory holding `roles/<role>.md`. Default `roles` (relative to the config file).
    pub roles_dir: PathBuf,
    /// Claim lease length. Default 600 s.
    pub claim_ttl: Duration,
    /// In-flight ceilings.
    pub concurrency: Concurrency,
    /// Statuses that end a ticket's life; never dispatched. Default `[done, cancelled]`... as configured.
    pub terminal_states: Vec<String>,
    /// How to run agents.
    pub agent: AgentConfig,
    /// Retry policy for transient failures.
    pub retry: RetryConfig,
    /// Ordered stages.
    pub stages: Vec<Stage>,
    /// Authors whose outcome blocks count besides sortie's own identity. Default empty.
    pub trusted_authors: Vec<String>,
    /// Per-ticket workspace hooks and pruning.
    pub workspace: WorkspaceConfig,
    /// Shell and webhook hooks fired on pipeline events (`docs/hooks.md`). Default empty.
    pub hooks: Vec<HookConfig>,
    /// Spending limits per run, ticket and day (`budgets:`).
    pub budgets: super::Budgets,
    /// `prices:`: dollars per million tokens by model, for agents that report tokens
    /// without a cost. Default empty.
    pub prices: super::Prices,
    /// Questions agents ask on the ticket (`docs/questions.md`).
    pub questions: QuestionsConfig,
    /// Time between the daemon's ticks (`sortie pipeline run`). Default 30 s.
    pub poll_interval: Duration,
    /// How long the daemon lets live runs finish on shutdown before cancelling them. Default 30 s.
    pub shutdown_grace: Duration,
    /// The daemon's HTTP surface.
    pub http: HttpConfig,
    /// `pull_request:`: open one pull request per ticket branch after a stage's
    /// success (needs `workspace.git` with `push: true`). Default none.
    pub pull_request: Option<PullRequestConfig>,
    /// `reactions:`: what a watched ticket's pull request (CI, reviews, conflicts,
    /// merges) sends back through the stages. Default none (pull requests are not watched).
    pub reactions: Option<super::ReactionsConfig>,
    /// `forge:`: the GitHub, GitLab or Gitea repository pull requests open on, when it
    /// is not the tracker (always one of those three kinds, its label settings at their
    /// defaults and unused). Default none: they open on the tracker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forge: Option<TrackerConfig>,
    /// What loading found valid but probably not meant (a claim status no stage moves
    /// tickets to), positioned in the file; `pipeline validate` prints them.
    #[serde(skip)]
    pub warnings: Vec<super::Diagnostic>,
}

/// `ledger:`: where claims, leases, the outbox and history live.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerConfig {
    /// `<state_root>/ledger.db`, one host (the default).
    #[default]
    Sqlite,
    /// A PostgreSQL database shared by several hosts.
    Postgres {
        /// Environment variable holding the libpq-style URL. Default `SORTIE_LEDGER_URL`.
        url_env: String,
    },
}

/// `filter:`: which tickets sortie may touch; every part optional, all must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TicketFilter {
    /// Labels the ticket must all carry. Default none.
    pub labels: Vec<String>,
    /// Labels the ticket must carry none of. Default none.
    pub exclude_labels: Vec<String>,
    /// Whom the ticket must be assigned to; `me` is the token's own user. Default anyone.
    pub assignee: Option<String>,
    /// The project the ticket must belong to (Linear only). Default any.
    pub project: Option<String>,
}

impl TicketFilter {
    /// Whether the filter lets every ticket through.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.exclude_labels.is_empty()
            && self.assignee.is_none()
            && self.project.is_none()
    }
}

/// `tracker.blockers:`: tracker-native "blocked by" links hold tickets back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockersConfig {
    /// Whether blockers are read. Default: true on the local board, GitHub, Redmine,
    /// Linear and Jira; false on GitLab (opt in); Gitea cannot read them (true is refused).
    pub enabled: Option<bool>,
    /// Blocker reads per tick on trackers that need one request per ticket. Default 20.
    pub max_reads_per_tick: u32,
    /// Jira only: the issue link type whose inward links ("is blocked by") are
    /// blockers. Default `Blocks` (Jira's built-in type); refused on other trackers.
    pub link_type: Option<String>,
}

impl Default for BlockersConfig {
    fn default() -> Self {
        BlockersConfig {
            enabled: None,
            max_reads_per_tick: super::defaults::DEFAULT_BLOCKER_READS_PER_TICK,
            link_type: None,
        }
    }
}

/// `http:`: secrets of the daemon's HTTP surface, each named by an environment variable.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HttpConfig {
    /// Variable holding the bearer token POST endpoints require (none: no token asked).
    pub token_env: Option<String>,
    /// Variable holding the secret GitHub signs webhook deliveries with.
    pub github_webhook_secret_env: Option<String>,
    /// Variable holding the secret token GitLab sends in `X-Gitlab-Token`.
    pub gitlab_webhook_secret_env: Option<String>,
    /// Variable holding the secret Gitea signs webhook deliveries with (`X-Gitea-Signature`).
    pub gitea_webhook_secret_env: Option<String>,
    /// Variable holding the secret Linear signs webhook deliveries with.
    pub linear_webhook_secret_env: Option<String>,
    /// Variable holding the secret a Jira webhook signs deliveries with (`/hooks/jira`).
    pub jira_webhook_secret_env: Option<String>,
}

/// `questions:`: how long a question an agent asked on the ticket waits for a person,
/// and how many one stage may ask (`docs/questions.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionsConfig {
    /// After this long unanswered, a question's `default` is taken (without one the
    /// stage fails with `question.unanswered`). Default none: it waits for good.
    pub timeout: Option<Duration>,
    /// Questions one role may ask on a ticket since its last success; one more is a
    /// `question.limit` failure. Default 3.
    pub max_per_stage: u32,
    /// Where a ticket with an open question waits (a status people filter on); back to
    /// its stage's claim status once answered. Default none: it waits in the claim
    /// status.
    pub waiting_status: Option<String>,
}

/// The default of `questions.max_per_stage`.
pub const DEFAULT_MAX_QUESTIONS_PER_STAGE: u32 = 3;

impl Default for QuestionsConfig {
    fn default() -> Self {
        QuestionsConfig {
            timeout: None,
            max_per_stage: DEFAULT_MAX_QUESTIONS_PER_STAGE,
            waiting_status: None,
        }
    }
}

/// `workspace:`: hooks around a ticket's workspace, and pruning of finished ones.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceConfig {
    /// Commands run at points of a workspace's life.
    pub hooks: WorkspaceHooks,
    /// Kill a hook after this long. Default 60 s.
    pub hook_timeout: Duration,
    /// Prune workspaces of terminal tickets every this many ticks; 0 never. Default 10.
    pub prune_every_ticks: u32,
    /// `workspace.git`: each ticket's workspace is a git worktree on its own branch.
    /// Default none (a plain directory).
    pub git: Option<GitWorkspace>,
}

/// `workspace.git:`: the repository, the base branch and the ticket branch names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitWorkspace {
    /// Where to clone from: a URL git understands, a `file://` URL or a local path
    /// (absolute after loading). Required.
    pub url: String,
    /// The branch a ticket's branch starts from. Default `main`.
    pub base: String,
    /// Template of the ticket's branch name (`{{ ticket.id }}`), sanitized to a valid
    /// ref. Default `sortie/{{ ticket.id }}`.
    pub branch: String,
    /// Push the ticket's branch after every successful run (never forced). Default true.
    pub push: bool,
}

/// `pull_request:`: which stage's success opens the pull request, and how it looks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequestConfig {
    /// The role after whose success the pull request is opened. Required.
    pub after: String,
    /// Title template (`{{ ticket.id }}`, `{{ ticket.title }}`). Default
    /// `{{ ticket.id }}: {{ ticket.title }}`.
    pub title: String,
    /// Open it as a draft. Default true.
    pub draft: bool,
}

/// Workspace hooks: each an argv run in the workspace, none by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkspaceHooks {
    /// After the workspace directory is first created; a failure fails the run.
    pub after_create: Option<Vec<String>>,
    /// Before each run; a failure fails the run as `workspace.hook_failed`.
    pub before_run: Option<Vec<String>>,
    /// After each run; a failure is logged.
    pub after_run: Option<Vec<String>>,
    /// Before a workspace is removed by pruning; a failure is logged.
    pub before_remove: Option<Vec<String>>,
}

/// Which tracker adapter to use and how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TrackerConfig {
    /// The embedded board in plain files.
    Local {
        /// Board directory (absolute after loading).
        path: PathBuf,
    },
    /// GitHub Issues: statuses are labels (`status:<name>`), a closed issue is terminal.
    Github {
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token. Default `GITHUB_TOKEN`.
        token_env: String,
        /// REST API base URL, without a trailing `/`. Default `https://api.github.com`.
        api_url: String,
        /// Prefix of status labels. Default `status:`.
        status_label_prefix: String,
        /// Prefix of priority labels (`priority:1`). Default `priority:`.
        priority_label_prefix: String,
    },
    /// GitLab issues: statuses are labels (`status::<name>`), a closed issue is terminal.
    Gitlab {
        /// Instance URL, without a trailing `/`. Default `https://gitlab.com`.
        url: String,
        /// Project path (`group/sub/repo`) or numeric id.
        project: String,
        /// Environment variable holding the token. Default `GITLAB_TOKEN`.
        token_env: String,
        /// Send the token as `Authorization: Bearer` (OAuth and job tokens) instead of
        /// `PRIVATE-TOKEN`. Default false (`auth: private-token`).
        bearer: bool,
        /// Prefix of status labels. Default `status::` (a scoped label).
        status_label_prefix: String,
        /// Prefix of priority labels. Default `priority::`.
        priority_label_prefix: String,
        /// Statuses whose transition also closes the issue. Default none.
        close_on: Vec<String>,
    },
    /// Gitea or Forgejo issues: statuses are labels (`status/<name>`), closed is terminal.
    Gitea {
        /// Instance URL, without a trailing `/`.
        url: String,
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token. Default `GITEA_TOKEN`.
        token_env: String,
        /// Prefix of status labels. Default `status/`.
        status_label_prefix: String,
        /// Prefix of priority labels. Default `priority/`.
        priority_label_prefix: String,
        /// Statuses whose transition also closes the issue. Default none.
        close_on: Vec<String>,
    },
    /// Redmine: statuses are Redmine issue statuses by name.
    Redmine {
        /// Server base URL, without a trailing `/`.
        url: String,
        /// Project identifier.
        project: String,
        /// Environment variable holding the API key. Default `REDMINE_API_KEY`.
        api_key_env: String,
    },
    /// Linear: statuses are the team's workflow states by name.
    Linear {
        /// The team's key (`ENG`), as in issue identifiers (`ENG-123`).
        team: String,
        /// Environment variable holding the API key or OAuth token. Default `LINEAR_API_KEY`.
        token_env: String,
        /// GraphQL endpoint. Default `https://api.linear.app/graphql`.
        api_url: String,
        /// How the token is sent. Default [`LinearTokenType::ApiKey`].
        token_type: LinearTokenType,
    },
    /// A GitHub Project (Projects v2): statuses are the options of a single-select field;
    /// tickets are the issues on the board, in any of its repositories.
    GithubProject {
        /// The organization or user owning the project.
        owner: String,
        /// The project's number.
        project: u64,
        /// The single-select field holding the status. Default `Status`.
        status_field: String,
        /// Environment variable holding the token. Default `GITHUB_TOKEN`.
        token_env: String,
        /// GraphQL endpoint. Default `https://api.github.com/graphql`.
        api_url: String,
        /// REST API base URL, for comments and dependencies. Default: `api_url` less its
        /// `/graphql` (GitHub Enterprise Server: `https://HOST/api/graphql` gives
        /// `https://HOST/api/v3`).
        rest_url: String,
    },
    /// Jira: statuses are workflow statuses by name, reached through transitions.
    Jira {
        /// Site base URL, without a trailing `/`.
        url: String,
        /// Project key.
        project: String,
        /// 3 (Cloud, Basic e-mail + API token) or 2 (Data Center, bearer PAT). Default 3.
        api_version: u8,
        /// Variable holding the account e-mail; Cloud only. Default `JIRA_EMAIL` on Cloud.
        email_env: Option<String>,
        /// Variable holding the API token or personal access token. Default `JIRA_TOKEN`.
        token_env: String,
        /// JQL clause ANDed (parenthesised) to every listing. Default none.
        jql: Option<String>,
        /// Pipeline status -> the transition name that reaches it. Default empty.
        transitions: BTreeMap<String, String>,
        /// Priority names, most urgent first. Default `Highest, High, Medium, Low, Lowest`.
        priority_order: Vec<String>,
    },
}

/// How a Linear token goes into the `Authorization` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinearTokenType {
    /// A personal API key, sent as is.
    #[default]
    ApiKey,
    /// An OAuth access token, sent as `Bearer <token>`.
    Oauth,
}

impl TrackerConfig {
    /// Whether the adapter can read tracker-native blockers at all.
    pub fn can_read_blockers(&self) -> bool {
        !matches!(self, TrackerConfig::Gitea { .. })
    }

    /// Whether blockers are read when `tracker.blockers.enabled` is not set: where the
    /// tracker has them, except GitLab, whose blocking links need a paid tier.
    pub fn blockers_by_default(&self) -> bool {
        self.can_read_blockers() && !matches!(self, TrackerConfig::Gitlab { .. })
    }

    /// The environment variables holding this adapter's credentials.
    pub fn secret_envs(&self) -> Vec<&String> {
        match self {
            TrackerConfig::Local { .. } => Vec::new(),
            TrackerConfig::Github { token_env, .. }
            | TrackerConfig::Gitlab { token_env, .. }
            | TrackerConfig::Gitea { token_env, .. }
            | TrackerConfig::Linear { token_env, .. }
            | TrackerConfig::GithubProject { token_env, .. } => vec![token_env],
            TrackerConfig::Jira {
                email_env,
                token_env,
                ..
            } => email_env.iter().chain(std::iter::once(token_env)).collect(),
            TrackerConfig::Redmine { api_key_env, .. } => vec![api_key_env],
        }
    }

    /// The tracker identity used in ledger keys and idempotency keys; adapters'
    /// `Tracker::name` returns the same string.
    pub fn name(&self) -> String {
        match self {
            TrackerConfig::Local { .. } => "local".to_string(),
            TrackerConfig::Github { repo, .. } => format!("github:{repo}"),
            TrackerConfig::Gitlab { project, .. } => format!("gitlab:{project}"),
            TrackerConfig::Gitea { repo, .. } => format!("gitea:{repo}"),
            TrackerConfig::Redmine { project, .. } => format!("redmine:{project}"),
            TrackerConfig::Linear { team, .. } => format!("linear:{team}"),
            TrackerConfig::GithubProject { owner, project, .. } => {
                format!("github_project:{owner}/{project}")
            }
            TrackerConfig::Jira { project, .. } => format!("jira:{project}"),
        }
    }
}

/// In-flight ceilings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Concurrency {
    /// Live runs across all roles. Default 4.
    pub max_in_flight: u32,
    /// Default live runs per role. Default 1.
    pub per_role_max_in_flight: u32,
    /// Live runs per claim status. Default none.
    pub per_status_max_in_flight: BTreeMap<String, u32>,
}

/// Which agent CLI `agent` runs: how its command line is built and how its output is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentPreset {
    /// `command` is the whole argv; the outcome comes from the result file or the exit status.
    #[default]
    Command,
    /// Claude Code in print mode (`claude -p --output-format stream-json --verbose`).
    ClaudeCode,
    /// OpenAI Codex non-interactive mode (`codex exec --json`).
    Codex,
    /// Any agent speaking the Agent Client Protocol (JSON-RPC 2.0 over stdio): Gemini CLI,
    /// Qwen Code, OpenCode, Claude Code's ACP adapter. `command` is required.
    Acp,
}

impl AgentPreset {
    /// Every preset, in documentation order.
    pub const ALL: [AgentPreset; 4] = [Self::Command, Self::ClaudeCode, Self::Codex, Self::Acp];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Command => "command",
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Acp => "acp",
        }
    }

    /// The program a CLI preset runs when `agent.command` does not name one.
    pub fn default_program(self) -> Option<&'static str> {
        match self {
            Self::Command | Self::Acp => None,
            Self::ClaudeCode => Some("claude"),
            Self::Codex => Some("codex"),
        }
    }
}

/// How agents are run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentConfig {
    /// Which CLI runs and how its output is read. Default `command`.
    pub preset: AgentPreset,
    /// With preset `command`: the whole argv. With a CLI preset: the program (and any leading
    /// arguments, e.g. a wrapper) put before the preset's own arguments; default `["claude"]`
    /// or `["codex"]`. Never empty. Relative program paths containing a `/` are resolved
    /// against the config file's directory.
    pub command: Vec<String>,
    /// Model name passed as `--model` (CLI presets only). Default none (the CLI's own default).
    pub model: Option<String>,
    /// Claude Code `--permission-mode` value. Default none.
    pub permission_mode: Option<String>,
    /// Claude Code `--max-turns` value. Default none (no limit).
    pub max_turns: Option<u32>,
    /// Claude Code `--allowedTools` entries, joined with commas. Default empty (flag omitted).
    pub allowed_tools: Vec<String>,
    /// Codex `--sandbox` value (`read-only`, `workspace-write`, `danger-full-access`):
    /// `agent.sandbox` written as a string, or `agent.sandbox.codex`. Default none.
    pub sandbox: Option<String>,
    /// `agent.sandbox` with `kind: bubblewrap`: every run confined by bubblewrap
    /// (docs/sandbox.md). `None` (kind `none`, the default): the agent runs unconfined.
    pub bubblewrap: Option<Bubblewrap>,
    /// Further arguments appended after the preset's flags (CLI presets only). Default empty.
    pub extra_args: Vec<String>,
    /// Kill the agent after this long. Default 3600 s.
    pub timeout: Duration,
    /// Kill the agent after this long without output; `None` disables. Default 300 s.
    pub stall_timeout: Option<Duration>,
    /// Kill an ACP agent that has not finished the handshake (`initialize`, `session/new`
    /// or `session/load`, the model choice) this long after it started (preset `acp`).
    /// Default 60 s.
    pub handshake_timeout: Duration,
    /// Extra environment variables for the agent. Default empty.
    pub env: BTreeMap<String, String>,
    /// Resume the agent's previous session (same ticket and role, same workspace) on a retry
    /// or continuation instead of starting cold (CLI presets). Default true.
    pub resume: bool,
    /// Accept a Claude Code run whose tool calls were denied as a success; when false such a
    /// run is an `agent.permission_denied` failure. Default false.
    pub allow_permission_denials: bool,
    /// How an ACP agent's permission requests are answered (preset `acp`). Default
    /// `workspace`.
    pub permissions: AcpPermissions,
}

/// How sortie answers an ACP agent's `session/request_permission` (`agent.permissions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcpPermissions {
    /// Allow reading, editing and commands inside the workspace (and writing the result
    /// file); deny anything naming a path outside it, web fetches and mode switches.
    #[default]
    Workspace,
    /// Allow every request.
    AllowAll,
    /// Deny every request.
    DenyAll,
}

impl AcpPermissions {
    /// Every policy, in documentation order.
    pub const ALL: [AcpPermissions; 3] = [Self::Workspace, Self::AllowAll, Self::DenyAll];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workspace => "workspace",
            Self::AllowAll => "allow_all",
            Self::DenyAll => "deny_all",
        }
    }

    /// The policy spelled `name`, or what is wrong with it (for a config diagnostic).
    pub fn from_name(name: &str) -> Result<Self, String> {
        if let Some(policy) = Self::ALL.into_iter().find(|p| p.as_str() == name) {
            return Ok(policy);
        }
        Err(format!(
            "unknown permissions policy {name:?} (expected one of: {})",
            Self::expected()
        ))
    }

    /// The policy names, quoted, for messages.
    pub fn expected() -> String {
        Self::ALL
            .iter()
            .map(|p| format!("`{}`", p.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl AgentConfig {
    /// Apply a role's, route's or reviewer's `preset` and `command` overrides: switching
    /// to a CLI preset without naming a `command` runs that preset's own program.
    pub fn override_program(&mut self, preset: Option<AgentPreset>, command: Option<&[String]>) {
        if let Some(preset) = preset {
            if preset != self.preset && command.is_none() {
                if let Some(program) = preset.default_program() {
                    self.command = vec![program.to_string()];
                }
            }
            self.preset = preset;
        }
        if let Some(command) = command {
            self.command = command.to_vec();
        }
    }

    /// The argv the agent's program starts with: `command`, or the preset's own program.
    pub fn program_argv(&self) -> Vec<String> {
        if self.command.is_empty() {
            self.preset
                .default_program()
                .map(String::from)
                .into_iter()
                .collect()
        } else {
            self.command.clone()
        }
    }
}

/// How a run is confined with bubblewrap (`agent.sandbox`, `kind: bubblewrap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bubblewrap {
    /// The `bwrap` program found at load (`$SORTIE_BWRAP`, else `bwrap` on `PATH`).
    pub program: PathBuf,
    /// Whether the agent shares the host's network. Default `host`.
    pub network: SandboxNetwork,
    /// Extra host paths the agent may read (`~` expanded, relative to the config file).
    /// Default empty.
    pub read_only: Vec<PathBuf>,
    /// Extra host paths the agent may write. Default empty.
    pub writable: Vec<PathBuf>,
    /// Variables of sortie's environment passed in, by name; nothing else of it is.
    /// Default empty.
    pub env: Vec<String>,
    /// The agent's home directory. Default `ephemeral`.
    pub home: SandboxHome,
}

/// `agent.sandbox.network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SandboxNetwork {
    /// The host's network (the model provider's API is reachable, and so is the rest).
    #[default]
    Host,
    /// A network namespace of its own with only a loopback device.
    None,
}

/// `agent.sandbox.home`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SandboxHome {
    /// A fresh directory for each run, removed after it.
    #[default]
    Ephemeral,
    /// One directory per ticket under `state_root/sandbox/homes/`, kept (an agent's
    /// sessions survive for `--resume`).
    Persistent,
}

/// Retry policy for transient failures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryConfig {
    /// Attempts per (ticket, role, stage) including the first. Default 3.
    pub max_attempts: u32,
    /// Backoff base. Default 10 s.
    pub backoff_base: Duration,
    /// Backoff ceiling. Default 300 s.
    pub backoff_max: Duration,
}

impl RetryConfig {
    /// Delay before retrying after `failed_attempt` failed: `min(base * 2^(attempt-1), max)`.
    pub fn backoff(&self, failed_attempt: u32) -> Duration {
        let exp = failed_attempt.saturating_sub(1).min(31);
        let delay = self.backoff_base.saturating_mul(1u32 << exp);
        delay.min(self.backoff_max)
    }
}

/// One entry of `hooks:`: which events go where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookConfig {
    /// The events it receives.
    pub events: HookEvents,
    /// Only events whose `role` is one of these; empty means every role. Default empty.
    pub roles: Vec<String>,
    /// Only events whose `outcome` is one of these; empty means every event. Default empty.
    pub outcomes: Vec<HookOutcome>,
    /// Where events are delivered.
    pub target: HookTarget,
    /// Bound on one delivery. Default 30 s for commands, 10 s for webhooks.
    pub timeout: Duration,
    /// Deliveries tried per event, the first included; failed ones are retried on later ticks.
    /// Default 1 for commands, 5 for webhooks.
    pub max_attempts: u32,
}

/// The `event:` of a hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvents {
    /// `"*"`: every event.
    All,
    /// These event names.
    Named(Vec<String>),
}

impl HookEvents {
    /// Whether an event called `name` is selected.
    pub fn includes(&self, name: &str) -> bool {
        match self {
            HookEvents::All => true,
            HookEvents::Named(names) => names.iter().any(|n| n == name),
        }
    }
}

/// An outcome a hook can filter on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookOutcome {
    /// `success`.
    Success,
    /// `failure`.
    Failure,
    /// `question` (`run.finished` of a run whose agent asked; `writeback.dropped`).
    Question,
}

impl HookOutcome {
    /// The word used in payloads and the config.
    pub fn as_str(self) -> &'static str {
        match self {
            HookOutcome::Success => "success",
            HookOutcome::Failure => "failure",
            HookOutcome::Question => "question",
        }
    }
}

/// Where a hook delivers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HookTarget {
    /// Run a command (argv; a relative program path with a `/` is resolved against the
    /// config file's directory), in the config file's directory.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// POST to a URL.
    Webhook {
        /// `http://` or `https://` URL.
        url: String,
        /// Environment variable holding the HMAC secret; `None` sends unsigned requests.
        secret_env: Option<String>,
    },
}

/// One stage: tickets in `claim_status` want `role`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stage {
    /// Role name; `roles/<role>.md` is its prompt.
    pub role: String,
    /// Status a ticket must be in to be claimed.
    pub claim_status: String,
    /// Status set while the agent runs (optional).
    pub in_progress_status: Option<String>,
    /// Status after a success (the single-role form's `handoff_state`; `None` leaves the ticket where it is).
    pub success_status: Option<String>,
    /// Status after a final failure; `None` leaves the ticket where it is, held out of dispatch.
    pub failure_status: Option<String>,
    /// A `sortie:success` block of this role must be on the ticket.
    pub requires_prior_role: Option<String>,
    /// Live runs of this stage's role; defaults to `concurrency.per_role_max_in_flight`.
    pub max_in_flight: u32,
    /// The tickets this stage may touch: `tracker.filter` narrowed by the stage's own
    /// `filter` (labels of both required, excluded labels of both excluded). Default:
    /// `tracker.filter`.
    pub filter: TicketFilter,
    /// The bound on sending work back when `failure_status` is an earlier stage's
    /// claim status. Default none (refused for such a back edge).
    pub rework: Option<Rework>,
    /// `routes:`: the first route whose `when` holds for a ticket picks the agent
    /// settings and prompt of its run. Default none (every run uses the stage's).
    pub routes: Vec<super::routes::Route>,
    /// `verify:`: commands sortie runs in the workspace after the agent reports
    /// success, before handing the ticket on. Default none.
    pub verify: Option<Verify>,
    /// `evidence:` (or its older spelling `expects_changes`): whether an absence of work
    /// withholds the handoff. Default `observed`; `off` on a stage with `review:`.
    pub evidence: EvidencePolicy,
    /// `review:`: the stage reviews earlier stages' work. Default none.
    pub review: Option<Review>,
}

/// A stage's `evidence:` policy (docs/evidence.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidencePolicy {
    /// An observed absence of work withholds the handoff; not determinable proceeds.
    #[default]
    Observed,
    /// Absence and not determinable both withhold it.
    Strict,
    /// No check.
    Off,
}

/// A stage's `review:` (docs/evidence.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Review {
    /// Never resume an agent session: every run starts fresh.
    pub fresh_session: bool,
    /// The role whose resolved model this stage's must differ from.
    pub different_model_from: Option<String>,
}

/// A stage's `verify:` (docs/evidence.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verify {
    /// Each command's argv, run in order (no shell).
    pub commands: Vec<Vec<String>>,
    /// Each command's time limit (`timeout_seconds`). Default 900 s.
    pub timeout: std::time::Duration,
    /// A failing check is a transient failure whose output the next attempt's prompt
    /// gets (`true`, the default), or a final failure (`false`).
    pub retry_with_output: bool,
}

/// `rework: {max, then}`: how often a stage may send a ticket back to an earlier stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rework {
    /// Work is sent back at most this many times (the earlier stage runs at most
    /// `max + 1` times for one ticket).
    pub max: u32,
    /// Where the ticket goes once the bound is reached; none holds it where it is.
    pub then: Option<String>,
}

impl Stage {
    /// Where this stage sends work back on failure (an earlier stage's claim status),
    /// when it has a `rework` bound.
    pub fn rework_target(&self) -> Option<&str> {
        self.rework.as_ref().and(self.failure_status.as_deref())
    }

    /// The statuses a ticket of this stage may have while the stage owns it.
    pub fn owned_statuses(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.claim_status.as_str()).chain(self.in_progress_status.as_deref())
    }
}

impl Config {
    /// Every status any stage claims from or runs in, deduplicated (ignoring case), in
    /// stage order.
    pub fn pipeline_statuses(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for stage in &self.stages {
            for s in stage.owned_statuses() {
                if !out.iter().any(|o| same_name(o, s)) {
                    out.push(s.to_string());
                }
            }
        }
        out
    }

    /// Every status a stage claims from, runs in or moves tickets to (claim, in-progress,
    /// success and failure), once each by [`same_name`], first spelling kept: what a
    /// board with native statuses must have (Linear's states, a GitHub Project's options).
    pub fn stage_statuses(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for stage in &self.stages {
            let statuses = stage
                .owned_statuses()
                .chain(stage.success_status.as_deref())
                .chain(stage.failure_status.as_deref());
            for s in statuses {
                if !out.iter().any(|o| same_name(o, s)) {
                    out.push(s.to_string());
                }
            }
        }
        out
    }

    /// Whether `status` is one of the terminal states (ignoring case and surrounding
    /// whitespace).
    pub fn is_terminal(&self, status: &str) -> bool {
        self.terminal_states.iter().any(|t| same_name(t, status))
    }

    /// Every status the config names, as written, in this order: each stage's claim,
    /// in-progress, success and failure status, then the terminal states, then the statuses
    /// `reactions:` names. Spellings
    /// that differ only by case are all kept (see [`Config::status_case_variants`]).
    pub fn configured_statuses(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let stages = self.stages.iter().flat_map(|s| {
            [
                Some(s.claim_status.as_str()),
                s.in_progress_status.as_deref(),
                s.success_status.as_deref(),
                s.failure_status.as_deref(),
            ]
            .into_iter()
            .flatten()
        });
        let reactions = self.reactions.iter().flat_map(|r| {
            r.watch
                .iter()
                .map(String::as_str)
                .chain(r.merged_to.as_deref())
                .chain(r.closed_unmerged_to.as_deref())
                .chain(r.escalate_to.as_deref())
        });
        for status in stages
            .chain(self.terminal_states.iter().map(String::as_str))
            .chain(reactions)
            .chain(self.questions.waiting_status.as_deref())
        {
            if !out.contains(&status) {
                out.push(status);
            }
        }
        out
    }

    /// The config's spelling of a status read from the tracker (`In Review ` is the
    /// configured `in review`), or `None` when the config names no such status. The
    /// first spelling in [`Config::configured_statuses`] order wins.
    pub fn canonical_status(&self, tracker_status: &str) -> Option<&str> {
        self.configured_statuses()
            .into_iter()
            .find(|s| same_name(s, tracker_status))
    }

    /// Pairs of configured statuses that are different text but the same status for
    /// sortie (`Review` and `review`): worth a warning, as a person may think them two.
    pub fn status_case_variants(&self) -> Vec<(&str, &str)> {
        let statuses = self.configured_statuses();
        let mut out = Vec::new();
        for (i, a) in statuses.iter().enumerate() {
            if let Some(b) = statuses[..i].iter().find(|b| same_name(a, b)) {
                out.push((*b, *a));
            }
        }
        out
    }

    /// Names of the environment variables holding secrets this config uses: the
    /// tracker's token, the forge's token (`forge.token_env`), the HTTP API bearer token (`http.token_env`), the webhook
    /// secrets (`http.*_webhook_secret_env`) and every hook's `secret_env`; each once,
    /// in that order. They are removed from agents' environments unless `agent.env`
    /// passes them on explicitly.
    pub fn secret_env_names(&self) -> Vec<String> {
        let tracker = self
            .tracker
            .secret_envs()
            .into_iter()
            .chain(self.forge.iter().flat_map(TrackerConfig::secret_envs));
        let http = [
            &self.http.token_env,
            &self.http.github_webhook_secret_env,
            &self.http.gitlab_webhook_secret_env,
            &self.http.gitea_webhook_secret_env,
            &self.http.linear_webhook_secret_env,
            &self.http.jira_webhook_secret_env,
        ]
        .into_iter()
        .flatten();
        let hooks = self.hooks.iter().filter_map(|hook| match &hook.target {
            HookTarget::Webhook { secret_env, .. } => secret_env.as_ref(),
            HookTarget::Command { .. } => None,
        });
        let ledger = match &self.ledger {
            LedgerConfig::Postgres { url_env } => Some(url_env),
            LedgerConfig::Sqlite => None,
        };
        let mut out: Vec<String> = Vec::new();
        for name in tracker.chain(http).chain(hooks).chain(ledger) {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// Path of the ledger database.
    pub fn ledger_path(&self) -> PathBuf {
        self.state_root.join("ledger.db")
    }
}

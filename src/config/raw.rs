//! The config file's shape as written: serde structs that reject unknown keys, filled
//! section by section so that one bad section does not hide the problems of the others.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_yaml::Value;

use super::diagnostic::{unknown_key_message, Problems};
use super::locate::FieldPath;
use super::values::kind_of;

/// Which tracker adapter, with that adapter's own keys. New kinds are new variants.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RawTracker {
    /// The embedded board in plain files.
    Local {
        /// Board directory.
        path: String,
    },
    /// GitHub Issues (or GitHub Enterprise Server).
    Github {
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// REST API base URL.
        api_url: Option<String>,
        /// Prefix of the labels that model statuses.
        status_label_prefix: Option<String>,
        /// Prefix of the labels that model priorities.
        priority_label_prefix: Option<String>,
    },
    /// A GitLab project (gitlab.com or self-managed).
    Gitlab {
        /// Instance URL (`https://gitlab.com`).
        url: Option<String>,
        /// Project path (`group/sub/repo`) or numeric id.
        project: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// How the token is sent: `private-token` or `bearer`.
        auth: Option<String>,
        /// Prefix of the labels that model statuses.
        status_label_prefix: Option<String>,
        /// Prefix of the labels that model priorities.
        priority_label_prefix: Option<String>,
        /// Statuses whose transition also closes the issue.
        close_on: Option<Vec<String>>,
    },
    /// A Gitea or Forgejo repository.
    Gitea {
        /// Instance URL (`https://gitea.example.com`).
        url: String,
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// Prefix of the labels that model statuses.
        status_label_prefix: Option<String>,
        /// Prefix of the labels that model priorities.
        priority_label_prefix: Option<String>,
        /// Statuses whose transition also closes the issue.
        close_on: Option<Vec<String>>,
    },
    /// A Redmine server.
    Redmine {
        /// Base URL of the server.
        url: String,
        /// Project identifier.
        project: String,
        /// Environment variable holding the API key.
        api_key_env: Option<String>,
    },
    /// A Linear team.
    Linear {
        /// The team's key (`ENG`).
        team: String,
        /// Environment variable holding the API key or OAuth token.
        token_env: Option<String>,
        /// GraphQL endpoint.
        api_url: Option<String>,
        /// `api_key` (sent as is) or `oauth` (sent as `Bearer`).
        token_type: Option<String>,
    },
    /// A GitHub Project (Projects v2): statuses are a single-select field's options.
    GithubProject {
        /// The organization or user that owns the project.
        owner: String,
        /// The project's number (in its URL: `/orgs/acme/projects/7`).
        project: u64,
        /// The single-select field holding the status.
        status_field: Option<String>,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// GraphQL endpoint.
        api_url: Option<String>,
        /// REST API base URL (comments, dependencies).
        rest_url: Option<String>,
    },
    /// Jira Cloud (REST v3) or Data Center (REST v2).
    Jira {
        /// Base URL of the site (`https://acme.atlassian.net`).
        url: String,
        /// Project key (`PROJ`).
        project: String,
        /// REST API version: 3 (Cloud) or 2 (Data Center).
        api_version: Option<u8>,
        /// Environment variable holding the account e-mail (Cloud only).
        email_env: Option<String>,
        /// Environment variable holding the API token (Cloud) or personal access token (DC).
        token_env: Option<String>,
        /// A JQL clause ANDed to every listing.
        jql: Option<String>,
        /// Pipeline status -> transition name, where a workflow offers several.
        transitions: Option<BTreeMap<String, String>>,
        /// The instance's priority names, most urgent first.
        priority_order: Option<Vec<String>>,
    },
}

/// `forge:`: where pull requests open when the tracker is not that forge. The keys of a
/// tracker section of the same kind, less the label keys.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RawForge {
    /// A GitHub (or GitHub Enterprise Server) repository.
    Github {
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// REST API base URL.
        api_url: Option<String>,
    },
    /// A GitLab project.
    Gitlab {
        /// Instance URL (`https://gitlab.com`).
        url: Option<String>,
        /// Project path (`group/sub/repo`) or numeric id.
        project: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
        /// How the token is sent: `private-token` or `bearer`.
        auth: Option<String>,
    },
    /// A Gitea or Forgejo repository.
    Gitea {
        /// Instance URL (`https://gitea.example.com`).
        url: String,
        /// `owner/name`.
        repo: String,
        /// Environment variable holding the token.
        token_env: Option<String>,
    },
}

/// `filter:` under `tracker:` (the whole board) or on a stage.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFilter {
    pub(crate) labels: Option<Vec<String>>,
    pub(crate) exclude_labels: Option<Vec<String>>,
    pub(crate) assignee: Option<String>,
    pub(crate) project: Option<String>,
}

/// `blockers:` under `tracker:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBlockers {
    pub(crate) enabled: Option<bool>,
    pub(crate) max_reads_per_tick: Option<u32>,
    pub(crate) link_type: Option<String>,
}

/// `concurrency:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConcurrency {
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) per_role_max_in_flight: Option<u32>,
    pub(crate) per_status_max_in_flight: Option<BTreeMap<String, u32>>,
}

/// `agent:`. `preset`, `command`, `extra_args` and `env` values are checked by hand for
/// clearer messages.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub(crate) preset: Option<Value>,
    pub(crate) command: Option<Value>,
    pub(crate) model: Option<String>,
    pub(crate) permission_mode: Option<String>,
    pub(crate) max_turns: Option<u32>,
    pub(crate) allowed_tools: Option<Vec<String>>,
    /// A string (Codex's `--sandbox`) or a mapping ([`RawSandbox`]); read by hand.
    pub(crate) sandbox: Option<Value>,
    pub(crate) extra_args: Option<Value>,
    pub(crate) timeout_seconds: Option<u64>,
    pub(crate) stall_timeout_seconds: Option<u64>,
    pub(crate) handshake_timeout_seconds: Option<u64>,
    pub(crate) env: Option<BTreeMap<String, Value>>,
    pub(crate) resume: Option<bool>,
    pub(crate) allow_permission_denials: Option<bool>,
    pub(crate) permissions: Option<String>,
    /// The section failed to parse and its problem is already reported: required keys are
    /// not asked for again.
    #[serde(skip)]
    pub(crate) unreadable: bool,
}

/// `agent.sandbox:` written as a mapping.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSandbox {
    pub(crate) kind: Option<String>,
    pub(crate) network: Option<String>,
    pub(crate) read_only: Option<Vec<String>>,
    pub(crate) writable: Option<Vec<String>>,
    pub(crate) env: Option<Vec<String>>,
    pub(crate) home: Option<String>,
    /// Read from the value by `agent::codex_sandbox`; here so the key is known.
    #[allow(dead_code)]
    pub(crate) codex: Option<String>,
}

/// `questions:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuestions {
    pub(crate) timeout_seconds: Option<u64>,
    pub(crate) max_per_stage: Option<u32>,
    pub(crate) waiting_status: Option<String>,
}

/// `workspace:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkspace {
    pub(crate) hooks: Option<RawWorkspaceHooks>,
    pub(crate) hook_timeout_seconds: Option<u64>,
    pub(crate) prune_every_ticks: Option<u32>,
    pub(crate) git: Option<RawGit>,
}

/// `workspace.git:`: the repository every ticket's worktree comes from.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGit {
    pub(crate) url: Option<String>,
    pub(crate) base: Option<String>,
    pub(crate) branch: Option<String>,
    pub(crate) push: Option<bool>,
}

/// `pull_request:`: one pull request per ticket branch, after a stage's success.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPullRequest {
    pub(crate) after: Option<String>,
    pub(crate) title: Option<String>,
    pub(crate) draft: Option<bool>,
}

/// `workspace.hooks:`: each an argv.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkspaceHooks {
    pub(crate) after_create: Option<Value>,
    pub(crate) before_run: Option<Value>,
    pub(crate) after_run: Option<Value>,
    pub(crate) before_remove: Option<Value>,
}

/// `http:`: the daemon's HTTP surface.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    pub(crate) token_env: Option<String>,
    pub(crate) github_webhook_secret_env: Option<String>,
    pub(crate) gitlab_webhook_secret_env: Option<String>,
    pub(crate) gitea_webhook_secret_env: Option<String>,
    pub(crate) linear_webhook_secret_env: Option<String>,
    pub(crate) jira_webhook_secret_env: Option<String>,
}

/// `ledger:`: where claims, leases, the outbox and history live.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RawLedger {
    /// The embedded file `<state_root>/ledger.db` (the default).
    Sqlite {},
    /// A PostgreSQL database shared by several hosts.
    Postgres {
        /// Environment variable holding the database URL. Default `SORTIE_LEDGER_URL`.
        url_env: Option<String>,
    },
}

/// `retry:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff_base_seconds: Option<u64>,
    pub(crate) backoff_max_seconds: Option<u64>,
}

/// One entry of `pipeline_stages:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStage {
    pub(crate) role: String,
    pub(crate) claim_status: String,
    pub(crate) in_progress_status: Option<String>,
    pub(crate) success_status: String,
    pub(crate) failure_status: Option<String>,
    pub(crate) requires_prior_role: Option<String>,
    pub(crate) max_in_flight: Option<u32>,
    pub(crate) filter: Option<RawFilter>,
    pub(crate) rework: Option<RawRework>,
    pub(crate) routes: Option<Vec<super::routes::RawRoute>>,
    pub(crate) expects_changes: Option<bool>,
    pub(crate) verify: Option<RawVerify>,
    pub(crate) evidence: Option<super::model::EvidencePolicy>,
    pub(crate) review: Option<RawReview>,
    /// `entry: true`: people (not a stage) put tickets in this claim status.
    pub(crate) entry: Option<bool>,
    /// `exit: true`: tickets leave the pipeline for people at this success status.
    pub(crate) exit: Option<bool>,
}

/// `verify:` on a stage.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVerify {
    pub(crate) commands: Vec<Vec<String>>,
    pub(crate) timeout_seconds: Option<u64>,
    pub(crate) retry_with_output: Option<bool>,
}

/// `review:` on a stage.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReview {
    pub(crate) fresh_session: Option<bool>,
    pub(crate) different_model_from: Option<String>,
}

/// `rework:` on a stage whose `failure_status` sends work back to an earlier stage.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRework {
    pub(crate) max: u32,
    pub(crate) then: Option<String>,
}

/// An outcome in a hook's `outcomes:` filter.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawOutcome {
    Success,
    Failure,
    Question,
}

/// One entry of `hooks:`. `event` and `command` are checked by hand for clearer messages.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHook {
    pub(crate) event: Value,
    pub(crate) command: Option<Value>,
    pub(crate) webhook: Option<String>,
    pub(crate) secret_env: Option<String>,
    pub(crate) timeout_seconds: Option<u64>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) roles: Option<Vec<String>>,
    pub(crate) outcomes: Option<Vec<RawOutcome>>,
}

/// The whole file; every section optional here, required ones are checked in normalization.
#[derive(Debug, Default)]
pub(crate) struct RawConfig {
    pub(crate) tracker: Option<RawTracker>,
    /// `tracker.filter`, read apart from the adapter's own keys.
    pub(crate) tracker_filter: Option<RawFilter>,
    /// `tracker.blockers`, read apart from the adapter's own keys.
    pub(crate) tracker_blockers: Option<RawBlockers>,
    pub(crate) state_root: Option<String>,
    pub(crate) ledger: Option<RawLedger>,
    pub(crate) roles_dir: Option<String>,
    pub(crate) claim_lock_ttl_seconds: Option<u64>,
    pub(crate) concurrency: RawConcurrency,
    pub(crate) terminal_states: Option<Vec<String>>,
    pub(crate) trusted_authors: Option<Vec<String>>,
    pub(crate) workspace: RawWorkspace,
    pub(crate) budgets: super::budgets::RawBudgets,
    /// `prices:`: model name -> its prices.
    pub(crate) prices: Option<BTreeMap<String, super::budgets::RawPrice>>,
    pub(crate) questions: RawQuestions,
    pub(crate) poll_interval_seconds: Option<u64>,
    pub(crate) shutdown_grace_seconds: Option<u64>,
    pub(crate) http: RawHttp,
    pub(crate) agent: Option<RawAgent>,
    pub(crate) retry: RawRetry,
    /// `None` when absent; one entry per stage, `None` for a stage that failed to parse.
    pub(crate) pipeline_stages: Option<Vec<Option<RawStage>>>,
    pub(crate) active_states: Option<Vec<String>>,
    pub(crate) in_progress_state: Option<String>,
    pub(crate) handoff_state: Option<String>,
    pub(crate) role: Option<String>,
    /// `None` when absent; one entry per hook, `None` for a hook that failed to parse.
    pub(crate) hooks: Option<Vec<Option<RawHook>>>,
    pub(crate) pull_request: Option<RawPullRequest>,
    pub(crate) forge: Option<RawForge>,
    pub(crate) reactions: Option<super::reactions::RawReactions>,
}

/// The top-level keys, in the order the documentation lists them.
pub(crate) const TOP_LEVEL_KEYS: &[&str] = &[
    "tracker",
    "state_root",
    "ledger",
    "roles_dir",
    "claim_lock_ttl_seconds",
    "concurrency",
    "terminal_states",
    "trusted_authors",
    "workspace",
    "budgets",
    "prices",
    "questions",
    "poll_interval_seconds",
    "shutdown_grace_seconds",
    "http",
    "agent",
    "retry",
    "pipeline_stages",
    "active_states",
    "in_progress_state",
    "handoff_state",
    "role",
    "hooks",
    "pull_request",
    "forge",
    "reactions",
];

/// The single-role form's keys, which cannot be combined with `pipeline_stages`.
pub(crate) const SINGLE_ROLE_KEYS: &[&str] = &[
    "active_states",
    "in_progress_state",
    "handoff_state",
    "role",
];

/// Deserialize `value` (found at `path`) as `T`, recording the first problem in it.
fn section<T: DeserializeOwned>(
    value: Value,
    path: &FieldPath,
    problems: &mut Problems,
) -> Option<T> {
    match serde_path_to_error::deserialize(value) {
        Ok(v) => Some(v),
        Err(err) => {
            problems.serde(path, &err);
            None
        }
    }
}

/// Fill a `RawConfig` from the (already expanded) top-level mapping. Every section is parsed
/// on its own and every stage on its own, so each reports its own first problem.
pub(crate) fn read_raw(top: serde_yaml::Mapping, problems: &mut Problems) -> RawConfig {
    let mut raw = RawConfig::default();
    let root = FieldPath::root();
    for (key, value) in top {
        let Value::String(name) = key else {
            let shown = serde_yaml::to_string(&key).unwrap_or_default();
            problems.at_value(
                &root,
                format!("top-level keys must be strings, found `{}`", shown.trim()),
            );
            continue;
        };
        let path = root.key(&name);
        let p = &mut *problems;
        match name.as_str() {
            "tracker" => {
                // `filter` and `blockers` mean the same for every kind: read them apart,
                // so each adapter's variant lists only its own keys.
                let mut value = value;
                if let Value::Mapping(map) = &mut value {
                    if let Some(filter) = map.remove("filter") {
                        raw.tracker_filter = section(filter, &path.key("filter"), p);
                    }
                    if let Some(blockers) = map.remove("blockers") {
                        raw.tracker_blockers = section(blockers, &path.key("blockers"), p);
                    }
                }
                raw.tracker = section(value, &path, p)
            }
            "state_root" => raw.state_root = section(value, &path, p),
            "ledger" => raw.ledger = section(value, &path, p),
            "roles_dir" => raw.roles_dir = section(value, &path, p),
            "claim_lock_ttl_seconds" => raw.claim_lock_ttl_seconds = section(value, &path, p),
            "concurrency" => raw.concurrency = section(value, &path, p).unwrap_or_default(),
            "terminal_states" => raw.terminal_states = section(value, &path, p),
            "trusted_authors" => raw.trusted_authors = section(value, &path, p),
            "workspace" => raw.workspace = section(value, &path, p).unwrap_or_default(),
            "budgets" => raw.budgets = section(value, &path, p).unwrap_or_default(),
            "prices" => raw.prices = section(value, &path, p),
            "questions" => raw.questions = section(value, &path, p).unwrap_or_default(),
            "poll_interval_seconds" => raw.poll_interval_seconds = section(value, &path, p),
            "shutdown_grace_seconds" => raw.shutdown_grace_seconds = section(value, &path, p),
            "http" => raw.http = section(value, &path, p).unwrap_or_default(),
            "agent" => {
                raw.agent = Some(section(value, &path, p).unwrap_or_else(|| RawAgent {
                    unreadable: true,
                    ..RawAgent::default()
                }))
            }
            "retry" => raw.retry = section(value, &path, p).unwrap_or_default(),
            "pipeline_stages" => raw.pipeline_stages = Some(read_list(value, &path, "stages", p)),
            "hooks" => raw.hooks = Some(read_list(value, &path, "hooks", p)),
            "pull_request" => raw.pull_request = section(value, &path, p),
            "forge" => raw.forge = section(value, &path, p),
            "reactions" => raw.reactions = section(value, &path, p),
            "active_states" => raw.active_states = section(value, &path, p),
            "in_progress_state" => raw.in_progress_state = section(value, &path, p),
            "handoff_state" => raw.handoff_state = section(value, &path, p),
            "role" => raw.role = section(value, &path, p),
            other if !p.skip_when_full() => {
                p.at_key(&path, unknown_key_message(other, TOP_LEVEL_KEYS))
            }
            _ => {}
        }
    }
    raw
}

/// A list section whose entries are read one by one, each reporting its own first problem.
fn read_list<T: DeserializeOwned>(
    value: Value,
    path: &FieldPath,
    what: &str,
    problems: &mut Problems,
) -> Vec<Option<T>> {
    match value {
        Value::Sequence(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| section(item, &path.index(i), problems))
            .collect(),
        other => {
            let found = kind_of(&other);
            problems.at_value(path, format!("expected a list of {what}, found {found}"));
            vec![None]
        }
    }
}

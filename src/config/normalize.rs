//! Turns the raw sections into the validated `Config`: defaults, ranges, path resolution.
//! Each section with more than a few keys has its own module (`agent`, `hooks`, `tracker`,
//! `stages`); the value checks they share are in `values`, the defaults in `defaults`.

use std::path::Path;
use std::time::Duration;

use serde_yaml::Value;

use super::agent::normalize_agent;
use super::defaults::*;
use super::diagnostic::Problems;
use super::hooks::build_hooks;
use super::locate::FieldPath;
use super::model::TrackerConfig;
use super::model::{Concurrency, Config, HttpConfig, RetryConfig, WorkspaceConfig, WorkspaceHooks};
use super::raw::RawConfig;
use super::stages::{build_stages, check_status};
use super::tracker::{normalize_blockers, normalize_filter, normalize_forge, normalize_tracker};
use super::values::{argv_value, at_least, env_name, path_value};

/// Build the `Config` from `raw`, recording every problem. `base` is the directory relative
/// paths resolve against. Returns `None` when something was wrong.
pub(crate) fn normalize(
    mut raw: RawConfig,
    source: Option<&Path>,
    base: &Path,
    problems: &mut Problems,
) -> Option<Config> {
    let root = FieldPath::root();
    let tracker = normalize_tracker(raw.tracker.take(), base, problems);
    let forge = normalize_forge(raw.forge.take(), base, problems);
    let filter = normalize_filter(
        raw.tracker_filter.take(),
        &root.key("tracker").key("filter"),
        matches!(tracker, Some(TrackerConfig::Linear { .. })),
        problems,
    );
    let blockers = normalize_blockers(raw.tracker_blockers.take(), tracker.as_ref(), problems);
    let state_root = path_value(
        problems,
        &root.key("state_root"),
        raw.state_root.take(),
        "state",
        base,
    );
    let roles_dir = path_value(
        problems,
        &root.key("roles_dir"),
        raw.roles_dir.take(),
        "roles",
        base,
    );
    let ttl = at_least(
        problems,
        &root.key("claim_lock_ttl_seconds"),
        raw.claim_lock_ttl_seconds,
        DEFAULT_TTL_SECONDS,
        1,
    );

    let poll_s = at_least(
        problems,
        &root.key("poll_interval_seconds"),
        raw.poll_interval_seconds,
        DEFAULT_POLL_SECONDS,
        1,
    );
    let grace_s = raw.shutdown_grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS);
    let ledger = match raw.ledger.take() {
        None | Some(super::raw::RawLedger::Sqlite {}) => super::model::LedgerConfig::Sqlite,
        Some(super::raw::RawLedger::Postgres { url_env }) => super::model::LedgerConfig::Postgres {
            url_env: env_name(
                problems,
                &root.key("ledger").key("url_env"),
                url_env,
                "SORTIE_LEDGER_URL",
            ),
        },
    };
    let raw_http = std::mem::take(&mut raw.http);
    let http_path = root.key("http");
    let http = HttpConfig {
        token_env: raw_http.token_env.map(|n| {
            env_name(
                problems,
                &http_path.key("token_env"),
                Some(n),
                "SORTIE_HTTP_TOKEN",
            )
        }),
        github_webhook_secret_env: raw_http.github_webhook_secret_env.map(|n| {
            env_name(
                problems,
                &http_path.key("github_webhook_secret_env"),
                Some(n),
                "GITHUB_WEBHOOK_SECRET",
            )
        }),
        gitlab_webhook_secret_env: raw_http.gitlab_webhook_secret_env.map(|n| {
            env_name(
                problems,
                &http_path.key("gitlab_webhook_secret_env"),
                Some(n),
                "GITLAB_WEBHOOK_SECRET",
            )
        }),
        gitea_webhook_secret_env: raw_http.gitea_webhook_secret_env.map(|n| {
            env_name(
                problems,
                &http_path.key("gitea_webhook_secret_env"),
                Some(n),
                "GITEA_WEBHOOK_SECRET",
            )
        }),
        linear_webhook_secret_env: raw_http.linear_webhook_secret_env.map(|n| {
            env_name(
                problems,
                &http_path.key("linear_webhook_secret_env"),
                Some(n),
                "LINEAR_WEBHOOK_SECRET",
            )
        }),
        jira_webhook_secret_env: raw_http.jira_webhook_secret_env.map(|n| {
            env_name(
                problems,
                &http_path.key("jira_webhook_secret_env"),
                Some(n),
                "JIRA_WEBHOOK_SECRET",
            )
        }),
    };

    let terminal_states = raw
        .terminal_states
        .take()
        .unwrap_or_else(|| DEFAULT_TERMINAL.iter().map(|s| s.to_string()).collect());
    for (i, t) in terminal_states.iter().enumerate() {
        check_status(problems, &root.key("terminal_states").index(i), t);
    }
    let trusted_authors = raw.trusted_authors.take().unwrap_or_default();
    for (i, a) in trusted_authors.iter().enumerate() {
        if a.trim().is_empty() || a.trim() != a {
            problems.at_value(
                &root.key("trusted_authors").index(i),
                format!("author {a:?} must be a non-empty name without surrounding whitespace"),
            );
        }
    }

    let conc_path = root.key("concurrency");
    let c = std::mem::take(&mut raw.concurrency);
    let max_in_flight = at_least(
        problems,
        &conc_path.key("max_in_flight"),
        c.max_in_flight,
        DEFAULT_MAX_IN_FLIGHT,
        1,
    );
    let per_role = at_least(
        problems,
        &conc_path.key("per_role_max_in_flight"),
        c.per_role_max_in_flight,
        DEFAULT_PER_ROLE,
        1,
    );

    let routing = super::stages::Routing {
        preset: super::routes::written_preset(raw.agent.as_ref()),
        base,
    };
    let stages = build_stages(
        &mut raw,
        &terminal_states,
        per_role,
        &filter,
        routing,
        problems,
    );
    for (i, s) in stages.iter().enumerate() {
        let p = root.key("pipeline_stages").index(i).key("max_in_flight");
        at_least(problems, &p, Some(s.max_in_flight), 1, 1);
    }
    if let Some(TrackerConfig::Jira { transitions, .. }) = &tracker {
        super::tracker::check_pinned_transitions(transitions, &stages, problems);
    }

    let written = c.per_status_max_in_flight.unwrap_or_default();
    let status_path = conc_path.key("per_status_max_in_flight");
    // Keyed by the stage's own spelling of the claim status (statuses compare ignoring case).
    let mut per_status = std::collections::BTreeMap::new();
    for (status, cap) in &written {
        let p = status_path.key(status);
        at_least(problems, &p, Some(*cap), 1, 1);
        let owner = stages
            .iter()
            .find(|s| crate::names::same_name(&s.claim_status, status));
        let key = owner.map_or_else(|| status.clone(), |s| s.claim_status.clone());
        if per_status.insert(key.clone(), *cap).is_some() {
            problems.at_key(
                &p,
                format!("`{status}` is `{key}` written again (statuses compare ignoring case); expected each status once"),
            );
        }
        if !stages.is_empty() && owner.is_none() {
            let claims: Vec<&str> = stages.iter().map(|s| s.claim_status.as_str()).collect();
            problems.at_key(
                &p,
                format!(
                    "`{status}` is no stage's claim_status; expected one of: {}",
                    claims.join(", ")
                ),
            );
        }
    }

    let agent = normalize_agent(raw.agent.take(), base, problems);
    if let Some(jail) = agent.as_ref().and_then(|a| a.bubblewrap.as_ref()) {
        super::sandbox::check_state_root(jail, &state_root, problems);
    }
    super::review::check_reviews(&stages, agent.as_ref(), &roles_dir, problems);
    let workspace = normalize_workspace(std::mem::take(&mut raw.workspace), base, problems);
    // A GitHub Project spans repositories: its pull requests open on the GitHub repository
    // its workspace clones, unless `forge:` names one.
    let forge = match (forge, &tracker, &workspace.git) {
        (None, Some(t), Some(git)) if raw.pull_request.is_some() => {
            super::tracker::project_forge(t, &git.url)
        }
        (forge, _, _) => forge,
    };
    let hooks = build_hooks(raw.hooks.take(), &stages, base, problems);
    let pull_request = super::git::normalize_pull_request(
        raw.pull_request.take(),
        &stages,
        workspace.git.as_ref(),
        match (&forge, &tracker) {
            (Some(_), _) => Some(super::git::Forge::Known),
            (None, None) => None,
            (None, Some(t)) => Some(match t {
                TrackerConfig::Github { .. }
                | TrackerConfig::Gitlab { .. }
                | TrackerConfig::Gitea { .. } => super::git::Forge::Known,
                TrackerConfig::GithubProject { .. } => super::git::Forge::AcrossRepositories,
                _ => super::git::Forge::None,
            }),
        },
        problems,
    );
    if forge.is_some() && pull_request.is_none() {
        problems.at_key(
            &root.key("forge"),
            "`forge` is where pull requests open, and nothing opens one: add `pull_request` \
             (e.g. `pull_request: {after: backend}`) or remove `forge`",
        );
    }
    let reactions = super::reactions::normalize_reactions(
        raw.reactions.take(),
        &super::reactions::ReactionContext {
            stages: &stages,
            terminal_states: &terminal_states,
            opens_pull_requests: pull_request.is_some(),
            forge_is_gitlab: matches!(
                forge.as_ref().or(tracker.as_ref()),
                Some(TrackerConfig::Gitlab { .. })
            ),
        },
        problems,
    );
    let budgets =
        super::budgets::normalize_budgets(std::mem::take(&mut raw.budgets), &stages, problems);
    let prices = super::budgets::normalize_prices(raw.prices.take(), problems);
    if let Some(agent) = &agent {
        if budgets.limits_dollars() {
            super::budgets::warn_unpriced(&budgets, &prices, &stages, agent, &roles_dir, problems);
        }
        if budgets.limits_tokens() {
            super::budgets::warn_untokened(&budgets, &stages, agent, &roles_dir, problems);
        }
    }

    let q = std::mem::take(&mut raw.questions);
    let questions_path = root.key("questions");
    if q.timeout_seconds == Some(0) {
        problems.at_value(
            &questions_path.key("timeout_seconds"),
            "expected at least 1 (leave it out to wait for an answer for good)",
        );
    }
    let max_per_stage = at_least(
        problems,
        &questions_path.key("max_per_stage"),
        q.max_per_stage,
        super::model::DEFAULT_MAX_QUESTIONS_PER_STAGE,
        1,
    );
    if let Some(waiting) = &q.waiting_status {
        let path = questions_path.key("waiting_status");
        super::stages::check_status(problems, &path, waiting);
        let same = |s: &str| crate::names::same_name(s, waiting);
        let used = stages.iter().find_map(|s| {
            [
                ("claim_status", Some(s.claim_status.as_str())),
                ("in_progress_status", s.in_progress_status.as_deref()),
                ("success_status", s.success_status.as_deref()),
                ("failure_status", s.failure_status.as_deref()),
            ]
            .into_iter()
            .find(|(_, status)| status.is_some_and(same))
            .map(|(field, _)| format!("it is stage {}'s {field}", s.role))
        });
        let used = used.or_else(|| {
            terminal_states
                .iter()
                .any(|t| same(t))
                .then(|| "it is a terminal state".to_string())
        });
        if let Some(why) = used {
            problems.at_value(
                &path,
                format!("expected a status of its own, where only tickets waiting for an answer go; {why}"),
            );
        }
    }
    let questions = super::model::QuestionsConfig {
        timeout: q.timeout_seconds.map(Duration::from_secs),
        max_per_stage,
        waiting_status: q.waiting_status,
    };

    let retry_path = root.key("retry");
    let r = std::mem::take(&mut raw.retry);
    let max_attempts = at_least(
        problems,
        &retry_path.key("max_attempts"),
        r.max_attempts,
        DEFAULT_MAX_ATTEMPTS,
        1,
    );
    let base_s = at_least(
        problems,
        &retry_path.key("backoff_base_seconds"),
        r.backoff_base_seconds,
        DEFAULT_BACKOFF_BASE,
        1,
    );
    let max_s = r.backoff_max_seconds.unwrap_or(DEFAULT_BACKOFF_MAX);
    if base_s > max_s {
        let (path, which) = if r.backoff_max_seconds.is_some() {
            (retry_path.key("backoff_max_seconds"), "backoff_max_seconds")
        } else {
            (
                retry_path.key("backoff_base_seconds"),
                "the default backoff_max_seconds",
            )
        };
        problems.at_value(&path, format!("backoff_base_seconds ({base_s}) is larger than {which} ({max_s}); expected base <= max"));
    }

    if !problems.is_empty() {
        return None;
    }
    Some(Config {
        source: source.map(Path::to_path_buf),
        tracker: tracker?,
        filter,
        blockers,
        state_root,
        ledger,
        roles_dir,
        claim_ttl: Duration::from_secs(ttl),
        concurrency: Concurrency {
            max_in_flight,
            per_role_max_in_flight: per_role,
            per_status_max_in_flight: per_status,
        },
        terminal_states,
        agent: agent?,
        retry: RetryConfig {
            max_attempts,
            backoff_base: Duration::from_secs(base_s),
            backoff_max: Duration::from_secs(max_s),
        },
        stages,
        trusted_authors,
        workspace,
        hooks,
        budgets,
        prices,
        questions,
        poll_interval: Duration::from_secs(poll_s),
        shutdown_grace: Duration::from_secs(grace_s),
        http,
        pull_request,
        forge,
        reactions,
        // Filled by `parse_str_with_env` from what `problems` collected.
        warnings: Vec::new(),
    })
}

/// `workspace:`: hook argvs (program resolved like `agent.command`), limits.
fn normalize_workspace(
    raw: super::raw::RawWorkspace,
    base: &Path,
    problems: &mut Problems,
) -> WorkspaceConfig {
    let path = FieldPath::root().key("workspace");
    let git = super::git::normalize_git(raw.git, base, problems);
    let hooks = raw.hooks.unwrap_or_default();
    let mut argv = |name: &str, value: Option<Value>| {
        value.map(|v| argv_value(problems, &path.key("hooks").key(name), v, base))
    };
    let hooks = WorkspaceHooks {
        after_create: argv("after_create", hooks.after_create),
        before_run: argv("before_run", hooks.before_run),
        after_run: argv("after_run", hooks.after_run),
        before_remove: argv("before_remove", hooks.before_remove),
    };
    let timeout = at_least(
        problems,
        &path.key("hook_timeout_seconds"),
        raw.hook_timeout_seconds,
        DEFAULT_HOOK_TIMEOUT,
        1,
    );
    WorkspaceConfig {
        hooks,
        hook_timeout: Duration::from_secs(timeout),
        prune_every_ticks: raw.prune_every_ticks.unwrap_or(DEFAULT_PRUNE_EVERY_TICKS),
        git,
    }
}

//! Turns the raw sections into the validated `Config`: defaults, ranges, path resolution.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::agent::normalize_agent;
use super::diagnostic::Problems;
use super::hooks::build_hooks;
use super::locate::FieldPath;
use super::model::{
    Budgets, Concurrency, Config, HttpConfig, RetryConfig, TrackerConfig, WorkspaceConfig,
    WorkspaceHooks,
};
use super::raw::{kind_of, RawConfig, RawTracker};
use super::stages::{build_stages, check_status};

/// Default claim lease, seconds.
pub(crate) const DEFAULT_TTL_SECONDS: u64 = 600;
/// Default `poll_interval_seconds`.
pub(crate) const DEFAULT_POLL_SECONDS: u64 = 30;
/// Default `shutdown_grace_seconds`.
pub(crate) const DEFAULT_GRACE_SECONDS: u64 = 30;
/// Default global in-flight ceiling.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: u32 = 4;
/// Default per-role in-flight ceiling.
pub(crate) const DEFAULT_PER_ROLE: u32 = 1;
/// Default terminal states.
pub(crate) const DEFAULT_TERMINAL: &[&str] = &["done", "cancelled"];
/// Default agent timeout, seconds.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: u64 = 3600;
/// Default workspace hook timeout, seconds.
pub(crate) const DEFAULT_HOOK_TIMEOUT: u64 = 60;
/// Default number of ticks between automatic workspace prunes.
pub(crate) const DEFAULT_PRUNE_EVERY_TICKS: u32 = 10;
/// Default stall timeout, seconds.
pub(crate) const DEFAULT_STALL_SECONDS: u64 = 300;
/// Default attempts per stage.
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default backoff base, seconds.
pub(crate) const DEFAULT_BACKOFF_BASE: u64 = 10;
/// Default backoff ceiling, seconds.
pub(crate) const DEFAULT_BACKOFF_MAX: u64 = 300;

/// `base` joined with `rel` unless `rel` is absolute, without `.` components, and with
/// `..` folded into the component before it (`pipelines/../state` is shown and used as
/// `state`). Folding is lexical, like a person reads the path; a `..` that would climb
/// above the start of a relative path is kept.
pub(super) fn resolve(base: &Path, rel: &str) -> PathBuf {
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
pub(super) fn at_least<T: Copy + PartialOrd + std::fmt::Display>(
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

/// A path value: non-empty, resolved against `base`.
fn path_value(
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
    resolve(base, &v)
}

/// An `http://` or `https://` URL with a host.
pub(super) fn check_url(problems: &mut Problems, path: &FieldPath, url: &str) {
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
pub(super) fn env_name(
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

/// Build the `Config` from `raw`, recording every problem. `base` is the directory relative
/// paths resolve against. Returns `None` when something was wrong.
pub(crate) fn normalize(
    mut raw: RawConfig,
    source: Option<&Path>,
    base: &Path,
    problems: &mut Problems,
) -> Option<Config> {
    let root = FieldPath::root();
    let tracker = match raw.tracker.take() {
        Some(RawTracker::Local { path }) => {
            let p = root.key("tracker").key("path");
            Some(TrackerConfig::Local {
                path: path_value(problems, &p, Some(path), "", base),
            })
        }
        Some(RawTracker::Github {
            repo,
            token_env,
            api_url,
            status_label_prefix,
            priority_label_prefix,
        }) => {
            let t = root.key("tracker");
            let valid_repo = repo.split_once('/').is_some_and(|(owner, name)| {
                let ok = |s: &str| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                };
                ok(owner) && ok(name)
            });
            if !valid_repo {
                problems.at_value(
                    &t.key("repo"),
                    format!("expected `owner/name`, found {repo:?}"),
                );
            }
            let api_url = api_url.unwrap_or_else(|| "https://api.github.com".to_string());
            check_url(problems, &t.key("api_url"), &api_url);
            let token_env = env_name(problems, &t.key("token_env"), token_env, "GITHUB_TOKEN");
            let status_label_prefix = status_label_prefix.unwrap_or_else(|| "status:".to_string());
            if status_label_prefix.is_empty() {
                problems.at_value(
                    &t.key("status_label_prefix"),
                    "expected a non-empty label prefix such as `status:`",
                );
            }
            Some(TrackerConfig::Github {
                repo,
                token_env,
                api_url: api_url.trim_end_matches('/').to_string(),
                status_label_prefix,
                priority_label_prefix: priority_label_prefix
                    .unwrap_or_else(|| "priority:".to_string()),
            })
        }
        Some(RawTracker::Redmine {
            url,
            project,
            api_key_env,
        }) => {
            let t = root.key("tracker");
            check_url(problems, &t.key("url"), &url);
            if project.trim().is_empty() {
                problems.at_value(&t.key("project"), "expected the project identifier");
            }
            let api_key_env = env_name(
                problems,
                &t.key("api_key_env"),
                api_key_env,
                "REDMINE_API_KEY",
            );
            Some(TrackerConfig::Redmine {
                url: url.trim_end_matches('/').to_string(),
                project,
                api_key_env,
            })
        }
        None => {
            problems.at(
                super::locate::Position::START,
                &root.key("tracker"),
                "missing required key `tracker`; expected e.g. `tracker: {kind: local, path: board}`",
            );
            None
        }
    };
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

    let stages = build_stages(&mut raw, &terminal_states, per_role, problems);
    for (i, s) in stages.iter().enumerate() {
        let p = root.key("pipeline_stages").index(i).key("max_in_flight");
        at_least(problems, &p, Some(s.max_in_flight), 1, 1);
    }

    let per_status = c.per_status_max_in_flight.unwrap_or_default();
    let status_path = conc_path.key("per_status_max_in_flight");
    for (status, cap) in &per_status {
        let p = status_path.key(status);
        at_least(problems, &p, Some(*cap), 1, 1);
        if !stages.is_empty() && !stages.iter().any(|s| &s.claim_status == status) {
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
    let workspace = normalize_workspace(std::mem::take(&mut raw.workspace), base, problems);
    let hooks = build_hooks(raw.hooks.take(), &stages, base, problems);
    let b = std::mem::take(&mut raw.budgets);
    let budgets_path = root.key("budgets");
    if b.max_cost_usd_per_ticket
        .is_some_and(|c| !(c > 0.0 && c.is_finite()))
    {
        problems.at_value(
            &budgets_path.key("max_cost_usd_per_ticket"),
            "expected a positive number of dollars",
        );
    }
    if b.max_tokens_per_ticket == Some(0) {
        problems.at_value(
            &budgets_path.key("max_tokens_per_ticket"),
            "expected at least 1",
        );
    }
    if b.max_runs_per_ticket == Some(0) {
        problems.at_value(
            &budgets_path.key("max_runs_per_ticket"),
            "expected at least 1",
        );
    }
    let budgets = Budgets {
        max_cost_usd_per_ticket: b.max_cost_usd_per_ticket,
        max_tokens_per_ticket: b.max_tokens_per_ticket,
        max_runs_per_ticket: b.max_runs_per_ticket,
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
        state_root,
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
        poll_interval: Duration::from_secs(poll_s),
        shutdown_grace: Duration::from_secs(grace_s),
        http,
    })
}

/// `workspace:`: hook argvs (program resolved like `agent.command`), limits.
fn normalize_workspace(
    raw: super::raw::RawWorkspace,
    base: &Path,
    problems: &mut Problems,
) -> WorkspaceConfig {
    let path = FieldPath::root().key("workspace");
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
    }
}

/// A scalar as the string an argv element or environment value would hold.
pub(super) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A command given as argv (never a shell string): at least a non-empty program; a
/// relative program path containing a `/` is resolved against `base`.
pub(super) fn argv_value(
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
        if program.contains('/') && Path::new(program.as_str()).is_relative() {
            *program = resolve(base, program).to_string_lossy().into_owned();
        }
    }
    command
}

/// An argv-like list: every item a scalar, kept as text (`agent.extra_args`, and the
/// body of every command).
pub(super) fn argv_list(problems: &mut Problems, path: &FieldPath, value: Value) -> Vec<String> {
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

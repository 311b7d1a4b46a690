//! `sortie pipeline validate`: check a config and print the pipeline as a chain.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use crate::agent::PromptError;
use crate::agent::RoleTemplates;
use crate::config::{Config, ConfigError, FieldStep};

use super::{EXIT_OK, EXIT_USAGE};

mod summary;

/// Validate `config`, print the chain (exit 0) or every error as `FILE:LINE:COL: message` (exit 2).
/// `offline`: do not check `workspace.git.url` over the network.
pub fn run(config: &Path, offline: bool) -> anyhow::Result<u8> {
    match Config::load(config) {
        Ok(cfg) => {
            // Role templates are part of the pipeline: an unknown variable or a bad
            // front matter is reported here, before anything runs.
            let templates = match RoleTemplates::for_config(&cfg) {
                Ok(templates) => templates,
                Err(err) => {
                    writeln!(
                        std::io::stderr().lock(),
                        "sortie: {}",
                        role_error(&cfg, &err)
                    )?;
                    return Ok(EXIT_USAGE);
                }
            };
            // A config whose board is not there cannot run: an error, as `tick` says.
            if let Some(missing) = missing_board(&cfg) {
                writeln!(std::io::stderr().lock(), "{missing}")?;
                return Ok(EXIT_USAGE);
            }
            // The config is valid; a missing program is this machine's problem, but
            // `pipeline tick` will refuse to start, so say it now.
            let mut warned = std::collections::BTreeSet::new();
            for (role, program) in templates.missing_programs(&cfg) {
                if warned.insert(program.clone()) {
                    writeln!(
                        std::io::stderr().lock(),
                        "warning: agent program `{program}` (role {role}) is not found on this machine; `pipeline tick` will refuse to run",
                    )?;
                }
            }
            // Verify programs, the sandbox and the git remote, as a run will meet them.
            for w in super::preflight::warnings(&cfg, &templates, offline) {
                writeln!(std::io::stderr().lock(), "warning: {w}")?;
            }
            for w in &cfg.warnings {
                writeln!(std::io::stderr().lock(), "warning: {w}")?;
            }
            for w in commits_without_git(&cfg, &templates) {
                writeln!(std::io::stderr().lock(), "warning: {w}")?;
            }
            for (first, again) in cfg.status_case_variants() {
                writeln!(
                    std::io::stderr().lock(),
                    "warning: statuses `{first}` and `{again}` differ only by case; sortie treats them as one status",
                )?;
            }
            let mut text = describe(&cfg);
            for wait in cap_waits_now(&cfg) {
                let _ = writeln!(text, "now: {}", wait.to_text());
            }
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
            Ok(EXIT_OK)
        }
        Err(ConfigError::Invalid { diagnostics }) => {
            let mut err = std::io::stderr().lock();
            for d in &diagnostics {
                writeln!(err, "{d}")?;
            }
            Ok(EXIT_USAGE)
        }
        // `main` prints it with its cause and maps `ConfigError` to exit code 2.
        Err(read) => Err(read.into()),
    }
}

/// Role templates that ask the agent to commit or open a pull request while
/// `workspace.git` is not configured: each ticket's workspace is then an empty
/// directory, not a clone, so there is nothing to commit to (issue #30). One warning per
/// role file, at the first line that asks, as `FILE:LINE:COL: message`. Runs of sortie's
/// own demo agent (`scripts/demo-agent`) are left out: it reads no prompt.
fn commits_without_git(cfg: &Config, templates: &RoleTemplates) -> Vec<String> {
    if cfg.workspace.git.is_some() {
        return Vec::new();
    }
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for stage in &cfg.stages {
        let runs = std::iter::once((cfg.roles_dir.join(format!("{}.md", stage.role)), None)).chain(
            stage
                .routes
                .iter()
                .filter_map(|r| r.role_file.clone().map(|f| (f, Some(r)))),
        );
        for (file, route) in runs {
            let agent = templates.agent_for(cfg, stage, route);
            let program = crate::agent::preset_argv(&agent)
                .first()
                .cloned()
                .unwrap_or_default();
            let demo = Path::new(&program).file_name() == Some(std::ffi::OsStr::new("demo-agent"));
            if !demo && !files.contains(&file) {
                files.push(file);
            }
        }
    }
    let mut out = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let asks = text
            .lines()
            .enumerate()
            .find_map(|(i, line)| asks_for_commits(line).map(|(col, what)| (i + 1, col, what)));
        if let Some((line, col, what)) = asks {
            out.push(format!(
                "{}:{line}:{col}: this role asks the agent to {what}, but `workspace.git` is not \
                 configured: each ticket's workspace is an empty directory, not a clone of your \
                 repository; set `workspace.git.url` (docs/workspaces.md)",
                file.display()
            ));
        }
    }
    out
}

/// Where `line` asks for a commit or a pull (merge) request: the 1-based column and
/// what it asks for.
fn asks_for_commits(line: &str) -> Option<(usize, &'static str)> {
    // Lines that print the `reaction` value render only for a reaction to a pull
    // request, and reactions need `workspace.git` (through `pull_request`).
    if line.contains("{{ reaction.") || line.contains("{{reaction.") {
        return None;
    }
    let lower = line.to_lowercase();
    let word = |needle: &str| {
        lower.match_indices(needle).find_map(|(at, _)| {
            let before = lower[..at].chars().next_back();
            let after = lower[at + needle.len()..].chars().next();
            let edge = |c: Option<char>| !c.is_some_and(char::is_alphanumeric);
            (edge(before) && edge(after)).then_some(at)
        })
    };
    let found = [
        (word("commit"), "commit"),
        (word("pull request"), "open a pull request"),
        (word("merge request"), "open a merge request"),
    ]
    .into_iter()
    .filter_map(|(at, what)| at.map(|at| (at, what)))
    .min_by_key(|(at, _)| *at)?;
    let col = lower[..found.0].chars().count() + 1;
    Some((col, found.1))
}

/// A local board whose directory does not exist (or is not a directory), as a config
/// diagnostic at `tracker.path` saying how to create it. Such a config cannot run:
/// `pipeline validate` and `pipeline tick` exit 2 with it (issue #29).
pub(super) fn missing_board(cfg: &Config) -> Option<crate::config::Diagnostic> {
    let crate::config::TrackerConfig::Local { path } = &cfg.tracker else {
        return None;
    };
    let message = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return None,
        Ok(_) => format!(
            "{} is not a directory, so it cannot be a board; point tracker.path at a board \
             directory (`sortie board init DIR` creates one)",
            path.display()
        ),
        Err(_) => format!(
            "the board directory {} does not exist; create it with `sortie board init {}`",
            path.display(),
            path.display()
        ),
    };
    Some(cfg.diagnostic_at(
        &[FieldStep::Key("tracker"), FieldStep::Key("path")],
        message,
    ))
}

/// On a local board (read from files: no request, no credential), the caps that hold
/// tickets back right now, from a dry-run tick. Other trackers are not read by
/// `validate`: `pipeline tick --dry-run` says the same for them. Anything that fails
/// here (an unreadable board or ledger) says nothing: `validate` checks the config.
fn cap_waits_now(cfg: &Config) -> Vec<crate::pipeline::report::CapWait> {
    let crate::config::TrackerConfig::Local { path } = &cfg.tracker else {
        return Vec::new();
    };
    if !path.is_dir() {
        return Vec::new();
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let dry = async {
        let tracker = crate::tracker::open(cfg).ok()?;
        // Read the ledger when there is one; never create it.
        let ledger: std::sync::Arc<dyn crate::ledger::Ledger> =
            if matches!(cfg.ledger, crate::config::LedgerConfig::Sqlite)
                && cfg.ledger_path().exists()
            {
                crate::ledger::open(cfg).ok()?
            } else {
                std::sync::Arc::new(crate::ledger::SqliteLedger::open_in_memory().ok()?)
            };
        let pipeline = crate::pipeline::Pipeline::builder(cfg.clone(), tracker, ledger)
            .require_agents(false)
            .build()
            .await
            .ok()?;
        let report = pipeline
            .tick(crate::pipeline::TickOptions { dry_run: true })
            .await
            .ok()?;
        Some(report.cap_waits)
    };
    runtime.block_on(dry).unwrap_or_default()
}

/// A role file problem as a config diagnostic: a missing role file points at the stage
/// that names the role (`FILE:LINE:COL: pipeline_stages[1].role: ...`), a template
/// error at its own line in the role file.
pub fn role_error(cfg: &Config, err: &PromptError) -> String {
    match err {
        PromptError::Read { path, cause } => {
            let route = cfg.stages.iter().enumerate().find_map(|(i, s)| {
                s.routes
                    .iter()
                    .position(|r| r.role_file.as_deref() == Some(path.as_path()))
                    .map(|j| (i, j))
            });
            if let Some((i, j)) = route {
                let stage = &cfg.stages[i];
                let message = format!(
                    "cannot read the role file of route {} of role `{}`, {} ({cause}); create it, \
                     or fix `role_file` (relative to the config file's directory)",
                    stage.routes[j].label(j),
                    stage.role,
                    path.display()
                );
                let at = [
                    FieldStep::Key("pipeline_stages"),
                    FieldStep::Index(i),
                    FieldStep::Key("routes"),
                    FieldStep::Index(j),
                    FieldStep::Key("role_file"),
                ];
                return cfg.diagnostic_at(&at, message).to_string();
            }
            let role = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let message = format!(
                "cannot read the role file of role `{role}`, {} ({cause}); create it, or fix \
                 `roles_dir` (now {}) or the role's name",
                path.display(),
                cfg.roles_dir.display()
            );
            let stage = cfg.stages.iter().position(|s| s.role == role);
            let written = cfg
                .source
                .as_deref()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            let d = match stage {
                Some(i) if written.contains("pipeline_stages") => cfg.diagnostic_at(
                    &[
                        FieldStep::Key("pipeline_stages"),
                        FieldStep::Index(i),
                        FieldStep::Key("role"),
                    ],
                    message,
                ),
                _ if written.contains("roles_dir") => {
                    cfg.diagnostic_at(&[FieldStep::Key("roles_dir")], message)
                }
                _ => cfg.diagnostic_at(&[FieldStep::Key("role")], message),
            };
            d.to_string()
        }
        other => other.to_string(),
    }
}

/// The pipeline as chains of success links, then one line per stage, then a summary.
pub fn describe(cfg: &Config) -> String {
    let mut out = String::new();
    for chain in chains(cfg) {
        out.push_str(&chain);
        out.push('\n');
    }
    out.push('\n');
    for s in &cfg.stages {
        let mut line = format!("{}: claims {}", s.role, s.claim_status);
        if let Some(ip) = &s.in_progress_status {
            let _ = write!(line, ", runs in {ip}");
        }
        match &s.success_status {
            Some(ok) => {
                let _ = write!(line, ", success -> {ok}");
            }
            None => line.push_str(", success -> (stays)"),
        }
        match &s.failure_status {
            Some(fail) => {
                let _ = write!(line, ", failure -> {fail}");
            }
            None => line.push_str(", failure -> (stays, held)"),
        }
        if let (Some(rework), Some(back)) = (&s.rework, s.rework_target()) {
            let to = cfg
                .stages
                .iter()
                .find(|t| crate::tracker::same_name(&t.claim_status, back))
                .map_or("?", |t| t.role.as_str());
            let _ = write!(
                line,
                " (back edge {} -> {to}: sent back at most {} times, then {})",
                s.role,
                rework.max,
                rework.then.as_deref().unwrap_or("held")
            );
        }
        if let Some(prior) = &s.requires_prior_role {
            let _ = write!(line, ", requires {prior}");
        }
        if !s.filter.is_empty() {
            let f = &s.filter;
            let mut parts = Vec::new();
            if !f.labels.is_empty() {
                parts.push(format!("labels {}", f.labels.join(", ")));
            }
            if !f.exclude_labels.is_empty() {
                parts.push(format!("not {}", f.exclude_labels.join(", ")));
            }
            if let Some(a) = &f.assignee {
                parts.push(format!("assignee {a}"));
            }
            let _ = write!(line, ", only tickets with {}", parts.join("; "));
        }
        let _ = writeln!(out, "{line}, max {} in flight", s.max_in_flight);
        for (i, route) in s.routes.iter().enumerate() {
            let _ = writeln!(out, "  {}", describe_route(i, route));
        }
        if let Some(verify) = &s.verify {
            let _ = writeln!(out, "  {}", summary::verify(verify));
        }
    }
    out.push('\n');
    match &cfg.tracker {
        crate::config::TrackerConfig::Local { path } => {
            let _ = writeln!(out, "tracker: local board at {}", path.display());
        }
        crate::config::TrackerConfig::Github {
            repo,
            api_url,
            token_env,
            status_label_prefix,
            ..
        } => {
            let _ = writeln!(
                out,
                "tracker: GitHub {repo} at {api_url} (token from ${token_env}, statuses as `{status_label_prefix}<status>` labels)"
            );
        }
        crate::config::TrackerConfig::Gitlab {
            url,
            project,
            token_env,
            status_label_prefix,
            ..
        } => {
            let _ = writeln!(
                out,
                "tracker: GitLab project {project} at {url} (token from ${token_env}, statuses as `{status_label_prefix}<status>` labels)"
            );
        }
        crate::config::TrackerConfig::Gitea {
            url,
            repo,
            token_env,
            status_label_prefix,
            ..
        } => {
            let _ = writeln!(
                out,
                "tracker: Gitea {repo} at {url} (token from ${token_env}, statuses as `{status_label_prefix}<status>` labels)"
            );
        }
        crate::config::TrackerConfig::Redmine {
            url,
            project,
            api_key_env,
        } => {
            let _ = writeln!(
                out,
                "tracker: Redmine project {project} at {url} (API key from ${api_key_env})"
            );
        }
        crate::config::TrackerConfig::Linear {
            team,
            token_env,
            api_url,
            token_type,
        } => {
            let kind = match token_type {
                crate::config::LinearTokenType::ApiKey => "API key",
                crate::config::LinearTokenType::Oauth => "OAuth token",
            };
            let _ = writeln!(
                out,
                "tracker: Linear team {team} at {api_url} ({kind} from ${token_env}, statuses are the team's workflow states)"
            );
        }
        crate::config::TrackerConfig::GithubProject {
            owner,
            project,
            status_field,
            token_env,
            api_url,
            ..
        } => {
            let _ = writeln!(
                out,
                "tracker: GitHub Project {owner}/{project} at {api_url} (token from ${token_env}, statuses are the options of its field {status_field:?})"
            );
        }
        crate::config::TrackerConfig::Jira {
            url,
            project,
            api_version,
            token_env,
            ..
        } => {
            let mode = if *api_version == 2 {
                "Data Center, REST v2"
            } else {
                "Cloud, REST v3"
            };
            let _ = writeln!(
                out,
                "tracker: Jira project {project} at {url} ({mode}, token from ${token_env})"
            );
        }
    }
    let _ = writeln!(
        out,
        "state root: {} (ledger {})",
        cfg.state_root.display(),
        cfg.ledger_path().display()
    );
    let _ = writeln!(out, "roles: {}", cfg.roles_dir.display());
    let _ = writeln!(out, "terminal states: {}", cfg.terminal_states.join(", "));
    let c = &cfg.concurrency;
    let _ = writeln!(
        out,
        "in flight: at most {} in total, {} per role by default",
        c.max_in_flight, c.per_role_max_in_flight
    );
    if !c.per_status_max_in_flight.is_empty() {
        let caps: Vec<String> = c
            .per_status_max_in_flight
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        let _ = writeln!(out, "per status: {}", caps.join(", "));
    }
    let a = &cfg.agent;
    let stall = a
        .stall_timeout
        .map_or("stall detection off".to_string(), |d| {
            format!("stall {}s", d.as_secs())
        });
    // An ACP agent's policy is the one thing about it the argv does not show.
    let protocol = match a.preset {
        crate::config::AgentPreset::Acp => format!(
            ", over ACP, permissions {}{}",
            a.permissions.as_str(),
            a.model
                .as_deref()
                .map(|m| format!(", model {m}"))
                .unwrap_or_default()
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "agent: {}{protocol} (timeout {}s, {stall})",
        a.command.join(" "),
        a.timeout.as_secs()
    );
    let _ = writeln!(
        out,
        "sandbox: {}{}",
        crate::config::sandbox_report(a.bubblewrap.as_ref()),
        summary::sandbox_extras(a.bubblewrap.as_ref())
    );
    let _ = writeln!(out, "{}", summary::git(cfg.workspace.git.as_ref()));
    let _ = writeln!(
        out,
        "{}",
        summary::pull_requests(cfg, cfg.pull_request.as_ref())
    );
    let _ = writeln!(out, "{}", summary::reactions(cfg.reactions.as_ref()));
    let _ = writeln!(out, "{}", summary::budgets(&cfg.budgets));
    let r = &cfg.retry;
    let _ = writeln!(
        out,
        "retry: {} attempts, backoff {}s doubling up to {}s",
        r.max_attempts,
        r.backoff_base.as_secs(),
        r.backoff_max.as_secs()
    );
    let _ = writeln!(out, "claim lease: {}s", cfg.claim_ttl.as_secs());
    out
}

/// `route hard: when labels hard -> model opus, role file /x/roles/backend-hard.md`.
fn describe_route(index: usize, route: &crate::config::Route) -> String {
    let w = &route.when;
    let mut when = Vec::new();
    if !w.labels.is_empty() {
        when.push(format!("labels {}", w.labels.join(", ")));
    }
    if !w.exclude_labels.is_empty() {
        when.push(format!("not {}", w.exclude_labels.join(", ")));
    }
    if let Some(a) = &w.assignee {
        when.push(format!("assignee {a}"));
    }
    let a = &route.agent;
    let mut what = Vec::new();
    if let Some(p) = a.preset {
        what.push(format!("preset {}", p.as_str()));
    }
    if let Some(c) = &a.command {
        what.push(format!("command {}", c.join(" ")));
    }
    if let Some(m) = &a.model {
        what.push(format!("model {m}"));
    }
    if let Some(t) = a.timeout {
        what.push(format!("timeout {}s", t.as_secs()));
    }
    if let Some(f) = &route.role_file {
        what.push(format!("role file {}", f.display()));
    }
    let what = if what.is_empty() {
        "the stage's agent settings".to_string()
    } else {
        what.join(", ")
    };
    format!(
        "route {}: when {} -> {what}",
        route.label(index),
        when.join("; ")
    )
}

/// `claim -[role]-> success ...` following success links from the first stage; stages not
/// reached that way start chains of their own, in stage order.
fn chains(cfg: &Config) -> Vec<String> {
    let mut visited = vec![false; cfg.stages.len()];
    let mut out = Vec::new();
    for start in 0..cfg.stages.len() {
        if visited[start] {
            continue;
        }
        let mut text = cfg.stages[start].claim_status.clone();
        let mut cur = start;
        loop {
            visited[cur] = true;
            let s = &cfg.stages[cur];
            let to = s.success_status.as_deref().unwrap_or("(stays)");
            let _ = write!(text, " -[{}]-> {to}", s.role);
            let next = cfg.stages.iter().enumerate().position(|(i, n)| {
                !visited[i] && Some(n.claim_status.as_str()) == s.success_status.as_deref()
            });
            match next {
                Some(n) => cur = n,
                None => break,
            }
        }
        out.push(text);
    }
    out
}

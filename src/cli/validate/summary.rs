//! What `pipeline validate` says is on, one line per optional section: the git
//! workspace, pull requests, reactions, budgets, each stage's `verify` and the sandbox's
//! extra paths, so a user can confirm a key was picked up (issue #52). A section that is
//! off says so, naming the key that turns it on.

use crate::config::{
    Bubblewrap, Budgets, Config, GitWorkspace, PullRequestConfig, ReactionsConfig, StageBudget,
    TrackerConfig, Verify,
};

/// `git: clone of URL, base main, branch sortie/{{ ticket.id }}, pushed after each
/// successful run`, or that workspaces start empty.
pub(super) fn git(git: Option<&GitWorkspace>) -> String {
    let Some(g) = git else {
        return "git: none: each ticket's workspace starts as an empty directory \
                (`workspace.git` clones your repository)"
            .to_string();
    };
    let push = if g.push {
        "pushed after each successful run"
    } else {
        "never pushed"
    };
    format!(
        "git: clone of {}, base {}, branch {}, {push}",
        g.url, g.base, g.branch
    )
}

/// `pull requests: opened after backend succeeds, on GitHub acme/widgets, as drafts,
/// titled "..."`, or none.
pub(super) fn pull_requests(cfg: &Config, pr: Option<&PullRequestConfig>) -> String {
    let Some(pr) = pr else {
        return "pull requests: none (`pull_request` opens them)".to_string();
    };
    let forge = cfg
        .forge
        .as_ref()
        .map_or_else(|| forge_name(&cfg.tracker), forge_name);
    let draft = if pr.draft {
        "as drafts"
    } else {
        "ready for review"
    };
    format!(
        "pull requests: opened after {} succeeds, on {forge}, {draft}, titled {:?}",
        pr.after, pr.title
    )
}

/// Where pull requests open, for people.
fn forge_name(forge: &TrackerConfig) -> String {
    match forge {
        TrackerConfig::Github { repo, api_url, .. } => format!("GitHub {repo} at {api_url}"),
        TrackerConfig::Gitlab { project, url, .. } => format!("GitLab project {project} at {url}"),
        TrackerConfig::Gitea { repo, url, .. } => format!("Gitea {repo} at {url}"),
        TrackerConfig::GithubProject { api_url, .. } => {
            format!("GitHub at {api_url}, in the repository of each ticket's issue")
        }
        _ => "the tracker".to_string(),
    }
}

/// `reactions: watch qa-passed; ci_failure back to backend (at most 3 rounds), ...;
/// merged -> done; ...`, or none.
pub(super) fn reactions(reactions: Option<&ReactionsConfig>) -> String {
    let Some(r) = reactions else {
        return "reactions: none: pull requests are not watched (`reactions`)".to_string();
    };
    let mut parts = vec![format!("watch {}", r.watch.join(", "))];
    let kinds: Vec<String> = r
        .rules
        .iter()
        .map(|(kind, rule)| {
            let mut how = format!("at most {} rounds", rule.max_rounds);
            if kind == &crate::config::ReactionKind::ReviewComments {
                how.push_str(&format!(", quiet {}s", rule.quiet.as_secs()));
            }
            if kind == &crate::config::ReactionKind::BotReview {
                if rule.bots.is_empty() {
                    how.push_str(", any bot");
                } else {
                    how.push_str(&format!(", bots {}", rule.bots.join(", ")));
                }
            }
            format!("{} back to {} ({how})", kind.as_str(), rule.to)
        })
        .collect();
    parts.push(if kinds.is_empty() {
        "no kind sends tickets back".to_string()
    } else {
        kinds.join(", ")
    });
    let held = |to: &Option<String>| to.clone().unwrap_or_else(|| "held".to_string());
    parts.push(format!("merged -> {}", held(&r.merged_to)));
    parts.push(format!(
        "closed unmerged -> {}",
        held(&r.closed_unmerged_to)
    ));
    parts.push(format!("out of rounds -> {}", held(&r.escalate_to)));
    parts.push(match r.auto_merge {
        Some(m) => format!("auto-merge by {}", m.as_str()),
        None => "a person merges".to_string(),
    });
    parts.push(format!("hold label {}", r.hold_label));
    format!("reactions: {}", parts.join("; "))
}

/// `budgets: per ticket $5, 2000000 tokens, 6 runs; per run of backend $1; per day
/// $50 (UTC)`, or none.
pub(super) fn budgets(b: &Budgets) -> String {
    let mut parts = Vec::new();
    let ticket = limits(
        b.max_cost_usd_per_ticket,
        b.max_tokens_per_ticket,
        b.max_runs_per_ticket,
    );
    if !ticket.is_empty() {
        parts.push(format!("per ticket {ticket}"));
    }
    for (
        role,
        StageBudget {
            max_cost_usd_per_run,
            max_tokens_per_run,
        },
    ) in &b.per_stage
    {
        let run = limits(*max_cost_usd_per_run, *max_tokens_per_run, None);
        if !run.is_empty() {
            parts.push(format!("per run of {role} {run}"));
        }
    }
    if let Some(day) = b.max_cost_usd_per_day {
        parts.push(format!("per day ${day} ({})", b.timezone.label()));
    }
    if parts.is_empty() {
        "budgets: none (`budgets`)".to_string()
    } else {
        format!("budgets: {}", parts.join("; "))
    }
}

/// `$5, 2000000 tokens, 6 runs`: the limits that are set.
fn limits(dollars: Option<f64>, tokens: Option<u64>, runs: Option<u32>) -> String {
    let parts: Vec<String> = [
        dollars.map(|d| format!("${d}")),
        tokens.map(|t| format!("{t} tokens")),
        runs.map(|r| format!("{r} runs")),
    ]
    .into_iter()
    .flatten()
    .collect();
    parts.join(", ")
}

/// A stage's `verify`: `verify: `cargo test`, then `make lint` (each within 900s; a
/// failure goes back to the agent with its output)`.
pub(super) fn verify(v: &Verify) -> String {
    let commands: Vec<String> = v
        .commands
        .iter()
        .map(|argv| format!("`{}`", argv.join(" ")))
        .collect();
    let failure = if v.retry_with_output {
        "a failure goes back to the agent with its output"
    } else {
        "a failure is final"
    };
    format!(
        "verify: {} (each within {}s; {failure})",
        commands.join(", then "),
        v.timeout.as_secs()
    )
}

/// The sandbox's extra paths and variables, after what `sandbox_report` says:
/// `; read-only /opt/tools; writable ~/.cache/x; env LANG`, or nothing.
pub(super) fn sandbox_extras(jail: Option<&Bubblewrap>) -> String {
    let Some(j) = jail else {
        return String::new();
    };
    let paths = |p: &[std::path::PathBuf]| {
        p.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    if !j.read_only.is_empty() {
        out.push_str(&format!("; read-only {}", paths(&j.read_only)));
    }
    if !j.writable.is_empty() {
        out.push_str(&format!("; writable {}", paths(&j.writable)));
    }
    if !j.env.is_empty() {
        out.push_str(&format!("; env {}", j.env.join(", ")));
    }
    out
}

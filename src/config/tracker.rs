//! The `tracker:` section: which adapter, and that adapter's own keys with their defaults.

use std::path::Path;

use super::defaults::{
    DEFAULT_BLOCKER_READS_PER_TICK, DEFAULT_GITHUB_GRAPHQL_URL, DEFAULT_LINEAR_API_URL,
};
use super::diagnostic::Problems;
use super::locate::{FieldPath, Position};
use super::model::{BlockersConfig, LinearTokenType, TicketFilter, TrackerConfig};
use super::raw::{RawBlockers, RawFilter, RawForge, RawTracker};
use super::values::{check_url, env_name, path_value};

/// Build the tracker config from its raw section, recording every problem; `base` is the
/// directory a relative board path resolves against.
pub(super) fn normalize_tracker(
    raw: Option<RawTracker>,
    base: &Path,
    problems: &mut Problems,
) -> Option<TrackerConfig> {
    let root = FieldPath::root();
    match raw {
        Some(raw) => Some(normalize_kind(raw, &root.key("tracker"), base, problems)),
        None => {
            problems.at(
                Position::START,
                &root.key("tracker"),
                "missing required key `tracker`; expected e.g. `tracker: {kind: local, path: board}`",
            );
            None
        }
    }
}

/// `forge:`: the GitHub, GitLab or Gitea repository pull requests open on, with the
/// same keys, defaults and checks as a tracker section of that kind (less the label
/// keys, which a forge that only opens pull requests does not use).
pub(super) fn normalize_forge(
    raw: Option<RawForge>,
    base: &Path,
    problems: &mut Problems,
) -> Option<TrackerConfig> {
    let raw = match raw? {
        RawForge::Github {
            repo,
            token_env,
            api_url,
        } => RawTracker::Github {
            repo,
            token_env,
            api_url,
            status_label_prefix: None,
            priority_label_prefix: None,
        },
        RawForge::Gitlab {
            url,
            project,
            token_env,
            auth,
        } => RawTracker::Gitlab {
            url,
            project,
            token_env,
            auth,
            status_label_prefix: None,
            priority_label_prefix: None,
            close_on: None,
        },
        RawForge::Gitea {
            url,
            repo,
            token_env,
        } => RawTracker::Gitea {
            url,
            repo,
            token_env,
            status_label_prefix: None,
            priority_label_prefix: None,
            close_on: None,
        },
    };
    Some(normalize_kind(
        raw,
        &FieldPath::root().key("forge"),
        base,
        problems,
    ))
}

/// One adapter's section, found at `t` (`tracker` or `forge`), with its defaults.
fn normalize_kind(
    raw: RawTracker,
    t: &FieldPath,
    base: &Path,
    problems: &mut Problems,
) -> TrackerConfig {
    match raw {
        RawTracker::Local { path } => {
            let p = t.key("path");
            TrackerConfig::Local {
                path: path_value(problems, &p, Some(path), "", base),
            }
        }
        RawTracker::Github {
            repo,
            token_env,
            api_url,
            status_label_prefix,
            priority_label_prefix,
        } => {
            check_repo(problems, &t.key("repo"), &repo);
            let api_url = api_url.unwrap_or_else(|| "https://api.github.com".to_string());
            check_url(problems, &t.key("api_url"), &api_url);
            let token_env = env_name(problems, &t.key("token_env"), token_env, "GITHUB_TOKEN");
            let status_label_prefix = label_prefix(problems, t, status_label_prefix, "status:");
            TrackerConfig::Github {
                repo,
                token_env,
                api_url: api_url.trim_end_matches('/').to_string(),
                status_label_prefix,
                priority_label_prefix: priority_label_prefix
                    .unwrap_or_else(|| "priority:".to_string()),
            }
        }
        RawTracker::Gitlab {
            url,
            project,
            token_env,
            auth,
            status_label_prefix,
            priority_label_prefix,
            close_on,
        } => {
            let url = url.unwrap_or_else(|| "https://gitlab.com".to_string());
            check_url(problems, &t.key("url"), &url);
            let project = project.trim().trim_matches('/').to_string();
            let segments_ok = !project.is_empty()
                && project.split('/').all(|s| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                });
            if !segments_ok {
                problems.at_value(
                    &t.key("project"),
                    format!("expected a project path such as `group/sub/repo` or a numeric id, found {project:?}"),
                );
            }
            let bearer = match auth.as_deref().map(str::trim) {
                None | Some("private-token") => false,
                Some("bearer") => true,
                Some(other) => {
                    problems.at_value(
                        &t.key("auth"),
                        format!("expected `private-token` or `bearer`, found {other:?}"),
                    );
                    false
                }
            };
            TrackerConfig::Gitlab {
                url: url.trim_end_matches('/').to_string(),
                project,
                token_env: env_name(problems, &t.key("token_env"), token_env, "GITLAB_TOKEN"),
                bearer,
                status_label_prefix: label_prefix(problems, t, status_label_prefix, "status::"),
                priority_label_prefix: priority_label_prefix
                    .unwrap_or_else(|| "priority::".to_string()),
                close_on: close_on_list(problems, t, close_on),
            }
        }
        RawTracker::Gitea {
            url,
            repo,
            token_env,
            status_label_prefix,
            priority_label_prefix,
            close_on,
        } => {
            check_url(problems, &t.key("url"), &url);
            check_repo(problems, &t.key("repo"), &repo);
            TrackerConfig::Gitea {
                url: url.trim_end_matches('/').to_string(),
                repo,
                token_env: env_name(problems, &t.key("token_env"), token_env, "GITEA_TOKEN"),
                status_label_prefix: label_prefix(problems, t, status_label_prefix, "status/"),
                priority_label_prefix: priority_label_prefix
                    .unwrap_or_else(|| "priority/".to_string()),
                close_on: close_on_list(problems, t, close_on),
            }
        }
        RawTracker::Redmine {
            url,
            project,
            api_key_env,
        } => {
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
            TrackerConfig::Redmine {
                url: url.trim_end_matches('/').to_string(),
                project,
                api_key_env,
            }
        }
        RawTracker::Linear {
            team,
            token_env,
            api_url,
            token_type,
        } => {
            let team = team.trim().to_string();
            if team.is_empty() || !team.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                problems.at_value(
                    &t.key("team"),
                    format!("expected the team's key as in its issue identifiers (`ENG` for ENG-123), found {team:?}"),
                );
            }
            let api_url = api_url.unwrap_or_else(|| DEFAULT_LINEAR_API_URL.to_string());
            check_url(problems, &t.key("api_url"), &api_url);
            let token_env = env_name(problems, &t.key("token_env"), token_env, "LINEAR_API_KEY");
            let token_type = match token_type.as_deref().map(str::trim) {
                None | Some("api_key") => LinearTokenType::ApiKey,
                Some("oauth") => LinearTokenType::Oauth,
                Some(other) => {
                    problems.at_value(
                        &t.key("token_type"),
                        format!("expected `api_key` (a personal API key, the default) or `oauth` (an OAuth access token), found {other:?}"),
                    );
                    LinearTokenType::ApiKey
                }
            };
            TrackerConfig::Linear {
                team,
                token_env,
                api_url: api_url.trim_end_matches('/').to_string(),
                token_type,
            }
        }
        RawTracker::GithubProject {
            owner,
            project,
            status_field,
            token_env,
            api_url,
            rest_url,
        } => {
            let owner = owner.trim().to_string();
            let owner_ok =
                !owner.is_empty() && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !owner_ok {
                problems.at_value(
                    &t.key("owner"),
                    format!("expected the login of the organization or user owning the project (`acme`), found {owner:?}"),
                );
            }
            if project == 0 {
                problems.at_value(
                    &t.key("project"),
                    "expected the project's number as in its URL (`7` for /orgs/acme/projects/7), found 0",
                );
            }
            let status_field = status_field.unwrap_or_else(|| "Status".to_string());
            if status_field.trim().is_empty() {
                problems.at_value(
                    &t.key("status_field"),
                    "expected the name of a single-select field of the project (default `Status`), found an empty string",
                );
            }
            let api_url = api_url.unwrap_or_else(|| DEFAULT_GITHUB_GRAPHQL_URL.to_string());
            check_url(problems, &t.key("api_url"), &api_url);
            let api_url = api_url.trim_end_matches('/').to_string();
            let rest_url = match rest_url {
                Some(url) => {
                    check_url(problems, &t.key("rest_url"), &url);
                    url.trim_end_matches('/').to_string()
                }
                None => rest_url_of(&api_url),
            };
            let token_env = env_name(problems, &t.key("token_env"), token_env, "GITHUB_TOKEN");
            TrackerConfig::GithubProject {
                owner,
                project,
                status_field: status_field.trim().to_string(),
                token_env,
                api_url,
                rest_url,
            }
        }
        RawTracker::Jira {
            url,
            project,
            api_version,
            email_env,
            token_env,
            jql,
            transitions,
            priority_order,
        } => {
            check_url(problems, &t.key("url"), &url);
            let key_ok = !project.is_empty()
                && project
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                && project.starts_with(|c: char| c.is_ascii_alphabetic());
            if !key_ok {
                problems.at_value(
                    &t.key("project"),
                    format!("expected a Jira project key such as `PROJ`, found {project:?}"),
                );
            }
            let api_version = api_version.unwrap_or(3);
            if api_version != 2 && api_version != 3 {
                problems.at_value(
                    &t.key("api_version"),
                    format!(
                        "expected 3 (Jira Cloud) or 2 (Jira Data Center / Server), found {api_version}"
                    ),
                );
            }
            let email_env = if api_version == 2 {
                if email_env.is_some() {
                    problems.at_key(
                        &t.key("email_env"),
                        "Data Center (`api_version: 2`) authenticates with a personal access \
                         token alone; remove `email_env`",
                    );
                }
                None
            } else {
                Some(env_name(
                    problems,
                    &t.key("email_env"),
                    email_env,
                    "JIRA_EMAIL",
                ))
            };
            let token_env = env_name(problems, &t.key("token_env"), token_env, "JIRA_TOKEN");
            if jql.as_deref().is_some_and(|q| q.trim().is_empty()) {
                problems.at_value(
                    &t.key("jql"),
                    "expected a JQL clause such as `labels = agent-ok`, found an empty string",
                );
            }
            let transitions = transitions.unwrap_or_default();
            for (status, name) in &transitions {
                if name.trim().is_empty() {
                    problems.at_value(
                        &t.key("transitions").key(status),
                        "expected the name of a transition of the workflow, found an empty string",
                    );
                }
            }
            let priority_order = priority_order.unwrap_or_else(|| {
                ["Highest", "High", "Medium", "Low", "Lowest"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            });
            for (i, name) in priority_order.iter().enumerate() {
                if name.trim().is_empty() {
                    problems.at_value(
                        &t.key("priority_order").index(i),
                        "expected a priority name, found an empty string",
                    );
                }
            }
            TrackerConfig::Jira {
                url: url.trim_end_matches('/').to_string(),
                project,
                api_version,
                email_env,
                token_env,
                jql: jql.map(|q| q.trim().to_string()),
                transitions,
                priority_order,
            }
        }
    }
}

/// `repo: owner/name` as GitHub and Gitea spell it.
fn check_repo(problems: &mut Problems, path: &FieldPath, repo: &str) {
    let valid = repo.split_once('/').is_some_and(|(owner, name)| {
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        ok(owner) && ok(name)
    });
    if !valid {
        problems.at_value(path, format!("expected `owner/name`, found {repo:?}"));
    }
}

/// `status_label_prefix`, defaulting to `default`; an empty prefix would make every
/// label a status.
fn label_prefix(
    problems: &mut Problems,
    tracker: &FieldPath,
    raw: Option<String>,
    default: &str,
) -> String {
    let prefix = raw.unwrap_or_else(|| default.to_string());
    if prefix.trim().is_empty() {
        problems.at_value(
            &tracker.key("status_label_prefix"),
            format!("expected a non-empty label prefix such as `{default}`"),
        );
    }
    prefix
}

/// `close_on: [done]`: statuses whose transition also closes the issue.
fn close_on_list(
    problems: &mut Problems,
    tracker: &FieldPath,
    raw: Option<Vec<String>>,
) -> Vec<String> {
    let list = raw.unwrap_or_default();
    for (i, status) in list.iter().enumerate() {
        if status.trim().is_empty() {
            problems.at_value(
                &tracker.key("close_on").index(i),
                "expected a status name, found an empty string",
            );
        }
    }
    list
}

/// `tracker.transitions` (Jira): every pinned status is one a stage moves tickets to
/// (an in-progress, success or failure status, or a claim status a retry returns to);
/// a typo would otherwise leave the pin unused without a word.
pub(super) fn check_pinned_transitions(
    transitions: &std::collections::BTreeMap<String, String>,
    stages: &[super::model::Stage],
    problems: &mut Problems,
) {
    if stages.is_empty() {
        return;
    }
    let targets: Vec<&str> = stages
        .iter()
        .flat_map(|s| {
            [
                Some(s.claim_status.as_str()),
                s.in_progress_status.as_deref(),
                s.success_status.as_deref(),
                s.failure_status.as_deref(),
            ]
        })
        .flatten()
        .fold(Vec::new(), |mut v, s| {
            if !v.iter().any(|x| crate::names::same_name(x, s)) {
                v.push(s);
            }
            v
        });
    for status in transitions.keys() {
        if !targets.iter().any(|t| crate::names::same_name(t, status)) {
            problems.at_key(
                &FieldPath::root()
                    .key("tracker")
                    .key("transitions")
                    .key(status),
                format!(
                    "`{status}` is no status of the pipeline; expected one of: {}",
                    targets.join(", ")
                ),
            );
        }
    }
}

/// A `filter:` section (under `tracker:` or a stage), found at `path`. `project` is a
/// Linear notion: `linear` says whether the tracker is one.
pub(super) fn normalize_filter(
    raw: Option<RawFilter>,
    path: &FieldPath,
    linear: bool,
    problems: &mut Problems,
) -> TicketFilter {
    let Some(raw) = raw else {
        return TicketFilter::default();
    };
    let names = |problems: &mut Problems, key: &str, list: Option<Vec<String>>| {
        let list = list.unwrap_or_default();
        for (i, name) in list.iter().enumerate() {
            if name.trim().is_empty() {
                problems.at_value(
                    &path.key(key).index(i),
                    "expected a label name, found an empty string",
                );
            }
        }
        list
    };
    let labels = names(problems, "labels", raw.labels);
    let exclude_labels = names(problems, "exclude_labels", raw.exclude_labels);
    for (i, label) in exclude_labels.iter().enumerate() {
        if labels.iter().any(|l| crate::names::same_name(l, label)) {
            problems.at_value(
                &path.key("exclude_labels").index(i),
                format!("label {label:?} is both required (`labels`) and excluded; no ticket could pass"),
            );
        }
    }
    if raw.assignee.as_deref().is_some_and(|a| a.trim().is_empty()) {
        problems.at_value(
            &path.key("assignee"),
            "expected a user name or `me`, found an empty string",
        );
    }
    if raw.project.is_some() && !linear {
        problems.at_key(
            &path.key("project"),
            "`project` filters Linear issues by project; this tracker has none (use `labels`)",
        );
    }
    TicketFilter {
        labels,
        exclude_labels,
        assignee: raw.assignee,
        project: raw.project,
    }
}

/// A stage's filter: `base` (`tracker.filter`) narrowed by the stage's `own` one, found
/// at `path`. Labels of both are required and excluded labels of both excluded; an
/// assignee set in both must be the same person.
pub(super) fn narrow_filter(
    base: &TicketFilter,
    own: TicketFilter,
    path: &FieldPath,
    problems: &mut Problems,
) -> TicketFilter {
    let union = |a: &[String], b: Vec<String>| {
        let mut out = a.to_vec();
        for name in b {
            if !out.iter().any(|o| crate::names::same_name(o, &name)) {
                out.push(name);
            }
        }
        out
    };
    let clash = |required: &[String], excluded: &[String]| {
        required
            .iter()
            .find(|l| excluded.iter().any(|e| crate::names::same_name(e, l)))
            .cloned()
    };
    let crossed = clash(&base.labels, &own.exclude_labels)
        .or_else(|| clash(&own.labels, &base.exclude_labels));
    if let Some(label) = crossed {
        problems.at_key(
            path,
            format!("label {label:?} is required by one of `tracker.filter` and this filter and excluded by the other; no ticket could pass"),
        );
    }
    let labels = union(&base.labels, own.labels);
    let exclude_labels = union(&base.exclude_labels, own.exclude_labels);
    let assignee = match (&base.assignee, own.assignee) {
        (Some(a), Some(b)) if !crate::names::same_name(a, &b) => {
            problems.at_value(
                &path.key("assignee"),
                format!("`tracker.filter` already requires assignee {a:?}; a stage filter narrows it and cannot ask for {b:?} instead"),
            );
            Some(b)
        }
        (_, Some(b)) => Some(b),
        (a, None) => a.clone(),
    };
    TicketFilter {
        labels,
        exclude_labels,
        assignee,
        project: own.project.or_else(|| base.project.clone()),
    }
}

/// The `tracker.blockers` section.
pub(super) fn normalize_blockers(
    raw: Option<RawBlockers>,
    tracker: Option<&TrackerConfig>,
    problems: &mut Problems,
) -> BlockersConfig {
    let raw = raw.unwrap_or_default();
    let path = FieldPath::root().key("tracker").key("blockers");
    if let Some(tracker) = tracker.filter(|t| raw.enabled == Some(true) && !t.can_read_blockers()) {
        let kind = match tracker {
            TrackerConfig::Gitea { .. } => "Gitea (issue dependencies)",
            _ => "this tracker",
        };
        problems.at_value(
            &path.key("enabled"),
            format!(
                "sortie cannot read blockers from {kind} yet; remove `enabled: true` \
                 (tickets there are never held by blockers)"
            ),
        );
    }
    let max = raw
        .max_reads_per_tick
        .unwrap_or(DEFAULT_BLOCKER_READS_PER_TICK);
    if max == 0 {
        problems.at_value(
            &path.key("max_reads_per_tick"),
            "expected at least 1 (set `enabled: false` to read no blockers)",
        );
    }
    let link_type = raw.link_type.map(|l| l.trim().to_string());
    if let Some(link_type) = &link_type {
        if tracker.is_some_and(|t| !matches!(t, TrackerConfig::Jira { .. })) {
            problems.at_value(
                &path.key("link_type"),
                "`link_type` names a Jira issue link type; this tracker has none (remove it)",
            );
        } else if link_type.is_empty() {
            problems.at_value(
                &path.key("link_type"),
                "expected the name of a Jira issue link type (default `Blocks`)",
            );
        }
    }
    BlockersConfig {
        enabled: raw.enabled,
        max_reads_per_tick: max,
        link_type,
    }
}

/// The REST base URL beside a GitHub GraphQL endpoint: `https://api.github.com/graphql`
/// gives `https://api.github.com`; GitHub Enterprise Server's `https://HOST/api/graphql`
/// gives `https://HOST/api/v3`; anything else, the endpoint less its last segment.
fn rest_url_of(graphql: &str) -> String {
    let base = graphql.strip_suffix("/graphql").unwrap_or(graphql);
    if base.ends_with("/api") {
        format!("{base}/v3")
    } else {
        base.to_string()
    }
}

/// The forge of a GitHub Project whose config names none: the GitHub repository its
/// workspace clones (`workspace.git.url`), on the host of its API, with its token. A
/// ticket's branch is pushed there, so its pull request opens there. `None` for other
/// trackers, or a URL that is no repository on that host.
pub(super) fn project_forge(tracker: &TrackerConfig, clone_url: &str) -> Option<TrackerConfig> {
    let TrackerConfig::GithubProject {
        token_env,
        rest_url,
        ..
    } = tracker
    else {
        return None;
    };
    let (host, repo) = github_repo_of(clone_url)?;
    let api_host = host_of(rest_url)?;
    let same_host = api_host.eq_ignore_ascii_case(&host)
        || api_host.eq_ignore_ascii_case(&format!("api.{host}"));
    same_host.then(|| TrackerConfig::Github {
        repo,
        token_env: token_env.clone(),
        api_url: rest_url.clone(),
        status_label_prefix: "status:".to_string(),
        priority_label_prefix: "priority:".to_string(),
    })
}

/// The host of an `http(s)://` URL.
fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split('/').next()?;
    let host = authority.rsplit('@').next()?.split(':').next()?;
    (!host.is_empty()).then(|| host.to_string())
}

/// `(host, "owner/name")` of a clone URL: `https://HOST/owner/name(.git)`,
/// `ssh://git@HOST(:port)/owner/name(.git)` or `git@HOST:owner/name(.git)`.
fn github_repo_of(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let (host, path) = if let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .or_else(|| url.strip_prefix("ssh://"))
    {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?.split(':').next()?;
        (host.to_string(), path)
    } else {
        let (user_host, path) = url.split_once(':')?;
        let (_, host) = user_host.split_once('@')?;
        (host.to_string(), path)
    };
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let (owner, name) = path.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (!host.is_empty() && ok(owner) && ok(name)).then(|| (host, format!("{owner}/{name}")))
}

#[cfg(test)]
mod project_forge_tests {
    use super::*;

    #[test]
    fn clone_urls_name_their_host_and_repository() {
        let want = Some(("github.com".to_string(), "acme/web".to_string()));
        for url in [
            "https://github.com/acme/web.git",
            "https://github.com/acme/web",
            "https://github.com/acme/web/",
            "ssh://git@github.com/acme/web.git",
            "ssh://git@github.com:22/acme/web.git",
            "git@github.com:acme/web.git",
        ] {
            assert_eq!(github_repo_of(url), want, "{url}");
        }
        for url in [
            "/srv/web.git",
            "file:///srv/web.git",
            "https://github.com/acme",
            "https://github.com/a/b/c",
        ] {
            assert_eq!(github_repo_of(url), None, "{url}");
        }
    }
}

//! The `tracker:` section: which adapter, and that adapter's own keys with their defaults.

use std::path::Path;

use super::defaults::DEFAULT_BLOCKER_READS_PER_TICK;
use super::diagnostic::Problems;
use super::locate::{FieldPath, Position};
use super::model::{BlockersConfig, TicketFilter, TrackerConfig};
use super::raw::{RawBlockers, RawFilter, RawTracker};
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
                Position::START,
                &root.key("tracker"),
                "missing required key `tracker`; expected e.g. `tracker: {kind: local, path: board}`",
            );
            None
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
        if labels.iter().any(|l| crate::tracker::same_name(l, label)) {
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
            if !out.iter().any(|o| crate::tracker::same_name(o, &name)) {
                out.push(name);
            }
        }
        out
    };
    let clash = |required: &[String], excluded: &[String]| {
        required
            .iter()
            .find(|l| excluded.iter().any(|e| crate::tracker::same_name(e, l)))
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
        (Some(a), Some(b)) if !crate::tracker::same_name(a, &b) => {
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
    problems: &mut Problems,
) -> BlockersConfig {
    let raw = raw.unwrap_or_default();
    let path = FieldPath::root().key("tracker").key("blockers");
    let max = raw
        .max_reads_per_tick
        .unwrap_or(DEFAULT_BLOCKER_READS_PER_TICK);
    if max == 0 {
        problems.at_value(
            &path.key("max_reads_per_tick"),
            "expected at least 1 (set `enabled: false` to read no blockers)",
        );
    }
    BlockersConfig {
        enabled: raw.enabled,
        max_reads_per_tick: max,
    }
}

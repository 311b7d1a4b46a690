//! `sortie tracker check` for GitHub: the token, access to the repository, the status
//! labels (created on request), and the rate limit left.

use std::collections::BTreeSet;

use serde_json::Value;

use super::GithubTracker;
use crate::tracker::{same_name, CheckReport, Tracker, TrackerError};

/// Colour of the status labels sortie creates (GitHub's light grey).
const LABEL_COLOR: &str = "ededed";

/// How this server tells sortie about blockers, asked of its most recent issue: its
/// `issue_dependencies_summary`, else a read of its dependencies, which a server
/// without them answers 404 (then no blocker is read, as with `tracker.blockers` off).
async fn dependencies(tracker: &GithubTracker) -> Result<String, TrackerError> {
    let recent = tracker.api().recent_issues().await?;
    let Some(issue) = recent.iter().find(|i| i.get("pull_request").is_none()) else {
        return Ok("no issue yet to ask about issue dependencies".to_string());
    };
    if issue.get("issue_dependencies_summary").is_some() {
        return Ok(
            "issues carry issue_dependencies_summary: blockers are read only for \
                   issues with open ones"
                .to_string(),
        );
    }
    let Some(number) = issue.get("number").and_then(Value::as_u64) else {
        return Err(TrackerError::Invalid(
            "GET issues: an issue has no number".to_string(),
        ));
    };
    tracker.blockers(&number.to_string()).await?;
    Ok(if tracker.dependencies_missing() {
        "this server has no issue dependencies (GET .../dependencies/blocked_by answers \
         404): no blockers are read, tickets are dispatched as if tracker.blockers were off"
            .to_string()
    } else {
        "issues carry no issue_dependencies_summary: blockers are read one request per \
         candidate (tracker.blockers.max_reads_per_tick)"
            .to_string()
    })
}

/// Run every check; failures a person can fix are report lines, an unreachable or
/// rate-limited GitHub is an error (nothing could be checked).
pub(super) async fn run(
    tracker: &GithubTracker,
    statuses: &[String],
    create_missing: bool,
) -> Result<CheckReport, TrackerError> {
    let mut report = CheckReport::default();
    let api = tracker.api();
    match tracker.identity().await {
        Ok(login) => report.push("token", true, format!("authenticated as {login}")),
        Err(err @ (TrackerError::Unauthorized(_) | TrackerError::Invalid(_))) => {
            report.push("token", false, err.to_string());
            return Ok(report);
        }
        Err(err) => return Err(err),
    }

    // The repository's labels prove access to it, and are what the statuses need.
    let existing: BTreeSet<String> = match api.labels().await {
        Ok(page) => {
            report.push(
                "repository access",
                true,
                format!("{} label(s) on the repository", page.items.len()),
            );
            page.items
                .iter()
                .filter_map(|l| l.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        }
        Err(err @ (TrackerError::NotFound(_) | TrackerError::Unauthorized(_))) => {
            report.push(
                "repository access",
                false,
                format!(
                    "{err}; check the repo name, and that the token can see it (fine-grained \
                     tokens: add the repository under Repository access)"
                ),
            );
            return Ok(report);
        }
        Err(err) => return Err(err),
    };

    tracker.learn_labels(existing.iter().map(String::as_str));
    for status in statuses {
        let label = tracker.labels.status_label(status);
        let what = format!("status {status}");
        if existing.contains(&label) {
            report.push(what, true, format!("label {label} exists"));
        } else if let Some(spelled) = existing.iter().find(|l| same_name(l, &label)) {
            // GitHub label names are unique ignoring case: this one is the status.
            report.push(
                what,
                true,
                format!("label {spelled} exists (sortie compares statuses ignoring case)"),
            );
        } else if create_missing {
            let description = format!("sortie pipeline status {status}");
            match api.create_label(&label, LABEL_COLOR, &description).await {
                Ok(()) => report.push(what, true, format!("label {label} created")),
                // Created meanwhile by someone else: it exists, which is what we want.
                Err(TrackerError::Invalid(msg)) if msg.contains("already_exists") => {
                    report.push(what, true, format!("label {label} exists"))
                }
                Err(err @ (TrackerError::RateLimited { .. } | TrackerError::Unavailable(_))) => {
                    return Err(err)
                }
                Err(err) => report.push(
                    what,
                    false,
                    format!("could not create label {label}: {err} (the token needs Issues write)"),
                ),
            }
        } else {
            report.push(
                what,
                false,
                format!("label {label} is missing; create it, or run with --create-missing-labels"),
            );
        }
    }

    // A forge (no statuses: it holds no tickets) has no blockers to read.
    if !statuses.is_empty() {
        match dependencies(tracker).await {
            Ok(detail) => report.push("issue dependencies", true, detail),
            Err(err @ (TrackerError::RateLimited { .. } | TrackerError::Unavailable(_))) => {
                return Err(err)
            }
            Err(err) => report.push("issue dependencies", false, err.to_string()),
        }
    }

    // `GET /rate_limit` does not count against the limit; fall back to the headers.
    report.rate_limit_remaining = match api.rate_limit().await {
        Ok(Some(left)) => Some(left),
        _ => api.rate_limit_remaining(),
    };
    api.save_cache();
    Ok(report)
}

//! `sortie tracker check` for a GitHub Project: the token, the project, the status field
//! and its options (every configured status must be one), and the points left.

use super::GithubProjectTracker;
use crate::tracker::{CheckReport, TrackerError};

/// Run every check; failures a person can fix are report lines, an unreachable or
/// rate-limited GitHub is an error (nothing could be checked). Options are never
/// created: the board belongs to its people (`create` is ignored, and the report says so).
pub(super) async fn run(
    tracker: &GithubProjectTracker,
    statuses: &[String],
    create: bool,
) -> Result<CheckReport, TrackerError> {
    let mut report = CheckReport::default();
    match tracker.viewer().await {
        Ok(login) => report.push("token", true, format!("authenticated as {login}")),
        Err(err @ (TrackerError::Unauthorized(_) | TrackerError::Invalid(_))) => {
            report.push("token", false, err.to_string());
            return Ok(report);
        }
        Err(err) => return Err(err),
    }
    let field = match tracker.refresh_field().await {
        Ok(field) => {
            report.push(
                "project",
                true,
                format!(
                    "{} ({:?}), field {:?} with {} option(s): {}",
                    tracker.project_name(),
                    field.project_title,
                    field.name,
                    field.options.len(),
                    field.option_names()
                ),
            );
            field
        }
        Err(
            err @ (TrackerError::NotFound(_)
            | TrackerError::Unauthorized(_)
            | TrackerError::Invalid(_)),
        ) => {
            report.push("project", false, err.to_string());
            return Ok(report);
        }
        Err(err) => return Err(err),
    };
    for status in statuses {
        match field.option(status) {
            Some(option) => report.push(format!("status {status}"), true, format!("option {:?}", option.name)),
            None => report.push(
                format!("status {status}"),
                false,
                format!(
                    "field {:?} has no option named {status:?}; its options are: {}{}",
                    field.name,
                    field.option_names(),
                    if create {
                        " (sortie does not add options to a project: add it on the board, in the field's settings)"
                    } else {
                        " (add it on the board, in the field's settings)"
                    }
                ),
            ),
        }
    }
    let points = tracker.points();
    report.rate_limit_remaining = points.remaining;
    report.push(
        "rate limit",
        true,
        match points.remaining {
            Some(left) => format!(
                "{left} GraphQL point(s) left this hour; this check spent {} (sortie keeps {} back)",
                points.spent,
                super::RESERVE
            ),
            None => "GitHub reported no points".to_string(),
        },
    );
    Ok(report)
}

//! `sortie tracker check` for Linear: the key, the team, every configured state, and
//! the rate limit left.

use serde_json::{json, Value};

use super::{queries, LinearTracker};
use crate::tracker::http::Retry;
use crate::tracker::{CheckReport, TrackerError};

/// Run every check; failures a person can fix are report lines, an unreachable or
/// rate-limited Linear is an error (nothing could be checked).
pub(super) async fn run(
    tracker: &LinearTracker,
    statuses: &[String],
    _create_missing: bool,
) -> Result<CheckReport, TrackerError> {
    let mut report = CheckReport::default();
    match tracker.viewer().await {
        Ok(viewer) => report.push(
            "key",
            true,
            format!(
                "authenticated as {} <{}> (id {})",
                viewer.name, viewer.email, viewer.id
            ),
        ),
        Err(err @ (TrackerError::Unauthorized(_) | TrackerError::Invalid(_))) => {
            report.push("key", false, err.to_string());
            return Ok(report);
        }
        Err(err) => return Err(err),
    }
    let states = match tracker.refresh_states().await {
        Ok(states) => {
            report.push(
                "team",
                true,
                format!(
                    "{} ({}), {} workflow state(s): {}",
                    tracker.team,
                    states.name,
                    states.states.len(),
                    states.names()
                ),
            );
            states
        }
        Err(err @ (TrackerError::NotFound(_) | TrackerError::Unauthorized(_))) => {
            report.push("team", false, err.to_string());
            return Ok(report);
        }
        Err(err) => return Err(err),
    };
    for status in statuses {
        match states.find(status) {
            Some(state) => report.push(
                format!("state {status}"),
                true,
                format!("{} (type {})", state.name, state.kind),
            ),
            None => report.push(
                format!("state {status}"),
                false,
                format!(
                    "team {} has no workflow state named {status:?}; its states are: {} \
                     (creating states is left to a person, in the team's settings)",
                    tracker.team,
                    states.names()
                ),
            ),
        }
    }
    let data = tracker
        .transport
        .send(
            "SortieRateLimit",
            queries::RATE_LIMIT,
            json!({}),
            Retry::Safe,
        )
        .await?;
    let limits = data["rateLimitStatus"]["limits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let amount = |l: &Value, k: &str| l[k].as_f64().unwrap_or(0.0) as u64;
    let mut details = Vec::new();
    for limit in &limits {
        let kind = limit["type"].as_str().unwrap_or("?");
        details.push(format!(
            "{kind}: {} of {} left",
            amount(limit, "remainingAmount"),
            amount(limit, "allowedAmount")
        ));
        if kind.to_ascii_lowercase().contains("request") {
            report.rate_limit_remaining = Some(amount(limit, "remainingAmount"));
        }
    }
    if report.rate_limit_remaining.is_none() {
        report.rate_limit_remaining = tracker.transport.budget().requests_remaining;
    }
    report.push(
        "rate limit",
        true,
        if details.is_empty() {
            "Linear reported no limits".to_string()
        } else {
            details.join("; ")
        },
    );
    Ok(report)
}

//! `sortie tracker check` on Jira: who sortie is, the project, its workflows' statuses.

use super::{wire, JiraTracker};
use crate::tracker::{same_name, CheckReport, Tracker, TrackerError};

impl JiraTracker {
    /// `sortie tracker check`: credentials, the project, every status in its
    /// workflows, and one listing (which shows Jira's error for a bad `jql`).
    pub(super) async fn check_site(
        &self,
        statuses: &[String],
    ) -> Result<CheckReport, TrackerError> {
        let mut report = CheckReport::default();
        match self.identity().await {
            Ok(id) => {
                let shown = self
                    .me()
                    .await
                    .ok()
                    .and_then(|m| m.display_name.clone())
                    .unwrap_or_default();
                report.push(
                    "credentials",
                    true,
                    format!("authenticated as {shown:?} ({id}); sortie's comments carry {id}"),
                );
            }
            Err(e @ (TrackerError::Unauthorized(_) | TrackerError::NotFound(_))) => {
                report.push("credentials", false, e.to_string());
                return Ok(report);
            }
            Err(e) => return Err(e),
        }
        let project = &self.settings.project;
        let types: Vec<wire::IssueTypeStatuses> =
            match self.api.get(&format!("/project/{project}/statuses")).await {
                Ok(t) => t,
                Err(e @ (TrackerError::Unauthorized(_) | TrackerError::NotFound(_))) => {
                    report.push("project", false, format!("project {project}: {e}"));
                    return Ok(report);
                }
                Err(e) => return Err(e),
            };
        let mut known: Vec<&wire::Status> = Vec::new();
        for s in types.iter().flat_map(|t| &t.statuses) {
            if !known.iter().any(|k| same_name(&k.name, &s.name)) {
                known.push(s);
            }
        }
        let names: Vec<&str> = known.iter().map(|s| s.name.as_str()).collect();
        report.push(
            "project",
            true,
            format!(
                "{project}: {} issue type(s), statuses {}",
                types.len(),
                names.join(", ")
            ),
        );
        let mut present = Vec::new();
        for name in statuses {
            match known.iter().find(|k| same_name(&k.name, name)) {
                Some(s) => {
                    present.push(name.clone());
                    let done = if s.is_done() {
                        " (category done: terminal unless a stage claims from it)"
                    } else {
                        ""
                    };
                    report.push(
                        format!("status {name}"),
                        true,
                        format!("in the project's workflows{done}"),
                    );
                }
                None => report.push(
                    format!("status {name}"),
                    false,
                    format!(
                        "no status {name:?} in project {project}'s workflows; they have: {}",
                        names.join(", ")
                    ),
                ),
            }
        }
        match self.list(&present).await {
            Ok(listing) => report.push(
                "board",
                true,
                format!(
                    "{} issue(s) in the pipeline's statuses, {} unreadable",
                    listing.tickets.len(),
                    listing.warnings.len()
                ),
            ),
            Err(e @ TrackerError::Invalid(_)) => report.push("board", false, e.to_string()),
            Err(e) => return Err(e),
        }
        report.rate_limit_remaining = self.api.remaining();
        Ok(report)
    }
}

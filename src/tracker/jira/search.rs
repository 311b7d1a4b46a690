//! Jira listings: the JQL of a listing, and the search that pages through it (a
//! cursor on Cloud, an offset on Data Center).

use serde_json::{json, Value};

use super::wire::{self, quote, CloudPage, DcPage, Issue, FIELDS};
use super::JiraTracker;
use crate::config::TicketFilter;
use crate::tracker::http::{encode, next_offset, PageWalk, MAX_PAGES};
use crate::tracker::{Listing, TrackerError};

impl JiraTracker {
    /// The JQL of a listing: project and statuses (spelled as configured, trimmed, as
    /// the tracker contract has server-side filters; JQL matches status names ignoring
    /// case), then the
    /// config's clause and the filter, each parenthesised so an `OR` inside cannot
    /// widen the search. No status, no query: `status in ()` is not JQL.
    pub fn listing_jql(&self, statuses: &[String], filter: &TicketFilter) -> Option<String> {
        if statuses.is_empty() {
            return None;
        }
        let names: Vec<String> = statuses.iter().map(|s| quote(s.trim())).collect();
        let mut jql = format!(
            "project = {} AND status in ({})",
            quote(&self.settings.project),
            names.join(", ")
        );
        if let Some(clause) = &self.settings.jql {
            jql.push_str(&format!(" AND ({clause})"));
        }
        for label in &filter.labels {
            jql.push_str(&format!(" AND labels = {}", quote(label)));
        }
        if !filter.exclude_labels.is_empty() {
            let names: Vec<String> = filter.exclude_labels.iter().map(|l| quote(l)).collect();
            jql.push_str(&format!(
                " AND (labels is EMPTY OR labels not in ({}))",
                names.join(", ")
            ));
        }
        match filter.assignee.as_deref().map(str::trim) {
            Some("me") => jql.push_str(" AND assignee = currentUser()"),
            Some(a) => jql.push_str(&format!(" AND assignee = {}", quote(a))),
            None => {}
        }
        jql.push_str(" ORDER BY key ASC");
        Some(jql)
    }

    pub(super) async fn search(&self, jql: &str) -> Result<Listing, TrackerError> {
        let mut raw = Vec::new();
        let refused = |e: TrackerError| match e {
            TrackerError::Invalid(detail) => TrackerError::Invalid(format!(
                "Jira refused the search `{jql}` (check `tracker.jql`): {detail}"
            )),
            other => other,
        };
        // A page read twice (a page token the server repeats, a `startAt` it does not
        // move), one that says more follow without a token, or past the cap fails the
        // listing: never act on part of the board (issue #52).
        let mut walk = PageWalk::new("Jira search", MAX_PAGES);
        if self.cloud() {
            let mut token: Option<String> = None;
            loop {
                walk.visit(token.as_deref().unwrap_or(""))?;
                let mut body = json!({
                    "jql": jql,
                    "fields": FIELDS,
                    "maxResults": self.settings.page_size,
                });
                if let Some(t) = &token {
                    body["nextPageToken"] = json!(t);
                }
                let page: CloudPage = self.api.post("/search/jql", &body).await.map_err(refused)?;
                raw.extend(page.issues);
                // `isLast` is optional: without it, a token is what says more follow.
                let more = page
                    .is_last
                    .map_or(page.next_page_token.is_some(), |last| !last);
                match walk.next_cursor(more, page.next_page_token)? {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
        } else {
            let mut start = 0u64;
            loop {
                walk.visit(&start.to_string())?;
                let path = format!(
                    "/search?jql={}&startAt={start}&maxResults={}&fields={}",
                    encode(jql),
                    self.settings.page_size,
                    FIELDS.join(",")
                );
                let page: DcPage = self.api.get(&path).await.map_err(refused)?;
                let count = page.issues.len() as u64;
                raw.extend(page.issues);
                match next_offset(page.start_at, count, page.total) {
                    Some(next) => start = next,
                    None => break,
                }
            }
        }
        let mut listing = Listing::default();
        let cx = self.cx();
        for value in raw {
            let key = value
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            match serde_json::from_value::<Issue>(value) {
                Ok(issue) => {
                    if listing.tickets.iter().any(|t| t.id == issue.key) {
                        continue; // an issue that moved between pages
                    }
                    match wire::ticket(&issue, &cx) {
                        Ok(t) => listing.tickets.push(t),
                        Err(e) => listing.warnings.push(format!("skipped Jira {e}")),
                    }
                }
                Err(e) => listing
                    .warnings
                    .push(format!("skipped Jira issue {key}: unexpected JSON: {e}")),
            }
        }
        for w in &listing.warnings {
            tracing::warn!("{w}");
        }
        Ok(listing)
    }
}

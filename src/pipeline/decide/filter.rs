//! Whether a ticket passes a stage's filter (labels, excluded labels, assignee), and if
//! not, the first reason a person would be told. Pure.

use crate::config::TicketFilter;
use crate::tracker::{same_name, Ticket};

/// The word in a filter's `assignee` that means the tracker identity sortie acts as.
pub const ME: &str = "me";

/// Why `ticket` does not pass `filter`, or `None` when it does. `identity` is who
/// `assignee: me` means.
pub fn mismatch(filter: &TicketFilter, ticket: &Ticket, identity: &str) -> Option<String> {
    mismatch_parts(filter, &ticket.labels, &ticket.assignees, identity)
}

/// [`mismatch`] over a ticket's labels and assignees alone.
pub fn mismatch_parts(
    filter: &TicketFilter,
    labels: &[String],
    assignees: &[String],
    identity: &str,
) -> Option<String> {
    let has = |name: &str| labels.iter().any(|l| same_name(l, name));
    if let Some(missing) = filter.labels.iter().find(|l| !has(l)) {
        return Some(format!("label {missing} missing"));
    }
    if let Some(excluded) = filter.exclude_labels.iter().find(|l| has(l)) {
        return Some(format!("label {excluded} excludes it"));
    }
    if let Some(wanted) = &filter.assignee {
        let who = if same_name(wanted, ME) {
            identity
        } else {
            wanted
        };
        if !assignees.iter().any(|a| same_name(a, who)) {
            return Some(if assignees.is_empty() {
                format!("not assigned to {who} (unassigned)")
            } else {
                format!(
                    "not assigned to {who} (assigned to {})",
                    assignees.join(", ")
                )
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(labels: &[&str], exclude: &[&str], assignee: Option<&str>) -> TicketFilter {
        TicketFilter {
            labels: labels.iter().map(|s| s.to_string()).collect(),
            exclude_labels: exclude.iter().map(|s| s.to_string()).collect(),
            assignee: assignee.map(str::to_string),
            project: None,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_part_of_the_filter_must_hold_and_the_first_failing_one_is_named() {
        let f = filter(&["agent-ok", "backend"], &["no-agent"], None);
        let check = |labels: &[&str]| mismatch_parts(&f, &strings(labels), &[], "sortie");
        assert_eq!(check(&["Agent-OK ", "backend"]), None, "names ignore case");
        assert_eq!(
            check(&["backend"]).as_deref(),
            Some("label agent-ok missing")
        );
        assert_eq!(
            check(&["agent-ok", "backend", "no-agent"]).as_deref(),
            Some("label no-agent excludes it")
        );
        assert_eq!(
            mismatch_parts(&TicketFilter::default(), &[], &[], "x"),
            None
        );
    }

    #[test]
    fn assignee_me_is_the_tracker_identity() {
        let me = filter(&[], &[], Some("me"));
        assert_eq!(
            mismatch_parts(&me, &[], &strings(&["sortie-bot"]), "sortie-bot"),
            None
        );
        assert_eq!(
            mismatch_parts(&me, &[], &strings(&["alice"]), "sortie-bot").as_deref(),
            Some("not assigned to sortie-bot (assigned to alice)")
        );
        let bob = filter(&[], &[], Some("bob"));
        assert_eq!(
            mismatch_parts(&bob, &[], &[], "sortie-bot").as_deref(),
            Some("not assigned to bob (unassigned)")
        );
    }
}

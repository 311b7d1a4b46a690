//! Which of a stage's `routes:` a run of a ticket takes: the first whose `when` holds.
//! Pure, and asked again for every run, so a retry follows the ticket's labels now.

use super::filter::mismatch_parts;
use crate::config::{Route, Stage};
use crate::tracker::Ticket;

/// The route `ticket` takes through `stage`, with its index in `stage.routes`; `None`
/// runs the stage's defaults. `identity` is who `assignee: me` means.
pub fn choose<'s>(stage: &'s Stage, ticket: &Ticket, identity: &str) -> Option<(usize, &'s Route)> {
    choose_by(stage, &ticket.labels, &ticket.assignees, identity)
}

/// [`choose`] over a ticket's labels and assignees alone.
pub fn choose_by<'s>(
    stage: &'s Stage,
    labels: &[String],
    assignees: &[String],
    identity: &str,
) -> Option<(usize, &'s Route)> {
    stage
        .routes
        .iter()
        .enumerate()
        .find(|(_, route)| mismatch_parts(&route.when, labels, assignees, identity).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgentOverrides, TicketFilter};

    fn route(name: Option<&str>, labels: &[&str], exclude: &[&str]) -> Route {
        Route {
            name: name.map(str::to_string),
            when: TicketFilter {
                labels: labels.iter().map(|s| s.to_string()).collect(),
                exclude_labels: exclude.iter().map(|s| s.to_string()).collect(),
                assignee: None,
                project: None,
            },
            agent: AgentOverrides::default(),
            role_file: None,
        }
    }

    #[test]
    fn the_first_route_whose_condition_holds_wins_and_no_match_is_the_default() {
        let stage = Stage {
            role: "backend".into(),
            claim_status: "todo".into(),
            in_progress_status: None,
            success_status: None,
            failure_status: None,
            requires_prior_role: None,
            max_in_flight: 1,
            filter: TicketFilter::default(),
            rework: None,
            verify: None,
            evidence: Default::default(),
            review: None,
            routes: vec![
                route(Some("hard"), &["hard"], &["easy"]),
                route(None, &["hard"], &[]),
                route(Some("docs"), &["docs"], &[]),
            ],
        };
        let pick = |labels: &[&str]| {
            let labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
            choose_by(&stage, &labels, &[], "sortie").map(|(i, _)| i)
        };
        assert_eq!(
            pick(&["Hard", "docs"]),
            Some(0),
            "labels ignore case; first wins"
        );
        assert_eq!(
            pick(&["hard", "easy"]),
            Some(1),
            "an excluded label skips a route"
        );
        assert_eq!(pick(&["docs"]), Some(2));
        assert_eq!(pick(&["other"]), None, "no match: the stage's defaults");
        assert_eq!(
            stage.routes[1].label(1),
            "1",
            "an unnamed route is its index"
        );
    }
}

//! Choosing the workflow transition that reaches a status: by target status name, or
//! the one `tracker.transitions` pins; none, several or a wrong pin is a refusal that
//! names what the workflow offered.

use super::{wire, JiraTracker};
use crate::tracker::{same_name, TrackerError};

impl JiraTracker {
    /// The transition to take from the status to `to` among those `offered`,
    /// or why none can be.
    pub(super) fn pick_transition(
        &self,
        id: &str,
        from: &str,
        to: &str,
        offered: &[wire::Transition],
    ) -> Result<wire::Transition, TrackerError> {
        let pinned = self
            .settings
            .transitions
            .iter()
            .find(|(status, _)| same_name(status, to))
            .map(|(_, name)| name.as_str());
        let mut matching: Vec<&wire::Transition> = offered
            .iter()
            .filter(|t| match pinned {
                Some(name) => same_name(&t.name, name),
                None => same_name(&t.to.name, to),
            })
            .collect();
        matching.dedup_by(|a, b| a.id == b.id);
        let list = || {
            let all: Vec<String> = offered
                .iter()
                .map(|t| format!("{:?} -> {:?}", t.name, t.to.name))
                .collect();
            if all.is_empty() {
                "none".to_string()
            } else {
                all.join(", ")
            }
        };
        let refuse = |why: String| TrackerError::TransitionRefused {
            workflow: format!(
                "Jira ({why}; transitions offered from {from:?}: {})",
                list()
            ),
            id: id.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            current: from.to_string(),
        };
        match (matching.as_slice(), pinned) {
            ([one], Some(name)) if !same_name(&one.to.name, to) => Err(refuse(format!(
                "the pinned transition {name:?} leads to {:?}",
                one.to.name
            ))),
            ([one], _) => Ok((*one).clone()),
            ([], Some(name)) => Err(refuse(format!(
                "the pinned transition {name:?} (tracker.transitions) is not offered"
            ))),
            ([], None) => Err(refuse(format!("no transition reaches {to:?}"))),
            (several, _) => {
                let names: Vec<String> = several.iter().map(|t| format!("{:?}", t.name)).collect();
                Err(refuse(format!(
                    "{} transitions reach {to:?} ({}); pin one with `tracker.transitions: \
                     {{{to}: <name>}}`",
                    several.len(),
                    names.join(", ")
                )))
            }
        }
    }
}

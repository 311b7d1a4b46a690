//! Statuses modelled as labels, as GitHub, GitLab and Gitea boards do: the status label
//! prefix, "exactly one status label or the ticket is ambiguous", priority labels, and
//! the plan of a label transition (add the new label, remove the old ones, after a
//! re-read). Pure: the adapters do the I/O.
//!
//! Names compare with [`same_name`] (case-insensitively, ignoring surrounding
//! whitespace), prefixes included: `Status:Ready` is the status `Ready`.

use super::{same_name, TrackerError};

/// The label prefixes that model a ticket's status and priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelScheme {
    /// Prefix of status labels (`status:`, GitLab's scoped `status::`, Gitea's `status/`).
    pub status_prefix: String,
    /// Prefix of priority labels (`priority:`).
    pub priority_prefix: String,
}

/// What the labels of one ticket say, once read through a [`LabelScheme`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelReading {
    /// The status (the suffix of the one status label), empty when there is none.
    pub status: String,
    /// The most urgent (lowest) priority label's number.
    pub priority: Option<i64>,
    /// Every label that is neither a status nor a numeric priority, in label order,
    /// normalized ([`normalize_labels`]).
    pub other: Vec<String>,
}

/// The status labels a ticket carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusLabels {
    /// No status label.
    None,
    /// Exactly one: the status (label suffix).
    One(String),
    /// Several: the statuses, in label order. Never guessed between.
    Many(Vec<String>),
}

/// The writes that move a ticket's labels from one status to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelMove {
    /// The ticket already has the target status: write nothing.
    AlreadyThere,
    /// Add `add` (when set) and remove every label in `remove` (as the ticket spells
    /// them). Adapters with one atomic call send both at once; the others add first,
    /// then remove, so an interruption leaves two labels this plan can finish.
    Write {
        /// The target status label to add; `None` when the ticket has it already (an
        /// interrupted move being finished).
        add: Option<String>,
        /// The old status labels to remove.
        remove: Vec<String>,
    },
}

impl LabelScheme {
    /// The scheme a forge tracker config spells with its `status_label_prefix` and
    /// `priority_label_prefix`.
    pub fn new(status_prefix: &str, priority_prefix: &str) -> Self {
        LabelScheme {
            status_prefix: status_prefix.to_string(),
            priority_prefix: priority_prefix.to_string(),
        }
    }

    /// The label that puts a ticket in `status` (trimmed, spelled as configured).
    pub fn status_label(&self, status: &str) -> String {
        format!("{}{}", self.status_prefix, status.trim())
    }

    /// The status a label names, when it is a status label.
    pub fn status_of<'a>(&self, label: &'a str) -> Option<&'a str> {
        strip_prefix_ignoring_case(label, &self.status_prefix)
    }

    /// The status labels among `labels`.
    pub fn status_labels<'a>(&self, labels: impl IntoIterator<Item = &'a str>) -> StatusLabels {
        let mut statuses: Vec<String> = labels
            .into_iter()
            .filter_map(|l| self.status_of(l))
            .map(str::to_string)
            .collect();
        match statuses.len() {
            0 => StatusLabels::None,
            1 => StatusLabels::One(statuses.remove(0)),
            _ => StatusLabels::Many(statuses),
        }
    }

    /// Read a ticket's labels: its status, priority and other labels; two or more
    /// status labels are an error naming them all (the ticket is skipped until a person
    /// removes all but one).
    pub fn read<'a>(
        &self,
        labels: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<LabelReading, Vec<String>> {
        let status = match self.status_labels(labels.clone()) {
            StatusLabels::None => String::new(),
            StatusLabels::One(status) => status,
            StatusLabels::Many(_) => {
                return Err(labels
                    .into_iter()
                    .filter(|l| self.status_of(l).is_some())
                    .map(str::to_string)
                    .collect())
            }
        };
        let mut priority: Option<i64> = None;
        let mut other = Vec::new();
        for name in labels {
            if self.status_of(name).is_some() {
                continue;
            }
            let parsed = strip_prefix_ignoring_case(name, &self.priority_prefix)
                .and_then(|n| n.trim().parse::<i64>().ok());
            match parsed {
                // Several priority labels: the most urgent (lowest) wins.
                Some(n) => priority = Some(priority.map_or(n, |p| p.min(n))),
                None => other.push(name.to_string()),
            }
        }
        Ok(LabelReading {
            status,
            priority,
            other: normalize_labels(other),
        })
    }

    /// Plan the move of a ticket carrying `labels` (as just re-read) from `from` to `to`.
    /// Already in `to`: nothing to write. In `from`: add `to`, remove `from`. Carrying
    /// exactly `from` and `to` (our own move interrupted between its two writes): remove
    /// `from`. Anything else is [`TrackerError::Conflict`] naming what it carries, and
    /// nothing may be written.
    pub fn plan_move<'a>(
        &self,
        id: &str,
        labels: impl IntoIterator<Item = &'a str> + Clone,
        from: &str,
        to: &str,
    ) -> Result<LabelMove, TrackerError> {
        let conflict = |current: String| TrackerError::Conflict {
            id: id.to_string(),
            expected: from.to_string(),
            current,
        };
        let spelled = |status: &str| -> Vec<String> {
            labels
                .clone()
                .into_iter()
                .filter(|l| self.status_of(l).is_some_and(|s| same_name(s, status)))
                .map(str::to_string)
                .collect()
        };
        match self.status_labels(labels.clone()) {
            StatusLabels::One(current) if same_name(&current, to) => Ok(LabelMove::AlreadyThere),
            StatusLabels::One(current) if same_name(&current, from) => Ok(LabelMove::Write {
                add: Some(self.status_label(to)),
                remove: spelled(from),
            }),
            StatusLabels::Many(current)
                if current.len() == 2
                    && current.iter().any(|s| same_name(s, from))
                    && current.iter().any(|s| same_name(s, to)) =>
            {
                Ok(LabelMove::Write {
                    add: None,
                    remove: spelled(from),
                })
            }
            StatusLabels::One(current) => Err(conflict(current)),
            StatusLabels::None => Err(conflict(String::new())),
            StatusLabels::Many(current) => Err(conflict(current.join(" + "))),
        }
    }
}

/// The warning a listing carries for a ticket with several status labels (`what` names
/// it: `issue #12`).
pub fn ambiguous_warning(what: &str, labels: &[String]) -> String {
    format!(
        "{what} has {} status labels ({}); skipped until a person removes all but one",
        labels.len(),
        labels.join(", ")
    )
}

/// The error `get` answers for a ticket with several status labels.
pub fn ambiguous_error(what: &str, labels: &[String]) -> TrackerError {
    TrackerError::Invalid(format!(
        "{what} has {} status labels ({}); remove all but one",
        labels.len(),
        labels.join(", ")
    ))
}

/// Whether `status` is one of `statuses` by [`same_name`].
pub fn is_listed(statuses: &[String], status: &str) -> bool {
    statuses.iter().any(|s| same_name(s, status))
}

/// A ticket's labels as every adapter reports them: trimmed, blanks dropped, and names
/// that differ only by case (by [`same_name`]) kept once, in their first spelling.
/// Case is kept, not lowered: label filters and status labels already compare ignoring
/// case, and a label reads back (in prompts, the dashboard) as people spelled it.
///
/// In place: a `Vec` given keeps its allocation, and a label already trimmed keeps its
/// own (a board of 10,000 tickets read 0.5 MB more heap when every list was rebuilt).
pub fn normalize_labels(labels: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = labels.into_iter().collect();
    let mut kept = 0;
    for i in 0..out.len() {
        let label = out[i].trim();
        if label.is_empty() || out[..kept].iter().any(|l| same_name(l, label)) {
            continue;
        }
        if label.len() != out[i].len() {
            out[i] = label.to_string();
        }
        out.swap(kept, i);
        kept += 1;
    }
    out.truncate(kept);
    out
}

fn strip_prefix_ignoring_case<'a>(label: &'a str, prefix: &str) -> Option<&'a str> {
    let label = label.trim();
    let prefix = prefix.trim_start();
    let head = label.get(..prefix.len())?;
    same_prefix(head, prefix).then(|| &label[prefix.len()..])
}

fn same_prefix(a: &str, b: &str) -> bool {
    // Not `same_name`: a prefix's trailing space (`status: `) is significant.
    a.eq_ignore_ascii_case(b) || a.to_lowercase() == b.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme(prefix: &str) -> LabelScheme {
        LabelScheme {
            status_prefix: prefix.into(),
            priority_prefix: "priority:".into(),
        }
    }

    #[test]
    fn status_is_the_one_status_label_priority_the_lowest_and_prefixes_ignore_case() {
        let r = scheme("status::")
            .read([
                "bug",
                "Status::Ready",
                "priority:3",
                "PRIORITY:1",
                "priority:high",
            ])
            .unwrap();
        assert_eq!(r.status, "Ready");
        assert_eq!(r.priority, Some(1));
        assert_eq!(r.other, ["bug", "priority:high"]);
        let r = scheme("status:")
            .read([" Bug ", "bug", "", "status:ready", "Agent-OK"])
            .unwrap();
        assert_eq!(r.other, ["Bug", "Agent-OK"]);
        let r = scheme("status/").read(["feature"]).unwrap();
        assert_eq!((r.status.as_str(), r.priority), ("", None));
    }

    #[test]
    fn two_status_labels_are_ambiguous_and_both_are_named_as_spelled() {
        let err = scheme("status:")
            .read(["status:a", "x", "Status:b"])
            .unwrap_err();
        assert_eq!(err, ["status:a", "Status:b"]);
        assert_eq!(
            ambiguous_warning("issue #3", &err),
            "issue #3 has 2 status labels (status:a, Status:b); skipped until a person removes all but one"
        );
    }

    #[test]
    fn a_move_adds_the_new_label_and_removes_the_old_one_as_spelled() {
        let s = scheme("status:");
        assert_eq!(
            s.plan_move("1", ["bug", "Status:Ready"], "ready", "done")
                .unwrap(),
            LabelMove::Write {
                add: Some("status:done".into()),
                remove: vec!["Status:Ready".into()]
            }
        );
        assert_eq!(
            s.plan_move("1", ["status:DONE"], "ready", "done").unwrap(),
            LabelMove::AlreadyThere
        );
        assert_eq!(
            s.plan_move("1", ["status:done", "status:ready"], "ready", "done")
                .unwrap(),
            LabelMove::Write {
                add: None,
                remove: vec!["status:ready".into()]
            }
        );
    }

    #[test]
    fn a_ticket_moved_by_a_person_is_a_conflict_naming_where_it_is() {
        let s = scheme("status:");
        for (labels, current) in [
            (vec!["status:hold"], "hold"),
            (vec!["bug"], ""),
            (vec!["status:a", "status:b", "status:c"], "a + b + c"),
        ] {
            match s.plan_move("9", labels.iter().copied(), "ready", "done") {
                Err(TrackerError::Conflict { current: c, .. }) => assert_eq!(c, current),
                other => panic!("{labels:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn labels_are_trimmed_blanks_dropped_and_case_duplicates_merged() {
        let labels = ["  bug ", "", "Bug", "ui", "   ", "UI", "api"].map(String::from);
        assert_eq!(normalize_labels(labels), ["bug", "ui", "api"]);
    }
}

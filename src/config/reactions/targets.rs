//! Where a reaction sends a ticket: a stage's role for the fixing kinds (`to_role`), a
//! status for `merged`, `closed_unmerged` and `escalate_to` (`to_status`), and `to` for
//! either where the name can only mean one thing (issue #52). A name of the wrong kind is
//! refused with the name meant.

use super::super::diagnostic::Problems;
use super::super::locate::FieldPath;
use super::super::model::Stage;
use super::ReactionContext;
use crate::names::same_name;

/// A target as written: the key that named it and the name.
pub(super) struct Written {
    /// `to`, `to_role` or `to_status` (or `escalate_to`).
    pub(super) key: &'static str,
    /// The name it gives.
    pub(super) name: String,
}

/// The target among `keys` that is set. A second one is refused: they all say where the
/// ticket goes.
pub(super) fn written(
    path: &FieldPath,
    keys: [(&'static str, Option<String>); 3],
    problems: &mut Problems,
) -> Option<Written> {
    let mut set = keys
        .into_iter()
        .filter_map(|(key, name)| name.map(|name| Written { key, name }));
    let first = set.next()?;
    for extra in set {
        problems.at_key(
            &path.key(extra.key),
            format!(
                "`{}` and `{}` both say where the ticket goes; keep one",
                first.key, extra.key
            ),
        );
    }
    Some(first)
}

impl ReactionContext<'_> {
    fn stage_of_role(&self, role: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.role == role)
    }

    /// The stage that claims `status` or runs in it.
    fn stage_owning(&self, status: &str) -> Option<&Stage> {
        self.stages
            .iter()
            .find(|s| s.owned_statuses().any(|o| same_name(o, status)))
    }

    /// Whether `name` is a status the config names: a stage's, a terminal or a watched one.
    fn is_status(&self, name: &str, watch: &[String]) -> bool {
        let staged = self.stages.iter().flat_map(|s| {
            s.owned_statuses()
                .chain(s.success_status.as_deref())
                .chain(s.failure_status.as_deref())
                .chain(s.rework.as_ref().and_then(|r| r.then.as_deref()))
        });
        staged
            .chain(self.terminal_states.iter().map(String::as_str))
            .chain(watch.iter().map(String::as_str))
            .any(|s| same_name(s, name))
    }

    fn roles(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.role.as_str()).collect()
    }
}

/// The role a fixing `kind` sends its tickets to, from `to_role` or `to`. `to_status`, a
/// status where a role belongs, and a `to` that names both a role and another stage's
/// status are refused, each with the role meant.
pub(super) fn fixing_role(
    kind: &str,
    target: Option<Written>,
    path: &FieldPath,
    cx: &ReactionContext<'_>,
    watch: &[String],
    problems: &mut Problems,
) -> Option<String> {
    let roles = cx.roles();
    let expected = format!("expected one of: {}", roles.join(", "));
    let Some(Written { key, name }) = target else {
        problems.at_key(
            path,
            format!("`to_role` is required: the role of the stage that fixes a {kind}; {expected}"),
        );
        return None;
    };
    let at = path.key(key);
    let owner = cx.stage_owning(&name).map(|s| s.role.as_str());
    let meant =
        |role: &str| format!("did you mean `to_role: {role}` (the stage that claims `{name}`)?");
    if key == "to_status" {
        let hint = owner.map_or_else(String::new, |r| format!("; {}", meant(r)));
        problems.at_key(
            &at,
            format!(
                "{kind} sends the ticket back to the stage that fixes it, named by its role \
                 (`to_role`), not to a status{hint}; {expected}"
            ),
        );
        return None;
    }
    if cx.stage_of_role(&name).is_some() {
        match owner.filter(|r| *r != name) {
            Some(other) if key == "to" => {
                problems.at_value(
                    &at,
                    format!(
                        "`{name}` is both a stage's role and the status stage `{other}` claims, \
                         so `to` could mean either: write `to_role: {name}` for stage `{name}`, \
                         or `to_role: {other}` for the stage that claims `{name}`"
                    ),
                );
                None
            }
            _ => Some(name),
        }
    } else {
        let message = match owner {
            Some(role) => format!("`{name}` is a status, not a stage's role; {}", meant(role)),
            None if cx.is_status(&name, watch) => {
                format!("`{name}` is a status, not a stage's role; {expected}")
            }
            None => {
                let hint = crate::config::stages::closest(&name, &roles)
                    .map_or_else(String::new, |r| format!("; did you mean `{r}`?"));
                format!("`{name}` is no stage's role{hint}; {expected}")
            }
        };
        problems.at_value(&at, message);
        None
    }
}

/// The status a ticket moves to (`merged`, `closed_unmerged`, `escalate_to`), from
/// `to_status`, `to` or `escalate_to`. `to_role`, a stage's role where a status belongs,
/// and a `to` that names both a role and a status are refused, each with the status
/// meant. `spelled` is how the status is written there (`to_status` or `escalate_to`).
pub(super) fn move_status(
    target: Written,
    path: &FieldPath,
    spelled: &str,
    cx: &ReactionContext<'_>,
    watch: &[String],
    problems: &mut Problems,
) -> Option<String> {
    let Written { key, name } = target;
    let at = path.key(key);
    let stage = cx.stage_of_role(&name);
    let meant = |s: &Stage| {
        format!(
            "did you mean `{spelled}: {}` (the status stage `{}` claims)?",
            s.claim_status, s.role
        )
    };
    if key == "to_role" {
        let hint = stage.map_or_else(String::new, |s| format!("; {}", meant(s)));
        problems.at_key(
            &at,
            format!("this moves the ticket to a status (`to_status`), not to a stage{hint}"),
        );
        return None;
    }
    if name.trim().is_empty() {
        problems.at_value(&at, "expected a status name, found an empty string");
        return None;
    }
    if watch.iter().any(|w| same_name(w, &name)) {
        problems.at_value(
            &at,
            format!("`{name}` is watched: a ticket moved there would be reacted to again"),
        );
        return None;
    }
    match stage {
        Some(s) if !cx.is_status(&name, watch) => {
            problems.at_value(
                &at,
                format!("`{name}` is a stage's role, not a status; {}", meant(s)),
            );
            None
        }
        Some(_) if key == "to" => {
            problems.at_value(
                &at,
                format!(
                    "`{name}` is both a stage's role and a status, so `to` could mean either: \
                     write `to_status: {name}` for the status"
                ),
            );
            None
        }
        _ => Some(name),
    }
}

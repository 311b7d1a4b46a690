//! The state contract: builds the stages from either config form and checks that statuses
//! and roles fit together (no stage re-dispatches itself, no two stages fight over a status).

use std::collections::HashMap;

use crate::names::same_name;

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{EvidencePolicy, Rework, Stage, TicketFilter};
use super::raw::{RawConfig, RawStage, SINGLE_ROLE_KEYS};
use super::routes::build_routes;
use super::tracker::{narrow_filter, normalize_filter};

/// What a stage's `routes:` are read against: the preset of `agent:` and the config
/// file's directory.
#[derive(Clone, Copy)]
pub(crate) struct Routing<'a> {
    pub(crate) preset: crate::config::AgentPreset,
    pub(crate) base: &'a std::path::Path,
}

/// Role used by the single-role form when `role` is not given.
pub(crate) const DEFAULT_ROLE: &str = "agent";

/// A stage with the source path of each of its fields, so every rule can point at the line.
pub(crate) struct SourcedStage {
    pub(crate) stage: Stage,
    role: FieldPath,
    claim: FieldPath,
    in_progress: FieldPath,
    success: FieldPath,
    failure: FieldPath,
    requires: FieldPath,
    rework: FieldPath,
    /// `entry: true`: the claim status is deliberately one no stage moves tickets to.
    entry: bool,
    /// `exit: true`: the success status is deliberately one no stage claims.
    exit: bool,
}

/// Why a status or role name is unusable, or `None` when it is fine.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("must not be empty")
    } else if name.trim() != name {
        Some("must not start or end with whitespace")
    } else if name.chars().any(char::is_control) {
        Some("must not contain control characters")
    } else {
        None
    }
}

/// Record a problem when `status` is not a usable status name.
pub(crate) fn check_status(problems: &mut Problems, path: &FieldPath, status: &str) {
    if let Some(why) = name_problem(status) {
        problems.at_value(path, format!("status {status:?} {why}"));
    }
}

/// Record a problem when `role` is not a safe file name (`roles/<role>.md` is read).
fn check_role(problems: &mut Problems, path: &FieldPath, role: &str) {
    let mut chars = role.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if role == "reactions" {
        problems.at_value(
            path,
            "role \"reactions\" is reserved: sortie writes the blocks of its reactions to \
             pull requests under that name; pick another role name",
        );
    } else if !(first_ok && rest_ok) {
        problems.at_value(
            path,
            format!(
                "role {role:?} is not a valid role name; expected lowercase letters, digits, `_` and `-`, \
                 starting with a letter or digit (it names the file roles/<role>.md)"
            ),
        );
    }
}

/// Build the stages from whichever form the file uses, recording every contract violation.
/// `terminal` is the list of terminal states already read. `default_cap` fills `max_in_flight`.
/// `tracker_filter` is `tracker.filter`, which each stage's own `filter` narrows.
pub(crate) fn build_stages(
    raw: &mut RawConfig,
    terminal: &[String],
    default_cap: u32,
    tracker_filter: &TicketFilter,
    routing: Routing<'_>,
    problems: &mut Problems,
) -> Vec<Stage> {
    let root = FieldPath::root();
    let stages = match raw.pipeline_stages.take() {
        Some(list) => {
            for key in SINGLE_ROLE_KEYS {
                let present = match *key {
                    "active_states" => raw.active_states.is_some(),
                    "in_progress_state" => raw.in_progress_state.is_some(),
                    "handoff_state" => raw.handoff_state.is_some(),
                    _ => raw.role.is_some(),
                };
                if present {
                    problems.at_key(
                        &root.key(key),
                        format!(
                            "`{key}` belongs to the single-role form, which cannot be combined with \
                             `pipeline_stages`; describe the role as a stage instead"
                        ),
                    );
                }
            }
            if list.is_empty() {
                problems.at_value(&root.key("pipeline_stages"), "expected at least one stage");
            }
            let stages: Vec<SourcedStage> = list
                .into_iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    s.map(|s| from_raw_stage(s, i, default_cap, tracker_filter, routing, problems))
                })
                .collect();
            check_pipeline(&stages, terminal, problems);
            check_rework(&stages, terminal, problems);
            let watched = raw.reactions.as_ref().map_or(&[][..], |r| r.watched());
            warn_unreached(&stages, terminal, watched, problems);
            stages
        }
        None => match single_role(raw, terminal, default_cap, tracker_filter, problems) {
            Some(stage) => vec![stage],
            None => Vec::new(),
        },
    };
    for s in &stages {
        check_role(problems, &s.role, &s.stage.role);
        check_status(problems, &s.claim, &s.stage.claim_status);
        let optional = [
            (&s.in_progress, &s.stage.in_progress_status),
            (&s.success, &s.stage.success_status),
            (&s.failure, &s.stage.failure_status),
        ];
        for (path, status) in optional {
            if let Some(status) = status {
                check_status(problems, path, status);
            }
        }
    }
    stages.into_iter().map(|s| s.stage).collect()
}

fn from_raw_stage(
    raw: RawStage,
    index: usize,
    default_cap: u32,
    tracker_filter: &TicketFilter,
    routing: Routing<'_>,
    problems: &mut Problems,
) -> SourcedStage {
    let base = FieldPath::root().key("pipeline_stages").index(index);
    let routes = build_routes(
        raw.routes,
        &base.key("routes"),
        routing.preset,
        routing.base,
        problems,
    );
    let own = normalize_filter(raw.filter, &base.key("filter"), false, problems);
    let filter = narrow_filter(tracker_filter, own, &base.key("filter"), problems);
    SourcedStage {
        stage: Stage {
            role: raw.role,
            claim_status: raw.claim_status,
            in_progress_status: raw.in_progress_status,
            success_status: Some(raw.success_status),
            failure_status: raw.failure_status,
            requires_prior_role: raw.requires_prior_role,
            max_in_flight: raw.max_in_flight.unwrap_or(default_cap),
            filter,
            rework: raw.rework.map(|r| Rework {
                max: r.max,
                then: r.then,
            }),
            routes,
            verify: raw
                .verify
                .and_then(|v| build_verify(v, &base.key("verify"), problems)),
            evidence: evidence_policy(
                raw.expects_changes,
                raw.evidence,
                raw.review.is_some(),
                &base,
                problems,
            ),
            review: raw.review.map(|r| super::model::Review {
                fresh_session: r.fresh_session.unwrap_or(false),
                different_model_from: r.different_model_from,
            }),
        },
        role: base.key("role"),
        claim: base.key("claim_status"),
        in_progress: base.key("in_progress_status"),
        success: base.key("success_status"),
        failure: base.key("failure_status"),
        requires: base.key("requires_prior_role"),
        rework: base.key("rework"),
        entry: raw.entry.unwrap_or(false),
        exit: raw.exit.unwrap_or(false),
    }
}

/// A stage's `evidence` policy. `expects_changes` is its older spelling (`true` is
/// `observed`, `false` is `off`); giving both is refused. Neither: `observed`, except on
/// a stage with `review:`, whose role is expected to change nothing: `off`.
fn evidence_policy(
    expects_changes: Option<bool>,
    evidence: Option<EvidencePolicy>,
    reviews: bool,
    base: &FieldPath,
    problems: &mut Problems,
) -> EvidencePolicy {
    match (expects_changes, evidence) {
        (Some(_), Some(policy)) => {
            problems.at_key(
                &base.key("expects_changes"),
                "`expects_changes` is the older spelling of `evidence` and cannot be combined \
                 with it; keep `evidence` (`expects_changes: true` is `evidence: observed`, \
                 `false` is `evidence: off`)",
            );
            policy
        }
        (Some(true), None) => EvidencePolicy::Observed,
        (Some(false), None) => EvidencePolicy::Off,
        (None, Some(policy)) => policy,
        (None, None) if reviews => EvidencePolicy::Off,
        (None, None) => EvidencePolicy::Observed,
    }
}

/// Default time limit of one `verify` command.
pub const VERIFY_TIMEOUT_SECONDS: u64 = 900;

/// A stage's `verify:`: at least one command, none empty, a time limit above zero.
fn build_verify(
    raw: super::raw::RawVerify,
    path: &FieldPath,
    problems: &mut Problems,
) -> Option<super::model::Verify> {
    let mut ok = true;
    if raw.commands.is_empty() {
        problems.at_value(
            &path.key("commands"),
            "lists no command; expected at least one argv list such as [\"cargo\", \"test\"]",
        );
        ok = false;
    }
    for (i, argv) in raw.commands.iter().enumerate() {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            problems.at_value(
                &path.key("commands").index(i),
                "is empty; expected an argv list whose first word is the program",
            );
            ok = false;
        }
    }
    let seconds = raw.timeout_seconds.unwrap_or(VERIFY_TIMEOUT_SECONDS);
    if seconds == 0 {
        problems.at_value(
            &path.key("timeout_seconds"),
            "is 0; expected a number of seconds above 0 (default 900)",
        );
        ok = false;
    }
    ok.then(|| super::model::Verify {
        commands: raw.commands,
        timeout: std::time::Duration::from_secs(seconds),
        retry_with_output: raw.retry_with_output.unwrap_or(true),
    })
}

/// The single-role form: `active_states` minus `in_progress_state` must leave exactly one
/// status to claim from; `handoff_state` becomes the success status.
fn single_role(
    raw: &RawConfig,
    terminal: &[String],
    default_cap: u32,
    tracker_filter: &TicketFilter,
    problems: &mut Problems,
) -> Option<SourcedStage> {
    let root = FieldPath::root();
    let Some(active) = &raw.active_states else {
        problems.at(
            super::locate::Position::START,
            &root,
            "no pipeline: expected `pipeline_stages` (a list of stages) or the single-role form \
             (`active_states`, optional `in_progress_state` and `handoff_state`)",
        );
        return None;
    };
    let active_path = root.key("active_states");
    for (i, status) in active.iter().enumerate() {
        let path = active_path.index(i);
        check_status(problems, &path, status);
        if active[..i].iter().any(|a| same_name(a, status)) {
            problems.at_value(
                &path,
                format!("`{status}` is listed twice in active_states"),
            );
        }
        if terminal.iter().any(|t| same_name(t, status)) {
            problems.at_value(
                &path,
                format!("`{status}` is both active and terminal; active_states and terminal_states must not overlap"),
            );
        }
    }
    if let Some(ip) = &raw.in_progress_state {
        if !active.iter().any(|a| same_name(a, ip)) {
            problems.at_value(
                &root.key("in_progress_state"),
                format!(
                    "in_progress_state `{ip}` must be one of active_states ({})",
                    active.join(", ")
                ),
            );
        }
    }
    if let Some(h) = &raw.handoff_state {
        if active.iter().any(|a| same_name(a, h)) {
            problems.at_value(
                &root.key("handoff_state"),
                format!(
                    "handoff_state `{h}` is one of active_states, so a handed-off ticket would be \
                     dispatched again; expected a status outside active_states"
                ),
            );
        }
    }
    let claimable: Vec<(usize, &String)> = active
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            !raw.in_progress_state
                .as_ref()
                .is_some_and(|ip| same_name(ip, s))
        })
        .collect();
    let (claim_index, claim) = match claimable.as_slice() {
        [one] => *one,
        [] => {
            problems.at_value(
                &active_path,
                "active_states has no status to claim from besides in_progress_state; expected one more status",
            );
            return None;
        }
        many => {
            let names: Vec<&str> = many.iter().map(|(_, s)| s.as_str()).collect();
            problems.at_value(
                &active_path,
                format!(
                    "active_states has {} statuses to claim from ({}); a stage claims from exactly one: \
                     set in_progress_state to the status the agent works in, or use pipeline_stages",
                    names.len(),
                    names.join(", ")
                ),
            );
            return None;
        }
    };
    let in_progress_index = raw
        .in_progress_state
        .as_ref()
        .and_then(|ip| active.iter().position(|s| same_name(s, ip)));
    Some(SourcedStage {
        stage: Stage {
            role: raw.role.clone().unwrap_or_else(|| DEFAULT_ROLE.to_string()),
            claim_status: claim.clone(),
            in_progress_status: raw.in_progress_state.clone(),
            success_status: raw.handoff_state.clone(),
            failure_status: None,
            requires_prior_role: None,
            max_in_flight: default_cap,
            filter: tracker_filter.clone(),
            rework: None,
            routes: Vec::new(),
            verify: None,
            evidence: Default::default(),
            review: None,
        },
        role: root.key("role"),
        claim: active_path.index(claim_index),
        in_progress: in_progress_index
            .map_or_else(|| root.key("in_progress_state"), |i| active_path.index(i)),
        success: root.key("handoff_state"),
        failure: root.key("role"),
        requires: root.key("role"),
        rework: root.key("role"),
        // The single-role form has one stage: its claim status is the entry, and its
        // handoff_state is where people take over by design.
        entry: true,
        exit: true,
    })
}

/// The pipeline form's contract rules (the single-role form meets them by construction).
fn check_pipeline(stages: &[SourcedStage], terminal: &[String], problems: &mut Problems) {
    // status -> (stage index, "claim_status" | "in_progress_status") of its first owner
    // Compared ignoring case: `Review` and `review` are one status.
    let mut owners: Vec<(&str, usize, &str)> = Vec::new();
    let mut roles: HashMap<&str, usize> = HashMap::new();
    for (i, s) in stages.iter().enumerate() {
        let st = &s.stage;
        if let Some(first) = roles.insert(&st.role, i) {
            roles.insert(&st.role, first);
            problems.at_value(
                &s.role,
                format!(
                    "role `{}` is already used by pipeline_stages[{first}]; roles must be unique",
                    st.role
                ),
            );
        }
        let owned = [(&s.claim, st.claim_status.as_str(), "claim_status")]
            .into_iter()
            .chain(
                st.in_progress_status
                    .as_deref()
                    .map(|ip| (&s.in_progress, ip, "in_progress_status")),
            );
        for (path, status, field) in owned {
            if terminal.iter().any(|t| same_name(t, status)) {
                problems.at_value(
                    path,
                    format!("`{status}` is a terminal state; a stage cannot claim or run in a terminal status"),
                );
            }
            match owners.iter().find(|(s, _, _)| same_name(s, status)) {
                Some(&(_, j, other)) if j == i => problems.at_value(
                    path,
                    format!("in_progress_status `{status}` equals this stage's {other}; expected a different status"),
                ),
                Some(&(_, j, other)) => problems.at_value(
                    path,
                    format!(
                        "`{status}` is already pipeline_stages[{j}].{other}; two stages cannot own the same status"
                    ),
                ),
                None => owners.push((status, i, field)),
            }
        }
        let outcomes = [
            (&s.success, &st.success_status, "success"),
            (&s.failure, &st.failure_status, "failure"),
        ];
        for (path, status, what) in outcomes {
            let Some(status) = status else { continue };
            let own = if same_name(status, &st.claim_status) {
                Some("claim_status")
            } else if st
                .in_progress_status
                .as_ref()
                .is_some_and(|ip| same_name(ip, status))
            {
                Some("in_progress_status")
            } else {
                None
            };
            if let Some(own) = own {
                problems.at_value(
                    path,
                    format!(
                        "{what}_status `{status}` is this stage's own {own}, so the stage would re-dispatch \
                         itself forever; expected a status the stage does not own"
                    ),
                );
            }
        }
        if let Some(prior) = &st.requires_prior_role {
            let earlier: Vec<&str> = stages[..i].iter().map(|e| e.stage.role.as_str()).collect();
            if !earlier.contains(&prior.as_str()) {
                let why = if stages[i..].iter().any(|e| &e.stage.role == prior) {
                    format!("`{prior}` is not an earlier stage")
                } else {
                    format!("no stage has role `{prior}`")
                };
                let expected = if earlier.is_empty() {
                    "the first stage cannot require a prior role".to_string()
                } else {
                    format!(
                        "expected the role of an earlier stage ({})",
                        earlier.join(", ")
                    )
                };
                problems.at_value(&s.requires, format!("{why}; {expected}"));
            }
        }
    }
}

/// The index of the stage whose claim or in-progress status is `status`.
fn owner_of(stages: &[SourcedStage], status: &str) -> Option<usize> {
    stages
        .iter()
        .position(|s| s.stage.owned_statuses().any(|o| same_name(o, status)))
}

/// Back edges (a stage whose outcome status is an earlier stage's status) make cycles:
/// each needs a `rework` bound, which only a failure edge can carry.
fn check_rework(stages: &[SourcedStage], terminal: &[String], problems: &mut Problems) {
    let chain = |from: usize, to: usize| {
        stages[to..=from]
            .iter()
            .map(|s| s.stage.role.as_str())
            .chain(std::iter::once(stages[to].stage.role.as_str()))
            .collect::<Vec<_>>()
            .join(" -> ")
    };
    for (i, s) in stages.iter().enumerate() {
        let st = &s.stage;
        if let Some(success) = &st.success_status {
            // A terminal status some stage claims is reported as such already.
            let terminal = terminal.iter().any(|t| same_name(t, success));
            if let Some(j) = owner_of(stages, success).filter(|&j| j < i && !terminal) {
                problems.at_value(
                    &s.success,
                    format!(
                        "success_status `{success}` is pipeline_stages[{j}] ({})'s status: the cycle {} \
                         (back edge {} -> {}) would never end; only failure_status may send work back, \
                         bounded by `rework`",
                        stages[j].stage.role,
                        chain(i, j),
                        st.role,
                        stages[j].stage.role
                    ),
                );
            }
        }
        let back = st
            .failure_status
            .as_deref()
            .and_then(|f| owner_of(stages, f).map(|j| (f, j)))
            .filter(|&(_, j)| j < i);
        match (back, &st.rework) {
            (Some((failure, j)), None) => problems.at_value(
                &s.failure,
                format!(
                    "failure_status `{failure}` is pipeline_stages[{j}] ({})'s claim status: the cycle {} \
                     (back edge {} -> {}) has no bound; add e.g. `rework: {{max: 2, then: needs-human}}` \
                     to this stage",
                    stages[j].stage.role,
                    chain(i, j),
                    st.role,
                    stages[j].stage.role
                ),
            ),
            (Some((failure, j)), Some(_)) if !same_name(failure, &stages[j].stage.claim_status) => {
                problems.at_value(
                    &s.failure,
                    format!(
                        "failure_status `{failure}` is pipeline_stages[{j}]'s in_progress_status; \
                         send work back to its claim_status `{}`",
                        stages[j].stage.claim_status
                    ),
                )
            }
            (None, Some(_)) => problems.at_key(
                &s.rework,
                "`rework` bounds sending work back, but this stage's failure_status is not an \
                 earlier stage's claim_status; remove `rework` or point failure_status back",
            ),
            _ => {}
        }
        if let Some(Rework {
            then: Some(then), ..
        }) = &st.rework
        {
            check_status(problems, &s.rework.key("then"), then);
            if let Some(j) = owner_of(stages, then) {
                problems.at_value(
                    &s.rework.key("then"),
                    format!(
                        "rework.then `{then}` is pipeline_stages[{j}] ({})'s status, so an exhausted \
                         ticket would run again; expected a status no stage claims (e.g. needs-human)",
                        stages[j].stage.role
                    ),
                );
            }
        }
    }
}

/// Typos that validate: a claim status (other than the first stage's) that no stage
/// moves tickets to, and a success status (not terminal) that no stage claims. Either
/// strands tickets where `tick` finds "nothing to do", so each is a warning naming the
/// closest status on the other side, unless the stage marks it deliberate (`entry:
/// true`, `exit: true`). When a claim status is warned about with a suggestion, the
/// suggested success status is not warned about again: one typo, one warning, and it
/// points at the misspelt side. A success status that `reactions.watch` lists is where
/// sortie watches the ticket's pull request, not a dead end (issue #52).
fn warn_unreached(
    stages: &[SourcedStage],
    terminal: &[String],
    watched: &[String],
    problems: &mut Problems,
) {
    let is_terminal = |s: &str| terminal.iter().any(|t| same_name(t, s));
    // Every status some stage moves tickets to.
    let targets: Vec<&str> = stages
        .iter()
        .flat_map(|s| {
            let st = &s.stage;
            [
                st.success_status.as_deref(),
                st.failure_status.as_deref(),
                st.rework.as_ref().and_then(|r| r.then.as_deref()),
            ]
        })
        .flatten()
        .collect();
    let claimed = |status: &str| {
        stages
            .iter()
            .any(|s| same_name(&s.stage.claim_status, status))
    };
    let unclaimed_successes: Vec<&str> = stages
        .iter()
        .filter_map(|s| s.stage.success_status.as_deref())
        .filter(|ok| !claimed(ok) && !is_terminal(ok))
        .collect();
    let unreached_claims: Vec<&str> = stages
        .iter()
        .skip(1)
        .map(|s| s.stage.claim_status.as_str())
        .filter(|c| !targets.iter().any(|t| same_name(t, c)))
        .collect();
    let mut suggested: Vec<&str> = Vec::new();
    for s in stages.iter().skip(1).filter(|s| !s.entry) {
        let claim = s.stage.claim_status.as_str();
        if targets.iter().any(|t| same_name(t, claim)) {
            continue;
        }
        let near = closest(claim, &unclaimed_successes);
        let hint = near.map_or_else(String::new, |n| format!("; did you mean `{n}`?"));
        if let Some(n) = near {
            suggested.push(n);
        }
        problems.warn_at_value(
            &s.claim,
            format!(
                "no stage moves tickets to `{claim}` (it is no stage's success_status, \
                 failure_status or rework.then), so only a person can put one there{hint} \
                 (if people do, mark the stage `entry: true`)"
            ),
        );
    }
    for s in stages.iter().filter(|s| !s.exit) {
        let Some(ok) = s.stage.success_status.as_deref() else {
            continue;
        };
        let watched = watched.iter().any(|w| same_name(w, ok));
        if claimed(ok) || is_terminal(ok) || watched || suggested.iter().any(|n| same_name(n, ok)) {
            continue;
        }
        let hint = closest(ok, &unreached_claims)
            .map_or_else(String::new, |n| format!("; did you mean `{n}`?"));
        problems.warn_at_value(
            &s.success,
            format!(
                "no stage claims `{ok}` and it is not a terminal state, so tickets that succeed \
                 here wait there for a person{hint} (if that is the plan, mark the stage \
                 `exit: true`)"
            ),
        );
    }
}

/// The name of `candidates` (statuses or roles) closest to `status` when it is close
/// enough to be a typo.
pub(crate) fn closest<'a>(status: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let status = status.to_lowercase();
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(&status, &c.to_lowercase()), *c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

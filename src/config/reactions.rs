//! `reactions:`: what happens to a ticket whose pull request goes red, gets reviewed,
//! conflicts or merges (issue #32), checked against the stages and statuses.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::Stage;
use crate::names::same_name;

mod targets;

/// The label (on the ticket or the pull request) that stops every reaction.
pub const DEFAULT_HOLD_LABEL: &str = "sortie:hold";
/// Default `max_rounds` of each kind.
pub const DEFAULT_MAX_ROUNDS: u32 = 3;
/// Default `review_comments.quiet_seconds`.
pub const DEFAULT_REVIEW_QUIET_SECONDS: u64 = 120;

/// `reactions:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReactions {
    watch: Option<Vec<String>>,
    ci_failure: Option<RawRule>,
    review_comments: Option<RawRule>,
    bot_review: Option<RawRule>,
    merge_conflict: Option<RawRule>,
    auto_merge: Option<RawAutoMerge>,
    merged: Option<RawMoveTo>,
    closed_unmerged: Option<RawMoveTo>,
    escalate_to: Option<String>,
    hold_label: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    /// The fixing stage's role, where it cannot be read as a status.
    to: Option<String>,
    to_role: Option<String>,
    /// Read only to refuse it with the role meant: a fixing kind names a stage.
    to_status: Option<String>,
    max_rounds: Option<u32>,
    quiet_seconds: Option<u64>,
    bots: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAutoMerge {
    method: Option<MergeMethod>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMoveTo {
    /// The status, where it cannot be read as a stage's role.
    to: Option<String>,
    to_status: Option<String>,
    /// Read only to refuse it with the status meant: a move names a status.
    to_role: Option<String>,
}

impl RawMoveTo {
    fn written(self, path: &FieldPath, problems: &mut Problems) -> Option<targets::Written> {
        targets::written(
            path,
            [
                ("to_status", self.to_status),
                ("to", self.to),
                ("to_role", self.to_role),
            ],
            problems,
        )
    }
}

impl RawReactions {
    /// The statuses `watch` lists as written, for the stage checks that run before
    /// `reactions:` is checked.
    pub(crate) fn watched(&self) -> &[String] {
        self.watch.as_deref().unwrap_or_default()
    }
}

/// How a pull request is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeMethod {
    /// A merge commit.
    #[default]
    Merge,
    /// One squashed commit.
    Squash,
    /// The commits rebased onto the base.
    Rebase,
}

impl MergeMethod {
    /// The spelling GitHub and Gitea use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merge => "merge",
            Self::Squash => "squash",
            Self::Rebase => "rebase",
        }
    }
}

/// The kinds that send a ticket back to a stage, in the order a tick looks at them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReactionKind {
    /// The branch conflicts with its base.
    MergeConflict,
    /// A check or commit status of the head failed.
    CiFailure,
    /// A review bot commented.
    BotReview,
    /// People reviewed and commented.
    ReviewComments,
}

impl ReactionKind {
    /// Every kind, in the order a tick looks at them.
    pub const ALL: [ReactionKind; 4] = [
        Self::MergeConflict,
        Self::CiFailure,
        Self::BotReview,
        Self::ReviewComments,
    ];

    /// The config key and the `reaction.<kind>` reason code's tail.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MergeConflict => "merge_conflict",
            Self::CiFailure => "ci_failure",
            Self::BotReview => "bot_review",
            Self::ReviewComments => "review_comments",
        }
    }
}

/// One kind's rule: which stage fixes it, how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionRule {
    /// The role of the stage the ticket is sent to (it moves to its `claim_status`):
    /// `to_role`, or `to` naming a role.
    pub to: String,
    /// Rounds of this kind per ticket; the one after the last escalates.
    pub max_rounds: u32,
    /// `review_comments`: how long review activity must be quiet before reacting.
    pub quiet: Duration,
    /// `bot_review`: the bot logins; empty means any bot account.
    pub bots: Vec<String>,
}

/// `reactions:`, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionsConfig {
    /// Statuses whose tickets have their pull request watched.
    pub watch: Vec<String>,
    /// The rule of each configured kind.
    pub rules: Vec<(ReactionKind, ReactionRule)>,
    /// `auto_merge.method`, when auto-merge is on.
    pub auto_merge: Option<MergeMethod>,
    /// Where a merged pull request's ticket goes (default: the first terminal state).
    pub merged_to: Option<String>,
    /// Where a ticket goes whose pull request was closed unmerged; none holds it.
    pub closed_unmerged_to: Option<String>,
    /// Where a ticket goes when a kind ran out of rounds; none holds it.
    pub escalate_to: Option<String>,
    /// The label that stops every reaction (on the ticket or the pull request).
    pub hold_label: String,
}

impl ReactionsConfig {
    /// The rule of `kind`, when configured.
    pub fn rule(&self, kind: ReactionKind) -> Option<&ReactionRule> {
        self.rules.iter().find(|(k, _)| *k == kind).map(|(_, r)| r)
    }

    /// Whether `status` is watched (ignoring case).
    pub fn watches(&self, status: &str) -> bool {
        self.watch.iter().any(|w| same_name(w, status))
    }
}

/// What the checks of `reactions:` need from the rest of the config.
pub(crate) struct ReactionContext<'a> {
    pub(crate) stages: &'a [Stage],
    pub(crate) terminal_states: &'a [String],
    /// Some pull request opens (`pull_request:` is configured).
    pub(crate) opens_pull_requests: bool,
    /// The pull requests open on GitLab (`forge:`, or the tracker when there is none).
    pub(crate) forge_is_gitlab: bool,
}

/// `reactions:` checked: every stage and status it names, every bound.
pub(crate) fn normalize_reactions(
    raw: Option<RawReactions>,
    cx: &ReactionContext<'_>,
    problems: &mut Problems,
) -> Option<ReactionsConfig> {
    let raw = raw?;
    let path = FieldPath::root().key("reactions");
    if !cx.opens_pull_requests {
        problems.at_key(
            &path,
            "reactions watch the pull requests sortie opens, and nothing opens one: add \
             `pull_request` (e.g. `pull_request: {after: backend}`) or remove `reactions`",
        );
    }
    let watch = raw.watch.unwrap_or_default();
    if watch.is_empty() {
        problems.at_key(
            &path,
            "`watch` is required: the statuses whose tickets have their pull request watched \
             (e.g. `watch: [qa-passed]`)",
        );
    }
    for (i, status) in watch.iter().enumerate() {
        let p = path.key("watch").index(i);
        if status.trim().is_empty() {
            problems.at_value(&p, "expected a status name, found an empty string");
        } else if let Some(stage) = cx
            .stages
            .iter()
            .find(|s| s.owned_statuses().any(|o| same_name(o, status)))
        {
            problems.at_value(
                &p,
                format!(
                    "`{status}` is where stage `{}` works on tickets; a watched status must \
                     be one no stage claims or runs in (e.g. the last stage's success_status)",
                    stage.role
                ),
            );
        } else if cx.terminal_states.iter().any(|t| same_name(t, status)) {
            problems.at_value(
                &p,
                format!(
                    "`{status}` is a terminal state: sortie never acts on terminal tickets; \
                     watch the status before it"
                ),
            );
        }
    }

    let mut rules = Vec::new();
    let raws = [
        (ReactionKind::MergeConflict, raw.merge_conflict),
        (ReactionKind::CiFailure, raw.ci_failure),
        (ReactionKind::BotReview, raw.bot_review),
        (ReactionKind::ReviewComments, raw.review_comments),
    ];
    for (kind, rule) in raws {
        let Some(rule) = rule else { continue };
        let p = path.key(kind.as_str());
        if let Some(rule) = normalize_rule(kind, rule, &p, cx, &watch, problems) {
            rules.push((kind, rule));
        }
    }

    let merged_to = raw
        .merged
        .map(|m| {
            let p = path.key("merged");
            match m.written(&p, problems) {
                Some(w) => targets::move_status(w, &p, "to_status", cx, &watch, problems),
                None => {
                    problems.at_key(
                        &p,
                        "`to_status` is required: the status a ticket moves to when its pull \
                         request is merged (e.g. `to_status: done`)",
                    );
                    None
                }
            }
        })
        .unwrap_or_else(|| cx.terminal_states.first().cloned());
    let closed_unmerged_to = raw.closed_unmerged.and_then(|m| {
        let p = path.key("closed_unmerged");
        match m.written(&p, problems) {
            Some(w) => targets::move_status(w, &p, "to_status", cx, &watch, problems),
            None => {
                problems.at_key(
                    &p,
                    "`to_status` is required: the status a ticket moves to when its pull \
                     request is closed unmerged (e.g. `to_status: needs-human`); leave \
                     `closed_unmerged` out to hold the ticket",
                );
                None
            }
        }
    });
    let escalate_to = raw.escalate_to.and_then(|name| {
        let w = targets::Written {
            key: "escalate_to",
            name,
        };
        targets::move_status(w, &path, "escalate_to", cx, &watch, problems)
    });
    let hold_label = raw
        .hold_label
        .unwrap_or_else(|| DEFAULT_HOLD_LABEL.to_string());
    if hold_label.trim().is_empty() {
        problems.at_value(
            &path.key("hold_label"),
            "expected a label name, found an empty string",
        );
    }
    let auto_merge = raw.auto_merge.map(|a| a.method.unwrap_or_default());
    if cx.forge_is_gitlab && auto_merge == Some(MergeMethod::Rebase) {
        problems.at_value(
            &path.key("auto_merge").key("method"),
            "GitLab merges with the project's own merge method and cannot be asked to \
             rebase: expected `merge` or `squash` (set the project to fast-forward merges \
             for a linear history)",
        );
    }
    Some(ReactionsConfig {
        watch,
        rules,
        auto_merge,
        merged_to,
        closed_unmerged_to,
        escalate_to,
        hold_label,
    })
}

fn normalize_rule(
    kind: ReactionKind,
    raw: RawRule,
    path: &FieldPath,
    cx: &ReactionContext<'_>,
    watch: &[String],
    problems: &mut Problems,
) -> Option<ReactionRule> {
    let target = targets::written(
        path,
        [
            ("to_role", raw.to_role),
            ("to", raw.to),
            ("to_status", raw.to_status),
        ],
        problems,
    );
    let to = targets::fixing_role(kind.as_str(), target, path, cx, watch, problems)?;
    let max_rounds = raw.max_rounds.unwrap_or(DEFAULT_MAX_ROUNDS);
    if max_rounds == 0 {
        problems.at_value(
            &path.key("max_rounds"),
            "expected at least 1 (remove the kind to turn it off)",
        );
    }
    let quiet = match (kind, raw.quiet_seconds) {
        (ReactionKind::ReviewComments, q) => q.unwrap_or(DEFAULT_REVIEW_QUIET_SECONDS),
        (_, None) => 0,
        (_, Some(_)) => {
            problems.at_key(
                &path.key("quiet_seconds"),
                format!(
                    "`quiet_seconds` belongs to `review_comments` only; {} reacts at once",
                    kind.as_str()
                ),
            );
            0
        }
    };
    let bots = match (kind, raw.bots) {
        (ReactionKind::BotReview, b) => b.unwrap_or_default(),
        (_, None) => Vec::new(),
        (_, Some(_)) => {
            problems.at_key(
                &path.key("bots"),
                format!(
                    "`bots` belongs to `bot_review` only (the logins whose reviews it \
                     handles); remove it from {}",
                    kind.as_str()
                ),
            );
            Vec::new()
        }
    };
    Some(ReactionRule {
        to,
        max_rounds,
        quiet: Duration::from_secs(quiet),
        bots,
    })
}

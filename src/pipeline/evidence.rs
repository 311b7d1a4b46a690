//! Handoff evidence (issue #33): whether sortie saw a successful run do work, and
//! whether the stage's `evidence` policy lets it be handed on (docs/evidence.md).
//! The observation comes from the ticket's git worktree (`branch::conclude`) or from
//! the baseline of a plain workspace taken at launch (`agent::baseline`, here).

use std::path::Path;
use std::time::Duration;

use crate::agent::baseline::{self, Baseline, WorkSeen};
use crate::agent::git::NO_CHANGES;
use crate::agent::{AgentOutcome, NO_CHANGE_NEEDED};
use crate::block::{Category, Evidence, NextAction};
use crate::config::{EvidencePolicy, Stage};

/// `evidence.work`: sortie saw a new commit or a changed index or working tree.
pub const WORK_OBSERVED: &str = "observed";
/// `evidence.work`: the workspace is as it was at launch.
pub const WORK_ABSENT: &str = "absent";
/// `evidence.work`: whether work was done cannot be told.
pub const WORK_NOT_DETERMINABLE: &str = "not_determinable";
/// `evidence.work`: nothing was seen done, and the agent said nothing needed doing.
pub const WORK_NO_CHANGE_NEEDED: &str = "no_change_needed";

/// Time limit of each git call that inspects a plain workspace.
const INSPECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// What the policy makes of a run's work.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Hand it on, with this `evidence.work`.
    HandOn(&'static str),
    /// Withheld: no work was seen.
    Absent,
    /// Withheld (`strict`): whether work was done cannot be told; why.
    Undetermined(String),
}

/// The policy applied to what was seen. `declared`: the agent said nothing needed
/// changing and gave its reason, which stands in for work wherever none was seen.
fn decide(policy: EvidencePolicy, seen: &WorkSeen, declared: bool) -> Verdict {
    match seen {
        WorkSeen::Observed => Verdict::HandOn(WORK_OBSERVED),
        _ if declared => Verdict::HandOn(WORK_NO_CHANGE_NEEDED),
        WorkSeen::Absent if policy == EvidencePolicy::Off => Verdict::HandOn(WORK_ABSENT),
        WorkSeen::Absent => Verdict::Absent,
        WorkSeen::NotDeterminable(why) if policy == EvidencePolicy::Strict => {
            Verdict::Undetermined(why.clone())
        }
        WorkSeen::NotDeterminable(_) => Verdict::HandOn(WORK_NOT_DETERMINABLE),
    }
}

/// Apply `stage`'s policy to a success given what was `seen`: the success with
/// `evidence.work` set, or the `agent.no_changes` failure that holds the ticket.
/// `absent` says where nothing changed, for that failure's detail. A failure is
/// returned as it is.
pub(super) fn judge(
    stage: &Stage,
    seen: &WorkSeen,
    outcome: AgentOutcome,
    evidence: &mut Evidence,
    absent: impl FnOnce() -> String,
) -> AgentOutcome {
    let AgentOutcome::Success { summary, artifacts } = &outcome else {
        return outcome;
    };
    let said_so = artifacts.get(NO_CHANGE_NEEDED).is_some_and(|v| v == "true");
    let declared = said_so && !summary.trim().is_empty();
    let mut detail = match decide(stage.evidence, seen, declared) {
        Verdict::HandOn(work) => {
            evidence.work = Some(work.to_string());
            return outcome;
        }
        Verdict::Absent => absent(),
        Verdict::Undetermined(why) => format!(
            "the run succeeded, but whether it did any work cannot be told ({why}), and the \
             stage's evidence policy is strict"
        ),
    };
    if said_so {
        detail.push_str(
            "; `no_change_needed: true` came without its reason as `summary`, so it is not honoured",
        );
    } else {
        detail.push_str(
            "; a role that found nothing to change writes `no_change_needed: true` and its \
             reason as `summary` in its result file",
        );
    }
    tracing::info!(policy = ?stage.evidence, "handoff withheld: no work seen");
    AgentOutcome::failure(NO_CHANGES, Category::Policy, NextAction::Manual, detail)
}

/// The baseline of a plain workspace (no `workspace.git`) before the agent runs;
/// `None` when the stage's policy is `off` (nothing will be checked).
pub(super) async fn plain_baseline(stage: &Stage, workspace: &Path) -> Option<Baseline> {
    if stage.evidence == EvidencePolicy::Off {
        return None;
    }
    Some(baseline::capture(workspace, INSPECTION_TIMEOUT).await)
}

/// After a run in a plain workspace: what it did against `base`, into `evidence`
/// (`work`, and `change` when the workspace is a git work tree), and the policy
/// applied to a success.
pub(super) async fn conclude_plain(
    stage: &Stage,
    workspace: &Path,
    base: &Baseline,
    outcome: AgentOutcome,
    evidence: &mut Evidence,
) -> AgentOutcome {
    if !outcome.is_success() {
        return outcome;
    }
    let (seen, change) = baseline::observe(workspace, base, INSPECTION_TIMEOUT).await;
    if let WorkSeen::NotDeterminable(why) = &seen {
        tracing::debug!(%why, "work not determinable");
    }
    if change.is_some() {
        evidence.change = change;
    }
    let head = match base {
        Baseline::Git { head, .. } => head.clone(),
        Baseline::NotDeterminable(_) => String::new(),
    };
    judge(stage, &seen, outcome, evidence, || {
        format!(
            "the run succeeded but left no new commit and no change in its workspace {} \
             (head {head})",
            workspace.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICIES: [EvidencePolicy; 3] = [
        EvidencePolicy::Observed,
        EvidencePolicy::Strict,
        EvidencePolicy::Off,
    ];

    fn undetermined() -> WorkSeen {
        WorkSeen::NotDeterminable("not a work tree".to_string())
    }

    #[test]
    fn observed_work_is_handed_on_under_every_policy() {
        for policy in POLICIES {
            let verdict = decide(policy, &WorkSeen::Observed, false);
            assert_eq!(verdict, Verdict::HandOn(WORK_OBSERVED), "{policy:?}");
        }
    }

    #[test]
    fn absence_withholds_unless_off_or_declared() {
        use EvidencePolicy::*;
        assert_eq!(decide(Observed, &WorkSeen::Absent, false), Verdict::Absent);
        assert_eq!(decide(Strict, &WorkSeen::Absent, false), Verdict::Absent);
        assert_eq!(
            decide(Off, &WorkSeen::Absent, false),
            Verdict::HandOn(WORK_ABSENT)
        );
        for policy in [Observed, Strict] {
            assert_eq!(
                decide(policy, &WorkSeen::Absent, true),
                Verdict::HandOn(WORK_NO_CHANGE_NEEDED)
            );
        }
    }

    #[test]
    fn not_determinable_withholds_under_strict_only() {
        use EvidencePolicy::*;
        assert_eq!(
            decide(Observed, &undetermined(), false),
            Verdict::HandOn(WORK_NOT_DETERMINABLE)
        );
        assert_eq!(
            decide(Strict, &undetermined(), false),
            Verdict::Undetermined("not a work tree".to_string())
        );
        assert_eq!(
            decide(Strict, &undetermined(), true),
            Verdict::HandOn(WORK_NO_CHANGE_NEEDED)
        );
        assert_eq!(
            decide(Off, &undetermined(), false),
            Verdict::HandOn(WORK_NOT_DETERMINABLE)
        );
    }
}

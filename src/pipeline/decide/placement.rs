//! Placement: where a ticket is against where a stage's claim or retry expects it, and
//! what follows (keep it, cancel the run, drop the record). Pure. A hold's is in
//! [`super::release`].

use chrono::{DateTime, Utc};

use super::eligibility::stage_for_status;
use super::filter::mismatch_parts;
use crate::config::Config;
use crate::ledger::{Claim, RetryEntry};
use crate::tracker::same_name;

/// Where a ticket is, as far as this tick can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whereabouts {
    /// In this status (and closed by the tracker or not).
    Status {
        /// The status (the config's spelling when it names it).
        status: String,
        /// The tracker itself says it is closed.
        closed: bool,
        /// Its labels (other than a status label).
        labels: Vec<String>,
        /// Who it is assigned to.
        assignees: Vec<String>,
        /// When the ticket last changed, as the tracker reports it.
        updated_at: DateTime<Utc>,
    },
    /// The tracker says it does not exist.
    Gone,
    /// The tracker could not be asked: nothing may be concluded.
    Unknown,
}

/// What to do with a live claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlacement {
    /// The ticket is where the stage owns it (or nobody can tell): let the run go on.
    Keep,
    /// The ticket left the stage: ask the holder to stop, and why.
    Cancel(String),
}

/// Whether the run holding `claim` may go on, given where its ticket is. A ticket that no
/// longer passes the stage's filter (a person removed the opt-in label, reassigned it)
/// was withdrawn exactly like a card moved out of the stage. `identity` is who a
/// filter's `assignee: me` means.
pub fn place_claim(
    config: &Config,
    claim: &Claim,
    at: &Whereabouts,
    identity: &str,
) -> ClaimPlacement {
    let Some(stage) = config.stages.iter().find(|s| s.role == claim.key.role) else {
        // A role no longer in the pipeline: its run finishes and its write-back drops.
        return ClaimPlacement::Keep;
    };
    match at {
        Whereabouts::Unknown => ClaimPlacement::Keep,
        Whereabouts::Gone => ClaimPlacement::Cancel("ticket no longer exists".to_string()),
        Whereabouts::Status { status, closed, .. } if *closed || config.is_terminal(status) => {
            ClaimPlacement::Cancel(format!("ticket is terminal ({status})"))
        }
        Whereabouts::Status { status, .. }
            if !stage.owned_statuses().any(|s| same_name(s, status)) =>
        {
            ClaimPlacement::Cancel(format!("ticket moved to {status}"))
        }
        Whereabouts::Status {
            labels, assignees, ..
        } => match mismatch_parts(&stage.filter, labels, assignees, identity) {
            Some(detail) => ClaimPlacement::Cancel(format!("ticket left the filter: {detail}")),
            None => ClaimPlacement::Keep,
        },
    }
}

/// Whether a queued retry still belongs to where its ticket is (a retry belongs to its
/// stage: a ticket that moved to another stage drops it).
pub fn retry_still_due(config: &Config, retry: &RetryEntry, at: &Whereabouts) -> bool {
    match at {
        Whereabouts::Unknown => true,
        Whereabouts::Gone => false,
        Whereabouts::Status { status, .. } => {
            stage_for_status(config, status) == stage_for_status(config, &retry.stage)
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::ledger::ClaimKey;

    fn config() -> Config {
        Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
             pipeline_stages:\n\
             - {role: dev, claim_status: todo, in_progress_status: doing, success_status: review}\n\
             - {role: qa, claim_status: review, success_status: done}\n",
            None,
        )
        .unwrap()
    }

    fn at(status: &str) -> Whereabouts {
        Whereabouts::Status {
            status: status.into(),
            closed: false,
            labels: Vec::new(),
            assignees: Vec::new(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn a_run_goes_on_while_its_ticket_is_in_the_stage_and_is_cancelled_when_it_leaves() {
        let config = config();
        let now = Utc::now();
        let claim = Claim {
            key: ClaimKey::new("local", "1", "dev"),
            stage: "todo".into(),
            claimer_id: "c".into(),
            claimed_at: now,
            lease_expires_at: now,
            stage_attempt: 1,
            run_id: "r".into(),
            cancel_requested: false,
            agent_pid: None,
        };
        assert_eq!(
            place_claim(&config, &claim, &at("todo"), "sortie"),
            ClaimPlacement::Keep
        );
        assert_eq!(
            place_claim(&config, &claim, &at("Doing "), "sortie"),
            ClaimPlacement::Keep
        );
        assert_eq!(
            place_claim(&config, &claim, &Whereabouts::Unknown, "sortie"),
            ClaimPlacement::Keep,
            "an unreachable tracker is not evidence"
        );
        assert_eq!(
            place_claim(&config, &claim, &at("review"), "sortie"),
            ClaimPlacement::Cancel("ticket moved to review".into())
        );
        assert_eq!(
            place_claim(&config, &claim, &at("done"), "sortie"),
            ClaimPlacement::Cancel("ticket is terminal (done)".into())
        );
        let closed = Whereabouts::Status {
            status: "todo".into(),
            closed: true,
            labels: Vec::new(),
            assignees: Vec::new(),
            updated_at: Utc::now(),
        };
        assert!(matches!(
            place_claim(&config, &claim, &closed, "sortie"),
            ClaimPlacement::Cancel(_)
        ));
    }

    #[test]
    fn retries_follow_their_stage() {
        let config = config();
        let key = ClaimKey::new("local", "1", "dev");
        let retry = RetryEntry {
            key,
            stage: "todo".into(),
            failed_attempt: 1,
            due_at: Utc::now(),
            reason_code: "x".into(),
        };
        assert!(retry_still_due(&config, &retry, &at("doing")), "same stage");
        assert!(!retry_still_due(&config, &retry, &at("review")));
        assert!(retry_still_due(&config, &retry, &Whereabouts::Unknown));
    }
}

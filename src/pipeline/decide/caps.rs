//! In-flight ceilings: one type that answers "may this stage start one more run?".
//!
//! The same limits go to the ledger with each claim, which checks them again atomically
//! (another process may have claimed meanwhile); a ceiling the ledger reports is turned
//! into the same skip reason here.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::eligibility::SkipReason;
use crate::config::{Config, Stage};
use crate::ledger::{CeilingScope, Claim, ClaimLimits};

/// Live runs counted against the config's ceilings while a tick plans and dispatches.
#[derive(Debug, Clone)]
pub struct Caps<'c> {
    config: &'c Config,
    global: u32,
    by_role: HashMap<String, u32>,
    by_status: HashMap<String, u32>,
}

impl<'c> Caps<'c> {
    /// Counts from the live claims (leases not run out at `now`) of this tracker.
    pub fn from_claims(config: &'c Config, claims: &[Claim], now: DateTime<Utc>) -> Self {
        let mut caps = Caps {
            config,
            global: 0,
            by_role: HashMap::new(),
            by_status: HashMap::new(),
        };
        for claim in claims.iter().filter(|c| c.lease_expires_at > now) {
            caps.count(&claim.key.role, &claim.stage);
        }
        caps
    }

    /// The config the caps are counted for.
    pub fn config(&self) -> &'c Config {
        self.config
    }

    /// The limits of `stage`: what the ledger checks with its claim.
    pub fn limits(config: &Config, stage: &Stage) -> ClaimLimits {
        ClaimLimits {
            global: config.concurrency.max_in_flight,
            role: stage.max_in_flight,
            status: config
                .concurrency
                .per_status_max_in_flight
                .get(&stage.claim_status)
                .copied(),
        }
    }

    /// Why `stage` may not start one more run, if it may not.
    pub fn check(&self, stage: &Stage) -> Option<SkipReason> {
        let limits = Self::limits(self.config, stage);
        let reached = |scope| Some(self.reason(stage, scope));
        if self.global >= limits.global {
            return reached(CeilingScope::Global);
        }
        if self.by_role.get(&stage.role).copied().unwrap_or(0) >= limits.role {
            return reached(CeilingScope::Role);
        }
        if let Some(limit) = limits.status {
            if self
                .by_status
                .get(&stage.claim_status)
                .copied()
                .unwrap_or(0)
                >= limit
            {
                return reached(CeilingScope::Status);
            }
        }
        None
    }

    /// The skip reason for a ceiling of `stage` (also for one the ledger reported).
    pub fn reason(&self, stage: &Stage, scope: CeilingScope) -> SkipReason {
        let limits = Self::limits(self.config, stage);
        let limit = match scope {
            CeilingScope::Global => limits.global,
            CeilingScope::Role => limits.role,
            CeilingScope::Status => limits.status.unwrap_or(0),
        };
        SkipReason::CapReached { scope, limit }
    }

    /// Count one more run of `stage`.
    pub fn add(&mut self, stage: &Stage) {
        self.count(&stage.role, &stage.claim_status);
    }

    fn count(&mut self, role: &str, status: &str) {
        self.global += 1;
        *self.by_role.entry(role.to_string()).or_default() += 1;
        *self.by_status.entry(status.to_string()).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ClaimKey;

    fn config() -> Config {
        Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
             concurrency: {max_in_flight: 3, per_role_max_in_flight: 2, per_status_max_in_flight: {review: 1}}\n\
             pipeline_stages:\n\
             - {role: dev, claim_status: todo, success_status: review}\n\
             - {role: qa, claim_status: review, success_status: done}\n",
            None,
        )
        .unwrap()
    }

    fn claim(role: &str, stage: &str, live: bool) -> Claim {
        let now = Utc::now();
        Claim {
            key: ClaimKey::new("local", format!("{role}-{stage}"), role),
            stage: stage.to_string(),
            claimer_id: "c".into(),
            claimed_at: now,
            lease_expires_at: if live {
                now + chrono::Duration::hours(1)
            } else {
                now - chrono::Duration::hours(1)
            },
            stage_attempt: 1,
            run_id: "r".into(),
            cancel_requested: false,
            agent_pid: None,
        }
    }

    #[test]
    fn role_status_and_global_ceilings_are_checked_in_that_order() {
        let config = config();
        let (dev, qa) = (&config.stages[0], &config.stages[1]);
        let mut caps = Caps::from_claims(&config, &[claim("dev", "todo", false)], Utc::now());
        assert_eq!(caps.check(dev), None, "an expired claim does not count");
        caps.add(dev);
        caps.add(dev);
        assert_eq!(
            caps.check(dev),
            Some(SkipReason::CapReached {
                scope: CeilingScope::Role,
                limit: 2
            })
        );
        assert_eq!(caps.check(qa), None);
        caps.add(qa);
        assert_eq!(
            caps.check(qa),
            Some(SkipReason::CapReached {
                scope: CeilingScope::Global,
                limit: 3
            })
        );
        let one_review = Caps::from_claims(&config, &[claim("qa", "review", true)], Utc::now());
        assert_eq!(
            one_review.check(qa),
            Some(SkipReason::CapReached {
                scope: CeilingScope::Status,
                limit: 1
            })
        );
        assert_eq!(Caps::limits(&config, qa).status, Some(1));
        assert_eq!(Caps::limits(&config, dev).status, None);
    }
}

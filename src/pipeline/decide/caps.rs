//! In-flight ceilings: one type that answers "may this stage start one more run?".
//!
//! The same limits go to the ledger with each claim, which checks them again atomically
//! (another process may have claimed meanwhile); a ceiling the ledger reports is turned
//! into the same skip reason here.
//!
//! The caps are the fleet's: every host ticking the tracker counts against them. While
//! several hosts tick it, each may hold only its share of each cap (the cap divided by
//! the hosts that run that scope, rounded up: [`HostShare::of`]), so a host that frees a
//! slot and ticks at once does not take every slot back before the others look (issue
//! #52). A host counts while it announced itself within a claim TTL
//! ([`crate::ledger::Ledger::announce`]) or holds a live claim; the planning host always
//! counts.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use super::eligibility::SkipReason;
use crate::config::{Config, Stage};
use crate::ledger::{CeilingScope, Claim, ClaimLimits, HostShare, LedgerSnapshot};

/// Live runs counted against the config's ceilings while a tick plans and dispatches.
#[derive(Debug, Clone)]
pub struct Caps<'c> {
    config: &'c Config,
    /// Every host's live claims.
    fleet: Counts,
    /// This host's.
    mine: Counts,
    /// The hosts sharing each cap.
    hosts: Hosts,
}

/// Live claims by scope.
#[derive(Debug, Clone, Default)]
struct Counts {
    global: u32,
    by_role: HashMap<String, u32>,
    by_status: HashMap<String, u32>,
}

impl Counts {
    fn add(&mut self, role: &str, status: &str) {
        self.global += 1;
        *self.by_role.entry(role.to_string()).or_default() += 1;
        *self.by_status.entry(status.to_string()).or_default() += 1;
    }

    fn role(&self, role: &str) -> u32 {
        self.by_role.get(role).copied().unwrap_or(0)
    }

    fn status(&self, status: &str) -> u32 {
        self.by_status.get(status).copied().unwrap_or(0)
    }
}

/// The hosts present in each scope: ticking the tracker, running the role, claiming
/// from the status.
#[derive(Debug, Clone, Default)]
struct Hosts {
    all: BTreeSet<String>,
    by_role: HashMap<String, BTreeSet<String>>,
    by_status: HashMap<String, BTreeSet<String>>,
}

impl Hosts {
    fn add(&mut self, host: &str, role: &str, status: &str) {
        self.all.insert(host.to_string());
        let into = |map: &mut HashMap<String, BTreeSet<String>>, key: &str| {
            map.entry(key.to_string())
                .or_default()
                .insert(host.to_string());
        };
        into(&mut self.by_role, role);
        into(&mut self.by_status, status);
    }

    fn count(set: Option<&BTreeSet<String>>) -> u32 {
        set.map_or(1, |s| u32::try_from(s.len()).unwrap_or(u32::MAX))
    }
}

impl<'c> Caps<'c> {
    /// Counts from the live claims (leases not run out at `now`) of this tracker, as
    /// one host alone would count them (no share).
    pub fn from_claims(config: &'c Config, claims: &[Claim], now: DateTime<Utc>) -> Self {
        let mut caps = Caps {
            config,
            fleet: Counts::default(),
            mine: Counts::default(),
            hosts: Hosts::default(),
        };
        for claim in claims.iter().filter(|c| c.lease_expires_at > now) {
            caps.fleet.add(&claim.key.role, &claim.stage);
        }
        caps
    }

    /// Counts from a ledger snapshot of this tracker, planned by `host`: the fleet's live
    /// claims, `host`'s own, and the hosts present at `now` (`host` itself, for every
    /// stage of the config; the hosts that announced themselves and have not expired;
    /// the holders of live claims).
    pub fn from_snapshot(
        config: &'c Config,
        snapshot: &LedgerSnapshot,
        host: &str,
        now: DateTime<Utc>,
    ) -> Self {
        let mut caps = Self::from_claims(config, &snapshot.claims, now);
        for stage in &config.stages {
            caps.hosts.add(host, &stage.role, &stage.claim_status);
        }
        for presence in snapshot.hosts.iter().filter(|p| p.expires_at > now) {
            caps.hosts
                .add(&presence.host, &presence.role, &presence.status);
        }
        for claim in snapshot.claims.iter().filter(|c| c.lease_expires_at > now) {
            let holder = claim.claimer_id.host();
            caps.hosts.add(holder, &claim.key.role, &claim.stage);
            if holder == host {
                caps.mine.add(&claim.key.role, &claim.stage);
            }
        }
        caps
    }

    /// The config the caps are counted for.
    pub fn config(&self) -> &'c Config {
        self.config
    }

    /// The fleet's limits of `stage`, as the config sets them.
    pub fn fleet_limits(config: &Config, stage: &Stage) -> ClaimLimits {
        ClaimLimits {
            global: config.concurrency.max_in_flight,
            role: stage.max_in_flight,
            status: config
                .concurrency
                .per_status_max_in_flight
                .get(&stage.claim_status)
                .copied(),
            host: None,
        }
    }

    /// The limits of `stage`: what the ledger checks with its claim (the fleet's, and
    /// this host's share of them while other hosts are present).
    pub fn limits(&self, stage: &Stage) -> ClaimLimits {
        let fleet = Self::fleet_limits(self.config, stage);
        if self.hosts.all.len() <= 1 {
            return fleet;
        }
        let hosts = &self.hosts;
        ClaimLimits {
            host: Some(HostShare {
                global: HostShare::of(fleet.global, Hosts::count(Some(&hosts.all))),
                role: HostShare::of(fleet.role, Hosts::count(hosts.by_role.get(&stage.role))),
                status: fleet.status.map(|cap| {
                    HostShare::of(cap, Hosts::count(hosts.by_status.get(&stage.claim_status)))
                }),
            }),
            ..fleet
        }
    }

    /// Why `stage` may not start one more run, if it may not: a cap of the fleet, then
    /// this host's share of one.
    pub fn check(&self, stage: &Stage) -> Option<SkipReason> {
        let limits = self.limits(stage);
        let counts = |c: &Counts| (c.role(&stage.role), c.global, c.status(&stage.claim_status));
        let (role, global, status) = counts(&self.fleet);
        let fleet = if role >= limits.role {
            Some(CeilingScope::Role)
        } else if global >= limits.global {
            Some(CeilingScope::Global)
        } else if limits.status.is_some_and(|limit| status >= limit) {
            Some(CeilingScope::Status)
        } else {
            None
        };
        if let Some(scope) = fleet {
            return Some(self.reason(stage, scope));
        }
        let share = limits.host?;
        let (role, global, status) = counts(&self.mine);
        let scope = share.reached(role.into(), global.into(), status.into())?;
        Some(Self::share_reason(&limits, scope))
    }

    /// The skip reason for a ceiling of `stage` (also for one the ledger reported).
    pub fn reason(&self, stage: &Stage, scope: CeilingScope) -> SkipReason {
        let limits = Self::fleet_limits(self.config, stage);
        SkipReason::CapReached {
            scope,
            limit: scope_limit(&limits, scope),
        }
    }

    /// The skip reason for this host's share of a cap in `limits` (also for one the
    /// ledger reported).
    pub fn share_reason(limits: &ClaimLimits, scope: CeilingScope) -> SkipReason {
        let share = limits.host.map_or(0, |share| match scope {
            CeilingScope::Global => share.global,
            CeilingScope::Role => share.role,
            CeilingScope::Status => share.status.unwrap_or(0),
        });
        SkipReason::HostShareReached {
            scope,
            share,
            limit: scope_limit(limits, scope),
        }
    }

    /// Count one more run of `stage` (started by this host).
    pub fn add(&mut self, stage: &Stage) {
        self.fleet.add(&stage.role, &stage.claim_status);
        self.mine.add(&stage.role, &stage.claim_status);
    }
}

/// The fleet's cap of `scope` in `limits`.
fn scope_limit(limits: &ClaimLimits, scope: CeilingScope) -> u32 {
    match scope {
        CeilingScope::Global => limits.global,
        CeilingScope::Role => limits.role,
        CeilingScope::Status => limits.status.unwrap_or(0),
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
        assert_eq!(Caps::fleet_limits(&config, qa).status, Some(1));
        assert_eq!(Caps::fleet_limits(&config, dev).status, None);
    }

    fn held_by(mut claim: Claim, claimer: &str) -> Claim {
        claim.claimer_id = claimer.into();
        claim
    }

    /// Issue #52: with other hosts present, a host that holds its share of a cap waits
    /// for them, although the fleet's cap has room; alone, it has the whole cap.
    #[test]
    fn a_host_holding_its_share_waits_while_other_hosts_are_present() {
        let config = Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
             concurrency: {max_in_flight: 10, per_role_max_in_flight: 6}\n\
             pipeline_stages:\n\
             - {role: dev, claim_status: todo, success_status: review}\n",
            None,
        )
        .unwrap();
        let dev = &config.stages[0];
        let now = Utc::now();
        let mut snapshot = LedgerSnapshot {
            claims: vec![
                held_by(claim("dev", "todo", true), "host-a:1:x"),
                held_by(claim("dev", "todo", true), "host-a:2:y"),
            ],
            ..LedgerSnapshot::default()
        };
        let alone = Caps::from_snapshot(&config, &snapshot, "host-a", now);
        assert_eq!(alone.check(dev), None);
        assert_eq!(alone.limits(dev).host, None);

        // host-b and host-c announced themselves: 6 / 3 hosts = 2 each.
        for host in ["host-b", "host-c"] {
            snapshot.hosts.push(crate::ledger::HostPresence {
                host: host.into(),
                role: "dev".into(),
                status: "todo".into(),
                expires_at: now + chrono::Duration::minutes(10),
            });
        }
        let shared = Caps::from_snapshot(&config, &snapshot, "host-a", now);
        assert_eq!(
            shared.check(dev),
            Some(SkipReason::HostShareReached {
                scope: CeilingScope::Role,
                share: 2,
                limit: 6
            })
        );
        let limits = shared.limits(dev);
        assert_eq!(
            limits.host,
            Some(HostShare {
                global: 4,
                role: 2,
                status: None
            })
        );
        let mut at_b = Caps::from_snapshot(&config, &snapshot, "host-b", now);
        assert_eq!(at_b.check(dev), None, "host-b has its whole share");
        at_b.add(dev);
        at_b.add(dev);
        assert!(matches!(
            at_b.check(dev),
            Some(SkipReason::HostShareReached { .. })
        ));

        // A presence that expired no longer counts.
        for presence in &mut snapshot.hosts {
            presence.expires_at = now;
        }
        let expired = Caps::from_snapshot(&config, &snapshot, "host-a", now);
        assert_eq!(expired.check(dev), None);
    }
}

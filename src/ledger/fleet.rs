//! Several hosts sharing the fleet-wide caps: which hosts tick a tracker (their
//! presence rows) and the share of each cap a host may hold while others are there.

use serde::Serialize;

use super::{CeilingScope, Timestamp};

/// One host ticking one stage of a tracker: written by each of its ticks, it counts as
/// present until `expires_at` (one claim TTL after its last tick).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPresence {
    /// The host (the first part of its claimer ids: `SORTIE_HOST_ID`, else the host name).
    pub host: String,
    /// A role it runs.
    pub role: String,
    /// The claim status of that role's stage.
    pub status: String,
    /// When it stops counting unless it ticks again.
    pub expires_at: Timestamp,
}

/// The most live claims one host may hold in each scope while other hosts share the
/// caps ([`HostShare::of`]); checked with the claim, after the fleet's own caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostShare {
    /// This host's live claims across all roles of the tracker.
    pub global: u32,
    /// This host's live claims of the role.
    pub role: u32,
    /// This host's live claims of the claim status, when that status has a cap.
    pub status: Option<u32>,
}

impl HostShare {
    /// A host's share of `cap` when `hosts` hosts (itself included) share it: the cap
    /// divided evenly, rounded up, so the shares add up to at least the cap and the fleet
    /// can still fill it. One host (or none counted) keeps the whole cap.
    pub fn of(cap: u32, hosts: u32) -> u32 {
        cap.div_ceil(hosts.max(1))
    }

    /// The first scope (role, global, status: the order of the fleet's caps) whose share
    /// the host's live claims (`role`, `global`, `status` of them) already fill.
    pub fn reached(&self, role: i64, global: i64, status: i64) -> Option<CeilingScope> {
        if role >= i64::from(self.role) {
            Some(CeilingScope::Role)
        } else if global >= i64::from(self.global) {
            Some(CeilingScope::Global)
        } else if self.status.is_some_and(|cap| status >= i64::from(cap)) {
            Some(CeilingScope::Status)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_is_split_evenly_rounding_up() {
        assert_eq!(HostShare::of(6, 3), 2);
        assert_eq!(HostShare::of(6, 4), 2);
        assert_eq!(HostShare::of(7, 3), 3);
        assert_eq!(HostShare::of(2, 3), 1);
        assert_eq!(HostShare::of(6, 1), 6);
        assert_eq!(HostShare::of(6, 0), 6);
        assert_eq!(HostShare::of(0, 3), 0);
    }
}

//! Claim ledger behaviour (every backend): leases, takeovers, ceilings, ownership and attempt numbering.
//! Time is injected: every call gets an explicit `now`.

use std::time::Duration;

use chrono::DateTime;
use sortie::ledger::{
    CeilingScope, Claim, ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, RenewOutcome, Scope,
    Timestamp,
};

use super::Backend;

const TTL: Duration = Duration::from_secs(600);
const WIDE_CAPS: ClaimLimits = ClaimLimits {
    global: 100,
    role: 100,
    status: None,
    host: None,
};

fn at(secs: i64) -> Timestamp {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn key(ticket: &str, role: &str) -> ClaimKey {
    ClaimKey::new("local", ticket, role)
}

fn request(key: &ClaimKey, claimer: &str) -> ClaimRequest {
    ClaimRequest {
        key: key.clone(),
        stage: "ready".into(),
        claimer_id: claimer.into(),
        run_id: format!("run-{claimer}"),
        ttl: TTL,
        limits: WIDE_CAPS,
        attempt_floor: 0,
    }
}

fn acquired(outcome: ClaimOutcome) -> Claim {
    match outcome {
        ClaimOutcome::Acquired(claim) => claim,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

pub fn first_caller_wins_and_the_loser_learns_the_holder(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    let claim = acquired(ledger.try_claim(&request(&k, "host:1:a"), at(0)).unwrap());
    assert_eq!(claim.claimer_id, "host:1:a");
    assert_eq!(claim.stage_attempt, 1);
    assert_eq!(claim.claimed_at, at(0));
    assert_eq!(claim.lease_expires_at, at(600));
    assert_eq!(claim.run_id, "run-host:1:a");

    let lost = ledger.try_claim(&request(&k, "host:2:b"), at(10)).unwrap();
    assert_eq!(
        lost,
        ClaimOutcome::Held {
            holder: "host:1:a".into(),
            lease_expires_at: at(600),
        }
    );
    assert_eq!(ledger.claims(Scope::All).unwrap(), vec![claim]);
}

pub fn the_holder_claiming_again_renews_instead_of_being_refused(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    let first = acquired(ledger.try_claim(&request(&k, "me"), at(0)).unwrap());
    let again = acquired(ledger.try_claim(&request(&k, "me"), at(300)).unwrap());
    assert_eq!(again.stage_attempt, first.stage_attempt);
    assert_eq!(again.claimed_at, at(0));
    assert_eq!(again.lease_expires_at, at(900));
    assert_eq!(ledger.last_attempt(&k).unwrap(), 1);
}

pub fn an_expired_lease_is_taken_over_with_a_higher_attempt(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "dead"), at(0)).unwrap());

    // At exactly lease_expires_at the lease is over.
    let taken = acquired(ledger.try_claim(&request(&k, "alive"), at(600)).unwrap());
    assert_eq!(taken.claimer_id, "alive");
    assert_eq!(taken.stage_attempt, 2);
    assert_eq!(taken.lease_expires_at, at(1200));

    // The old holder has lost it: it can neither renew nor release the new claim.
    assert_eq!(
        ledger.renew(&k, "dead", TTL, at(601)).unwrap(),
        RenewOutcome::Lost
    );
    assert!(!ledger.release(&k, "dead").unwrap());
    assert_eq!(ledger.claims(Scope::All).unwrap()[0].claimer_id, "alive");
}

pub fn a_live_lease_one_millisecond_before_expiry_is_still_held(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "a"), at(0)).unwrap());
    let just_before = at(600) - chrono::TimeDelta::milliseconds(1);
    assert!(matches!(
        ledger.try_claim(&request(&k, "b"), just_before).unwrap(),
        ClaimOutcome::Held { .. }
    ));
}

pub fn the_role_ceiling_counts_only_live_claims_of_that_role(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let caps = ClaimLimits {
        global: 100,
        role: 1,
        status: None,
        host: None,
    };
    let mut first = request(&key("T-1", "backend"), "a");
    first.limits = caps;
    acquired(ledger.try_claim(&first, at(0)).unwrap());

    let mut second = request(&key("T-2", "backend"), "b");
    second.limits = caps;
    assert_eq!(
        ledger.try_claim(&second, at(10)).unwrap(),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );
    // Nothing was written for the refused claim.
    assert_eq!(ledger.claims(Scope::All).unwrap().len(), 1);
    assert_eq!(ledger.last_attempt(&second.key).unwrap(), 0);

    // Another role is not limited by backend's cap.
    let mut qa = request(&key("T-2", "qa"), "b");
    qa.limits = caps;
    acquired(ledger.try_claim(&qa, at(10)).unwrap());

    // Once the first backend lease expired it no longer counts.
    acquired(ledger.try_claim(&second, at(600)).unwrap());
}

pub fn the_global_ceiling_counts_live_claims_of_this_tracker_across_roles(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let caps = ClaimLimits {
        global: 2,
        role: 10,
        status: None,
        host: None,
    };
    for (ticket, role) in [("T-1", "architect"), ("T-2", "backend")] {
        let mut req = request(&key(ticket, role), "a");
        req.limits = caps;
        acquired(ledger.try_claim(&req, at(0)).unwrap());
    }
    // Another tracker's claims do not count against this tracker's cap.
    let mut elsewhere = request(&ClaimKey::new("github:o/r", "9", "qa"), "a");
    elsewhere.limits = caps;
    acquired(ledger.try_claim(&elsewhere, at(0)).unwrap());

    let mut third = request(&key("T-3", "qa"), "a");
    third.limits = caps;
    assert_eq!(
        ledger.try_claim(&third, at(1)).unwrap(),
        ClaimOutcome::Ceiling(CeilingScope::Global)
    );
    assert!(ledger.release(&key("T-1", "architect"), "a").unwrap());
    acquired(ledger.try_claim(&third, at(2)).unwrap());
}

pub fn the_status_ceiling_applies_only_when_set_and_only_to_that_stage(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let capped = ClaimLimits {
        global: 10,
        role: 10,
        status: Some(1),
        host: None,
    };
    let mut first = request(&key("T-1", "backend"), "a");
    first.limits = capped;
    acquired(ledger.try_claim(&first, at(0)).unwrap());

    let mut same_stage = request(&key("T-2", "qa"), "a");
    same_stage.limits = capped;
    assert_eq!(
        ledger.try_claim(&same_stage, at(1)).unwrap(),
        ClaimOutcome::Ceiling(CeilingScope::Status)
    );

    let mut other_stage = request(&key("T-3", "qa"), "a");
    other_stage.limits = capped;
    other_stage.stage = "review".into();
    acquired(ledger.try_claim(&other_stage, at(1)).unwrap());

    same_stage.limits.status = None;
    acquired(ledger.try_claim(&same_stage, at(1)).unwrap());

    // Expired claims do not count against it either.
    let mut later = request(&key("T-4", "docs"), "a");
    later.limits = capped;
    acquired(ledger.try_claim(&later, at(10_000)).unwrap());
}

pub fn a_zero_cap_refuses_every_claim(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let mut req = request(&key("T-1", "backend"), "a");
    req.limits.role = 0;
    assert_eq!(
        ledger.try_claim(&req, at(0)).unwrap(),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );
}

pub fn only_the_owner_releases_but_force_release_removes_any_claim(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "owner"), at(0)).unwrap());
    assert!(!ledger.release(&k, "intruder").unwrap());
    assert_eq!(ledger.claims(Scope::All).unwrap().len(), 1);
    assert!(ledger.release(&k, "owner").unwrap());
    assert!(ledger.claims(Scope::All).unwrap().is_empty());
    assert!(!ledger.release(&k, "owner").unwrap());

    acquired(ledger.try_claim(&request(&k, "owner"), at(1)).unwrap());
    assert!(ledger.force_release(&k).unwrap());
    assert!(!ledger.force_release(&k).unwrap());
    assert!(ledger.claims(Scope::All).unwrap().is_empty());
}

pub fn renew_extends_only_for_the_holder_and_reports_a_cancel_request(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "holder"), at(0)).unwrap());

    assert_eq!(
        ledger.renew(&k, "other", TTL, at(100)).unwrap(),
        RenewOutcome::Lost
    );
    assert_eq!(
        ledger.renew(&k, "holder", TTL, at(200)).unwrap(),
        RenewOutcome::Renewed {
            lease_expires_at: at(800),
            cancel_requested: false,
        }
    );
    assert!(ledger.request_cancel(&k).unwrap());
    assert_eq!(
        ledger.renew(&k, "holder", TTL, at(300)).unwrap(),
        RenewOutcome::Renewed {
            lease_expires_at: at(900),
            cancel_requested: true,
        }
    );
    assert!(ledger.claims(Scope::All).unwrap()[0].cancel_requested);
    // The renewed lease keeps others out past the original expiry.
    assert!(matches!(
        ledger.try_claim(&request(&k, "other"), at(700)).unwrap(),
        ClaimOutcome::Held { .. }
    ));

    assert!(ledger.release(&k, "holder").unwrap());
    assert_eq!(
        ledger.renew(&k, "holder", TTL, at(400)).unwrap(),
        RenewOutcome::Lost
    );
    assert!(!ledger.request_cancel(&k).unwrap());
}

pub fn a_late_renewal_succeeds_while_nobody_has_taken_the_expired_claim(backend: &dyn Backend) {
    // A heartbeat delayed past the TTL (a suspended laptop) keeps its run if no other
    // claimer took the key meanwhile: there is still exactly one holder.
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "slow"), at(0)).unwrap());
    assert_eq!(
        ledger.renew(&k, "slow", TTL, at(900)).unwrap(),
        RenewOutcome::Renewed {
            lease_expires_at: at(1500),
            cancel_requested: false,
        }
    );
    assert!(matches!(
        ledger.try_claim(&request(&k, "other"), at(1000)).unwrap(),
        ClaimOutcome::Held { .. }
    ));
}

pub fn agent_pid_is_recorded_only_by_the_holder(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    acquired(ledger.try_claim(&request(&k, "holder"), at(0)).unwrap());
    ledger.set_agent_pid(&k, "other", Some(7)).unwrap();
    assert_eq!(ledger.claims(Scope::All).unwrap()[0].agent_pid, None);
    ledger.set_agent_pid(&k, "holder", Some(4242)).unwrap();
    assert_eq!(ledger.claims(Scope::All).unwrap()[0].agent_pid, Some(4242));
    ledger.set_agent_pid(&k, "holder", None).unwrap();
    assert_eq!(ledger.claims(Scope::All).unwrap()[0].agent_pid, None);
}

pub fn claims_lists_live_and_expired_rows_ordered_by_key(backend: &dyn Backend) {
    let ledger = backend.fresh();
    for (ticket, role, when) in [("T-2", "qa", 0), ("T-1", "qa", 1000), ("T-1", "backend", 0)] {
        acquired(
            ledger
                .try_claim(&request(&key(ticket, role), "a"), at(when))
                .unwrap(),
        );
    }
    let keys: Vec<String> = ledger
        .claims(Scope::All)
        .unwrap()
        .iter()
        .map(|c| c.key.to_string())
        .collect();
    assert_eq!(keys, ["local/T-1/backend", "local/T-1/qa", "local/T-2/qa"]);
}

pub fn attempts_grow_across_release_expiry_takeover_and_floor(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let k = key("T-1", "backend");
    let attempt_at = |claimer: &str, when: i64, floor: u32| {
        let mut req = request(&k, claimer);
        req.attempt_floor = floor;
        acquired(ledger.try_claim(&req, at(when)).unwrap()).stage_attempt
    };

    assert_eq!(attempt_at("a", 0, 0), 1);
    assert!(ledger.release(&k, "a").unwrap());
    assert_eq!(attempt_at("a", 10, 0), 2, "release does not reset attempts");
    // Expiry followed by the same claimer claiming again is a new attempt.
    assert_eq!(attempt_at("a", 10_000, 0), 3);
    // Takeover by another claimer after expiry.
    assert_eq!(attempt_at("b", 20_000, 0), 4);
    assert!(ledger.force_release(&k).unwrap());
    // A floor rebuilt from the ticket's blocks wins when it is higher ...
    assert_eq!(attempt_at("c", 20_001, 9), 9);
    assert!(ledger.release(&k, "c").unwrap());
    // ... and never drags the attempt back down when it is lower.
    assert_eq!(attempt_at("c", 20_002, 2), 10);
    assert_eq!(ledger.last_attempt(&k).unwrap(), 10);
    // Other keys have their own numbering.
    assert_eq!(ledger.last_attempt(&key("T-1", "qa")).unwrap(), 0);
}

pub fn attempts_survive_reopening_the_ledger(backend: &dyn Backend) {
    let store = backend.store();
    let k = key("T-1", "backend");
    {
        let ledger = store.open();
        acquired(ledger.try_claim(&request(&k, "a"), at(0)).unwrap());
        acquired(ledger.try_claim(&request(&k, "b"), at(700)).unwrap());
        assert!(ledger.release(&k, "b").unwrap());
    }
    let reopened = store.open();
    assert_eq!(reopened.last_attempt(&k).unwrap(), 2);
    let claim = acquired(reopened.try_claim(&request(&k, "c"), at(800)).unwrap());
    assert_eq!(claim.stage_attempt, 3);
}

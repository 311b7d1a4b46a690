//! The Postgres claim without a lock (schema version 2): each claim takes a slot of
//! 0..cap-1 per scope under a unique index, and falls back to counting under the
//! tracker's lock while rows sit at or above the cap. What that must still get right,
//! beyond the shared ledger suite: a cap lowered while more claims are live than the new
//! cap, expired rows that sit on the last slots, a late renewal of such a row, and the
//! upgrade from version 1 with claims in flight and old hosts still claiming.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sortie::ledger::{
    CeilingScope, ClaimKey, ClaimLimits, ClaimOutcome, Ledger, PostgresLedger, RenewOutcome, Scope,
};

use crate::ledger_postgres::{at, request, schema_url};

fn role_cap(role: u32) -> ClaimLimits {
    ClaimLimits {
        global: 1_000,
        role,
        status: None,
        host: None,
    }
}

fn claim(ledger: &dyn Ledger, ticket: &str, limits: ClaimLimits, when: i64) -> ClaimOutcome {
    ledger
        .try_claim(&request(ticket, "backend", "host:1:x", limits), at(when))
        .unwrap()
}

fn live(ledger: &dyn Ledger, when: i64) -> usize {
    ledger
        .claims(Scope::All)
        .unwrap()
        .iter()
        .filter(|c| c.lease_expires_at > at(when))
        .count()
}

#[test]
fn a_lowered_cap_counts_the_claims_made_under_the_larger_one() {
    let ledger = PostgresLedger::open(&schema_url("slots_lowered")).unwrap();
    for n in 0..6 {
        assert!(matches!(
            claim(&ledger, &format!("T-{n}"), role_cap(10), 0),
            ClaimOutcome::Acquired(_)
        ));
    }
    // The config now says 3: six are live, so nothing more starts until fewer than
    // three are.
    for n in 0..4 {
        assert_eq!(
            claim(&ledger, &format!("N-{n}"), role_cap(3), 1),
            ClaimOutcome::Ceiling(CeilingScope::Role),
            "with {} live",
            6 - n
        );
        let key = ClaimKey::new("local", format!("T-{n}"), "backend");
        assert!(ledger.release(&key, "host:1:x").unwrap());
    }
    // Two old claims left: exactly one new one fits.
    assert!(matches!(
        claim(&ledger, "N-a", role_cap(3), 2),
        ClaimOutcome::Acquired(_)
    ));
    assert_eq!(
        claim(&ledger, "N-b", role_cap(3), 2),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );
    assert_eq!(live(&ledger, 2), 3);
}

#[test]
fn racing_claims_under_a_lowered_cap_never_exceed_it_while_the_old_claims_drain() {
    let url = schema_url("slots_drain");
    let setup = PostgresLedger::open(&url).unwrap();
    let old: Vec<ClaimKey> = (0..6)
        .map(|n| {
            let outcome = setup
                .try_claim(
                    &request(&format!("OLD-{n}"), "backend", "old:1:x", role_cap(10)),
                    at(0),
                )
                .unwrap();
            match outcome {
                ClaimOutcome::Acquired(claim) => claim.key,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    const CAP: usize = 3;
    let stop = Arc::new(AtomicBool::new(false));
    // One sampler reads all claims in one statement (one snapshot) all along: new claims
    // may only fill what the old ones leave free of the new cap.
    let sampler = {
        let (ledger, stop) = (PostgresLedger::open(&url).unwrap(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut samples = 0;
            while !stop.load(Ordering::Relaxed) {
                let claims = ledger.claims(Scope::All).unwrap();
                let old = claims.iter().filter(|c| c.claimer_id == "old:1:x").count();
                let new = claims.len() - old;
                assert!(
                    new <= CAP.saturating_sub(old),
                    "cap {CAP} exceeded: {new} new claims beside {old} old ones: {claims:#?}"
                );
                samples += 1;
            }
            samples
        })
    };
    // Six hosts claim distinct tickets under the new cap as fast as they can and keep
    // what they get.
    let hosts: Vec<_> = (0..6)
        .map(|h| {
            let (ledger, stop) = (PostgresLedger::open(&url).unwrap(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let claimer = format!("host{h}:1:x");
                let mut acquired = 0;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let req = request(
                        &format!("H{h}-{n}"),
                        "backend",
                        &claimer,
                        role_cap(CAP as u32),
                    );
                    if let ClaimOutcome::Acquired(_) = ledger.try_claim(&req, at(1)).unwrap() {
                        acquired += 1;
                    }
                    n += 1;
                }
                acquired
            })
        })
        .collect();
    for key in &old {
        std::thread::sleep(Duration::from_millis(60));
        assert!(setup.release(key, "old:1:x").unwrap());
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let acquired: usize = hosts.into_iter().map(|h| h.join().unwrap()).sum();
    let samples = sampler.join().unwrap();
    assert!(samples > 10, "sampled {samples} times");
    assert_eq!(
        acquired, CAP,
        "once the old claims were gone, exactly the cap's worth started"
    );
    assert_eq!(live(&setup, 1), CAP);
}

#[test]
fn expired_claims_on_the_last_slots_are_kept_and_count_again_if_renewed() {
    let ledger = PostgresLedger::open(&schema_url("slots_expired")).unwrap();
    for ticket in ["A", "B"] {
        assert!(matches!(
            claim(&ledger, ticket, role_cap(2), 0),
            ClaimOutcome::Acquired(_)
        ));
    }
    // Both leases ran out (600 s): two new claims fit, and the expired rows are still
    // there, for the holder's host to reap or for a late renewal.
    for ticket in ["C", "D"] {
        assert!(matches!(
            claim(&ledger, ticket, role_cap(2), 700),
            ClaimOutcome::Acquired(_)
        ));
    }
    let tickets: Vec<String> = ledger
        .claims(Scope::All)
        .unwrap()
        .into_iter()
        .map(|c| c.key.ticket_id)
        .collect();
    assert_eq!(tickets, ["A", "B", "C", "D"]);
    assert_eq!(
        claim(&ledger, "E", role_cap(2), 700),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );

    // A's holder renews late: its run counts against the cap again.
    let a = ClaimKey::new("local", "A", "backend");
    assert!(matches!(
        ledger
            .renew(&a, "host:1:x", Duration::from_secs(600), at(710))
            .unwrap(),
        RenewOutcome::Renewed { .. }
    ));
    for ticket in ["C", "D"] {
        let key = ClaimKey::new("local", ticket, "backend");
        assert!(ledger.release(&key, "host:1:x").unwrap());
    }
    assert!(matches!(
        claim(&ledger, "E", role_cap(2), 720),
        ClaimOutcome::Acquired(_)
    ));
    assert_eq!(
        claim(&ledger, "F", role_cap(2), 720),
        ClaimOutcome::Ceiling(CeilingScope::Role),
        "A (renewed) and E are live"
    );
}

/// A claim as a host running a version-1 sortie sends it.
fn old_host_claim(client: &mut postgres::Client, ticket: &str, role_cap: i64) -> String {
    let now = at(0).timestamp_millis();
    client
        .query_one(
            "SELECT o_outcome FROM sortie_try_claim('local', $1, 'backend', 'ready', \
             'old:1:x', $2, $3, $4, $5, 1000, NULL, 0)",
            &[
                &ticket,
                &format!("run-{ticket}"),
                &now,
                &(now + 600_000),
                &role_cap,
            ],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_version_1_schema_is_upgraded_with_its_claims_counted_and_old_hosts_keep_claiming() {
    let url = schema_url("slots_upgrade");
    // The schema a version-1 sortie left: its migration and its version row.
    let mut client = crate::ledger_postgres::old_schema(&url, 1);
    for ticket in ["T-1", "T-2"] {
        assert_eq!(old_host_claim(&mut client, ticket, 2), "acquired");
    }

    let ledger = PostgresLedger::open(&url).unwrap();
    let version: i64 = client
        .query_one("SELECT version FROM sortie_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, PostgresLedger::SCHEMA_VERSION);
    assert_eq!(ledger.claims(Scope::All).unwrap().len(), 2);
    // The two claims from before the upgrade count against the cap.
    assert_eq!(
        claim(&ledger, "T-3", role_cap(2), 1),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );
    assert!(matches!(
        claim(&ledger, "T-3", role_cap(3), 1),
        ClaimOutcome::Acquired(_)
    ));
    // A host still on version 1 keeps claiming through the old signature, within the
    // same caps.
    assert_eq!(old_host_claim(&mut client, "T-4", 3), "ceiling_role");
    assert!(ledger
        .release(&ClaimKey::new("local", "T-1", "backend"), "old:1:x")
        .unwrap());
    assert_eq!(old_host_claim(&mut client, "T-4", 3), "acquired");
    assert_eq!(old_host_claim(&mut client, "T-4", 3), "acquired", "renewed");
    assert_eq!(live(&ledger, 1), 3);
}

#[test]
fn a_status_cap_set_while_claims_of_that_status_run_counts_them() {
    let ledger = PostgresLedger::open(&schema_url("slots_status")).unwrap();
    // Three runs claimed from `ready` while it had no cap of its own (no status slot).
    for n in 0..3 {
        assert!(matches!(
            claim(&ledger, &format!("T-{n}"), role_cap(10), 0),
            ClaimOutcome::Acquired(_)
        ));
    }
    let status_cap = ClaimLimits {
        status: Some(2),
        host: None,
        ..role_cap(10)
    };
    assert_eq!(
        claim(&ledger, "N-1", status_cap, 1),
        ClaimOutcome::Ceiling(CeilingScope::Status)
    );
    for n in 0..2 {
        let key = ClaimKey::new("local", format!("T-{n}"), "backend");
        assert!(ledger.release(&key, "host:1:x").unwrap());
    }
    assert!(matches!(
        claim(&ledger, "N-1", status_cap, 1),
        ClaimOutcome::Acquired(_)
    ));
    assert_eq!(
        claim(&ledger, "N-2", status_cap, 1),
        ClaimOutcome::Ceiling(CeilingScope::Status),
        "T-2 (from before the cap) and N-1 are live"
    );
}

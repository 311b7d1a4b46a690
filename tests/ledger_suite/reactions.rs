//! Reactions to pull requests (issue #32), on every backend: stored once with the
//! outbox entry that writes their block, whoever stores them and however they race.

use std::sync::{Arc, Barrier};

use chrono::DateTime;
use serde_json::json;
use sortie::ledger::{
    ClaimKey, FollowUp, OutboxEntry, OutboxState, ReactionPut, ReactionRecord, Timestamp,
};

use super::Backend;

fn at(secs: i64) -> Timestamp {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn reaction(fingerprint: &str, round: u32) -> ReactionRecord {
    ReactionRecord {
        tracker: "local".into(),
        ticket_id: "T-1".into(),
        kind: "review_comments".into(),
        fingerprint: fingerprint.into(),
        round,
        to_role: Some("backend".into()),
        pull_request: 7,
        head_sha: "abc".into(),
        handed: vec!["11".into(), "review:12".into()],
        payload: json!({"kind": "review_comments", "comments": [{"body": "rename it"}]}),
        decided_at: at(round.into()),
    }
}

fn entry(key: &str) -> OutboxEntry {
    OutboxEntry {
        idempotency_key: key.into(),
        key: ClaimKey::new("local", "T-1", "reactions"),
        stage: "qa-passed".into(),
        stage_attempt: 1,
        run_id: format!("reaction-{key}"),
        outcome: "failure".into(),
        from_status: "qa-passed".into(),
        to_status: "todo".into(),
        comment_body: "Sent back.".into(),
        state: OutboxState::Pending,
        write_attempts: 0,
        next_attempt_at: at(0),
        last_error: None,
        created_at: at(0),
        follow_up: FollowUp::Clear,
    }
}

fn put(ledger: &dyn sortie::ledger::Ledger, fingerprint: &str, round: u32) -> ReactionPut {
    ledger
        .put_reaction(
            &reaction(fingerprint, round),
            &entry(fingerprint),
            "host-a:1:n",
            std::time::Duration::from_secs(60),
            at(0),
        )
        .unwrap()
}

pub fn a_reaction_is_stored_once_with_its_outbox_entry(backend: &dyn Backend) {
    let ledger = backend.fresh();
    assert_eq!(put(&*ledger, "fp1", 1), ReactionPut::Stored);
    assert!(
        ledger.outbox_get("fp1").unwrap().is_some(),
        "its block waits in the outbox"
    );
    assert_eq!(
        put(&*ledger, "fp1", 1),
        ReactionPut::Exists,
        "same fingerprint"
    );
    assert_eq!(
        put(&*ledger, "fp-other", 1),
        ReactionPut::Exists,
        "the same round of the same kind, decided from another view"
    );
    assert_eq!(
        ledger.outbox_get("fp-other").unwrap(),
        None,
        "and nothing to write"
    );
    assert_eq!(put(&*ledger, "fp2", 2), ReactionPut::Stored);
    let stored = ledger.reactions("local", Some("T-1")).unwrap();
    assert_eq!(stored, vec![reaction("fp1", 1), reaction("fp2", 2)]);
    assert!(ledger.reactions("local", Some("T-2")).unwrap().is_empty());
    assert_eq!(ledger.reactions("local", None).unwrap().len(), 2);
    assert!(ledger.reactions("github:o/r", None).unwrap().is_empty());
}

pub fn hosts_racing_to_store_one_round_store_it_once(backend: &dyn Backend) {
    let store = backend.store();
    let hosts = 6;
    let barrier = Arc::new(Barrier::new(hosts));
    let stored: Vec<ReactionPut> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..hosts)
            .map(|i| {
                let ledger = store.open();
                let barrier = barrier.clone();
                scope.spawn(move || {
                    barrier.wait();
                    // Each host saw the pull request a little differently.
                    put(&*ledger, &format!("fp-host-{}", i % 2), 1)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        stored.iter().filter(|p| **p == ReactionPut::Stored).count(),
        1,
        "{stored:?}"
    );
    let ledger = store.open();
    assert_eq!(ledger.reactions("local", None).unwrap().len(), 1);
    let pending = ledger.outbox_pending("local").unwrap();
    assert_eq!(pending.len(), 1, "one block to write: {pending:?}");
}

/// Issue #37: the merges `sortie stats` counts are the `merged` reactions decided in the
/// window, of this tracker only; other kinds are not merges.
pub fn merges_since_lists_the_merged_reactions_of_the_window(backend: &dyn Backend) {
    use sortie::ledger::MergedPull;
    let ledger = backend.fresh();
    let store = |tracker: &str, ticket: &str, kind: &str, number: u64, when: i64| {
        let mut r = reaction(&format!("{tracker}-{ticket}-{kind}"), 0);
        (r.tracker, r.ticket_id, r.kind) = (tracker.into(), ticket.into(), kind.into());
        (r.pull_request, r.decided_at) = (number, at(when));
        let mut e = entry(&r.fingerprint);
        e.key = ClaimKey::new(tracker, ticket, "reactions");
        let put = ledger
            .put_reaction(
                &r,
                &e,
                "host-a:1:n",
                std::time::Duration::from_secs(60),
                at(0),
            )
            .unwrap();
        assert_eq!(put, ReactionPut::Stored);
    };
    store("local", "T-1", "merged", 7, 100);
    store("local", "T-2", "merged", 8, 10);
    store("local", "T-3", "ci_failure", 9, 200);
    store("local", "T-4", "merged", 10, 300);
    store("github:o/r", "T-5", "merged", 11, 400);
    let merged = ledger.merges_since("local", at(50)).unwrap();
    let merge = |ticket: &str, pull_request: u64, when: i64| MergedPull {
        ticket_id: ticket.into(),
        pull_request,
        merged_at: at(when),
    };
    assert_eq!(merged, [merge("T-1", 7, 100), merge("T-4", 10, 300)]);
}

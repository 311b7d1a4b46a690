//! Hook delivery records in the SQLite ledger (issue #8): upserts keep the first attempt's
//! time, failures are listed newest first, due retries soonest first, and a ledger written
//! before hooks existed is migrated in place.

use chrono::{DateTime, Utc};
use sortie::ledger::{HookDelivery, HookDeliveryState, Ledger, SqliteLedger};

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn record(delivery: &str, sink: &str, state: HookDeliveryState, t: i64) -> HookDelivery {
    HookDelivery {
        delivery_id: delivery.into(),
        sink_id: sink.into(),
        event: "run.finished".into(),
        payload: r#"{"ticket_id":"T-1"}"#.into(),
        state,
        attempts: 1,
        last_error: (state != HookDeliveryState::Delivered).then(|| "HTTP 500".into()),
        next_attempt_at: (state == HookDeliveryState::Failed).then(|| at(t + 10)),
        created_at: at(t),
        updated_at: at(t),
    }
}

#[test]
fn a_ledger_from_before_hooks_is_migrated_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    {
        // Schema 1 as a first sortie left it, with a claim history row in it (built
        // from migration 1 itself: dropping what later ones added misses the next one).
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(SqliteLedger::migration_sql(1).unwrap())
            .unwrap();
        conn.execute_batch(
            "INSERT INTO attempts VALUES ('local', 'T-1', 'qa', 4);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let ledger = SqliteLedger::open(&path).unwrap();
    let key = sortie::ledger::ClaimKey::new("local", "T-1", "qa");
    assert_eq!(ledger.last_attempt(&key).unwrap(), 4);
    ledger
        .record_hook_delivery(&record("d", "s", HookDeliveryState::Delivered, 0))
        .unwrap();
    assert!(ledger.hook_delivered("d", "s").unwrap());
}

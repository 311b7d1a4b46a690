//! Hook delivery records in every ledger backend (issue #8): upserts keep the first attempt's
//! time, failures are listed newest first, due retries soonest first.

use chrono::{DateTime, Utc};
use sortie::ledger::{HookDelivery, HookDeliveryState};

use super::Backend;

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

pub fn an_update_keeps_the_first_attempt_time_and_replaces_the_rest(backend: &dyn Backend) {
    let ledger = backend.fresh();
    ledger
        .record_hook_delivery(&record("d1", "s1", HookDeliveryState::Failed, 0))
        .unwrap();
    assert!(!ledger.hook_delivered("d1", "s1").unwrap());

    let mut later = record("d1", "s1", HookDeliveryState::Delivered, 60);
    later.attempts = 2;
    ledger.record_hook_delivery(&later).unwrap();

    let stored = ledger.hook_delivery("d1", "s1").unwrap().unwrap();
    assert_eq!(stored.created_at, at(0));
    assert_eq!(stored.updated_at, at(60));
    assert_eq!(
        (stored.state, stored.attempts, stored.last_error),
        (HookDeliveryState::Delivered, 2, None)
    );
    assert!(ledger.hook_delivered("d1", "s1").unwrap());
    // Keyed per sink: another hook has not received it.
    assert!(!ledger.hook_delivered("d1", "s2").unwrap());
    assert!(ledger.hook_delivery("d1", "s2").unwrap().is_none());
}

pub fn failures_list_newest_first_and_due_retries_soonest_first(backend: &dyn Backend) {
    let ledger = backend.fresh();
    ledger
        .record_hook_delivery(&record("a", "s", HookDeliveryState::Failed, 20))
        .unwrap();
    ledger
        .record_hook_delivery(&record("b", "s", HookDeliveryState::GaveUp, 30))
        .unwrap();
    ledger
        .record_hook_delivery(&record("c", "s", HookDeliveryState::Failed, 0))
        .unwrap();
    ledger
        .record_hook_delivery(&record("d", "s", HookDeliveryState::Delivered, 40))
        .unwrap();

    let failures: Vec<String> = ledger
        .hook_failures(10)
        .unwrap()
        .into_iter()
        .map(|d| d.delivery_id)
        .collect();
    assert_eq!(failures, ["b", "a", "c"]);
    assert_eq!(ledger.hook_failures(1).unwrap().len(), 1);

    let due = |t: i64| -> Vec<String> {
        ledger
            .hook_retries_due(at(t), 10)
            .unwrap()
            .into_iter()
            .map(|d| d.delivery_id)
            .collect()
    };
    assert!(due(9).is_empty());
    assert_eq!(due(10), ["c"]);
    assert_eq!(due(1000), ["c", "a"]);
    assert_eq!(ledger.hook_retries_due(at(1000), 1).unwrap().len(), 1);
}

//! Hook events and the registry in code (issue #8): payload keys, closure hooks, role and
//! outcome filters, timeouts and failing sinks that never fail the caller.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sortie::config::HookOutcome;
use sortie::hooks::{
    DeliveryStatus, Event, Handoff, HookError, HookRegistry, HookSink, Registration, RunRef,
    EVENT_NAMES, HANDOFF,
};

fn handoff(role: &str, success: bool) -> Event {
    Event::handoff(&Handoff {
        tracker: "local".into(),
        ticket_id: "T-7".into(),
        role: role.into(),
        from_status: "code-review".into(),
        to_status: if success { "done" } else { "blocked" }.into(),
        stage_attempt: 2,
        success,
        idempotency_key: format!("key-{role}-{success}"),
    })
}

fn run(role: &str) -> RunRef {
    RunRef {
        tracker: "local".into(),
        ticket_id: "T-7".into(),
        role: role.into(),
        stage: "code-review".into(),
        stage_attempt: 1,
        run_id: format!("run-{role}"),
    }
}

/// Names of the events a closure hook saw.
fn recorder(registry: &mut HookRegistry, event: &str) -> Arc<Mutex<Vec<Event>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    registry.on(event, move |e: &Event| sink.lock().unwrap().push(e.clone()));
    seen
}

#[test]
fn handoff_payload_has_exactly_the_nine_documented_keys() {
    let event = handoff("qa", true);
    let mut keys: Vec<&str> = event.payload.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "from_status",
            "handoff_event_name",
            "idempotency_key",
            "outcome",
            "role",
            "stage_attempt",
            "ticket_id",
            "to_status",
            "tracker",
        ]
    );
    assert_eq!(event.name, HANDOFF);
    assert_eq!(event.payload["handoff_event_name"], HANDOFF);
    assert_eq!(event.payload["outcome"], "success");
    assert_eq!(event.payload["stage_attempt"], 2);
    assert_eq!(handoff("qa", false).payload["outcome"], "failure");
    // The delivery id of a handoff is its idempotency key: a re-fired handoff is a replay.
    assert_eq!(event.delivery_id, "key-qa-true");
}

#[test]
fn every_event_constructor_uses_a_documented_name() {
    let r = run("qa");
    let events = [
        handoff("qa", true),
        Event::claim_acquired(&r, "host:1:abc"),
        Event::run_started(&r),
        Event::run_finished(&r, "failure", Some("agent.timeout")),
        Event::run_cancelled(&r, "lease_lost"),
        Event::claim_expired(&r, "host:1:abc"),
        Event::writeback_dropped(&r, "key", "success", "terminal"),
        Event::question_asked(&r, "qa-2-q1", "Which API?", "code-review", "key"),
    ];
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, EVENT_NAMES);
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/hooks.md"))
        .expect("docs/hooks.md");
    for event in &events {
        // Each event has a `### `name`` section whose table lists every payload key.
        let heading = format!("### `{}`", event.name);
        let start = docs
            .find(&heading)
            .unwrap_or_else(|| panic!("no section {heading}"));
        let section = &docs[start + heading.len()..];
        let section = &section[..section.find("\n#").unwrap_or(section.len())];
        for key in event.payload.keys() {
            assert!(
                section.contains(&format!("| `{key}` |")),
                "{}: key {key} undocumented",
                event.name
            );
        }
    }
    let mut ids: Vec<&str> = events.iter().map(|e| e.delivery_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        events.len(),
        "delivery ids must differ between events"
    );
    assert_eq!(events[6].payload["reason"], "terminal");
}

#[tokio::test]
async fn closure_hooks_receive_the_events_they_registered_for() {
    let mut registry = HookRegistry::new();
    let handoffs = recorder(&mut registry, HANDOFF);
    let everything = recorder(&mut registry, "*");
    let results = registry.fire(handoff("qa", true)).await;
    registry.fire(Event::run_started(&run("qa"))).await;

    assert_eq!(results.len(), 2);
    assert!(results
        .iter()
        .all(|r| r.status == DeliveryStatus::Delivered));
    let seen = handoffs.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0], handoff("qa", true));
    let all: Vec<String> = everything
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(all, [HANDOFF, "run.started"]);
}

#[tokio::test]
async fn role_and_outcome_filters_select_events() {
    let mut registry = HookRegistry::new();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = |tag: &'static str| {
        let seen = seen.clone();
        move |e: &Event| {
            seen.lock().unwrap().push(format!(
                "{tag}:{}:{}",
                e.field("role").unwrap(),
                e.field("outcome").unwrap_or_default()
            ))
        }
    };
    struct Closure<F>(F);
    #[async_trait]
    impl<F: Fn(&Event) + Send + Sync> HookSink for Closure<F> {
        async fn deliver(&self, event: &Event) -> Result<(), HookError> {
            (self.0)(event);
            Ok(())
        }
    }
    registry
        .register(Registration::new("qa-only", "*", Arc::new(Closure(log("qa")))).roles(["qa"]));
    registry.register(
        Registration::new("failures", "*", Arc::new(Closure(log("fail"))))
            .outcomes([HookOutcome::Failure]),
    );
    registry.register(
        Registration::new("backend-success", HANDOFF, Arc::new(Closure(log("bs"))))
            .roles(["backend"])
            .outcomes([HookOutcome::Success]),
    );

    for event in [
        handoff("qa", true),
        handoff("qa", false),
        handoff("backend", true),
        handoff("backend", false),
        // No `outcome` key: never passes an outcome filter.
        Event::run_started(&run("backend")),
    ] {
        registry.fire(event).await;
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "qa:qa:success",
            "qa:qa:failure",
            "fail:qa:failure",
            "bs:backend:success",
            "fail:backend:failure",
        ]
    );
}

/// A sink that never finishes.
struct Hangs;

#[async_trait]
impl HookSink for Hangs {
    async fn deliver(&self, _: &Event) -> Result<(), HookError> {
        std::future::pending().await
    }
}

/// A sink that always fails.
struct Refuses;

#[async_trait]
impl HookSink for Refuses {
    async fn deliver(&self, _: &Event) -> Result<(), HookError> {
        Err(HookError::Sink("receiver said no".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_hanging_sink_times_out_while_the_others_deliver() {
    let mut registry = HookRegistry::new();
    registry
        .register(Registration::new("hangs", "*", Arc::new(Hangs)).timeout(Duration::from_secs(5)));
    registry.add("*", Arc::new(Refuses));
    let seen = recorder(&mut registry, "*");
    registry.on("*", |_: &Event| panic!("bug in a hook"));

    let started = tokio::time::Instant::now();
    let results = registry.fire(handoff("qa", true)).await;
    let waited = started.elapsed();

    assert!(
        waited >= Duration::from_secs(5),
        "returned before the timeout: {waited:?}"
    );
    assert!(
        waited <= Duration::from_secs(6),
        "waited past the timeout and its grace: {waited:?}"
    );
    let statuses: Vec<(&str, &DeliveryStatus)> = results
        .iter()
        .map(|r| (r.sink_id.as_str(), &r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("hangs", &DeliveryStatus::TimedOut),
            ("code:*:1", &DeliveryStatus::Failed),
            ("code:*:2", &DeliveryStatus::Delivered),
            ("code:*:3", &DeliveryStatus::Failed),
        ]
    );
    assert_eq!(results[0].error.as_deref(), Some("timed out after 5s"));
    assert_eq!(results[1].error.as_deref(), Some("receiver said no"));
    assert!(results[3]
        .error
        .as_deref()
        .unwrap()
        .contains("bug in a hook"));
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn firing_with_no_matching_hook_returns_nothing() {
    let mut registry = HookRegistry::new();
    let seen = recorder(&mut registry, "claim.expired");
    assert!(registry.fire(handoff("qa", true)).await.is_empty());
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn fire_futures_can_be_spawned() {
    fn assert_send<T: Send>(_: T) {}
    let registry = HookRegistry::new();
    let ledger = sortie::ledger::SqliteLedger::open_in_memory().unwrap();
    assert_send(registry.fire(handoff("qa", true)));
    assert_send(registry.fire_recorded(&ledger, handoff("qa", true), chrono::Utc::now()));
    assert_send(registry.retry_failed(&ledger, chrono::Utc::now()));
}

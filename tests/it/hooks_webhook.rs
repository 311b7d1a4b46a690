//! Signed webhooks from config (issue #8) against a receiver on 127.0.0.1: the signature is
//! verified independently, replays deliver once, failures are recorded and retried on later
//! ticks until `max_attempts`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use sortie::config::Config;
use sortie::hooks::{DeliveryStatus, Event, Handoff, HookRegistry};
use sortie::ledger::{HookDeliveryState, Ledger, SqliteLedger};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SECRET: &str = "s3cr3t-for-tests";

/// One request as the receiver saw it (header names lower-cased).
#[derive(Debug, Clone)]
struct Received {
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// A tiny HTTP/1.1 receiver answering every request with the current `status`.
struct Receiver {
    url: String,
    status: Arc<AtomicU16>,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/sortie", listener.local_addr().unwrap());
        let status = Arc::new(AtomicU16::new(200));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (status.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (s, r) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else {
                        return;
                    };
                    r.lock().unwrap().push(request);
                    let code = s.load(Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 {code} Whatever\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Receiver {
            url,
            status,
            requests,
        }
    }

    fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    fn answer(&self, code: u16) {
        self.status.store(code, Ordering::SeqCst);
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.get("content-length")?.parse().ok()?;
    while data.len() < head_end + len {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Some(Received {
        headers,
        body: data[head_end..head_end + len].to_vec(),
    })
}

fn handoff(key: &str) -> Event {
    Event::handoff(&Handoff {
        tracker: "github:acme/app".into(),
        ticket_id: "17".into(),
        role: "qa".into(),
        from_status: "code-review".into(),
        to_status: "done".into(),
        stage_attempt: 1,
        success: true,
        idempotency_key: key.into(),
    })
}

/// A registry with one webhook hook to `url`, configured through the config loader.
fn registry(url: &str, extra: &str, secret: Option<&'static str>) -> HookRegistry {
    let text = format!(
        "tracker: {{kind: local, path: board}}\nagent: {{command: [my-agent]}}\nactive_states: [todo]\n\
         hooks:\n  - event: tracker_pipeline.handoff\n    webhook: \"{url}\"\n    secret_env: SORTIE_WEBHOOK_SECRET\n{extra}"
    );
    let config =
        Config::parse_str_with_env(&text, None, &|_| None).unwrap_or_else(|e| panic!("{e}"));
    HookRegistry::from_hooks(
        &config.hooks,
        None,
        Arc::new(move |name| {
            (name == "SORTIE_WEBHOOK_SECRET")
                .then(|| secret.map(str::to_string))
                .flatten()
        }),
    )
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-03-01T12:00:00Z")
        .unwrap()
        .into()
}

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

#[tokio::test]
async fn the_receiver_can_verify_the_signature_and_headers() {
    let receiver = Receiver::start().await;
    let hooks = registry(&receiver.url, "", Some(SECRET));
    let event = handoff("key-1");
    let results = hooks.fire(event.clone()).await;
    assert_eq!(results[0].status, DeliveryStatus::Delivered, "{results:?}");

    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.headers["content-type"], "application/json");
    assert_eq!(req.headers["x-sortie-event"], "tracker_pipeline.handoff");
    assert_eq!(req.headers["x-sortie-delivery"], "key-1");
    // Verify as a receiver would: HMAC-SHA256 of the raw body with the shared secret.
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(&req.body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(req.headers["x-sortie-signature-256"], expected);
    // And a different secret does not verify.
    let mut wrong = Hmac::<Sha256>::new_from_slice(b"other").unwrap();
    wrong.update(&req.body);
    assert_ne!(
        req.headers["x-sortie-signature-256"],
        format!("sha256={}", hex::encode(wrong.finalize().into_bytes()))
    );
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body, serde_json::Value::Object(event.payload));
}

#[tokio::test]
async fn a_missing_secret_is_a_recorded_failure_and_nothing_is_sent() {
    let receiver = Receiver::start().await;
    let hooks = registry(&receiver.url, "", None);
    let ledger = SqliteLedger::open_in_memory().unwrap();
    let results = hooks.fire_recorded(&ledger, handoff("key-2"), t0()).await;
    assert_eq!(results[0].status, DeliveryStatus::Failed);
    assert_eq!(
        results[0].error.as_deref(),
        Some("secret environment variable SORTIE_WEBHOOK_SECRET is not set")
    );
    assert!(receiver.requests().is_empty());
    let failures = ledger.hook_failures(10).unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].delivery_id, "key-2");
}

#[tokio::test]
async fn a_replayed_event_is_delivered_once() {
    let receiver = Receiver::start().await;
    let hooks = registry(&receiver.url, "", Some(SECRET));
    let ledger = SqliteLedger::open_in_memory().unwrap();

    let first = hooks.fire_recorded(&ledger, handoff("key-3"), t0()).await;
    let again = hooks
        .fire_recorded(&ledger, handoff("key-3"), t0() + secs(30))
        .await;

    assert_eq!(first[0].status, DeliveryStatus::Delivered);
    assert_eq!(again[0].status, DeliveryStatus::AlreadyDelivered);
    assert_eq!(receiver.requests().len(), 1);
    assert!(ledger.hook_delivered("key-3", &first[0].sink_id).unwrap());
    // A different event still goes out.
    hooks.fire_recorded(&ledger, handoff("key-4"), t0()).await;
    assert_eq!(receiver.requests().len(), 2);
}

#[tokio::test]
async fn a_failed_delivery_is_retried_on_a_later_tick_once_the_receiver_recovers() {
    let receiver = Receiver::start().await;
    receiver.answer(500);
    let hooks = registry(&receiver.url, "", Some(SECRET));
    let ledger = SqliteLedger::open_in_memory().unwrap();

    let results = hooks.fire_recorded(&ledger, handoff("key-5"), t0()).await;
    assert_eq!(results[0].status, DeliveryStatus::Failed);
    assert!(results[0].will_retry);
    assert_eq!(
        results[0].error.as_deref(),
        Some("receiver answered HTTP 500: no")
    );
    let failures = ledger.hook_failures(10).unwrap();
    assert_eq!(failures.len(), 1, "pipeline status shows the failing hook");
    assert_eq!(
        (failures[0].state, failures[0].attempts),
        (HookDeliveryState::Failed, 1)
    );

    receiver.answer(200);
    // Not due yet (first retry after 10 s): nothing is sent.
    assert!(hooks.retry_failed(&ledger, t0() + secs(5)).await.is_empty());
    assert_eq!(receiver.requests().len(), 1);

    let retried = hooks.retry_failed(&ledger, t0() + secs(10)).await;
    assert_eq!(retried.len(), 1);
    assert_eq!(
        (retried[0].status.clone(), retried[0].attempt),
        (DeliveryStatus::Delivered, 2)
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 2);
    // The retry is the same delivery: receivers deduplicate on this header.
    assert_eq!(requests[1].headers["x-sortie-delivery"], "key-5");
    assert_eq!(requests[0].body, requests[1].body);
    assert!(ledger.hook_failures(10).unwrap().is_empty());
    assert!(hooks
        .retry_failed(&ledger, t0() + secs(3600))
        .await
        .is_empty());
}

#[tokio::test]
async fn retries_stop_after_max_attempts() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    let hooks = registry(&receiver.url, "    max_attempts: 3\n", Some(SECRET));
    let ledger = SqliteLedger::open_in_memory().unwrap();

    let first = hooks.fire_recorded(&ledger, handoff("key-6"), t0()).await;
    assert!(first[0].will_retry);
    let second = hooks.retry_failed(&ledger, t0() + secs(10)).await;
    assert_eq!((second[0].attempt, second[0].will_retry), (2, true));
    // The second failure waits 20 s.
    assert!(hooks
        .retry_failed(&ledger, t0() + secs(29))
        .await
        .is_empty());
    let third = hooks.retry_failed(&ledger, t0() + secs(30)).await;
    assert_eq!((third[0].attempt, third[0].will_retry), (3, false));
    assert_eq!(third[0].status, DeliveryStatus::Failed);

    receiver.answer(200);
    assert!(hooks
        .retry_failed(&ledger, t0() + secs(100_000))
        .await
        .is_empty());
    let replay = hooks
        .fire_recorded(&ledger, handoff("key-6"), t0() + secs(100_000))
        .await;
    assert_eq!(replay[0].status, DeliveryStatus::GaveUp);
    assert_eq!(receiver.requests().len(), 3);
    let failures = ledger.hook_failures(10).unwrap();
    assert_eq!(
        (failures[0].state, failures[0].attempts),
        (HookDeliveryState::GaveUp, 3)
    );
    assert_eq!(
        failures[0].last_error.as_deref(),
        Some("receiver answered HTTP 503: no")
    );
}

#[tokio::test]
async fn a_removed_hook_gives_up_its_pending_retries() {
    let receiver = Receiver::start().await;
    receiver.answer(500);
    let ledger = SqliteLedger::open_in_memory().unwrap();
    registry(&receiver.url, "", Some(SECRET))
        .fire_recorded(&ledger, handoff("key-7"), t0())
        .await;
    let results = HookRegistry::new()
        .retry_failed(&ledger, t0() + secs(60))
        .await;
    assert!(results.is_empty());
    let failures = ledger.hook_failures(10).unwrap();
    assert_eq!(failures[0].state, HookDeliveryState::GaveUp);
    assert!(failures[0]
        .last_error
        .as_deref()
        .unwrap()
        .starts_with("no hook with this id is configured"));
}

#[tokio::test]
async fn a_receiver_that_never_answers_times_out() {
    // Accepts connections and reads, but never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/slow", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let hooks = registry(&url, "    timeout_seconds: 1\n", Some(SECRET));
    let started = std::time::Instant::now();
    let results = hooks.fire(handoff("key-8")).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    assert_eq!(results[0].status, DeliveryStatus::TimedOut, "{results:?}");
}

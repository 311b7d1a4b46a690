//! The `HookRegistry`: which sinks receive which events, concurrent delivery under
//! timeouts, and delivery records in the ledger (replay skipping, retries on later ticks).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use super::webhook::EnvLookup;
use super::{DeliveryResult, DeliveryStatus, Event, HookError, HookSink, ShellSink, WebhookSink};
use crate::config::{Config, HookConfig, HookEvents, HookOutcome, HookTarget};
use crate::ledger::{HookDelivery, HookDeliveryState, Ledger, Timestamp};

/// Timeout of sinks registered in code unless [`Registration::timeout`] says otherwise.
pub const DEFAULT_CODE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time a sink gets past its own timeout before the registry abandons it: a shell sink
/// enforces its timeout itself (kill, reap) and needs a moment to report it.
const BACKSTOP_GRACE: Duration = Duration::from_secs(1);
/// Failed deliveries retried per [`HookRegistry::retry_failed`] call, so one call stays short.
const RETRIES_PER_CALL: usize = 64;
/// First retry delay; doubled per failed attempt up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_secs(10);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// One sink with the events it wants and its delivery limits.
#[derive(Clone)]
pub struct Registration {
    sink_id: String,
    events: HookEvents,
    roles: Vec<String>,
    outcomes: Vec<HookOutcome>,
    timeout: Duration,
    max_attempts: u32,
    sink: Arc<dyn HookSink>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("sink_id", &self.sink_id)
            .field("events", &self.events)
            .field("roles", &self.roles)
            .field("outcomes", &self.outcomes)
            .field("timeout", &self.timeout)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// `sink` under the stable id `sink_id`, for `event` (a name, or `"*"` for every event),
    /// with the default timeout and a single attempt.
    pub fn new(sink_id: impl Into<String>, event: &str, sink: Arc<dyn HookSink>) -> Registration {
        let events = if event == "*" {
            HookEvents::All
        } else {
            HookEvents::Named(vec![event.to_string()])
        };
        Registration {
            sink_id: sink_id.into(),
            events,
            roles: Vec::new(),
            outcomes: Vec::new(),
            timeout: DEFAULT_CODE_TIMEOUT,
            max_attempts: 1,
            sink,
        }
    }

    /// Receive exactly these events.
    pub fn events(mut self, events: HookEvents) -> Registration {
        self.events = events;
        self
    }

    /// Receive only events whose `role` is one of `roles` (empty: every role).
    pub fn roles(mut self, roles: impl IntoIterator<Item = impl Into<String>>) -> Registration {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// Receive only events whose `outcome` is one of `outcomes` (empty: every event).
    pub fn outcomes(mut self, outcomes: impl IntoIterator<Item = HookOutcome>) -> Registration {
        self.outcomes = outcomes.into_iter().collect();
        self
    }

    /// Bound each delivery by `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Registration {
        self.timeout = timeout;
        self
    }

    /// Try each event up to `max_attempts` times (at least 1), retrying on later ticks.
    pub fn max_attempts(mut self, max_attempts: u32) -> Registration {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// The stable sink id delivery records are keyed by.
    pub fn sink_id(&self) -> &str {
        &self.sink_id
    }

    /// Whether `event` passes this registration's event, role and outcome filters. An event
    /// without a `role` (or `outcome`) field never passes a role (or outcome) filter.
    pub fn matches(&self, event: &Event) -> bool {
        if !self.events.includes(&event.name) {
            return false;
        }
        if !self.roles.is_empty() {
            let role = event.field("role");
            if !self.roles.iter().any(|r| Some(r) == role.as_ref()) {
                return false;
            }
        }
        if !self.outcomes.is_empty() {
            let outcome = event.field("outcome");
            if !self
                .outcomes
                .iter()
                .any(|o| Some(o.as_str()) == outcome.as_deref())
            {
                return false;
            }
        }
        true
    }
}

/// Adapts a closure to [`HookSink`].
struct ClosureSink<F>(F);

#[async_trait]
impl<F: Fn(&Event) + Send + Sync> HookSink for ClosureSink<F> {
    async fn deliver(&self, event: &Event) -> Result<(), HookError> {
        (self.0)(event);
        Ok(())
    }
}

/// The stable id of `hooks[index]`: its position plus a hash of what it selects and where
/// it delivers, so editing a hook gives it a new id (and a fresh delivery history).
pub fn config_sink_id(index: usize, hook: &HookConfig) -> String {
    let mut hasher = Sha256::new();
    match &hook.events {
        HookEvents::All => hasher.update(b"*"),
        HookEvents::Named(names) => hasher.update(names.join("\x1f").as_bytes()),
    }
    hasher.update([0x1e]);
    let kind = match &hook.target {
        HookTarget::Command { argv } => {
            hasher.update(argv.join("\x1f").as_bytes());
            "command"
        }
        HookTarget::Webhook { url, .. } => {
            hasher.update(url.as_bytes());
            "webhook"
        }
    };
    let digest = hex::encode(hasher.finalize());
    format!("hooks[{index}]:{kind}:{}", &digest[..12])
}

/// Which sinks receive which events; cheap to share behind an `Arc`.
#[derive(Debug, Clone, Default)]
pub struct HookRegistry {
    registrations: Vec<Registration>,
}

/// One delivery to make: which registration, which event, which attempt.
struct Job {
    index: usize,
    event: Arc<Event>,
    attempt: u32,
}

impl HookRegistry {
    /// An empty registry.
    pub fn new() -> HookRegistry {
        HookRegistry::default()
    }

    /// The hooks of `config`, secrets read from the process environment at delivery time,
    /// commands run in the config file's directory.
    pub fn from_config(config: &Config) -> HookRegistry {
        let dir = config.source.as_deref().and_then(Path::parent);
        HookRegistry::from_hooks(
            &config.hooks,
            dir,
            Arc::new(|name| std::env::var(name).ok()),
        )
    }

    /// The sinks for `hooks` (validated config entries): commands run in `dir` when given,
    /// webhook secrets are looked up through `env` at delivery time.
    pub fn from_hooks(hooks: &[HookConfig], dir: Option<&Path>, env: EnvLookup) -> HookRegistry {
        let mut registry = HookRegistry::new();
        for (index, hook) in hooks.iter().enumerate() {
            let sink: Arc<dyn HookSink> = match &hook.target {
                HookTarget::Command { argv } => {
                    let mut sink = ShellSink::new(argv.clone(), hook.timeout);
                    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
                        sink = sink.in_dir(dir);
                    }
                    Arc::new(sink)
                }
                HookTarget::Webhook { url, secret_env } => {
                    let mut sink = WebhookSink::new(url.clone(), hook.timeout);
                    if let Some(name) = secret_env {
                        sink = sink.with_secret_env(name.clone(), env.clone());
                    }
                    Arc::new(sink)
                }
            };
            registry.register(
                Registration::new(config_sink_id(index, hook), "*", sink)
                    .events(hook.events.clone())
                    .roles(hook.roles.clone())
                    .outcomes(hook.outcomes.clone())
                    .timeout(hook.timeout)
                    .max_attempts(hook.max_attempts),
            );
        }
        registry
    }

    /// Call `f` for every `event` (a name or `"*"`); sink id `code:<event>:<n>`, where `n`
    /// counts registrations, so ids are stable while registration order is.
    pub fn on<F>(&mut self, event: &str, f: F) -> &mut HookRegistry
    where
        F: Fn(&Event) + Send + Sync + 'static,
    {
        self.add(event, Arc::new(ClosureSink(f)))
    }

    /// Deliver every `event` (a name or `"*"`) to `sink`; sink id as for [`HookRegistry::on`].
    pub fn add(&mut self, event: &str, sink: Arc<dyn HookSink>) -> &mut HookRegistry {
        let id = format!("code:{event}:{}", self.registrations.len());
        self.register(Registration::new(id, event, sink))
    }

    /// Add a fully specified registration (filters, timeout, attempts, id of your choice).
    pub fn register(&mut self, registration: Registration) -> &mut HookRegistry {
        self.registrations.push(registration);
        self
    }

    /// The registrations, in order.
    pub fn registrations(&self) -> &[Registration] {
        &self.registrations
    }

    /// Whether nothing is registered (firing is then free).
    pub fn is_empty(&self) -> bool {
        self.registrations.is_empty()
    }

    /// Deliver `event` to every matching sink, concurrently, each under its own timeout.
    /// Never fails and never waits much past the longest matching timeout; failures are
    /// logged and returned. Nothing is recorded: see [`HookRegistry::fire_recorded`].
    pub async fn fire(&self, event: Event) -> Vec<DeliveryResult> {
        let event = Arc::new(event);
        let jobs = self.matching(&event).map(|index| Job {
            index,
            event: event.clone(),
            attempt: 1,
        });
        let jobs: Vec<Job> = jobs.collect();
        self.deliver(jobs)
            .await
            .into_iter()
            .map(|(job, result)| {
                let reg = &self.registrations[job.index];
                log_result(reg, &job.event, job.attempt, &result, false);
                to_result(reg, &job.event, job.attempt, result, false)
            })
            .collect()
    }

    /// Like [`HookRegistry::fire`], but consult and update the ledger's delivery records:
    /// sinks that already have this delivery id (or gave up on it) are skipped, each attempt
    /// is recorded, and a failure is scheduled for [`HookRegistry::retry_failed`]. A ledger
    /// error is logged and the delivery made anyway (receivers deduplicate).
    pub async fn fire_recorded(
        &self,
        ledger: &dyn Ledger,
        event: Event,
        now: Timestamp,
    ) -> Vec<DeliveryResult> {
        let event = Arc::new(event);
        let mut skipped = Vec::new();
        let mut jobs = Vec::new();
        for index in self.matching(&event) {
            let reg = &self.registrations[index];
            let known = ledger
                .hook_delivery(&event.delivery_id, &reg.sink_id)
                .unwrap_or_else(|err| {
                    tracing::warn!(sink = %reg.sink_id, delivery = %event.delivery_id, error = %err,
                        "cannot read the hook delivery record; delivering anyway");
                    None
                });
            match known {
                Some(d) if d.state == HookDeliveryState::Delivered => {
                    skipped.push((index, DeliveryStatus::AlreadyDelivered, d));
                }
                Some(d)
                    if d.state == HookDeliveryState::GaveUp || d.attempts >= reg.max_attempts =>
                {
                    skipped.push((index, DeliveryStatus::GaveUp, d));
                }
                Some(d) => jobs.push(Job {
                    index,
                    event: event.clone(),
                    attempt: d.attempts + 1,
                }),
                None => jobs.push(Job {
                    index,
                    event: event.clone(),
                    attempt: 1,
                }),
            }
        }
        let mut results = self.deliver_recorded(ledger, jobs, now).await;
        for (index, status, d) in skipped {
            results.push((
                index,
                DeliveryResult {
                    sink_id: d.sink_id,
                    event: event.name.clone(),
                    delivery_id: event.delivery_id.clone(),
                    status,
                    attempt: 0,
                    error: d.last_error,
                    will_retry: false,
                },
            ));
        }
        results.sort_by_key(|(index, _)| *index);
        results.into_iter().map(|(_, r)| r).collect()
    }

    /// Retry failed deliveries whose retry is due at `now` (at most 64 per call, all
    /// concurrently), each to the sink with the same id in this registry. A record whose sink is no longer
    /// registered, or that reached its sink's `max_attempts`, is marked given up and logged.
    pub async fn retry_failed(&self, ledger: &dyn Ledger, now: Timestamp) -> Vec<DeliveryResult> {
        let due = match ledger.hook_retries_due(now, RETRIES_PER_CALL) {
            Ok(due) => due,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read hook deliveries to retry");
                return Vec::new();
            }
        };
        let by_id: HashMap<&str, usize> = self
            .registrations
            .iter()
            .enumerate()
            .map(|(i, r)| (r.sink_id.as_str(), i))
            .collect();
        let mut jobs = Vec::new();
        for record in due {
            let Some(&index) = by_id.get(record.sink_id.as_str()) else {
                give_up(
                    ledger,
                    record,
                    "no hook with this id is configured any more",
                    now,
                );
                continue;
            };
            let event = match serde_json::from_str(&record.payload) {
                Ok(serde_json::Value::Object(payload)) => Event {
                    name: record.event.clone(),
                    delivery_id: record.delivery_id.clone(),
                    payload,
                },
                _ => {
                    give_up(
                        ledger,
                        record,
                        "the stored payload is not a JSON object",
                        now,
                    );
                    continue;
                }
            };
            if record.attempts >= self.registrations[index].max_attempts {
                give_up(ledger, record, "max_attempts reached", now);
                continue;
            }
            jobs.push(Job {
                index,
                event: Arc::new(event),
                attempt: record.attempts + 1,
            });
        }
        let delivered = self.deliver_recorded(ledger, jobs, now).await;
        delivered.into_iter().map(|(_, r)| r).collect()
    }

    /// Indices of the registrations `event` passes.
    fn matching<'a>(&'a self, event: &'a Event) -> impl Iterator<Item = usize> + 'a {
        self.registrations
            .iter()
            .enumerate()
            .filter(|(_, r)| r.matches(event))
            .map(|(i, _)| i)
    }

    /// Deliver and record each job's outcome; results keyed by registration index.
    async fn deliver_recorded(
        &self,
        ledger: &dyn Ledger,
        jobs: Vec<Job>,
        now: Timestamp,
    ) -> Vec<(usize, DeliveryResult)> {
        let mut out = Vec::new();
        for (job, result) in self.deliver(jobs).await {
            let reg = &self.registrations[job.index];
            let event = &job.event;
            let last = job.attempt >= reg.max_attempts;
            log_result(reg, event, job.attempt, &result, last);
            let record = delivery_record(reg, event, job.attempt, &result, last, now);
            if let Err(err) = ledger.record_hook_delivery(&record) {
                tracing::warn!(sink = %reg.sink_id, delivery = %event.delivery_id, error = %err,
                    "cannot record the hook delivery");
            }
            out.push((job.index, to_result(reg, event, job.attempt, result, !last)));
        }
        out
    }

    /// Run `jobs` concurrently, each under its timeout (plus a grace for sinks that enforce
    /// their own). A panicking sink is a failure. Results come back in job order.
    async fn deliver(&self, jobs: Vec<Job>) -> Vec<(Job, Result<(), HookError>)> {
        let mut set = JoinSet::new();
        let mut slot_of = HashMap::new();
        for (slot, job) in jobs.iter().enumerate() {
            let reg = &self.registrations[job.index];
            let sink = reg.sink.clone();
            let timeout = reg.timeout;
            let event = job.event.clone();
            let handle = set.spawn(async move {
                match tokio::time::timeout(timeout + BACKSTOP_GRACE, sink.deliver(&event)).await {
                    Ok(result) => result,
                    Err(_) => Err(HookError::TimedOut(timeout)),
                }
            });
            slot_of.insert(handle.id(), slot);
        }
        let mut results: Vec<Option<Result<(), HookError>>> = jobs.iter().map(|_| None).collect();
        while let Some(joined) = set.join_next_with_id().await {
            let (id, result) = match joined {
                Ok((id, result)) => (id, result),
                Err(err) => {
                    let id = err.id();
                    let message = if err.is_panic() {
                        panic_text(err.into_panic())
                    } else {
                        "the delivery task was cancelled".to_string()
                    };
                    (id, Err(HookError::Panicked(message)))
                }
            };
            if let Some(&slot) = slot_of.get(&id) {
                results[slot] = Some(result);
            }
        }
        jobs.into_iter()
            .zip(results)
            .map(|(job, result)| {
                let result = result.unwrap_or_else(|| Err(HookError::Panicked("lost".into())));
                (job, result)
            })
            .collect()
    }
}

/// The delay before retrying after `attempt` failed: `min(10 s * 2^(attempt-1), 300 s)`.
fn retry_delay(attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(1u32 << exp).min(RETRY_MAX)
}

/// The text of a panic payload.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_string())
}

fn log_result(
    reg: &Registration,
    event: &Event,
    attempt: u32,
    result: &Result<(), HookError>,
    last: bool,
) {
    match result {
        Ok(()) => tracing::debug!(sink = %reg.sink_id, event = %event.name,
            delivery = %event.delivery_id, attempt, "hook delivered"),
        Err(err) if last && reg.max_attempts > 1 => tracing::error!(sink = %reg.sink_id,
            event = %event.name, delivery = %event.delivery_id, attempt, error = %err,
            "hook delivery failed its last attempt; giving up"),
        Err(err) => tracing::warn!(sink = %reg.sink_id, event = %event.name,
            delivery = %event.delivery_id, attempt, error = %err, "hook delivery failed"),
    }
}

/// What `fire` reports for one delivery; `will_retry` when a failure is recorded for later.
fn to_result(
    reg: &Registration,
    event: &Event,
    attempt: u32,
    result: Result<(), HookError>,
    will_retry: bool,
) -> DeliveryResult {
    let (status, error) = match result {
        Ok(()) => (DeliveryStatus::Delivered, None),
        Err(err @ HookError::TimedOut(_)) => (DeliveryStatus::TimedOut, Some(err.to_string())),
        Err(err) => (DeliveryStatus::Failed, Some(err.to_string())),
    };
    DeliveryResult {
        sink_id: reg.sink_id.clone(),
        event: event.name.clone(),
        delivery_id: event.delivery_id.clone(),
        will_retry: will_retry && status != DeliveryStatus::Delivered,
        status,
        attempt,
        error,
    }
}

/// The ledger record after `attempt` ended with `result`.
fn delivery_record(
    reg: &Registration,
    event: &Event,
    attempt: u32,
    result: &Result<(), HookError>,
    last: bool,
    now: Timestamp,
) -> HookDelivery {
    let (state, last_error, next_attempt_at) = match result {
        Ok(()) => (HookDeliveryState::Delivered, None, None),
        Err(err) if last => (HookDeliveryState::GaveUp, Some(err.to_string()), None),
        Err(err) => (
            HookDeliveryState::Failed,
            Some(err.to_string()),
            Some(now + chrono::Duration::from_std(retry_delay(attempt)).unwrap_or_default()),
        ),
    };
    HookDelivery {
        delivery_id: event.delivery_id.clone(),
        sink_id: reg.sink_id.clone(),
        event: event.name.clone(),
        payload: event.body(),
        state,
        attempts: attempt,
        last_error,
        next_attempt_at,
        created_at: now,
        updated_at: now,
    }
}

/// Mark `record` given up for `why`, with a log line.
fn give_up(ledger: &dyn Ledger, mut record: HookDelivery, why: &str, now: Timestamp) {
    tracing::error!(sink = %record.sink_id, event = %record.event,
        delivery = %record.delivery_id, attempts = record.attempts, "hook delivery given up: {why}");
    record.state = HookDeliveryState::GaveUp;
    record.next_attempt_at = None;
    record.last_error = Some(match record.last_error.take() {
        Some(previous) => format!("{why} (last error: {previous})"),
        None => why.to_string(),
    });
    record.updated_at = now;
    if let Err(err) = ledger.record_hook_delivery(&record) {
        tracing::warn!(sink = %record.sink_id, error = %err, "cannot record the hook delivery");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_ceiling() {
        assert_eq!(retry_delay(1), Duration::from_secs(10));
        assert_eq!(retry_delay(2), Duration::from_secs(20));
        assert_eq!(retry_delay(6), Duration::from_secs(300));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
    }
}

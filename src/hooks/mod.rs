//! Handoff hooks: the events sortie fires, the [`HookRegistry`] that delivers them, and the
//! shell-command and signed-webhook sinks built from the config's `hooks:` section.
//!
//! Delivery never fails the caller: every sink runs concurrently under its own timeout, and
//! each outcome comes back as a [`DeliveryResult`] (and is logged). With a ledger
//! ([`HookRegistry::fire_recorded`]) deliveries are recorded per `(delivery_id, sink_id)`, a
//! replayed event skips sinks that already have it, and failures are retried by
//! [`HookRegistry::retry_failed`] on later ticks. `docs/hooks.md` is the user's guide.

mod event;
mod registry;
mod shell;
mod webhook;

use std::time::Duration;

use async_trait::async_trait;

pub use event::{
    Event, Handoff, RunRef, CLAIM_ACQUIRED, CLAIM_EXPIRED, EVENT_NAMES, HANDOFF, RUN_CANCELLED,
    RUN_FINISHED, RUN_STARTED, WRITEBACK_DROPPED,
};
pub use registry::{config_sink_id, HookRegistry, Registration, DEFAULT_CODE_TIMEOUT};
pub use shell::ShellSink;
pub use webhook::{signature, EnvLookup, WebhookSink};

/// Why one delivery to one sink failed. Callers branch on it only for display: the
/// registry records and logs every variant the same way.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The sink did not finish within its timeout (a shell hook's process group was killed).
    #[error("timed out after {}s", .0.as_secs_f64())]
    TimedOut(Duration),
    /// The hook command could not be started.
    #[error("cannot start {program}: {cause}")]
    Spawn {
        /// The program as configured.
        program: String,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// The hook command exited unsuccessfully.
    #[error("exited with {status}{}", stderr_suffix(.stderr))]
    Exited {
        /// `code 3`, or `signal 9` for a hook killed by a signal.
        status: String,
        /// The end of what it wrote to stderr.
        stderr: String,
    },
    /// The webhook receiver answered with a non-2xx status.
    #[error("receiver answered HTTP {status}{}", stderr_suffix(.body))]
    Status {
        /// HTTP status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The webhook request failed before a response (connect, TLS, I/O).
    #[error("request failed: {0}")]
    Request(reqwest::Error),
    /// The environment variable naming the webhook secret is not set.
    #[error("secret environment variable {0} is not set")]
    MissingSecret(String),
    /// The sink panicked.
    #[error("hook panicked: {0}")]
    Panicked(String),
    /// A sink registered in code failed in its own way.
    #[error("{0}")]
    Sink(Box<dyn std::error::Error + Send + Sync>),
}

fn stderr_suffix(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Somewhere an event is delivered: a shell command, a webhook, or code of an embedder.
#[async_trait]
pub trait HookSink: Send + Sync {
    /// Deliver `event` once. The registry applies the timeout; a sink that holds external
    /// resources (processes) must release them when this future is dropped.
    async fn deliver(&self, event: &Event) -> Result<(), HookError>;
}

/// How one delivery attempt to one sink went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Delivered now.
    Delivered,
    /// The ledger says this sink already has this delivery id; not sent again.
    AlreadyDelivered,
    /// The sink failed (see `error`; `will_retry` says whether a retry is scheduled).
    Failed,
    /// The sink did not finish within its timeout (a shell hook's process group was killed).
    TimedOut,
    /// Not attempted: the ledger says earlier attempts used up `max_attempts`.
    GaveUp,
}

/// The result of offering one event to one sink, for status display and tests.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryResult {
    /// The sink's stable id.
    pub sink_id: String,
    /// Event name.
    pub event: String,
    /// Event delivery id.
    pub delivery_id: String,
    /// What happened.
    pub status: DeliveryStatus,
    /// Attempt number of this delivery (1 for a first try; 0 when nothing was attempted).
    pub attempt: u32,
    /// The error text of a failure (for `AlreadyDelivered`/`GaveUp`, the recorded one).
    pub error: Option<String>,
    /// A failure recorded in the ledger for [`HookRegistry::retry_failed`] to try again.
    pub will_retry: bool,
}

impl DeliveryResult {
    /// Whether the sink has the event now (delivered now or before).
    pub fn is_delivered(&self) -> bool {
        matches!(
            self.status,
            DeliveryStatus::Delivered | DeliveryStatus::AlreadyDelivered
        )
    }
}

//! What a tick and its runs depend on: the immutable context (config, tracker, ledger,
//! templates, clock, identity, trusted authors, fault points, hooks), and where "now"
//! comes from.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

use super::faults::Faults;
use crate::agent::RoleTemplates;
use crate::config::Config;
use crate::hooks::{Event, HookRegistry, RunRef};
use crate::ledger::{Claim, Ledger};
use crate::tracker::Tracker;

/// Where "now" comes from; tests inject a fixed or stepped clock.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock, optionally shifted.
///
/// The shift exists for crash tests that drive the real binary: a test sets
/// `SORTIE_CLOCK_OFFSET_SECONDS` to make the leases of killed processes expire without
/// waiting for them. Nobody should set it in production.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock {
    offset: chrono::Duration,
}

impl SystemClock {
    /// The system clock shifted by `SORTIE_CLOCK_OFFSET_SECONDS` (default 0).
    pub fn from_env() -> Self {
        let secs = std::env::var("SORTIE_CLOCK_OFFSET_SECONDS")
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0);
        SystemClock {
            offset: chrono::Duration::seconds(secs),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }
}

/// The dependencies of a pipeline, fixed when it is built. Shared read-only by the tick
/// and every run it starts.
pub(crate) struct Context {
    /// The validated config.
    pub config: Config,
    /// The board.
    pub tracker: Arc<dyn Tracker>,
    /// Where pull requests open: the `forge:` adapter, else the tracker itself when it is
    /// a forge; `None` when neither is (opening one fails the run, `pull_request.failed`).
    pub forge: Option<Arc<dyn crate::tracker::Forge>>,
    /// The claim ledger.
    pub ledger: Arc<dyn Ledger>,
    /// Role prompt templates, loaded and checked.
    pub templates: RoleTemplates,
    /// Where "now" comes from.
    pub clock: Arc<dyn Clock>,
    /// This process's claimer id (`host:pid:nonce`).
    pub claimer_id: crate::ledger::ClaimerId,
    /// Who sortie is on the tracker (the author of its comments, `assignee: me`).
    pub identity: String,
    /// Whether tracker-native blockers hold tickets back.
    pub blockers: bool,
    /// Authors whose outcome blocks count: sortie's own identity and `trusted_authors`.
    pub trusted: HashSet<String>,
    /// Fault points of the crash-anywhere suite.
    pub faults: Faults,
    /// Hook deliveries.
    pub events: Events,
    /// Finished tickets whose workspace is removed once no run holds a claim on them.
    pub finished: FinishedTickets,
}

impl Context {
    /// The tracker's identity (ledger and idempotency keys).
    pub fn tracker_name(&self) -> &str {
        self.tracker.name()
    }
}

/// Hooks and their deliveries: the handoff awaited in the write-back, every other event
/// in the background (recorded in the ledger, so a failed delivery is retried later).
#[derive(Clone)]
pub(crate) struct Events {
    hooks: Arc<HookRegistry>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    background: Arc<Mutex<JoinSet<()>>>,
}

impl Events {
    /// Deliveries through `hooks`, recorded in `ledger`.
    pub fn new(hooks: HookRegistry, ledger: Arc<dyn Ledger>, clock: Arc<dyn Clock>) -> Self {
        Events {
            hooks: Arc::new(hooks),
            ledger,
            clock,
            background: Arc::new(Mutex::new(JoinSet::new())),
        }
    }

    /// Deliver `event` in the background.
    pub fn notify(&self, event: Event) {
        if self.hooks.is_empty() {
            return;
        }
        let (hooks, ledger, clock) = (self.hooks.clone(), self.ledger.clone(), self.clock.clone());
        self.spawn(async move {
            hooks.fire_recorded(&*ledger, event, clock.now()).await;
        });
    }

    /// Deliver `event` now and wait for every hook (the handoff: before its write-back
    /// is marked done, so a replay after a crash delivers it then).
    pub async fn deliver(&self, event: Event) {
        self.hooks
            .fire_recorded(&*self.ledger, event, self.clock.now())
            .await;
    }

    /// Retry failed deliveries that are due, in the background.
    pub fn retry_failed(&self) {
        if self.hooks.is_empty() {
            return;
        }
        let (hooks, ledger, clock) = (self.hooks.clone(), self.ledger.clone(), self.clock.clone());
        self.spawn(async move {
            hooks.retry_failed(&*ledger, clock.now()).await;
        });
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(task);
    }

    /// Wait for every background delivery started so far.
    pub async fn drain(&self) {
        let mut set =
            std::mem::take(&mut *self.background.lock().unwrap_or_else(|e| e.into_inner()));
        while set.join_next().await.is_some() {}
    }
}

/// The event reference of a claim.
pub(crate) fn run_ref(claim: &Claim) -> RunRef {
    RunRef {
        tracker: claim.key.tracker.clone(),
        ticket_id: claim.key.ticket_id.clone(),
        role: claim.key.role.clone(),
        stage: claim.stage.clone(),
        stage_attempt: claim.stage_attempt,
        run_id: claim.run_id.clone(),
    }
}

/// Tickets found finished whose workspace waits until no run holds a claim on them (a
/// run being cancelled may still be working in it).
#[derive(Debug, Default)]
pub(crate) struct FinishedTickets(Mutex<BTreeSet<String>>);

impl FinishedTickets {
    pub(crate) fn push(&self, id: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string());
    }

    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .collect()
    }
}

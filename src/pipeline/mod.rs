//! The tick: reconcile the board with the ledger, dispatch what the board asks for,
//! and write the results back.
//!
//! A tick is a function of the board and the ledger, never of an event: it does not
//! know why it runs, so running it again (from cron, after a crash, twice at once)
//! converges instead of duplicating work.

pub mod eligibility;
mod faults;
pub mod history;
mod prune;
pub mod report;
mod run;
mod writeback;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use faults::Faults;
pub use prune::PruneLine;

use self::eligibility::{candidates, stage_for_status, InFlight, LedgerSnapshot, SkipReason};
use self::history::TicketHistory;
use self::report::{CancelLine, RunLine, SkipLine, TickReport, WritebackLine};
use crate::agent::{PromptError, RoleTemplates};
use crate::config::Config;
use crate::hooks::{Event, HookRegistry, RunRef};
use crate::ledger::{
    Claim, ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, Hold, Ledger, LedgerError,
    RetryEntry, Scope,
};
use crate::tracker::{Ticket, Tracker, TrackerError};

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

/// Why a tick could not run. Agent failures are not errors: they are outcomes.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    // The causes are part of the message, not `#[source]`s: `anyhow`'s `{:#}` would
    // print them twice.
    /// The tracker could not be listed.
    #[error("tracker: {0}")]
    Tracker(TrackerError),
    /// The ledger could not be read or written.
    #[error("ledger: {0}")]
    Ledger(LedgerError),
    /// A role template is missing or invalid.
    #[error("role template: {0}")]
    Prompt(PromptError),
    /// A stage's agent program does not exist: nothing is claimed, so no ticket is
    /// failed for a problem of the machine.
    #[error("role {role}: agent program `{program}` not found{}; install it or fix `agent.command` (or the role file's `command`)", if program.contains('/') { "" } else { " on PATH" })]
    AgentNotFound {
        /// The role.
        role: String,
        /// The program as configured.
        program: String,
    },
    /// A file under the state root could not be read or written.
    #[error("{0}")]
    Io(String),
}

impl From<TrackerError> for PipelineError {
    fn from(err: TrackerError) -> Self {
        PipelineError::Tracker(err)
    }
}

impl From<LedgerError> for PipelineError {
    fn from(err: LedgerError) -> Self {
        PipelineError::Ledger(err)
    }
}

impl From<PromptError> for PipelineError {
    fn from(err: PromptError) -> Self {
        PipelineError::Prompt(err)
    }
}

/// Options of one tick.
#[derive(Debug, Clone, Copy, Default)]
pub struct TickOptions {
    /// Claim nothing, run nothing, write nothing; report what would happen.
    pub dry_run: bool,
}

/// State shared by the tick and the runs it starts.
struct Inner {
    config: Config,
    tracker: Arc<dyn Tracker>,
    ledger: Arc<dyn Ledger>,
    templates: RoleTemplates,
    clock: Arc<dyn Clock>,
    claimer_id: String,
    trusted: HashSet<String>,
    faults: Faults,
    hooks: HookRegistry,
    /// Hook deliveries of events other than the handoff, awaited at the end of the tick
    /// so they never hold up dispatch.
    background: std::sync::Mutex<JoinSet<()>>,
    /// Runs started by [`Pipeline::tick_detached`], still going or not yet collected.
    detached: std::sync::Mutex<JoinSet<RunLine>>,
    /// Runs of this pipeline whose agent may be running, by run id.
    live: std::sync::Mutex<BTreeMap<String, LiveRun>>,
    /// Set once shutdown starts: no tick claims anything after it.
    stopping: AtomicBool,
    /// Cancelled when the shutdown grace is over: every live run's agent is stopped.
    shutdown: CancellationToken,
}

/// A run this pipeline started that has not finished yet.
#[derive(Debug, Clone, Serialize)]
pub struct LiveRun {
    /// Ticket id.
    pub ticket: String,
    /// Role.
    pub role: String,
    /// Stage attempt.
    pub attempt: u32,
    /// Run id.
    pub run_id: String,
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// The agent's log.
    pub log_path: String,
}

impl Inner {
    /// Deliver `event` to its hooks in the background (recorded in the ledger, so a
    /// failed delivery is retried on later ticks).
    fn notify(self: &Arc<Self>, event: Event) {
        if self.hooks.is_empty() {
            return;
        }
        let inner = self.clone();
        let mut set = self.background.lock().unwrap_or_else(|e| e.into_inner());
        set.spawn(async move {
            let now = inner.clock.now();
            inner.hooks.fire_recorded(&*inner.ledger, event, now).await;
        });
    }

    /// The event reference of a claim.
    fn run_ref(&self, claim: &Claim) -> RunRef {
        RunRef {
            tracker: claim.key.tracker.clone(),
            ticket_id: claim.key.ticket_id.clone(),
            role: claim.key.role.clone(),
            stage: claim.stage.clone(),
            stage_attempt: claim.stage_attempt,
            run_id: claim.run_id.clone(),
        }
    }

    /// Wait for every background hook delivery started so far.
    async fn drain_background(&self) {
        let mut set =
            std::mem::take(&mut *self.background.lock().unwrap_or_else(|e| e.into_inner()));
        while set.join_next().await.is_some() {}
    }
}

/// Builds a [`Pipeline`] from code: the counterpart of a YAML config, with any
/// [`Tracker`] (including one the embedding program writes) and extra hooks.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::{Arc, Mutex};
/// use sortie::config::Config;
/// use sortie::hooks::HookRegistry;
/// use sortie::ledger::SqliteLedger;
/// use sortie::pipeline::{Pipeline, TickOptions};
/// use sortie::tracker::memory::MemoryTracker;
///
/// let state = tempfile::tempdir()?;
/// // The same pipeline a YAML file describes; here built from a string.
/// let config = Config::parse_str(
///     &format!(
///         "tracker: {{kind: local, path: unused}}\nstate_root: {}\nroles_dir: {}/roles\n\
///          agent: {{command: [\"true\"]}}\nactive_states: [todo]\nhandoff_state: review\n",
///         state.path().display(),
///         env!("CARGO_MANIFEST_DIR"),
///     ),
///     None,
/// )?;
/// // Any `Tracker` implementation: here sortie's in-memory one.
/// let tracker = Arc::new(MemoryTracker::new());
/// tracker.insert(MemoryTracker::ticket("42", "Add a login page", "todo"));
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// let mut hooks = HookRegistry::from_config(&config);
/// hooks.on("tracker_pipeline.handoff", move |event| {
///     log.lock().unwrap().push(event.payload["to_status"].as_str().unwrap_or("").to_string());
/// });
/// let ledger = Arc::new(SqliteLedger::open(&config.ledger_path())?);
/// let pipeline = Pipeline::builder(config, tracker.clone(), ledger).hooks(hooks).build().await?;
/// let report = pipeline.tick(TickOptions::default()).await?;
/// assert_eq!(report.runs[0].outcome, "success");
/// assert_eq!(tracker.snapshot("42").unwrap().status, "review");
/// assert_eq!(*seen.lock().unwrap(), ["review"]);
/// # Ok(()) }
/// ```
pub struct PipelineBuilder {
    config: Config,
    tracker: Arc<dyn Tracker>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    faults: Faults,
    hooks: Option<HookRegistry>,
}

impl PipelineBuilder {
    /// Use this clock instead of the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Use these fault points instead of `SORTIE_FAULT`.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Use this hook registry instead of the one built from `config.hooks`.
    pub fn hooks(mut self, hooks: HookRegistry) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Load and check the role templates, ask the tracker who sortie is, and bind.
    pub async fn build(self) -> Result<Pipeline, PipelineError> {
        let config = self.config;
        let templates = RoleTemplates::load(
            &config.roles_dir,
            config.stages.iter().map(|s| s.role.as_str()),
        )?;
        if let Some((role, program)) = templates.missing_programs(&config).into_iter().next() {
            return Err(PipelineError::AgentNotFound { role, program });
        }
        let identity = self.tracker.identity().await?;
        let trusted = std::iter::once(identity)
            .chain(config.trusted_authors.iter().cloned())
            .collect();
        let hooks = self
            .hooks
            .unwrap_or_else(|| HookRegistry::from_config(&config));
        let inner = Inner {
            config,
            tracker: self.tracker,
            ledger: self.ledger,
            templates,
            clock: self.clock,
            claimer_id: new_claimer_id(),
            trusted,
            faults: self.faults,
            hooks,
            background: std::sync::Mutex::new(JoinSet::new()),
            detached: std::sync::Mutex::new(JoinSet::new()),
            live: std::sync::Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        };
        Ok(Pipeline {
            inner: Arc::new(inner),
        })
    }
}

/// A configured pipeline bound to a tracker and a ledger.
pub struct Pipeline {
    inner: Arc<Inner>,
}

impl Pipeline {
    /// Bind `config` to a tracker and a ledger. Loads and checks every role template.
    pub async fn new(
        config: Config,
        tracker: Arc<dyn Tracker>,
        ledger: Arc<dyn Ledger>,
    ) -> Result<Self, PipelineError> {
        Self::builder(config, tracker, ledger).build().await
    }

    /// Start building a pipeline from code (system clock, `SORTIE_FAULT`, hooks from
    /// the config unless replaced).
    pub fn builder(
        config: Config,
        tracker: Arc<dyn Tracker>,
        ledger: Arc<dyn Ledger>,
    ) -> PipelineBuilder {
        PipelineBuilder {
            config,
            tracker,
            ledger,
            clock: Arc::new(SystemClock::from_env()),
            faults: Faults::from_env(),
            hooks: None,
        }
    }

    /// Like [`Pipeline::new`] with an injected clock and fault points.
    pub async fn with_clock(
        config: Config,
        tracker: Arc<dyn Tracker>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        faults: Faults,
    ) -> Result<Self, PipelineError> {
        Self::builder(config, tracker, ledger)
            .clock(clock)
            .faults(faults)
            .build()
            .await
    }

    /// This process's claimer id (`host:pid:random`).
    pub fn claimer_id(&self) -> &str {
        &self.inner.claimer_id
    }

    /// The configuration this pipeline runs.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The ledger this pipeline claims in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.inner.ledger
    }

    /// The tracker this pipeline reads and writes.
    pub fn tracker(&self) -> &Arc<dyn Tracker> {
        &self.inner.tracker
    }

    /// Runs started by this pipeline that have not finished, oldest first.
    pub fn live_runs(&self) -> Vec<LiveRun> {
        let live = self.inner.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut runs: Vec<LiveRun> = live.values().cloned().collect();
        runs.sort_by_key(|r| r.started_at);
        runs
    }

    /// One reconcile sweep. Returns when every run it started has finished.
    pub async fn tick(&self, opts: TickOptions) -> Result<TickReport, PipelineError> {
        self.sweep(opts, false).await
    }

    /// One reconcile sweep that returns as soon as its runs are started; they go on in
    /// the background (renewing their leases) until [`Pipeline::collect_finished`]
    /// picks up their lines or [`Pipeline::shutdown`] ends them. The report's `runs`
    /// is empty except in a dry run.
    pub async fn tick_detached(&self, opts: TickOptions) -> Result<TickReport, PipelineError> {
        self.sweep(opts, true).await
    }

    /// The lines of detached runs that have finished since the last call.
    pub fn collect_finished(&self) -> Vec<RunLine> {
        let mut set = self
            .inner
            .detached
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        while let Some(done) = set.try_join_next() {
            match done {
                Ok(line) => lines.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }
        lines
    }

    /// Stop claiming: ticks from now on dispatch nothing. Runs already going go on.
    pub fn stop_claiming(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// Stop claiming, let detached runs finish for up to `grace`, then cancel the rest
    /// (their agents are killed, their claims released, nothing written). Write-backs
    /// still pending stay in the outbox for the next start. Returns the lines of the
    /// runs that ended meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Vec<RunLine> {
        self.shutdown_until(grace, std::future::pending()).await
    }

    /// [`Pipeline::shutdown`] that also cuts the grace short when `hurry` completes.
    pub async fn shutdown_until(
        &self,
        grace: Duration,
        hurry: impl std::future::Future<Output = ()>,
    ) -> Vec<RunLine> {
        self.stop_claiming();
        let mut set = std::mem::take(
            &mut *self
                .inner
                .detached
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut lines = Vec::new();
        let drain = async {
            while let Some(done) = set.join_next().await {
                match done {
                    Ok(line) => lines.push(line),
                    Err(err) => tracing::error!(%err, "a run task panicked"),
                }
            }
        };
        tokio::select! {
            _ = tokio::time::timeout(grace, drain) => {}
            _ = hurry => {}
        }
        if !set.is_empty() {
            tracing::info!(
                runs = set.len(),
                "shutdown grace over; cancelling live runs"
            );
            self.inner.shutdown.cancel();
            while let Some(done) = set.join_next().await {
                match done {
                    Ok(line) => lines.push(line),
                    Err(err) => tracing::error!(%err, "a run task panicked"),
                }
            }
        }
        self.inner.drain_background().await;
        lines
    }

    async fn sweep(&self, opts: TickOptions, detach: bool) -> Result<TickReport, PipelineError> {
        let inner = &self.inner;
        let config = &inner.config;
        let tracker_name = inner.tracker.name().to_string();
        let started_at = inner.clock.now();
        let mut report = TickReport {
            dry_run: opts.dry_run,
            tracker: tracker_name.clone(),
            started_at,
            tickets_listed: 0,
            warnings: Vec::new(),
            replays: Vec::new(),
            cancels: Vec::new(),
            runs: Vec::new(),
            skips: Vec::new(),
        };

        // Finish what earlier runs stored but could not write, before anything new.
        if !opts.dry_run {
            self.replay_outbox(&mut report).await?;
            if !inner.hooks.is_empty() {
                let retrying = inner.clone();
                inner
                    .background
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .spawn(async move {
                        let now = retrying.clock.now();
                        retrying.hooks.retry_failed(&*retrying.ledger, now).await;
                    });
            }
        }

        let listing = inner.tracker.list(&config.pipeline_statuses()).await?;
        report.warnings = listing.warnings;
        report.tickets_listed = listing.tickets.len();
        let tickets = listing.tickets;

        let now = inner.clock.now();
        let (claims, expired): (Vec<Claim>, Vec<Claim>) = inner
            .ledger
            .claims(Scope::Tracker(&tracker_name))?
            .into_iter()
            .partition(|c| c.lease_expires_at > now);
        if !opts.dry_run {
            self.reap_orphans(&expired);
        }
        let retries = inner.ledger.retries(Scope::Tracker(&tracker_name))?;
        let holds = inner.ledger.holds(Scope::Tracker(&tracker_name))?;
        // Reconcile may clear some of these; the ones it clears belong to tickets that
        // left the status they were for, so they match no candidate below either.
        self.reconcile(&tickets, &claims, &retries, &holds, opts, &mut report)
            .await?;
        let pending_writebacks = inner
            .ledger
            .outbox_pending(&tracker_name)?
            .into_iter()
            .map(|e| (e.key.ticket_id, e.key.role))
            .collect();
        let snapshot = LedgerSnapshot {
            claims: &claims,
            retries: &retries,
            holds: &holds,
            pending_writebacks,
        };
        let (ordered, skips) = candidates(config, &tickets, &snapshot, now);
        report.skips.extend(
            skips
                .into_iter()
                .map(|s| skip_line(config, s.ticket, s.stage, s.reason)),
        );

        let mut in_flight = InFlight::from_claims(&claims, now);
        let mut runs = JoinSet::new();
        for candidate in ordered {
            if !opts.dry_run && inner.stopping.load(Ordering::SeqCst) {
                break;
            }
            let stage = &config.stages[candidate.stage];
            let ticket = candidate.ticket;
            if let Some(reason) = in_flight.ceiling(config, stage) {
                report
                    .skips
                    .push(skip_line(config, ticket, candidate.stage, reason));
                continue;
            }
            let history = match inner.tracker.comments(&ticket.id).await {
                Ok(comments) => TicketHistory::from_comments(&comments, &inner.trusted),
                Err(err) => {
                    let reason = SkipReason::TrackerError {
                        message: err.to_string(),
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                    continue;
                }
            };
            if let Some(prior) = &stage.requires_prior_role {
                if !history.has_success(prior) {
                    let reason = SkipReason::PriorRoleMissing {
                        role: prior.clone(),
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                    continue;
                }
            }
            if opts.dry_run {
                in_flight.add(&stage.role, &stage.claim_status);
                report.runs.push(RunLine {
                    ticket: ticket.id.clone(),
                    role: stage.role.clone(),
                    attempt: 0,
                    outcome: "would_run".to_string(),
                    reason_code: None,
                    from_status: ticket.status.clone(),
                    to_status: None,
                    writeback: None,
                    note: candidate.retry.then(|| "retry due".to_string()),
                    log_path: None,
                });
                continue;
            }
            let request = ClaimRequest {
                key: ClaimKey::new(&tracker_name, &ticket.id, &stage.role),
                stage: stage.claim_status.clone(),
                claimer_id: inner.claimer_id.clone(),
                run_id: new_run_id(),
                ttl: config.claim_ttl,
                limits: ClaimLimits {
                    global: config.concurrency.max_in_flight,
                    role: stage.max_in_flight,
                    status: config
                        .concurrency
                        .per_status_max_in_flight
                        .get(&stage.claim_status)
                        .copied(),
                },
                attempt_floor: history.max_attempt(&stage.role) + 1,
            };
            match inner.ledger.try_claim(&request, inner.clock.now())? {
                ClaimOutcome::Acquired(claim) => {
                    inner.notify(Event::claim_acquired(
                        &inner.run_ref(&claim),
                        &claim.claimer_id,
                    ));
                    in_flight.add(&stage.role, &stage.claim_status);
                    if let Err(err) = inner.ledger.clear_retry(&claim.key) {
                        tracing::warn!(%err, "could not clear the retry entry");
                    }
                    let task = run::run_claimed(
                        inner.clone(),
                        ticket.clone(),
                        candidate.stage,
                        claim,
                        history,
                    );
                    if detach {
                        inner
                            .detached
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .spawn(task);
                    } else {
                        runs.spawn(task);
                    }
                }
                ClaimOutcome::Held {
                    holder,
                    lease_expires_at,
                } => {
                    let reason = SkipReason::Claimed {
                        holder,
                        lease_expires_at,
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                }
                ClaimOutcome::Ceiling(scope) => {
                    let limit = match scope {
                        crate::ledger::CeilingScope::Global => config.concurrency.max_in_flight,
                        crate::ledger::CeilingScope::Role => stage.max_in_flight,
                        crate::ledger::CeilingScope::Status => config
                            .concurrency
                            .per_status_max_in_flight
                            .get(&stage.claim_status)
                            .copied()
                            .unwrap_or(0),
                    };
                    report.skips.push(skip_line(
                        config,
                        ticket,
                        candidate.stage,
                        SkipReason::CapReached { scope, limit },
                    ));
                }
            }
        }
        while let Some(done) = runs.join_next().await {
            match done {
                Ok(line) => report.runs.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }
        if !opts.dry_run {
            self.maybe_prune().await;
        }
        inner.drain_background().await;
        report.runs.sort_by(|a, b| {
            eligibility::natural_cmp(&a.ticket, &b.ticket).then(a.role.cmp(&b.role))
        });
        Ok(report)
    }

    /// Replay outbox entries that are due: the agent already ran; only writes remain.
    async fn replay_outbox(&self, report: &mut TickReport) -> Result<(), PipelineError> {
        let inner = &self.inner;
        let now = inner.clock.now();
        // An entry whose (ticket, role) is still claimed by a live lease is being written
        // by that run right now: replaying it too would race it past the "already
        // commented?" check. Its holder finishes it, or its lease expires first.
        let live: HashSet<(String, String)> = inner
            .ledger
            .claims(Scope::Tracker(inner.tracker.name()))?
            .into_iter()
            .filter(|c| c.lease_expires_at > now)
            .map(|c| (c.key.ticket_id, c.key.role))
            .collect();
        for entry in inner.ledger.outbox_pending(inner.tracker.name())? {
            if entry.next_attempt_at > now
                || live.contains(&(entry.key.ticket_id.clone(), entry.key.role.clone()))
            {
                continue;
            }
            // One writer per entry: a replay racing another tick's replay of the same
            // entry would pass the "already commented?" check too and post it twice.
            let lease = inner.config.claim_ttl;
            if !inner
                .ledger
                .outbox_take(&entry.idempotency_key, &inner.claimer_id, lease, now)?
            {
                continue;
            }
            let (ticket, role, attempt) = (
                entry.key.ticket_id.clone(),
                entry.key.role.clone(),
                entry.stage_attempt,
            );
            let idempotency_key = entry.idempotency_key.clone();
            let result = writeback::apply(inner, entry).await;
            if let Err(err) = inner
                .ledger
                .outbox_release(&idempotency_key, &inner.claimer_id)
            {
                tracing::warn!(%err, "could not release the outbox entry's write lease");
            }
            let result = result?;
            report.replays.push(WritebackLine {
                ticket,
                role,
                attempt,
                result: result.describe(),
            });
        }
        Ok(())
    }

    /// Ask the holders of claims whose ticket left its stage (or became terminal) to stop.
    /// Drop queued retries and holds of tickets that left their stage.
    async fn reconcile(
        &self,
        tickets: &[Ticket],
        claims: &[Claim],
        retries: &[RetryEntry],
        holds: &[Hold],
        opts: TickOptions,
        report: &mut TickReport,
    ) -> Result<(), PipelineError> {
        let inner = &self.inner;
        let config = &inner.config;
        let ids = claims
            .iter()
            .map(|c| &c.key.ticket_id)
            .chain(retries.iter().map(|r| &r.key.ticket_id))
            .chain(holds.iter().map(|h| &h.key.ticket_id));
        let seen = self.where_are(tickets, ids).await;
        let at = |id: &str| seen.get(id).cloned().unwrap_or(Whereabouts::Unknown);

        for claim in claims {
            let Some(stage) = config.stages.iter().find(|s| s.role == claim.key.role) else {
                continue;
            };
            let reason = match at(&claim.key.ticket_id) {
                Whereabouts::Unknown => None,
                Whereabouts::Gone => Some("ticket no longer exists".to_string()),
                Whereabouts::Status { status, closed } if closed || config.is_terminal(&status) => {
                    Some(format!("ticket is terminal ({status})"))
                }
                Whereabouts::Status { status, .. }
                    if !stage.owned_statuses().any(|s| s == status) =>
                {
                    Some(format!("ticket moved to {status}"))
                }
                Whereabouts::Status { .. } => None,
            };
            let Some(reason) = reason else { continue };
            if claim.cancel_requested {
                continue;
            }
            if !opts.dry_run {
                inner.ledger.request_cancel(&claim.key)?;
            }
            report.cancels.push(CancelLine {
                ticket: claim.key.ticket_id.clone(),
                role: claim.key.role.clone(),
                holder: claim.claimer_id.clone(),
                reason,
            });
        }
        if opts.dry_run {
            return Ok(());
        }
        // A retry belongs to its stage, a hold to its status: a ticket that left them
        // drops them. A ticket whose whereabouts are unknown keeps both.
        for retry in retries {
            let left = match at(&retry.key.ticket_id) {
                Whereabouts::Unknown => false,
                Whereabouts::Gone => true,
                Whereabouts::Status { status, .. } => {
                    stage_for_status(config, &status) != stage_for_status(config, &retry.stage)
                }
            };
            if left {
                inner.ledger.clear_retry(&retry.key)?;
            }
        }
        for hold in holds {
            let left = match at(&hold.key.ticket_id) {
                Whereabouts::Unknown => false,
                Whereabouts::Gone => true,
                Whereabouts::Status { status, .. } => status != hold.status,
            };
            if left {
                inner.ledger.clear_hold(&hold.key)?;
            }
        }
        Ok(())
    }

    /// Clear away claims whose holder stopped renewing (a crashed tick): kill the agent
    /// it left running on this host, so a ticket never has two agents at once, then
    /// delete the row. The delete names the dead holder, so a claim someone has taken
    /// over meanwhile is left alone.
    fn reap_orphans(&self, expired: &[Claim]) {
        let host = claimer_host(&self.inner.claimer_id);
        for claim in expired {
            if claim.agent_pid.is_some() && claimer_host(&claim.claimer_id) == host {
                let killed = crate::agent::reap_run(&claim.run_id);
                if killed > 0 {
                    tracing::warn!(ticket = %claim.key.ticket_id, role = %claim.key.role, killed, "reaped the agent of a crashed run");
                }
            }
            self.inner.notify(Event::claim_expired(
                &self.inner.run_ref(claim),
                &claim.claimer_id,
            ));
            if let Err(err) = self.inner.ledger.release(&claim.key, &claim.claimer_id) {
                tracing::warn!(%err, "could not delete an expired claim");
            }
        }
    }

    /// Where each of `ids` is: from the listing, or, for ids the listing lacks, from a
    /// re-read of the ticket. A listing can come back short (a dropped page, a ticket
    /// mid-edit), and absence from it alone must never cancel a run or clear a hold.
    async fn where_are<'a>(
        &self,
        tickets: &[Ticket],
        ids: impl Iterator<Item = &'a String>,
    ) -> HashMap<String, Whereabouts> {
        let by_id: HashMap<&str, &Ticket> = tickets.iter().map(|t| (t.id.as_str(), t)).collect();
        let mut seen = HashMap::new();
        for id in ids {
            if seen.contains_key(id.as_str()) {
                continue;
            }
            let place = match by_id.get(id.as_str()) {
                Some(t) => Whereabouts::Status {
                    status: t.status.clone(),
                    closed: t.closed,
                },
                None => match self.inner.tracker.get(id).await {
                    Ok(t) => Whereabouts::Status {
                        status: t.status,
                        closed: t.closed,
                    },
                    Err(TrackerError::NotFound(_)) => Whereabouts::Gone,
                    Err(err) => {
                        tracing::warn!(ticket = %id, error = %err, "cannot tell where the ticket is; leaving its claim, retry and hold alone");
                        Whereabouts::Unknown
                    }
                },
            };
            seen.insert(id.clone(), place);
        }
        seen
    }
}

/// Where a ticket is, as far as this tick can tell.
#[derive(Debug, Clone)]
enum Whereabouts {
    /// In this status (and closed or not).
    Status { status: String, closed: bool },
    /// The tracker says it does not exist.
    Gone,
    /// The tracker could not be asked.
    Unknown,
}

fn skip_line(config: &Config, ticket: &Ticket, stage: usize, reason: SkipReason) -> SkipLine {
    SkipLine {
        ticket: ticket.id.clone(),
        role: config.stages[stage].role.clone(),
        status: ticket.status.clone(),
        reason,
    }
}

/// The host part of a claimer id (`host:pid:nonce`).
fn claimer_host(claimer_id: &str) -> &str {
    claimer_id.rsplitn(3, ':').nth(2).unwrap_or("")
}

fn new_claimer_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".to_string());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &nonce[..8])
}

fn new_run_id() -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("r{}", &nonce[..16])
}

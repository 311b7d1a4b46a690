//! The tick: observe the board and the ledger, reconcile what runs with where tickets
//! are, plan what to dispatch, and apply the plan (claim, run, write back).
//!
//! A tick is a function of the board and the ledger, never of an event: it does not
//! know why it runs, so running it again (from cron, after a crash, twice at once)
//! converges instead of duplicating work.
//!
//! | step | module | I/O |
//! |---|---|---|
//! | observe | `observe` | one listing, one ledger snapshot, re-reads of missing tickets |
//! | reconcile | `reconcile` (decisions in `decide::placement`) | cancel requests, dropped retries and holds |
//! | plan | `decide::plan` (with `eligibility`, `caps`) | none; the tick reads the histories the plan asks for |
//! | apply | `run` (decisions in `decide::outcome`), `writeback` | claims, agents, outbox, tracker writes |

mod branch;
mod claimer;
mod context;
pub mod decide;
mod faults;
pub mod history;
mod lease;
mod observe;
mod prune;
mod recheck;
mod reconcile;
pub mod report;
mod run;
mod supervisor;
mod writeback;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

pub use context::{Clock, SystemClock};
pub use decide::eligibility;
pub use faults::Faults;
pub use prune::{PruneLine, MAX_READS_PER_SWEEP};
pub use run::CANCEL_POLL;
pub use supervisor::LiveRun;

use self::context::{run_ref, Context, Events};
use self::decide::caps::Caps;
use self::decide::eligibility::{natural_cmp, SkipReason};
use self::decide::plan::{Facts, Planner};
use self::history::TicketHistory;
use self::observe::Observation;
use self::report::{RunLine, SkipLine, TickReport, WritebackLine};
use self::supervisor::Supervisor;
use crate::agent::{PromptError, RoleTemplates};
use crate::config::Config;
use crate::hooks::{Event, HookRegistry};
use crate::ledger::{ClaimKey, ClaimOutcome, ClaimRequest, Ledger, LedgerError};
use crate::tracker::{Ticket, Tracker, TrackerError};

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

impl PipelineError {
    /// Whether the same build or tick may succeed later without anyone editing
    /// anything (the tracker or the ledger was unreachable), as opposed to a problem of
    /// the config, the role files or the machine that a person must fix.
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Tracker(err) => {
                err.is_retryable() || matches!(err, TrackerError::NotFound(_))
            }
            PipelineError::Ledger(_) | PipelineError::Io(_) => true,
            PipelineError::Prompt(_) | PipelineError::AgentNotFound { .. } => false,
        }
    }
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
    forge: Option<Arc<dyn crate::tracker::Forge>>,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    faults: Faults,
    hooks: Option<HookRegistry>,
    require_agents: bool,
    run_ended: Option<Arc<tokio::sync::Notify>>,
}

impl PipelineBuilder {
    /// Use this clock instead of the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Open pull requests on `forge` instead of the one `config.forge` names (or, without
    /// one, the tracker).
    pub fn forge(mut self, forge: Arc<dyn crate::tracker::Forge>) -> Self {
        self.forge = Some(forge);
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

    /// Whether a missing agent program refuses the build (default yes). A dry run
    /// starts no agent, so it builds without them and warns instead
    /// ([`Pipeline::missing_agents`]).
    pub fn require_agents(mut self, require: bool) -> Self {
        self.require_agents = require;
        self
    }

    /// Notify `notify` each time a run ends (a daemon shares one across the pipelines of
    /// successive configs, and with its refresh requests, so they coalesce).
    pub fn run_ended(mut self, notify: Arc<tokio::sync::Notify>) -> Self {
        self.run_ended = Some(notify);
        self
    }

    /// Load and check the role templates, ask the tracker who sortie is, open the
    /// `forge:` (reading its token), and bind.
    pub async fn build(self) -> Result<Pipeline, PipelineError> {
        let config = self.config;
        let templates = RoleTemplates::for_config(&config)?;
        if self.require_agents {
            if let Some((role, program)) = templates.missing_programs(&config).into_iter().next() {
                return Err(PipelineError::AgentNotFound { role, program });
            }
        }
        let identity = self.tracker.identity().await?;
        let forge = match self.forge {
            Some(forge) => Some(forge),
            None => crate::tracker::open_forge(&config)?.or_else(|| self.tracker.clone().forge()),
        };
        let trusted = std::iter::once(identity.clone())
            .chain(config.trusted_authors.iter().cloned())
            .collect();
        let hooks = self
            .hooks
            .unwrap_or_else(|| HookRegistry::from_config(&config));
        let events = Events::new(hooks, self.ledger.clone(), self.clock.clone());
        let blockers = config
            .blockers
            .enabled
            .unwrap_or(self.tracker.capabilities().blockers);
        let ctx = Context {
            config,
            tracker: self.tracker,
            forge,
            ledger: self.ledger,
            templates,
            clock: self.clock,
            claimer_id: crate::ledger::claimer_id(),
            identity,
            blockers,
            trusted,
            faults: self.faults,
            events,
            finished: Default::default(),
        };
        let supervisor = match self.run_ended {
            Some(notify) => Supervisor::notifying(notify),
            None => Supervisor::default(),
        };
        Ok(Pipeline {
            ctx: Arc::new(ctx),
            supervisor: Arc::new(supervisor),
        })
    }
}

/// A configured pipeline bound to a tracker and a ledger.
pub struct Pipeline {
    ctx: Arc<Context>,
    supervisor: Arc<Supervisor>,
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
            forge: None,
            ledger,
            clock: Arc::new(SystemClock::from_env()),
            faults: Faults::from_env(),
            hooks: None,
            require_agents: true,
            run_ended: None,
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
        &self.ctx.claimer_id
    }

    /// The configuration this pipeline runs.
    pub fn config(&self) -> &Config {
        &self.ctx.config
    }

    /// The ledger this pipeline claims in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ctx.ledger
    }

    /// The tracker this pipeline reads and writes.
    pub fn tracker(&self) -> &Arc<dyn Tracker> {
        &self.ctx.tracker
    }

    /// `(role, program)` of every stage whose agent program is not installed.
    pub fn missing_agents(&self) -> Vec<(String, String)> {
        self.ctx.templates.missing_programs(&self.ctx.config)
    }

    /// Runs started by this pipeline that have not finished, oldest first.
    pub fn live_runs(&self) -> Vec<LiveRun> {
        self.supervisor.live()
    }

    /// Notified each time a run of this pipeline ends (its write-back done or given
    /// up): the daemon ticks again at once, so the freed slot and the ticket handed to
    /// the next stage do not wait for the next poll.
    pub fn run_ended(&self) -> Arc<tokio::sync::Notify> {
        self.supervisor.run_ended()
    }

    /// One tick. Returns when every run it started has finished.
    pub async fn tick(&self, opts: TickOptions) -> Result<TickReport, PipelineError> {
        self.sweep(opts, false).await
    }

    /// One tick that returns as soon as its runs are started; they go on in the
    /// background (renewing their leases) until [`Pipeline::collect_finished`] picks up
    /// their lines or [`Pipeline::shutdown`] ends them. The report's `runs` is empty
    /// except in a dry run.
    pub async fn tick_detached(&self, opts: TickOptions) -> Result<TickReport, PipelineError> {
        self.sweep(opts, true).await
    }

    /// The lines of detached runs that have finished since the last call.
    pub fn collect_finished(&self) -> Vec<RunLine> {
        self.supervisor.collect_finished()
    }

    /// Stop claiming: ticks from now on dispatch nothing. Runs already going go on.
    pub fn stop_claiming(&self) {
        self.supervisor.stop_claiming();
    }

    /// Stop every run now: agents are stopped (TERM, then KILL), nothing is written on
    /// their tickets, tickets sortie moved to an in-progress status go back to their
    /// claim status, claims are released. An operator's interruption is not a failed
    /// attempt. Their lines come back from the tick (or the drain) that waits for them.
    pub fn interrupt(&self) {
        self.supervisor.stop_claiming();
        self.supervisor.cancel_all();
    }

    /// Stop claiming, let detached runs finish for up to `grace`, then cancel the rest
    /// (as [`Pipeline::interrupt`]). Write-backs still pending stay in the outbox for the
    /// next start. Returns the lines of the runs that ended meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Vec<RunLine> {
        self.shutdown_until(grace, std::future::pending()).await
    }

    /// [`Pipeline::shutdown`] that also cuts the grace short when `hurry` completes.
    pub async fn shutdown_until(
        &self,
        grace: Duration,
        hurry: impl std::future::Future<Output = ()>,
    ) -> Vec<RunLine> {
        let lines = self.supervisor.drain(grace, hurry).await;
        self.ctx.events.drain().await;
        lines
    }

    /// observe -> reconcile -> plan -> apply.
    async fn sweep(&self, opts: TickOptions, detach: bool) -> Result<TickReport, PipelineError> {
        let ctx = &self.ctx;
        let mut report = TickReport {
            dry_run: opts.dry_run,
            tracker: ctx.tracker_name().to_string(),
            started_at: ctx.clock.now(),
            tickets_listed: 0,
            warnings: Vec::new(),
            replays: Vec::new(),
            cancels: Vec::new(),
            runs: Vec::new(),
            skips: Vec::new(),
            unclaimed_statuses: Default::default(),
            cap_waits: Vec::new(),
        };

        // Finish what earlier runs stored but could not write, before anything new.
        if !opts.dry_run {
            self.replay_outbox(&mut report).await?;
            ctx.events.retry_failed();
            prune::remove_waiting(ctx).await;
        }

        let obs = observe::observe(ctx).await?;
        report.tickets_listed = obs.tickets.len();
        report.warnings = obs.warnings.clone();
        report.unclaimed_statuses = obs.unclaimed_statuses.clone();
        if !opts.dry_run {
            reconcile::reap(ctx, &obs.expired);
        }
        report.cancels = reconcile::reconcile(ctx, &obs, opts.dry_run).await?;

        let (planner, reads) = self.read_for_plan(&obs, opts.dry_run).await;
        let plan = planner.finish(&reads.facts(ctx));
        let histories = reads.histories;
        report.skips = plan
            .skips
            .iter()
            .map(|s| skip_line(&ctx.config, s.ticket, s.stage, s.reason.clone()))
            .collect();

        if opts.dry_run {
            report.runs = plan
                .dispatches
                .iter()
                .map(|d| RunLine {
                    ticket: d.ticket.id.clone(),
                    role: ctx.config.stages[d.stage].role.clone(),
                    attempt: 0,
                    outcome: "would_run".to_string(),
                    reason_code: None,
                    from_status: d.ticket.status.clone(),
                    to_status: None,
                    writeback: None,
                    note: d.retry.then(|| "retry due".to_string()),
                    log_path: None,
                    duration_seconds: None,
                    route: d
                        .route
                        .map(|i| ctx.config.stages[d.stage].routes[i].label(i)),
                    cancel_reason: None,
                    ledger_error: None,
                })
                .collect();
            report.cap_waits = report::cap_waits(&ctx.config, &report.skips);
            return Ok(report);
        }

        let mut runs = JoinSet::new();
        for dispatch in &plan.dispatches {
            if self.supervisor.is_stopping() {
                break;
            }
            let stage = &ctx.config.stages[dispatch.stage];
            let ticket = dispatch.ticket;
            let request = ClaimRequest {
                key: ClaimKey::new(ctx.tracker_name(), &ticket.id, &stage.role),
                stage: stage.claim_status.clone(),
                claimer_id: ctx.claimer_id.clone(),
                run_id: new_run_id(),
                ttl: ctx.config.claim_ttl,
                limits: dispatch.limits,
                attempt_floor: dispatch.attempt_floor,
            };
            let reason = match ctx.ledger.try_claim(&request, ctx.clock.now())? {
                ClaimOutcome::Acquired(claim) => {
                    // The listing may be stale by now: another host may have run this
                    // stage and released the key since (one comments read, claims only).
                    let history = match recheck::recheck(
                        ctx,
                        ticket,
                        stage,
                        histories.get(&ticket.id),
                    )
                    .await
                    {
                        recheck::Recheck::Current(history) => history,
                        recheck::Recheck::Stale(reason) => {
                            tracing::info!(ticket = %ticket.id, role = %stage.role, %reason, "claim given back");
                            if let Err(err) = ctx.ledger.release(&claim.key, &claim.claimer_id) {
                                tracing::warn!(%err, "could not release claim; it will expire");
                            }
                            report.skips.push(skip_line(
                                &ctx.config,
                                ticket,
                                dispatch.stage,
                                reason,
                            ));
                            continue;
                        }
                    };
                    ctx.events
                        .notify(Event::claim_acquired(&run_ref(&claim), &claim.claimer_id));
                    if let Err(err) = ctx.ledger.clear_retry(&claim.key) {
                        tracing::warn!(%err, "could not clear the retry entry");
                    }
                    let task = run::run_claimed(
                        ctx.clone(),
                        self.supervisor.clone(),
                        ticket.clone(),
                        dispatch.stage,
                        claim,
                        history,
                    );
                    if detach {
                        self.supervisor.detach(task);
                    } else {
                        runs.spawn(task);
                    }
                    continue;
                }
                ClaimOutcome::Held {
                    holder,
                    lease_expires_at,
                } => SkipReason::Claimed {
                    holder,
                    lease_expires_at,
                },
                ClaimOutcome::Ceiling(scope) => {
                    Caps::from_claims(&ctx.config, &[], obs.now).reason(stage, scope)
                }
            };
            report
                .skips
                .push(skip_line(&ctx.config, ticket, dispatch.stage, reason));
        }
        while let Some(done) = runs.join_next().await {
            match done {
                Ok(line) => report.runs.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }
        report.cap_waits = report::cap_waits(&ctx.config, &report.skips);
        prune::remove_waiting(ctx).await;
        self.maybe_prune().await;
        ctx.events.drain().await;
        report
            .runs
            .sort_by(|a, b| natural_cmp(&a.ticket, &b.ticket).then(a.role.cmp(&b.role)));
        Ok(report)
    }

    /// Read the histories and blockers the plan asks for until it asks for none: the
    /// comments and the blockers of a ticket are read at most once per tick. A ticket
    /// whose comments cannot be read is kept out of the plan for this tick, with the
    /// reason; so is one whose blockers could not be read, or whose read did not fit in
    /// `tracker.blockers.max_reads_per_tick` (the tickets tried least recently go first,
    /// whether that try succeeded or not, so reads rotate fairly across ticks).
    async fn read_for_plan<'t>(
        &self,
        obs: &'t Observation,
        dry_run: bool,
    ) -> (Planner<'t, '_>, Reads) {
        let ctx = &self.ctx;
        let mut reads = Reads::default();
        let mut budget = ctx.config.blockers.max_reads_per_tick as usize;
        let mut reserved: Option<HashSet<String>> = None;
        // The candidates are ordered once; each round walks on from where the last one
        // had to stop (issue #29).
        let mut planner = Planner::new(
            &ctx.config,
            &obs.tickets,
            &obs.ledger,
            &ctx.identity,
            obs.now,
        );
        loop {
            let needs = planner.round_reading_ahead(&reads.facts(ctx), ctx.tracker.read_ahead());
            if needs.is_empty() {
                return (planner, reads);
            }
            let needed: Vec<String> = needs.history.iter().map(|s| s.to_string()).collect();
            let needed_blockers: Vec<String> =
                needs.blockers.iter().map(|s| s.to_string()).collect();
            let must = needed.len();
            let mut batch = needed;
            batch.extend(needs.ahead.iter().map(|s| s.to_string()));
            let read = ctx.tracker.comments_of(&batch).await;
            for (i, (id, comments)) in batch.into_iter().zip(read).enumerate() {
                match comments {
                    Ok(comments) => {
                        reads
                            .histories
                            .insert(id, TicketHistory::from_comments(&comments, &ctx.trusted));
                    }
                    // A read ahead of need that failed is no fact about the plan: the
                    // ticket is read again if the plan comes to need it.
                    Err(err) if i < must => {
                        reads.unreadable.insert(id, err.to_string());
                    }
                    Err(_) => {}
                }
            }
            if needed_blockers.is_empty() {
                continue;
            }
            // The reads go first to the tickets whose blockers were tried longest ago
            // (never tried first), among every ticket that may need them this tick:
            // those keep a reservation, and only spare reads go to others.
            let reserved = reserved.get_or_insert_with(|| {
                let checked: HashMap<String, chrono::DateTime<chrono::Utc>> = ctx
                    .ledger
                    .blocker_checks(ctx.tracker_name())
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                let mut potential: Vec<&Ticket> = obs
                    .tickets
                    .iter()
                    .filter(|t| {
                        t.blocked_by.is_none()
                            && !t.closed
                            && !ctx.config.is_terminal(&t.status)
                            && eligibility::stage_for_status(&ctx.config, &t.status).is_some()
                    })
                    .collect();
                potential.sort_by_key(|t| checked.get(&t.id).copied());
                potential
                    .into_iter()
                    .take(budget)
                    .map(|t| t.id.clone())
                    .collect::<HashSet<String>>()
            });
            for id in needed_blockers {
                if !ctx.tracker.capabilities().blockers {
                    // The tracker found it has no blockers to read (a GitHub server
                    // without issue dependencies): free, and as if blockers were off.
                    reads.blockers.insert(id, Ok(Vec::new()));
                    continue;
                }
                let mine = reserved.remove(&id);
                if !mine && budget <= reserved.len() {
                    let max = ctx.config.blockers.max_reads_per_tick;
                    reads.blockers.insert(
                        id,
                        Err(format!(
                            "{max} blocker reads per tick used up (tracker.blockers.max_reads_per_tick); read on a later tick"
                        )),
                    );
                    continue;
                }
                budget -= 1;
                let read = ctx.tracker.blockers(&id).await.map_err(|e| e.to_string());
                // Failed reads are recorded too: the rotation is by the last try, so a
                // ticket whose read keeps failing takes its turn and no more.
                if !dry_run {
                    if let Err(err) =
                        ctx.ledger
                            .record_blocker_check(ctx.tracker_name(), &id, ctx.clock.now())
                    {
                        tracing::warn!(%err, "could not record the blocker read");
                    }
                }
                reads.blockers.insert(id, read);
            }
        }
    }

    /// Replay outbox entries that are due: the agent already ran; only writes remain.
    async fn replay_outbox(&self, report: &mut TickReport) -> Result<(), PipelineError> {
        let ctx = &self.ctx;
        let now = ctx.clock.now();
        let snapshot = ctx.ledger.snapshot(ctx.tracker_name())?;
        // An entry whose (ticket, role) is still claimed by a live lease is being written
        // by that run right now: its holder finishes it, or its lease expires first.
        let live: HashSet<(&str, &str)> = snapshot
            .claims
            .iter()
            .filter(|c| c.lease_expires_at > now)
            .map(|c| (c.key.ticket_id.as_str(), c.key.role.as_str()))
            .collect();
        for entry in &snapshot.outbox_pending {
            if entry.next_attempt_at > now
                || live.contains(&(entry.key.ticket_id.as_str(), entry.key.role.as_str()))
            {
                continue;
            }
            // One writer per entry: a replay racing another tick's replay of the same
            // entry would pass the "already commented?" check too and post it twice.
            if !ctx.ledger.outbox_take(
                &entry.idempotency_key,
                &ctx.claimer_id,
                ctx.config.claim_ttl,
                now,
            )? {
                continue;
            }
            // Re-read under the lease: another writer may have finished it meanwhile.
            let Some(entry) = ctx.ledger.outbox_get(&entry.idempotency_key)? else {
                continue;
            };
            if !matches!(
                entry.state,
                crate::ledger::OutboxState::Pending | crate::ledger::OutboxState::CommentPosted
            ) {
                ctx.ledger
                    .outbox_release(&entry.idempotency_key, &ctx.claimer_id)?;
                continue;
            }
            let (ticket, role, attempt, key) = (
                entry.key.ticket_id.clone(),
                entry.key.role.clone(),
                entry.stage_attempt,
                entry.idempotency_key.clone(),
            );
            let result = writeback::apply(ctx, entry).await;
            if let Err(err) = ctx.ledger.outbox_release(&key, &ctx.claimer_id) {
                tracing::warn!(%err, "could not release the outbox entry's write lease");
            }
            report.replays.push(WritebackLine {
                ticket,
                role,
                attempt,
                result: result?.describe(),
            });
        }
        Ok(())
    }
}

/// Blockers read this tick, by ticket id: the list, or why it could not be read.
type BlockerReads = HashMap<String, Result<Vec<crate::tracker::Blocker>, String>>;

/// What a tick read for its plan: histories, unreadable comments, blockers.
#[derive(Default)]
struct Reads {
    histories: HashMap<String, TicketHistory>,
    unreadable: HashMap<String, String>,
    blockers: BlockerReads,
}

impl Reads {
    /// These reads as the plan's facts.
    fn facts<'a>(&'a self, ctx: &'a Context) -> Facts<'a> {
        Facts {
            config: &ctx.config,
            identity: &ctx.identity,
            blockers: ctx.blockers,
            histories: &self.histories,
            unreadable: &self.unreadable,
            blockers_read: &self.blockers,
        }
    }
}

fn skip_line(config: &Config, ticket: &Ticket, stage: usize, reason: SkipReason) -> SkipLine {
    SkipLine {
        ticket: ticket.id.clone(),
        role: config.stages[stage].role.clone(),
        status: ticket.status.clone(),
        reason,
    }
}

fn new_run_id() -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("r{}", &nonce[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::SqliteLedger;
    use crate::tracker::memory::MemoryTracker;

    /// Issue #29: on a board where 3,000 candidates of one stage (one slot) wait
    /// without the prior role's block, a dry-run tick took 2.5 s on 10,000 tickets,
    /// because every round of history reads planned the whole board again (3,000
    /// rounds of 3,000 verdicts, and a sort each). The tick's planning work must grow
    /// with the board, not with its square.
    #[tokio::test(flavor = "current_thread")]
    async fn a_tick_whose_candidates_all_wait_for_the_prior_role_plans_in_linear_work() {
        let state = tempfile::tempdir().unwrap();
        let config = Config::parse_str(
            &format!(
                "tracker: {{kind: local, path: unused}}\nstate_root: {}\nroles_dir: {}/roles\n\
                 agent: {{command: [\"true\"]}}\n\
                 pipeline_stages:\n\
                 - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}\n\
                 - {{role: backend, claim_status: design-approved, success_status: code-review, requires_prior_role: architect}}\n\
                 - {{role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}}\n",
                state.path().display(),
                env!("CARGO_MANIFEST_DIR"),
            ),
            None,
        )
        .unwrap();
        let tracker = Arc::new(MemoryTracker::new());
        let waiting = 1_500;
        for i in 0..waiting * 3 {
            let status = ["done", "backlog", "design-approved"][i % 3];
            tracker.insert(MemoryTracker::ticket(&i.to_string(), "t", status));
        }
        let ledger = Arc::new(SqliteLedger::open(&config.ledger_path()).unwrap());
        let pipeline = Pipeline::builder(config, tracker, ledger)
            .require_agents(false)
            .build()
            .await
            .unwrap();
        decide::plan::JUDGED.with(|n| n.set(0));
        let report = pipeline.tick(TickOptions { dry_run: true }).await.unwrap();
        let judged = decide::plan::JUDGED.with(|n| n.get());
        assert!(report.runs.is_empty());
        let prior_missing = report
            .skips
            .iter()
            .filter(|s| matches!(s.reason, SkipReason::PriorRoleMissing { .. }))
            .count();
        assert_eq!(prior_missing, waiting, "every waiting ticket was checked");
        // Each candidate is judged a few times (once to find it needs its history,
        // once more when it has it, once for the final plan), never once per round.
        assert!(
            judged <= 4 * waiting as u64,
            "{judged} verdicts for {waiting} candidates: planning is not linear"
        );
    }
}

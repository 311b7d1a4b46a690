//! The tick: observe the board and the ledger, reconcile what runs with where tickets
//! are, plan what to dispatch, and apply the plan (claim, run, write back).
//!
//! A tick is a function of the board and the ledger, never of an event: it does not
//! know why it runs, so running it again (from cron, after a crash, twice at once)
//! converges instead of duplicating work.
//!
//! The steps of a tick, in order, are listed in `tick` (`Pipeline::sweep`), each a call
//! into the module that owns it:
//!
//! | step | module | I/O |
//! |---|---|---|
//! | replay | `writeback` (`replay_outbox`) | outbox, tracker writes |
//! | announce | `presence` | this host's presence (the fleet's caps are shared by the hosts present) |
//! | observe | `observe` | one listing, one ledger snapshot |
//! | reconcile | `reconcile` (decisions in `decide::placement`) | re-reads of missing tickets; applied: cancel requests, dropped retries and holds |
//! | read for the plan | `observe` (`read_for_plan`) | the histories and blockers the plan asks for; applied: when blockers were read |
//! | plan | `decide::plan` (with `eligibility`, `caps`) | none |
//! | apply | `apply` (claim), `run` (decisions in `decide::outcome`), `writeback` | claims, agents, outbox, tracker writes |
//!
//! A dry run is the same steps with nothing applied.

mod apply;
mod branch;
mod claimer;
mod context;
pub mod decide;
mod evidence;
mod faults;
pub mod history;
mod lease;
mod observe;
mod presence;
mod prune;
mod react;
mod recheck;
mod reconcile;
pub mod report;
mod run;
mod supervisor;
mod tick;
mod unpark;
pub mod verify_result;
mod writeback;

use std::sync::Arc;
use std::time::Duration;

pub use context::{Clock, SystemClock};
pub use decide::eligibility;
pub use faults::Faults;
pub use prune::{PruneLine, MAX_READS_PER_SWEEP};
pub(crate) use react::snapshot as pull_snapshot;
pub use run::CANCEL_POLL;
pub use supervisor::LiveRun;

use self::context::{Context, Events};
use self::report::{RunLine, TickReport};
use self::supervisor::Supervisor;
use crate::agent::{PromptError, RoleTemplates};
use crate::config::Config;
use crate::hooks::HookRegistry;
use crate::ledger::{Ledger, LedgerError};
use crate::tracker::{Tracker, TrackerError};

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
    host: Option<String>,
}

impl PipelineBuilder {
    /// Claim as `host` instead of `SORTIE_HOST_ID` (else the host name): pipelines of one
    /// process given different hosts act as the hosts of a fleet sharing one ledger.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

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
            claimer_id: match &self.host {
                Some(host) => crate::ledger::ClaimerId::for_host(host),
                None => crate::ledger::claimer_id(),
            },
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
            host: None,
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
}

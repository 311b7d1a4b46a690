//! The daemon (`sortie pipeline run`): a loop that drives the tick on a timer, on
//! demand, on webhooks and whenever a run ends, reloads the config when it changes,
//! drains runs on shutdown, and serves its state over HTTP.
//!
//! It never decides what runs: that is the tick's job ([`Pipeline::tick_detached`]),
//! so a daemon and cron ticks on the same ledger coexist. [`serve`] takes its listener
//! and its shutdown as arguments (the CLI binds the socket, installs the signal
//! handlers and prints), so tests drive it in-process.

mod api_error;
pub mod board;
mod http;
mod login;
mod logs;
mod metrics;
mod pages;
pub mod state;
mod svg;
mod ticket;
mod ticket_page;
mod views;
mod watch;
mod week;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::state::{DaemonStatus, TickSummary};
use self::watch::Fingerprint;
use crate::config::Config;
use crate::ledger::{Ledger, Scope};
use crate::pipeline::{Clock, Pipeline, PipelineError, SystemClock, TickOptions};

/// Why the daemon could not start. Errors after start are reported, not returned.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The listen address is not loopback and no token protects the POST endpoints.
    #[error(
        "refusing to listen on {0} without http.token_env; pass --insecure-listen to do it anyway"
    )]
    InsecureListen(SocketAddr),
    /// The listen socket could not be bound.
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        cause: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The first pipeline could not be built for a reason a person must fix (a role
    /// template, a missing agent program). An unreachable tracker or ledger is not one:
    /// the daemon starts, reports not ready, and retries each poll.
    #[error("{0}")]
    Pipeline(String),
}

/// A future building a pipeline for a config.
pub type BuildFuture = Pin<Box<dyn Future<Output = Result<Pipeline, PipelineError>> + Send>>;

/// How the daemon builds a pipeline for a config (and for every reload): given the
/// config and the notifier the pipeline must wake the daemon with when a run ends.
pub type PipelineFactory = Arc<dyn Fn(Config, Arc<Notify>) -> BuildFuture + Send + Sync>;

/// How to run the daemon.
#[derive(Clone)]
pub struct ServeOptions {
    /// The config file (watched for changes, with the role files).
    pub config_path: PathBuf,
    /// Builds pipelines; [`default_factory`] opens the config's tracker and ledger.
    pub factory: PipelineFactory,
    /// Where "now" comes from for the status the daemon reports.
    pub clock: Arc<dyn Clock>,
    /// How long `/api/v1/state` waits for the ledger before it answers with what it
    /// knows without it, and an error ([`STATE_TIMEOUT`]).
    pub state_timeout: Duration,
}

/// How long `/api/v1/state` waits for its ledger reads by default: shorter than the
/// SQLite ledger's 10 s wait for a lock, so a locked ledger gets a partial answer.
pub const STATE_TIMEOUT: Duration = Duration::from_secs(5);

impl ServeOptions {
    /// The production options for `config_path`.
    pub fn new(config_path: PathBuf) -> Self {
        ServeOptions {
            config_path,
            factory: default_factory(),
            clock: Arc::new(SystemClock::from_env()),
            state_timeout: STATE_TIMEOUT,
        }
    }
}

/// Builds the pipeline a config describes: its tracker (counted for `/metrics`), its
/// ledger and its role templates.
pub fn default_factory() -> PipelineFactory {
    Arc::new(|config: Config, run_ended: Arc<Notify>| -> BuildFuture {
        Box::pin(async move {
            let tracker = crate::tracker::open(&config)?;
            let tracker: Arc<dyn crate::tracker::Tracker> =
                Arc::new(crate::tracker::counting::CountingTracker::new(tracker));
            let ledger: Arc<dyn Ledger> = crate::ledger::open(&config)?;
            Pipeline::builder(config, tracker, ledger)
                .run_ended(run_ended)
                .build()
                .await
        })
    })
}

/// What the HTTP handlers and the loop share.
pub(crate) struct Shared {
    config_path: PathBuf,
    /// The last valid config loaded from disk.
    config: RwLock<Arc<Config>>,
    /// The pipeline ticks run on (built from the last good config), once it could be built.
    current: RwLock<Option<Arc<Pipeline>>>,
    /// Pipelines of replaced configs whose runs have not finished.
    retired: Mutex<Vec<Arc<Pipeline>>>,
    status: Mutex<DaemonStatus>,
    /// One stored permit: refresh requests, webhook hints and ended runs while a tick is
    /// pending make one tick.
    wake: Arc<Notify>,
    clock: Arc<dyn Clock>,
    started_at: DateTime<Utc>,
    /// [`ServeOptions::state_timeout`].
    state_timeout: Duration,
}

impl Shared {
    fn pipeline(&self) -> Option<Arc<Pipeline>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, DaemonStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn all_pipelines(&self) -> Vec<Arc<Pipeline>> {
        let mut all: Vec<Arc<Pipeline>> = self.pipeline().into_iter().collect();
        all.extend(
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        all
    }

    /// Move lines of finished runs into the status; forget retired pipelines with none left.
    fn collect_finished(&self) {
        for pipeline in self.all_pipelines() {
            let lines = pipeline.collect_finished();
            let now = self.now();
            let mut status = self.status();
            for line in lines {
                status.record_run(line, now);
            }
        }
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| !p.live_runs().is_empty());
    }

    /// Ask for a tick as soon as the loop is free; whether one was already asked for.
    fn request_tick(&self) -> bool {
        let mut status = self.status();
        let coalesced = status.tick_requested;
        status.tick_requested = true;
        drop(status);
        self.wake.notify_one();
        coalesced
    }
}

/// Run the daemon on `listener` until `shutdown` completes, then drain: live runs get
/// `shutdown_grace_seconds` to finish (cut short when `hurry` completes), the rest are
/// interrupted. Starts even when the tracker or the ledger cannot be reached (not
/// ready until they can); refuses to start only for a problem a person must fix.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
    hurry: impl Future<Output = ()> + Send,
) -> Result<(), DaemonError> {
    let wake = Arc::new(Notify::new());
    let shared = Arc::new(Shared {
        config_path: opts.config_path.clone(),
        config: RwLock::new(Arc::new(config.clone())),
        current: RwLock::new(None),
        retired: Mutex::new(Vec::new()),
        status: Mutex::new(DaemonStatus::default()),
        wake: wake.clone(),
        started_at: opts.clock.now(),
        clock: opts.clock.clone(),
        state_timeout: opts.state_timeout,
    });
    let mut applied = Fingerprint::of(&opts.config_path, &config);
    match (opts.factory)(config, wake.clone()).await {
        Ok(pipeline) => {
            *shared.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(pipeline))
        }
        Err(err) if err.is_transient() => {
            tracing::warn!(error = %err, "cannot build the pipeline yet; serving, not ready, retrying each poll");
            let mut status = shared.status();
            status.not_ready = Some(err.to_string());
            status.ledger_unavailable = matches!(err, PipelineError::Ledger(_));
        }
        Err(err) => return Err(DaemonError::Pipeline(err.to_string())),
    }

    let stop = CancellationToken::new();
    let server = {
        let app = http::router(shared.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(err) = served {
                tracing::error!(%err, "HTTP server stopped");
            }
        })
    };

    tokio::pin!(shutdown);
    // The workspaces of tickets that finished while no daemon ran go once, as soon as
    // a pipeline is built (at start, or when the tracker first answers).
    let mut cleaned = false;
    let mut next = Instant::now();
    let mut collect = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = tokio::time::sleep_until(next) => {}
            _ = wake.notified() => {}
            _ = collect.tick() => {
                shared.collect_finished();
                continue;
            }
        }
        shared.status().tick_requested = false;
        shared.collect_finished();
        reload_if_changed(&shared, &opts, &mut applied).await;
        if let Some(pipeline) = shared.pipeline() {
            if !cleaned {
                cleaned = true;
                clean_at_start(pipeline.clone());
            }
            if tick_once(&shared, &pipeline, &mut shutdown).await == Stop::Asked {
                // `shutdown` completed during the tick: it must not be polled again (an
                // `async` block panics when resumed after completion).
                break;
            }
        }
        next = next_wake(&shared, Instant::now() + shared.config().poll_interval);
    }

    tracing::info!("shutting down: no new claims; live runs get the grace to finish");
    shared.status().shutting_down = true;
    let grace = shared.config().shutdown_grace;
    let hurry = hurry;
    tokio::pin!(hurry);
    for pipeline in shared.all_pipelines() {
        let lines = pipeline.shutdown_until(grace, &mut hurry).await;
        let now = shared.now();
        let mut status = shared.status();
        for line in lines {
            status.record_run(line, now);
        }
    }
    stop.cancel();
    let _ = server.await;
    tracing::info!("drained; exiting");
    Ok(())
}

/// When the loop wakes next: at `poll_deadline`, or sooner when a retry in the ledger
/// falls due before it (a run's end wakes the loop through `wake`; a retry coming due
/// has nothing to wake it but this). Retries already due are left out: the tick that
/// just ran saw them, and waking for them again would spin. A ledger that cannot be
/// read leaves the poll deadline.
fn next_wake(shared: &Shared, poll_deadline: Instant) -> Instant {
    let Some(pipeline) = shared.pipeline() else {
        return poll_deadline;
    };
    let tracker = pipeline.tracker().name();
    let retries = match pipeline.ledger().retries(Scope::Tracker(tracker)) {
        Ok(retries) => retries,
        Err(err) => {
            tracing::debug!(%err, "cannot read the retry queue; waking at the next poll");
            return poll_deadline;
        }
    };
    let now = shared.now();
    let Some(earliest) = retries
        .iter()
        .map(|r| r.due_at)
        .filter(|due| *due > now)
        .min()
    else {
        return poll_deadline;
    };
    let wait = (earliest - now).to_std().unwrap_or_default();
    poll_deadline.min(Instant::now() + wait)
}

/// Remove the workspaces of finished tickets in the background, so a slow tracker does
/// not hold up the first tick (reads are bounded: [`crate::pipeline::MAX_READS_PER_SWEEP`]).
fn clean_at_start(pipeline: Arc<Pipeline>) {
    tokio::spawn(async move {
        match pipeline.clean_finished_workspaces().await {
            Ok(lines) => {
                let removed = lines.iter().filter(|l| l.action == "removed").count();
                if removed > 0 {
                    tracing::info!(removed, "removed the workspaces of finished tickets");
                }
                for line in lines.iter().filter(|l| l.action == "failed") {
                    tracing::warn!(workspace = %line.workspace, reason = %line.reason, "could not remove a workspace");
                }
            }
            Err(err) => tracing::warn!(%err, "could not clean up workspaces at start"),
        }
    });
}

/// Whether the daemon's `shutdown` future completed during a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// It completed: the loop stops without polling it again.
    Asked,
    /// Still pending.
    NotYet,
}

/// Run one detached tick on `pipeline`; a shutdown meanwhile stops its claiming and is
/// reported, since a completed future must not be polled again.
async fn tick_once(
    shared: &Shared,
    pipeline: &Pipeline,
    shutdown: &mut Pin<&mut impl Future<Output = ()>>,
) -> Stop {
    let before: std::collections::HashSet<String> =
        pipeline.live_runs().into_iter().map(|r| r.run_id).collect();
    let started_at = shared.now();
    let clock = Instant::now();
    let tick = pipeline.tick_detached(TickOptions::default());
    tokio::pin!(tick);
    let (result, stop) = tokio::select! {
        result = &mut tick => (result, Stop::NotYet),
        _ = shutdown.as_mut() => {
            pipeline.stop_claiming();
            (tick.await, Stop::Asked)
        }
    };
    let duration_seconds = clock.elapsed().as_secs_f64();
    let summary = match result {
        Ok(report) => TickSummary {
            started_at,
            duration_seconds,
            ok: true,
            error: None,
            // Runs that finished before this line are not counted; good enough for a summary.
            runs_started: pipeline
                .live_runs()
                .iter()
                .filter(|r| !before.contains(&r.run_id))
                .count(),
            skipped: report.skips.len(),
            cancels: report.cancels.len(),
            replays: report.replays.len(),
            reactions: report.reactions.clone(),
            questions: state::WaitingQuestion::from_skips(&report.skips),
        },
        Err(err) => {
            tracing::error!(%err, "tick failed");
            TickSummary {
                started_at,
                duration_seconds,
                ok: false,
                error: Some(err.to_string()),
                runs_started: 0,
                skipped: 0,
                cancels: 0,
                replays: 0,
                reactions: Vec::new(),
                questions: Vec::new(),
            }
        }
    };
    let now = shared.now();
    shared.status().record_tick(summary, now);
    stop
}

/// When the config file or a role file changed, or the last build could not reach the
/// tracker or the ledger, load and build again and switch to the result. A file that is
/// not valid keeps the running config (reported until the file changes again); a build
/// that could not reach a service is retried at the next poll.
async fn reload_if_changed(shared: &Shared, opts: &ServeOptions, applied: &mut Fingerprint) {
    let config = shared.config();
    let on_disk = Fingerprint::of(&shared.config_path, &config);
    let unbuilt = shared.pipeline().is_none();
    if on_disk == *applied && !unbuilt {
        return;
    }
    let changed = on_disk != *applied;
    let loaded = if changed {
        match Config::load(&shared.config_path) {
            Ok(config) => config,
            Err(err) => {
                let message = format!("{err:#}");
                tracing::error!(error = %message, "config edit rejected; running on the last good config");
                *applied = on_disk;
                let mut status = shared.status();
                status.config_error = Some(message);
                status.counters.reload_failures += 1;
                return;
            }
        }
    } else {
        (*config).clone()
    };
    match (opts.factory)(loaded.clone(), shared.wake.clone()).await {
        Ok(pipeline) => {
            // The new config may name other role files: watch those from now on.
            *applied = Fingerprint::of(&shared.config_path, &loaded);
            *shared.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
            let previous = shared
                .current
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .replace(Arc::new(pipeline));
            let mut status = shared.status();
            status.not_ready = None;
            status.ledger_unavailable = false;
            status.config_error = None;
            if let Some(running) = previous {
                tracing::info!(config = %shared.config_path.display(), "config reloaded");
                running.stop_claiming();
                shared
                    .retired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(running);
                status.counters.reloads += 1;
            } else {
                tracing::info!("pipeline built; ready once a tick succeeds");
            }
        }
        Err(err) if err.is_transient() => {
            // Not the file's fault: keep `applied` as it was, so the next poll tries again.
            tracing::warn!(error = %err, "cannot build the pipeline now; will retry at the next poll");
            let mut status = shared.status();
            status.not_ready = Some(err.to_string());
            status.ledger_unavailable = matches!(err, PipelineError::Ledger(_));
        }
        Err(err) => {
            let message = err.to_string();
            tracing::error!(error = %message, "config edit rejected; running on the last good config");
            *applied = on_disk;
            let mut status = shared.status();
            status.config_error = Some(message);
            status.counters.reload_failures += 1;
        }
    }
}

/// What `sortie pipeline run` does around [`serve`]: refuse a non-loopback address
/// without a token, bind, print `listening on http://ADDR`, and stop on SIGTERM or
/// SIGINT (a second signal cuts the grace short).
pub async fn run(
    config: Config,
    config_path: &Path,
    listen: SocketAddr,
    insecure_listen: bool,
) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    if !listen.ip().is_loopback() && config.http.token_env.is_none() && !insecure_listen {
        return Err(DaemonError::InsecureListen(listen));
    }
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|cause| DaemonError::Bind {
            addr: listen,
            cause,
        })?;
    let bound = listener.local_addr().map_err(|cause| DaemonError::Bind {
        addr: listen,
        cause,
    })?;
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{bound}");
        let _ = out.flush();
    }
    let first = CancellationToken::new();
    let second = CancellationToken::new();
    {
        let (first, second) = (first.clone(), second.clone());
        tokio::spawn(async move {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            first.cancel();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::warn!("second signal: cancelling live runs now");
            second.cancel();
        });
    }
    let opts = ServeOptions::new(config_path.to_path_buf());
    serve(
        listener,
        config,
        opts,
        first.cancelled_owned(),
        second.cancelled_owned(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Arc<Shared> {
        let config = Config::parse_str(
            "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
             active_states: [todo]\nhandoff_state: review\n",
            None,
        )
        .unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::from_env());
        Arc::new(Shared {
            config_path: PathBuf::from("pipeline.yaml"),
            config: RwLock::new(Arc::new(config)),
            current: RwLock::new(None),
            retired: Mutex::new(Vec::new()),
            status: Mutex::new(DaemonStatus::default()),
            wake: Arc::new(Notify::new()),
            started_at: clock.now(),
            clock,
            state_timeout: STATE_TIMEOUT,
        })
    }

    // Issue #14: `POST /api/v1/refresh` answers `{"queued": true, "coalesced": bool}`;
    // a refresh while one is pending is coalesced into it. No loop runs here, so the
    // first request stays pending.
    #[tokio::test]
    async fn a_refresh_says_whether_it_joined_a_pending_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/refresh", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, http::router(shared())).await.unwrap();
        });
        let client = reqwest::Client::new();
        let mut answers = Vec::new();
        for _ in 0..2 {
            let r = client.post(&url).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 202);
            answers.push(r.json::<serde_json::Value>().await.unwrap());
        }
        assert_eq!(
            answers,
            [
                serde_json::json!({"queued": true, "coalesced": false}),
                serde_json::json!({"queued": true, "coalesced": true}),
            ]
        );
        server.abort();
    }
}

//! The daemon (`sortie pipeline run`): a loop that drives the tick on a timer, on
//! demand and on webhooks, reloads the config when it changes, drains runs on
//! shutdown, and serves its state over HTTP.
//!
//! It never decides what runs: that is the tick's job ([`Pipeline::tick_detached`]),
//! so a daemon and cron ticks on the same ledger coexist.

mod http;
pub mod state;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use self::state::{DaemonStatus, TickSummary};
use self::watch::Fingerprint;
use crate::config::Config;
use crate::ledger::Ledger;
use crate::pipeline::{Pipeline, TickOptions};

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
    /// The first pipeline could not be built (tracker, ledger or role templates).
    #[error("{0}")]
    Pipeline(String),
}

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The config file (watched for changes, with the role files).
    pub config_path: PathBuf,
    /// Where the HTTP surface listens.
    pub listen: SocketAddr,
    /// Allow a non-loopback listen address without a token.
    pub insecure_listen: bool,
}

/// What the HTTP handlers and the loop share.
pub(crate) struct Shared {
    config_path: PathBuf,
    /// The pipeline ticks run on (the last good config).
    current: RwLock<Arc<Pipeline>>,
    /// Pipelines of replaced configs whose runs have not finished.
    retired: Mutex<Vec<Arc<Pipeline>>>,
    status: Mutex<DaemonStatus>,
    /// One stored permit: many refresh calls while a tick is pending make one tick.
    refresh: Notify,
    started_at: chrono::DateTime<Utc>,
}

impl Shared {
    fn pipeline(&self) -> Arc<Pipeline> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn status(&self) -> std::sync::MutexGuard<'_, DaemonStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn all_pipelines(&self) -> Vec<Arc<Pipeline>> {
        let mut all = vec![self.pipeline()];
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
            let mut status = self.status();
            for line in lines {
                status.record_run(line);
            }
        }
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| !p.live_runs().is_empty());
    }
}

/// Build a pipeline for `config` (its tracker, its ledger, its role templates).
async fn build_pipeline(config: Config) -> Result<Pipeline, String> {
    let tracker = crate::tracker::open(&config).map_err(|e| format!("tracker: {e}"))?;
    // Counted for `/metrics` (tracker requests by kind and result).
    let tracker: Arc<dyn crate::tracker::Tracker> =
        Arc::new(crate::tracker::counting::CountingTracker::new(tracker));
    let ledger: Arc<dyn Ledger> =
        crate::ledger::open(&config).map_err(|e| format!("ledger: {e}"))?;
    Pipeline::new(config, tracker, ledger)
        .await
        .map_err(|e| e.to_string())
}

/// Run the daemon until SIGTERM or SIGINT, then drain. Prints `listening on
/// http://ADDR` on stdout once the socket is bound.
pub async fn run(config: Config, opts: DaemonOptions) -> Result<(), DaemonError> {
    if !opts.listen.ip().is_loopback() && config.http.token_env.is_none() && !opts.insecure_listen {
        return Err(DaemonError::InsecureListen(opts.listen));
    }
    let pipeline = build_pipeline(config)
        .await
        .map_err(DaemonError::Pipeline)?;
    let mut fingerprint = Fingerprint::of(&opts.config_path, pipeline.config());
    let shared = Arc::new(Shared {
        config_path: opts.config_path.clone(),
        current: RwLock::new(Arc::new(pipeline)),
        retired: Mutex::new(Vec::new()),
        status: Mutex::new(DaemonStatus::default()),
        refresh: Notify::new(),
        started_at: Utc::now(),
    });

    let stop = CancellationToken::new();
    let hurry = CancellationToken::new();
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    {
        let (stop, hurry) = (stop.clone(), hurry.clone());
        tokio::spawn(async move {
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::info!("shutting down: no new claims; live runs get the grace to finish");
            stop.cancel();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::warn!("second signal: cancelling live runs now");
            hurry.cancel();
        });
    }

    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|cause| DaemonError::Bind {
            addr: opts.listen,
            cause,
        })?;
    let bound = listener.local_addr().map_err(|cause| DaemonError::Bind {
        addr: opts.listen,
        cause,
    })?;
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{bound}");
        let _ = out.flush();
    }
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

    let mut next = Instant::now();
    let mut collect = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep_until(next.into()) => {}
            _ = shared.refresh.notified() => {}
            _ = collect.tick() => {
                shared.collect_finished();
                continue;
            }
        }
        shared.collect_finished();
        reload_if_changed(&shared, &mut fingerprint).await;
        tick_once(&shared, &stop).await;
        next = Instant::now() + shared.pipeline().config().poll_interval;
    }

    shared.status().shutting_down = true;
    let grace = shared.pipeline().config().shutdown_grace;
    for pipeline in shared.all_pipelines() {
        let lines = pipeline.shutdown_until(grace, hurry.cancelled()).await;
        let mut status = shared.status();
        for line in lines {
            status.record_run(line);
        }
    }
    let _ = server.await;
    tracing::info!("drained; exiting");
    Ok(())
}

/// Run one detached tick on the current pipeline; a signal meanwhile stops its claiming.
async fn tick_once(shared: &Shared, stop: &CancellationToken) {
    let pipeline = shared.pipeline();
    let before: std::collections::HashSet<String> =
        pipeline.live_runs().into_iter().map(|r| r.run_id).collect();
    let started_at = Utc::now();
    let clock = Instant::now();
    let tick = pipeline.tick_detached(TickOptions::default());
    tokio::pin!(tick);
    let result = loop {
        tokio::select! {
            result = &mut tick => break result,
            _ = stop.cancelled() => pipeline.stop_claiming(),
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
            }
        }
    };
    shared.status().record_tick(summary);
}

/// When the config file or a role file changed, validate the result and switch to it;
/// keep the running config and report the error when it is not valid.
async fn reload_if_changed(shared: &Shared, fingerprint: &mut Fingerprint) {
    let running = shared.pipeline();
    let now = Fingerprint::of(&shared.config_path, running.config());
    if now == *fingerprint {
        return;
    }
    *fingerprint = now;
    match load_and_build(&shared.config_path).await {
        Ok(pipeline) => {
            // The new config may name other role files: watch those from now on.
            *fingerprint = Fingerprint::of(&shared.config_path, pipeline.config());
            tracing::info!(config = %shared.config_path.display(), "config reloaded");
            running.stop_claiming();
            *shared.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pipeline);
            shared
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(running);
            let mut status = shared.status();
            status.config_error = None;
            status.counters.reloads += 1;
        }
        Err(err) => {
            tracing::error!(error = %err, "config edit rejected; running on the last good config");
            let mut status = shared.status();
            status.config_error = Some(err);
            status.counters.reload_failures += 1;
        }
    }
}

async fn load_and_build(path: &Path) -> Result<Pipeline, String> {
    let config = Config::load(path).map_err(|e| format!("{e:#}"))?;
    build_pipeline(config).await
}

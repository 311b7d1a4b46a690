//! The runs a pipeline has in flight: their tasks, what each is doing, the stop flag
//! that ends claiming, the token that cancels them all, and the signal that a run ended
//! (so a daemon can refill the freed slot at once).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::report::RunLine;

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
    /// What the agent's stream told so far (last event, turns, usage); the runner
    /// publishes it as it reads the stream.
    #[serde(skip)]
    pub progress: crate::agent::ProgressHandle,
}

/// Tasks of runs in flight and the means to stop them.
#[derive(Default)]
pub(crate) struct Supervisor {
    /// Runs started by a detached tick, still going or not yet collected.
    detached: Mutex<JoinSet<RunLine>>,
    /// Runs whose agent may be running, by run id.
    live: Mutex<BTreeMap<String, LiveRun>>,
    /// Set once shutdown starts: no tick claims anything after it.
    stopping: AtomicBool,
    /// Cancelled when runs must stop now (shutdown grace over, an operator's signal).
    shutdown: CancellationToken,
    /// Notified whenever a run's write-back is done (or the run ended without one).
    run_ended: Arc<Notify>,
}

impl Supervisor {
    /// A supervisor that notifies `run_ended` when a run ends.
    pub fn notifying(run_ended: Arc<Notify>) -> Self {
        Supervisor {
            run_ended,
            ..Supervisor::default()
        }
    }

    /// Whether ticks may still claim.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Stop claiming from now on.
    pub fn stop_claiming(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// A token cancelled when every run must stop.
    pub fn run_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Whether runs were told to stop now.
    pub fn is_cancelled(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Tell every run to stop now.
    pub fn cancel_all(&self) {
        self.shutdown.cancel();
    }

    /// The notifier of ended runs.
    pub fn run_ended(&self) -> Arc<Notify> {
        self.run_ended.clone()
    }

    /// Record a run as live.
    pub fn started(&self, run: LiveRun) {
        self.live_runs_mut().insert(run.run_id.clone(), run);
    }

    /// Where the live run `run_id` publishes its progress.
    pub fn progress(&self, run_id: &str) -> Option<crate::agent::ProgressHandle> {
        self.live_runs_mut().get(run_id).map(|r| r.progress.clone())
    }

    /// Forget a live run and tell whoever waits that a slot is free.
    pub fn ended(&self, run_id: &str) {
        self.live_runs_mut().remove(run_id);
        self.run_ended.notify_one();
    }

    /// Live runs, oldest first.
    pub fn live(&self) -> Vec<LiveRun> {
        let mut runs: Vec<LiveRun> = self.live_runs_mut().values().cloned().collect();
        runs.sort_by_key(|r| r.started_at);
        runs
    }

    fn live_runs_mut(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, LiveRun>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep a detached run's task.
    pub fn detach(&self, task: impl std::future::Future<Output = RunLine> + Send + 'static) {
        self.detached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(task);
    }

    /// Lines of detached runs that have finished since the last call.
    pub fn collect_finished(&self) -> Vec<RunLine> {
        let mut set = self.detached.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        while let Some(done) = set.try_join_next() {
            match done {
                Ok(line) => lines.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }
        lines
    }

    /// Stop claiming, let detached runs finish for up to `grace` (or until `hurry`),
    /// then cancel the rest and wait for them. Returns the lines of the runs that ended.
    pub async fn drain(
        &self,
        grace: Duration,
        hurry: impl std::future::Future<Output = ()>,
    ) -> Vec<RunLine> {
        self.stop_claiming();
        let mut set = std::mem::take(&mut *self.detached.lock().unwrap_or_else(|e| e.into_inner()));
        let mut lines = Vec::new();
        let finish = async {
            while let Some(done) = set.join_next().await {
                match done {
                    Ok(line) => lines.push(line),
                    Err(err) => tracing::error!(%err, "a run task panicked"),
                }
            }
        };
        tokio::select! {
            _ = tokio::time::timeout(grace, finish) => {}
            _ = hurry => {}
        }
        if !set.is_empty() {
            tracing::info!(runs = set.len(), "grace over; cancelling live runs");
            self.cancel_all();
            while let Some(done) = set.join_next().await {
                match done {
                    Ok(line) => lines.push(line),
                    Err(err) => tracing::error!(%err, "a run task panicked"),
                }
            }
        }
        lines
    }
}

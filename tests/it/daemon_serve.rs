//! The daemon driven in-process through `sortie::daemon::serve`: its listener, its
//! shutdown and its pipeline factory are injected, so these need no signal and no
//! binary. Issue #12: reload and start while the tracker is down, work-conserving loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::switchable::Switchable;
use sortie::config::Config;
use sortie::daemon::{serve, BuildFuture, PipelineFactory, ServeOptions};
use sortie::ledger::{Ledger, SqliteLedger};
use sortie::pipeline::{Pipeline, SystemClock};
use sortie::tracker::memory::MemoryTracker;
use tokio::sync::Notify;

fn config_text(dir: &std::path::Path, poll: u64, per_role: u32, agent: &str) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: {state}
roles_dir: {roles}
poll_interval_seconds: {poll}
shutdown_grace_seconds: 5
concurrency: {{max_in_flight: 16, per_role_max_in_flight: {per_role}}}
agent: {{command: ["sh", "-c", "{agent}"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: code-review, requires_prior_role: architect}}
  - {{role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}}
"#,
        state = dir.join("state").display(),
        roles = crate::common::repo().join("roles").display(),
    )
}

/// A running in-process daemon.
struct Daemon {
    url: String,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<(), sortie::daemon::DaemonError>>,
    http: reqwest::Client,
}

impl Daemon {
    async fn start(path: std::path::PathBuf, tracker: Arc<Switchable>) -> Daemon {
        let config = Config::load(&path).expect("config");
        let ledger: Arc<dyn Ledger> =
            Arc::new(SqliteLedger::open(&config.ledger_path()).expect("ledger"));
        let factory: PipelineFactory = Arc::new(move |config: Config, wake: Arc<Notify>| {
            let (tracker, ledger) = (tracker.clone(), ledger.clone());
            Box::pin(async move {
                Pipeline::builder(config, tracker, ledger)
                    .run_ended(wake)
                    .build()
                    .await
            }) as BuildFuture
        });
        let opts = ServeOptions {
            config_path: path,
            factory,
            clock: Arc::new(SystemClock::default()),
            state_timeout: sortie::daemon::STATE_TIMEOUT,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(serve(
            listener,
            config,
            opts,
            async move { stopped.notified().await },
            std::future::pending(),
        ));
        Daemon {
            url,
            stop,
            task,
            http: reqwest::Client::new(),
        }
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("daemon answers");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    async fn state(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/api/v1/state").await.1).expect("state is JSON")
    }

    /// Poll `probe` every 100 ms for up to `within`.
    async fn until<F, Fut>(&self, within: Duration, what: &str, mut probe: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if probe().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("timed out waiting for: {what}");
    }

    async fn stop(self) {
        self.stop.notify_one();
        self.task.await.unwrap().expect("daemon stops cleanly");
    }
}

fn tracker(down: bool) -> Arc<Switchable> {
    Arc::new(Switchable::new(down))
}

/// Regression (#12, defect 3): a valid edit made while the tracker is down is applied
/// once the tracker is back (it used to be reported as a config error and forgotten).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_edit_made_while_the_tracker_is_down_is_applied_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), 1, 1, "true")).unwrap();
    let board = tracker(false);
    let d = Daemon::start(path.clone(), board.clone()).await;
    d.until(Duration::from_secs(10), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;

    board.down.store(true, Ordering::SeqCst);
    // mtime granularity: make sure the edit is seen as a change.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&path, config_text(dir.path(), 2, 1, "true")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let state = d.state().await;
    assert_eq!(
        state["config"]["poll_interval_seconds"], 1,
        "old config while down"
    );
    assert!(
        state["config_error"].is_null(),
        "an unreachable tracker is not a config error: {}",
        state["config_error"]
    );
    let (code, body) = d.get("/readyz").await;
    assert_eq!(code, 503, "{body}");

    board.down.store(false, Ordering::SeqCst);
    d.until(Duration::from_secs(10), "the edit applied", || async {
        d.state().await["config"]["poll_interval_seconds"] == 2
    })
    .await;
    d.stop().await;
}

/// Regression (#12, defect 3): the daemon starts while the tracker is unreachable: it
/// serves /healthz, says why it is not ready on /readyz, and becomes ready once the
/// tracker answers (it used to exit at start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_starts_while_the_tracker_is_unreachable_and_gets_ready_when_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), 1, 1, "true")).unwrap();
    let board = tracker(true);
    let d = Daemon::start(path, board.clone()).await;
    d.until(Duration::from_secs(5), "healthz", || async {
        d.get("/healthz").await.0 == 200
    })
    .await;
    let (code, body) = d.get("/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("connection refused"), "{body}");

    board
        .inner
        .insert(MemoryTracker::ticket("1", "t", "ready-for-design"));
    board.down.store(false, Ordering::SeqCst);
    d.until(Duration::from_secs(15), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;
    d.until(Duration::from_secs(15), "ticket 1 done", || async {
        board
            .inner
            .snapshot("1")
            .is_some_and(|t| t.status == "done")
    })
    .await;
    d.stop().await;
}

/// #12, behaviour 1: the daemon is work-conserving. With a 30 s poll interval, a ticket
/// handed to the next stage starts when the write-back that freed it is done, so nine
/// runs of three tickets through three stages finish long before the second poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_starts_the_next_stage_without_waiting_for_the_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), 30, 1, "sleep 0.2")).unwrap();
    let board = tracker(false);
    for id in ["1", "2", "3"] {
        board
            .inner
            .insert(MemoryTracker::ticket(id, "t", "ready-for-design"));
    }
    let started = Instant::now();
    let d = Daemon::start(path, board.clone()).await;
    d.until(
        Duration::from_secs(25),
        "every ticket done before the next poll",
        || async {
            ["1", "2", "3"]
                .iter()
                .all(|id| board.inner.snapshot(id).is_some_and(|t| t.status == "done"))
        },
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(30));
    d.stop().await;
}

/// A shutdown future that panics when polled again after it completed, as an
/// embedder's `async` block does ("`async fn` resumed after completion").
struct PollOnceAfterReady<F> {
    inner: std::pin::Pin<Box<F>>,
    done: bool,
    /// Told when the shutdown completed (the listing waits for it).
    completed: Arc<Notify>,
}

impl<F: std::future::Future<Output = ()>> std::future::Future for PollOnceAfterReady<F> {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        assert!(
            !self.done,
            "the shutdown future was polled after it completed"
        );
        let ready = self.inner.as_mut().poll(cx);
        if ready.is_ready() {
            self.done = true;
            self.completed.notify_one();
        }
        ready
    }
}

/// The memory board, whose listing tells `listing` it started and then waits for
/// `release`: a tick in flight for as long as the test wants.
struct HeldListing {
    inner: MemoryTracker,
    listing: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait::async_trait]
impl sortie::tracker::Tracker for HeldListing {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> sortie::tracker::Capabilities {
        self.inner.capabilities()
    }
    async fn identity(&self) -> Result<String, sortie::tracker::TrackerError> {
        self.inner.identity().await
    }
    async fn list(
        &self,
        statuses: &[String],
    ) -> Result<sortie::tracker::Listing, sortie::tracker::TrackerError> {
        self.listing.notify_one();
        self.release.notified().await;
        self.inner.list(statuses).await
    }
    async fn list_filtered(
        &self,
        statuses: &[String],
        _filter: &sortie::config::TicketFilter,
    ) -> Result<sortie::tracker::Listing, sortie::tracker::TrackerError> {
        self.list(statuses).await
    }
    async fn get(
        &self,
        id: &str,
    ) -> Result<sortie::tracker::Ticket, sortie::tracker::TrackerError> {
        self.inner.get(id).await
    }
    async fn comments(
        &self,
        id: &str,
    ) -> Result<Vec<sortie::tracker::Comment>, sortie::tracker::TrackerError> {
        self.inner.comments(id).await
    }
    async fn post_comment(
        &self,
        id: &str,
        body: &str,
        key: &str,
    ) -> Result<sortie::tracker::Comment, sortie::tracker::TrackerError> {
        self.inner.post_comment(id, body, key).await
    }
    async fn transition(
        &self,
        id: &str,
        from: &str,
        to: &str,
    ) -> Result<(), sortie::tracker::TrackerError> {
        self.inner.transition(id, from, to).await
    }
}

/// Regression (#30): a stop that arrives while a tick runs ends the daemon cleanly.
/// The loop used to poll its `shutdown` future again after the tick, which an
/// embedder's `async` block answers with a panic ("`async fn` resumed after
/// completion"). Here the tick's listing waits until the shutdown has completed, so
/// the stop always lands mid-tick, and the shutdown future panics if polled again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_a_tick_ends_the_daemon_without_polling_the_shutdown_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), 30, 1, "true")).unwrap();
    let config = Config::load(&path).expect("config");
    let (listing, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let tracker = Arc::new(HeldListing {
        inner: MemoryTracker::new(),
        listing: listing.clone(),
        release: release.clone(),
    });
    let ledger: Arc<dyn Ledger> =
        Arc::new(SqliteLedger::open(&config.ledger_path()).expect("ledger"));
    let factory: PipelineFactory = Arc::new(move |config: Config, wake: Arc<Notify>| {
        let (tracker, ledger) = (tracker.clone(), ledger.clone());
        Box::pin(async move {
            Pipeline::builder(config, tracker, ledger)
                .run_ended(wake)
                .build()
                .await
        }) as BuildFuture
    });
    let opts = ServeOptions {
        config_path: path,
        factory,
        clock: Arc::new(SystemClock::default()),
        state_timeout: sortie::daemon::STATE_TIMEOUT,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    // The shutdown completes once the first tick is listing the board.
    let shutdown = PollOnceAfterReady {
        inner: Box::pin(async move { listing.notified().await }),
        done: false,
        completed: release,
    };
    let served = tokio::spawn(serve(
        listener,
        config,
        opts,
        shutdown,
        std::future::pending(),
    ))
    .await;
    match served {
        Ok(result) => result.expect("the daemon stops cleanly"),
        Err(err) => panic!("the daemon panicked on a stop during a tick: {err}"),
    }
}

/// "Now" that follows tokio's clock, so a test with paused time moves the pipeline's
/// retry due times and the daemon's timers together.
struct TokioClock {
    base: chrono::DateTime<chrono::Utc>,
    start: tokio::time::Instant,
}

impl sortie::pipeline::Clock for TokioClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.base + chrono::Duration::from_std(self.start.elapsed()).unwrap()
    }
}

/// Regression (#30, the daemon sleeps through due retries): an attempt that fails
/// transiently with a 1 s retry delay is tried again when the retry falls due, not at
/// the next poll 30 s later. Paused time: the daemon's timers and the pipeline's clock
/// move together, and the gap is read from the ledger's run records.
#[tokio::test(start_paused = true)]
async fn a_retry_runs_when_it_falls_due_not_at_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    let text = config_text(dir.path(), 30, 1, "exit 3")
        .replace("timeout_seconds: 60", "timeout_seconds: 3600")
        + "retry: {max_attempts: 3, backoff_base_seconds: 1, backoff_max_seconds: 1}\n";
    std::fs::write(&path, text).unwrap();
    let config = Config::load(&path).expect("config");
    let board = Arc::new(MemoryTracker::new());
    board.insert(MemoryTracker::ticket("1", "t", "ready-for-design"));
    let ledger: Arc<dyn Ledger> =
        Arc::new(SqliteLedger::open(&config.ledger_path()).expect("ledger"));
    let clock: Arc<dyn sortie::pipeline::Clock> = Arc::new(TokioClock {
        base: chrono::Utc::now(),
        start: tokio::time::Instant::now(),
    });
    let factory: PipelineFactory = {
        let (board, ledger, clock) = (board.clone(), ledger.clone(), clock.clone());
        Arc::new(move |config: Config, wake: Arc<Notify>| {
            let (board, ledger, clock) = (board.clone(), ledger.clone(), clock.clone());
            Box::pin(async move {
                Pipeline::builder(config, board, ledger)
                    .clock(clock)
                    .run_ended(wake)
                    .build()
                    .await
            }) as BuildFuture
        })
    };
    let opts = ServeOptions {
        config_path: path,
        factory,
        clock,
        state_timeout: sortie::daemon::STATE_TIMEOUT,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = Arc::new(Notify::new());
    let stopped = stop.clone();
    let task = tokio::spawn(serve(
        listener,
        config,
        opts,
        async move { stopped.notified().await },
        std::future::pending(),
    ));

    let scope = sortie::ledger::Scope::Tracker("memory");
    let mut runs = Vec::new();
    for _ in 0..1200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        runs = ledger.recent_runs(scope, 10).unwrap();
        if runs.iter().any(|r| r.stage_attempt == 2) {
            break;
        }
    }
    let attempt = |n: u32| {
        runs.iter()
            .find(|r| r.stage_attempt == n)
            .unwrap_or_else(|| panic!("no attempt {n} in {runs:?}"))
            .clone()
    };
    let (first, second) = (attempt(1), attempt(2));
    assert_eq!(first.reason_code.as_deref(), Some("agent.exit_nonzero"));
    let gap = (second.started_at - first.finished_at.expect("attempt 1 finished")).to_std();
    let gap = gap.expect("attempt 2 starts after attempt 1 ends");
    assert!(
        gap >= Duration::from_secs(1) && gap < Duration::from_secs(10),
        "attempt 2 started {gap:?} after attempt 1 failed; its retry was due after 1 s (poll 30 s)"
    );
    stop.notify_one();
    task.await.unwrap().expect("daemon stops cleanly");
}

/// Symphony conformance (#39, item 1), config reload: an edit to a stage's role file
/// or to a route's `role_file` reaches the next run without a restart. The route's file
/// was not watched: its edit waited for an unrelated change to the config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reload_an_edited_role_file_or_route_role_file_reaches_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let roles = dir.path().join("roles");
    std::fs::create_dir_all(&roles).unwrap();
    let stage_file = roles.join("worker.md");
    let route_file = dir.path().join("urgent.md");
    std::fs::write(&stage_file, "stage template v1 for {{ ticket.id }}\n").unwrap();
    std::fs::write(&route_file, "route template v1 for {{ ticket.id }}\n").unwrap();
    let prompts = dir.path().join("prompts.log");
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(
        &path,
        format!(
            r#"tracker: {{kind: local, path: board}}
state_root: {state}
roles_dir: {roles}
poll_interval_seconds: 1
shutdown_grace_seconds: 5
agent: {{command: ["sh", "-c", "cat \"$$SORTIE_PROMPT_FILE\" >> {prompts}"], timeout_seconds: 60}}
pipeline_stages:
  - role: worker
    claim_status: ready
    success_status: done
    routes:
      - {{name: urgent, when: {{labels: [urgent]}}, role_file: urgent.md}}
"#,
            state = dir.path().join("state").display(),
            roles = roles.display(),
            prompts = prompts.display(),
        ),
    )
    .unwrap();
    let board = tracker(false);
    let add = |id: &str, urgent: bool| {
        let mut t = MemoryTracker::ticket(id, "t", "ready");
        if urgent {
            t.labels = vec!["urgent".into()];
        }
        board.inner.insert(t);
    };
    let done = |id: &'static str| {
        let board = board.clone();
        move || {
            let board = board.clone();
            async move { board.inner.snapshot(id).is_some_and(|t| t.status == "done") }
        }
    };
    let d = Daemon::start(path, board.clone()).await;
    add("1", false);
    add("2", true);
    d.until(Duration::from_secs(20), "1 done", done("1")).await;
    d.until(Duration::from_secs(20), "2 done", done("2")).await;

    // Each edit changes its file's size, so it is seen whatever the clock's grain. The
    // next run starts after the reload, so it cannot race a tick begun before the edit.
    let reloads = || async {
        d.get("/metrics")
            .await
            .1
            .lines()
            .find_map(|l| l.strip_prefix("sortie_config_reloads_total "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    std::fs::write(
        &route_file,
        "route template v2, edited, for {{ ticket.id }}\n",
    )
    .unwrap();
    d.until(
        Duration::from_secs(20),
        "the route's edit reloaded",
        || async { reloads().await >= 1 },
    )
    .await;
    add("3", true);
    d.until(Duration::from_secs(20), "3 done", done("3")).await;
    std::fs::write(
        &stage_file,
        "stage template v2, edited, for {{ ticket.id }}\n",
    )
    .unwrap();
    d.until(
        Duration::from_secs(20),
        "the role file's edit reloaded",
        || async { reloads().await >= 2 },
    )
    .await;
    add("4", false);
    d.until(Duration::from_secs(20), "4 done", done("4")).await;
    d.stop().await;

    let log = std::fs::read_to_string(&prompts).unwrap();
    for expected in [
        "stage template v1 for 1",
        "route template v1 for 2",
        "route template v2, edited, for 3",
        "stage template v2, edited, for 4",
    ] {
        assert!(
            log.contains(expected),
            "{expected:?} not in the prompts:\n{log}"
        );
    }
}

//! The dashboard pages and the run log endpoint, driven in-process through
//! `sortie::daemon::serve` (issue #22; the JSON error envelope of #14).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::switchable::Switchable;
use sortie::tracker::Tracker;

use sortie::config::Config;
use sortie::daemon::{serve, BuildFuture, PipelineFactory, ServeOptions};
use sortie::ledger::{ClaimKey, Ledger, RunPhase, RunRecord, SqliteLedger};
use sortie::pipeline::{Clock, Pipeline, SystemClock};
use sortie::tracker::memory::MemoryTracker;
use tokio::sync::Notify;

/// Three stages; architect runs are slow (they print, then sleep) and capped at one.
pub(crate) fn config_text(dir: &std::path::Path, extra: &str) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: {state}
roles_dir: {roles}
poll_interval_seconds: 1
shutdown_grace_seconds: 0
concurrency: {{max_in_flight: 16, per_role_max_in_flight: 1}}
agent: {{command: ["sh", "-c", "echo working on $$SORTIE_TICKET_TITLE; sleep 30"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
  - {{role: backend, claim_status: design-approved, success_status: code-review, requires_prior_role: architect}}
  - {{role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}}
{extra}"#,
        state = dir.join("state").display(),
        roles = crate::common::repo().join("roles").display(),
    )
}

/// A daemon serving in-process on a free loopback port.
pub(crate) struct Daemon {
    url: String,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<(), sortie::daemon::DaemonError>>,
    http: reqwest::Client,
    pub(crate) ledger: Arc<dyn Ledger>,
}

impl Daemon {
    async fn start(path: std::path::PathBuf, tracker: Arc<dyn Tracker>) -> Daemon {
        Daemon::start_at(path, tracker, Arc::new(SystemClock::default())).await
    }

    /// Serve the config at `path` on `tracker`, the pages' time from `clock`.
    pub(crate) async fn start_at(
        path: std::path::PathBuf,
        tracker: Arc<dyn Tracker>,
        clock: Arc<dyn Clock>,
    ) -> Daemon {
        Daemon::start_with(path, tracker, clock, sortie::daemon::STATE_TIMEOUT).await
    }

    /// Serve as [`Daemon::start_at`], `/api/v1/state` waiting `state_timeout` for the
    /// ledger.
    pub(crate) async fn start_with(
        path: std::path::PathBuf,
        tracker: Arc<dyn Tracker>,
        clock: Arc<dyn Clock>,
        state_timeout: Duration,
    ) -> Daemon {
        let config = Config::load(&path).expect("config");
        let ledger: Arc<dyn Ledger> =
            Arc::new(SqliteLedger::open(&config.ledger_path()).expect("ledger"));
        let for_factory = ledger.clone();
        let factory: PipelineFactory = Arc::new(move |config: Config, wake: Arc<Notify>| {
            let (tracker, ledger) = (tracker.clone(), for_factory.clone());
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
            clock,
            state_timeout,
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
            ledger,
        }
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
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

    /// GET `path` every 100 ms until its body contains `needle`; the last body.
    pub(crate) async fn page_with(&self, path: &str, needle: &str, within: Duration) -> String {
        let end = Instant::now() + within;
        loop {
            let body = decoded(self.get(path).await.1);
            if body.contains(needle) {
                return body;
            }
            assert!(
                Instant::now() < end,
                "{path} never showed {needle:?}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn stop(self) {
        self.stop.notify_one();
        self.task.await.unwrap().expect("daemon stops cleanly");
    }
}

fn ticket(board: &MemoryTracker, id: &str, title: &str, status: &str) {
    let mut t = MemoryTracker::ticket(id, title, status);
    t.url = Some(format!("https://tracker.example/issues/{id}"));
    board.insert(t);
}

/// The JSON error envelope: `{"error": {"code", "message"}}`.
fn error_code(body: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "no message: {body}"
    );
    v["error"]["code"].as_str().expect("a code").to_string()
}

/// `body` with the entities the page's escaping writes decoded (`&#x2f;` is `/`).
pub(crate) fn decoded(body: String) -> String {
    body.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A visible timestamp with fractional seconds (`12:03:04.123`, `…T12:03:04.5Z`).
fn fractional_timestamp(html: &str) -> Option<String> {
    let re = regex::Regex::new(r"\d{2}:\d{2}:\d{2}\.\d+").unwrap();
    re.find(html).map(|m| m.as_str().to_string())
}

/// A board where one architect run is live and everything else waits for a reason the
/// tick gives: the page lists every waiting ticket with its title and reason, links
/// the tracker and the ticket page, counts terminal tickets, and shows the live run's
/// output behind its log link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_every_waiting_ticket_with_why_and_the_live_run_with_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Design the login page", "ready-for-design");
    ticket(&board, "2", "Design the billing page", "ready-for-design");
    ticket(&board, "3", "Design the search box", "ready-for-design");
    ticket(&board, "4", "Build the export", "design-approved");
    ticket(&board, "5", "Shipped already", "done");
    ticket(&board, "6", "Shipped too", "done");
    let d = Daemon::start(path.clone(), board.clone() as Arc<dyn Tracker>).await;
    d.until(Duration::from_secs(15), "one live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let state = d.state().await;
    let live = &state["live_runs"][0];
    let running = live["ticket"].as_str().unwrap().to_string();
    assert_eq!(running, "1", "the first ticket by id runs first: {live}");

    // Wait until the dashboard's board read sees the run (reads are reused ~2 s).
    let page = d
        .page_with("/", "running: architect #1", Duration::from_secs(10))
        .await;
    for title in ["Design the billing page", "Design the search box"] {
        let at = page
            .find(title)
            .unwrap_or_else(|| panic!("{title} missing: {page}"));
        let rest = &page[at..];
        let reason = &rest[..rest.find("</div>").unwrap()];
        assert!(reason.contains("cap: role 1"), "{title}: {reason}");
    }
    let at = page
        .find("Build the export")
        .expect("design-approved ticket listed");
    let rest = &page[at..];
    assert!(
        rest[..rest.find("</div>").unwrap()].contains("prior role architect missing"),
        "{rest}"
    );
    assert!(
        page.contains(r#"href="https://tracker.example/issues/2""#),
        "tracker link"
    );
    assert!(page.contains(r#"href="/tickets/2""#), "ticket page link");
    assert!(
        !page.contains("Shipped already"),
        "terminal tickets are counted, not listed"
    );
    assert!(
        regex::Regex::new(r#"done <span class="count">2</span>"#)
            .unwrap()
            .is_match(&page),
        "terminal count: {page}"
    );
    assert_eq!(fractional_timestamp(&page), None, "{page}");
    assert!(page.contains("<svg id=\"runs-chart\""), "24 h chart");
    assert!(
        page.contains("12:00") || page.contains(":00</text>"),
        "hour labels"
    );

    // The live run: elapsed in human form, its last output, and its log tail.
    let log_url = live["log_url"].as_str().unwrap().to_string();
    assert!(
        page.contains(&format!(r#"href="{log_url}""#)),
        "log link on the page"
    );
    d.until(
        Duration::from_secs(10),
        "the agent's output in its log",
        || async {
            d.get(&log_url)
                .await
                .1
                .contains("working on Design the login page")
        },
    )
    .await;
    let (code, body) = d.get(&log_url).await;
    assert_eq!(code, 200);
    assert!(!body.contains("<html"), "plain text: {body}");
    d.until(
        Duration::from_secs(10),
        "last event in the state",
        || async {
            d.state().await["live_runs"][0]["last_event"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("working on Design the login page"))
        },
    )
    .await;
    let page = decoded(d.get("/?part=body").await.1);
    assert!(
        page.contains("working on Design the login page"),
        "last event on the page"
    );
    assert!(
        !page.contains("<script"),
        "the refreshed part is the body only"
    );

    // The ticket page: per-stage eligibility from the same dry-run plan.
    let (code, ticket_page) = d.get("/tickets/4").await;
    let ticket_page = decoded(ticket_page);
    assert_eq!(code, 200, "{ticket_page}");
    assert!(ticket_page.contains("Build the export"));
    assert!(
        ticket_page.contains("prior role architect has no success block on the ticket"),
        "{ticket_page}"
    );
    assert!(
        ticket_page.contains("not its stage: this stage claims ready-for-design"),
        "{ticket_page}"
    );
    assert_eq!(fractional_timestamp(&ticket_page), None, "{ticket_page}");
    let running_page = decoded(d.get(&format!("/tickets/{running}")).await.1);
    assert!(
        running_page.contains(&format!(r#"href="{log_url}""#)),
        "runs with log links"
    );

    // The API carries the totals and the rate limit (the memory tracker reports none).
    let state = d.state().await;
    assert!(state["usage_today"]["roles"].is_array(), "{state}");
    assert!(state["usage_7_days"]["roles"].is_array(), "{state}");
    assert!(state["rate_limit_remaining"].is_null());
    assert!(live["elapsed_seconds"].is_i64());
    d.stop().await;
}

/// An invalid edit of the config on disk shows a banner naming the file and line on
/// the next refresh of the page's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_edit_shows_a_banner_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    let d = Daemon::start(path.clone(), board).await;
    d.until(Duration::from_secs(10), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;
    assert!(!d.get("/").await.1.contains("config on disk is invalid"));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&path, config_text(dir.path(), "poll_interval_secnds: 3\n")).unwrap();
    let page = d
        .page_with(
            "/?part=body",
            "config on disk is invalid",
            Duration::from_secs(10),
        )
        .await;
    assert!(page.contains("pipeline.yaml"), "{page}");
    assert!(page.contains("poll_interval_secnds"), "{page}");
    assert!(
        regex::Regex::new(r"pipeline\.yaml:1[0-9]")
            .unwrap()
            .is_match(&page),
        "file and line: {page}"
    );
    d.stop().await;
}

/// `GET /runs/{id}/log` serves only logs of runs the ledger knows and only files under
/// `state_root/runs/`: an unknown id is a JSON 404, a ledger row pointing elsewhere
/// (directly or through a symlink) is refused without reading it, and a long log is
/// cut to its last 64 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_logs_are_served_only_for_known_runs_and_only_from_state_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let d = Daemon::start(path, Arc::new(MemoryTracker::new())).await;
    d.until(Duration::from_secs(10), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;

    let (code, body) = d.get("/runs/no-such-run/log").await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(error_code(&body), "unknown_run");
    let (code, body) = d.get("/runs/..%2F..%2Fpipeline.yaml/log").await;
    assert_eq!(code, 404, "{body}");
    assert!(!body.contains("pipeline_stages"), "{body}");

    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP SECRET\n").unwrap();
    let runs = dir.path().join("state").join("runs");
    std::fs::create_dir_all(runs.join("linked")).unwrap();
    std::os::unix::fs::symlink(&secret, runs.join("linked").join("agent.log")).unwrap();
    std::fs::create_dir_all(runs.join("long")).unwrap();
    let mut long = String::new();
    for i in 0..20_000 {
        long.push_str(&format!("line {i:05}\n"));
    }
    std::fs::write(runs.join("long").join("agent.log"), &long).unwrap();
    let record = |id: &str, log: &std::path::Path| RunRecord {
        run_id: id.to_string(),
        key: ClaimKey::new("local:board", "9", "architect"),
        stage: "ready-for-design".into(),
        stage_attempt: 1,
        claimer_id: "test".into(),
        phase: RunPhase::Finished,
        outcome: Some("success".into()),
        reason_code: None,
        log_path: Some(log.display().to_string()),
        started_at: chrono::Utc::now(),
        finished_at: Some(chrono::Utc::now()),
        session_id: None,
        route: None,
        title: None,
        agent: None,
        model: None,
        rate_limits: Vec::new(),
    };
    d.ledger.record_run(&record("outside", &secret)).unwrap();
    d.ledger
        .record_run(&record(
            "dotdot",
            &runs
                .join("long")
                .join("..")
                .join("..")
                .join("..")
                .join("secret.txt"),
        ))
        .unwrap();
    d.ledger
        .record_run(&record("linked", &runs.join("linked").join("agent.log")))
        .unwrap();
    d.ledger
        .record_run(&record("long", &runs.join("long").join("agent.log")))
        .unwrap();
    for id in ["outside", "dotdot", "linked"] {
        let (code, body) = d.get(&format!("/runs/{id}/log")).await;
        assert_eq!(code, 404, "{id}: {body}");
        assert_eq!(error_code(&body), "no_log", "{id}");
        assert!(!body.contains("TOP SECRET"), "{id}: {body}");
    }
    let (code, body) = d.get("/runs/long/log").await;
    assert_eq!(code, 200);
    assert!(body.len() <= 64 * 1024, "{} bytes", body.len());
    assert!(body.len() > 60 * 1024, "{} bytes", body.len());
    assert!(
        body.starts_with("line "),
        "starts on a whole line: {:?}",
        &body[..20]
    );
    assert!(body.ends_with("line 19999\n"));
    assert!(!body.contains("line 00000"));

    // A finished run's follow ends after its last bytes instead of hanging.
    let followed = tokio::time::timeout(Duration::from_secs(5), d.get("/runs/long/log?follow=1"))
        .await
        .expect("a finished run's follow ends");
    assert!(followed.1.ends_with("line 19999\n"));
    d.stop().await;
}

/// Every API error is the JSON envelope with its status (#14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_are_json_envelopes_with_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(
        &path,
        config_text(
            dir.path(),
            "http: {token_env: SORTIE_TEST_DASHBOARD_TOKEN}\n",
        ),
    )
    .unwrap();
    std::env::set_var("SORTIE_TEST_DASHBOARD_TOKEN", "s3cret");
    let d = Daemon::start(path, Arc::new(MemoryTracker::new())).await;
    d.until(Duration::from_secs(10), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;
    let r = d.http.get(format!("{}/api/v1/tickets/404", d.url));
    let r = r.bearer_auth("s3cret").send().await.unwrap();
    let code = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!((code, error_code(&body).as_str()), (404, "unknown_ticket"));
    // Regression (#52, 14): the page of an unknown ticket is a page, not raw JSON.
    let r = d.http.get(format!("{}/tickets/404", d.url));
    let r = r.bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("text/html"), "{kind}");
    let page = decoded(r.text().await.unwrap());
    assert!(page.contains("<h1>No such ticket</h1>"), "{page}");
    assert!(page.contains("no ticket 404"), "{page}");
    assert!(page.contains(r#"href="/""#), "a way back: {page}");
    let (code, body) = d.get("/no/such/page").await;
    assert_eq!((code, error_code(&body).as_str()), (404, "not_found"));
    let r = d
        .http
        .post(format!("{}/api/v1/refresh", d.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(error_code(&r.text().await.unwrap()), "unauthorized");
    // The run log is behind the same token.
    let (code, body) = d.get("/runs/anything/log").await;
    assert_eq!((code, error_code(&body).as_str()), (401, "unauthorized"));
    let r = d
        .http
        .get(format!("{}/runs/anything/log", d.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404, "with the token: unknown run");
    let r = d
        .http
        .post(format!("{}/api/v1/refresh", d.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["queued"], true);
    let r = d
        .http
        .post(format!("{}/hooks/github", d.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_eq!(error_code(&r.text().await.unwrap()), "not_configured");
    d.stop().await;
}

/// At 1,000 tickets the page stays readable: a column lists its first 25 tickets
/// (the running one first) and counts the rest; the page answers in reasonable time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tickets_collapse_to_counts_with_the_first_ones_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    for i in 1..=1000 {
        ticket(
            &board,
            &i.to_string(),
            &format!("Card number {i}"),
            "ready-for-design",
        );
    }
    let d = Daemon::start(path, board).await;
    d.until(Duration::from_secs(15), "one live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let page = d
        .page_with("/", "running: architect #1", Duration::from_secs(10))
        .await;
    // A fresh read (not the cached one) is what a refresh costs every few seconds.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let started = Instant::now();
    let (code, body) = d.get("/?part=body").await;
    let took = started.elapsed();
    assert_eq!(code, 200);
    eprintln!(
        "GET /?part=body with 1,000 tickets: {took:?}, {} bytes",
        body.len()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(page.contains(r#"ready-for-design <span class="count">1000</span>"#));
    assert_eq!(page.matches(r#"class="ticket "#).count(), 25, "25 listed");
    assert!(page.contains("and 975 more"), "the rest counted");
    assert!(
        page.contains("Card number 1<"),
        "the running one is listed first"
    );
    assert!(!page.contains("Card number 999<"));
    assert!(page.len() < 200_000, "{} bytes", page.len());
    d.stop().await;
}

/// A held ticket and one whose retry is not due say so on the board and on their
/// pages, in the words of the tick's plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_tickets_and_retries_not_due_show_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "7", "Design the unclear thing", "ready-for-design");
    ticket(&board, "8", "Design the flaky thing", "ready-for-design");
    let config = Config::load(&path).unwrap();
    {
        let ledger = SqliteLedger::open(&config.ledger_path()).unwrap();
        let now = chrono::Utc::now();
        ledger
            .put_hold(&sortie::ledger::Hold {
                key: ClaimKey::new("memory", "7", "architect"),
                status: "ready-for-design".into(),
                reason_code: "spec.unclear".into(),
                created_at: now,
                ticket_updated_at: None,
            })
            .unwrap();
        ledger
            .schedule_retry(&sortie::ledger::RetryEntry {
                key: ClaimKey::new("memory", "8", "architect"),
                stage: "ready-for-design".into(),
                failed_attempt: 1,
                due_at: now + chrono::Duration::seconds(600),
                reason_code: "tests.failed".into(),
            })
            .unwrap();
    }
    let d = Daemon::start(path, board).await;
    let page = d
        .page_with("/", "held: spec.unclear", Duration::from_secs(10))
        .await;
    let at = page.find("Design the flaky thing").unwrap();
    let reason = &page[at..at + page[at..].find("</div>").unwrap()];
    assert!(
        regex::Regex::new(r"retry due in (9|10)m \d+s \(tests\.failed\)")
            .unwrap()
            .is_match(reason),
        "{reason}"
    );
    let ticket = decoded(d.get("/tickets/8").await.1);
    assert!(
        ticket.contains("retry of architect after attempt 1 failed (tests.failed)"),
        "{ticket}"
    );
    assert!(
        ticket.contains(">in 9m") || ticket.contains(">in 10m"),
        "{ticket}"
    );
    let ticket = decoded(d.get("/tickets/7").await.1);
    assert!(
        ticket.contains("held for architect in ready-for-design after spec.unclear"),
        "{ticket}"
    );
    d.stop().await;
}

/// `?follow=1` on a live run streams the lines the agent writes after the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_a_live_log_streams_new_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    let text = config_text(dir.path(), "").replace(
        "echo working on $$SORTIE_TICKET_TITLE; sleep 30",
        "echo first line; sleep 2; echo second line; sleep 30",
    );
    std::fs::write(&path, text).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Stream me", "ready-for-design");
    let d = Daemon::start(path, board).await;
    d.until(Duration::from_secs(15), "one live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let log_url = d.state().await["live_runs"][0]["log_url"]
        .as_str()
        .unwrap()
        .to_string();
    let log = d
        .page_with(&log_url, "first line", Duration::from_secs(5))
        .await;
    assert!(
        !log.contains("second line"),
        "too late to see the stream: {log}"
    );
    let mut response = d
        .http
        .get(format!("{}{log_url}?follow=1", d.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut seen = String::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !seen.contains("second line") {
        assert!(Instant::now() < end, "no second line streamed: {seen:?}");
        match tokio::time::timeout(Duration::from_secs(10), response.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("stream ended or failed: {other:?}; seen {seen:?}"),
        }
    }
    assert!(seen.starts_with("first line\n"), "{seen:?}");
    drop(response);
    d.stop().await;
}

/// The banners: not ready while the tracker cannot be reached at start, gone once it
/// answers, and "the last tick failed" with the reason when a later tick fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn banners_say_when_the_daemon_is_not_ready_and_when_the_last_tick_failed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(Switchable::new(true));
    let d = Daemon::start(path, board.clone()).await;
    let page = d
        .page_with("/", "the daemon is not ready", Duration::from_secs(10))
        .await;
    assert!(page.contains("connection refused (test)"), "{page}");
    assert!(page.contains("the board is not available yet"), "{page}");

    board.down.store(false, Ordering::SeqCst);
    d.until(Duration::from_secs(10), "ready", || async {
        d.get("/readyz").await.0 == 200
    })
    .await;
    let page = d.get("/?part=body").await.1;
    assert!(!page.contains("not ready"), "{page}");
    assert!(!page.contains("the last tick failed"), "{page}");

    board.down.store(true, Ordering::SeqCst);
    let page = d
        .page_with(
            "/?part=body",
            "the last tick failed",
            Duration::from_secs(10),
        )
        .await;
    assert!(page.contains("connection refused (test)"), "{page}");
    assert_eq!(fractional_timestamp(&page), None, "{page}");
    board.down.store(false, Ordering::SeqCst);
    d.stop().await;
}

/// Architect, then backend, as [`stepped_claude_config`] stages them.
const TWO_STAGES: &str = "  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - {role: backend, claim_status: design-approved, success_status: done, requires_prior_role: architect}
";

/// A config whose agents run the fake Claude Code CLI, printing its recorded stream
/// (`stream`: a file of tests/fixtures/agents, default its own) one event at a time as
/// the test creates `steps/<n>`; `stages` are the `pipeline_stages` entries.
fn stepped_claude_config(dir: &std::path::Path, stream: Option<&str>, stages: &str) -> String {
    let stream = stream
        .map(|s| format!("FAKE_STREAM: {s}, "))
        .unwrap_or_default();
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: {state}
roles_dir: {roles}
poll_interval_seconds: 1
shutdown_grace_seconds: 0
agent:
  preset: claude-code
  command: ["{fake}"]
  timeout_seconds: 120
  env: {{FAKE_SCENARIO: stepped, {stream}FAKE_STEP_DIR: "{steps}"}}
pipeline_stages:
{stages}"#,
        state = dir.join("state").display(),
        roles = crate::common::repo().join("roles").display(),
        fake = crate::common::repo()
            .join("tests/fixtures/agents/fake-claude")
            .display(),
        steps = dir.join("steps").display(),
    )
}

/// Issue #22 / #14: while a Claude Code run streams, `/api/v1/state` and the dashboard
/// show its last event, its turns and tokens growing, and its cost once reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_shows_its_last_event_turns_and_tokens_growing_as_it_streams() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("steps")).unwrap();
    let step = |n: u32| std::fs::write(dir.path().join("steps").join(n.to_string()), "").unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, stepped_claude_config(dir.path(), None, TWO_STAGES)).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Design the login page", "ready-for-design");
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    d.until(Duration::from_secs(15), "one live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let live = || async { d.state().await["live_runs"][0].clone() };
    assert!(
        live().await["turns"].is_null(),
        "no turn before the stream says so"
    );

    step(1);
    d.until(Duration::from_secs(10), "the init event", || async {
        live().await["last_event"]["kind"] == "init"
    })
    .await;
    step(2);
    d.until(Duration::from_secs(10), "the first turn", || async {
        live().await["turns"] == 1
    })
    .await;
    let first = live().await;
    assert_eq!(first["last_event"]["kind"], "message", "{first}");
    assert_eq!(first["last_event"]["text"], "I'll write the file.");
    let first_tokens = first["tokens"].as_u64().expect("tokens so far");
    assert!(first_tokens > 0, "{first}");
    assert!(
        first["cost_usd"].is_null(),
        "Claude Code reports cost at the end"
    );
    let page = decoded(
        d.page_with(
            "/?part=body",
            "I'll write the file.",
            Duration::from_secs(10),
        )
        .await,
    );
    let row = &page[page.find(r#"<tr data-ticket="1">"#).expect("live row")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("message"), "{row}");
    assert!(
        row.contains(&format!("<td>1</td><td>{first_tokens}</td>")),
        "turns and tokens on the row: {row}"
    );

    step(3);
    step(4);
    step(5);
    d.until(Duration::from_secs(10), "the second turn", || async {
        live().await["turns"] == 2
    })
    .await;
    let second = live().await;
    assert!(
        second["tokens"].as_u64().unwrap() > first_tokens,
        "tokens grow: {second}"
    );
    assert!(second["last_event"]["text"]
        .as_str()
        .unwrap()
        .starts_with("MOCK-CLAUDE-DONE"));

    // The result ends the run; it is handed off and listed with where it went.
    step(6);
    d.until(Duration::from_secs(15), "the run to end", || async {
        d.state().await["live_runs"].as_array().map_or(1, Vec::len) == 0
    })
    .await;
    let page = decoded(
        d.page_with("/?part=body", "design-approved", Duration::from_secs(10))
            .await,
    );
    let recent = &page[page.find(r#"id="recent""#).unwrap()..];
    assert!(
        recent.contains("ready-for-design → design-approved"),
        "{recent}"
    );
    d.stop().await;
}

/// Issue #22: recent handoffs and failures come from the ledger's run history, so a
/// restarted daemon still lists them (where each went, its reason), with relative times
/// and the exact time on hover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_handoffs_and_failures_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("steps")).unwrap();
    for n in 1..=6 {
        std::fs::write(dir.path().join("steps").join(n.to_string()), "").unwrap();
    }
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, stepped_claude_config(dir.path(), None, TWO_STAGES)).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Design the login page", "ready-for-design");
    ticket(&board, "2", "Design the billing page", "design-approved");
    let d = Daemon::start(path.clone(), board.clone() as Arc<dyn Tracker>).await;
    d.until(
        Duration::from_secs(20),
        "ticket 1 handed to backend",
        || async { board.get("1").await.is_ok_and(|t| t.status == "done") },
    )
    .await;
    // A failure of another process (a cron tick), five minutes ago.
    let finished = chrono::Utc::now() - chrono::Duration::minutes(5);
    d.ledger
        .record_run(&RunRecord {
            run_id: "r-old-failure".into(),
            key: ClaimKey::new(board.name(), "2", "backend"),
            stage: "design-approved".into(),
            stage_attempt: 1,
            claimer_id: "cron".into(),
            phase: RunPhase::Finished,
            outcome: Some("failure".into()),
            reason_code: Some("tests.failed".into()),
            log_path: None,
            started_at: finished - chrono::Duration::minutes(2),
            finished_at: Some(finished),
            session_id: None,
            route: None,
            title: None,
            agent: None,
            model: None,
            rate_limits: Vec::new(),
        })
        .unwrap();
    d.stop().await;

    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    let state = d.state().await;
    assert_eq!(
        state["recent_runs"].as_array().map(Vec::len),
        Some(0),
        "the restarted daemon saw no run end itself: {state}"
    );
    let page = decoded(
        d.page_with("/?part=body", "tests.failed", Duration::from_secs(10))
            .await,
    );
    let recent = &page[page.find(r#"id="recent""#).unwrap()..];
    let recent = &recent[..recent.find("</table>").unwrap()];
    assert!(
        recent.contains("ready-for-design → design-approved"),
        "architect's handoff: {recent}"
    );
    assert!(
        recent.contains("design-approved → done"),
        "backend's: {recent}"
    );
    let failure = &recent[recent.find("tests.failed").unwrap().saturating_sub(400)..];
    let exact = format!(r#"title="{}""#, finished.format("%Y-%m-%d %H:%M:%S UTC"));
    assert!(failure.contains(&exact), "exact time on hover: {failure}");
    assert!(failure.contains(">5 min ago<"), "relative time: {failure}");
    assert!(
        failure.contains("Design the billing page"),
        "title: {failure}"
    );
    assert_eq!(fractional_timestamp(recent), None);
    d.stop().await;
}

/// Issue #22: with `http.token_env` set, ticket pages and run logs are refused without
/// the token (401), open with the bearer token, and open for a browser that logged in
/// once: `POST /login` sets an HttpOnly, SameSite=Strict cookie that is not the token.
/// The cookie does not authorize `POST /api/v1/refresh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_ticket_pages_and_logs_open_after_a_login_and_stay_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(
        &path,
        config_text(dir.path(), "http: {token_env: SORTIE_TEST_LOGIN_TOKEN}\n"),
    )
    .unwrap();
    std::env::set_var("SORTIE_TEST_LOGIN_TOKEN", "t0ken-value");
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Design the login page", "ready-for-design");
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    d.until(Duration::from_secs(15), "a live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let log_url = d.state().await["live_runs"][0]["log_url"]
        .as_str()
        .unwrap()
        .to_string();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: &str, cookie: Option<&str>, html: bool| {
        let mut r = http.get(format!("{}{path}", d.url));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        if html {
            r = r.header("accept", "text/html,application/xhtml+xml");
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    for path in ["/tickets/1", log_url.as_str(), "/api/v1/tickets/1"] {
        let (code, body) = get(path, None, false).await;
        assert_eq!(
            (code, error_code(&body).as_str()),
            (401, "unauthorized"),
            "{path}"
        );
    }
    let (code, body) = get("/tickets/1", None, true).await;
    assert_eq!(code, 401, "a browser is refused too");
    assert!(
        body.contains(r#"action="/login""#),
        "with the login form: {body}"
    );
    assert!(!body.contains("Design the login page"), "{body}");
    let (_, page) = get("/", None, true).await;
    assert!(
        page.contains(r#"href="/login?next=/""#),
        "the dashboard offers a login"
    );

    let login = |token: &str, next: &str| {
        http.post(format!("{}/login", d.url))
            .form(&[("token", token), ("next", next)])
            .send()
    };
    let wrong = login("nope", "/").await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    let r = login("t0ken-value", "//evil.example/").await.unwrap();
    assert_eq!(r.headers()["location"], "/", "never sent off this site");
    let r = login("t0ken-value", "/tickets/1").await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/tickets/1");
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    assert!(
        !set_cookie.contains("t0ken-value"),
        "the cookie is not the token"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();

    let (code, body) = get("/tickets/1", Some(&cookie), true).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("Design the login page"));
    d.until(
        Duration::from_secs(10),
        "the log through the cookie",
        || async {
            let (code, body) = get(&log_url, Some(&cookie), false).await;
            code == 200 && body.contains("working on Design the login page")
        },
    )
    .await;
    let (_, page) = get("/", Some(&cookie), true).await;
    assert!(page.contains(r#"action="/logout""#), "logged in: {page}");
    let (code, _) = get("/tickets/1", Some("sortie_session=forged"), false).await;
    assert_eq!(code, 401, "a forged cookie is refused");
    let r = http
        .post(format!("{}/api/v1/refresh", d.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        401,
        "the cookie reads, it does not act"
    );
    let r = http
        .get(format!("{}/tickets/1", d.url))
        .bearer_auth("t0ken-value")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "the bearer token still works");
    d.stop().await;
}

/// Issue #22: totals by role for today and the last 7 days (runs, tokens, cost) and the
/// 24 h chart come from run history: a run of 10 days ago counts nowhere, one of 3 days
/// ago only in the week, one of a minute ago everywhere; a run without a cost marks
/// the cost as a lower bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_by_role_and_the_chart_come_from_run_history() {
    use sortie::ledger::RunUsage;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    let now = chrono::Utc::now();
    // "Today" is since 00:00 UTC: right after midnight, a minute ago is yesterday.
    let recent = (now - chrono::Duration::minutes(1))
        .max(now.date_naive().and_hms_opt(0, 0, 0).unwrap().and_utc());
    let seed = |id: &str, role: &str, at: chrono::DateTime<chrono::Utc>, tokens: u64, cost| {
        d.ledger
            .record_run(&RunRecord {
                run_id: id.into(),
                key: ClaimKey::new(board.name(), id, role),
                stage: "ready-for-design".into(),
                stage_attempt: 1,
                claimer_id: "cron".into(),
                phase: RunPhase::Finished,
                outcome: Some("success".into()),
                reason_code: None,
                log_path: None,
                started_at: at,
                finished_at: Some(at),
                session_id: None,
                route: None,
                title: None,
                agent: None,
                model: None,
                rate_limits: Vec::new(),
            })
            .unwrap();
        d.ledger
            .record_usage(&RunUsage {
                run_id: id.into(),
                key: ClaimKey::new(board.name(), id, role),
                tokens_in: tokens,
                tokens_out: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
                reasoning_tokens: 0,
                cost_usd: cost,
                recorded_at: at,
                agent: None,
                model: None,
            })
            .unwrap();
    };
    seed("10", "architect", recent, 1_500, Some(0.25));
    seed(
        "11",
        "architect",
        now - chrono::Duration::days(3),
        20_000,
        Some(1.0),
    );
    seed(
        "12",
        "architect",
        now - chrono::Duration::days(10),
        999_999,
        Some(9.0),
    );
    seed("13", "qa", now - chrono::Duration::days(2), 700, None);
    // A `command` agent reports no usage at all: its run has no usage row.
    d.ledger
        .record_run(&RunRecord {
            run_id: "14".into(),
            key: ClaimKey::new(board.name(), "14", "backend"),
            stage: "design-approved".into(),
            stage_attempt: 1,
            claimer_id: "cron".into(),
            phase: RunPhase::Finished,
            outcome: Some("success".into()),
            reason_code: None,
            log_path: None,
            started_at: now - chrono::Duration::days(2),
            finished_at: Some(now - chrono::Duration::days(2)),
            session_id: None,
            route: None,
            title: None,
            agent: None,
            model: None,
            rate_limits: Vec::new(),
        })
        .unwrap();
    let page = decoded(
        d.page_with("/?part=body", "<td>architect</td>", Duration::from_secs(10))
            .await,
    );
    let totals = &page[page.find(r#"id="totals""#).unwrap()..];
    let totals = &totals[..totals.find("</table>").unwrap()];
    assert!(
        totals.contains(
            "<tr><td>architect</td><td>1</td><td>1500</td><td>$0.25</td>\
             <td>2</td><td>21.5k</td><td>$1.25</td></tr>"
        ),
        "{totals}"
    );
    assert!(
        totals.contains("<tr><td>qa</td><td>0</td><td>0</td><td>$0.00</td><td>1</td><td>700</td><td>unknown</td></tr>"),
        "#30: an agent that reports no cost has an unknown cost, not $0.00: {totals}"
    );
    assert!(
        totals.contains(
            "<tr><td>backend</td><td>0</td><td>0</td><td>$0.00</td><td>1</td><td>unknown</td><td>unknown</td></tr>"
        ),
        "#30, #52 item 7: nor one that reports no usage at all, whose tokens are unknown too: {totals}"
    );
    assert!(
        page.contains("1 runs, by the hour they started"),
        "only the run of a minute ago is in the last 24 hours: {page}"
    );
    let state = d.state().await;
    let week = state["usage_7_days"]["roles"].as_array().unwrap();
    let architect = week.iter().find(|r| r["role"] == "architect").unwrap();
    assert_eq!(architect["runs"], 2, "{state}");
    assert_eq!(architect["tokens_in"], 21_500);
    d.stop().await;
}

/// The three stages of [`config_text`], each with a failure status (`design-blocked`,
/// `build-failed`, `qa-failed`).
fn config_with_failures(dir: &std::path::Path, agent: &str) -> String {
    config_text(dir, "")
        .replace(
            "success_status: design-approved}",
            "success_status: design-approved, failure_status: design-blocked}",
        )
        .replace(
            "success_status: code-review,",
            "success_status: code-review, failure_status: build-failed,",
        )
        .replace(
            "success_status: done,",
            "success_status: done, failure_status: qa-failed,",
        )
        .replace("echo working on $$SORTIE_TICKET_TITLE; sleep 30", agent)
}

/// The `<section>` of the column `status`.
fn column<'p>(page: &'p str, status: &str) -> &'p str {
    let start = page
        .find(&format!(r#"data-status="{status}""#))
        .unwrap_or_else(|| panic!("no column {status}: {page}"));
    let start = page[..start].rfind("<section").unwrap();
    let end = start + page[start..].find("</section>").unwrap();
    &page[start..end]
}

/// Regression (#30): a ticket on a status no stage knows (a typo) is shown in an
/// "other statuses" column with the reason, and counted: the board said 6 tickets while
/// it held 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_on_a_status_no_stage_knows_is_shown_with_why_and_counted() {
    use sortie::tracker::local::{LocalBoard, NewTicket};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = LocalBoard::init(&dir.path().join("board")).unwrap();
    let add = |title: &str, status: &str| {
        board
            .add_ticket(NewTicket {
                title: title.into(),
                status: status.into(),
                priority: None,
                labels: Vec::new(),
                body: String::new(),
            })
            .unwrap()
            .id
    };
    for n in 1..=6 {
        add(&format!("Shipped {n}"), "done");
    }
    let typo = add("Design the typo page", "ready-for-desing");
    let d = Daemon::start(path, Arc::new(board) as Arc<dyn Tracker>).await;
    let page = d
        .page_with(
            "/?part=body",
            r#"done <span class="count">6</span>"#,
            Duration::from_secs(10),
        )
        .await;
    assert!(page.contains("7 tickets"), "every ticket counted: {page}");
    let other = column(&page, "other statuses");
    assert!(
        other.contains(&format!("#{typo} Design the typo page")),
        "{other}"
    );
    assert!(
        other.contains(
            "status ready-for-desing is not in the config; did you mean ready-for-design?"
        ),
        "{other}"
    );
    d.stop().await;
}

/// Regression (#30): a card on a stage's failure status says what failed and what
/// releases it, not "no stage claims it"; failure columns are set apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_card_says_why_it_failed_and_what_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_with_failures(dir.path(), "true")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "5", "Design the refunds page", "design-blocked");
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    let finished = chrono::Utc::now() - chrono::Duration::minutes(5);
    d.ledger
        .record_run(&RunRecord {
            run_id: "r-failed".into(),
            key: ClaimKey::new(board.name(), "5", "architect"),
            stage: "ready-for-design".into(),
            stage_attempt: 3,
            claimer_id: "cron".into(),
            phase: RunPhase::Finished,
            outcome: Some("failure".into()),
            reason_code: Some("spec.unclear".into()),
            log_path: None,
            started_at: finished - chrono::Duration::minutes(2),
            finished_at: Some(finished),
            session_id: None,
            route: None,
            title: None,
            agent: None,
            model: None,
            rate_limits: Vec::new(),
        })
        .unwrap();
    let page = decoded(
        d.page_with(
            "/?part=body",
            "Design the refunds page",
            Duration::from_secs(10),
        )
        .await,
    );
    let blocked = column(&page, "design-blocked");
    assert!(blocked.contains(r#"class="column failure""#), "{blocked}");
    assert!(
        blocked.contains("architect failed: spec.unclear; move to ready-for-design to re-run"),
        "{blocked}"
    );
    assert!(!blocked.contains("no stage claims it"), "{blocked}");
    // The ticket's page says the same on the stage that failed.
    let (status, page) = d.get("/tickets/5").await;
    assert_eq!(status, 200, "{page}");
    let page = decoded(page);
    let row = page
        .split("<tr>")
        .find(|r| r.contains("<td>architect</td>"))
        .unwrap_or_else(|| panic!("no architect row: {page}"));
    assert!(
        row.contains("architect failed: spec.unclear; move to ready-for-design to re-run"),
        "{row}"
    );
    d.stop().await;
}

/// A daemon over a one-ticket board (#8 "Export the invoices") whose pipeline ran it to
/// `done`; the config's path, for a restart.
async fn invoices_done(dir: &std::path::Path) -> (Daemon, Arc<MemoryTracker>, std::path::PathBuf) {
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, config_with_failures(dir, "true")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "8", "Export the invoices", "ready-for-design");
    let d = Daemon::start(path.clone(), board.clone() as Arc<dyn Tracker>).await;
    d.until(Duration::from_secs(20), "ticket 8 done", || async {
        board.get("8").await.is_ok_and(|t| t.status == "done")
    })
    .await;
    (d, board, path)
}

/// The rows of the dashboard's recent handoffs, once the last one (code-review → done) shows.
async fn recent_handoff_rows(d: &Daemon) -> Vec<String> {
    let page = decoded(
        d.page_with("/?part=body", "code-review → done", Duration::from_secs(10))
            .await,
    );
    let recent = &page[page.find(r#"id="recent""#).unwrap()..];
    let recent = &recent[..recent.find("</table>").unwrap()];
    let rows: Vec<String> = recent.split("<tr>").skip(2).map(str::to_string).collect();
    assert_eq!(rows.len(), 3, "three handoffs: {recent}");
    rows
}

/// Regression (#30): recent handoffs show the title the run knew, also for a ticket no
/// longer on the pipeline's columns (done); the note does not repeat the status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_handoffs_keep_the_title_of_tickets_that_left_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _board, _) = invoices_done(dir.path()).await;
    for row in recent_handoff_rows(&d).await {
        assert!(row.contains("#8 Export the invoices"), "title: {row}");
        assert!(
            row.contains(r#"<td class="small"></td>"#),
            "no note repeating the write-back: {row}"
        );
    }
    d.stop().await;
}

/// Regression (#30): the title of a finished run survives a restart of the daemon for a
/// ticket the board no longer lists (moved to a status the config names nowhere): the run
/// recorded it in the ledger when it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_handoffs_keep_the_title_after_a_restart_when_the_board_no_longer_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let (d, board, path) = invoices_done(dir.path()).await;
    d.stop().await;
    board.set_status("8", "archived");

    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    for row in recent_handoff_rows(&d).await {
        assert!(row.contains("#8 Export the invoices"), "title: {row}");
    }
    d.stop().await;
}

/// Issue #34: a question an agent asked on a ticket is listed with its age, a link to
/// the ticket and the comments that do not answer it; `/api/v1/state` carries it, and
/// a person's answer takes it off the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_questions_are_listed_with_their_age_and_a_link_to_the_ticket() {
    use sortie::block::question::{render_question_comment, QuestionBlock};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "7", "Export to CSV", "ready-for-design");
    let question = QuestionBlock {
        question_id: "architect-1-q1".into(),
        role: "architect".into(),
        stage_attempt: 1,
        idempotency_key: "q".repeat(64),
        question: "Which API should the export use?".into(),
        options: vec!["REST v2".into(), "GraphQL".into()],
        default: None,
        deadline: None,
        context: String::new(),
    };
    board.add_comment("7", "sortie", &render_question_comment(&question));
    board.add_comment("7", "sortie", "/answer 2");
    let d = Daemon::start(path, board.clone()).await;
    let page = d
        .page_with("/", "<code>architect-1-q1</code>", Duration::from_secs(10))
        .await;
    // The ticket's card on the board says why it waits, too.
    assert!(
        page[..page.find(r#"<table id="questions">"#).unwrap()]
            .contains("waiting for an answer to architect-1-q1"),
        "{page}"
    );
    let at = page
        .find(r#"<table id="questions">"#)
        .expect("questions table");
    let table = &page[at..at + page[at..].find("</table>").unwrap()];
    assert!(table.contains(r#"href="/tickets/7""#), "{table}");
    assert!(table.contains("Export to CSV"), "{table}");
    assert!(table.contains("just now"), "{table}");
    assert!(
        table.contains("sortie's own comment is not an answer"),
        "{table}"
    );
    let state = d.state().await;
    let waiting = &state["waiting_questions"];
    assert_eq!(waiting[0]["ticket"], "7", "{state:#}");
    assert_eq!(waiting[0]["question_id"], "architect-1-q1", "{state:#}");
    assert_eq!(waiting[0]["role"], "architect", "{state:#}");
    assert!(waiting[0]["asked_at"].is_string(), "{state:#}");

    // Answered: the architect runs (a slow agent), and the question leaves the list.
    board.add_comment("7", "ana", "/answer 2");
    d.page_with(
        "/",
        "no question waits for an answer",
        Duration::from_secs(10),
    )
    .await;
    d.stop().await;
}

/// Regression (#52, 11): the dashboard's waiting table, the ticket's card and the
/// ticket's page show the question and its options, not only its id, escaped like all
/// text a ticket brings; `/api/v1/state` carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_question_shows_its_text_and_options_escaped_on_the_dashboard_and_its_page() {
    use sortie::block::question::{render_question_comment, QuestionBlock};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "7", "Export to CSV", "ready-for-design");
    let question = QuestionBlock {
        question_id: "architect-1-q1".into(),
        role: "architect".into(),
        stage_attempt: 1,
        idempotency_key: "q".repeat(64),
        question: "Which API should the <b>export</b> use?".into(),
        options: vec!["REST v2".into(), "<i>GraphQL</i>".into()],
        default: None,
        deadline: None,
        context: String::new(),
    };
    board.add_comment("7", "sortie", &render_question_comment(&question));
    let d = Daemon::start(path, board.clone()).await;
    d.page_with("/", "<code>architect-1-q1</code>", Duration::from_secs(10))
        .await;
    let (_, raw) = d.get("/").await;
    assert!(!raw.contains("<b>export</b>"), "escaped: {raw}");
    assert!(!raw.contains("<i>GraphQL"), "escaped: {raw}");
    let at = raw
        .find(r#"<table id="questions">"#)
        .expect("questions table");
    let table = &raw[at..at + raw[at..].find("</table>").unwrap()];
    assert!(
        table.contains("Which API should the &lt;b&gt;export&lt;&#x2f;b&gt; use?"),
        "{table}"
    );
    assert!(table.contains("<li>REST v2</li>"), "{table}");
    assert!(
        table.contains("<li>&lt;i&gt;GraphQL&lt;&#x2f;i&gt;</li>"),
        "{table}"
    );
    // The card says what it waits for, in short.
    let card = &raw[..at];
    assert!(
        decoded(card.to_string()).contains(
            "waiting for an answer to architect-1-q1: Which API should the <b>export</b> use?"
        ),
        "{card}"
    );

    let (code, page) = d.get("/tickets/7").await;
    assert_eq!(code, 200, "{page}");
    assert!(!page.contains("<b>export</b>"), "escaped: {page}");
    let at = page
        .find(r#"data-question="architect-1-q1""#)
        .expect("question shown");
    let shown = &page[at..at + page[at..].find("</div>").unwrap()];
    assert!(
        shown.contains("Which API should the &lt;b&gt;export&lt;&#x2f;b&gt; use?"),
        "{shown}"
    );
    assert!(shown.contains("<li>REST v2</li>"), "{shown}");
    assert!(shown.contains("/answer 2"), "how to answer: {shown}");

    let state = d.state().await;
    let waiting = &state["waiting_questions"][0];
    assert_eq!(
        waiting["question"],
        "Which API should the <b>export</b> use?"
    );
    assert_eq!(
        waiting["options"],
        serde_json::json!(["REST v2", "<i>GraphQL</i>"])
    );
    d.stop().await;
}

/// Regression (#52, 14): the ticket page gives each stage's reason once (it gave the
/// short reason, then the tick's sentence saying the same), and a board with no forge
/// (no `reactions:`) gets no empty "Pull request" and "Reactions" sections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticket_page_says_a_reason_once_and_has_no_pull_request_sections_without_a_forge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path(), "")).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "7", "Design the unclear thing", "ready-for-design");
    let config = Config::load(&path).unwrap();
    SqliteLedger::open(&config.ledger_path())
        .unwrap()
        .put_hold(&sortie::ledger::Hold {
            key: ClaimKey::new("memory", "7", "architect"),
            status: "ready-for-design".into(),
            reason_code: "spec.unclear".into(),
            created_at: chrono::Utc::now(),
            ticket_updated_at: None,
        })
        .unwrap();
    let d = Daemon::start(path, board).await;
    let page = d
        .page_with(
            "/tickets/7",
            "held after final failure",
            Duration::from_secs(10),
        )
        .await;
    let at = page.find(r#"<table id="eligibility">"#).unwrap();
    let eligibility = &page[at..at + page[at..].find("</table>").unwrap()];
    assert_eq!(
        eligibility.matches("spec.unclear").count(),
        1,
        "the reason once: {eligibility}"
    );
    assert!(!page.contains("<h2>Pull request</h2>"), "{page}");
    assert!(!page.contains(r#"id="pull-request""#), "{page}");
    assert!(!page.contains("<h2>Reactions</h2>"), "{page}");
    d.stop().await;
}

/// Issue #39 item 14 (Symphony 17, state snapshot): `/api/v1/state` carries the agents'
/// rate limits (live from the run's stream, then from run history once it ends, added
/// up per agent and limit), `seconds_running` (the runs going now plus the runs that
/// ended) and the retry queue with each entry's ticket, attempt, due time and reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_snapshot_has_rate_limits_seconds_running_and_the_retry_queue() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("steps")).unwrap();
    let step = |n: u32| std::fs::write(dir.path().join("steps").join(n.to_string()), "").unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, stepped_claude_config(
            dir.path(),
            Some("claude-rate-limits.jsonl"),
            "  - {role: architect, claim_status: ready-for-design, success_status: design-approved}\n",
        )).unwrap();
    let board = Arc::new(MemoryTracker::new());
    ticket(&board, "1", "Design the login page", "ready-for-design");
    ticket(&board, "9", "Design the flaky thing", "ready-for-design");
    let due = chrono::DateTime::parse_from_rfc3339("2099-01-01T10:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;
    d.ledger
        .schedule_retry(&sortie::ledger::RetryEntry {
            key: ClaimKey::new("memory", "9", "architect"),
            stage: "ready-for-design".into(),
            failed_attempt: 2,
            due_at: due,
            reason_code: "tests.failed".into(),
        })
        .unwrap();
    d.until(Duration::from_secs(15), "one live run", || async {
        d.state().await["live_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;

    // Init, a message, then the first rate-limit report.
    for n in 1..=3 {
        step(n);
    }
    d.until(
        Duration::from_secs(10),
        "the first rate-limit report",
        || async {
            d.state().await["live_runs"][0]["rate_limits"][0]["status"] == "allowed_warning"
        },
    )
    .await;
    let state = d.state().await;
    let live = &state["live_runs"][0];
    assert_eq!(live["ticket"], "1", "{state}");
    assert_eq!(live["last_event"]["kind"], "rate_limit", "{state}");
    let limit = &live["rate_limits"][0];
    assert_eq!(limit["limit_type"], "five_hour");
    assert_eq!(limit["utilization"], 0.82);
    assert_eq!(limit["surpassed_threshold"], 0.8);
    assert_eq!(limit["overage_status"], "rejected");
    assert_eq!(limit["resets_at"], "2026-12-06T05:00:00Z");
    let agents = &state["agent_rate_limits"];
    assert_eq!(agents.as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(agents[0]["agent"], "claude-code", "{state}");
    assert_eq!(agents[0]["status"], "allowed_warning", "{state}");
    assert_eq!(agents[0]["limits"][0]["run_id"], live["run_id"], "{state}");
    assert_eq!(agents[0]["limits"][0]["limit_type"], "five_hour", "{state}");
    let running = state["seconds_running"].as_f64().expect("seconds_running");
    assert!(running > 0.0, "{state}");
    // The retry queue: ticket 9 waits for its retry (not due), with what failed and why.
    let queue = state["retry_queue"].as_array().expect("retry_queue");
    assert_eq!(queue.len(), 1, "{state}");
    assert_eq!(queue[0]["key"]["ticket_id"], "9");
    assert_eq!(queue[0]["key"]["role"], "architect");
    assert_eq!(queue[0]["stage"], "ready-for-design");
    assert_eq!(queue[0]["failed_attempt"], 2);
    assert_eq!(queue[0]["due_at"], "2099-01-01T10:00:00Z");
    assert_eq!(queue[0]["reason_code"], "tests.failed");
    assert_eq!(state["errors"], serde_json::json!([]), "{state}");

    // The rest of the stream: the run ends, its reports stay on its history row.
    for n in 4..=11 {
        step(n);
    }
    d.until(Duration::from_secs(15), "the run to end", || async {
        let state = d.state().await;
        state["live_runs"].as_array().map_or(1, Vec::len) == 0
            && state["recent_runs"].as_array().map_or(0, Vec::len) == 1
    })
    .await;
    let state = d.state().await;
    let ended = &state["recent_runs"][0];
    assert_eq!(ended["outcome"], "success", "{state}");
    let kept = |limits: &serde_json::Value| -> Vec<(String, String)> {
        limits
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|l| {
                (
                    l["limit_type"].as_str().unwrap_or("").to_string(),
                    l["status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let expected: Vec<(String, String)> = [
        ("five_hour", "allowed"),
        ("seven_day", "allowed"),
        ("seven_day_fable", "queued"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(kept(&ended["rate_limits"]), expected, "the tick's run line");
    let history = state["ledger_runs"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["key"]["ticket_id"] == "1"))
        .expect("the run in run history");
    assert_eq!(kept(&history["rate_limits"]), expected, "run history");
    let agents = &state["agent_rate_limits"];
    assert_eq!(agents[0]["agent"], "claude-code", "{state}");
    // An unknown status ranks above `allowed`: the agent's worst.
    assert_eq!(agents[0]["status"], "queued", "{state}");
    assert_eq!(kept(&agents[0]["limits"]), expected, "{state}");
    let duration = ended["duration_seconds"].as_f64().expect("duration");
    let running = state["seconds_running"].as_f64().unwrap();
    assert!(running >= duration && duration > 0.0, "{state}");
    d.stop().await;
}

/// A config with no agent work to do (the board stays empty), ticking once at start:
/// the daemon's loop reads the ledger on the async threads, and a loop waiting for a
/// locked ledger would hold one of the test runtime's two.
fn idle_config(dir: &std::path::Path) -> String {
    config_text(dir, "").replace(
        "poll_interval_seconds: 1\n",
        "poll_interval_seconds: 3600\n",
    )
}

/// Issue #39 item 15 (Symphony 17, snapshot errors): a ledger that cannot be read (here
/// its SQLite file removed under the daemon, which would keep writing to the unlinked
/// file) makes `/api/v1/state` a 503 with the JSON error envelope, `errors[]` and what
/// the daemon knows without the ledger; `/readyz` fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_errors_an_unavailable_ledger_is_a_503_with_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, idle_config(dir.path())).unwrap();
    let ledger_path = Config::load(&path).unwrap().ledger_path();
    let board = Arc::new(MemoryTracker::new());
    let d = Daemon::start(path, board as Arc<dyn Tracker>).await;
    let (code, body) = d.get("/api/v1/state").await;
    assert_eq!(code, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["errors"], serde_json::json!([]), "{body}");
    assert!(state.get("error").is_none(), "{body}");

    std::fs::remove_file(&ledger_path).unwrap();
    let (code, body) = d.get("/api/v1/state").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(error_code(&body), "ledger_unavailable");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    let errors = state["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{body}");
    let error = errors[0].as_str().unwrap();
    assert!(error.starts_with("ledger: "), "{error}");
    assert!(
        error.contains("ledger.db") && error.contains("removed"),
        "{error}"
    );
    // What the daemon knows without the ledger is still there.
    assert_eq!(state["config"]["tracker"], "local", "{body}");
    assert_eq!(state["live_runs"], serde_json::json!([]), "{body}");
    assert_eq!(state["retry_queue"], serde_json::json!([]), "{body}");
    let (code, body) = d.get("/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("removed"), "{body}");
    d.stop().await;
}

/// Issue #39 item 15 (Symphony 17, snapshot timeout): while the ledger is locked (another
/// process holds SQLite's write lock and a write of this daemon waits for it, holding the
/// ledger's connection), `/api/v1/state` answers with what it knows and a timeout entry
/// in `errors[]` instead of hanging; once the lock is released the answer is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_errors_a_locked_ledger_gets_an_answer_with_a_timeout_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, idle_config(dir.path())).unwrap();
    let ledger_path = Config::load(&path).unwrap().ledger_path();
    let board = Arc::new(MemoryTracker::new());
    let d = Daemon::start_with(
        path,
        board as Arc<dyn Tracker>,
        Arc::new(SystemClock::default()),
        Duration::from_secs(1),
    )
    .await;
    // The loop's first tick is over (it then waits an hour): the lock below meets only
    // the reads of this endpoint and the write started here.
    d.until(Duration::from_secs(15), "the first tick", || async {
        d.state().await["last_tick"]["ok"] == true
    })
    .await;

    let other = rusqlite::Connection::open(&ledger_path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // A write of the daemon's ledger waits for the lock (up to SQLite's busy timeout,
    // 10 s), holding the ledger's one connection: every read waits behind it.
    let ledger = d.ledger.clone();
    let writer = std::thread::spawn(move || {
        ledger.schedule_retry(&sortie::ledger::RetryEntry {
            key: ClaimKey::new("memory", "5", "architect"),
            stage: "ready-for-design".into(),
            failed_attempt: 1,
            due_at: chrono::Utc::now() + chrono::Duration::hours(1),
            reason_code: "tests.failed".into(),
        })
    });
    let mut answered = None;
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end {
        let (code, body) = d.get("/api/v1/state").await;
        if body.contains("timeout") {
            answered = Some((code, body));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = answered.expect("an answer with a timeout error while the ledger is locked");
    assert_eq!(code, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    let errors = state["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{body}");
    assert!(
        errors[0].as_str().unwrap().starts_with("ledger: timeout"),
        "{body}"
    );
    assert_eq!(state["config"]["tracker"], "local", "{body}");
    assert_eq!(state["retry_queue"], serde_json::json!([]), "{body}");
    assert!(state["seconds_running"].is_number(), "{body}");

    other.execute_batch("ROLLBACK").unwrap();
    writer
        .join()
        .unwrap()
        .expect("the write goes through once the lock is released");
    d.until(Duration::from_secs(15), "a whole answer again", || async {
        let state = d.state().await;
        state["errors"] == serde_json::json!([])
            && state["retry_queue"][0]["key"]["ticket_id"] == "5"
    })
    .await;
    d.stop().await;
}

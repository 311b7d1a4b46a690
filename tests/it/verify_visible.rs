//! Issue #33, `verify` made visible: the daemon's ticket view (`/api/v1/tickets/{id}`)
//! and page (`/tickets/{id}`) show each success block's evidence and the ticket's last
//! verify result, and `/metrics` counts `sortie_verify_total{role,result}`. Driven
//! in-process through `sortie::daemon::serve` over an in-memory board.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sortie::config::Config;
use sortie::daemon::{serve, BuildFuture, PipelineFactory, ServeOptions};
use sortie::ledger::{Ledger, SqliteLedger};
use sortie::pipeline::{Pipeline, SystemClock};
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::Tracker;
use tokio::sync::Notify;

/// backend verifies with a test run (12 passed, 1 ignored) and a second check, both
/// passing; qa verifies with a check that fails, final (`retry_with_output: false`).
fn config_text(dir: &std::path::Path) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: {state}
roles_dir: {roles}
poll_interval_seconds: 1
shutdown_grace_seconds: 0
agent: {{command: ["sh", "-c", "printf 'outcome: success\nsummary: done it\n' > \"$$SORTIE_RESULT_FILE\""], timeout_seconds: 60}}
pipeline_stages:
  - role: backend
    claim_status: design-approved
    success_status: code-review
    verify:
      commands:
        - ["sh", "-c", "echo 'test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out'"]
        - ["true"]
  - role: qa
    claim_status: code-review
    success_status: done
    failure_status: qa-failed
    requires_prior_role: backend
    verify: {{commands: [["sh", "-c", "echo smoke test broke; exit 4"]], retry_with_output: false}}
"#,
        state = dir.join("state").display(),
        roles = crate::common::repo().join("roles").display(),
    )
}

struct Daemon {
    url: String,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<Result<(), sortie::daemon::DaemonError>>,
    http: reqwest::Client,
}

impl Daemon {
    async fn start(path: std::path::PathBuf, tracker: Arc<dyn Tracker>) -> Daemon {
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

    /// GET `path` every 100 ms until `ok` holds for its body; the last body.
    async fn until(&self, path: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let body = self.get(path).await.1;
            if ok(&body) {
                return body;
            }
            assert!(Instant::now() < end, "{path} never showed {what}: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(self) {
        self.stop.notify_one();
        self.task.await.unwrap().expect("daemon stops cleanly");
    }
}

fn decoded(body: String) -> String {
    body.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticket_view_page_and_metrics_show_what_verify_saw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, config_text(dir.path())).unwrap();
    let board = Arc::new(MemoryTracker::new());
    board.insert(MemoryTracker::ticket(
        "7",
        "Export invoices",
        "design-approved",
    ));
    let d = Daemon::start(path, board.clone() as Arc<dyn Tracker>).await;

    // backend's checks pass, qa's fails: the ticket ends on qa's failure status.
    let view = d
        .until("/api/v1/tickets/7", "the ticket on qa-failed", |b| {
            serde_json::from_str::<serde_json::Value>(b).is_ok_and(|v| {
                v["ticket"]["status"] == "qa-failed"
                    && v["blocks"].as_array().is_some_and(|b| b.len() == 2)
            })
        })
        .await;
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    let backend = &view["blocks"][0];
    assert_eq!(backend["kind"], "success", "{view:#}");
    let checks = backend["evidence"]["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 2, "{view:#}");
    assert_eq!(checks[0]["result"], "passed");
    assert_eq!(checks[0]["exit_code"], 0);
    assert_eq!(checks[0]["tests"]["passed"], 12);
    assert_eq!(checks[0]["tests"]["skipped"], 1);
    assert!(checks[0]["duration_seconds"].is_f64(), "{view:#}");
    assert_eq!(checks[1]["command"], "true");
    let qa = &view["blocks"][1];
    assert_eq!(qa["reason_code"], "verify.failed", "{view:#}");
    // The ticket's last verify result: qa's failure, naming its command.
    assert_eq!(view["verify"]["role"], "qa", "{view:#}");
    assert_eq!(view["verify"]["result"], "failed", "{view:#}");
    assert!(
        view["verify"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("`sh -c \"echo smoke test broke; exit 4\"`, exited with 4")),
        "{view:#}"
    );

    // The page shows backend's checks in its success block, with their figures.
    let (status, page) = d.get("/tickets/7").await;
    assert_eq!(status, 200, "{page}");
    let page = decoded(page);
    let success = page
        .split(r#"<div class="block">"#)
        .find(|b| b.contains(r#"class="outcome-success""#))
        .unwrap_or_else(|| panic!("no success block: {page}"));
    assert!(success.contains("<th>verify command</th>"), "{success}");
    let rows: Vec<&str> = success.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "one row per check: {success}");
    assert!(
        rows[0].contains(
            r#"<code>sh -c "echo 'test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out'"</code>"#
        ) && rows[0].contains(r#"<td class="verify-passed">passed</td><td>0</td>"#)
            && rows[0].contains(" s</td><td>12 passed, 0 failed, 1 skipped</td>"),
        "{}",
        rows[0]
    );
    assert!(rows[1].contains("<code>true</code>"), "{}", rows[1]);
    let failure = page
        .split(r#"<div class="block">"#)
        .find(|b| b.contains(r#"class="outcome-failure""#))
        .unwrap_or_else(|| panic!("no failure block: {page}"));
    assert!(
        failure.contains("<code>verify.failed</code>") && failure.contains("smoke test broke"),
        "{failure}"
    );
    assert!(
        !failure.contains("verify command</th>"),
        "a failure carries no evidence table: {failure}"
    );

    // Each check counted by role and result.
    let metrics = d
        .until("/metrics", "qa's failed check", |m| {
            m.contains("sortie_verify_total{role=\"qa\",result=\"failed\"} 1\n")
        })
        .await;
    assert!(
        metrics.contains("# TYPE sortie_verify_total counter\n")
            && metrics.contains("sortie_verify_total{role=\"backend\",result=\"passed\"} 2\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("sortie_verify_total{role=\"backend\",result=\"failed\"}"),
        "{metrics}"
    );
    d.stop().await;
}

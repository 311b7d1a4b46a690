//! `sortie pipeline run`: the real binary against a local board, driven over HTTP and
//! signals. These are about a loop, leases and process groups on the wall clock, so
//! they use real time; every wait is bounded and polls for an observable change.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sortie::ledger::{Ledger, Scope, SqliteLedger};

/// A one-stage pipeline whose agent sleeps `sleep` seconds, with extra top-level keys.
fn one_stage(sleep: u64, extra: &str) -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 30
agent: {{command: ["sh", "-c", "sleep {sleep}; echo done"], timeout_seconds: 120}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
{extra}
"#,
        roles = common::repo().join("roles").display(),
    )
}

/// A running daemon and its base URL (also used by other modules' daemon tests).
pub(crate) struct Daemon {
    child: Child,
    base: String,
    http: reqwest::blocking::Client,
}

impl Daemon {
    pub(crate) fn start(sb: &Sandbox, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args([
                "pipeline",
                "run",
                "--config",
                "pipeline.yaml",
                "--listen",
                "127.0.0.1:0",
            ])
            .current_dir(sb.path())
            .env_remove("SORTIE_LOG")
            .envs(env.iter().copied())
            .env_remove("SORTIE_FAULT")
            .stdout(Stdio::piped())
            // The daemon's log goes to a file in the sandbox, not the test output: tests
            // that provoke failures on purpose must not print ERROR lines (#13).
            .stderr(
                std::fs::File::create(sb.path().join("daemon.log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn()
            .expect("spawn daemon");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the listening line");
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Daemon {
            child,
            base,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        }
    }

    pub(crate) fn get(&self, path: &str) -> reqwest::blocking::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .expect("GET")
    }

    pub(crate) fn post(&self, path: &str) -> reqwest::blocking::RequestBuilder {
        self.http.post(format!("{}{path}", self.base))
    }

    pub(crate) fn state(&self) -> serde_json::Value {
        self.get("/api/v1/state").json().expect("state is JSON")
    }

    /// Poll `/api/v1/state` until `cond` holds (at most `secs`).
    pub(crate) fn wait_state(
        &self,
        secs: u64,
        what: &str,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let state = self.state();
            if cond(&state) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {state:#}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).expect("signal the daemon");
    }

    /// Wait (bounded) for the process to exit; returns whether it exited 0.
    pub(crate) fn wait_exit(mut self, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the daemon did not exit within {secs}s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait (bounded) until `cond` holds on the sandbox.
pub(crate) fn wait_until(secs: u64, what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metrics(d: &Daemon) -> std::collections::HashMap<String, f64> {
    let text = d.get("/metrics").text().unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics parse as Prometheus text");
    scrape
        .samples
        .into_iter()
        .filter_map(|s| {
            let value = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => return None,
            };
            let mut labels: Vec<String> =
                s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            Some((format!("{}{{{}}}", s.metric, labels.join(",")), value))
        })
        .collect()
}

#[test]
fn the_daemon_drains_a_seeded_board_and_its_metrics_count_what_happened() {
    let config = common::three_stages_config(4) + "poll_interval_seconds: 1\n";
    let sb = Sandbox::with_config(&config);
    let a = sb.add("first", "ready-for-design", &[]);
    let b = sb.add("second", "ready-for-design", &[]);
    let d = Daemon::start(&sb, &[]);
    assert_eq!(d.get("/healthz").status(), 200);
    wait_until(20, "both tickets done", || {
        sb.ticket(&a).status == "done" && sb.ticket(&b).status == "done"
    });
    // The runs' lines are collected a moment after the write-back.
    d.wait_state(5, "six finished runs", |s| {
        s["recent_runs"].as_array().map(Vec::len) == Some(6)
    });
    assert_eq!(d.get("/readyz").status(), 200);
    let m = metrics(&d);
    for role in ["architect", "backend", "qa"] {
        assert_eq!(
            m.get(&format!("sortie_runs_total{{outcome=success,role={role}}}")),
            Some(&2.0),
            "{m:#?}"
        );
        assert_eq!(
            m.get(&format!(
                "sortie_handoffs_total{{outcome=success,role={role}}}"
            )),
            Some(&2.0),
            "{m:#?}"
        );
    }
    assert!(m["sortie_ticks_total{result=ok}"] >= 3.0, "{m:#?}");
    assert_eq!(m["sortie_ticks_total{result=error}"], 0.0);
    assert_eq!(m["sortie_runs_in_flight{}"], 0.0);
    assert_eq!(m["sortie_claims_held{}"], 0.0);
    assert_eq!(m["sortie_config_reload_failures_total{}"], 0.0);
    // Each of the 6 runs posted one comment and made one or two transitions (the
    // architect stage has an in-progress status).
    assert_eq!(
        m["sortie_tracker_requests_total{kind=post_comment,result=ok}"], 6.0,
        "{m:#?}"
    );
    assert!(
        m["sortie_tracker_requests_total{kind=list,result=ok}"] >= 3.0,
        "{m:#?}"
    );
    assert_eq!(
        m["sortie_tracker_requests_total{kind=transition,result=ok}"], 8.0,
        "{m:#?}"
    );
    // The demo agent reports no usage.
    assert_eq!(m["sortie_agent_tokens_total{direction=in}"], 0.0);
    d.signal(Signal::SIGTERM);
    assert!(d.wait_exit(10), "exit 0 after a clean drain");
}

#[test]
fn a_refresh_picks_up_a_card_without_waiting_for_the_poll() {
    let sb = Sandbox::with_config(&one_stage(0, "poll_interval_seconds: 3600"));
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let id = sb.add("moved by a person", "ready-for-design", &[]);
    for _ in 0..5 {
        assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    }
    wait_until(10, "the card to be handed off", || {
        sb.ticket(&id).status == "design-approved"
    });
    let m = metrics(&d);
    // The first tick, at most one per refresh (fewer when refreshes arrive while one is
    // pending) and one when the run ends (the daemon is work-conserving): a refresh
    // never starts a tick loop.
    let ticks = m["sortie_ticks_total{result=ok}"];
    assert!((2.0..=7.0).contains(&ticks), "{ticks} ticks");
}

#[test]
fn a_ticket_endpoint_says_why_a_ticket_waits() {
    let sb = Sandbox::with_config(&one_stage(0, "poll_interval_seconds: 3600"));
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let id = sb.add("new", "ready-for-design", &[]);
    let view: serde_json::Value = d.get(&format!("/api/v1/tickets/{id}")).json().unwrap();
    assert_eq!(view["would_run"][0]["role"], "architect", "{view:#}");
    assert_eq!(view["would_run"][0]["outcome"], "would_run", "{view:#}");
    // A dry run: nothing was claimed or run.
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
    assert!(view["claims"].as_array().unwrap().is_empty());
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    wait_until(10, "the card to be handed off", || {
        sb.ticket(&id).status == "design-approved"
    });
    let view: serde_json::Value = d.get(&format!("/api/v1/tickets/{id}")).json().unwrap();
    assert!(view["would_run"].as_array().unwrap().is_empty(), "{view:#}");
    assert_eq!(view["blocks"][0]["kind"], "success", "{view:#}");
    assert_eq!(view["blocks"][0]["role"], "architect", "{view:#}");
    assert_eq!(d.get("/api/v1/tickets/nope").status(), 404);
}

#[test]
fn sigterm_lets_a_live_run_finish_and_exits_0() {
    let sb = Sandbox::with_config(&one_stage(2, "shutdown_grace_seconds: 30"));
    let id = sb.add("long", "ready-for-design", &[]);
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "a live run", |s| {
        s["live_runs"].as_array().is_some_and(|r| r.len() == 1)
    });
    d.signal(Signal::SIGTERM);
    assert!(d.wait_exit(15), "exit 0 after the drain");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    assert_eq!(sb.blocks(&id).len(), 1, "one success block");
}

#[test]
fn sigterm_with_a_tiny_grace_cancels_the_run_and_releases_its_claim() {
    let sb = Sandbox::with_config(&one_stage(60, "shutdown_grace_seconds: 0"));
    let id = sb.add("long", "ready-for-design", &[]);
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "a live run", |s| {
        s["live_runs"].as_array().is_some_and(|r| r.len() == 1)
    });
    let started = Instant::now();
    d.signal(Signal::SIGTERM);
    assert!(d.wait_exit(10), "exit 0 after cancelling");
    assert!(started.elapsed() < Duration::from_secs(10));
    let ledger = SqliteLedger::open(&sb.path().join("state/ledger.db")).unwrap();
    assert!(
        ledger.claims(Scope::All).unwrap().is_empty(),
        "claim released"
    );
    assert!(sb.comments(&id).is_empty(), "nothing written");
    assert!(sb.blocks(&id).is_empty());
}

#[test]
fn an_invalid_config_edit_keeps_the_daemon_on_the_last_good_config() {
    let sb = Sandbox::with_config(&one_stage(0, "poll_interval_seconds: 3600"));
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    std::fs::write(sb.config_path(), one_stage(0, "poll_interval_seconds: 0")).unwrap();
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    d.wait_state(10, "the config error", |s| s["config_error"].is_string());
    let state = d.state();
    let error = state["config_error"].as_str().unwrap();
    assert!(error.contains("poll_interval_seconds"), "{error}");
    assert_eq!(state["config"]["poll_interval_seconds"], 3600);
    assert_eq!(d.get("/healthz").status(), 200);
    // Still ticking on the old config.
    let id = sb.add("after the bad edit", "ready-for-design", &[]);
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    wait_until(10, "the card to be handed off", || {
        sb.ticket(&id).status == "design-approved"
    });
    let m = metrics(&d);
    assert_eq!(m["sortie_config_reload_failures_total{}"], 1.0);
    assert_eq!(m["sortie_config_error{}"], 1.0);
    // A valid edit is applied and clears the error.
    std::fs::write(
        sb.config_path(),
        one_stage(0, "poll_interval_seconds: 1800"),
    )
    .unwrap();
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    d.wait_state(10, "the new config", |s| {
        s["config"]["poll_interval_seconds"] == 1800 && s["config_error"].is_null()
    });
}

#[test]
fn a_github_webhook_needs_a_valid_signature() {
    use hmac::{Hmac, Mac};
    let sb = Sandbox::with_config(&one_stage(
        0,
        "poll_interval_seconds: 3600\nhttp: {github_webhook_secret_env: TEST_HOOK_SECRET}",
    ));
    let d = Daemon::start(&sb, &[("TEST_HOOK_SECRET", "s3cret")]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let body = br#"{"action":"labeled"}"#.to_vec();
    let unsigned = d.post("/hooks/github").body(body.clone()).send().unwrap();
    assert_eq!(unsigned.status(), 401);
    let mut wrong = Hmac::<sha2::Sha256>::new_from_slice(b"not the secret").unwrap();
    wrong.update(&body);
    let bad = d
        .post("/hooks/github")
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", hex::encode(wrong.finalize().into_bytes())),
        )
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(bad.status(), 401);

    let id = sb.add("labeled on GitHub", "ready-for-design", &[]);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(&body);
    let good = d
        .post("/hooks/github")
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
        )
        .body(body)
        .send()
        .unwrap();
    assert_eq!(good.status(), 202);
    wait_until(10, "the webhook's tick to run the card", || {
        sb.ticket(&id).status == "design-approved"
    });
}

#[test]
fn gitlab_and_gitea_webhooks_need_the_secret() {
    use hmac::{Hmac, Mac};
    let sb = Sandbox::with_config(&one_stage(
        0,
        "poll_interval_seconds: 3600\nhttp: {gitlab_webhook_secret_env: TEST_GL_SECRET, gitea_webhook_secret_env: TEST_GT_SECRET}",
    ));
    let d = Daemon::start(
        &sb,
        &[
            ("TEST_GL_SECRET", "gl-s3cret"),
            ("TEST_GT_SECRET", "gt-s3cret"),
        ],
    );
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let body = br#"{"object_kind":"issue"}"#.to_vec();
    assert_eq!(d.post("/hooks/gitlab").send().unwrap().status(), 401);
    let wrong = d
        .post("/hooks/gitlab")
        .header("X-Gitlab-Token", "gl-s3cre")
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(
        d.post("/hooks/gitea")
            .body(body.clone())
            .send()
            .unwrap()
            .status(),
        401
    );
    let mut other = Hmac::<sha2::Sha256>::new_from_slice(b"gl-s3cret").unwrap();
    other.update(&body);
    let bad = d
        .post("/hooks/gitea")
        .header(
            "X-Gitea-Signature",
            hex::encode(other.finalize().into_bytes()),
        )
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(bad.status(), 401);

    let id = sb.add("labeled on GitLab", "ready-for-design", &[]);
    let good = d
        .post("/hooks/gitlab")
        .header("X-Gitlab-Token", "gl-s3cret")
        .send()
        .unwrap();
    assert_eq!(good.status(), 202);
    wait_until(10, "the GitLab hint's tick to run the card", || {
        sb.ticket(&id).status == "design-approved"
    });
    let id = sb.add("labeled on Gitea", "ready-for-design", &[]);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"gt-s3cret").unwrap();
    mac.update(&body);
    let good = d
        .post("/hooks/gitea")
        .header(
            "X-Gitea-Signature",
            hex::encode(mac.finalize().into_bytes()),
        )
        .body(body)
        .send()
        .unwrap();
    assert_eq!(good.status(), 202);
    wait_until(10, "the Gitea hint's tick to run the card", || {
        sb.ticket(&id).status == "design-approved"
    });
}

#[test]
fn a_linear_webhook_needs_a_valid_signature_and_a_fresh_timestamp() {
    use sortie::tracker::linear::webhook::sign;
    let sb = Sandbox::with_config(&one_stage(
        0,
        "poll_interval_seconds: 3600\nhttp: {linear_webhook_secret_env: TEST_LINEAR_SECRET}",
    ));
    let d = Daemon::start(&sb, &[("TEST_LINEAR_SECRET", "s3cret")]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let body = |ms: i64| format!(r#"{{"action":"update","type":"Issue","webhookTimestamp":{ms}}}"#);
    let now = chrono::Utc::now().timestamp_millis();
    let fresh = body(now);
    let unsigned = d.post("/hooks/linear").body(fresh.clone()).send().unwrap();
    assert_eq!(unsigned.status(), 401);
    let bad = d
        .post("/hooks/linear")
        .header(
            "Linear-Signature",
            sign(b"not the secret", fresh.as_bytes()),
        )
        .body(fresh.clone())
        .send()
        .unwrap();
    assert_eq!(bad.status(), 401);
    let old = body(now - 120_000);
    let replayed = d
        .post("/hooks/linear")
        .header("Linear-Signature", sign(b"s3cret", old.as_bytes()))
        .body(old)
        .send()
        .unwrap();
    assert_eq!(replayed.status(), 401);
    assert!(replayed.text().unwrap().contains("older than a minute"));

    let id = sb.add("moved in Linear", "ready-for-design", &[]);
    let good = d
        .post("/hooks/linear")
        .header("Linear-Signature", sign(b"s3cret", fresh.as_bytes()))
        .body(fresh)
        .send()
        .unwrap();
    assert_eq!(good.status(), 202);
    wait_until(10, "the webhook's tick to run the card", || {
        sb.ticket(&id).status == "design-approved"
    });
}

#[test]
fn post_endpoints_need_the_bearer_token_when_one_is_configured() {
    let sb = Sandbox::with_config(&one_stage(
        0,
        "poll_interval_seconds: 3600\nhttp: {token_env: TEST_HTTP_TOKEN}",
    ));
    let d = Daemon::start(&sb, &[("TEST_HTTP_TOKEN", "tok")]);
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 401);
    let wrong = d
        .post("/api/v1/refresh")
        .bearer_auth("nope")
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = d.post("/api/v1/refresh").bearer_auth("tok").send().unwrap();
    assert_eq!(right.status(), 202);
    // Reading stays open.
    assert_eq!(d.get("/api/v1/state").status(), 200);
}

#[test]
fn a_non_loopback_listen_without_a_token_is_refused() {
    let sb = Sandbox::with_config(&one_stage(0, ""));
    let out = sb.sortie(&[
        "pipeline",
        "run",
        "--config",
        "pipeline.yaml",
        "--listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--insecure-listen"), "{stderr}");
}

#[test]
fn a_second_signal_stops_at_once_without_waiting_for_the_grace() {
    let sb = Sandbox::with_config(&one_stage(60, "shutdown_grace_seconds: 120"));
    let id = sb.add("long", "ready-for-design", &[]);
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "a live run", |s| {
        s["live_runs"].as_array().is_some_and(|r| r.len() == 1)
    });
    d.signal(Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    d.signal(Signal::SIGTERM);
    d.wait_exit(20);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the second signal did not wait for the 120 s grace"
    );
    assert!(sb.comments(&id).is_empty(), "the cut-off run wrote nothing");
}

#[test]
fn readyz_fails_while_ticks_fail_and_healthz_still_answers() {
    let sb = Sandbox::with_config(&one_stage(0, "poll_interval_seconds: 1"));
    let d = Daemon::start(&sb, &[]);
    let ready = |want: u16, secs: u64| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while d.get("/readyz").status().as_u16() != want {
            assert!(Instant::now() < deadline, "readyz never answered {want}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    ready(200, 10);
    // The board disappears: every tick fails; after three poll intervals without a
    // successful tick the daemon is not ready, but it lives.
    std::fs::rename(sb.path().join("board"), sb.path().join("board-away")).unwrap();
    ready(503, 15);
    assert_eq!(d.get("/healthz").status().as_u16(), 200);
    std::fs::rename(sb.path().join("board-away"), sb.path().join("board")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while d.get("/readyz").status().as_u16() != 200 {
        assert!(
            Instant::now() < deadline,
            "readyz never turned ready once ticks succeeded"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_jira_webhook_needs_a_valid_x_hub_signature_and_only_triggers_a_tick() {
    use sortie::tracker::jira::webhook::sign;
    let sb = Sandbox::with_config(&one_stage(
        0,
        "poll_interval_seconds: 3600\nhttp: {jira_webhook_secret_env: TEST_JIRA_HOOK_SECRET}",
    ));
    let d = Daemon::start(&sb, &[("TEST_JIRA_HOOK_SECRET", "s3cret")]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    // The payload names a ticket that does not exist: it is not read, only the board is.
    let body = br#"{"webhookEvent":"jira:issue_updated","issue":{"key":"NOPE-1"}}"#.to_vec();
    let unsigned = d.post("/hooks/jira").body(body.clone()).send().unwrap();
    assert_eq!(unsigned.status(), 401);
    let bad = d
        .post("/hooks/jira")
        .header("X-Hub-Signature", sign(b"not the secret", &body))
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(bad.status(), 401);
    // GitHub's header name is not Jira's.
    let github_style = d
        .post("/hooks/jira")
        .header("X-Hub-Signature-256", sign(b"s3cret", &body))
        .body(body.clone())
        .send()
        .unwrap();
    assert_eq!(github_style.status(), 401);

    let id = sb.add("moved in Jira", "ready-for-design", &[]);
    let good = d
        .post("/hooks/jira")
        .header("X-Hub-Signature", sign(b"s3cret", &body))
        .body(body)
        .send()
        .unwrap();
    assert_eq!(good.status(), 202);
    wait_until(10, "the webhook's tick to run the card", || {
        sb.ticket(&id).status == "design-approved"
    });
}

/// Issue #18: the ticket endpoint says which route a ticket would take, and which one
/// its run took (run history and outcome block).
#[test]
fn a_ticket_endpoint_shows_the_route() {
    let sb = crate::flow_routes::sandbox(None);
    let mut text = std::fs::read_to_string(sb.config_path()).unwrap();
    text.push_str("poll_interval_seconds: 3600\n");
    std::fs::write(sb.config_path(), text).unwrap();
    let d = Daemon::start(&sb, &[]);
    d.wait_state(10, "the first tick", |s| s["last_tick"]["ok"] == true);
    let id = sb.add("rewrite the scheduler", "todo", &["--label", "hard"]);
    let view: serde_json::Value = d.get(&format!("/api/v1/tickets/{id}")).json().unwrap();
    assert_eq!(view["would_run"][0]["route"], "hard", "{view:#}");
    assert_eq!(d.post("/api/v1/refresh").send().unwrap().status(), 202);
    wait_until(10, "the run to hand the ticket off", || {
        sb.ticket(&id).status == "review"
    });
    let view: serde_json::Value = d.get(&format!("/api/v1/tickets/{id}")).json().unwrap();
    assert_eq!(view["runs"][0]["route"], "hard", "{view:#}");
    assert_eq!(view["blocks"][0]["route"], "hard", "{view:#}");
    d.signal(Signal::SIGTERM);
    assert!(d.wait_exit(10));
}

//! The dashboard (`GET /`) in a real headless Chromium driven by playwright-core
//! (issue #22): a seeded three-stage board with a slow agent (the fake Claude Code
//! streaming a recorded stream, its live row showing turns and tokens); every waiting ticket's
//! title shows with its reason; a live run's log link shows the agent's output; a
//! ticket opens its page with the eligibility reason; an invalid config edit shows the
//! banner within one refresh, without a reload; no timestamp with fractional seconds;
//! at 1,400 px every one of its eleven columns is on screen (issue #30).
//!
//! Needs the chromium test service: `scripts/test` runs `scripts/services/chromium.sh`,
//! which installs Debian's `chromium` and playwright-core (`tests/browser/`, pinned by
//! its package-lock.json) and exports `SORTIE_TEST_CHROMIUM` and `SORTIE_TEST_PLAYWRIGHT`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn service_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run `scripts/test --test services daemon_dashboard`, or \
             `export SORTIE_TEST_SERVICES=$(mktemp -d); bash scripts/services/chromium.sh; \
             set -a; . $SORTIE_TEST_SERVICES/chromium.env; set +a`"
        )
    })
}

const CONFIG: &str = r#"
tracker: {kind: local, path: board}
state_root: state
roles_dir: ROLES
claim_lock_ttl_seconds: 30
poll_interval_seconds: 1
shutdown_grace_seconds: 0
concurrency: {max_in_flight: 8, per_role_max_in_flight: 1}
http: {token_env: SORTIE_DASHBOARD_TOKEN}
agent:
  preset: claude-code
  command: ["@FAKE@"]
  timeout_seconds: 120
  env: {FAKE_SCENARIO: stepped, FAKE_STEP_DIR: "@STEPS@"}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved, failure_status: design-blocked}
  - {role: backend, claim_status: design-approved, in_progress_status: building, success_status: code-review, failure_status: build-failed, requires_prior_role: architect}
  - {role: qa, claim_status: code-review, in_progress_status: reviewing, success_status: done, failure_status: qa-failed, requires_prior_role: backend}
"#;

/// The daemon's bearer token: logs and ticket pages open after the page's login.
const TOKEN: &str = "browser-test-token-4f1d";

#[test]
fn the_dashboard_in_a_browser_shows_why_tickets_wait_and_where_the_logs_are() {
    let chromium = service_var("SORTIE_TEST_CHROMIUM");
    let driver = service_var("SORTIE_TEST_PLAYWRIGHT");
    let steps = tempfile::tempdir().unwrap();
    // The fake Claude Code prints its recorded stream up to the final result (line 6),
    // so the run stays live with two turns and their tokens.
    for n in 1..=5 {
        std::fs::write(steps.path().join(n.to_string()), "").unwrap();
    }
    let fake = common::repo().join("tests/fixtures/agents/fake-claude");
    let config = CONFIG
        .replace("ROLES", &common::repo().join("roles").display().to_string())
        .replace("@FAKE@", &fake.display().to_string())
        .replace("@STEPS@", &steps.path().display().to_string());
    let sb = Sandbox::with_config(&config);
    let login = sb.add("Design the login page", "ready-for-design", &[]);
    let waiting = [
        sb.add("Design the billing page", "ready-for-design", &[]),
        sb.add("Design the search box", "ready-for-design", &[]),
    ];
    let export = sb.add("Build the export", "design-approved", &[]);
    let review = sb.add("Review the importer", "code-review", &[]);
    sb.add("Shipped already", "done", &[]);
    // Issue #30: a failed card and one on a typo'd status, so that the board has ten
    // columns and more (claim, in-progress and failure statuses, other statuses).
    sb.add("Design the refunds page", "design-blocked", &[]);
    sb.add("Design the typo page", "ready-for-desing", &[]);
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
        .env("SORTIE_DASHBOARD_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        // The daemon's log (the invalid config edit is an ERROR on purpose) goes to a
        // file in the sandbox, not the test output (#13).
        .stderr(
            std::fs::File::create(sb.path().join("daemon.log"))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null()),
        )
        .spawn()
        .expect("spawn daemon");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();

    let http = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let s: serde_json::Value = http
            .get(format!("{base}/api/v1/state"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if s["live_runs"].as_array().map_or(0, Vec::len) == 1 {
            assert_eq!(s["live_runs"][0]["ticket"], login.as_str(), "{s:#}");
            break;
        }
        assert!(Instant::now() < deadline, "no live run: {s:#}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // `docs/dashboard.png` and `docs/dashboard-ticket.png` are made by setting
    // SORTIE_DASHBOARD_SCREENSHOTS=$PWD/docs.
    let shots = tempfile::tempdir().unwrap();
    let shots_dir = std::env::var("SORTIE_DASHBOARD_SCREENSHOTS")
        .unwrap_or_else(|_| shots.path().display().to_string());
    let out = Command::new("node")
        .arg(&driver)
        .env("SORTIE_URL", &base)
        .env("SORTIE_CHROMIUM", &chromium)
        .env("SORTIE_CONFIG_PATH", sb.config_path())
        .env(
            "SORTIE_BAD_CONFIG",
            format!("{config}poll_interval_secnds: 3\n"),
        )
        .env("SORTIE_SHOTS", &shots_dir)
        .env("SORTIE_TOKEN", TOKEN)
        .output()
        .expect("run node (Debian's nodejs)");
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    assert!(
        out.status.success(),
        "the browser driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });

    let waiting_seen = seen["waiting"].as_array().unwrap();
    let reason_of = |title: &str| -> String {
        waiting_seen
            .iter()
            .find(|w| w["title"].as_str().unwrap().contains(title))
            .unwrap_or_else(|| panic!("{title} is not on the page as waiting: {seen:#}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(reason_of("Design the billing page"), "cap: role 1");
    assert_eq!(reason_of("Design the search box"), "cap: role 1");
    assert_eq!(
        reason_of("Build the export"),
        "prior role architect missing"
    );
    assert_eq!(
        reason_of("Review the importer"),
        "prior role backend missing"
    );
    assert_eq!(
        waiting_seen.len(),
        4,
        "every waiting ticket, no other: {seen:#}"
    );
    for id in waiting.iter().chain([&export, &review]) {
        assert!(
            waiting_seen
                .iter()
                .any(|w| w["title"].as_str().unwrap().starts_with(&format!("#{id} "))),
            "ticket {id} missing: {seen:#}"
        );
    }
    assert!(
        seen["columns"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "done\n1" || c == "terminal"),
        "{seen:#}"
    );
    // Issue #30: at 1,400 px every column is on screen, none scrolls sideways.
    let layout = &seen["layout"];
    assert!(
        layout["columns"].as_u64().unwrap() >= 10,
        "ten columns and more: {layout}"
    );
    assert!(
        layout["scroll_width"].as_u64().unwrap() <= 1400,
        "no horizontal overflow at 1,400 px: {layout}"
    );
    assert_eq!(layout["cut_off"], serde_json::json!([]), "{layout}");
    assert_eq!(
        seen["fractional_on_dashboard"],
        serde_json::json!([]),
        "{seen:#}"
    );
    assert_eq!(
        seen["fractional_on_ticket"],
        serde_json::json!([]),
        "{seen:#}"
    );
    let live = seen["live"][0].as_str().unwrap();
    assert!(
        live.contains("Design the login page"),
        "live run with its title: {seen:#}"
    );
    assert!(
        live.contains("message MOCK-CLAUDE-DONE"),
        "its last event: {seen:#}"
    );
    assert!(
        regex::Regex::new(r"\t2\t[0-9.]+[kM]?\t–\t")
            .unwrap()
            .is_match(live),
        "two turns, their tokens, no cost yet: {live:?}"
    );
    assert_eq!(
        seen["log_refused"]["login_form"], true,
        "without the token the log link leads to the login form: {seen:#}"
    );
    assert!(
        !seen["log_refused"]["text"]
            .as_str()
            .unwrap()
            .contains("MOCK-CLAUDE-DONE"),
        "and not to the log: {seen:#}"
    );
    assert_eq!(
        seen["token_in_urls"],
        serde_json::json!([]),
        "the token is never in a URL: {seen:#}"
    );
    assert!(
        seen["log"].as_str().unwrap().contains("MOCK-CLAUDE-DONE"),
        "the log link shows the agent's output: {seen:#}"
    );
    assert!(
        seen["ticket_page"]["eligibility"]
            .as_str()
            .unwrap()
            .contains("role cap reached (1 in flight)"),
        "the ticket page gives the reason, once, as the tick's sentence: {seen:#}"
    );
    assert_eq!(
        seen["scroll"]["before"], seen["scroll"]["after"],
        "scroll kept: {seen:#}"
    );
    assert_eq!(
        seen["reloaded"], false,
        "refreshed without a reload: {seen:#}"
    );
    let banner = seen["banner"]
        .as_str()
        .unwrap_or_else(|| panic!("no banner: {seen:#}"));
    assert!(banner.contains("pipeline.yaml"), "{banner}");
    assert!(banner.contains("poll_interval_secnds"), "{banner}");
    // The daemon checks the file once per poll (1 s); the page refreshes every 2 s.
    let within = seen["banner_after_ms"].as_u64().unwrap();
    eprintln!("banner shown {within} ms after the invalid edit");
    assert!(
        within <= 4000,
        "banner after {within} ms: more than one refresh"
    );
    assert_eq!(seen["reloaded_for_banner"], false);

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success());
            break;
        }
        assert!(Instant::now() < deadline, "daemon did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

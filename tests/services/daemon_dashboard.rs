//! The dashboard (`GET /`) rendered by a real headless Chromium: it shows a live run
//! and a recent handoff from `/api/v1/state`.
//!
//! Needs the chromium test service: `scripts/test` runs `scripts/services/chromium.sh`,
//! which installs Debian's `chromium` and exports `SORTIE_TEST_CHROMIUM`.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

fn chromium() -> String {
    std::env::var("SORTIE_TEST_CHROMIUM").unwrap_or_else(|_| {
        panic!(
            "SORTIE_TEST_CHROMIUM is not set: run `scripts/test --test services daemon_dashboard`, or \
             `export SORTIE_TEST_SERVICES=$(mktemp -d); bash scripts/services/chromium.sh; \
             set -a; . $SORTIE_TEST_SERVICES/chromium.env; set +a`"
        )
    })
}

/// Run headless Chromium on `url` with `extra` flags; returns stdout.
fn browse(url: &str, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_dashboard_shows_a_live_run_and_a_recent_handoff() {
    chromium();
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 30
poll_interval_seconds: 1
shutdown_grace_seconds: 0
agent:
  command: ["sh", "-c", "if [ \"$$SORTIE_TICKET_TITLE\" = slow ]; then sleep 60; fi; echo done"]
  timeout_seconds: 120
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
    );
    let sb = Sandbox::with_config(&config);
    let fast = sb.add("fast", "ready-for-design", &[]);
    let slow = sb.add("slow", "ready-for-design", &[]);
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
        .stdout(Stdio::piped())
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
        let live = s["live_runs"].as_array().map_or(0, Vec::len);
        let recent = s["recent_runs"].as_array().map_or(0, Vec::len);
        if live == 1 && recent == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no live run and handoff: {s:#}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let dom = browse(&format!("{base}/"), &["--dump-dom"]);
    let section = |id: &str| -> String {
        let start = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no #{id}: {dom}"));
        let end = dom[start..]
            .find("</table>")
            .map_or(dom.len(), |e| start + e);
        dom[start..end].to_string()
    };
    let live = section("live");
    assert!(
        live.contains(&format!("<td>{slow}</td>")),
        "live runs: {live}"
    );
    assert!(live.contains("<td>architect</td>"), "live runs: {live}");
    let recent = section("recent");
    assert!(
        recent.contains(&format!("<td>{fast}</td>")),
        "recent: {recent}"
    );
    assert!(
        recent.contains("<td>design-approved</td>"),
        "recent: {recent}"
    );

    // `docs/dashboard.png` is made this way.
    if let Ok(path) = std::env::var("SORTIE_DASHBOARD_SCREENSHOT") {
        browse(
            &format!("{base}/"),
            &["--window-size=1100,800", &format!("--screenshot={path}")],
        );
    }

    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
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

//! Issue #13, points 1 and 2, through the real binary: an operator's Ctrl-C or SIGTERM
//! during `pipeline tick` stops its agents and leaves the board as it was; a claim of a
//! dead process on this host is taken over at once; closing a card stops its agent
//! within seconds.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;

fn config(agent: &str, ttl: u64) -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: {ttl}
concurrency: {{max_in_flight: 4, per_role_max_in_flight: 2}}
retry: {{max_attempts: 2, backoff_base_seconds: 1, backoff_max_seconds: 1}}
agent: {{command: ["sh", "-c", "{agent}"], timeout_seconds: 120, stall_timeout_seconds: 0}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
    )
}

fn spawn_tick(sb: &Sandbox, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .args(extra)
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tick")
}

fn claims(sb: &Sandbox) -> Vec<serde_json::Value> {
    let text = sb.ok(&["claims", "list", "--state-root", "state", "--json"]);
    serde_json::from_str::<serde_json::Value>(&text)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Wait until `n` claims have a running agent.
fn wait_for_agents(sb: &Sandbox, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let c = claims(sb);
        if c.iter().filter(|c| !c["agent_pid"].is_null()).count() >= n {
            return c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{n} agents never started: {:?}", claims(sb));
}

/// Processes on this host whose environment carries `SORTIE_RUN_ID=<run_id>`.
fn processes_of(run_id: &str) -> usize {
    let needle = format!("SORTIE_RUN_ID={run_id}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .filter(|e| {
            // Zombies waiting for their parent to reap them are gone in every sense.
            std::fs::read_to_string(e.path().join("stat"))
                .map(|s| {
                    !s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(false)
        })
        .count()
}

fn wait_exit(mut child: Child, within: Duration) -> (std::process::ExitStatus, String, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status,
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the tick did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// Regression (#13, 1): Ctrl-C during a tick cancels its runs: agents stopped, tickets
/// back in their claim status, claims released, runs recorded as cancelled, no failure
/// block, exit 130; and the interruption did not use up a retry.
#[test]
fn ctrl_c_during_a_tick_stops_its_agents_and_puts_the_board_back() {
    let sb = Sandbox::with_config(&config("sleep 60", 600));
    let a = sb.add("first", "ready-for-design", &[]);
    let b = sb.add("second", "ready-for-design", &[]);
    let tick = spawn_tick(&sb, &[]);
    let running = wait_for_agents(&sb, 2);
    let run_ids: Vec<String> = running
        .iter()
        .map(|c| c["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sb.ticket(&a).status, "designing");
    signal(&tick, nix::sys::signal::Signal::SIGINT);
    let (status, stdout, stderr) = wait_exit(tick, Duration::from_secs(20));
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("cancelled").count(),
        2,
        "one line per cancelled run:\n{stdout}"
    );
    assert!(stdout.contains("back to ready-for-design"), "{stdout}");
    for id in [&a, &b] {
        assert_eq!(sb.ticket(id).status, "ready-for-design");
        assert!(sb.comments(id).is_empty(), "no failure block on {id}");
    }
    assert!(claims(&sb).is_empty(), "claims released");
    for run in &run_ids {
        assert_eq!(processes_of(run), 0, "the agent of {run} is gone");
    }
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let phases: Vec<&str> = status["recent_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["cancelled", "cancelled"]);

    // The next run fails once: with max_attempts 2 it is retried, not escalated,
    // because the interrupted run was no failed attempt.
    std::fs::write(sb.config_path(), config("echo broken >&2; exit 3", 600)).unwrap();
    let text = sb.tick();
    assert!(text.contains("attempt 2: failure"), "{text}");
    let blocks = sb.blocks(&a);
    let sortie::block::OutcomeBlock::Failure(f) = &blocks[0] else {
        panic!("{blocks:?}")
    };
    assert_eq!(f.next_action, sortie::block::NextAction::Retry, "{f:?}");
}

/// #13, 1: SIGTERM is the same, exit 143; `--grace` lets runs finish first.
#[test]
fn sigterm_exits_143_and_grace_lets_runs_finish() {
    let sb = Sandbox::with_config(&config("sleep 60", 600));
    sb.add("stopped", "ready-for-design", &[]);
    let tick = spawn_tick(&sb, &[]);
    wait_for_agents(&sb, 1);
    signal(&tick, nix::sys::signal::Signal::SIGTERM);
    let (status, stdout, _) = wait_exit(tick, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143), "{stdout}");

    let sb = Sandbox::with_config(&config("sleep 2", 600));
    let id = sb.add("finishes", "ready-for-design", &[]);
    let tick = spawn_tick(&sb, &["--grace", "30"]);
    wait_for_agents(&sb, 1);
    signal(&tick, nix::sys::signal::Signal::SIGINT);
    let (status, stdout, _) = wait_exit(tick, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("success"), "{stdout}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
}

/// Regression (#13, 1): a claim whose holder died on this host is taken over at the
/// next tick without waiting for its lease (600 s here), and its orphaned agent is
/// killed.
#[test]
fn a_claim_of_a_dead_tick_on_this_host_is_taken_over_at_once() {
    let sb = Sandbox::with_config(&config("sleep 60", 600));
    let id = sb.add("orphaned", "ready-for-design", &[]);
    let mut tick = spawn_tick(&sb, &[]);
    let claim = wait_for_agents(&sb, 1).remove(0);
    let run = claim["run_id"].as_str().unwrap().to_string();
    tick.kill().unwrap();
    tick.wait().unwrap();
    assert!(processes_of(&run) >= 1, "the agent outlived its tick");
    std::fs::write(sb.config_path(), config("true", 600)).unwrap();
    let text = sb.tick();
    assert!(
        text.contains(&format!(
            "run ticket {id} role architect attempt 2: success"
        )),
        "{text}"
    );
    assert_eq!(processes_of(&run), 0, "the orphaned agent was killed");
    assert_eq!(sb.ticket(&id).status, "design-approved");
}

/// Regression (#13, 2): closing a card stops its agent within seconds (the cancel flag
/// is read every 2 s, not only at lease renewal, every 200 s with the default TTL), and
/// the run's line says where the ticket is.
#[test]
fn closing_a_card_stops_its_agent_within_seconds() {
    let sb = Sandbox::with_config(&config("sleep 40", 600));
    let id = sb.add("closed by a person", "ready-for-design", &[]);
    let tick = spawn_tick(&sb, &[]);
    wait_for_agents(&sb, 1);
    sb.ok(&["board", "move", "--board", "board", &id, "done"]);
    let cancelling = sb.tick();
    assert!(
        cancelling.contains(&format!("cancel ticket {id} role architect")),
        "{cancelling}"
    );
    let noticed = Instant::now();
    let (status, stdout, _) = wait_exit(tick, Duration::from_secs(30));
    assert!(status.success());
    // `cargo test --test it closing_a_card -- --nocapture` prints the figure that
    // docs/benchmarks.md records.
    eprintln!(
        "cancel latency (cancelling tick done -> agent's tick exited): {:?}",
        noticed.elapsed()
    );
    assert!(
        noticed.elapsed() < Duration::from_secs(10),
        "stopped {:?} after the cancelling tick (the agent sleeps 40 s)",
        noticed.elapsed()
    );
    assert!(stdout.contains("cancelled"), "{stdout}");
    assert!(stdout.contains("ticket is now done"), "{stdout}");
    assert_eq!(sb.ticket(&id).status, "done");
    assert!(sb.comments(&id).is_empty());
    let _ = status.signal();
}

/// Kills the process `pid` names when dropped (a test that fails leaves no sleeper behind).
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Issue #53: a tick killed with SIGKILL while its agent runs leaves the agent's detached
/// grandchild (in a session of its own, out of the agent's group) behind; the next tick
/// kills it from what the dead run recorded, without looking at other processes.
#[test]
fn a_detached_grandchild_of_a_tick_killed_mid_run_is_gone_after_the_next_tick() {
    let sb = Sandbox::with_config(&config("sleep 60", 600));
    let pidfile = sb.path().join("grandchild.pid");
    let agent = format!(
        // `$$$$`: the config reads `$$` as a `$`.
        "setsid sh -c 'echo $$$$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 1000' </dev/null >/dev/null 2>&1 & sleep 60",
        pidfile.display()
    );
    std::fs::write(sb.config_path(), config(&agent, 600)).unwrap();
    let id = sb.add("crashed under", "ready-for-design", &[]);
    let mut tick = spawn_tick(&sb, &[]);
    wait_for_agents(&sb, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pidfile.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .expect("the agent started its grandchild")
        .trim()
        .parse()
        .unwrap();
    let _cleanup = KillOnDrop(grandchild);
    tick.kill().unwrap();
    tick.wait().unwrap();
    assert!(
        !common::gone(grandchild),
        "the grandchild outlived its tick"
    );
    std::fs::write(sb.config_path(), config("true", 600)).unwrap();
    let text = sb.tick();
    assert!(
        text.contains(&format!(
            "run ticket {id} role architect attempt 2: success"
        )),
        "{text}"
    );
    assert!(
        common::gone_within(grandchild, Duration::from_secs(20)),
        "the detached grandchild {grandchild} of the crashed run is alive"
    );
}

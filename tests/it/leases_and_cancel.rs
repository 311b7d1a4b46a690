//! Leases live as long as the run, and the board cancels runs in other processes.
//! These drive real tick processes against real time: the property is about a lease
//! being renewed on the wall clock, so it cannot be faked here.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;

fn config(ttl: u64, agent_sleep: u64) -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: {ttl}
agent: {{command: ["sh", "-c", "sleep {agent_sleep}; echo done"], timeout_seconds: 120}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, in_progress_status: designing, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
    )
}

fn spawn_tick(sb: &Sandbox) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml", "--json"])
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tick")
}

/// Wait (bounded) until the ledger shows a claim.
fn wait_for_claim(sb: &Sandbox) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let claims: serde_json::Value =
            serde_json::from_str(&sb.ok(&["claims", "list", "--state-root", "state", "--json"]))
                .unwrap();
        if claims.as_array().is_some_and(|c| !c.is_empty()) {
            return claims[0].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no claim appeared");
}

fn finish(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_run_longer_than_the_ttl_is_never_taken_over_while_its_holder_lives() {
    let sb = Sandbox::with_config(&config(1, 3));
    let id = sb.add("long", "ready-for-design", &[]);
    let first = spawn_tick(&sb);
    let claim = wait_for_claim(&sb);
    // Well past the 1 s TTL: only renewals keep the lease alive.
    std::thread::sleep(Duration::from_millis(1800));
    let second = sb.tick_json(&[]);
    assert_eq!(
        second["runs"].as_array().map(Vec::len),
        Some(0),
        "{second:#}"
    );
    assert_eq!(second["skips"][0]["reason"], "claimed", "{second:#}");
    assert_eq!(
        second["skips"][0]["holder"], claim["claimer_id"],
        "{second:#}"
    );

    let report = finish(first);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    assert_eq!(sb.blocks(&id).len(), 1);
}

#[test]
fn moving_a_card_cancels_the_run_in_another_tick_process_and_nothing_is_written() {
    let sb = Sandbox::with_config(&config(3, 60));
    let id = sb.add("to be cancelled", "ready-for-design", &[]);
    let first = spawn_tick(&sb);
    wait_for_claim(&sb);
    let started = Instant::now();
    sb.ok(&["board", "move", "--board", "board", &id, "backlog"]);
    let second = sb.tick_json(&[]);
    assert_eq!(second["cancels"][0]["ticket"], id.as_str(), "{second:#}");
    assert_eq!(
        second["cancels"][0]["reason"], "ticket moved to backlog",
        "{second:#}"
    );

    let report = finish(first);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the agent was stopped long before its 60 s"
    );
    assert_eq!(report["runs"][0]["outcome"], "cancelled", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "backlog", "the person's move stands");
    assert!(
        sb.comments(&id).is_empty(),
        "a cancelled run writes nothing"
    );
    let claims = sb.ok(&["claims", "list", "--state-root", "state", "--json"]);
    assert_eq!(claims.trim(), "[]", "the claim was released");
    // Symphony conformance 17.4.5: a move to a status that is not terminal stops the
    // agent without cleaning its workspace (the ticket may come back).
    assert!(
        sb.path().join("state/workspaces").join(&id).is_dir(),
        "the workspace of a ticket moved to a non-terminal status is kept"
    );
}

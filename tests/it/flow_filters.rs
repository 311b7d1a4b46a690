//! Issue #18, filters: sortie touches only the tickets its filters let through, says
//! why it skips the others, and cancels a run whose ticket a person withdrew by taking
//! away the opt-in label. Through the real binary on a local board.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;

/// One stage (`todo` -> `done`) whose agent runs `agent`, with the filters given as
/// YAML flow mappings (`""` for none).
fn config(tracker_filter: &str, stage_filter: &str, agent: &str) -> String {
    let tracker_filter = if tracker_filter.is_empty() {
        String::new()
    } else {
        format!("\n  filter: {tracker_filter}")
    };
    let stage_filter = if stage_filter.is_empty() {
        String::new()
    } else {
        format!("\n    filter: {stage_filter}")
    };
    format!(
        r#"
tracker:
  kind: local
  path: board{tracker_filter}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 5
agent: {{command: ["sh", "-c", "{agent}"], timeout_seconds: 120}}
pipeline_stages:
  - role: agent
    claim_status: todo
    in_progress_status: doing
    success_status: done{stage_filter}
"#,
        roles = common::repo().join("roles").display(),
    )
}

fn ticket_file(sb: &Sandbox, id: &str) -> std::path::PathBuf {
    sb.board_path().join(id).join("ticket.md")
}

fn skip_of<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["skips"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["ticket"] == id))
        .unwrap_or_else(|| panic!("no skip line for {id}: {report:#}"))
}

#[test]
fn a_label_filter_leaves_unlabelled_tickets_untouched_and_says_why() {
    let sb = Sandbox::with_config(&config(
        "{labels: [agent-ok]}",
        "{exclude_labels: [no-agent]}",
        "echo done",
    ));
    let opted_in = sb.add("opted in", "todo", &["--label", "Agent-OK"]);
    let plain = sb.add("nobody asked", "todo", &[]);
    let vetoed = sb.add(
        "opted in, then vetoed",
        "todo",
        &["--label", "agent-ok", "--label", "no-agent"],
    );
    let before_plain = std::fs::read(ticket_file(&sb, &plain)).unwrap();
    let before_vetoed = std::fs::read(ticket_file(&sb, &vetoed)).unwrap();

    let dry = sb.tick_json(&["--dry-run"]);
    assert_eq!(skip_of(&dry, &plain)["reason"], "filtered", "{dry:#}");
    assert_eq!(skip_of(&dry, &plain)["detail"], "label agent-ok missing");
    assert_eq!(
        skip_of(&dry, &vetoed)["detail"],
        "label no-agent excludes it"
    );
    let would: Vec<&str> = dry["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ticket"].as_str().unwrap())
        .collect();
    assert_eq!(would, [opted_in.as_str()]);
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains("label agent-ok missing"),
        "the human report gives the reason:\n{text}"
    );

    sb.drain(5);
    assert_eq!(sb.ticket(&opted_in).status, "done");
    assert_eq!(
        std::fs::read(ticket_file(&sb, &plain)).unwrap(),
        before_plain,
        "an unlabelled ticket's file is byte-identical"
    );
    assert_eq!(
        std::fs::read(ticket_file(&sb, &vetoed)).unwrap(),
        before_vetoed
    );
    assert!(sb.comments(&plain).is_empty() && sb.comments(&vetoed).is_empty());
    let claims = sb.ok(&["claims", "list", "--state-root", "state", "--json"]);
    assert_eq!(claims.trim(), "[]");
}

#[test]
fn assignee_me_is_the_boards_own_identity() {
    let sb = Sandbox::with_config(&config("", "{assignee: me}", "echo done"));
    let mine = sb.add("mine", "todo", &[]);
    let theirs = sb.add("theirs", "todo", &[]);
    for (id, who) in [(&mine, "sortie"), (&theirs, "alice")] {
        let path = ticket_file(&sb, id);
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.replacen(
            "status: todo\n",
            &format!("status: todo\nassignee: {who}\n"),
            1,
        );
        std::fs::write(&path, text).unwrap();
    }
    let dry = sb.tick_json(&["--dry-run"]);
    assert_eq!(
        skip_of(&dry, &theirs)["detail"],
        "not assigned to sortie (assigned to alice)",
        "{dry:#}"
    );
    sb.drain(5);
    assert_eq!(sb.ticket(&mine).status, "done");
    assert_eq!(sb.ticket(&theirs).status, "todo");
}

#[test]
fn an_unknown_filter_key_is_a_config_error_naming_file_line_and_key() {
    let sb = Sandbox::with_config(&config("", "{lables: [agent-ok]}", "echo done"));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2), "a config error exits 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pipeline.yaml:14:"), "file and line:\n{err}");
    assert!(err.contains("lables"), "the key is named:\n{err}");
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

#[test]
fn removing_the_label_from_a_running_ticket_cancels_its_run() {
    let sb = Sandbox::with_config(&config("{labels: [agent-ok]}", "", "sleep 60; echo done"));
    let id = sb.add("withdrawn", "todo", &["--label", "agent-ok"]);
    let first = spawn_tick(&sb);
    // Wait for the run itself, not only its claim: between the claim and the in-progress
    // move the claim step reads the ticket again, and a label taken away then gives the
    // claim back before anything runs (no run to cancel: the race this test once lost).
    let deadline = Instant::now() + Duration::from_secs(20);
    while sb.ticket(&id).status != "doing" {
        assert!(
            Instant::now() < deadline,
            "the run never moved the ticket to doing"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    // The person takes the opt-in label away (the card stays in its column).
    let path = ticket_file(&sb, &id);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("labels: [agent-ok]\n", "")).unwrap();

    let second = sb.tick_json(&[]);
    assert_eq!(second["cancels"][0]["ticket"], id.as_str(), "{second:#}");
    assert_eq!(
        second["cancels"][0]["reason"], "ticket left the filter: label agent-ok missing",
        "{second:#}"
    );
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "stopped long before 60 s"
    );
    assert_eq!(report["runs"][0]["outcome"], "cancelled", "{report:#}");
    assert!(
        sb.comments(&id).is_empty(),
        "a cancelled run writes nothing"
    );
    assert_eq!(
        sb.ticket(&id).status,
        "todo",
        "back where the person left it"
    );
}

#[test]
fn a_stage_filter_cannot_exclude_what_the_tracker_filter_requires() {
    let sb = Sandbox::with_config(&config(
        "{labels: [agent-ok], assignee: bob}",
        "{exclude_labels: [Agent-OK], assignee: alice}",
        "echo done",
    ));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pipeline_stages[0].filter") && err.contains("no ticket could pass"),
        "{err}"
    );
    assert!(err.contains("cannot ask for \"alice\""), "{err}");
}

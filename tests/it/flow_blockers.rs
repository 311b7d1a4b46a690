//! Issue #18, blockers on the local board: a ticket whose `blocked_by` tickets are not
//! all terminal waits, with the reason, and runs the tick after its last blocker
//! closes; a blocker that cannot be read holds it. Through the real binary.

use crate::common;

use common::Sandbox;

fn config() -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent: {{command: ["sh", "-c", "echo done"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: agent, claim_status: todo, success_status: review}}
"#,
        roles = common::repo().join("roles").display(),
    )
}

fn block(sb: &Sandbox, id: &str, by: &[&str]) {
    let path = sb.board_path().join(id).join("ticket.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "status: todo\n",
        &format!("status: todo\nblocked_by: [{}]\n", by.join(", ")),
        1,
    );
    std::fs::write(&path, text).unwrap();
}

fn skip_reason(report: &serde_json::Value, id: &str) -> serde_json::Value {
    report["skips"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["ticket"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("no skip for {id}: {report:#}"))
}

#[test]
fn a_blocked_ticket_waits_then_runs_the_tick_after_its_blocker_closes() {
    let sb = Sandbox::with_config(&config());
    let blocker = sb.add("the blocker", "backlog", &[]);
    let blocked = sb.add("waits", "todo", &[]);
    let out = sb.ok(&[
        "board", "block", "--board", "board", &blocked, "--by", &blocker,
    ]);
    assert_eq!(out.trim(), format!("{blocked}: blocked by {blocker}"));
    let refused = sb.sortie(&[
        "board", "block", "--board", "board", &blocked, "--by", "404",
    ]);
    assert!(!refused.status.success(), "an unknown blocker is refused");

    let report = sb.tick_json(&[]);
    let skip = skip_reason(&report, &blocked);
    assert_eq!(skip["reason"], "blocked", "{report:#}");
    assert_eq!(skip["by"][0], format!("#{blocker} (backlog)"));
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains(&format!("blocked by #{blocker} (backlog)")),
        "{text}"
    );
    assert_eq!(sb.ticket(&blocked).status, "todo");

    sb.ok(&["board", "move", "--board", "board", &blocker, "done"]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], blocked.as_str(), "{report:#}");
    assert_eq!(sb.ticket(&blocked).status, "review");
}

#[test]
fn a_blocker_that_cannot_be_read_holds_the_ticket() {
    let sb = Sandbox::with_config(&config());
    let broken = sb.add("broken blocker", "backlog", &[]);
    let blocked = sb.add("waits on a missing and a broken ticket", "todo", &[]);
    block(&sb, &blocked, &["99", &broken]);
    std::fs::write(
        sb.board_path().join(&broken).join("ticket.md"),
        "---\nno front matter end",
    )
    .unwrap();
    for _ in 0..2 {
        let report = sb.tick_json(&[]);
        assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
        let skip = skip_reason(&report, &blocked);
        assert_eq!(skip["reason"], "blocked", "{report:#}");
        assert_eq!(
            skip["by"],
            serde_json::json!([
                "#99 (status unknown: missing or unreadable)",
                format!("#{broken} (status unknown: missing or unreadable)")
            ])
        );
    }
    assert!(sb.comments(&blocked).is_empty());
}

#[test]
fn blockers_enabled_false_ignores_them() {
    let sb = Sandbox::with_config(&config().replace(
        "tracker: {kind: local, path: board}",
        "tracker: {kind: local, path: board, blockers: {enabled: false}}",
    ));
    let blocker = sb.add("the blocker", "backlog", &[]);
    let blocked = sb.add("runs anyway", "todo", &[]);
    block(&sb, &blocked, &[&blocker]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], blocked.as_str(), "{report:#}");
}

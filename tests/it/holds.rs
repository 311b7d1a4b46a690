//! Releasing a held ticket on the local board, through the real binary (issue #52, item
//! 8): a person's move made after the hold releases it even when the ticket is back on
//! the same status before the next tick; so do a `/retry` comment from someone who may
//! answer, and `sortie ticket release`. sortie's own writes never do.

use std::sync::Arc;

use chrono::{Duration, Utc};
use sortie::tracker::local::LocalBoard;
use sortie::tracker::Tracker;

use crate::common::{block_on, Pipeline3, Sandbox, KEBAB};

/// The three-stage pipeline whose architect always fails, with no `failure_status`:
/// its final failure holds the ticket in `ready-for-design`. `trusted` is the
/// `trusted_authors:` line's list.
fn failing_architect(trusted: &str) -> Sandbox {
    let yaml = Pipeline3 {
        tracker: "tracker:\n  kind: local\n  path: board",
        statuses: KEBAB,
        terminal: "[done, cancelled]",
        per_role_max_in_flight: "1",
        agent_extra: "",
    }
    .yaml(&["false".to_string()])
    .replace("    failure_status: design-blocked\n", "");
    Sandbox::with_config(&format!("{yaml}trusted_authors: {trusted}\n"))
}

/// The attempts the tick ran.
fn attempts(report: &serde_json::Value) -> Vec<u64> {
    report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["attempt"].as_u64().unwrap())
        .collect()
}

/// The ticket failed its first attempt and is held: a second tick runs nothing.
fn held(sb: &Sandbox) -> String {
    let id = sb.add("Export", "ready-for-design", &[]);
    assert_eq!(attempts(&sb.tick_json(&[])), [1]);
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
    let again = sb.tick_json(&[]);
    assert_eq!(
        attempts(&again),
        [0u64; 0],
        "sortie's own comment and transitions do not release the hold: {again:#}"
    );
    assert_eq!(sb.status_json()["holds"].as_array().unwrap().len(), 1);
    id
}

#[test]
fn issue_52_a_held_ticket_moved_away_and_back_before_the_next_tick_runs_again() {
    let sb = failing_architect("[]");
    let id = held(&sb);
    // A person moves it away and back a minute later (as `sortie board move` does),
    // between two ticks: the status the tick sees is the one it was held in.
    let later = Utc::now() + Duration::seconds(60);
    let person = LocalBoard::open(&sb.board_path())
        .unwrap()
        .with_clock(Arc::new(move || later));
    block_on(person.transition(&id, "ready-for-design", "triage")).unwrap();
    block_on(person.transition(&id, "triage", "ready-for-design")).unwrap();
    assert_eq!(attempts(&sb.tick_json(&[])), [2], "released and run again");
    // Its new final failure holds it again.
    assert_eq!(attempts(&sb.tick_json(&[])), [0u64; 0]);
}

#[test]
fn issue_52_a_retry_comment_from_a_trusted_author_runs_a_held_ticket_again() {
    let sb = failing_architect("[ana]");
    let id = held(&sb);
    let comment = |author: &str, body: &str| {
        sb.ok(&[
            "board", "comment", "--board", "board", &id, "--author", author, "--body", body,
        ]);
    };
    comment("mallory", "/retry");
    comment("ana", "why did this fail?");
    assert_eq!(
        attempts(&sb.tick_json(&[])),
        [0u64; 0],
        "an author not in trusted_authors, or a comment that is not /retry, releases nothing"
    );
    comment("ana", "/retry the network was down");
    assert_eq!(attempts(&sb.tick_json(&[])), [2]);
    // That /retry was before the new failure: it does not release the new hold.
    assert_eq!(attempts(&sb.tick_json(&[])), [0u64; 0]);
}

#[test]
fn issue_52_sortie_ticket_release_runs_a_held_ticket_again() {
    let sb = failing_architect("[]");
    let id = held(&sb);
    let out = sb.ok(&["ticket", "release", &id, "--config", "pipeline.yaml"]);
    assert_eq!(
        out,
        format!(
            "released ticket {id} for architect (held in ready-for-design after \
             agent.exit_nonzero); the next tick runs it\n"
        )
    );
    assert!(sb.status_json()["holds"].as_array().unwrap().is_empty());
    // Nothing left to release: said, and exit 1.
    let again = sb.sortie(&["ticket", "release", &id, "--config", "pipeline.yaml"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr),
        format!("ticket {id} is not held on local: nothing to release\n")
    );
    assert_eq!(attempts(&sb.tick_json(&[])), [2]);
}

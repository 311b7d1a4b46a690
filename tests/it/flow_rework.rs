//! Issue #18, bounded rework loops: qa sends work back to backend with its findings, at
//! most `rework.max` times, then the ticket goes to `rework.then` with a
//! `rework.exhausted` block. Through the real binary on a local board.

use crate::common;

use common::Sandbox;
use sortie::block::{Category, NextAction, OutcomeBlock};

/// backend -> qa, qa's failure_status back to backend's claim status. Each agent
/// appends its role and prompt to `prompts.log` in the sandbox; qa always fails.
fn config(rework: &str) -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent:
  command: ["sh", "-c", "{{ echo \"=== $$SORTIE_ROLE\"; cat; }} >> ../../../prompts.log; if [ \"$$SORTIE_ROLE\" = qa ]; then printf 'outcome: failure\\nreason_code: tests.failed\\ncategory: permanent\\nnext_action: manual\\ndetail: login test fails with a 500\\n' > \"$$SORTIE_RESULT_FILE\"; else printf 'outcome: success\\nsummary: fixed\\n' > \"$$SORTIE_RESULT_FILE\"; fi"]
  timeout_seconds: 60
pipeline_stages:
  - role: backend
    claim_status: design-approved
    success_status: code-review
  - role: qa
    claim_status: code-review
    success_status: done
    failure_status: design-approved
    requires_prior_role: backend{rework}
"#,
        roles = common::repo().join("roles").display(),
    )
}

#[test]
fn qa_sends_work_back_twice_then_the_ticket_goes_to_needs_human() {
    let sb = Sandbox::with_config(&config("\n    rework: {max: 2, then: needs-human}"));
    let id = sb.add("Add a login page", "design-approved", &[]);
    sb.drain(20);

    assert_eq!(sb.ticket(&id).status, "needs-human");
    let blocks = sb.blocks(&id);
    let trail: Vec<(String, String, String)> = blocks
        .iter()
        .map(|b| {
            (
                b.role().to_string(),
                b.kind().to_string(),
                b.to_status().to_string(),
            )
        })
        .collect();
    let round = |to: &str| {
        [
            (
                "backend".to_string(),
                "success".to_string(),
                "code-review".to_string(),
            ),
            ("qa".to_string(), "failure".to_string(), to.to_string()),
        ]
    };
    let expected: Vec<(String, String, String)> = round("design-approved")
        .into_iter()
        .chain(round("design-approved"))
        .chain(round("needs-human"))
        .collect();
    assert_eq!(
        trail, expected,
        "backend runs three times, qa sends back twice"
    );
    let Some(OutcomeBlock::Failure(last)) = blocks.last() else {
        panic!("ends with a failure: {blocks:?}");
    };
    assert_eq!(last.reason_code, "rework.exhausted");
    assert_eq!(last.category, Category::Policy);
    assert_eq!(last.next_action, NextAction::Manual);
    assert!(
        last.detail
            .contains("round 1: tests.failed: login test fails with a 500")
            && last.detail.contains("round 2: tests.failed")
            && last.detail.contains("final: tests.failed"),
        "the block summarises each round:\n{}",
        last.detail
    );

    let log = std::fs::read_to_string(sb.path().join("prompts.log")).expect("prompts.log");
    let backend: Vec<&str> = log
        .split("=== ")
        .filter(|p| p.starts_with("backend"))
        .collect();
    assert_eq!(backend.len(), 3, "{log}");
    assert!(!backend[0].contains("Sent back by"), "{}", backend[0]);
    assert!(
        backend[1].contains("Sent back by qa (rework round 1)")
            && backend[1].contains("login test fails with a 500"),
        "backend's second prompt carries qa's findings:\n{}",
        backend[1]
    );
    assert!(backend[2].contains("rework round 2"), "{}", backend[2]);
}

#[test]
fn without_then_the_exhausted_ticket_is_held_where_it_is() {
    let sb = Sandbox::with_config(&config("\n    rework: {max: 1}"));
    let id = sb.add("Held", "design-approved", &[]);
    sb.drain(20);
    assert_eq!(sb.ticket(&id).status, "code-review");
    let dry = sb.tick_json(&["--dry-run"]);
    assert_eq!(dry["skips"][0]["reason"], "held", "{dry:#}");
    assert_eq!(
        dry["skips"][0]["reason_code"], "rework.exhausted",
        "{dry:#}"
    );
    let kinds: Vec<String> = sb
        .blocks(&id)
        .iter()
        .map(|b| b.role().to_string())
        .collect();
    assert_eq!(kinds, ["backend", "qa", "backend", "qa"]);
}

#[test]
fn a_cycle_without_a_bound_is_refused_with_file_line_and_the_chain() {
    let sb = Sandbox::with_config(&config(""));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pipeline.yaml:15:"),
        "file and line of failure_status:\n{err}"
    );
    assert!(
        err.contains("backend -> qa -> backend") && err.contains("back edge qa -> backend"),
        "the chain and its back edge:\n{err}"
    );
    assert!(err.contains("rework"), "{err}");
}

#[test]
fn qa_in_round_two_requires_a_backend_success_newer_than_its_last_failure() {
    let sb = Sandbox::with_config(&config("\n    rework: {max: 2, then: needs-human}"));
    let id = sb.add("Shortcut", "design-approved", &[]);
    sb.tick(); // backend succeeds
    sb.tick(); // qa fails, sends it back
    assert_eq!(sb.ticket(&id).status, "design-approved");
    // A person pushes it straight back to qa, skipping backend.
    sb.ok(&["board", "move", "--board", "board", &id, "code-review"]);
    let dry = sb.tick_json(&["--dry-run"]);
    assert_eq!(
        dry["skips"][0]["reason"], "prior_role_not_redone",
        "{dry:#}"
    );
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains("waiting for a backend success newer than qa's last failure"),
        "{text}"
    );
    assert_eq!(dry["runs"].as_array().map(Vec::len), Some(0));
}

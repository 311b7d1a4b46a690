//! Issue #14: `pipeline validate` and `pipeline tick --dry-run` say when an in-flight
//! cap, not the board, holds tickets back, per role, per status and for the global cap.

use crate::common;

use common::Sandbox;

/// Three stages; a tick dispatches the last stage's tickets first. qa is under the
/// default per-role cap of 1, backend (its own cap of 5) under a status cap of 2, and
/// architect (its own cap of 5) under what is left of the global cap of 4.
fn sandbox() -> Sandbox {
    let sb = Sandbox::with_config(&format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["true"]}}
concurrency:
  max_in_flight: 4
  per_status_max_in_flight: {{design-approved: 2}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved, max_in_flight: 5}}
  - {{role: backend, claim_status: design-approved, success_status: code-review, max_in_flight: 5}}
  - {{role: qa, claim_status: code-review, success_status: done}}
"#,
        roles = common::repo().join("roles").display(),
    ));
    // 1-4 architect, 5-7 backend, 8-10 qa.
    for (status, n) in [
        ("ready-for-design", 4),
        ("design-approved", 3),
        ("code-review", 3),
    ] {
        for i in 0..n {
            sb.add(&format!("{status} {i}"), status, &[]);
        }
    }
    sb
}

const WAITS: [&str; 3] = [
    "3 tickets wait for the global cap of 4 (concurrency.max_in_flight)",
    "2 tickets wait for role qa's cap of 1 (the stage's max_in_flight, default concurrency.per_role_max_in_flight)",
    "1 ticket waits for status design-approved's cap of 2 (concurrency.per_status_max_in_flight)",
];

#[test]
fn a_dry_run_says_which_cap_holds_how_many_tickets() {
    let sb = sandbox();
    let out = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    let would_run = out.lines().filter(|l| l.contains("would run")).count();
    assert_eq!(would_run, 4, "{out}");
    let waits: Vec<&str> = out.lines().filter(|l| l.contains(" wait")).collect();
    assert_eq!(waits, WAITS, "{out}");

    let json = sb.tick_json(&["--dry-run"]);
    assert_eq!(
        json["cap_waits"],
        serde_json::json!([
            {"scope": "global", "name": "", "limit": 4, "tickets": 3},
            {"scope": "role", "name": "qa", "limit": 1, "tickets": 2},
            {"scope": "status", "name": "design-approved", "limit": 2, "tickets": 1},
        ]),
        "{json:#}"
    );
}

#[test]
fn validate_says_which_cap_holds_tickets_on_a_local_board_now() {
    let sb = sandbox();
    let out = sb.ok(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let now: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("now: "))
        .collect();
    assert_eq!(now, WAITS, "{out}");
    assert!(
        !sb.path().join("state/ledger.db").exists(),
        "validate created no ledger"
    );

    // Without tickets held back by a cap, validate says nothing of caps.
    let empty = Sandbox::with_config(&std::fs::read_to_string(sb.config_path()).unwrap());
    let out = empty.ok(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert!(!out.contains("now: "), "{out}");
}

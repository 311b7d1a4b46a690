//! Session resume through the pipeline (issue #19), with the fake `claude` replaying a real
//! stream: a retry of the same ticket and role runs `claude --resume <session>`, unless
//! `agent.resume: false`; a failed run's usage is recorded.

use crate::common;

use common::Sandbox;

const SESSION: &str = "09b1754f-359d-4c69-baa7-874073bec825";

fn sandbox(resume: bool, argv_file: &std::path::Path) -> Sandbox {
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent:
  preset: claude-code
  command: ["{fake}"]
  resume: {resume}
  env: {{FAKE_SCENARIO: cut, FAKE_ARGV_FILE: "{argv}"}}
retry: {{max_attempts: 2, backoff_base_seconds: 1, backoff_max_seconds: 1}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: done, failure_status: blocked}}
"#,
        roles = common::repo().join("roles").display(),
        fake = common::repo()
            .join("tests/fixtures/agents/fake-claude")
            .display(),
        argv = argv_file.display(),
    );
    Sandbox::with_config(&config)
}

/// Run attempt 1 (a stream cut after the init event named the session), wait out the
/// backoff, run attempt 2; return attempt 2's argv.
fn second_attempt_argv(resume: bool) -> (Vec<String>, Sandbox) {
    let argv_dir = tempfile::tempdir().unwrap();
    let argv_file = argv_dir.path().join("argv");
    let sb = sandbox(resume, &argv_file);
    let id = sb.add("t", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    // Issue #36: the tick report says how the run's session began.
    assert_eq!(report["runs"][0]["session"], "new", "{report:#}");
    let first = std::fs::read_to_string(&argv_file).unwrap();
    assert!(
        !first.contains("--resume"),
        "attempt 1 starts fresh: {first}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["attempt"], 2, "{report:#}");
    let session = if resume { "resumed" } else { "new" };
    assert_eq!(report["runs"][0]["session"], session, "{report:#}");
    assert_eq!(sb.ticket(&id).status, "blocked");
    let argv = std::fs::read_to_string(&argv_file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (argv, sb)
}

#[test]
fn a_retry_resumes_the_previous_session() {
    let (argv, sb) = second_attempt_argv(true);
    let at = argv.iter().position(|a| a == "--resume").expect("--resume");
    assert_eq!(argv[at + 1], SESSION, "{argv:?}");
    // Both failed attempts recorded what their streams reported (one message each).
    let status: serde_json::Value = serde_json::from_str(&sb.ok(&[
        "pipeline",
        "status",
        "--config",
        "pipeline.yaml",
        "--json",
    ]))
    .unwrap();
    let row = &status["usage"][0];
    assert_eq!(row["runs"], 2, "{status:#}");
    assert_eq!(row["tokens_in"], 2000, "{row}");
    assert_eq!(row["cache_write_tokens"], 400, "{row}");
}

#[test]
fn resume_false_starts_every_attempt_fresh() {
    let (argv, _sb) = second_attempt_argv(false);
    assert!(!argv.iter().any(|a| a == "--resume"), "{argv:?}");
}

//! Issue #33, a stage's `verify:` end to end: the real binary (`sortie pipeline tick`)
//! on a local board with a scripted agent that always claims success, and verify
//! commands that fail once, hang, flood their output or report test counts.

use std::path::Path;

use crate::common;

use common::Sandbox;
use sortie::block::{parse_blocks, Category, NextAction, OutcomeBlock, SuccessBlock};

/// A backend stage whose agent appends its prompt to `prompts.log` (after a
/// `=== attempt N` marker) and reports success; its `verify:` is `verify` (the YAML
/// flow mapping), retries 1 s apart.
fn config(dir: &Path, verify: &str) -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent:
  command: ["sh", "-c", "{{ echo \"=== attempt $$SORTIE_STAGE_ATTEMPT\"; cat; }} >> {log}; printf 'outcome: success\\nsummary: implemented\\n' > \"$$SORTIE_RESULT_FILE\""]
  timeout_seconds: 60
retry: {{max_attempts: 3, backoff_base_seconds: 1, backoff_max_seconds: 1}}
pipeline_stages:
  - role: backend
    claim_status: design-approved
    success_status: code-review
    failure_status: blocked
    verify: {verify}
"#,
        roles = common::repo().join("roles").display(),
        log = dir.join("prompts.log").display(),
    )
}

/// A sandbox whose config is [`config`] with `verify` (`DIR` in it: the sandbox path).
fn sandbox(verify: &str) -> Sandbox {
    let sb = Sandbox::with_config("tracker: {kind: local, path: board}\n");
    let dir = sb.path().to_path_buf();
    let verify = verify.replace("DIR", &dir.display().to_string());
    std::fs::write(sb.config_path(), config(&dir, &verify)).unwrap();
    sb
}

/// One `pipeline tick --json` with the clock `offset` seconds ahead (a retry is due).
fn tick_later(sb: &Sandbox, offset: u64) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml", "--json"])
        .current_dir(sb.path())
        .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
        .env_remove("SORTIE_FAULT")
        .env_remove("SORTIE_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The comment bodies that carry an outcome block, oldest first.
fn block_comments(sb: &Sandbox, id: &str) -> Vec<String> {
    sb.comments(id)
        .into_iter()
        .map(|c| c.body)
        .filter(|b| parse_blocks(b).iter().any(Result::is_ok))
        .collect()
}

fn success(block: &OutcomeBlock) -> &SuccessBlock {
    match block {
        OutcomeBlock::Success(s) => s,
        other => panic!("expected a success block: {other:?}"),
    }
}

fn failure(block: &OutcomeBlock) -> &sortie::block::FailureBlock {
    match block {
        OutcomeBlock::Failure(f) => f,
        other => panic!("expected a failure block: {other:?}"),
    }
}

/// `DIR/flaky.sh`: fails with a recognisable message while `DIR/marker` is missing
/// (and creates it), passes once it exists.
fn write_flaky(dir: &Path) {
    std::fs::write(
        dir.join("flaky.sh"),
        format!(
            "if [ -f {m} ]; then echo 'all good now'; exit 0; fi\ntouch {m}\necho 'assertion `left == right` failed: <login> returned 500 & \"oops\"'\necho 'second line of the failure' >&2\nexit 3\n",
            m = dir.join("marker").display()
        ),
    )
    .unwrap();
}

#[test]
fn a_check_that_fails_once_is_retried_with_its_output_in_the_prompt_then_both_pass_as_evidence() {
    let sb = sandbox(
        r#"{commands: [["sh", "-c", "echo first check fine"], ["sh", "DIR/flaky.sh"]], timeout_seconds: 60, retry_with_output: true}"#,
    );
    write_flaky(sb.path());
    let id = sb.add("Add a login page", "design-approved", &[]);

    let first = sb.tick_json(&[]);
    assert_eq!(first["runs"][0]["outcome"], "failure", "{first:#}");
    assert_eq!(
        first["runs"][0]["reason_code"], "verify.failed",
        "{first:#}"
    );
    assert_eq!(
        first["runs"][0]["verify"],
        serde_json::json!(["passed", "failed"]),
        "the run line carries each check's result: {first:#}"
    );
    assert_eq!(
        sb.ticket(&id).status,
        "design-approved",
        "retried, not moved"
    );
    let blocks = sb.blocks(&id);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let failed = failure(&blocks[0]);
    assert_eq!(failed.reason_code, "verify.failed");
    assert_eq!(failed.category, Category::Transient);
    assert_eq!(failed.next_action, NextAction::Retry);
    let flaky = format!("sh {}", sb.path().join("flaky.sh").display());
    assert!(
        failed
            .detail
            .contains(&format!("verify command 2 of 2, `{flaky}`, exited with 3")),
        "the detail names the failing command and how it ended:\n{}",
        failed.detail
    );
    let output_line = "assertion `left == right` failed: <login> returned 500 & \"oops\"";
    assert!(
        failed.detail.contains(output_line) && failed.detail.contains("second line of the failure"),
        "the detail holds the output, stdout and stderr:\n{}",
        failed.detail
    );

    // The retry falls due; the second attempt's prompt carries the failure unmangled.
    let second = tick_later(&sb, 5);
    assert_eq!(second["runs"][0]["outcome"], "success", "{second:#}");
    assert_eq!(second["runs"][0]["attempt"], 2, "{second:#}");
    assert_eq!(sb.ticket(&id).status, "code-review");
    let log = std::fs::read_to_string(sb.path().join("prompts.log")).unwrap();
    let prompts: Vec<&str> = log.split("=== attempt ").skip(1).collect();
    assert_eq!(prompts.len(), 2, "{log}");
    assert!(!prompts[0].contains("verify.failed"), "{}", prompts[0]);
    assert!(
        prompts[1].starts_with('2')
            && prompts[1].contains("verify.failed")
            && prompts[1].contains(&flaky)
            && prompts[1].contains(output_line)
            && prompts[1].contains("second line of the failure"),
        "the second prompt holds the failing command and its output as written:\n{}",
        prompts[1]
    );

    let blocks = sb.blocks(&id);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let passed = success(&blocks[1]);
    let checks = &passed
        .evidence
        .as_ref()
        .expect("the success block carries evidence")
        .checks;
    let commands: Vec<&str> = checks.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(
        commands,
        [r#"sh -c "echo first check fine""#, flaky.as_str()],
        "{checks:?}"
    );
    for check in checks {
        assert_eq!(check.result, "passed", "{check:?}");
        assert_eq!(check.exit_code, Some(0), "{check:?}");
        assert!(
            check.duration_seconds >= 0.0 && check.duration_seconds < 30.0,
            "{check:?}"
        );
    }

    // `pipeline status` shows the ticket's last verify result, and so does its JSON.
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        status.contains("last verify per ticket (1):")
            && status.contains(&format!(
                "  {id} backend attempt 2: verify passed: sh -c \"echo first check fine\" passed in "
            ))
            && status.contains(&format!("; {flaky} passed in ")),
        "{status}"
    );
    let json: serde_json::Value = serde_json::from_str(&sb.ok(&[
        "pipeline",
        "status",
        "--config",
        "pipeline.yaml",
        "--json",
    ]))
    .unwrap();
    assert_eq!(json["verify"][0]["ticket"], id.as_str(), "{json:#}");
    assert_eq!(json["verify"][0]["result"], "passed", "{json:#}");
    assert_eq!(json["verify"][0]["checks"][1]["exit_code"], 0, "{json:#}");
}

/// The pid in `file`, once the command has written it.
fn read_pid(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_hanging_check_is_killed_at_its_timeout_with_its_children() {
    let sb = sandbox(
        r#"{commands: [["sh", "-c", "sleep 300 & echo $$! > DIR/child.pid; echo $$$$ > DIR/parent.pid; echo waiting; wait"]], timeout_seconds: 1}"#,
    );
    let id = sb.add("Hangs", "design-approved", &[]);
    let started = std::time::Instant::now();
    let report = sb.tick_json(&[]);
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(30),
        "the tick waited {took:?} for a check limited to 1 s"
    );
    assert_eq!(
        report["runs"][0]["reason_code"], "verify.timeout",
        "{report:#}"
    );
    assert_eq!(
        report["runs"][0]["verify"],
        serde_json::json!(["timed_out"]),
        "{report:#}"
    );
    let blocks = sb.blocks(&id);
    let timed_out = failure(&blocks[0]);
    assert_eq!(timed_out.reason_code, "verify.timeout");
    assert!(
        timed_out
            .detail
            .contains("did not finish within 1 s and was killed with its processes")
            && timed_out.detail.contains("waiting"),
        "{}",
        timed_out.detail
    );
    for file in ["parent.pid", "child.pid"] {
        let pid = read_pid(&sb.path().join(file));
        assert!(
            common::gone_within(pid, std::time::Duration::from_secs(20)),
            "{file} ({pid}) still runs after the timeout"
        );
    }
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        status.contains(&format!(
            "  {id} backend attempt 1: verify timed_out (verify.timeout): the agent reported success, but verify command 1 of 1"
        )),
        "{status}"
    );
}

#[test]
fn colour_escapes_and_a_ten_megabyte_flood_leave_a_bounded_plain_detail() {
    let sb = sandbox(
        r#"{commands: [["sh", "-c", "printf '\\033[31mred error\\033[0m\\n\\033]0;title\\007'; head -c 10000000 /dev/zero | tr '\\000' x; printf '\\n\\033[1;32mEND OF FLOOD\\033[0m\\r\\n'; exit 1"]], timeout_seconds: 60}"#,
    );
    let id = sb.add("Floods", "design-approved", &[]);
    sb.tick();
    let blocks = sb.blocks(&id);
    let flooded = failure(&blocks[0]);
    assert_eq!(flooded.reason_code, "verify.failed");
    assert!(
        flooded.detail.len() < 6_000,
        "the detail is bounded: {} bytes",
        flooded.detail.len()
    );
    assert!(
        flooded.detail.contains("END OF FLOOD"),
        "the tail is kept: {}",
        &flooded.detail[flooded.detail.len().saturating_sub(300)..]
    );
    let comments = block_comments(&sb, &id);
    assert_eq!(comments.len(), 1);
    assert!(
        comments[0].len() < 12_000,
        "the whole comment is bounded: {} bytes",
        comments[0].len()
    );
    assert!(
        !comments[0].contains('\u{1b}') && !comments[0].contains('\u{7}'),
        "no escape or bell byte reaches the ticket: {:?}",
        &comments[0][..comments[0].len().min(400)]
    );
}

#[test]
fn without_retry_with_output_a_failing_check_is_final() {
    let sb = sandbox(
        r#"{commands: [["sh", "-c", "echo 3 tests broken; exit 2"]], retry_with_output: false}"#,
    );
    let id = sb.add("Final", "design-approved", &[]);
    let first = sb.tick_json(&[]);
    assert_eq!(
        first["runs"][0]["reason_code"], "verify.failed",
        "{first:#}"
    );
    assert_eq!(
        sb.ticket(&id).status,
        "blocked",
        "the stage's failure_status"
    );
    let blocks = sb.blocks(&id);
    let failed = failure(&blocks[0]);
    assert_eq!(failed.category, Category::Permanent);
    assert_eq!(failed.next_action, NextAction::Manual);
    assert!(
        failed.detail.contains("3 tests broken"),
        "{}",
        failed.detail
    );

    // Not retried: a later tick, past any backoff, runs nothing and adds no block.
    let later = tick_later(&sb, 600);
    assert_eq!(later["runs"], serde_json::json!([]), "{later:#}");
    assert_eq!(sb.blocks(&id).len(), 1);
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(status.contains("retry queue (0):"), "{status}");
    assert!(
        status.contains(&format!(
            "  {id} backend attempt 1: verify failed (verify.failed): the agent reported success, but verify command 1 of 1, `sh -c \"echo 3 tests broken; exit 2\"`, exited with 2"
        )),
        "{status}"
    );
}

/// Issue #52: a verify program that is not installed fails the run once and for good
/// (`verify.cannot_start`, next action manual), even with `retry_with_output: true`: the
/// agent is not run again for a problem of the config or the machine.
#[test]
fn a_verify_program_that_cannot_start_is_a_final_config_failure_issue_52() {
    let sb = sandbox(
        r#"{commands: [["true"], ["no-such-verify-tool-52", "run"]], retry_with_output: true}"#,
    );
    let id = sb.add("Missing tool", "design-approved", &[]);
    let first = sb.tick_json(&[]);
    assert_eq!(
        first["runs"][0]["reason_code"], "verify.cannot_start",
        "{first:#}"
    );
    assert_eq!(
        sb.ticket(&id).status,
        "blocked",
        "the stage's failure_status"
    );
    let blocks = sb.blocks(&id);
    let failed = failure(&blocks[0]);
    assert_eq!(failed.category, Category::Permanent);
    assert_eq!(failed.next_action, NextAction::Manual);
    assert!(
        failed.detail.starts_with(
            "verify command 2 of 2, `no-such-verify-tool-52 run`, cannot start `no-such-verify-tool-52`"
        ) && failed.detail.contains("change the stage's `verify.commands`"),
        "{}",
        failed.detail
    );

    // The agent is not run again: a later tick, past any backoff, runs nothing.
    let later = tick_later(&sb, 600);
    assert_eq!(later["runs"], serde_json::json!([]), "{later:#}");
    let prompts = std::fs::read_to_string(sb.path().join("prompts.log")).unwrap();
    assert_eq!(prompts.matches("=== attempt").count(), 1, "{prompts}");
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        status.contains(&format!(
            "  {id} backend attempt 1: verify cannot_start (verify.cannot_start): verify command 2 of 2"
        )),
        "{status}"
    );
}

#[test]
fn a_test_summary_in_a_passing_check_is_recorded_as_test_counts() {
    let sb = sandbox(
        r#"{commands: [["sh", "-c", "echo 'running 13 tests'; echo 'test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.02s'"]]}"#,
    );
    let id = sb.add("Counted", "design-approved", &[]);
    sb.tick();
    assert_eq!(sb.ticket(&id).status, "code-review");
    let blocks = sb.blocks(&id);
    let check = &success(&blocks[0]).evidence.as_ref().unwrap().checks[0];
    let tests = check.tests.expect("test counts recorded");
    assert_eq!((tests.passed, tests.failed, tests.skipped), (12, 0, 1));
    // The block as posted says so too, in YAML a person reads.
    let comments = block_comments(&sb, &id);
    assert!(
        comments[0].contains("passed: 12") && comments[0].contains("failed: 0"),
        "{}",
        comments[0]
    );
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(
        status.contains("passed (12 passed, 0 failed, 1 skipped) in "),
        "{status}"
    );
}

#[test]
fn a_pipeline_without_verify_shows_no_verify_results_in_status() {
    let sb = Sandbox::three_stages(1);
    let id = sb.add("Plain", "ready-for-design", &[]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert!(
        report["runs"][0].get("verify").is_none(),
        "a run without verify has no verify field: {report:#}"
    );
    assert_eq!(sb.ticket(&id).status, "design-approved");
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    assert!(status.contains("last verify per ticket (0):"), "{status}");
}

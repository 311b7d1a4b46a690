//! Issue #33, crash-anywhere for `verify`: a process killed after the checks ran and
//! before the outcome was stored leaves the agent's success to the next claim, which
//! runs the checks again (never the agent) and posts one block.

use std::process::Command;

use sortie::block::OutcomeBlock;

use crate::common::{repo, Sandbox};

fn script(sb: &Sandbox, name: &str, body: &str) -> String {
    let path = sb.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path.display().to_string()
}

fn lines(sb: &Sandbox, name: &str) -> usize {
    std::fs::read_to_string(sb.path().join(name))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_crash_after_verification_reruns_the_checks_never_the_agent_and_posts_one_block() {
    let sb = Sandbox::with_config("");
    let log = sb.path().display().to_string();
    let agent = script(
        &sb,
        "agent.sh",
        &format!(
            "echo run >> {log}/agent.log\nprintf 'outcome: success\\nsummary: built it\\n' > \"$SORTIE_RESULT_FILE\"\n"
        ),
    );
    let check = script(
        &sb,
        "check.sh",
        &format!("echo check >> {log}/verify.log\necho 'test result: ok. 4 passed; 0 failed; 0 ignored'\n"),
    );
    let config = format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
claim_lock_ttl_seconds: 60
agent: {{command: ["{agent}"], timeout_seconds: 60}}
pipeline_stages:
  - role: backend
    claim_status: todo
    success_status: done
    verify:
      commands: [["{check}"]]
"#,
        roles = repo().join("roles").display(),
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb.add("Build the widget", "todo", &[]);

    let crashed = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env("SORTIE_FAULT", "after_verify")
        .output()
        .unwrap();
    assert!(!crashed.status.success(), "the fault killed the tick");
    assert_eq!((lines(&sb, "agent.log"), lines(&sb, "verify.log")), (1, 1));
    assert!(sb.blocks(&id).is_empty(), "nothing was written");

    // Later than the killed tick's lease.
    let after = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env_remove("SORTIE_FAULT")
        .env("SORTIE_CLOCK_OFFSET_SECONDS", "600")
        .output()
        .unwrap();
    assert!(
        after.status.success(),
        "{}",
        String::from_utf8_lossy(&after.stderr)
    );
    assert_eq!(lines(&sb, "agent.log"), 1, "the agent never ran again");
    assert_eq!(lines(&sb, "verify.log"), 2, "the checks ran again");
    let blocks = sb.blocks(&id);
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    let OutcomeBlock::Success(block) = &blocks[0] else {
        panic!("{blocks:?}")
    };
    assert_eq!(block.summary, "built it");
    let evidence = block.evidence.as_ref().expect("evidence");
    assert_eq!(evidence.checks.len(), 1);
    assert_eq!(evidence.checks[0].result, "passed");
    assert_eq!(evidence.checks[0].tests.map(|t| t.passed), Some(4));
    assert_eq!(sb.ticket(&id).status, "done");
}

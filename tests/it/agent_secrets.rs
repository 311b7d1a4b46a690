//! Secrets stay secret: a tracker token in sortie's environment does not reach the
//! agent unless the config passes it on explicitly. (It sets a process-wide environment
//! variable that no other test reads.)

use std::collections::BTreeMap;
use std::time::Duration;

use sortie::agent::{run_agent, AgentOutcome, AgentSpec, RunEnd, RunPlan};
use tokio_util::sync::CancellationToken;

async fn agent_sees(dir: &std::path::Path, env: BTreeMap<String, String>) -> String {
    let plan = RunPlan {
        command: vec![
            "sh".into(),
            "-c".into(),
            "echo \"token=${SORTIE_TEST_TOKEN:-unset}\"".into(),
        ],
        env,
        env_remove: vec!["SORTIE_TEST_TOKEN".into()],
        preset: sortie::config::AgentPreset::Command,
        prompt: String::new(),
        workspace: dir.join("ws"),
        run_dir: dir.join(format!("run-{}", uuid::Uuid::new_v4())),
        timeout: Duration::from_secs(30),
        stall_timeout: None,
        handshake_timeout: Duration::from_secs(60),
        resume: None,
        resume_command: None,
        stream: Default::default(),
        sandbox: None,
    };
    match run_agent(
        AgentSpec {
            plan: &plan,
            vars: BTreeMap::new(),
        },
        CancellationToken::new(),
        |_| {},
    )
    .await
    {
        RunEnd::Finished(r) => match r.outcome {
            AgentOutcome::Success { summary, .. } => summary,
            other => panic!("{other:?}"),
        },
        RunEnd::Cancelled { .. } => panic!("cancelled"),
    }
}

#[tokio::test]
async fn the_tracker_token_is_not_inherited_unless_passed_explicitly() {
    std::env::set_var("SORTIE_TEST_TOKEN", "ghp_secret");
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(agent_sees(dir.path(), BTreeMap::new()).await, "token=unset");
    let explicit = BTreeMap::from([("SORTIE_TEST_TOKEN".to_string(), "ghp_secret".to_string())]);
    assert_eq!(agent_sees(dir.path(), explicit).await, "token=ghp_secret");
}

//! `sortie tracker check` and `sortie pipeline tick` on a Linear config, through the
//! real binary against the Linear model: the key comes from `token_env`, every state
//! is checked, and a missing state stops the first tick naming the states there are.

use crate::linear_model;

use std::path::Path;

use linear_model::{LinearModel, TOKEN};

fn write_config(dir: &Path, api_url: &str, failure_status: &str) {
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    let text = format!(
        r#"
tracker:
  kind: linear
  team: ENG
  api_url: "{api_url}"
  token_env: SORTIE_TEST_LINEAR_KEY
state_root: state
roles_dir: {roles}
agent: {{command: ["true"]}}
terminal_states: [done, canceled]
pipeline_stages:
  - role: architect
    claim_status: ready for design
    success_status: done
    failure_status: {failure_status}
"#,
        roles = roles.display()
    );
    std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
}

async fn sortie(dir: &Path, key: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
    cmd.args(args)
        .args(["--config", "pipeline.yaml"])
        .current_dir(dir)
        .env_remove("SORTIE_TEST_LINEAR_KEY");
    if let Some(key) = key {
        cmd.env("SORTIE_TEST_LINEAR_KEY", key);
    }
    let out = cmd.output().await.expect("run sortie");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracker_check_reports_the_key_the_team_every_state_and_the_rate_limit() {
    let model = LinearModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url(), "blocked");

    let (ok, _, stderr) = sortie(dir.path(), None, &["tracker", "check"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("environment variable SORTIE_TEST_LINEAR_KEY is not set"),
        "{stderr}"
    );
    assert!(model.requests().is_empty(), "nothing sent without a key");

    let (ok, stdout, stderr) = sortie(dir.path(), Some(TOKEN), &["tracker", "check"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "tracker linear:ENG");
    assert!(
        lines[1].starts_with("ok   key: authenticated as sortie bot <sortie@acme.test>"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("ok   team: ENG (Engineering), 12 workflow state(s): Backlog, Todo"),
        "{stdout}"
    );
    assert_eq!(
        lines[3],
        "ok   state ready for design: Ready for design (type unstarted)"
    );
    assert_eq!(lines[4], "ok   state done: Done (type completed)");
    assert_eq!(lines[5], "ok   state blocked: Blocked (type started)");
    assert!(
        lines[6].starts_with("ok   rate limit: requestLimit: "),
        "{stdout}"
    );
    assert!(lines[7].starts_with("ok   sandbox: none: "), "{stdout}");
    assert!(
        lines[8].starts_with("rate limit: ") && lines[8].ends_with(" requests left"),
        "{stdout}"
    );
    assert!(model.refused().is_empty(), "{:?}", model.refused());

    let (ok, stdout, _) = sortie(dir.path(), Some("lin_api_wrong"), &["tracker", "check"]).await;
    assert!(!ok);
    assert!(stdout.contains("FAIL key: unauthorized"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_missing_from_the_team_stops_the_first_tick_naming_the_states_there_are() {
    let model = LinearModel::start().await;
    model.add_issue("t", "Ready for design", &[]);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url(), "needs help");

    let (ok, stdout, stderr) = sortie(dir.path(), Some(TOKEN), &["tracker", "check"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("FAIL state needs help: team ENG has no workflow state named \"needs help\"; its states are: Backlog, Todo, Ready for design"),
        "{stdout}\n{stderr}"
    );

    let (ok, stdout, stderr) = sortie(dir.path(), Some(TOKEN), &["pipeline", "tick"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("Linear team ENG has no workflow state named \"needs help\"; its states are: Backlog, Todo, Ready for design"),
        "{stdout}\n{stderr}"
    );
    assert!(
        !model
            .log()
            .iter()
            .any(|l| l.starts_with("SortieIssueUpdate") || l.starts_with("SortieCommentCreate")),
        "nothing written: {:?}",
        model.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_validate_describes_the_linear_tracker_without_a_request() {
    let model = LinearModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url(), "blocked");
    let (ok, stdout, stderr) = sortie(dir.path(), None, &["pipeline", "validate"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    let expected = format!(
        "tracker: Linear team ENG at {} (API key from $SORTIE_TEST_LINEAR_KEY, statuses are the team's workflow states)",
        model.api_url()
    );
    assert!(stdout.lines().any(|l| l == expected), "{stdout}");
    assert!(model.requests().is_empty(), "validate is offline");
}

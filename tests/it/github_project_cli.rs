//! `sortie pipeline validate`, `tracker check` and `pipeline tick` on a GitHub Project
//! config, through the real binary against the project model: the token comes from
//! `token_env`, every status is checked against the field's options, and a tick moves a
//! card and comments on its issue.

use std::path::Path;

use crate::github_project_model::{ProjectModel, LOGIN, TOKEN};

fn write_config(dir: &Path, api_url: &str, failure_status: &str) {
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    let text = format!(
        r#"
tracker:
  kind: github_project
  owner: acme
  project: 7
  api_url: "{api_url}"
  token_env: SORTIE_TEST_GITHUB_TOKEN
state_root: state
roles_dir: {roles}
agent: {{command: ["true"]}}
terminal_states: [done]
pipeline_stages:
  - role: architect
    claim_status: todo
    success_status: done
    failure_status: {failure_status}
"#,
        roles = roles.display()
    );
    std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
}

async fn sortie(dir: &Path, token: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
    cmd.args(args)
        .args(["--config", "pipeline.yaml"])
        .current_dir(dir)
        .env_remove("SORTIE_TEST_GITHUB_TOKEN");
    if let Some(token) = token {
        cmd.env("SORTIE_TEST_GITHUB_TOKEN", token);
    }
    let out = cmd.output().await.expect("run sortie");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_describes_the_project_and_check_lists_the_options_and_the_points() {
    let model = ProjectModel::start(&["Todo", "Blocked", "Done"]).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url(), "blocked");

    let (ok, stdout, stderr) = sortie(dir.path(), None, &["pipeline", "validate"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    let expected = format!(
        "tracker: GitHub Project acme/7 at {} (token from $SORTIE_TEST_GITHUB_TOKEN, statuses are the options of its field \"Status\")",
        model.api_url()
    );
    assert!(stdout.contains(&expected), "{stdout}");
    assert!(model.log().is_empty(), "validate sends nothing");

    let (ok, _, stderr) = sortie(dir.path(), None, &["tracker", "check"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("environment variable SORTIE_TEST_GITHUB_TOKEN is not set"),
        "{stderr}"
    );

    let (ok, stdout, stderr) = sortie(dir.path(), Some(TOKEN), &["tracker", "check"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "tracker github_project:acme/7");
    assert_eq!(lines[1], format!("ok   token: authenticated as {LOGIN}"));
    assert_eq!(
        lines[2],
        "ok   project: acme/7 (\"Delivery\"), field \"Status\" with 3 option(s): Todo, Blocked, Done"
    );
    assert!(
        stdout.contains("ok   status todo: option \"Todo\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("GraphQL point(s) left this hour"),
        "{stdout}"
    );
    assert!(stdout.contains(" GraphQL points left"), "{stdout}");

    write_config(dir.path(), &model.api_url(), "needs help");
    let (ok, stdout, _) = sortie(dir.path(), Some(TOKEN), &["tracker", "check"]).await;
    assert!(!ok, "{stdout}");
    assert!(
        stdout.contains("FAIL status needs help: field \"Status\" has no option named \"needs help\"; its options are: Todo, Blocked, Done"),
        "{stdout}"
    );
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_moves_the_card_and_comments_on_the_issue() {
    let model = ProjectModel::start(&["Todo", "Blocked", "Done"]).await;
    let n = model.add_issue("Export", "Todo");
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url(), "blocked");
    let (ok, stdout, stderr) = sortie(dir.path(), Some(TOKEN), &["pipeline", "tick"]).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("run ticket acme/widgets#{n} role architect")),
        "{stdout}"
    );
    assert_eq!(model.status_of(n).as_deref(), Some("Done"));
    let comments = model.github.issue(n).comments;
    assert_eq!(comments.len(), 1);
    assert_eq!(comments[0].author, LOGIN);
    assert!(
        comments[0].body.contains("sortie:success"),
        "{}",
        comments[0].body
    );
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

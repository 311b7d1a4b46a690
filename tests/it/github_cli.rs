//! `sortie tracker check` on a GitHub config, through the real binary: the token comes
//! from the variable `token_env` names, and a missing one is a clear error.

use crate::github_model;

use std::path::Path;

use github_model::{GithubModel, LOGIN, TOKEN};

fn write_config(dir: &Path, api_url: &str) {
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    let text = format!(
        r#"
tracker:
  kind: github
  repo: acme/widgets
  api_url: "{api_url}"
  token_env: SORTIE_TEST_GH_TOKEN
state_root: state
roles_dir: {roles}
agent: {{command: ["true"]}}
terminal_states: [done]
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    success_status: done
"#,
        roles = roles.display()
    );
    std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
}

async fn check(dir: &Path, token: Option<&str>, extra: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
    cmd.args(["tracker", "check", "--config", "pipeline.yaml"])
        .args(extra)
        .current_dir(dir)
        .env_remove("SORTIE_TEST_GH_TOKEN");
    if let Some(token) = token {
        cmd.env("SORTIE_TEST_GH_TOKEN", token);
    }
    cmd.output().await.expect("run sortie")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracker_check_reads_the_token_from_token_env_and_creates_missing_labels() {
    let model = GithubModel::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url());

    let out = check(dir.path(), None, &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("environment variable SORTIE_TEST_GH_TOKEN is not set"),
        "{stderr}"
    );
    assert!(model.requests().is_empty(), "nothing sent without a token");

    let out = check(dir.path(), Some(TOKEN), &["--create-missing-labels"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("ok   token: authenticated as {LOGIN}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok   status done: label status:done created"),
        "{stdout}"
    );
    assert!(stdout.contains("rate limit: "), "{stdout}");
    assert!(model.repo_labels().contains("status:ready-for-design"));
    assert!(
        dir.path().join("state/github-etags.json").is_file(),
        "the ETag cache is persisted under the state root"
    );
}

//! Secrets stay secret: with a GitHub token in sortie's environment, no output of any
//! command, no comment, no run log, prompt, result or ledger file contains it, and the
//! agent does not receive it.

use crate::github_model;

use std::path::Path;

use github_model::{GithubModel, TOKEN};

fn write_config(dir: &Path, api_url: &str) {
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    // The agent prints its whole environment: if the token were inherited, it would end
    // up in the run log and in the summary of the success block on the issue.
    let text = format!(
        r#"
tracker:
  kind: github
  repo: acme/widgets
  api_url: "{api_url}"
  token_env: SORTIE_TEST_GH_TOKEN
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "env >&2; env | grep -E '^SORTIE_(TICKET_ID|TEST_GH_TOKEN)='; echo done"]}}
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

async fn sortie(dir: &Path, args: &[&str]) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env("SORTIE_TEST_GH_TOKEN", TOKEN)
        .env("SORTIE_LOG", "debug")
        .output()
        .await
        .expect("run sortie");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "sortie {args:?} failed:\n{text}");
    text
}

fn files_containing(root: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path.display().to_string());
                }
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tracker_token_appears_in_no_output_comment_or_file() {
    let model = GithubModel::start().await;
    let number = model.add_issue("Add a login page", &["status:ready-for-design"]);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.api_url());

    let mut said = String::new();
    for args in [
        &["pipeline", "validate", "--config", "pipeline.yaml"][..],
        &[
            "tracker",
            "check",
            "--config",
            "pipeline.yaml",
            "--create-missing-labels",
        ],
        &[
            "pipeline",
            "tick",
            "--config",
            "pipeline.yaml",
            "--dry-run",
            "--json",
        ],
        &["pipeline", "tick", "--config", "pipeline.yaml", "-vv"],
        &["pipeline", "tick", "--config", "pipeline.yaml", "--json"],
        &["pipeline", "status", "--config", "pipeline.yaml", "--json"],
        &["pipeline", "status", "--config", "pipeline.yaml"],
        &["claims", "list", "--config", "pipeline.yaml", "--json"],
    ] {
        said.push_str(&sortie(dir.path(), args).await);
    }
    let issue = model.issue(number);
    assert!(
        issue.labels.contains(&"status:done".to_string()),
        "the run happened: {:?}",
        issue.labels
    );
    let bodies: Vec<&str> = issue.comments.iter().map(|c| c.body.as_str()).collect();
    assert!(
        bodies.iter().any(|b| b.contains("SORTIE_TICKET_ID=")),
        "the agent's env is in the block summary"
    );

    assert!(
        !said.contains(TOKEN),
        "a command printed the token:\n{said}"
    );
    for body in &bodies {
        assert!(
            !body.contains(TOKEN),
            "a comment carries the token:\n{body}"
        );
    }
    let leaked = files_containing(&dir.path().join("state"), TOKEN.as_bytes());
    assert!(
        leaked.is_empty(),
        "files under the state root contain the token: {leaked:?}"
    );
}

/// Issue #14: every secret sortie holds, not only the tracker token: the HTTP API
/// bearer token, every webhook secret (GitHub, GitLab, Gitea, Linear, Jira) and every
/// hook's `secret_env`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_sortie_holds_reaches_the_agent() {
    let model = GithubModel::start().await;
    let number = model.add_issue("Add a login page", &["status:ready-for-design"]);
    let dir = tempfile::tempdir().unwrap();
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    // The agent writes its whole environment to a file outside the state root (its
    // workspace goes when the ticket reaches done).
    let config = format!(
        r#"
tracker:
  kind: github
  repo: acme/widgets
  api_url: "{api_url}"
  token_env: SORTIE_TEST_GH_TOKEN
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "env > {env_file}; echo done"]}}
http:
  token_env: SORTIE_TEST_HTTP_TOKEN
  github_webhook_secret_env: SORTIE_TEST_GH_WEBHOOK_SECRET
  gitlab_webhook_secret_env: SORTIE_TEST_GL_WEBHOOK_SECRET
  gitea_webhook_secret_env: SORTIE_TEST_GITEA_WEBHOOK_SECRET
  linear_webhook_secret_env: SORTIE_TEST_LINEAR_WEBHOOK_SECRET
  jira_webhook_secret_env: SORTIE_TEST_JIRA_WEBHOOK_SECRET
hooks:
  - event: "*"
    webhook: "http://127.0.0.1:9/hook"
    secret_env: SORTIE_TEST_HOOK_SECRET
    timeout_seconds: 1
    max_attempts: 1
  - event: "tracker_pipeline.handoff"
    webhook: "http://127.0.0.1:9/other"
    secret_env: SORTIE_TEST_HOOK_SECRET_2
    timeout_seconds: 1
    max_attempts: 1
terminal_states: [done]
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    success_status: done
"#,
        api_url = model.api_url(),
        roles = roles.display(),
        env_file = dir.path().join("agent-env.txt").display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let secrets = [
        ("SORTIE_TEST_GH_TOKEN", TOKEN),
        ("SORTIE_TEST_HTTP_TOKEN", "http-bearer-7f3a"),
        ("SORTIE_TEST_GH_WEBHOOK_SECRET", "gh-webhook-91bc"),
        ("SORTIE_TEST_GL_WEBHOOK_SECRET", "gl-webhook-2e7a"),
        ("SORTIE_TEST_GITEA_WEBHOOK_SECRET", "gitea-webhook-c41d"),
        ("SORTIE_TEST_LINEAR_WEBHOOK_SECRET", "linear-webhook-88f0"),
        ("SORTIE_TEST_JIRA_WEBHOOK_SECRET", "jira-webhook-03b9"),
        ("SORTIE_TEST_HOOK_SECRET", "hook-hmac-55de"),
        ("SORTIE_TEST_HOOK_SECRET_2", "hook-hmac-7a12"),
    ];
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml", "-vv"])
        .current_dir(dir.path())
        .envs(secrets)
        .output()
        .await
        .expect("run sortie");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    for (name, value) in secrets {
        assert!(!said.contains(value), "sortie printed {name}:\n{said}");
        let leaked = files_containing(&dir.path().join("state"), value.as_bytes());
        assert!(leaked.is_empty(), "{name} is in {leaked:?}");
    }
    assert!(
        model
            .issue(number)
            .labels
            .contains(&"status:done".to_string()),
        "the run happened"
    );
    let env_file = dir.path().join("agent-env.txt");
    let env = std::fs::read_to_string(&env_file).expect("the agent wrote its environment");
    assert!(env.contains("SORTIE_TICKET_ID="), "{env}");
    for (name, value) in secrets {
        assert!(
            !env.contains(value) && !env.contains(&format!("{name}=")),
            "the agent received {name}:\n{env}"
        );
    }
}

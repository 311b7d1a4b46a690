//! The model backed by a bare git repository: heads, mergeability and merges are
//! git's.

use std::path::Path;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::Api;
use crate::common::git;
use crate::github_model::GithubModel;

/// Commit `text` into `file` on `branch` of the clone `work` and push it.
fn commit_and_push(work: &Path, branch: &str, file: &str, text: &str) -> String {
    git(
        work,
        &[
            "checkout",
            "--quiet",
            "-B",
            branch,
            &format!("origin/{branch}"),
        ],
    );
    std::fs::write(work.join(file), text).unwrap();
    git(work, &["add", file]);
    git(
        work,
        &["commit", "--quiet", "-m", &format!("{branch}: {file}")],
    );
    git(
        work,
        &[
            "push",
            "--quiet",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ],
    );
    git(work, &["fetch", "--quiet", "origin"]);
    git(work, &["rev-parse", "HEAD"])
}

#[tokio::test]
async fn with_a_repository_heads_mergeability_and_merges_are_git_s() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(
        root,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            "remote.git",
        ],
    );
    git(root, &["clone", "--quiet", "remote.git", "work"]);
    let (bare, work) = (root.join("remote.git"), root.join("work"));
    std::fs::write(work.join("README"), "one\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "--quiet", "-m", "initial"]);
    git(
        &work,
        &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
    );
    git(&work, &["fetch", "--quiet", "origin"]);
    for branch in ["sortie/20", "sortie/21"] {
        git(
            &work,
            &[
                "push",
                "--quiet",
                "origin",
                &format!("origin/main:refs/heads/{branch}"),
            ],
        );
    }
    git(&work, &["fetch", "--quiet", "origin"]);
    let conflicting = commit_and_push(&work, "sortie/20", "README", "two\n");
    let separate = commit_and_push(&work, "sortie/21", "NEW", "new\n");
    commit_and_push(&work, "main", "README", "three\n");

    let model = GithubModel::with_remote(&bare).await;
    let a = model.open_pull("sortie/20", "main", "Conflicts");
    let b = model.open_pull("sortie/21", "main", "Merges");
    let api = Api::new(&model);

    let (_, _, pull_a) = api.get(&format!("pulls/{a}"), None).await;
    assert_eq!(pull_a["head"]["sha"], conflicting.as_str());
    assert_eq!(
        (&pull_a["mergeable"], &pull_a["mergeable_state"]),
        (&json!(false), &json!("dirty"))
    );
    assert_eq!(model.conflicting_paths(a), vec!["README".to_string()]);
    let (_, tag, pull_b) = api.get(&format!("pulls/{b}"), None).await;
    assert_eq!(pull_b["head"]["sha"], separate.as_str());
    assert_eq!(pull_b["mergeable_state"], "clean");
    assert!(model.conflicting_paths(b).is_empty());

    let (status, _) = api
        .put(&format!("pulls/{a}/merge"), json!({"sha": conflicting}))
        .await;
    assert_eq!(
        status,
        StatusCode::METHOD_NOT_ALLOWED,
        "git says it conflicts"
    );

    let pushed = commit_and_push(&work, "sortie/21", "NEW", "newer\n");
    let (status, new_tag, pull_b) = api.get(&format!("pulls/{b}"), tag.as_deref()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a push to the branch changes the answer"
    );
    assert_ne!(new_tag, tag);
    assert_eq!(pull_b["head"]["sha"], pushed.as_str());
    let (status, _) = api
        .put(&format!("pulls/{b}/merge"), json!({"sha": separate}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "the branch moved");

    let (status, body) = api
        .put(
            &format!("pulls/{b}/merge"),
            json!({"sha": pushed, "merge_method": "merge"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let main = git(&bare, &["rev-parse", "refs/heads/main"]);
    assert_eq!(body["sha"], main.as_str(), "main moved to the merge commit");
    let parents = git(&bare, &["log", "-1", "--format=%P", &main]);
    assert!(parents.ends_with(&pushed), "a merge of the head: {parents}");
    assert_eq!(git(&bare, &["show", &format!("{main}:NEW")]), "newer");
    let (_, _, pull_a) = api.get(&format!("pulls/{a}"), None).await;
    assert_eq!(
        pull_a["base"]["sha"],
        main.as_str(),
        "the other pull sees the new base"
    );

    // A mergeability the test sets wins over git's.
    model.set_mergeable(a, None, "unknown");
    let (_, _, pull_a) = api.get(&format!("pulls/{a}"), None).await;
    assert_eq!(pull_a["mergeable"], Value::Null);
}

//! The GitLab and Gitea models backed by a bare git repository: heads, conflicts and
//! merges are git's, and the SHA guard of a merge holds against a push that races it.
//! `Remote` is the bare repository with a clone to push from, for other tests too.

use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::json;

use super::Api;
pub use crate::common::git;
use crate::{gitea_model, gitlab_model};

/// A bare repository with `main` (one commit: `README`) and a clone to push from.
pub struct Remote {
    _dir: tempfile::TempDir,
    pub bare: PathBuf,
    pub work: PathBuf,
}

impl Remote {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        git(
            &root,
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                "remote.git",
            ],
        );
        git(&root, &["clone", "--quiet", "remote.git", "work"]);
        let (bare, work) = (root.join("remote.git"), root.join("work"));
        std::fs::write(work.join("README"), "one\n").unwrap();
        git(&work, &["add", "README"]);
        git(&work, &["commit", "--quiet", "-m", "initial"]);
        git(
            &work,
            &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
        );
        git(&work, &["fetch", "--quiet", "origin"]);
        Remote {
            _dir: dir,
            bare,
            work,
        }
    }

    /// A new branch at `main`.
    pub fn branch(&self, name: &str) {
        git(
            &self.work,
            &[
                "push",
                "--quiet",
                "origin",
                &format!("origin/main:refs/heads/{name}"),
            ],
        );
        git(&self.work, &["fetch", "--quiet", "origin"]);
    }

    /// Commit `text` into `file` on `branch` and push it; the new commit.
    pub fn commit(&self, branch: &str, file: &str, text: &str) -> String {
        commit_and_push(&self.work, branch, file, text)
    }

    /// Where `branch` points in the bare repository.
    pub fn head_of(&self, branch: &str) -> String {
        git(&self.bare, &["rev-parse", &format!("refs/heads/{branch}")])
    }
}

/// Commit `text` into `file` on `branch` of the clone `work` and push it.
pub fn commit_and_push(work: &Path, branch: &str, file: &str, text: &str) -> String {
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

/// Branches `sortie/1` (conflicts with main once main changes README) and
/// `sortie/2` (a new file), and main moved under `sortie/1`.
fn two_branches(remote: &Remote) -> (String, String) {
    remote.branch("sortie/1");
    remote.branch("sortie/2");
    let conflicting = remote.commit("sortie/1", "README", "two\n");
    let separate = remote.commit("sortie/2", "NEW", "new\n");
    (conflicting, separate)
}

#[tokio::test]
async fn gitlab_with_a_repository_heads_conflicts_and_merges_are_git_s() {
    let remote = Remote::new();
    let (conflicting, separate) = two_branches(&remote);
    let model = gitlab_model::start_with_remote(&remote.bare).await;
    model.require_approvals(0);
    let api = Api::gitlab(&model);
    let open = |branch: &str| json!({"source_branch": branch, "target_branch": "main", "title": format!("Merge {branch}")});
    let a = api.post("merge_requests", open("sortie/1")).await.json["iid"]
        .as_u64()
        .unwrap();
    let b = api.post("merge_requests", open("sortie/2")).await.json["iid"]
        .as_u64()
        .unwrap();

    let mr_a = api.get(&format!("merge_requests/{a}")).await.json;
    assert_eq!(mr_a["sha"], conflicting.as_str());
    assert_eq!(
        (&mr_a["has_conflicts"], &mr_a["detailed_merge_status"]),
        (&json!(false), &json!("mergeable")),
        "main has not moved yet"
    );
    remote.commit("main", "README", "three\n");
    let mr_a = api.get(&format!("merge_requests/{a}")).await.json;
    assert_eq!(
        (&mr_a["has_conflicts"], &mr_a["detailed_merge_status"]),
        (&json!(true), &json!("conflict")),
        "a push to the base that conflicts"
    );
    assert_eq!(model.conflicting_paths(a), vec!["README".to_string()]);
    let refused = api
        .put(
            &format!("merge_requests/{a}/merge"),
            json!({"sha": conflicting}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);

    let pushed = remote.commit("sortie/2", "NEW", "newer\n");
    let mr_b = api.get(&format!("merge_requests/{b}")).await.json;
    assert_eq!(
        mr_b["sha"],
        pushed.as_str(),
        "a push to the branch moves the head"
    );
    assert_ne!(pushed, separate);
    let main_before = remote.head_of("main");
    let stale = api
        .put(
            &format!("merge_requests/{b}/merge"),
            json!({"sha": separate}),
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert!(
        stale.json["message"]
            .as_str()
            .unwrap()
            .starts_with("SHA does not match HEAD of source branch"),
        "{}",
        stale.text
    );
    assert_eq!(remote.head_of("main"), main_before, "nothing merged");
    assert!(!model.pull(b).unwrap().merged);

    // A push that lands while the merge is on its way fails it too.
    let work = remote.work.clone();
    model.before_merge(move || {
        commit_and_push(&work, "sortie/2", "NEW", "newest\n");
    });
    let raced = api
        .put(&format!("merge_requests/{b}/merge"), json!({"sha": pushed}))
        .await;
    assert_eq!(raced.status, StatusCode::CONFLICT, "{}", raced.text);
    assert_eq!(remote.head_of("main"), main_before);
    let newest = remote.head_of("sortie/2");

    let merged = api
        .put(&format!("merge_requests/{b}/merge"), json!({"sha": newest}))
        .await;
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.text);
    let main = remote.head_of("main");
    assert_eq!(merged.json["merge_commit_sha"], main.as_str());
    assert_eq!(model.pull(b).unwrap().merge_commit_sha, Some(main.clone()));
    let parents = git(&remote.bare, &["log", "-1", "--format=%P", &main]);
    assert_eq!(
        parents,
        format!("{main_before} {newest}"),
        "a merge of the head"
    );
    assert_eq!(
        git(&remote.bare, &["show", &format!("{main}:NEW")]),
        "newest"
    );
    let mr_a = api.get(&format!("merge_requests/{a}")).await.json;
    assert_eq!(
        mr_a["diff_refs"]["base_sha"],
        main.as_str(),
        "the other sees the new base"
    );
}

#[tokio::test]
async fn gitea_with_a_repository_heads_conflicts_and_merges_are_git_s() {
    let remote = Remote::new();
    let (conflicting, separate) = two_branches(&remote);
    let model = gitea_model::start_with_remote(&remote.bare).await;
    let api = Api::gitea(&model);
    let open =
        |branch: &str| json!({"head": branch, "base": "main", "title": format!("Merge {branch}")});
    let a = api.post("pulls", open("sortie/1")).await.json["number"]
        .as_u64()
        .unwrap();
    let b = api.post("pulls", open("sortie/2")).await.json["number"]
        .as_u64()
        .unwrap();
    remote.commit("main", "README", "three\n");

    let pull_a = api.get(&format!("pulls/{a}")).await.json;
    assert_eq!(pull_a["head"]["sha"], conflicting.as_str());
    assert_eq!(pull_a["mergeable"], false, "main conflicts with it");
    assert_eq!(model.conflicting_paths(a), vec!["README".to_string()]);
    let pull_b = api.get(&format!("pulls/{b}")).await.json;
    assert_eq!(
        (&pull_b["head"]["sha"], &pull_b["mergeable"]),
        (&json!(separate), &json!(true))
    );
    assert!(model.conflicting_paths(b).is_empty());
    model.add_review(a, "alice", "approved", "");
    let refused = api
        .post(
            &format!("pulls/{a}/merge"),
            json!({"Do": "merge", "head_commit_id": conflicting}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);

    // Approved and green: only the head commit guard stands in the way.
    model.add_review(b, "alice", "approved", "ship it");
    model.add_check(&separate, "ci/test", "success", "", "");
    let main_before = remote.head_of("main");
    let pushed = remote.commit("sortie/2", "NEW", "newer\n");
    let stale = api
        .post(
            &format!("pulls/{b}/merge"),
            json!({"Do": "merge", "head_commit_id": separate}),
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.text);
    assert_eq!(remote.head_of("main"), main_before, "nothing merged");
    let work = remote.work.clone();
    model.before_merge(move || {
        commit_and_push(&work, "sortie/2", "NEW", "newest\n");
    });
    let raced = api
        .post(
            &format!("pulls/{b}/merge"),
            json!({"Do": "squash", "head_commit_id": pushed}),
        )
        .await;
    assert_eq!(raced.status, StatusCode::CONFLICT, "a push raced the merge");
    let newest = remote.head_of("sortie/2");

    let merged = api
        .post(
            &format!("pulls/{b}/merge"),
            json!({"Do": "merge", "head_commit_id": newest}),
        )
        .await;
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.text);
    assert_eq!(merged.text, "", "Gitea answers a merge with no body");
    let main = remote.head_of("main");
    let parents = git(&remote.bare, &["log", "-1", "--format=%P", &main]);
    assert_eq!(parents, format!("{main_before} {newest}"));
    assert_eq!(
        git(&remote.bare, &["show", &format!("{main}:NEW")]),
        "newest"
    );
    let pull_b = api.get(&format!("pulls/{b}")).await.json;
    assert_eq!(
        (
            &pull_b["merged"],
            &pull_b["state"],
            &pull_b["merge_commit_sha"]
        ),
        (&json!(true), &json!("closed"), &json!(main))
    );
    assert_eq!(pull_b["merged_by"]["login"], gitea_model::LOGIN);
    assert_eq!(model.merge_calls().len(), 4);

    // A person merges the other one after fixing it: the model writes it as well.
    remote.commit("sortie/1", "README", "three\n");
    assert!(model.conflicting_paths(a).is_empty());
    let by_hand = model.merge_by_person(a, "carol");
    assert_eq!(remote.head_of("main"), by_hand);
    let state = model.pull(a).unwrap();
    assert!(state.merged && state.merged_by.as_deref() == Some("carol"));
}

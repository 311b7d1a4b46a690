//! The reactions suite on GitLab and Gitea: one model of the two forges' shared state
//! (`forge_model`) in each vendor's dialect. GitLab: the head pipeline's jobs with
//! their traces, DiffNote discussions, approvals, `PUT .../merge` with `sha` and
//! `squash`. Gitea: commit statuses, `COMMENT` reviews holding review comments,
//! `POST .../merge` with `do` and `head_commit_id`.

use std::marker::PhantomData;
use std::path::Path;

use super::{PullForge, PullView};
use crate::forge_model::ForgeModel;

/// What differs between the two vendors for the suite.
pub trait Vendor: Send + Sync + 'static {
    /// The token the model accepts.
    const TOKEN: &'static str;
    /// The login it belongs to.
    const LOGIN: &'static str;
    /// Requests of one idle tick, at most.
    const IDLE_REQUESTS: usize;
    /// The model in this vendor's dialect, on `remote`.
    fn start(remote: &Path) -> impl std::future::Future<Output = ForgeModel> + Send;
    /// The `forge:` section's lines for a model at `url`.
    fn forge_yaml(url: &str) -> String;
    /// The merge method a merge request body asked for.
    fn method(body: &serde_json::Value) -> String;
    /// The head sha a merge request body guarded with.
    fn sha(body: &serde_json::Value) -> String;
    /// What the fixing stage's prompt shows of a failed check with `description` and
    /// `log`.
    fn shown(description: &str, log: &str) -> Vec<String>;
}

/// GitLab.
pub struct Gitlab;
/// Gitea.
pub struct Gitea;

impl Vendor for Gitlab {
    const TOKEN: &'static str = crate::gitlab_model::TOKEN;
    const LOGIN: &'static str = crate::gitlab_model::USER;
    // Merge request, its pipeline's jobs, discussions, approvals (and pipelines when
    // the head pipeline is not on the head yet).
    const IDLE_REQUESTS: usize = 5;

    async fn start(remote: &Path) -> ForgeModel {
        crate::gitlab_model::start_with_remote(remote).await
    }

    fn forge_yaml(url: &str) -> String {
        format!(
            "  kind: gitlab\n  url: \"{url}\"\n  project: {}\n  token_env: SORTIE_TEST_FORGE_TOKEN",
            crate::gitlab_model::PROJECT
        )
    }

    fn method(body: &serde_json::Value) -> String {
        if body["squash"] == true {
            "squash"
        } else {
            "merge"
        }
        .to_string()
    }

    fn sha(body: &serde_json::Value) -> String {
        body["sha"].as_str().unwrap_or_default().to_string()
    }

    fn shown(_description: &str, log: &str) -> Vec<String> {
        // The job's trace, its escapes and section markers removed.
        vec![log.lines().last().unwrap_or_default().to_string()]
    }
}

impl Vendor for Gitea {
    const TOKEN: &'static str = crate::gitea_model::TOKEN;
    const LOGIN: &'static str = crate::gitea_model::LOGIN;
    // Pull request, combined status, reviews (and each review's comments).
    const IDLE_REQUESTS: usize = 4;

    async fn start(remote: &Path) -> ForgeModel {
        crate::gitea_model::start_with_remote(remote).await
    }

    fn forge_yaml(url: &str) -> String {
        format!(
            "  kind: gitea\n  url: \"{url}\"\n  repo: {}\n  token_env: SORTIE_TEST_FORGE_TOKEN",
            crate::gitea_model::REPO
        )
    }

    fn method(body: &serde_json::Value) -> String {
        let method = body.get("do").or_else(|| body.get("Do"));
        method
            .and_then(|m| m.as_str())
            .unwrap_or_default()
            .to_string()
    }

    fn sha(body: &serde_json::Value) -> String {
        body["head_commit_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn shown(description: &str, _log: &str) -> Vec<String> {
        // A commit status says only its description.
        vec![description.to_string()]
    }
}

/// A forge model in vendor `V`'s dialect.
pub struct Model<V> {
    model: ForgeModel,
    vendor: PhantomData<V>,
}

impl<V: Vendor> PullForge for Model<V> {
    const SELF_LOGIN: &'static str = V::LOGIN;
    const IDLE_REQUESTS: usize = V::IDLE_REQUESTS;

    async fn start(remote: &Path) -> Self {
        let model = V::start(remote).await;
        // As GitHub's model: no approval required by the project, so CI alone decides.
        model.require_approvals(0);
        Model {
            model,
            vendor: PhantomData,
        }
    }

    fn forge_yaml(&self) -> String {
        V::forge_yaml(&self.model.url())
    }

    fn token(&self) -> &'static str {
        V::TOKEN
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.model.now()
    }

    fn advance(&self, secs: i64) {
        self.model.advance(secs)
    }

    fn pull_numbers(&self) -> Vec<u64> {
        self.model.pulls().iter().map(|p| p.number).collect()
    }

    fn pull(&self, number: u64) -> PullView {
        let pull = self.model.pull(number).expect("the pull request exists");
        PullView {
            head_sha: pull.head_sha,
            merged: pull.merged,
            merge_commit: pull.merge_commit_sha,
        }
    }

    fn fail_check(&self, sha: &str, name: &str) -> Vec<String> {
        let description = "2 tests failed";
        let log = "\u{1b}[0Ksection_start:1700000000:step_script\r\u{1b}[0K\u{1b}[32mRunning tests\u{1b}[0m\n\
                   test widget::turns ... FAILED\n\
                   assertion failed: expected 2 turns, got 3 in src/widget.rs:12";
        self.model.add_check(sha, name, "failure", description, log);
        V::shown(description, log)
    }

    fn pass_check(&self, sha: &str, name: &str) {
        self.model
            .add_check(sha, name, "success", "ok", "all green");
    }

    fn add_review_comment(
        &self,
        number: u64,
        author: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        self.model
            .add_review_comment(number, author, path, line, body)
    }

    fn resolve_thread(&self, id: u64) {
        self.model.resolve_thread(id)
    }

    fn set_pull_labels(&self, number: u64, labels: &[&str]) {
        self.model.set_pull_labels(number, labels)
    }

    fn merge_calls(&self) -> Vec<(String, String)> {
        self.model
            .merge_calls()
            .into_iter()
            .map(|(_, body)| (V::sha(&body), V::method(&body)))
            .collect()
    }

    fn merge_by_person(&self, number: u64, who: &str) -> String {
        self.model.merge_by_person(number, who)
    }

    fn conflicting_paths(&self, number: u64) -> Vec<String> {
        self.model.conflicting_paths(number)
    }

    fn before_merge(&self, f: impl FnOnce() + Send + 'static) {
        self.model.before_merge(f)
    }

    fn log(&self) -> Vec<String> {
        self.model.log()
    }

    fn clear_log(&self) {
        self.model.clear_log()
    }

    fn units_used(&self) -> Option<u64> {
        None
    }
}

mod gitlab {
    crate::reactions::suite!(super::Model<super::Gitlab>);
}

mod gitea {
    crate::reactions::suite!(super::Model<super::Gitea>);
}

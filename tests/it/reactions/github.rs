//! The reactions suite on GitHub: check runs with annotations, review comments with
//! threads over GraphQL, `PUT .../merge` with `sha` and `merge_method`.

use std::path::Path;

use super::{idle_cost_of, PullBoard, PullForge, PullView, Rig, IDLE_WATCH, WATCH_CI};
use crate::github_model::{GithubModel, LOGIN, TOKEN};

impl PullForge for GithubModel {
    const SELF_LOGIN: &'static str = LOGIN;
    // User, pull, check runs, status, reviews, comments.
    const IDLE_REQUESTS: usize = 6;

    async fn start(remote: &Path) -> Self {
        GithubModel::with_remote(remote).await
    }

    fn forge_yaml(&self) -> String {
        format!(
            "  kind: github\n  repo: acme/widgets\n  api_url: \"{}\"\n  \
             token_env: SORTIE_TEST_FORGE_TOKEN",
            self.api_url()
        )
    }

    fn token(&self) -> &'static str {
        TOKEN
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        GithubModel::now(self)
    }

    fn advance(&self, secs: i64) {
        GithubModel::advance(self, secs)
    }

    fn pull_numbers(&self) -> Vec<u64> {
        self.pulls().iter().map(|p| p.number).collect()
    }

    fn pull(&self, number: u64) -> PullView {
        let pull = GithubModel::pull(self, number).expect("the pull request exists");
        PullView {
            head_sha: pull.head_sha,
            merged: pull.merged,
            merge_commit: pull.merge_commit_sha,
        }
    }

    fn fail_check(&self, sha: &str, name: &str) -> Vec<String> {
        let run = self.add_check_run(
            sha,
            name,
            "completed",
            Some("failure"),
            "2 tests failed",
            "assertion failed: widget.turns()",
        );
        self.add_annotation(run, "src/widget.rs", 12, "expected 2 turns, got 3");
        vec!["src/widget.rs:12: failure: expected 2 turns, got 3".to_string()]
    }

    fn pass_check(&self, sha: &str, name: &str) {
        self.add_check_run(sha, name, "completed", Some("success"), "ok", "");
    }

    fn add_review_comment(
        &self,
        number: u64,
        author: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        GithubModel::add_review_comment(self, number, author, path, line, body)
    }

    fn resolve_thread(&self, id: u64) {
        GithubModel::resolve_thread(self, id)
    }

    fn set_pull_labels(&self, number: u64, labels: &[&str]) {
        GithubModel::set_pull_labels(self, number, labels)
    }

    fn merge_calls(&self) -> Vec<(String, String)> {
        GithubModel::merge_calls(self)
            .into_iter()
            .map(|(_, body)| {
                let text = |key: &str| body[key].as_str().unwrap_or_default().to_string();
                (text("sha"), text("merge_method"))
            })
            .collect()
    }

    fn merge_by_person(&self, number: u64, who: &str) -> String {
        GithubModel::merge_by_person(self, number, who)
    }

    fn conflicting_paths(&self, number: u64) -> Vec<String> {
        GithubModel::conflicting_paths(self, number)
    }

    fn before_merge(&self, f: impl FnOnce() + Send + 'static) {
        GithubModel::before_merge(self, f)
    }

    fn log(&self) -> Vec<String> {
        GithubModel::log(self)
    }

    fn clear_log(&self) {
        GithubModel::clear_log(self)
    }

    fn units_used(&self) -> Option<u64> {
        Some(GithubModel::units_used(self))
    }
}

crate::reactions::suite!(GithubModel);

impl PullBoard for GithubModel {
    fn tracker_yaml(&self) -> String {
        format!(
            "tracker: {{kind: github, repo: acme/widgets, api_url: \"{}\", \
             token_env: SORTIE_TEST_FORGE_TOKEN}}",
            self.api_url()
        )
    }

    fn add_ticket(&self, title: &str, status: &str) -> String {
        self.add_issue(title, &[&format!("status:{status}")])
            .to_string()
    }

    fn ticket_status(&self, id: &str) -> String {
        let issue = self.issue(id.parse().expect("an issue number"));
        let status = issue.labels.iter().find_map(|l| l.strip_prefix("status:"));
        status.expect("the issue has a status label").to_string()
    }
}

/// Issue #52 (item 9): with GitHub as the tracker, an idle watched ticket costs no
/// rate-limit unit in the next cron process either: its comments (read for its
/// blocks) answer 304 like the pull request's reads, because their ETags are kept
/// in the state directory, not only for the life of one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reactions_cost_an_idle_watched_pull_request_on_a_github_board() {
    let rig = Rig::<GithubModel>::on_model_board(IDLE_WATCH).await;
    // The pull request's six reads (the token's user among them), the ticket's
    // comments, and the board's listing: one per status the pipeline lists.
    idle_cost_of(&rig, 6 + 1 + 3).await;
}

/// A failed GitHub Actions job: the tail of its log (where it failed) reaches the
/// fixing stage's prompt, and the log's download, on another host than the API's,
/// is made without the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_actions_jobs_log_tail_is_handed_over_and_its_download_gets_no_token() {
    let rig = Rig::<GithubModel>::new(WATCH_CI).await;
    rig.until("qa-passed", 4).await;
    let (_, head) = rig.pull();
    let run = rig.model.add_check_run(
        &head,
        "build",
        "completed",
        Some("failure"),
        "build failed",
        "",
    );
    let mut log: String = (0..2000).map(|i| format!("step {i}: ok\n")).collect();
    log.push_str("error[E0308]: mismatched types in src/widget.rs\n");
    rig.model.set_job_log(run, &log);
    let report = rig.tick().await;
    assert!(report.contains("ci_failure round 1: reacted"), "{report}");
    let prompt = rig.prompt("backend", 1);
    assert!(
        prompt.contains("error[E0308]: mismatched types in src/widget.rs"),
        "{prompt}"
    );
    assert!(prompt.contains("Log tail:"), "{prompt}");
    assert!(!prompt.contains("step 0: ok"), "only the tail: {prompt}");
    assert_eq!(
        rig.model.log_downloads(),
        (1, false),
        "one download, no token"
    );
}

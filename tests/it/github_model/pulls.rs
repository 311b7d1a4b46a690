//! The model's pull requests and what hangs off them (issue #32): head and base
//! SHAs, draft, mergeability, merges; check runs and commit statuses keyed by commit
//! SHA; reviews, review comments and their threads (resolved, outdated). How GitHub
//! shows them is `pull_json`, what tests do to them `pull_changes`, the routes that
//! serve them `pull_routes`.

use sha2::{Digest, Sha256};

use super::{State, LOGIN};

/// A pull request opened through `POST /pulls` (numbers shared with issues).
#[derive(Debug, Clone)]
pub struct ModelPull {
    pub number: u64,
    pub head: String,
    pub base: String,
    pub title: String,
    pub body: String,
    pub draft: bool,
    pub open: bool,
    /// The head branch's commit.
    pub head_sha: String,
    /// The base branch's commit.
    pub base_sha: String,
    pub merged: bool,
    pub merge_commit_sha: Option<String>,
    /// Who merged it.
    pub merged_by: Option<String>,
    /// The labels of the issue with the same number.
    pub labels: Vec<String>,
    /// `None` while GitHub is still computing it.
    pub mergeable: Option<bool>,
    /// `clean`, `dirty`, `blocked`, `behind`, `unstable`, `unknown` or `draft`.
    pub mergeable_state: String,
    /// Who opened it.
    pub author: String,
    pub created: i64,
    pub updated: i64,
    pub closed: Option<i64>,
    pub merged_at: Option<i64>,
    /// A test set the mergeability: a repository's `merge-tree` does not override it.
    pub mergeable_pinned: bool,
    /// With a repository: the paths that conflict, as of the last read.
    pub conflicts: Vec<String>,
    /// With a repository: the (base, head) the mergeability was computed for.
    pub merge_tree_of: Option<(String, String)>,
}

impl ModelPull {
    /// A pull request `author` opens now: mergeable, `clean` (or `draft`), its head
    /// and base commits made up from the branch names and the clock.
    pub(super) fn opened(
        number: u64,
        head: String,
        base: String,
        title: String,
        body: String,
        draft: bool,
        now: i64,
    ) -> Self {
        ModelPull {
            number,
            head_sha: fake_sha(&format!("{head}@{now}")),
            base_sha: fake_sha(&format!("{base}@0")),
            head,
            base,
            title,
            body,
            draft,
            open: true,
            merged: false,
            merge_commit_sha: None,
            merged_by: None,
            labels: Vec::new(),
            mergeable: Some(true),
            mergeable_state: if draft { "draft" } else { "clean" }.to_string(),
            author: LOGIN.to_string(),
            created: now,
            updated: now,
            closed: None,
            merged_at: None,
            mergeable_pinned: false,
            conflicts: Vec::new(),
            merge_tree_of: None,
        }
    }
}

/// One check run (a CI job as the Checks API shows it).
#[derive(Debug, Clone)]
pub struct ModelCheckRun {
    pub id: u64,
    pub head_sha: String,
    pub name: String,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    /// `success`, `failure`, `neutral`, `cancelled`, `skipped`, `timed_out`,
    /// `action_required`; `None` until completed.
    pub conclusion: Option<String>,
    pub title: Option<String>,
    pub summary: Option<String>,
    pub text: Option<String>,
    pub started: i64,
    pub completed: Option<i64>,
    pub annotations: Vec<ModelAnnotation>,
    /// Its GitHub Actions job's log, when it is one (its page then names the job).
    pub log: Option<String>,
}

/// One annotation of a check run (a line a linter or test flagged).
#[derive(Debug, Clone)]
pub struct ModelAnnotation {
    pub path: String,
    pub line: u64,
    /// `notice`, `warning` or `failure`.
    pub level: String,
    pub message: String,
}

/// One commit status (the older Statuses API), the latest for its context.
#[derive(Debug, Clone)]
pub struct ModelStatus {
    pub id: u64,
    pub sha: String,
    pub context: String,
    /// `error`, `failure`, `pending` or `success`.
    pub state: String,
    pub description: Option<String>,
    pub created: i64,
    pub updated: i64,
}

/// One review of a pull request.
#[derive(Debug, Clone)]
pub struct ModelReview {
    pub id: u64,
    pub pull: u64,
    pub author: String,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`, `DISMISSED` or `PENDING`.
    pub state: String,
    pub body: String,
    /// The head commit it was given on.
    pub commit_id: String,
    pub submitted: i64,
}

/// One review comment (a comment on a line of the diff).
#[derive(Debug, Clone)]
pub struct ModelReviewComment {
    pub id: u64,
    pub pull: u64,
    /// The review it belongs to (GitHub makes one for a lone comment).
    pub review_id: u64,
    /// The comment whose thread this one answers.
    pub in_reply_to: Option<u64>,
    pub author: String,
    pub path: String,
    pub original_line: u64,
    pub body: String,
    pub commit_id: String,
    pub created: i64,
    /// Set on the comment that starts a thread: the thread is resolved.
    pub resolved: bool,
    /// Set on the comment that starts a thread: its line is gone from the diff.
    pub outdated: bool,
}

/// Check runs, statuses, reviews and review comments of every pull request.
#[derive(Debug, Default)]
pub(super) struct PullActivity {
    pub runs: Vec<ModelCheckRun>,
    pub statuses: Vec<ModelStatus>,
    pub reviews: Vec<ModelReview>,
    pub comments: Vec<ModelReviewComment>,
    /// Downloads of job logs so far, and whether any carried a token.
    pub log_downloads: usize,
    pub log_download_had_token: bool,
    next_id: u64,
}

impl PullActivity {
    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        5000 + self.next_id
    }

    /// The comment starting the thread `id` is in.
    pub fn thread_root(&self, id: u64) -> Option<&ModelReviewComment> {
        let mut c = self.comments.iter().find(|c| c.id == id)?;
        while let Some(parent) = c.in_reply_to {
            c = self.comments.iter().find(|p| p.id == parent)?;
        }
        Some(c)
    }
}

/// A 40-hex-digit commit id made up from `seed`.
pub(super) fn fake_sha(seed: &str) -> String {
    hex::encode(Sha256::digest(seed.as_bytes()))[..40].to_string()
}

impl State {
    pub(super) fn pull_mut(&mut self, number: u64) -> &mut ModelPull {
        self.pulls
            .iter_mut()
            .find(|p| p.number == number)
            .unwrap_or_else(|| panic!("pull request {number} exists"))
    }

    /// A change to pull request `number` now: `updated_at` moves, then `f` runs
    /// (and reads the moment of the change from `updated`).
    pub(super) fn touch_pull(&mut self, number: u64, f: impl FnOnce(&mut ModelPull)) {
        self.clock += 1;
        let now = self.clock;
        let pull = self.pull_mut(number);
        pull.updated = now;
        f(pull);
    }

    /// Pull request `number` merged by `login` now with `method`; returns the merge
    /// commit (written in the repository when there is one, else made up).
    pub(super) fn merge_pull(&mut self, number: u64, login: &str, method: &str) -> String {
        self.sync_remote();
        let sha = self
            .merge_in_remote(number, method)
            .unwrap_or_else(|| fake_sha(&format!("merge {number} @{}", self.clock + 1)));
        let (merged_by, merge_sha) = (login.to_string(), sha.clone());
        self.touch_pull(number, |p| {
            p.merged = true;
            p.open = false;
            p.merge_commit_sha = Some(merge_sha.clone());
            p.merged_by = Some(merged_by);
            p.merged_at = Some(p.updated);
            p.closed = Some(p.updated);
            p.mergeable = None;
            p.mergeable_state = "unknown".to_string();
            // The base branch now points at the merge.
            p.base_sha = merge_sha;
        });
        sha
    }
}

//! The test's hands on the pull (merge) requests of a GitLab or Gitea model: what
//! people and CI do to them (checks, reviews, review comments, resolving, labels,
//! draft, closing, merging), the model's clock, and what a test reads back.

use std::path::Path;

use serde_json::Value;

use super::pulls::{Check, Review, ReviewComment};
use super::{time, ForgeModel};

/// A snapshot of one pull request as the model holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPullState {
    pub number: u64,
    pub head_branch: String,
    pub head_sha: String,
    pub base_branch: String,
    pub open: bool,
    pub merged: bool,
    pub merge_commit_sha: Option<String>,
    pub merged_by: Option<String>,
    pub labels: Vec<String>,
    pub draft: bool,
}

impl ForgeModel {
    /// Let the pull requests live in the bare repository `bare`: heads and bases are
    /// its branches at every read, merges are written there.
    pub fn use_remote(&self, bare: &Path) {
        self.board().book.remote = Some(bare.to_path_buf());
    }

    /// The model's "now": its clock (seconds) after 2026-01-01T00:00:00Z.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(&time(self.board().clock))
            .unwrap()
            .to_utc()
    }

    /// Let `secs` seconds pass on the model's clock.
    pub fn advance(&self, secs: i64) {
        self.board().clock += secs;
    }

    /// A snapshot of pull request `number` (read from the repository first).
    pub fn pull(&self, number: u64) -> Option<ModelPullState> {
        let mut b = self.board();
        let p = b.pull(number)?;
        Some(ModelPullState {
            number: p.number,
            head_branch: p.head.clone(),
            head_sha: p.head_sha.clone(),
            base_branch: p.base.clone(),
            open: p.open,
            merged: p.merged,
            merge_commit_sha: p.merge_commit_sha.clone(),
            merged_by: p.merged_by.clone(),
            labels: p.labels.clone(),
            draft: p.draft,
        })
    }

    /// A person opens a pull request from `head` into `base` (as sortie's `POST`
    /// would); its number.
    pub fn open_pull(&self, head: &str, base: &str, title: &str) -> u64 {
        self.board().open_pull(head, base, title, "", false)
    }

    /// Branch protection asks for `n` approvals before a merge (default 1).
    pub fn require_approvals(&self, n: usize) {
        self.board().book.approvals_required = n;
    }

    /// CI reports `name` on commit `sha`: `success`, `failure` or `pending`, with a
    /// description and the job's log. GitLab: a job of the commit's pipeline, `log`
    /// its trace; Gitea: a commit status of context `name`, `log` its actions job log.
    /// Another check of the same name on the same commit is a retry and replaces it.
    /// Its id.
    pub fn add_check(
        &self,
        sha: &str,
        name: &str,
        state: &str,
        description: &str,
        log: &str,
    ) -> u64 {
        assert!(
            matches!(state, "success" | "failure" | "pending"),
            "check state {state}"
        );
        let mut b = self.board();
        let created = b.tick();
        let pipeline = b.pipeline_of(sha);
        let id = b.fresh_id();
        for c in b.book.checks.iter_mut() {
            if c.sha == sha && c.name == name {
                c.retried = true;
            }
        }
        b.book.checks.push(Check {
            id,
            pipeline,
            sha: sha.to_string(),
            name: name.to_string(),
            state: state.to_string(),
            description: description.to_string(),
            log: log.to_string(),
            created,
            retried: false,
        });
        id
    }

    /// `author` reviews pull request `number` at its head: `approved`,
    /// `changes_requested` or `commented`, with `body`. Its id.
    pub fn add_review(&self, number: u64, author: &str, verdict: &str, body: &str) -> u64 {
        assert!(
            matches!(verdict, "approved" | "changes_requested" | "commented"),
            "review verdict {verdict}"
        );
        let mut b = self.board();
        b.sync_remote();
        add_review(&mut b, number, author, verdict, body)
    }

    /// `author` comments on `path:line` of the head of pull request `number`,
    /// starting a thread (GitLab: a DiffNote discussion; Gitea: a `COMMENT` review
    /// holding this one comment). The comment's id, the one sortie sees.
    pub fn add_review_comment(
        &self,
        number: u64,
        author: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        let mut b = self.board();
        b.sync_remote();
        let review_id = add_review(&mut b, number, author, "commented", "");
        let id = b.fresh_id();
        let now = b.clock;
        let commit_id = b.pull_mut(number).head_sha.clone();
        b.book.comments.push(ReviewComment {
            id,
            pull: number,
            review_id,
            author: author.to_string(),
            path: path.to_string(),
            line,
            body: body.to_string(),
            commit_id,
            created: now,
            updated: now,
            resolved_by: None,
            resolved_at: None,
            outdated: false,
        });
        id
    }

    /// The thread of review comment `comment_id` is resolved (by the comment's author).
    pub fn resolve_thread(&self, comment_id: u64) {
        self.comment(comment_id, |c, now| {
            c.resolved_by = Some(c.author.clone());
            c.resolved_at = Some(now);
        });
    }

    /// The line of review comment `comment_id` is gone from the diff.
    pub fn mark_outdated(&self, comment_id: u64) {
        self.comment(comment_id, |c, _| c.outdated = true);
    }

    fn comment(&self, comment_id: u64, f: impl FnOnce(&mut ReviewComment, i64)) {
        let mut b = self.board();
        let now = b.tick();
        let c = b
            .book
            .comments
            .iter_mut()
            .find(|c| c.id == comment_id)
            .expect("review comment exists");
        f(c, now);
        let number = c.pull;
        b.pull_mut(number).updated = now;
    }

    /// Someone sets the labels of pull request `number`.
    pub fn set_pull_labels(&self, number: u64, labels: &[&str]) {
        let mut b = self.board();
        for l in labels {
            b.ensure_label(l);
        }
        b.touch_pull(number, |p| {
            p.labels = labels.iter().map(|l| l.to_string()).collect();
        });
    }

    /// Someone marks pull request `number` draft (or ready).
    pub fn set_draft(&self, number: u64, draft: bool) {
        self.board().touch_pull(number, |p| p.draft = draft);
    }

    /// The forge is (or is no longer) computing whether `number` merges.
    pub fn set_checking(&self, number: u64, checking: bool) {
        self.board().touch_pull(number, |p| p.checking = checking);
    }

    /// A person closes pull request `number` without merging it.
    pub fn close_pull(&self, number: u64) {
        self.board().touch_pull(number, |p| {
            p.open = false;
            p.closed_at = Some(p.updated);
        });
    }

    /// A person (`who`) merges pull request `number` with a merge commit, whatever
    /// blocks it; the merge commit's SHA.
    pub fn merge_by_person(&self, number: u64, who: &str) -> String {
        let mut b = self.board();
        let head = b.pull_mut(number).head.clone();
        b.merge_pull(number, who, "merge", &format!("Merge branch '{head}'"))
    }

    /// Every merge request sortie sent, answered or refused: the number and the body.
    pub fn merge_calls(&self) -> Vec<(u64, Value)> {
        self.board().book.merges.clone()
    }

    /// The paths `git merge-tree` finds conflicting in pull request `number` now.
    pub fn conflicting_paths(&self, number: u64) -> Vec<String> {
        let mut b = self.board();
        b.pull(number)
            .map(|p| p.conflicts.clone())
            .unwrap_or_default()
    }

    /// Run `f` inside the next merge request, before its checks and the SHA guard, so
    /// a test can push in between. It runs while the model is locked: it may use git,
    /// not the model.
    pub fn before_merge(&self, f: impl FnOnce() + Send + 'static) {
        self.board().book.before_merge = Some(Box::new(f));
    }
}

fn add_review(b: &mut super::Board, number: u64, author: &str, verdict: &str, body: &str) -> u64 {
    let id = b.fresh_id();
    let commit_id = b.pull_mut(number).head_sha.clone();
    b.touch_pull(number, |_| {});
    let submitted = b.clock;
    b.book.reviews.push(Review {
        id,
        pull: number,
        author: author.to_string(),
        verdict: verdict.to_string(),
        body: body.to_string(),
        commit_id,
        submitted,
    });
    id
}

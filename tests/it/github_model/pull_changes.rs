//! The test's hands on pull requests: what people and CI do to them (push, review,
//! comment, resolve, run checks, merge, close), and what a test reads back.

use serde_json::Value;

use super::pulls::{
    ModelAnnotation, ModelCheckRun, ModelPull, ModelReview, ModelReviewComment, ModelStatus,
};
use super::{GithubModel, State};

/// The test's hands on pull requests: what people and CI do to them.
impl GithubModel {
    /// A snapshot of pull request `number`, if there is one.
    pub fn pull(&self, number: u64) -> Option<ModelPull> {
        let mut s = self.state();
        s.sync_remote();
        s.pulls.iter().find(|p| p.number == number).cloned()
    }

    /// A pull request from `head` into `base` opened by the token's user (as the
    /// adapter's `POST /pulls` would); returns its number.
    pub fn open_pull(&self, head: &str, base: &str, title: &str) -> u64 {
        let mut s = self.state();
        let number = (s.issues.len() + s.pulls.len()) as u64 + 1;
        s.clock += 1;
        let pull = ModelPull::opened(
            number,
            head.to_string(),
            base.to_string(),
            title.to_string(),
            String::new(),
            false,
            s.clock,
        );
        s.pulls.push(pull);
        s.sync_remote();
        number
    }

    /// Someone pushes `sha` to the head branch. Review comments stay where they are
    /// until [`GithubModel::mark_outdated`] says their line is gone.
    pub fn push(&self, number: u64, sha: &str) {
        self.state()
            .touch_pull(number, |p| p.head_sha = sha.to_string());
    }

    /// GitHub's view of whether the pull request merges (`None`: still computing);
    /// it stays so, whatever a repository's `merge-tree` says.
    pub fn set_mergeable(&self, number: u64, mergeable: Option<bool>, state: &str) {
        let mut s = self.state();
        let pull = s.pull_mut(number);
        pull.mergeable_pinned = true;
        pull.mergeable = mergeable;
        pull.mergeable_state = state.to_string();
    }

    /// Someone marks the pull request draft (or ready for review).
    pub fn set_draft(&self, number: u64, draft: bool) {
        self.state().touch_pull(number, |p| {
            p.draft = draft;
            match (draft, p.mergeable_state.as_str()) {
                (true, "clean") => p.mergeable_state = "draft".into(),
                (false, "draft") => p.mergeable_state = "clean".into(),
                _ => {}
            }
        });
    }

    /// Someone sets the labels of the pull request (those of its issue on GitHub).
    pub fn set_pull_labels(&self, number: u64, labels: &[&str]) {
        let mut s = self.state();
        for l in labels {
            s.repo_labels.insert(l.to_string());
        }
        s.touch_pull(number, |p| {
            p.labels = labels.iter().map(|l| l.to_string()).collect();
        });
    }

    /// A person closes the pull request without merging it.
    pub fn close_pull(&self, number: u64) {
        self.state().touch_pull(number, |p| {
            p.open = false;
            p.closed = Some(p.updated);
        });
    }

    /// A person (`login`) merges the pull request; returns the merge commit.
    pub fn merge_by_person(&self, number: u64, login: &str) -> String {
        self.state().merge_pull(number, login, "merge")
    }

    /// CI starts (or finishes) a check run on commit `sha`; returns its id. A
    /// `completed` run needs a conclusion; another run of the same name on the same
    /// commit is a re-run and hides the older one from the default listing.
    pub fn add_check_run(
        &self,
        sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
        output_title: &str,
        output_text: &str,
    ) -> u64 {
        let mut s = self.state();
        s.clock += 1;
        let now = s.clock;
        let id = s.activity.next_id();
        let some = |t: &str| (!t.is_empty()).then(|| t.to_string());
        s.activity.runs.push(ModelCheckRun {
            id,
            head_sha: sha.to_string(),
            name: name.to_string(),
            status: status.to_string(),
            conclusion: conclusion.map(str::to_string),
            title: some(output_title),
            summary: some(output_title),
            text: some(output_text),
            started: now,
            completed: (status == "completed").then_some(now),
            annotations: Vec::new(),
            log: None,
        });
        id
    }

    /// A check run moves on (`in_progress`, or `completed` with its conclusion).
    pub fn set_check_run(&self, id: u64, status: &str, conclusion: Option<&str>) {
        let mut s = self.state();
        s.clock += 1;
        let now = s.clock;
        let run = s
            .activity
            .runs
            .iter_mut()
            .find(|r| r.id == id)
            .expect("check run exists");
        run.status = status.to_string();
        run.conclusion = conclusion.map(str::to_string);
        run.completed = (status == "completed").then_some(now);
    }

    /// The check run flags `path:line` (a `failure` annotation).
    /// Check run `id` is a GitHub Actions job whose log is `log`: its page names the
    /// job, and `GET .../actions/jobs/{id}/logs` redirects to a download of it on another
    /// host (`localhost` for the model's `127.0.0.1`), as GitHub does.
    pub fn set_job_log(&self, id: u64, log: &str) {
        let mut s = self.state();
        let run = s.activity.runs.iter_mut().find(|r| r.id == id).unwrap();
        run.log = Some(log.to_string());
    }

    /// How many job logs were downloaded, and whether a download carried the token.
    pub fn log_downloads(&self) -> (usize, bool) {
        let s = self.state();
        (s.activity.log_downloads, s.activity.log_download_had_token)
    }

    pub fn add_annotation(&self, check_run_id: u64, path: &str, line: u64, message: &str) {
        let mut s = self.state();
        let run = s
            .activity
            .runs
            .iter_mut()
            .find(|r| r.id == check_run_id)
            .expect("check run exists");
        run.annotations.push(ModelAnnotation {
            path: path.to_string(),
            line,
            level: "failure".to_string(),
            message: message.to_string(),
        });
    }

    /// A CI service sets the status of `context` on commit `sha` (the latest per
    /// context counts); returns its id.
    pub fn set_status(&self, sha: &str, context: &str, state: &str, description: &str) -> u64 {
        let mut s = self.state();
        s.clock += 1;
        let now = s.clock;
        let id = s.activity.next_id();
        let created = s
            .activity
            .statuses
            .iter()
            .find(|st| st.sha == sha && st.context == context)
            .map_or(now, |st| st.created);
        s.activity
            .statuses
            .retain(|st| !(st.sha == sha && st.context == context));
        s.activity.statuses.push(ModelStatus {
            id,
            sha: sha.to_string(),
            context: context.to_string(),
            state: state.to_string(),
            description: (!description.is_empty()).then(|| description.to_string()),
            created,
            updated: now,
        });
        id
    }

    /// `author` reviews the pull request at its head; returns the review id.
    pub fn add_review(&self, number: u64, author: &str, state: &str, body: &str) -> u64 {
        let mut s = self.state();
        add_review(&mut s, number, author, state, body)
    }

    /// The review is dismissed (it stays listed, as `DISMISSED`).
    pub fn dismiss_review(&self, id: u64) {
        let mut s = self.state();
        let review = s
            .activity
            .reviews
            .iter_mut()
            .find(|r| r.id == id)
            .expect("review exists");
        review.state = "DISMISSED".to_string();
        let number = review.pull;
        s.touch_pull(number, |_| {});
    }

    /// `author` comments on `path:line` of the head, starting a thread; returns the
    /// comment id. GitHub files a lone comment under a `COMMENTED` review with no
    /// body, and so does the model.
    pub fn add_review_comment(
        &self,
        number: u64,
        author: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64 {
        let mut s = self.state();
        let review_id = add_review(&mut s, number, author, "COMMENTED", "");
        add_review_comment(&mut s, number, review_id, None, author, path, line, body)
    }

    /// `author` answers review comment `to`, joining its thread; returns the id.
    pub fn reply_to(&self, to: u64, author: &str, body: &str) -> u64 {
        let mut s = self.state();
        let parent = s
            .activity
            .comments
            .iter()
            .find(|c| c.id == to)
            .cloned()
            .expect("review comment exists");
        let review_id = add_review(&mut s, parent.pull, author, "COMMENTED", "");
        let (path, line) = (parent.path.clone(), parent.original_line);
        add_review_comment(
            &mut s,
            parent.pull,
            review_id,
            Some(to),
            author,
            &path,
            line,
            body,
        )
    }

    /// Someone resolves the thread review comment `comment_id` is in.
    pub fn resolve_thread(&self, comment_id: u64) {
        self.thread(comment_id, |root| root.resolved = true);
    }

    /// Someone reopens the thread review comment `comment_id` is in.
    pub fn unresolve_thread(&self, comment_id: u64) {
        self.thread(comment_id, |root| root.resolved = false);
    }

    /// The line of review comment `comment_id`'s thread is gone from the diff.
    pub fn mark_outdated(&self, comment_id: u64) {
        self.thread(comment_id, |root| root.outdated = true);
    }

    fn thread(&self, comment_id: u64, f: impl FnOnce(&mut ModelReviewComment)) {
        let mut s = self.state();
        let root = s
            .activity
            .thread_root(comment_id)
            .expect("review comment exists")
            .id;
        let root = s
            .activity
            .comments
            .iter_mut()
            .find(|c| c.id == root)
            .expect("thread root exists");
        f(root);
    }

    /// A snapshot of review comment `id`.
    pub fn review_comment(&self, id: u64) -> Option<ModelReviewComment> {
        let s = self.state();
        s.activity.comments.iter().find(|c| c.id == id).cloned()
    }

    /// Every `PUT .../pulls/{n}/merge` so far, answered or refused: the number and
    /// the body sent.
    pub fn merge_calls(&self) -> Vec<(u64, Value)> {
        self.requests()
            .into_iter()
            .filter(|l| l.method == "PUT")
            .filter_map(|l| {
                let path = l.path.split('?').next().unwrap_or_default().to_string();
                let n = path
                    .strip_suffix("/merge")?
                    .rsplit('/')
                    .next()?
                    .parse()
                    .ok()?;
                Some((n, l.body))
            })
            .collect()
    }
}

fn add_review(s: &mut State, number: u64, author: &str, state: &str, body: &str) -> u64 {
    let id = s.activity.next_id();
    let head = s.pull_mut(number).head_sha.clone();
    s.touch_pull(number, |_| {});
    let now = s.clock;
    s.activity.reviews.push(ModelReview {
        id,
        pull: number,
        author: author.to_string(),
        state: state.to_string(),
        body: body.to_string(),
        commit_id: head,
        submitted: now,
    });
    id
}

#[allow(clippy::too_many_arguments)]
fn add_review_comment(
    s: &mut State,
    number: u64,
    review_id: u64,
    in_reply_to: Option<u64>,
    author: &str,
    path: &str,
    line: u64,
    body: &str,
) -> u64 {
    let id = s.activity.next_id();
    let head = s.pull_mut(number).head_sha.clone();
    s.touch_pull(number, |_| {});
    let now = s.clock;
    s.activity.comments.push(ModelReviewComment {
        id,
        pull: number,
        review_id,
        in_reply_to,
        author: author.to_string(),
        path: path.to_string(),
        original_line: line,
        body: body.to_string(),
        commit_id: head,
        created: now,
        resolved: false,
        outdated: false,
    });
    id
}

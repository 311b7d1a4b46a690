//! The model's pull requests and what hangs off them (issue #32): head and base
//! SHAs, draft, mergeability, merges; check runs and commit statuses keyed by commit
//! SHA; reviews, review comments and their threads (resolved, outdated). The test
//! helpers that change them live here too; the routes that serve them are in
//! `pull_routes`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{time, GithubModel, State, LOGIN, REPO};

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
    next_id: u64,
}

impl PullActivity {
    fn next_id(&mut self) -> u64 {
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

    /// Pull request `number` merged by `login` now; returns the merge commit.
    pub(super) fn merge_pull(&mut self, number: u64, login: &str) -> String {
        let sha = fake_sha(&format!("merge {number} @{}", self.clock + 1));
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

/// A user as GitHub shows one: logins ending in `[bot]` are `Bot`s.
pub(super) fn user_json(login: &str) -> Value {
    let id = u64::from_str_radix(&fake_sha(login)[..8], 16).unwrap_or(1);
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "type": if login.ends_with("[bot]") { "Bot" } else { "User" },
        "site_admin": false,
        "html_url": format!("https://github.com/{login}"),
        "url": format!("https://api.github.com/users/{login}"),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}"),
    })
}

fn opt_time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(time(t)))
}

/// A pull request as a listing shows it (`pull-request-simple`).
pub(super) fn pull_json(p: &ModelPull) -> Value {
    let n = p.number;
    let api = format!("https://api.github.com/repos/{REPO}");
    let html = format!("https://github.com/{REPO}/pull/{n}");
    let owner = REPO.split('/').next().unwrap_or_default();
    json!({
        "id": 80000 + n,
        "node_id": format!("PR_{n}"),
        "number": n,
        "title": p.title,
        "body": p.body,
        "state": if p.open { "open" } else { "closed" },
        "locked": false,
        "draft": p.draft,
        "user": user_json(&p.author),
        "labels": p.labels.iter().map(|l| json!({
            "id": u64::from_str_radix(&fake_sha(l)[..8], 16).unwrap_or(1),
            "node_id": format!("LA_{l}"),
            "url": format!("{api}/labels/{l}"),
            "name": l,
            // Both schemas take a string; only `pull-request`'s takes null.
            "description": "",
            "color": "ededed",
            "default": false,
        })).collect::<Vec<_>>(),
        "head": {"ref": p.head, "sha": p.head_sha, "label": format!("{owner}:{}", p.head)},
        "base": {"ref": p.base, "sha": p.base_sha, "label": format!("{owner}:{}", p.base)},
        "html_url": html,
        "url": format!("{api}/pulls/{n}"),
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": format!("{api}/issues/{n}"),
        "commits_url": format!("{api}/pulls/{n}/commits"),
        "review_comments_url": format!("{api}/pulls/{n}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{api}/issues/{n}/comments"),
        "statuses_url": format!("{api}/statuses/{}", p.head_sha),
        "created_at": time(p.created),
        "updated_at": time(p.updated),
        "closed_at": opt_time(p.closed),
        "merged_at": opt_time(p.merged_at),
        "merge_commit_sha": p.merge_commit_sha,
        "assignee": null,
        "milestone": null,
        "author_association": "CONTRIBUTOR",
        "auto_merge": null,
    })
}

/// A pull request as `GET .../pulls/{n}` shows it (`pull-request`).
pub(super) fn pull_full_json(s: &State, p: &ModelPull) -> Value {
    let mut v = pull_json(p);
    let review_comments = s
        .activity
        .comments
        .iter()
        .filter(|c| c.pull == p.number)
        .count();
    v["merged"] = json!(p.merged);
    v["mergeable"] = json!(p.mergeable);
    v["mergeable_state"] = json!(p.mergeable_state);
    v["merged_by"] = p.merged_by.as_deref().map_or(Value::Null, user_json);
    v["comments"] = json!(0);
    v["review_comments"] = json!(review_comments);
    v["commits"] = json!(1);
    v["additions"] = json!(1);
    v["deletions"] = json!(0);
    v["changed_files"] = json!(1);
    v["maintainer_can_modify"] = json!(false);
    v
}

/// A check run as `GET .../commits/{ref}/check-runs` shows it.
pub(super) fn check_run_json(s: &State, r: &ModelCheckRun) -> Value {
    let api = format!("{}{}/repos/{REPO}", s.origin, s.prefix);
    let html = format!("https://github.com/{REPO}/runs/{}", r.id);
    json!({
        "id": r.id,
        "node_id": format!("CR_{}", r.id),
        "head_sha": r.head_sha,
        "external_id": "",
        "name": r.name,
        "url": format!("{api}/check-runs/{}", r.id),
        "html_url": html,
        "details_url": html,
        "status": r.status,
        "conclusion": r.conclusion,
        "started_at": time(r.started),
        "completed_at": opt_time(r.completed),
        "output": {
            "title": r.title,
            "summary": r.summary,
            "text": r.text,
            "annotations_count": r.annotations.len(),
            "annotations_url": format!("{api}/check-runs/{}/annotations", r.id),
        },
        "check_suite": {"id": 7000},
        "app": null,
        "pull_requests": [],
    })
}

/// An annotation as `GET .../check-runs/{id}/annotations` shows it.
pub(super) fn annotation_json(r: &ModelCheckRun, a: &ModelAnnotation) -> Value {
    json!({
        "path": a.path,
        "blob_href": format!("https://github.com/{REPO}/blob/{}/{}", r.head_sha, a.path),
        "start_line": a.line,
        "end_line": a.line,
        "start_column": null,
        "end_column": null,
        "annotation_level": a.level,
        "title": null,
        "message": a.message,
        "raw_details": null,
    })
}

/// A commit status as the combined status lists it.
pub(super) fn status_json(st: &ModelStatus) -> Value {
    json!({
        "id": st.id,
        "node_id": format!("SC_{}", st.id),
        "url": format!("https://api.github.com/repos/{REPO}/statuses/{}", st.sha),
        "avatar_url": null,
        "state": st.state,
        "context": st.context,
        "description": st.description,
        "target_url": format!("https://ci.example/{}/{}", st.context, st.id),
        "created_at": time(st.created),
        "updated_at": time(st.updated),
    })
}

fn review_links(n: u64, html: &str) -> Value {
    json!({
        "html": {"href": html},
        "pull_request": {"href": format!("https://api.github.com/repos/{REPO}/pulls/{n}")},
    })
}

/// A review as `GET .../pulls/{n}/reviews` shows it (a pending one has no
/// `submitted_at`).
pub(super) fn review_json(r: &ModelReview) -> Value {
    let html = format!(
        "https://github.com/{REPO}/pull/{}#pullrequestreview-{}",
        r.pull, r.id
    );
    let mut v = json!({
        "id": r.id,
        "node_id": format!("PRR_{}", r.id),
        "user": user_json(&r.author),
        "body": r.body,
        "state": r.state,
        "commit_id": r.commit_id,
        "html_url": html,
        "pull_request_url": format!("https://api.github.com/repos/{REPO}/pulls/{}", r.pull),
        "_links": review_links(r.pull, &html),
        "author_association": "CONTRIBUTOR",
    });
    if r.state != "PENDING" {
        v["submitted_at"] = json!(time(r.submitted));
    }
    v
}

/// A review comment as `GET .../pulls/{n}/comments` shows it: an outdated one has
/// `line` and `position` null; `in_reply_to_id` only on replies.
pub(super) fn review_comment_json(s: &State, c: &ModelReviewComment) -> Value {
    let outdated = s.activity.thread_root(c.id).is_some_and(|r| r.outdated);
    let (line, position) = if outdated {
        (Value::Null, Value::Null)
    } else {
        (json!(c.original_line), json!(c.original_line))
    };
    let head = s
        .pulls
        .iter()
        .find(|p| p.number == c.pull)
        .map(|p| p.head_sha.clone())
        .unwrap_or_default();
    let html = format!(
        "https://github.com/{REPO}/pull/{}#discussion_r{}",
        c.pull, c.id
    );
    let api = format!("https://api.github.com/repos/{REPO}/pulls");
    let mut v = json!({
        "id": c.id,
        "node_id": format!("PRRC_{}", c.id),
        "url": format!("{api}/comments/{}", c.id),
        "pull_request_review_id": c.review_id,
        "user": user_json(&c.author),
        "body": c.body,
        "path": c.path,
        "line": line,
        "original_line": c.original_line,
        "position": position,
        "original_position": c.original_line,
        "side": "RIGHT",
        "subject_type": "line",
        "start_line": null,
        "original_start_line": null,
        "start_side": null,
        // A comment still on the diff is shown on the head commit.
        "commit_id": if outdated { c.commit_id.clone() } else { head },
        "original_commit_id": c.commit_id,
        "diff_hunk": format!("@@ -{0},1 +{0},1 @@", c.original_line),
        "html_url": html,
        "pull_request_url": format!("{api}/{}", c.pull),
        "author_association": "CONTRIBUTOR",
        "_links": {
            "self": {"href": format!("{api}/comments/{}", c.id)},
            "html": {"href": html},
            "pull_request": {"href": format!("{api}/{}", c.pull)},
        },
        "created_at": time(c.created),
        "updated_at": time(c.created),
    });
    if let Some(parent) = c.in_reply_to {
        v["in_reply_to_id"] = json!(parent);
    }
    v
}

/// The test's hands on pull requests: what people and CI do to them.
impl GithubModel {
    /// A snapshot of pull request `number`, if there is one.
    pub fn pull(&self, number: u64) -> Option<ModelPull> {
        self.state()
            .pulls
            .iter()
            .find(|p| p.number == number)
            .cloned()
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
        number
    }

    /// Someone pushes `sha` to the head branch. Review comments stay where they are
    /// until [`GithubModel::mark_outdated`] says their line is gone.
    pub fn push(&self, number: u64, sha: &str) {
        self.state()
            .touch_pull(number, |p| p.head_sha = sha.to_string());
    }

    /// GitHub's view of whether the pull request merges (`None`: still computing).
    pub fn set_mergeable(&self, number: u64, mergeable: Option<bool>, state: &str) {
        let mut s = self.state();
        let pull = s.pull_mut(number);
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
        self.state().merge_pull(number, login)
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

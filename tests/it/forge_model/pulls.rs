//! The pull (merge) requests a label-status forge holds (issue #32), in the words
//! GitLab and Gitea share: head and base branches and their commits, draft, labels,
//! open, merged or closed; checks by commit (a GitLab pipeline's jobs, Gitea commit
//! statuses); reviews and review comments with their threads (resolved, outdated);
//! the merge calls sortie made and a hook that runs inside the next one. With a bare
//! repository the heads and bases are git's at every read (`remote`). Each dialect shows this state its own way
//! (`gitlab_model::pulls`, `gitea_model::pulls`); what tests do to it is
//! `pull_changes`.

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Answer, Board};

/// A pull (merge) request opened through the API (numbered on its own).
#[derive(Debug, Clone)]
pub struct Pull {
    pub number: u64,
    /// The head (source) branch.
    pub head: String,
    /// The base (target) branch.
    pub base: String,
    pub title: String,
    pub body: String,
    /// Open: neither merged nor closed.
    pub open: bool,
    pub draft: bool,
    /// The head branch's commit (git's, with a repository).
    pub head_sha: String,
    /// The base branch's commit (git's, with a repository).
    pub base_sha: String,
    pub labels: Vec<String>,
    pub merged: bool,
    /// The commit the merge wrote on the base.
    pub merge_commit_sha: Option<String>,
    /// With a squash: the squashed commit (GitLab shows it beside the merge).
    pub squash_commit_sha: Option<String>,
    /// Who merged it.
    pub merged_by: Option<String>,
    pub created: i64,
    pub updated: i64,
    pub merged_at: Option<i64>,
    pub closed_at: Option<i64>,
    /// With a repository: the paths that conflict, as of the last read.
    pub conflicts: Vec<String>,
    /// With a repository: the (base, head) `conflicts` were computed for.
    pub merge_tree_of: Option<(String, String)>,
    /// The forge is still computing mergeability (a test says so).
    pub checking: bool,
    /// Every head commit it has had, oldest first.
    pub heads: Vec<String>,
}

impl Pull {
    /// A pull request opened now from `head` into `base`; its commits made up from
    /// the branch names and the clock until a repository says otherwise.
    pub fn opened(number: u64, head: &str, base: &str, title: &str, body: &str, now: i64) -> Self {
        let head_sha = fake_sha(&format!("{head}@{now}"));
        Pull {
            number,
            heads: vec![head_sha.clone()],
            head_sha,
            base_sha: fake_sha(&format!("{base}@0")),
            head: head.to_string(),
            base: base.to_string(),
            title: title.to_string(),
            body: body.to_string(),
            open: true,
            draft: false,
            labels: Vec::new(),
            merged: false,
            merge_commit_sha: None,
            squash_commit_sha: None,
            merged_by: None,
            created: now,
            updated: now,
            merged_at: None,
            closed_at: None,
            conflicts: Vec::new(),
            merge_tree_of: None,
            checking: false,
        }
    }
}

/// One CI result on a commit: a GitLab job of the commit's pipeline, a Gitea commit
/// status (its context is `name`).
#[derive(Debug, Clone)]
pub struct Check {
    pub id: u64,
    /// The pipeline (GitLab) or actions run (Gitea) of its commit.
    pub pipeline: u64,
    pub sha: String,
    pub name: String,
    /// `success`, `failure` or `pending`.
    pub state: String,
    pub description: String,
    /// The job's log (GitLab trace, Gitea actions job log).
    pub log: String,
    pub created: i64,
    /// A later check of the same name on the same commit replaced it (a retry).
    pub retried: bool,
}

/// One pipeline (GitLab) or actions run (Gitea): the checks of one commit.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub id: u64,
    pub sha: String,
    pub created: i64,
}

/// One review: a verdict with a body.
#[derive(Debug, Clone)]
pub struct Review {
    pub id: u64,
    pub pull: u64,
    pub author: String,
    /// `approved`, `changes_requested` or `commented`.
    pub verdict: String,
    pub body: String,
    /// The head commit it was given on.
    pub commit_id: String,
    pub submitted: i64,
}

/// One comment on a line of the diff, starting a thread (a GitLab DiffNote
/// discussion; a Gitea review comment under its own `COMMENT` review).
#[derive(Debug, Clone)]
pub struct ReviewComment {
    pub id: u64,
    pub pull: u64,
    /// The review holding it (Gitea); GitLab has none.
    pub review_id: u64,
    pub author: String,
    pub path: String,
    pub line: u64,
    pub body: String,
    /// The head commit it was written on.
    pub commit_id: String,
    pub created: i64,
    pub updated: i64,
    /// Who resolved its thread.
    pub resolved_by: Option<String>,
    pub resolved_at: Option<i64>,
    /// Its line is gone from the diff.
    pub outdated: bool,
}

/// Runs inside the next merge request, before its checks.
pub type MergeHook = Box<dyn FnOnce() + Send>;

/// Everything that hangs off the pull requests.
#[derive(Default)]
pub struct PullBook {
    /// The bare repository the branches live in, if any.
    pub remote: Option<PathBuf>,
    pub pipelines: Vec<Pipeline>,
    pub checks: Vec<Check>,
    pub reviews: Vec<Review>,
    pub comments: Vec<ReviewComment>,
    /// Every merge request sortie sent: the number and the body.
    pub merges: Vec<(u64, Value)>,
    pub before_merge: Option<MergeHook>,
    /// Approvals the branch protection asks for (default 1, see `ForgeModel::start`).
    pub approvals_required: usize,
}

/// Why a pull request cannot merge now, in the order the forges check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// Merged or closed.
    NotOpen,
    Draft,
    /// Mergeability is still being computed.
    Checking,
    Conflict,
    /// A check on the head failed or is still running.
    CiMustPass,
    /// Fewer approvals than required.
    NotApproved,
}

/// A 40-hex-digit commit id made up from `seed`.
pub fn fake_sha(seed: &str) -> String {
    hex::encode(Sha256::digest(seed.as_bytes()))[..40].to_string()
}

/// `v` with every null-valued key left out, at every depth: the descriptions of
/// GitLab and Gitea type no field nullable.
pub fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// A made-up but stable user id for `name`.
pub fn user_id(name: &str) -> u64 {
    10 + name.bytes().map(u64::from).sum::<u64>()
}

/// A `text/plain` answer.
pub fn text(status: u16, body: &str) -> Answer {
    Answer {
        status,
        body: None,
        headers: Vec::new(),
        text: Some(body.to_string()),
    }
}

impl Board {
    /// A fresh id (shared with notes).
    pub fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Pull request `number`, read from the repository first.
    pub fn pull(&mut self, number: u64) -> Option<&Pull> {
        self.sync_remote();
        self.pulls.iter().find(|p| p.number == number)
    }

    /// Pull request `number`, to change it (not synced).
    pub fn pull_mut(&mut self, number: u64) -> &mut Pull {
        self.pulls
            .iter_mut()
            .find(|p| p.number == number)
            .unwrap_or_else(|| panic!("pull request {number} exists"))
    }

    /// A change to pull request `number` now: `updated` moves, then `f` runs.
    pub fn touch_pull(&mut self, number: u64, f: impl FnOnce(&mut Pull)) {
        let now = self.tick();
        let pull = self.pull_mut(number);
        pull.updated = now;
        f(pull);
    }

    /// Open a pull request from `head` into `base`; its number.
    pub fn open_pull(
        &mut self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> u64 {
        let now = self.tick();
        let number = self.pulls.len() as u64 + 1;
        let mut pull = Pull::opened(number, head, base, title, body, now);
        pull.draft = draft;
        self.pulls.push(pull);
        self.sync_remote();
        number
    }

    /// The pipeline of commit `sha`, made when its first check arrives.
    pub fn pipeline_of(&mut self, sha: &str) -> u64 {
        if let Some(p) = self.book.pipelines.iter().find(|p| p.sha == sha) {
            return p.id;
        }
        let (id, created) = (self.fresh_id(), self.clock);
        self.book.pipelines.push(Pipeline {
            id,
            sha: sha.to_string(),
            created,
        });
        id
    }

    /// The checks of commit `sha` that count (retried ones left out), oldest first.
    pub fn checks_on(&self, sha: &str) -> Vec<Check> {
        self.book
            .checks
            .iter()
            .filter(|c| c.sha == sha && !c.retried)
            .cloned()
            .collect()
    }

    /// The checks of `sha` summed up: `failure` if one failed, else `pending` if one
    /// runs, else `success`; `None` without checks.
    pub fn combined_state(&self, sha: &str) -> Option<&'static str> {
        let checks = self.checks_on(sha);
        if checks.is_empty() {
            None
        } else if checks.iter().any(|c| c.state == "failure") {
            Some("failure")
        } else if checks.iter().any(|c| c.state == "pending") {
            Some("pending")
        } else {
            Some("success")
        }
    }

    /// Who approves pull request `number`: each reviewer whose latest verdict
    /// (approved or changes requested) is an approval, in the order they approved.
    pub fn approvers(&self, number: u64) -> Vec<Review> {
        let mut latest: Vec<Review> = Vec::new();
        for r in self.book.reviews.iter().filter(|r| r.pull == number) {
            if r.verdict == "commented" {
                continue;
            }
            latest.retain(|l| l.author != r.author);
            latest.push(r.clone());
        }
        latest.retain(|r| r.verdict == "approved");
        latest
    }

    /// Why pull request `number` cannot merge now (synced first), if it cannot.
    pub fn blocker(&mut self, number: u64) -> Option<Blocker> {
        let p = self.pull(number)?.clone();
        let approvals = self.approvers(number).len();
        if !p.open {
            Some(Blocker::NotOpen)
        } else if p.draft {
            Some(Blocker::Draft)
        } else if p.checking {
            Some(Blocker::Checking)
        } else if !p.conflicts.is_empty() {
            Some(Blocker::Conflict)
        } else if matches!(
            self.combined_state(&p.head_sha),
            Some("failure" | "pending")
        ) {
            Some(Blocker::CiMustPass)
        } else if approvals < self.book.approvals_required {
            Some(Blocker::NotApproved)
        } else {
            None
        }
    }

    /// Run the hook a test left for the next merge request.
    pub fn run_before_merge(&mut self) {
        if let Some(hook) = self.book.before_merge.take() {
            hook();
        }
    }
}

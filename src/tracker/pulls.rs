//! A pull request's state as a forge reports it (issue #32): head, mergeability,
//! checks, reviews and review comments, merged or closed. The same shape on every
//! forge, so the pipeline's reactions decide on it without knowing the vendor.

use serde::{Deserialize, Serialize};

/// Whether the pull request is open, merged or closed unmerged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PullLifecycle {
    /// Open.
    Open,
    /// Merged, by sortie or anyone.
    Merged {
        /// The merge commit, when the forge says.
        merge_commit: Option<String>,
        /// Who merged it, when the forge says.
        merged_by: Option<String>,
    },
    /// Closed without being merged.
    Closed,
}

/// Whether the head merges cleanly into the base, as the forge computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mergeability {
    /// Mergeable, and the branch protection is satisfied (reviews, checks).
    Clean,
    /// Mergeable as far as git goes, but something the forge requires is missing
    /// (an approval, a required check) or the branch is behind.
    Blocked,
    /// The branch conflicts with its base.
    Conflict,
    /// The forge has not computed it yet (it does so in the background).
    Unknown,
}

/// How a check (a check run, a commit status, a pipeline job) ended, or that it has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckState {
    /// Queued or running.
    Pending,
    /// Passed.
    Success,
    /// Failed (failure, error, timed out, cancelled, action required).
    Failure,
    /// Neither: neutral or skipped.
    Neutral,
}

/// One check of the head commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// The forge's id (check run id, status id, job id), as text.
    pub id: String,
    /// Its name (check run name, status context, job name).
    pub name: String,
    /// How it ended.
    pub state: CheckState,
    /// Where a person reads it.
    pub url: Option<String>,
    /// What the forge says about it (the check run's output, the status description),
    /// bounded.
    pub summary: String,
}

/// A review's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewVerdict {
    /// Approved.
    Approved,
    /// Changes requested.
    ChangesRequested,
    /// Commented only.
    Commented,
    /// Dismissed, or still pending (not submitted).
    Other,
}

/// One submitted review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    /// The forge's id, as text.
    pub id: String,
    /// Who reviewed.
    pub author: String,
    /// The author is a bot account.
    pub bot: bool,
    /// The verdict.
    pub verdict: ReviewVerdict,
    /// The review's own text (may be empty).
    pub body: String,
    /// When it was submitted (RFC 3339), when the forge says.
    pub submitted_at: Option<String>,
    /// Where a person reads it.
    pub url: Option<String>,
}

/// One review comment (on a line of the diff, or a discussion note).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewComment {
    /// The forge's id, as text.
    pub id: String,
    /// Who wrote it.
    pub author: String,
    /// The author is a bot account.
    pub bot: bool,
    /// The file it is on, if any.
    pub path: Option<String>,
    /// The line it is on, if any (none when outdated).
    pub line: Option<u64>,
    /// Its text.
    pub body: String,
    /// Where a person reads it.
    pub url: Option<String>,
    /// Its thread is resolved.
    pub resolved: bool,
    /// It is on lines a later push changed.
    pub outdated: bool,
    /// When it was written or last edited (RFC 3339).
    pub updated_at: Option<String>,
}

/// A pull request as the forge reports it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullState {
    /// The forge's number.
    pub number: u64,
    /// The link a person opens.
    pub url: String,
    /// The branch with the work.
    pub head_branch: String,
    /// The head commit.
    pub head_sha: String,
    /// The branch it merges into.
    pub base_branch: String,
    /// A draft.
    pub draft: bool,
    /// Open, merged or closed.
    pub lifecycle: PullLifecycle,
    /// Whether it merges.
    pub mergeability: Mergeability,
    /// Its labels.
    pub labels: Vec<String>,
    /// The head commit's checks.
    pub checks: Vec<Check>,
    /// Submitted reviews.
    pub reviews: Vec<Review>,
    /// Review comments.
    pub comments: Vec<ReviewComment>,
    /// Paths that conflict, when the forge says (GitHub does not).
    pub conflicting_paths: Vec<String>,
}

impl PullState {
    /// An open pull request with nothing read about it yet: for tests and forges
    /// filling it in.
    pub fn open(number: u64, url: &str, head_sha: &str) -> Self {
        PullState {
            number,
            url: url.to_string(),
            head_branch: String::new(),
            head_sha: head_sha.to_string(),
            base_branch: String::new(),
            draft: false,
            lifecycle: PullLifecycle::Open,
            mergeability: Mergeability::Unknown,
            labels: Vec::new(),
            checks: Vec::new(),
            reviews: Vec::new(),
            comments: Vec::new(),
            conflicting_paths: Vec::new(),
        }
    }
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum MergeResult {
    /// Merged: the merge commit.
    Merged {
        /// Its SHA.
        sha: String,
    },
    /// The forge refused, and why (a new push since the head sha given, not mergeable,
    /// a required review missing). Nothing changed; a later tick tries again.
    Refused {
        /// The forge's message.
        reason: String,
    },
}

/// A JSON object's numeric `id` as text; empty when it has none.
pub(crate) fn id_of(value: &serde_json::Value) -> String {
    value
        .get("id")
        .and_then(serde_json::Value::as_u64)
        .map(|id| id.to_string())
        .unwrap_or_default()
}

/// The number at the end of a pull request's URL (`.../pull/42`, `.../pulls/42`,
/// `.../merge_requests/42`), which is how a block's `pull_request` artifact names it.
pub fn pull_number(url: &str) -> Option<u64> {
    let trimmed = url.trim().trim_end_matches('/');
    let last = trimmed.rsplit('/').next()?;
    let last = last.split(['#', '?']).next()?;
    last.parse().ok().filter(|n| *n > 0)
}

/// `text` cut to at most `max` characters, the tail kept (a log's end says why it
/// failed), with a line saying what was cut.
pub fn tail_excerpt(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let tail: String = text.chars().skip(count - max).collect();
    format!("[... {} characters cut ...]\n{tail}", count - max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_is_read_from_every_forge_spelling_of_a_pull_request_url() {
        assert_eq!(pull_number("https://github.com/a/b/pull/42"), Some(42));
        assert_eq!(pull_number("https://gitea.example/a/b/pulls/7/"), Some(7));
        assert_eq!(
            pull_number("https://gitlab.example/g/p/-/merge_requests/13#note_1"),
            Some(13)
        );
        assert_eq!(pull_number("https://github.com/a/b/pull/new"), None);
        assert_eq!(pull_number(""), None);
    }

    #[test]
    fn an_excerpt_keeps_the_tail_and_says_what_it_cut() {
        assert_eq!(tail_excerpt("short", 10), "short");
        let cut = tail_excerpt("0123456789", 4);
        assert!(cut.ends_with("\n6789"), "{cut}");
        assert!(cut.contains("6 characters cut"), "{cut}");
    }
}

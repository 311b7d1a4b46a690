//! Whose branch it is (issue #52): a branch sortie finds already made (in the mirror,
//! on the remote, checked out in the workspace) is taken up for a ticket only when it
//! is that ticket's, so a second board, a second state root or a board started over
//! never builds on (and counts as its own) the commits of another board's ticket of
//! the same id.
//!
//! A branch is the ticket's when the mirror's owner record says so (sortie writes it
//! when it makes or takes up a branch for a ticket: `<name>-<hash>.owners` beside the
//! mirror, in git's config format, `owner.<branch>.ticket = <ticket key>`), or when a
//! head one of the ticket's success blocks recorded is the branch's head or an ancestor
//! of it (another host's work, a state root that was lost).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{git, GitError};

/// The ticket a branch is prepared for, and what its blocks say of its branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchOwner {
    /// `hex(sha256(tracker ␟ ticket id ␟ created at))`: the ticket, told apart from a
    /// ticket of the same id on a board started over.
    pub key: String,
    /// The heads the ticket's success blocks recorded (`artifacts.head`), oldest first.
    pub heads: Vec<String>,
}

impl BranchOwner {
    /// The owner for ticket `id` of `tracker` (its `Tracker::name`), created at
    /// `created_at` (RFC 3339), whose blocks recorded `heads`.
    pub fn new(tracker: &str, id: &str, created_at: &str, heads: Vec<String>) -> Self {
        let text = format!("{tracker}\x1f{id}\x1f{created_at}");
        BranchOwner {
            key: hex::encode(Sha256::digest(text.as_bytes())),
            heads,
        }
    }
}

/// The owner records of `mirror`'s branches.
fn records(mirror: &Path) -> PathBuf {
    mirror.with_extension("owners")
}

/// The config key of `branch`'s owner record (a subsection holds any valid ref).
fn record_key(branch: &str) -> String {
    format!("owner.{branch}.ticket")
}

/// The ticket key recorded as `branch`'s owner, if any.
async fn recorded(
    mirror: &Path,
    branch: &str,
    timeout: Duration,
) -> Result<Option<String>, GitError> {
    let file = records(mirror);
    if !file.exists() {
        return Ok(None);
    }
    let file = file.display().to_string();
    let key = record_key(branch);
    let args = ["config", "--file", &file, "--get", &key];
    match git(mirror, &args, timeout).await {
        Ok(value) => Ok(Some(value.trim().to_string())),
        // Exit 1: no such key.
        Err(GitError::Failed { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Record `owner` as `branch`'s owner (unless it already is). The caller holds the
/// mirror's lock.
pub(super) async fn record(
    mirror: &Path,
    branch: &str,
    owner: &BranchOwner,
    timeout: Duration,
) -> Result<(), GitError> {
    if recorded(mirror, branch, timeout).await?.as_deref() == Some(owner.key.as_str()) {
        return Ok(());
    }
    let file = records(mirror).display().to_string();
    let key = record_key(branch);
    let args = ["config", "--file", &file, &key, &owner.key];
    git(mirror, &args, timeout).await.map(drop)
}

/// Where a branch was found, for [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found<'a> {
    /// The mirror's `refs/heads/<branch>`.
    InMirror,
    /// The remote's branch, the mirror's `refs/remotes/origin/<branch>`.
    OnRemote,
    /// Checked out in the ticket's workspace (the mirror's `refs/heads/<branch>`). With
    /// no owner recorded (a worktree made before sortie recorded owners), it is the
    /// ticket's: the workspace is.
    InWorkspace(&'a Path),
}

/// Refuse `branch`, `found` in the mirror, on the remote or in the workspace, unless it
/// is `owner`'s (see the module doc): [`GitError::BranchTaken`] naming the branch,
/// where it is and its head.
pub(super) async fn check(
    mirror: &Path,
    branch: &str,
    found: Found<'_>,
    owner: &BranchOwner,
    timeout: Duration,
) -> Result<(), GitError> {
    let record = recorded(mirror, branch, timeout).await?;
    match &record {
        Some(key) if *key == owner.key => return Ok(()),
        None if matches!(found, Found::InWorkspace(_)) => return Ok(()),
        _ => {}
    }
    let (reference, place) = match found {
        Found::InMirror => (
            format!("refs/heads/{branch}"),
            format!("in the mirror {}", mirror.display()),
        ),
        Found::OnRemote => (
            format!("refs/remotes/origin/{branch}"),
            "on the remote".to_string(),
        ),
        Found::InWorkspace(dir) => (
            format!("refs/heads/{branch}"),
            format!("checked out in the workspace {}", dir.display()),
        ),
    };
    let commit = format!("{reference}^{{commit}}");
    let args = ["rev-parse", "--verify", "--end-of-options", commit.as_str()];
    let head = git(mirror, &args, timeout).await?.trim().to_string();
    for recorded_head in owner.heads.iter().rev() {
        if is_ancestor(mirror, recorded_head, &head, timeout).await {
            return Ok(());
        }
    }
    Err(GitError::BranchTaken {
        branch: branch.to_string(),
        place,
        head,
        another_ticket: record.is_some(),
    })
}

/// Whether `ancestor` is `of` or an ancestor of it in `mirror`; an unknown commit is "no".
async fn is_ancestor(mirror: &Path, ancestor: &str, of: &str, timeout: Duration) -> bool {
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    if !hex(ancestor) || !hex(of) {
        return false;
    }
    let args = ["merge-base", "--is-ancestor", ancestor, of];
    git(mirror, &args, timeout).await.is_ok()
}

/// The branch the worktree at `dir` has checked out, when `HEAD` is on one.
pub(super) async fn checked_out(dir: &Path, timeout: Duration) -> Option<String> {
    let out = git(dir, &["symbolic-ref", "--quiet", "HEAD"], timeout)
        .await
        .ok()?;
    out.trim().strip_prefix("refs/heads/").map(str::to_string)
}

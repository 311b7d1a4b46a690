//! The git baseline of a workspace that sortie does not manage as a git worktree
//! (no `workspace.git`), taken before the agent runs, and what the run did against it
//! (issue #33, docs/evidence.md). With `workspace.git` the worktree's own start
//! (`git::Worktree::start`, `start_changes`) is the baseline instead.
//!
//! Only git's argv runs (no shell), each call within a time limit and with the
//! minimal environment of `git::git` (no hooks, no file system monitor). A workspace
//! counts as a git work tree only when it is the top of one: a workspace directory
//! that merely sits inside some enclosing repository (a state root inside the
//! project's checkout) would otherwise be judged by that repository's state.

use std::path::Path;
use std::time::Duration;

use super::git::{self, GitError};
use crate::block::ChangeEvidence;

/// The workspace before the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Baseline {
    /// The workspace is the top of a git work tree.
    Git {
        /// `HEAD` at launch.
        head: String,
        /// A digest of the index and working tree against `HEAD` at launch.
        digest: String,
    },
    /// Whether the run does work cannot be told; why.
    NotDeterminable(String),
}

/// What a run did, against its baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkSeen {
    /// A new head or a changed index or working tree.
    Observed,
    /// The head, index and working tree are as they were at launch.
    Absent,
    /// It cannot be told; why (not a work tree, git failed).
    NotDeterminable(String),
}

/// The baseline of `dir` before a run.
pub async fn capture(dir: &Path, timeout: Duration) -> Baseline {
    match capture_git(dir, timeout).await {
        Ok(baseline) => baseline,
        Err(why) => Baseline::NotDeterminable(why),
    }
}

async fn capture_git(dir: &Path, timeout: Duration) -> Result<Baseline, String> {
    own_work_tree(dir, timeout).await?;
    let head = head(dir, timeout).await?;
    let digest = git::uncommitted_digest(dir, timeout)
        .await
        .map_err(|e| inspection_failed(&e))?;
    Ok(Baseline::Git { head, digest })
}

/// What the run left in `dir` against `baseline`, with the change figures when there
/// is a head to compare with.
pub async fn observe(
    dir: &Path,
    baseline: &Baseline,
    timeout: Duration,
) -> (WorkSeen, Option<ChangeEvidence>) {
    let (start, digest) = match baseline {
        Baseline::Git { head, digest } => (head, digest),
        Baseline::NotDeterminable(why) => return (WorkSeen::NotDeterminable(why.clone()), None),
    };
    match observe_git(dir, start, digest, timeout).await {
        Ok(seen) => seen,
        Err(why) => (WorkSeen::NotDeterminable(why), None),
    }
}

async fn observe_git(
    dir: &Path,
    start: &str,
    digest: &str,
    timeout: Duration,
) -> Result<(WorkSeen, Option<ChangeEvidence>), String> {
    own_work_tree(dir, timeout).await?;
    let head = head(dir, timeout).await?;
    let now = git::uncommitted_digest(dir, timeout)
        .await
        .map_err(|e| inspection_failed(&e))?;
    let seen = if head != start || now != digest {
        WorkSeen::Observed
    } else {
        WorkSeen::Absent
    };
    // The figures are a bonus: a head the agent rewound past the start has no range.
    let range = format!("{start}..HEAD");
    let commits = git::git(dir, &["rev-list", "--count", &range, "--"], timeout)
        .await
        .ok()
        .and_then(|n| n.trim().parse::<u64>().ok());
    let stat = git::git(dir, &["diff", "--shortstat", start, "--"], timeout)
        .await
        .ok()
        .map(|text| git::parse_shortstat(&text));
    let change = match (commits, stat) {
        (Some(commits), Some((files_changed, insertions, deletions))) => Some(ChangeEvidence {
            base: start.to_string(),
            head,
            commits,
            files_changed,
            insertions,
            deletions,
        }),
        _ => None,
    };
    Ok((seen, change))
}

/// `Ok` when `dir` is the top of a git work tree; why not otherwise.
async fn own_work_tree(dir: &Path, timeout: Duration) -> Result<(), String> {
    let top = match git::git(dir, &["rev-parse", "--show-toplevel"], timeout).await {
        Ok(top) => top.trim().to_string(),
        Err(GitError::Failed { .. }) => {
            return Err("the workspace is not a git work tree".to_string())
        }
        Err(err) => return Err(inspection_failed(&err)),
    };
    let same = match (std::fs::canonicalize(&top), std::fs::canonicalize(dir)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "the workspace is not a git work tree of its own (it lies inside the one at {top})"
        ))
    }
}

async fn head(dir: &Path, timeout: Duration) -> Result<String, String> {
    match git::git(dir, &["rev-parse", "--verify", "--quiet", "HEAD"], timeout).await {
        Ok(head) => Ok(head.trim().to_string()),
        Err(GitError::Failed { .. }) => {
            Err("the workspace's git work tree has no commit yet".to_string())
        }
        Err(err) => Err(inspection_failed(&err)),
    }
}

fn inspection_failed(err: &GitError) -> String {
    format!("inspecting the workspace with git failed: {err}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn sh_git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=T",
                "-c",
                "user.email=t@example.com",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        sh_git(dir.path(), &["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        sh_git(dir.path(), &["add", "a.txt"]);
        sh_git(dir.path(), &["commit", "-q", "-m", "first"]);
        dir
    }

    #[tokio::test]
    async fn an_untouched_work_tree_is_an_observed_absence() {
        let dir = repo();
        let base = capture(dir.path(), T).await;
        assert!(matches!(base, Baseline::Git { .. }), "{base:?}");
        let (seen, change) = observe(dir.path(), &base, T).await;
        assert_eq!(seen, WorkSeen::Absent);
        assert_eq!(change.map(|c| c.commits), Some(0));
    }

    #[tokio::test]
    async fn a_commit_or_an_edit_is_observed_work() {
        let dir = repo();
        let base = capture(dir.path(), T).await;
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        assert_eq!(observe(dir.path(), &base, T).await.0, WorkSeen::Observed);
        sh_git(dir.path(), &["commit", "-q", "-am", "second"]);
        let (seen, change) = observe(dir.path(), &base, T).await;
        assert_eq!(seen, WorkSeen::Observed);
        let change = change.unwrap();
        assert_eq!((change.commits, change.files_changed), (1, 1));
        assert_eq!((change.insertions, change.deletions), (1, 0));
    }

    #[tokio::test]
    async fn a_plain_directory_or_one_inside_another_repository_is_not_determinable() {
        let plain = tempfile::tempdir().unwrap();
        let base = capture(plain.path(), T).await;
        assert!(
            matches!(&base, Baseline::NotDeterminable(why) if why.contains("not a git work tree")),
            "{base:?}"
        );
        let outer = repo();
        let inner = outer.path().join("workspaces").join("7");
        std::fs::create_dir_all(&inner).unwrap();
        let base = capture(&inner, T).await;
        assert!(
            matches!(&base, Baseline::NotDeterminable(why) if why.contains("inside")),
            "{base:?}"
        );
        assert!(matches!(
            observe(&inner, &base, T).await.0,
            WorkSeen::NotDeterminable(_)
        ));
    }
}

//! The model backed by a real bare repository: a pull request's head and base are
//! the branches' commits there at every read, its mergeability is what
//! `git merge-tree` says (unless a test set it), and a merge writes a real merge
//! (or squash) commit onto the base branch.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{GithubModel, State};

/// What `git merge-tree --write-tree` said about a base and a head.
#[derive(Debug)]
struct MergeTree {
    /// The merged tree (also written when it conflicts).
    tree: String,
    /// Paths that conflict; empty when it merges cleanly.
    conflicts: Vec<String>,
}

fn git(bare: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(args)
        .env("GIT_AUTHOR_NAME", "GitHub")
        .env("GIT_AUTHOR_EMAIL", "noreply@github.com")
        .env("GIT_COMMITTER_NAME", "GitHub")
        .env("GIT_COMMITTER_EMAIL", "noreply@github.com")
        .output()
        .expect("git is installed")
}

/// The commit `refs/heads/<branch>` points at, if the branch exists.
fn branch_commit(bare: &Path, branch: &str) -> Option<String> {
    let out = git(
        bare,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}^{{commit}}"),
        ],
    );
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `git merge-tree --write-tree --name-only base head` (exit 1: it conflicts).
fn merge_tree(bare: &Path, base: &str, head: &str) -> MergeTree {
    let out = git(
        bare,
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            base,
            head,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let tree = lines.next().unwrap_or_default().to_string();
    let conflicts = match out.status.code() {
        Some(1) => lines
            .take_while(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        Some(0) => Vec::new(),
        _ => panic!(
            "git merge-tree {base} {head} in {}: {}",
            bare.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    MergeTree { tree, conflicts }
}

impl State {
    /// Read every open pull request's head and base from the repository: a moved
    /// head is a push (`updated_at` moves); mergeability follows `merge-tree` unless
    /// a test pinned it.
    pub(super) fn sync_remote(&mut self) {
        let Some(bare) = self.remote.clone() else {
            return;
        };
        for i in 0..self.pulls.len() {
            let (head, base, open) = {
                let p = &self.pulls[i];
                (p.head.clone(), p.base.clone(), p.open)
            };
            if !open {
                continue;
            }
            let head_sha = branch_commit(&bare, &head);
            let base_sha = branch_commit(&bare, &base);
            if let Some(sha) = head_sha.filter(|sha| *sha != self.pulls[i].head_sha) {
                self.clock += 1;
                self.pulls[i].head_sha = sha;
                self.pulls[i].updated = self.clock;
            }
            if let Some(sha) = base_sha {
                self.pulls[i].base_sha = sha;
            }
            let p = &mut self.pulls[i];
            let pair = (p.base_sha.clone(), p.head_sha.clone());
            if p.mergeable_pinned || p.merge_tree_of.as_ref() == Some(&pair) {
                continue;
            }
            let result = merge_tree(&bare, &pair.0, &pair.1);
            p.mergeable = Some(result.conflicts.is_empty());
            p.mergeable_state = match (result.conflicts.is_empty(), p.draft) {
                (false, _) => "dirty",
                (true, true) => "draft",
                (true, false) => "clean",
            }
            .to_string();
            p.conflicts = result.conflicts;
            p.merge_tree_of = Some(pair);
        }
    }

    /// With a repository: the merge (or, for `squash` and `rebase`, one commit on
    /// the base) written and the base branch moved to it; its SHA.
    pub(super) fn merge_in_remote(&mut self, number: u64, method: &str) -> Option<String> {
        let bare = self.remote.clone()?;
        let p = self.pull_mut(number).clone();
        // A test that pinned a conflicting pull request mergeable gets the tree with
        // the conflict markers: what it asked for, and no panic inside the server.
        let tree = merge_tree(&bare, &p.base_sha, &p.head_sha);
        let title = format!("Merge pull request #{number} from {}", p.head);
        let mut args = vec!["commit-tree", tree.tree.as_str(), "-p", p.base_sha.as_str()];
        if method == "merge" {
            args.extend(["-p", p.head_sha.as_str()]);
        }
        args.extend(["-m", title.as_str()]);
        let out = git(&bare, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let base_ref = format!("refs/heads/{}", p.base);
        let out = git(&bare, &["update-ref", &base_ref, &sha, &p.base_sha]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(sha)
    }
}

impl GithubModel {
    /// A model whose pull requests live in the bare repository `bare` (push there,
    /// not with [`GithubModel::push`], which the next read would undo).
    pub async fn with_remote(bare: &Path) -> Self {
        let model = Self::start().await;
        model.state().remote = Some(PathBuf::from(bare));
        model
    }

    /// The paths `git merge-tree` found conflicting in pull request `number`, as
    /// of the last read.
    pub fn conflicting_paths(&self, number: u64) -> Vec<String> {
        let mut s = self.state();
        s.sync_remote();
        s.pull_mut(number).conflicts.clone()
    }
}

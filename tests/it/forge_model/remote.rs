//! The pull requests backed by a real bare repository (`model_plumbing::bare_repo`):
//! heads and bases are the branches' commits there at every read, conflicts are what
//! `git merge-tree` says, and a merge writes a real commit onto the base branch.

use std::path::Path;

use super::pulls::fake_sha;
use super::Board;
use crate::model_plumbing::bare_repo::{branch_commit, merge_onto_base, merge_tree};

impl Board {
    /// Read every open pull request's head and base from the repository: a moved
    /// head is a push (`updated` moves), conflicts follow `git merge-tree`.
    pub fn sync_remote(&mut self) {
        let Some(bare) = self.book.remote.clone() else {
            return;
        };
        for i in 0..self.pulls.len() {
            if !self.pulls[i].open {
                continue;
            }
            let head_sha = branch_commit(&bare, &self.pulls[i].head);
            let base_sha = branch_commit(&bare, &self.pulls[i].base);
            if let Some(sha) = head_sha.filter(|sha| *sha != self.pulls[i].head_sha) {
                let now = self.tick();
                self.pulls[i].heads.push(sha.clone());
                self.pulls[i].head_sha = sha;
                self.pulls[i].updated = now;
            }
            let p = &mut self.pulls[i];
            if let Some(sha) = base_sha {
                p.base_sha = sha;
            }
            let pair = (p.base_sha.clone(), p.head_sha.clone());
            if p.merge_tree_of.as_ref() != Some(&pair) {
                p.conflicts = merge_tree(&bare, &pair.0, &pair.1).conflicts;
                p.merge_tree_of = Some(pair);
            }
        }
    }

    /// Pull request `number` merged by `who` now: `merge` writes a merge commit,
    /// `squash` and `rebase` one commit on the base; with `squash_then_merge` (GitLab's
    /// squash under its merge-commit method) a squashed commit and a merge of it. The
    /// merge commit's SHA (written in the repository when there is one, else made up).
    pub fn merge_pull(&mut self, number: u64, who: &str, method: &str, title: &str) -> String {
        self.sync_remote();
        let p = self.pull_mut(number).clone();
        let (sha, squash) = match (self.book.remote.clone(), method) {
            (Some(bare), "squash_then_merge") => {
                let squashed = commit_squash(&bare, &p.base_sha, &p.head_sha, title);
                let sha = merge_onto_base(&bare, &p.base, &p.base_sha, &squashed, "merge", title);
                (sha, Some(squashed))
            }
            (Some(bare), _) => (
                merge_onto_base(&bare, &p.base, &p.base_sha, &p.head_sha, method, title),
                None,
            ),
            (None, _) => {
                let made_up = fake_sha(&format!("merge {number} @{}", self.clock + 1));
                let squash = (method == "squash_then_merge").then(|| fake_sha(&made_up));
                (made_up, squash)
            }
        };
        let (who, merge_sha) = (who.to_string(), sha.clone());
        self.touch_pull(number, |p| {
            p.merged = true;
            p.open = false;
            p.merge_commit_sha = Some(merge_sha.clone());
            p.squash_commit_sha = squash;
            p.merged_by = Some(who);
            p.merged_at = Some(p.updated);
            p.closed_at = Some(p.updated);
            p.base_sha = merge_sha;
        });
        sha
    }
}

/// One commit on `base_sha` with the tree `head_sha` merges to (the base branch not
/// moved): GitLab's squashed commit before its merge commit.
fn commit_squash(bare: &Path, base_sha: &str, head_sha: &str, title: &str) -> String {
    let tree = merge_tree(bare, base_sha, head_sha).tree;
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(["commit-tree", &tree, "-p", base_sha, "-m", title])
        .env("GIT_AUTHOR_NAME", "Forge")
        .env("GIT_AUTHOR_EMAIL", "noreply@forge.example")
        .env("GIT_COMMITTER_NAME", "Forge")
        .env("GIT_COMMITTER_EMAIL", "noreply@forge.example")
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

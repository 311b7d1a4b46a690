//! The model backed by a real bare repository: a pull request's head and base are
//! the branches' commits there at every read, its mergeability is what
//! `git merge-tree` says (unless a test set it), and a merge writes a real merge
//! (or squash) commit onto the base branch.

use std::path::{Path, PathBuf};

use crate::model_plumbing::bare_repo::{branch_commit, merge_onto_base, merge_tree};

use super::{GithubModel, State};

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
        let title = format!("Merge pull request #{number} from {}", p.head);
        let sha = merge_onto_base(&bare, &p.base, &p.base_sha, &p.head_sha, method, &title);
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

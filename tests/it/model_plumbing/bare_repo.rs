//! What a forge model backed by a real bare repository asks of git (GitHub, GitLab and
//! Gitea alike): where a branch points, whether a head merges into a base (`git
//! merge-tree`), and a merge written onto the base the way the forge's button does it.

use std::path::Path;
use std::process::Command;

/// What `git merge-tree --write-tree` said about a base and a head.
#[derive(Debug)]
pub struct MergeTree {
    /// The merged tree (also written when it conflicts).
    pub tree: String,
    /// Paths that conflict; empty when it merges cleanly.
    pub conflicts: Vec<String>,
}

fn git(bare: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Forge")
        .env("GIT_AUTHOR_EMAIL", "noreply@forge.example")
        .env("GIT_COMMITTER_NAME", "Forge")
        .env("GIT_COMMITTER_EMAIL", "noreply@forge.example")
        .output()
        .expect("git is installed")
}

/// The commit `refs/heads/<branch>` points at, if the branch exists.
pub fn branch_commit(bare: &Path, branch: &str) -> Option<String> {
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
pub fn merge_tree(bare: &Path, base: &str, head: &str) -> MergeTree {
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

/// A merge of `head_sha` into `base` (at `base_sha`) written as the forge writes it:
/// a merge commit for `merge`, one commit on the base otherwise (squash, rebase); the
/// base branch moved to it only if it is still at `base_sha`. Its SHA.
pub fn merge_onto_base(
    bare: &Path,
    base: &str,
    base_sha: &str,
    head_sha: &str,
    method: &str,
    title: &str,
) -> String {
    // A test that pinned a conflicting pull request mergeable gets the tree with the
    // conflict markers: what it asked for, and no panic inside the server.
    let tree = merge_tree(bare, base_sha, head_sha);
    let mut args = vec!["commit-tree", tree.tree.as_str(), "-p", base_sha];
    if method == "merge" {
        args.extend(["-p", head_sha]);
    }
    args.extend(["-m", title]);
    let out = git(bare, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let base_ref = format!("refs/heads/{base}");
    let out = git(bare, &["update-ref", &base_ref, &sha, base_sha]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sha
}

//! Git workspaces: one bare mirror per repository under `state_root/git/`, a `git
//! worktree` per ticket on the ticket's own branch, what a run changed, and pushing.
//!
//! Every name git sees is derived from the ticket id ([`crate::config::ticket_branch`],
//! validated as a ref) or from sortie's own paths; ticket text never reaches git's
//! argv, and every path or ref follows `--` where git accepts it. git runs with a
//! minimal environment (no terminal prompts, SSH in batch mode), never runs hooks, and
//! within a time limit.
//!
//! The agent can write the mirror's config (a worktree shares its repository's config)
//! and its hooks, so sortie never talks to the remote from the mirror: its fetches and
//! pushes run in a repository of its own beside it, the *transport repository*
//! (`<name>-<hash>.transport`, no worktrees, so no agent's git ever reads or writes its
//! config), which borrows the mirror's object store, and name the remote by the URL of
//! the configuration. Fetched branches are copied into the mirror's
//! `refs/remotes/origin/*` with `git update-ref`, which reaches no remote.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::block::{Category, NextAction};
use crate::config::GitWorkspace;

use super::outcome::AgentOutcome;

mod owner;

pub use self::owner::BranchOwner;
use self::owner::Found;

/// The reason code of a git step that failed (clone, fetch, worktree).
pub const GIT_FAILED: &str = "workspace.git_failed";
/// The reason code of a ticket's branch that another ticket made (issue #52).
pub const BRANCH_TAKEN: &str = "workspace.branch_taken";
/// The reason code of a worktree that cannot be brought up to its branch on the remote
/// (issue #52).
pub const DIVERGED: &str = "workspace.diverged";
/// The reason code of a push the remote refused.
pub const PUSH_REJECTED: &str = "git.push_rejected";
/// The reason code of a push that failed otherwise (network, credentials).
pub const PUSH_FAILED: &str = "git.push_failed";
/// The reason code of a run that changed nothing on a stage whose `evidence` policy
/// withholds such a handoff (docs/evidence.md).
pub const NO_CHANGES: &str = "agent.no_changes";
/// Commit first lines kept in a block, at most.
pub const MAX_COMMIT_LINES: usize = 20;
/// Uncommitted paths listed in a block, at most.
pub const MAX_UNCOMMITTED: usize = 50;
/// Characters kept of one commit's first line.
const MAX_LINE_CHARS: usize = 100;

/// A git step that went wrong, with git's own words.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started.
    #[error("cannot run git: {0}")]
    Spawn(#[source] std::io::Error),
    /// git did not finish in time and was killed.
    #[error("`git {what}` did not finish within {}s and was killed", .after.as_secs())]
    TimedOut {
        /// The subcommand.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// git exited with an error.
    #[error("`git {what}` failed: {stderr}")]
    Failed {
        /// The subcommand.
        what: String,
        /// What git wrote on stderr (trimmed, bounded).
        stderr: String,
    },
    /// The remote refused the push (not a fast-forward, protected branch, hook).
    #[error("the remote rejected the push of {branch}: {stderr}")]
    PushRejected {
        /// The branch.
        branch: String,
        /// What git said.
        stderr: String,
    },
    /// The workspace directory holds files but is not a git worktree.
    #[error("workspace {} is not empty and is not a git worktree; move its files away or remove it", .0.display())]
    NotAWorktree(PathBuf),
    /// The base branch is not on the remote.
    #[error("base branch {0:?} is not on the remote")]
    NoBase(String),
    /// The ticket's branch exists and is not this ticket's ([`BranchOwner`]).
    #[error(
        "branch {branch} already exists {place} (at {head}) and is {}: no block of this \
         ticket records its head or an ancestor of it, so another board on this repository, \
         or this board before it started over, made it. Delete that branch if its work is \
         not wanted, or give this board's branches other names with `workspace.git.branch` \
         (the default `sortie/{{{{ board.key }}}}/{{{{ ticket.id }}}}` is unique to the board)",
        if *.another_ticket { "another ticket's" } else { "not known to be this ticket's" }
    )]
    BranchTaken {
        /// The branch.
        branch: String,
        /// Where it was found: in the mirror (its path) or on the remote.
        place: String,
        /// Its head.
        head: String,
        /// The mirror records another ticket as its owner.
        another_ticket: bool,
    },
    /// The worktree and the ticket's branch on the remote each have commits the other
    /// lacks, or git cannot fast-forward the worktree without overwriting an uncommitted
    /// change.
    #[error(
        "the worktree {} of {branch} is at {ours} and the branch on the remote at {theirs}: \
         {why}. Reconcile the two (merge or rebase, and push), or remove the workspace to \
         start again from the remote's branch",
        .dir.display()
    )]
    Diverged {
        /// The branch.
        branch: String,
        /// The worktree.
        dir: PathBuf,
        /// Where the worktree's `HEAD` is.
        ours: String,
        /// Where the branch on the remote is.
        theirs: String,
        /// Why it cannot be fast-forwarded.
        why: String,
    },
    /// The mirror's lock file could not be taken.
    #[error("cannot lock the mirror {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl GitError {
    /// The failure a run gets for this error: a rejected or failed push and a failed
    /// fetch are transient (retried); a workspace that is not a worktree needs a person.
    pub fn outcome(&self) -> AgentOutcome {
        let (code, category, next) = match self {
            GitError::PushRejected { .. } => {
                (PUSH_REJECTED, Category::Transient, NextAction::Retry)
            }
            GitError::NotAWorktree(_) | GitError::NoBase(_) => {
                (GIT_FAILED, Category::Policy, NextAction::Manual)
            }
            GitError::BranchTaken { .. } => (BRANCH_TAKEN, Category::Policy, NextAction::Manual),
            GitError::Diverged { .. } => (DIVERGED, Category::Policy, NextAction::Manual),
            _ => (GIT_FAILED, Category::Transient, NextAction::Retry),
        };
        AgentOutcome::failure(code, category, next, self.to_string())
    }
}

/// A ticket's worktree, ready for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree directory (the ticket's workspace).
    pub dir: PathBuf,
    /// The ticket's branch.
    pub branch: String,
    /// The base branch it started from.
    pub base: String,
    /// The commit the branch was at before the run.
    pub start: String,
    /// A digest of the uncommitted changes before the run (what earlier roles left).
    pub start_changes: String,
    /// Whether the worktree was (re)created now.
    pub created: bool,
    /// The mirror the worktree belongs to (derived from the configured URL, never read
    /// from the worktree, which the agent can rewrite).
    pub mirror: PathBuf,
    /// The configured repository URL (`workspace.git.url`): where pushes go.
    pub url: String,
}

/// What a run left in its worktree.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunChanges {
    /// The commit the branch is at now.
    pub head: String,
    /// New commits since the run started.
    pub commit_count: usize,
    /// `<short id> <first line>` of the first [`MAX_COMMIT_LINES`] new commits, oldest first.
    pub commits: Vec<String>,
    /// `git status --porcelain` lines of changes not committed, at most [`MAX_UNCOMMITTED`].
    pub uncommitted: Vec<String>,
    /// How many uncommitted entries there are in all.
    pub uncommitted_count: usize,
    /// The run changed the uncommitted state of the worktree (changes an earlier role
    /// left and this run did not touch do not count).
    pub worktree_changed: bool,
}

impl RunChanges {
    /// Whether the run left neither a new commit nor a change in the worktree.
    pub fn is_empty(&self) -> bool {
        self.commit_count == 0 && !self.worktree_changed
    }
}

/// Untracked files hashed by content at most; beyond, only their names count.
const MAX_HASHED_UNTRACKED: usize = 500;

/// A digest of the worktree's uncommitted state: the diff of tracked files against
/// `HEAD` and the untracked files with their contents.
pub(super) async fn uncommitted_digest(dir: &Path, timeout: Duration) -> Result<String, GitError> {
    let mut hasher = Sha256::new();
    let diff = git(
        dir,
        &[
            "diff",
            "HEAD",
            "--binary",
            "--no-ext-diff",
            "--no-textconv",
            "--",
        ],
        timeout,
    )
    .await?;
    hasher.update(diff.as_bytes());
    let untracked = git(
        dir,
        &["ls-files", "--others", "--exclude-standard", "-z"],
        timeout,
    )
    .await?;
    let names: Vec<&str> = untracked.split('\0').filter(|n| !n.is_empty()).collect();
    hasher.update(untracked.as_bytes());
    if !names.is_empty() && names.len() <= MAX_HASHED_UNTRACKED {
        let mut args = vec!["hash-object", "--no-filters", "--"];
        args.extend(names.iter().copied());
        let hashes = git(dir, &args, timeout).await?;
        hasher.update(hashes.as_bytes());
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The bare mirror of `url` under `state_root/git/`: the last path segment of the URL
/// (sanitized) and 48 bits of its hash, so two URLs never share one.
pub fn mirror_dir(state_root: &Path, url: &str) -> PathBuf {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .trim_end_matches(".git");
    let mut name: String = last
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(40)
        .collect();
    if name.is_empty() {
        name.push_str("repo");
    }
    let digest = hex::encode(Sha256::digest(url.as_bytes()));
    state_root
        .join("git")
        .join(format!("{name}-{}.git", &digest[..12]))
}

/// The transport repository of `mirror`: sortie's own repository, from which every
/// fetch and push runs (see the module doc).
pub fn transport_dir(mirror: &Path) -> PathBuf {
    mirror.with_extension("transport")
}

/// A `git` command with the minimal environment: only what finding git, its config
/// and an SSH agent needs; no terminal prompt, SSH never asks (`GIT_SSH_COMMAND` wins
/// over a `core.sshCommand` in any config). Hooks never run (`core.hooksPath` points
/// at no directory, so a hook the agent planted in the mirror, or a `core.hooksPath` it
/// set there, is never found) and neither does a file system monitor.
pub(crate) fn git_command(dir: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("git");
    // Options given with `-c` win over every config file.
    cmd.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
    ]);
    cmd.env_clear();
    for name in ["PATH", "HOME", "SSH_AUTH_SOCK", "XDG_CONFIG_HOME", "TMPDIR"] {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let ssh = std::env::var("GIT_SSH_COMMAND").unwrap_or_else(|_| "ssh".to_string());
    cmd.env("GIT_SSH_COMMAND", format!("{ssh} -o BatchMode=yes"))
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GCM_INTERACTIVE", "never")
        .env("GIT_ASKPASS", "true")
        .env("SSH_ASKPASS", "true")
        .env("LC_ALL", "C")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// A `git` command run as the transport repository of `mirror`: its own config and
/// refs (`GIT_DIR`), the mirror's objects (`GIT_OBJECT_DIRECTORY`), and no automatic
/// gc (it sees only its own refs, so it must never prune the mirror's objects).
fn transport_command(mirror: &Path) -> tokio::process::Command {
    let transport = transport_dir(mirror);
    let mut cmd = git_command(&transport);
    cmd.args(["-c", "gc.auto=0", "-c", "maintenance.auto=false"])
        .env("GIT_DIR", &transport)
        .env("GIT_OBJECT_DIRECTORY", mirror.join("objects"));
    cmd
}

/// Run `git <args>` in `dir` within `timeout`; its stdout on success.
pub(super) async fn git(dir: &Path, args: &[&str], timeout: Duration) -> Result<String, GitError> {
    run(git_command(dir), args, None, timeout).await
}

/// Run `cmd <args>` within `timeout`, with `input` on its stdin; its stdout on success.
async fn run(
    mut cmd: tokio::process::Command,
    args: &[&str],
    input: Option<&str>,
    timeout: Duration,
) -> Result<String, GitError> {
    let what = args.first().copied().unwrap_or_default().to_string();
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.args(args).spawn().map_err(GitError::Spawn)?;
    let write_then_wait = async {
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(input.as_bytes()).await?;
        }
        child.wait_with_output().await
    };
    let out = match tokio::time::timeout(timeout, write_then_wait).await {
        Err(_) => {
            return Err(GitError::TimedOut {
                what,
                after: timeout,
            })
        }
        Ok(out) => out.map_err(GitError::Spawn)?,
    };
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(GitError::Failed {
            what,
            stderr: bounded(String::from_utf8_lossy(&out.stderr).trim(), 2000),
        })
    }
}

/// Whether `git rev-parse --verify --quiet <reference>` finds it.
async fn has_ref(mirror: &Path, reference: &str, timeout: Duration) -> Result<bool, GitError> {
    match git(
        mirror,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            reference,
        ],
        timeout,
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(GitError::Failed { .. }) => Ok(false),
        Err(err) => Err(err),
    }
}

/// The last `max` characters of `text` at most, cut at a character boundary.
fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let tail: String = text
        .chars()
        .rev()
        .take(max)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("…{tail}")
}

/// Hold the mirror's lock file (every process and task preparing worktrees of this
/// repository takes it, so clone, fetch and `worktree add` never race).
async fn lock_mirror(mirror: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, GitError> {
    let path = mirror.with_extension("lock");
    let lock_path = path.clone();
    let locked = tokio::task::spawn_blocking(move || {
        if let Some(parent) = lock_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| std::io::Error::from(errno))
    })
    .await
    .map_err(|e| std::io::Error::other(e.to_string()));
    match locked {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(source)) | Err(source) => Err(GitError::Lock { path, source }),
    }
}

/// Clone the mirror if it is missing (bare, remote branches under
/// `refs/remotes/origin/`), make its transport repository if that is missing, then
/// fetch: the transport repository fetches the configured URL (into the mirror's
/// objects), and its branches are copied into the mirror's `refs/remotes/origin/*`.
/// The caller holds the mirror's lock.
async fn fetch_mirror(
    state_root: &Path,
    git_cfg: &GitWorkspace,
    timeout: Duration,
) -> Result<PathBuf, GitError> {
    let mirror =
        std::path::absolute(mirror_dir(state_root, &git_cfg.url)).map_err(GitError::Spawn)?;
    if !mirror.join("HEAD").exists() {
        let parent = mirror.parent().unwrap_or(state_root);
        std::fs::create_dir_all(parent).map_err(GitError::Spawn)?;
        let partial = mirror.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let target = partial.display().to_string();
        git(
            parent,
            &["clone", "--bare", "--quiet", "--", &git_cfg.url, &target],
            timeout,
        )
        .await?;
        git(
            &partial,
            &[
                "config",
                "remote.origin.fetch",
                "+refs/heads/*:refs/remotes/origin/*",
            ],
            timeout,
        )
        .await?;
        std::fs::rename(&partial, &mirror).map_err(GitError::Spawn)?;
    }
    ensure_transport(&mirror, timeout).await?;
    let args = [
        "fetch",
        "--quiet",
        "--prune",
        "--no-auto-gc",
        "--no-write-fetch-head",
        "--",
        git_cfg.url.as_str(),
        "+refs/heads/*:refs/remotes/origin/*",
    ];
    run(transport_command(&mirror), &args, None, timeout).await?;
    copy_remote_branches(&mirror, timeout).await?;
    Ok(mirror)
}

/// Make the transport repository of `mirror` (an empty bare repository) when it is
/// missing. The caller holds the mirror's lock.
async fn ensure_transport(mirror: &Path, timeout: Duration) -> Result<(), GitError> {
    let transport = transport_dir(mirror);
    if transport.join("HEAD").exists() {
        return Ok(());
    }
    let partial = transport.with_extension("transport-partial");
    let _ = std::fs::remove_dir_all(&partial);
    let parent = mirror.parent().unwrap_or(mirror);
    let target = partial.display().to_string();
    git(
        parent,
        &["init", "--bare", "--quiet", "--", &target],
        timeout,
    )
    .await?;
    std::fs::rename(&partial, &transport).map_err(GitError::Spawn)
}

/// `<object id> <ref name>` of the refs under `refs/remotes/origin/` that `cmd` (a git
/// command of one repository) has, `origin/HEAD` left out.
async fn remote_branches(
    cmd: tokio::process::Command,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<String, String>, GitError> {
    let args = [
        "for-each-ref",
        "--format=%(objectname) %(refname)",
        "refs/remotes/origin/",
    ];
    let listing = run(cmd, &args, None, timeout).await?;
    Ok(listing
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, name)| *name != "refs/remotes/origin/HEAD")
        .map(|(id, name)| (name.to_string(), id.to_string()))
        .collect())
}

/// Make the mirror's `refs/remotes/origin/*` what the transport repository fetched:
/// one `git update-ref` transaction, no remote involved. The caller holds the lock.
async fn copy_remote_branches(mirror: &Path, timeout: Duration) -> Result<(), GitError> {
    let fetched = remote_branches(transport_command(mirror), timeout).await?;
    let had = remote_branches(git_command(mirror), timeout).await?;
    let mut script = String::new();
    for (name, id) in &fetched {
        if had.get(name) != Some(id) {
            script.push_str(&format!("update {name} {id}\n"));
        }
    }
    for name in had.keys().filter(|name| !fetched.contains_key(*name)) {
        script.push_str(&format!("delete {name}\n"));
    }
    if script.is_empty() {
        return Ok(());
    }
    let args = ["update-ref", "--no-deref", "--stdin"];
    run(git_command(mirror), &args, Some(&script), timeout).await?;
    Ok(())
}

/// Fetch the mirror and give the ticket its worktree at `dir` on `branch`: the existing
/// worktree when there is one; otherwise one made from the local branch, else from the
/// branch on the remote, else a new branch from `base`. A worktree whose directory a
/// person deleted is recreated from the branch (its commits are kept). A `dir` that
/// holds files but is not a worktree of this mirror (a plain directory, a clone of its
/// own) is [`GitError::NotAWorktree`]; a branch that is not `owner`'s is
/// [`GitError::BranchTaken`]; a worktree that cannot be brought up to the branch on the
/// remote is [`GitError::Diverged`].
pub async fn prepare_worktree(
    state_root: &Path,
    git_cfg: &GitWorkspace,
    dir: &Path,
    branch: &str,
    owner: &BranchOwner,
    timeout: Duration,
) -> Result<Worktree, GitError> {
    let mirror = mirror_dir(state_root, &git_cfg.url);
    let _lock = lock_mirror(&mirror).await?;
    let mirror = fetch_mirror(state_root, git_cfg, timeout).await?;
    let created = !dir.join(".git").exists();
    if created {
        add_worktree(&mirror, git_cfg, dir, branch, owner, timeout).await?;
    }
    let mut worktree = Worktree {
        dir: dir.to_path_buf(),
        branch: branch.to_string(),
        base: git_cfg.base.clone(),
        start: String::new(),
        start_changes: String::new(),
        created,
        mirror,
        url: git_cfg.url.clone(),
    };
    // A `.git` is not enough: a clone of its own, or a worktree of another mirror (or of
    // one since deleted), would run, commit and push outside the ticket's branch.
    worktree_admin(&worktree)?;
    // A sandboxed run that sortie did not see end (a crash) left HEAD detached.
    leave_sandbox(&worktree, timeout).await?;
    if !created {
        worktree.branch = kept_branch(&worktree, owner, timeout).await?;
    }
    owner::record(&worktree.mirror, &worktree.branch, owner, timeout).await?;
    worktree.start = catch_up(&worktree, timeout).await?;
    worktree.start_changes = uncommitted_digest(dir, timeout).await?;
    Ok(worktree)
}

/// Make the worktree at `dir` (empty or missing): from the local `branch` when the
/// mirror has it, else from the branch on the remote, either only when it is `owner`'s;
/// else a new branch from `origin/<base>`. The caller holds the mirror's lock.
async fn add_worktree(
    mirror: &Path,
    git_cfg: &GitWorkspace,
    dir: &Path,
    branch: &str,
    owner: &BranchOwner,
    timeout: Duration,
) -> Result<(), GitError> {
    let empty = std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    if !empty {
        return Err(GitError::NotAWorktree(dir.to_path_buf()));
    }
    // Forget worktrees whose directory is gone, so the branch can be checked out again.
    git(mirror, &["worktree", "prune"], timeout).await?;
    let path = dir.display().to_string();
    let local = format!("refs/heads/{branch}");
    let remote = format!("refs/remotes/origin/{branch}");
    if has_ref(mirror, &local, timeout).await? {
        owner::check(mirror, branch, Found::InMirror, owner, timeout).await?;
        let args = ["worktree", "add", "--quiet", "--", &path, branch];
        return git(mirror, &args, timeout).await.map(drop);
    }
    let start = if has_ref(mirror, &remote, timeout).await? {
        owner::check(mirror, branch, Found::OnRemote, owner, timeout).await?;
        remote
    } else {
        let base = format!("refs/remotes/origin/{}", git_cfg.base);
        if !has_ref(mirror, &base, timeout).await? {
            return Err(GitError::NoBase(git_cfg.base.clone()));
        }
        base
    };
    let args = [
        "worktree",
        "add",
        "--quiet",
        "--no-track",
        "-b",
        branch,
        "--",
        &path,
        &start,
    ];
    git(mirror, &args, timeout).await.map(drop)
}

/// The branch an existing worktree goes on with: the one it has checked out, which is
/// the ticket's `branch` unless the template changed since it was made (sortie's
/// default did in issue #52), and then the ticket keeps its branch (its commits, its
/// pull request). Refused ([`GitError::BranchTaken`]) when the mirror records another
/// ticket as its owner and no block of this ticket proves it this ticket's (a board
/// started over, or another board sharing the state root, whose ticket had the same id).
async fn kept_branch(
    worktree: &Worktree,
    owner: &BranchOwner,
    timeout: Duration,
) -> Result<String, GitError> {
    let branch = owner::checked_out(&worktree.dir, timeout)
        .await
        .unwrap_or_else(|| worktree.branch.clone());
    if branch != worktree.branch {
        tracing::info!(
            expected = %worktree.branch, %branch,
            "the ticket's worktree is on a branch of an earlier branch template; it keeps it"
        );
    }
    let found = Found::InWorkspace(&worktree.dir);
    owner::check(&worktree.mirror, &branch, found, owner, timeout).await?;
    Ok(branch)
}

/// Bring a worktree up to its branch on the remote when someone pushed on top of it
/// since this host last ran the ticket (another host sharing the pipeline, a person):
/// with `origin/<branch>` ahead of `HEAD`, fast-forward, so the run starts from the
/// branch's head and its push is not refused. Uncommitted changes (the notes an earlier
/// role left) come along. A branch that diverged, or a fast-forward git refuses because
/// it would overwrite an uncommitted change, is [`GitError::Diverged`] with both heads:
/// the run would work on old code and its push be refused on every retry (issue #52).
/// Returns where `HEAD` is then.
async fn catch_up(worktree: &Worktree, timeout: Duration) -> Result<String, GitError> {
    let dir = &worktree.dir;
    let head = git(dir, &["rev-parse", "HEAD"], timeout)
        .await?
        .trim()
        .to_string();
    let remote = format!("refs/remotes/origin/{}", worktree.branch);
    let verify = [
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        &remote,
    ];
    let theirs = match git(dir, &verify, timeout).await {
        Ok(out) => out.trim().to_string(),
        Err(GitError::Failed { .. }) => return Ok(head), // the remote has no such branch
        Err(err) => return Err(err),
    };
    let diverged = |why: String| GitError::Diverged {
        branch: worktree.branch.clone(),
        dir: dir.clone(),
        ours: head.clone(),
        theirs: theirs.clone(),
        why,
    };
    if head == theirs || is_ancestor(worktree, &theirs, &head, timeout).await {
        return Ok(head); // up to date, or ahead (this host's commits, not pushed yet)
    }
    if !is_ancestor(worktree, &head, &theirs, timeout).await {
        return Err(diverged(
            "each has commits the other lacks (the branch on the remote was rewritten, or \
             another host committed on it while this one did)"
                .to_string(),
        ));
    }
    let args = ["merge", "--ff-only", "--quiet", &remote];
    match git(dir, &args, timeout).await {
        Ok(_) => {
            tracing::info!(
                branch = %worktree.branch, from = %head, to = %theirs,
                "worktree fast-forwarded to the branch on the remote"
            );
            Ok(theirs)
        }
        Err(GitError::Failed { stderr, .. }) => Err(diverged(format!(
            "the remote's branch is ahead, and git cannot fast-forward the worktree without \
             overwriting its uncommitted changes ({stderr})"
        ))),
        Err(err) => Err(err),
    }
}

/// What the run left in `worktree`: the new commits since `worktree.start` and the
/// uncommitted changes.
pub async fn run_changes(worktree: &Worktree, timeout: Duration) -> Result<RunChanges, GitError> {
    let dir = &worktree.dir;
    let head = git(dir, &["rev-parse", "HEAD"], timeout)
        .await?
        .trim()
        .to_string();
    let range = format!("{}..HEAD", worktree.start);
    let count = git(dir, &["rev-list", "--count", &range, "--"], timeout)
        .await?
        .trim()
        .parse::<usize>()
        .unwrap_or(0);
    let log = git(
        dir,
        &["log", "--reverse", "--format=%h %s", &range, "--"],
        timeout,
    )
    .await?;
    let commits = log
        .lines()
        .take(MAX_COMMIT_LINES)
        .map(|l| l.chars().take(MAX_LINE_CHARS).collect())
        .collect();
    let status = git(
        dir,
        &["status", "--porcelain=v1", "--untracked-files=all"],
        timeout,
    )
    .await?;
    let all: Vec<&str> = status.lines().filter(|l| !l.trim().is_empty()).collect();
    let worktree_changed = uncommitted_digest(dir, timeout).await? != worktree.start_changes;
    Ok(RunChanges {
        worktree_changed,
        head,
        commit_count: count,
        commits,
        uncommitted: all
            .iter()
            .take(MAX_UNCOMMITTED)
            .map(|l| l.chars().take(MAX_LINE_CHARS * 2).collect())
            .collect(),
        uncommitted_count: all.len(),
    })
}

/// Whether commit `ancestor` is an ancestor of (or is) commit `of` in the worktree's
/// repository; any git error (an unknown commit) is "no".
pub async fn is_ancestor(worktree: &Worktree, ancestor: &str, of: &str, timeout: Duration) -> bool {
    if ancestor.is_empty() || ancestor.starts_with('-') || of.starts_with('-') {
        return false;
    }
    git(
        &worktree.dir,
        &["merge-base", "--is-ancestor", ancestor, of],
        timeout,
    )
    .await
    .is_ok()
}

/// Where the worktree's branch left its base (`git merge-base HEAD origin/<base>`), when
/// git can tell.
pub async fn fork_point(worktree: &Worktree, timeout: Duration) -> Option<String> {
    let base = format!("refs/remotes/origin/{}", worktree.base);
    git(&worktree.dir, &["merge-base", "HEAD", &base], timeout)
        .await
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The branch's change from where it left its base to its head: `git diff --stat` and
/// the diff; none when git cannot tell.
pub async fn branch_diff(worktree: &Worktree, timeout: Duration) -> Option<(String, String)> {
    let from = fork_point(worktree, timeout).await?;
    let stat = git(
        &worktree.dir,
        &["diff", "--stat", &from, "HEAD", "--"],
        timeout,
    )
    .await
    .ok()?;
    let diff = git(&worktree.dir, &["diff", &from, "HEAD", "--"], timeout)
        .await
        .ok()?;
    Some((stat.trim_end().to_string(), diff))
}

/// Files changed, lines added and lines removed from the commit the run started at to
/// the worktree as it is now (committed or not; new files git does not track yet are
/// not counted), as `git diff --shortstat` reports them.
pub async fn diff_stat(
    worktree: &Worktree,
    timeout: Duration,
) -> Result<(u64, u64, u64), GitError> {
    let text = git(
        &worktree.dir,
        &["diff", "--shortstat", &worktree.start, "--"],
        timeout,
    )
    .await?;
    Ok(parse_shortstat(&text))
}

/// ` 3 files changed, 10 insertions(+), 2 deletions(-)` -> `(3, 10, 2)`.
pub(super) fn parse_shortstat(text: &str) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    for part in text.split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let n = n.parse().unwrap_or(0);
        if what.starts_with("file") {
            out.0 = n;
        } else if what.starts_with("insertion") {
            out.1 = n;
        } else if what.starts_with("deletion") {
            out.2 = n;
        }
    }
    out
}

/// Push the ticket's branch to the configured URL, never forced: a branch the remote
/// already has at this commit is a no-op, one that moved elsewhere is
/// [`GitError::PushRejected`]. The push runs from the transport repository (see the
/// module doc), so no remote, URL rewrite or hook the agent configured in the mirror
/// applies, and it updates no ref on this side (a fetch of the mirror never races it).
pub async fn push(worktree: &Worktree, timeout: Duration) -> Result<(), GitError> {
    let mirror = &worktree.mirror;
    {
        let _lock = lock_mirror(mirror).await?;
        ensure_transport(mirror, timeout).await?;
    }
    // The commit to push is the ticket's branch in the mirror (the transport
    // repository has no branches of its own).
    let local = format!("refs/heads/{}^{{commit}}", worktree.branch);
    let args = ["rev-parse", "--verify", "--end-of-options", local.as_str()];
    let head = git(mirror, &args, timeout).await?.trim().to_string();
    let refspec = format!("{head}:refs/heads/{}", worktree.branch);
    let args = [
        "push",
        "--quiet",
        "--no-verify",
        "--",
        worktree.url.as_str(),
        refspec.as_str(),
    ];
    match run(transport_command(mirror), &args, None, timeout).await {
        Err(GitError::Failed { stderr, .. })
            if stderr.contains("[rejected]")
                || stderr.contains("[remote rejected]")
                || stderr.contains("non-fast-forward") =>
        {
            Err(GitError::PushRejected {
                branch: worktree.branch.clone(),
                stderr,
            })
        }
        other => other.map(drop),
    }
}

/// The mirror a worktree belongs to, read from its `.git` file (`gitdir:
/// <mirror>/worktrees/<name>`); `None` when `dir` is not a git worktree.
fn worktree_mirror(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dir.join(".git")).ok()?;
    let gitdir = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let worktrees = gitdir.parent()?;
    (worktrees.file_name()? == "worktrees").then(|| worktrees.parent().map(Path::to_path_buf))?
}

/// Remove the worktree at `dir` (its directory, then the mirror's record of it); the
/// branch stays in the mirror, and on the remote when it was pushed. Returns whether
/// `dir` was a git worktree (when it was not, nothing is touched).
pub fn remove_worktree(dir: &Path) -> std::io::Result<bool> {
    let Some(mirror) = worktree_mirror(dir) else {
        return Ok(false);
    };
    std::fs::remove_dir_all(dir)?;
    prune_mirror(&mirror);
    Ok(true)
}

/// `git worktree prune` in one mirror, synchronously (a local, quick operation);
/// failures are logged.
fn prune_mirror(mirror: &Path) {
    let status = std::process::Command::new("git")
        .args(["worktree", "prune"])
        .current_dir(mirror)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match status {
        Ok(out) if out.status.success() => {}
        Ok(out) => tracing::warn!(
            mirror = %mirror.display(),
            stderr = %String::from_utf8_lossy(&out.stderr).trim(),
            "git worktree prune failed"
        ),
        Err(err) => {
            tracing::warn!(mirror = %mirror.display(), %err, "cannot run git worktree prune")
        }
    }
}

/// Forget, in every mirror under `state_root/git/`, the worktrees whose directory is
/// gone (`git worktree prune`); returns the mirrors pruned.
pub fn prune_stale_worktrees(state_root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state_root.join("git")) else {
        return Vec::new();
    };
    let mut pruned = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "git") && path.join("HEAD").exists() {
            prune_mirror(&path);
            pruned.push(path);
        }
    }
    pruned.sort();
    pruned
}

/// The directory inside a worktree's administrative directory that holds the objects a
/// sandboxed agent wrote; while it exists, `HEAD` is detached ([`enter_sandbox`]).
const SANDBOX_OBJECTS: &str = "sortie-objects";

/// Make `worktree` ready for a sandboxed agent that sees its mirror read-only: `HEAD`
/// detached at the branch's commit (the branch ref lives in the mirror, which the agent
/// cannot write) and an object directory of its own in the worktree's administrative
/// directory. The administrative directory is checked to be the mirror's own record of
/// this worktree, so a `.git` file the agent rewrote never binds anything else.
pub async fn enter_sandbox(
    worktree: &Worktree,
    timeout: Duration,
) -> Result<crate::agent::sandbox::SandboxGit, GitError> {
    leave_sandbox(worktree, timeout).await?;
    let admin = worktree_admin(worktree)?;
    let objects = admin.join(SANDBOX_OBJECTS);
    std::fs::create_dir_all(&objects).map_err(GitError::Spawn)?;
    git(&worktree.dir, &["checkout", "--quiet", "--detach"], timeout).await?;
    Ok(crate::agent::sandbox::SandboxGit {
        mirror: worktree.mirror.clone(),
        admin,
        objects,
    })
}

/// After a sandboxed run (or at the next preparation, should sortie have stopped during
/// one): the agent's objects are moved into the mirror and the ticket's branch is set to
/// the commit `HEAD` is at, which it is attached to again. Nothing to do for a worktree
/// not in a sandbox.
pub async fn leave_sandbox(worktree: &Worktree, timeout: Duration) -> Result<(), GitError> {
    let Ok(admin) = worktree_admin(worktree) else {
        return Ok(());
    };
    let objects = admin.join(SANDBOX_OBJECTS);
    if !objects.is_dir() {
        return Ok(());
    }
    move_objects(&objects, &worktree.mirror.join("objects")).map_err(GitError::Spawn)?;
    let head = git(
        &worktree.dir,
        &["rev-parse", "--verify", "HEAD^{commit}"],
        timeout,
    )
    .await?
    .trim()
    .to_string();
    let branch = format!("refs/heads/{}", worktree.branch);
    git(
        &worktree.dir,
        &["update-ref", "-m", "sortie: sandboxed run", &branch, &head],
        timeout,
    )
    .await?;
    git(&worktree.dir, &["symbolic-ref", "HEAD", &branch], timeout).await?;
    std::fs::remove_dir_all(&objects).map_err(GitError::Spawn)?;
    Ok(())
}

/// The worktree's administrative directory, `<mirror>/worktrees/<name>`, as its `.git`
/// file names it, refused unless it is a directory of this mirror's `worktrees/`.
fn worktree_admin(worktree: &Worktree) -> Result<PathBuf, GitError> {
    let refused = || GitError::NotAWorktree(worktree.dir.clone());
    let text = std::fs::read_to_string(worktree.dir.join(".git")).map_err(|_| refused())?;
    let gitdir = PathBuf::from(text.strip_prefix("gitdir:").ok_or_else(refused)?.trim());
    // Relative when git writes relative worktree paths (`worktree.useRelativePaths`).
    let gitdir = worktree.dir.join(gitdir);
    let meta = std::fs::symlink_metadata(&gitdir).map_err(|_| refused())?;
    let worktrees = worktree
        .mirror
        .join("worktrees")
        .canonicalize()
        .map_err(|_| refused())?;
    let real = gitdir.canonicalize().map_err(|_| refused())?;
    if !meta.is_dir() || real.parent() != Some(worktrees.as_path()) {
        return Err(refused());
    }
    Ok(real)
}

/// Copy every object file under `from` (loose objects, packs) into `to` where it is not
/// there yet (written beside, then renamed: objects are named by their content).
fn move_objects(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut stack = vec![from.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path.strip_prefix(from).map_err(std::io::Error::other)?;
                let dest = to.join(rel);
                if dest.exists() {
                    continue;
                }
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let tmp = dest.with_extension("sortie-tmp");
                std::fs::copy(&path, &tmp)?;
                std::fs::rename(&tmp, &dest)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_of_different_urls_differ_and_stay_under_the_root() {
        let root = Path::new("/state");
        let a = mirror_dir(root, "git@host:org/repo.git");
        let b = mirror_dir(root, "https://host/org/repo.git");
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(Path::new("/state/git")));
        assert!(a
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("repo-"));
        let hostile = mirror_dir(root, "../../..");
        assert_eq!(hostile.parent(), Some(Path::new("/state/git")));
    }

    // Issue #21: git never sees the caller's environment (tokens, `GIT_*` settings),
    // and never prompts.
    #[tokio::test]
    async fn git_runs_with_a_minimal_environment_that_never_prompts() {
        let dir = tempfile::tempdir().unwrap();
        let env = git(
            dir.path(),
            &["-c", "alias.envdump=!env", "envdump"],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        assert!(env.lines().any(|l| l == "GIT_TERMINAL_PROMPT=0"), "{env}");
        assert!(env.contains("BatchMode=yes"), "{env}");
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(
            !names.iter().any(|n| n.starts_with("CARGO")),
            "the test process's variables are not passed on: {names:?}"
        );
    }

    /// `git <args>` in `dir` for a test's own setup; its stdout, trimmed.
    fn setup_git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    // Issue #29 (5): a fetch of the mirror (serialized by its lock) and a push of a
    // ticket's branch (not serialized) raced on `refs/remotes/origin/<branch>`, which
    // both updated ("cannot lock ref ... is at X but expected Y"). A push now writes no
    // ref on this side at all, so the fetch is the only writer of the mirror's
    // remote-tracking refs and there is nothing left to race (the interleaving is
    // impossible, not merely unlikely).
    #[tokio::test]
    async fn a_push_writes_no_ref_in_the_mirror_so_it_never_races_a_fetch() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        setup_git(
            root,
            &[
                "init",
                "-q",
                "--bare",
                "--initial-branch=main",
                "remote.git",
            ],
        );
        setup_git(root, &["clone", "-q", "remote.git", "seed"]);
        std::fs::write(root.join("seed/README"), "x\n").unwrap();
        setup_git(&root.join("seed"), &["add", "README"]);
        setup_git(&root.join("seed"), &["commit", "-q", "-m", "initial"]);
        setup_git(
            &root.join("seed"),
            &["push", "-q", "origin", "HEAD:refs/heads/main"],
        );
        let cfg = GitWorkspace {
            url: format!("file://{}", root.join("remote.git").display()),
            base: "main".to_string(),
            branch: crate::config::DEFAULT_BRANCH.to_string(),
            push: true,
        };
        let state = root.join("state");
        let dir = state.join("workspaces/1");
        let timeout = Duration::from_secs(60);
        let owner = BranchOwner::new("local", "1", "2025-01-01T00:00:00Z", Vec::new());
        let worktree = prepare_worktree(&state, &cfg, &dir, "sortie/1", &owner, timeout)
            .await
            .unwrap();
        std::fs::write(dir.join("work.txt"), "work\n").unwrap();
        setup_git(&dir, &["add", "work.txt"]);
        setup_git(&dir, &["commit", "-q", "-m", "work"]);
        let mirror = mirror_dir(&state, &cfg.url);
        let refs = || {
            setup_git(
                &mirror,
                &["for-each-ref", "--format=%(objectname) %(refname)"],
            )
        };
        let before = refs();
        push(&worktree, timeout).await.unwrap();
        assert_eq!(
            setup_git(&root.join("remote.git"), &["rev-parse", "sortie/1"]),
            setup_git(&dir, &["rev-parse", "HEAD"]),
            "pushed"
        );
        assert_eq!(refs(), before, "the push changed no ref in the mirror");
    }

    #[test]
    fn a_plain_directory_is_not_a_worktree() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(worktree_mirror(dir.path()), None);
        assert!(!remove_worktree(dir.path()).unwrap());
        assert!(dir.path().exists(), "nothing was removed");
    }
}

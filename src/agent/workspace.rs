//! Where a run works and writes: the per-ticket workspace and the per-run directory.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Hex digits of the hash suffix: 16 digits, 64 bits of SHA-256.
const HASH_HEX_DIGITS: usize = 16;
/// How many sanitized characters of the id a hashed name keeps before its suffix.
const KEPT_CHARS: usize = 40;
/// Between the sanitized id and the hash suffix of a hashed name.
const HASH_SEPARATOR: &str = "--";

/// Whether `c` may appear in a workspace name.
fn is_safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Whether `name` has the shape of a hashed name (`<safe>--<16 hex digits>`), so a
/// plain id can never take the name a hashed id maps to.
fn looks_hashed(name: &str) -> bool {
    let Some(split) = name.len().checked_sub(HASH_HEX_DIGITS) else {
        return false;
    };
    if !name.is_char_boundary(split) {
        return false;
    }
    let (head, tail) = name.split_at(split);
    head.ends_with(HASH_SEPARATOR)
        && tail
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

/// A file-name-safe, collision-free name for a ticket's workspace.
///
/// Ids made only of `[A-Za-z0-9._-]` (at most 64 of them, not starting with `.`) are
/// used as they are. Any other id has every other character replaced with `_` (a
/// leading `.` too), is cut to 40 characters and gets `--` and 64 bits of the SHA-256
/// of the original id as a suffix: ids that sanitize alike (`a/b`, `a b`, `a_b--…`)
/// never share a workspace, and no id can climb out of the workspace root. A plain
/// id that already has the shape of a hashed name is hashed too, so it cannot take
/// another id's workspace.
pub fn workspace_name(ticket_id: &str) -> String {
    let plain = !ticket_id.is_empty()
        && ticket_id.len() <= 64
        && !ticket_id.starts_with('.')
        && ticket_id.chars().all(is_safe)
        && !looks_hashed(ticket_id);
    if plain {
        return ticket_id.to_string();
    }
    let mut cleaned: String = ticket_id
        .chars()
        .take(KEPT_CHARS)
        .map(|c| if is_safe(c) { c } else { '_' })
        .collect();
    if cleaned.starts_with('.') {
        cleaned.replace_range(..1, "_");
    }
    if cleaned.is_empty() {
        cleaned.push_str("ticket");
    }
    let digest = hex::encode(Sha256::digest(ticket_id.as_bytes()));
    format!("{cleaned}{HASH_SEPARATOR}{}", &digest[..HASH_HEX_DIGITS])
}

/// The name sortie before 0.3 gave the workspace of `ticket_id` (unsafe characters
/// dropped, a `~` and 48 bits of hash), when it differs from today's name. Used only to
/// find and rename workspaces made by an older sortie.
pub fn legacy_workspace_name(ticket_id: &str) -> Option<String> {
    let plain = !ticket_id.is_empty()
        && ticket_id.len() <= 64
        && !ticket_id.starts_with('.')
        && ticket_id.chars().all(is_safe);
    if plain {
        // Plain ids kept their name then, and keep it now unless they look hashed.
        return (workspace_name(ticket_id) != ticket_id).then(|| ticket_id.to_string());
    }
    let cleaned: String = ticket_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(40)
        .collect();
    let digest = hex::encode(Sha256::digest(ticket_id.as_bytes()));
    let cleaned = if cleaned.is_empty() {
        "ticket"
    } else {
        &cleaned
    };
    Some(format!("{cleaned}~{}", &digest[..12]))
}

/// The workspace of `ticket_id`, shared by every role that works on it.
pub fn workspace_dir(state_root: &Path, ticket_id: &str) -> PathBuf {
    state_root
        .join("workspaces")
        .join(workspace_name(ticket_id))
}

/// The directory holding one run's prompt, result file and log.
pub fn run_dir(state_root: &Path, run_id: &str) -> PathBuf {
    state_root.join("runs").join(workspace_name(run_id))
}

/// The file recording which ticket a workspace belongs to (names of hostile ids are
/// hashed and cannot be read back). Kept beside the workspaces, not inside them, so
/// the agent's directory holds only its own files.
pub fn workspace_owner_file(state_root: &Path, ticket_id: &str) -> PathBuf {
    state_root
        .join("workspace-ids")
        .join(workspace_name(ticket_id))
}

/// Create the workspace of `ticket_id` if it does not exist; returns whether it was
/// created now (so `after_create` hooks run once). A workspace an older sortie made
/// under its old name is renamed first, never duplicated. Whatever already sits at the
/// workspace path (even a symlink or a file) counts as existing and is left for
/// [`check_workspace`](crate::agent::check_workspace) to judge: it is never followed
/// or replaced here.
pub fn ensure_workspace(state_root: &Path, ticket_id: &str) -> std::io::Result<bool> {
    adopt_legacy_workspace(state_root, ticket_id)?;
    let dir = workspace_dir(state_root, ticket_id);
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => return Ok(false),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    std::fs::create_dir_all(&dir)?;
    write_owner(state_root, &workspace_name(ticket_id), ticket_id)?;
    Ok(true)
}

fn write_owner(state_root: &Path, name: &str, ticket_id: &str) -> std::io::Result<()> {
    let ids = state_root.join("workspace-ids");
    std::fs::create_dir_all(&ids)?;
    std::fs::write(ids.join(name), ticket_id)
}

/// Rename the workspace an older sortie made for `ticket_id` under its old name
/// ([`legacy_workspace_name`]) to today's name, with its owner record; returns whether
/// it did. Nothing happens when today's workspace exists already, when the old path is
/// not a plain directory, or when its owner record names another ticket.
pub fn adopt_legacy_workspace(state_root: &Path, ticket_id: &str) -> std::io::Result<bool> {
    let Some(old) = legacy_workspace_name(ticket_id) else {
        return Ok(false);
    };
    let new_dir = workspace_dir(state_root, ticket_id);
    if std::fs::symlink_metadata(&new_dir).is_ok() {
        return Ok(false);
    }
    let old_dir = state_root.join("workspaces").join(&old);
    match std::fs::symlink_metadata(&old_dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Ok(false),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(err),
    }
    let old_owner = state_root.join("workspace-ids").join(&old);
    match std::fs::read_to_string(&old_owner) {
        Ok(owner) if owner != ticket_id => return Ok(false),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    std::fs::rename(&old_dir, &new_dir)?;
    write_owner(state_root, &workspace_name(ticket_id), ticket_id)?;
    let _ = std::fs::remove_file(old_owner);
    tracing::info!(
        ticket = %ticket_id,
        from = %old_dir.display(),
        to = %new_dir.display(),
        "renamed a workspace made under an older naming scheme"
    );
    Ok(true)
}

/// Every workspace under `state_root` with the ticket id it belongs to (`None` when
/// the owner is unknown).
pub fn list_workspaces(state_root: &Path) -> std::io::Result<Vec<(PathBuf, Option<String>)>> {
    let root = state_root.join("workspaces");
    let entries = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = std::fs::read_to_string(state_root.join("workspace-ids").join(&name))
            .ok()
            .or_else(|| (workspace_name(&name) == name).then(|| name.clone()));
        out.push((entry.path(), owner));
    }
    out.sort();
    Ok(out)
}

/// Remove a workspace and its owner record (no hook: a half-made workspace whose
/// `after_create` failed). A git worktree is removed through
/// [`super::git::remove_worktree`] (the mirror forgets it; the branch stays).
/// Finished tickets' workspaces go through [`remove_terminal`].
pub fn remove_workspace(state_root: &Path, dir: &Path) -> std::io::Result<()> {
    if !super::git::remove_worktree(dir)? {
        std::fs::remove_dir_all(dir)?;
    }
    if let Some(name) = dir.file_name() {
        let _ = std::fs::remove_file(state_root.join("workspace-ids").join(name));
    }
    Ok(())
}

/// What [`remove_terminal`] did with a ticket's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The workspace was removed (after its `before_remove` hook, whatever that hook did).
    Removed,
    /// The ticket had no workspace: nothing to do.
    Absent,
}

/// Remove the workspace of `ticket_id`, whose ticket is finished (terminal or closed):
/// the `before_remove` hook runs in it first, and its failure is logged and ignored;
/// then the workspace directory and its owner record go. A workspace an older sortie
/// made under its old name is found and removed too.
///
/// Every path that removes a finished ticket's workspace (write-back, reconcile, the
/// daemon's start, `sortie workspaces prune`, automatic pruning) comes through here, so
/// what "removing a workspace" means lives in one place. Whether the ticket is finished
/// is the caller's decision.
///
/// Something that is not a plain directory at the workspace path (a symlink, a file) is
/// never followed: the hook does not run in it, and only the entry itself is removed.
pub async fn remove_terminal(
    config: &crate::config::Config,
    ticket_id: &str,
) -> std::io::Result<Removal> {
    let state_root = &config.state_root;
    adopt_legacy_workspace(state_root, ticket_id)?;
    let dir = workspace_dir(state_root, ticket_id);
    let meta = match std::fs::symlink_metadata(&dir) {
        Ok(meta) => meta,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Removal::Absent),
        Err(err) => return Err(err),
    };
    if !meta.is_dir() {
        tracing::warn!(ticket = %ticket_id, workspace = %dir.display(), "the workspace path is not a directory; removing the entry without running before_remove in it");
        std::fs::remove_file(&dir)?;
        let _ = std::fs::remove_file(
            state_root
                .join("workspace-ids")
                .join(workspace_name(ticket_id)),
        );
        return Ok(Removal::Removed);
    }
    if let Some(hook) = &config.workspace.hooks.before_remove {
        let env = [
            ("SORTIE_TICKET_ID".to_string(), ticket_id.replace('\0', "")),
            ("SORTIE_WORKSPACE".to_string(), dir.display().to_string()),
        ];
        if let Err(err) = run_hook(hook, &dir, &env, config.workspace.hook_timeout, None).await {
            tracing::warn!(ticket = %ticket_id, %err, "before_remove workspace hook failed; removing the workspace anyway");
        }
    }
    remove_workspace(state_root, &dir)?;
    tracing::info!(ticket = %ticket_id, workspace = %dir.display(), "removed the workspace of a finished ticket");
    Ok(Removal::Removed)
}

/// Run a workspace hook (an argv) in `dir` with `env`, killing its process group at
/// `timeout`. Returns what went wrong, with the tail of its output.
pub async fn run_hook(
    argv: &[String],
    dir: &Path,
    env: &[(String, String)],
    timeout: std::time::Duration,
    sandbox: Option<&super::sandbox::SandboxPlan>,
) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("empty hook command".to_string());
    };
    let mut cmd = match sandbox {
        Some(sandbox) => {
            let vars = env.iter().cloned().collect();
            sandbox.command(program, args, dir, dir, &Default::default(), &vars)
        }
        None => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
            cmd
        }
    };
    let child = cmd
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(format!(
                "`{program}` did not finish within {}s and was killed",
                timeout.as_secs()
            ))
        }
        Ok(Err(e)) => Err(format!("`{program}` failed: {e}")),
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let tail: String = text
                .chars()
                .rev()
                .take(1000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            Err(format!(
                "`{program}` exited with {}: {}",
                out.status,
                tail.trim()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_are_kept() {
        assert_eq!(workspace_name("42"), "42");
        assert_eq!(workspace_name("PROJ-7"), "PROJ-7");
    }

    #[test]
    fn hostile_ids_stay_inside_the_root() {
        for id in ["..", "../../etc", "a/b", "", ".hidden", "x\ny", "/abs"] {
            let name = workspace_name(id);
            assert!(
                !name.contains('/') && !name.starts_with('.') && !name.is_empty(),
                "{id:?} -> {name:?}"
            );
            let dir = workspace_dir(Path::new("/state"), id);
            assert_eq!(dir.parent(), Some(Path::new("/state/workspaces")), "{id:?}");
        }
    }

    #[test]
    fn similar_hostile_ids_do_not_collide() {
        assert_ne!(workspace_name("a/b"), workspace_name("a\\b"));
        assert_ne!(workspace_name("a/b"), workspace_name("ab"));
        assert_ne!(workspace_name("a/b"), workspace_name("a b"));
        // A plain id shaped like another id's hashed name does not take its workspace.
        let hashed = workspace_name("a/b");
        assert_ne!(workspace_name(&hashed), hashed);
    }

    // Regression for issue #14: unsafe characters are replaced, not dropped, and the
    // suffix carries 64 bits of hash.
    #[test]
    fn unsafe_characters_are_replaced_and_the_hash_has_64_bits() {
        let name = workspace_name("team/PROJ 7");
        let (kept, hash) = name.rsplit_once("--").expect("a hash suffix");
        assert_eq!(kept, "team_PROJ_7");
        assert_eq!(hash.len(), 16);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(name.chars().all(is_safe), "{name}");
        assert_eq!(
            workspace_name(".hidden").split_once("--").unwrap().0,
            "_hidden"
        );
        assert_eq!(workspace_name("").split_once("--").unwrap().0, "ticket");
        assert_eq!(
            workspace_name("\u{e9}t\u{e9}").split_once("--").unwrap().0,
            "_t_"
        );
    }

    #[test]
    fn legacy_names_are_those_of_the_old_scheme() {
        assert_eq!(legacy_workspace_name("42"), None);
        let old = legacy_workspace_name("a/b").unwrap();
        assert!(
            old.starts_with("ab~") && old.len() == "ab~".len() + 12,
            "{old}"
        );
    }

    #[test]
    fn a_workspace_under_its_old_name_is_renamed_not_duplicated() {
        let state = tempfile::tempdir().unwrap();
        let id = "team/PROJ 7";
        let old = state
            .path()
            .join("workspaces")
            .join(legacy_workspace_name(id).unwrap());
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("work.txt"), "kept").unwrap();
        let ids = state.path().join("workspace-ids");
        std::fs::create_dir_all(&ids).unwrap();
        std::fs::write(ids.join(legacy_workspace_name(id).unwrap()), id).unwrap();

        let created = ensure_workspace(state.path(), id).unwrap();
        assert!(!created, "the old workspace was reused, not created anew");
        let dir = workspace_dir(state.path(), id);
        assert_eq!(
            std::fs::read_to_string(dir.join("work.txt")).unwrap(),
            "kept"
        );
        assert!(!old.exists());
        let listed = list_workspaces(state.path()).unwrap();
        assert_eq!(listed, vec![(dir, Some(id.to_string()))]);
    }

    #[test]
    fn an_old_workspace_of_another_ticket_is_not_taken() {
        let state = tempfile::tempdir().unwrap();
        let id = "team/PROJ 7";
        let old_name = legacy_workspace_name(id).unwrap();
        std::fs::create_dir_all(state.path().join("workspaces").join(&old_name)).unwrap();
        let ids = state.path().join("workspace-ids");
        std::fs::create_dir_all(&ids).unwrap();
        std::fs::write(ids.join(&old_name), "someone else").unwrap();
        assert!(ensure_workspace(state.path(), id).unwrap());
        assert!(state.path().join("workspaces").join(&old_name).is_dir());
    }

    fn config_with_before_remove(state: &Path, marker: &Path) -> crate::config::Config {
        crate::config::Config::parse_str(
            &format!(
                "tracker: {{kind: local, path: b}}\nstate_root: {}\nagent: {{command: [\"true\"]}}\n\
                 workspace: {{hooks: {{before_remove: [\"sh\", \"-c\", \"pwd > {}; exit 1\"]}}}}\n\
                 active_states: [todo]\nhandoff_state: review\n",
                state.display(),
                marker.display()
            ),
            None,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn removing_a_finished_workspace_runs_before_remove_and_ignores_its_failure() {
        let state = tempfile::tempdir().unwrap();
        let marker = state.path().join("hook-ran-in");
        let config = config_with_before_remove(state.path(), &marker);
        assert_eq!(
            remove_terminal(&config, "team/PROJ 7").await.unwrap(),
            Removal::Absent
        );
        assert!(ensure_workspace(state.path(), "team/PROJ 7").unwrap());
        let dir = workspace_dir(state.path(), "team/PROJ 7");
        std::fs::write(dir.join("work.txt"), "x").unwrap();
        assert_eq!(
            remove_terminal(&config, "team/PROJ 7").await.unwrap(),
            Removal::Removed
        );
        assert!(!dir.exists());
        assert!(!workspace_owner_file(state.path(), "team/PROJ 7").exists());
        let ran_in = std::fs::read_to_string(&marker).unwrap();
        assert!(
            ran_in
                .trim()
                .ends_with(&format!("/workspaces/{}", workspace_name("team/PROJ 7"))),
            "the hook ran in the workspace: {ran_in}"
        );
    }

    #[tokio::test]
    async fn a_symlink_at_the_workspace_path_is_removed_without_following_it() {
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("precious"), "x").unwrap();
        let marker = state.path().join("hook-ran-in");
        let config = config_with_before_remove(state.path(), &marker);
        std::fs::create_dir_all(state.path().join("workspaces")).unwrap();
        let dir = workspace_dir(state.path(), "7");
        std::os::unix::fs::symlink(outside.path(), &dir).unwrap();
        assert_eq!(
            remove_terminal(&config, "7").await.unwrap(),
            Removal::Removed
        );
        assert!(std::fs::symlink_metadata(&dir).is_err(), "the link went");
        assert!(
            outside.path().join("precious").is_file(),
            "its target stays"
        );
        assert!(!marker.exists(), "before_remove did not run in the link");
    }

    #[test]
    fn whatever_sits_at_the_workspace_path_is_not_replaced() {
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(state.path().join("workspaces")).unwrap();
        let dir = workspace_dir(state.path(), "7");
        std::os::unix::fs::symlink(outside.path().join("missing"), &dir).unwrap();
        assert!(!ensure_workspace(state.path(), "7").unwrap());
        assert!(
            !outside.path().join("missing").exists(),
            "the link was not followed"
        );
    }
}

//! Where a run works and writes: the per-ticket workspace and the per-run directory.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A file-name-safe, collision-free name for a ticket's workspace.
///
/// Ids made only of `[A-Za-z0-9._-]` (and not starting with `.`) are used as they
/// are; anything else is reduced to its safe characters and suffixed with a short
/// hash of the original id, so two hostile ids never share a workspace and no id
/// can climb out of the workspace root.
pub fn workspace_name(ticket_id: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let plain = !ticket_id.is_empty()
        && ticket_id.len() <= 64
        && !ticket_id.starts_with('.')
        && ticket_id.chars().all(safe);
    if plain {
        return ticket_id.to_string();
    }
    let cleaned: String = ticket_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(40)
        .collect();
    let digest = hex::encode(Sha256::digest(ticket_id.as_bytes()));
    format!(
        "{}~{}",
        if cleaned.is_empty() {
            "ticket"
        } else {
            &cleaned
        },
        &digest[..12]
    )
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
/// created now (so `after_create` hooks run once).
pub fn ensure_workspace(state_root: &Path, ticket_id: &str) -> std::io::Result<bool> {
    let dir = workspace_dir(state_root, ticket_id);
    if dir.is_dir() {
        return Ok(false);
    }
    std::fs::create_dir_all(&dir)?;
    let owner = workspace_owner_file(state_root, ticket_id);
    if let Some(parent) = owner.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(owner, ticket_id)?;
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

/// Remove a workspace and its owner record.
pub fn remove_workspace(state_root: &Path, dir: &Path) -> std::io::Result<()> {
    std::fs::remove_dir_all(dir)?;
    if let Some(name) = dir.file_name() {
        let _ = std::fs::remove_file(state_root.join("workspace-ids").join(name));
    }
    Ok(())
}

/// Run a workspace hook (an argv) in `dir` with `env`, killing its process group at
/// `timeout`. Returns what went wrong, with the tail of its output.
pub async fn run_hook(
    argv: &[String],
    dir: &Path,
    env: &[(String, String)],
    timeout: std::time::Duration,
) -> Result<(), String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("empty hook command".to_string());
    };
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
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
    }
}

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

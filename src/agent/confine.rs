//! Refusing a workspace that would let an agent work outside `state_root/workspaces/`.
//!
//! Checked right before a run (after the workspace hooks, which may have changed it):
//! the workspace path is canonicalized and must lie inside the canonical workspace
//! root; the workspace itself must be a real directory, not a symlink (a symlink is
//! never followed, wherever it points); and no entry at its root may be a symlink
//! whose target lies outside the workspace. Deeper entries are the agent's own
//! business: the check guards what sortie hands over, not what the agent does later.

use std::path::{Component, Path, PathBuf};

use crate::block::{Category, NextAction};

use super::outcome::AgentOutcome;

/// The reason code of the failure block a refused workspace gets.
pub const UNSAFE_WORKSPACE: &str = "workspace.unsafe";

/// Why a workspace was refused. Every variant becomes a `workspace.unsafe` failure
/// block with category `policy` ([`UnsafeWorkspace::outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum UnsafeWorkspace {
    /// The workspace path is itself a symlink; sortie never follows it.
    #[error("workspace {} is a symlink (to {}); sortie does not follow it", path.display(), target.display())]
    IsSymlink {
        /// The workspace path.
        path: PathBuf,
        /// Where the link points, as written in the link.
        target: PathBuf,
    },
    /// Something other than a directory sits at the workspace path.
    #[error("workspace {} is not a directory", path.display())]
    NotADirectory {
        /// The workspace path.
        path: PathBuf,
    },
    /// The canonical workspace path is not inside the workspace root.
    #[error("workspace {} resolves to {}, which is not inside {}", path.display(), resolved.display(), root.display())]
    OutsideRoot {
        /// The workspace path.
        path: PathBuf,
        /// Its canonical form.
        resolved: PathBuf,
        /// The canonical `state_root/workspaces`.
        root: PathBuf,
    },
    /// An entry at the workspace's root is a symlink pointing outside the workspace.
    #[error("workspace {} holds {}, a symlink to {} outside the workspace", path.display(), entry.display(), target.display())]
    SymlinkEscapes {
        /// The workspace path.
        path: PathBuf,
        /// The entry's path.
        entry: PathBuf,
        /// Where it resolves to.
        target: PathBuf,
    },
    /// The workspace or its root could not be inspected, so it cannot be shown safe.
    #[error("cannot inspect workspace {}", path.display())]
    Unreadable {
        /// The path that could not be read.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

impl UnsafeWorkspace {
    /// The outcome a run gets instead of starting its agent: `workspace.unsafe`,
    /// category `policy`, escalated (a person has to look at the workspace).
    pub fn outcome(&self) -> AgentOutcome {
        let mut detail = self.to_string();
        if let UnsafeWorkspace::Unreadable { source, .. } = self {
            detail = format!("{detail}: {source}");
        }
        AgentOutcome::failure(
            UNSAFE_WORKSPACE,
            Category::Policy,
            NextAction::Escalate,
            detail,
        )
    }
}

/// Check the workspace at `dir` before an agent starts in it; returns its canonical
/// path. See the module docs for what is refused.
pub fn check_workspace(state_root: &Path, dir: &Path) -> Result<PathBuf, UnsafeWorkspace> {
    let unreadable = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UnsafeWorkspace::Unreadable { path, source }
    };
    let root = state_root.join("workspaces");
    let root = std::fs::canonicalize(&root).map_err(unreadable(&root))?;
    let meta = std::fs::symlink_metadata(dir).map_err(unreadable(dir))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(dir).map_err(unreadable(dir))?;
        return Err(UnsafeWorkspace::IsSymlink {
            path: dir.to_path_buf(),
            target,
        });
    }
    if !meta.is_dir() {
        return Err(UnsafeWorkspace::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let resolved = std::fs::canonicalize(dir).map_err(unreadable(dir))?;
    if resolved == root || !resolved.starts_with(&root) {
        return Err(UnsafeWorkspace::OutsideRoot {
            path: dir.to_path_buf(),
            resolved,
            root,
        });
    }
    for entry in std::fs::read_dir(&resolved).map_err(unreadable(&resolved))? {
        let entry = entry.map_err(unreadable(&resolved))?;
        let is_link = entry
            .file_type()
            .map_err(unreadable(&entry.path()))?
            .is_symlink();
        if !is_link {
            continue;
        }
        let path = entry.path();
        let target = match std::fs::canonicalize(&path) {
            Ok(target) => target,
            // A dangling link: judge where it would point.
            Err(_) => {
                let link = std::fs::read_link(&path).map_err(unreadable(&path))?;
                fold(&resolved.join(link))
            }
        };
        if !target.starts_with(&resolved) {
            return Err(UnsafeWorkspace::SymlinkEscapes {
                path: dir.to_path_buf(),
                entry: path,
                target,
            });
        }
    }
    Ok(resolved)
}

/// `path` with `.` dropped and `..` folded lexically (`/a/b/../c` is `/a/c`).
fn fold(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::agent::{ensure_workspace, workspace_dir};

    fn state() -> tempfile::TempDir {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(state.path().join("workspaces")).unwrap();
        state
    }

    #[test]
    fn a_plain_workspace_passes_and_comes_back_canonical() {
        let state = state();
        ensure_workspace(state.path(), "7").unwrap();
        std::fs::create_dir(workspace_dir(state.path(), "7").join("src")).unwrap();
        let dir = state.path().join("workspaces/../workspaces/7");
        let checked = check_workspace(state.path(), &dir).unwrap();
        assert_eq!(
            checked,
            std::fs::canonicalize(workspace_dir(state.path(), "7")).unwrap()
        );
    }

    #[test]
    fn a_symlink_at_the_workspace_path_is_refused_wherever_it_points() {
        let state = state();
        let outside = tempfile::tempdir().unwrap();
        let dir = workspace_dir(state.path(), "7");
        symlink(outside.path(), &dir).unwrap();
        let err = check_workspace(state.path(), &dir).unwrap_err();
        assert!(matches!(err, UnsafeWorkspace::IsSymlink { .. }), "{err}");
        match err.outcome() {
            AgentOutcome::Failure {
                reason_code,
                category,
                ..
            } => {
                assert_eq!(reason_code, UNSAFE_WORKSPACE);
                assert_eq!(category, Category::Policy);
            }
            other => panic!("{other:?}"),
        }

        // Pointing at another ticket's workspace is refused too: that is not its own.
        ensure_workspace(state.path(), "8").unwrap();
        let other = workspace_dir(state.path(), "9");
        symlink(workspace_dir(state.path(), "8"), &other).unwrap();
        assert!(matches!(
            check_workspace(state.path(), &other),
            Err(UnsafeWorkspace::IsSymlink { .. })
        ));
    }

    #[test]
    fn a_symlink_at_the_root_pointing_outside_is_refused() {
        let state = state();
        let outside = tempfile::tempdir().unwrap();
        ensure_workspace(state.path(), "7").unwrap();
        let dir = workspace_dir(state.path(), "7");
        symlink(outside.path(), dir.join("escape")).unwrap();
        let err = check_workspace(state.path(), &dir).unwrap_err();
        assert!(
            matches!(&err, UnsafeWorkspace::SymlinkEscapes { entry, .. } if entry.ends_with("escape")),
            "{err}"
        );
    }

    #[test]
    fn a_dangling_symlink_pointing_outside_is_refused() {
        let state = state();
        ensure_workspace(state.path(), "7").unwrap();
        let dir = workspace_dir(state.path(), "7");
        symlink("../../../nowhere", dir.join("later")).unwrap();
        assert!(matches!(
            check_workspace(state.path(), &dir),
            Err(UnsafeWorkspace::SymlinkEscapes { .. })
        ));
    }

    #[test]
    fn symlinks_within_the_workspace_are_fine() {
        let state = state();
        ensure_workspace(state.path(), "7").unwrap();
        let dir = workspace_dir(state.path(), "7");
        std::fs::create_dir(dir.join("docs")).unwrap();
        std::fs::write(dir.join("docs/README.md"), "hi").unwrap();
        symlink("docs/README.md", dir.join("README.md")).unwrap();
        symlink("docs/not-yet", dir.join("pending")).unwrap();
        assert!(check_workspace(state.path(), &dir).is_ok());
    }

    #[test]
    fn a_file_at_the_workspace_path_is_refused() {
        let state = state();
        let dir = workspace_dir(state.path(), "7");
        std::fs::write(&dir, "not a dir").unwrap();
        assert!(matches!(
            check_workspace(state.path(), &dir),
            Err(UnsafeWorkspace::NotADirectory { .. })
        ));
    }

    #[test]
    fn a_workspace_outside_the_root_is_refused() {
        let state = state();
        let elsewhere = tempfile::tempdir().unwrap();
        let err = check_workspace(state.path(), elsewhere.path()).unwrap_err();
        assert!(matches!(err, UnsafeWorkspace::OutsideRoot { .. }), "{err}");
        let root = state.path().join("workspaces");
        assert!(matches!(
            check_workspace(state.path(), &root),
            Err(UnsafeWorkspace::OutsideRoot { .. })
        ));
    }

    #[test]
    fn a_state_root_reached_through_a_symlink_is_fine() {
        let real = state();
        let links = tempfile::tempdir().unwrap();
        let state_root = links.path().join("state");
        symlink(real.path(), &state_root).unwrap();
        ensure_workspace(&state_root, "7").unwrap();
        assert!(check_workspace(&state_root, &workspace_dir(&state_root, "7")).is_ok());
    }
}

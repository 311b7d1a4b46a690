//! The last read of each watched ticket's pull request, kept on this host (issue #32,
//! "Visible"): the react step writes what it read, the dashboard's ticket page shows it.
//!
//! One JSON file per ticket, `<state_root>/pulls/<tracker>/<ticket>.json`, both names
//! made file-safe the way workspace names are. It is a view, never an input: no
//! decision reads it, so a lost or stale file costs nothing but what the page shows.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::agent::workspace_name;
use crate::tracker::PullState;

/// The directory under `state_root` that holds the snapshots.
const PULLS_DIR: &str = "pulls";

/// A pull request as this host's react step last read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PullSnapshot {
    /// When it was read (the pipeline's clock).
    pub read_at: DateTime<Utc>,
    /// What the forge answered.
    pub pull: PullState,
}

/// Where the snapshot of `ticket_id` on `tracker` lives.
pub fn snapshot_path(state_root: &Path, tracker: &str, ticket_id: &str) -> PathBuf {
    state_root
        .join(PULLS_DIR)
        .join(workspace_name(tracker))
        .join(format!("{}.json", workspace_name(ticket_id)))
}

/// Keep `pull` as the last read of `ticket_id`'s pull request. A failure is logged and
/// otherwise ignored: the page would only show an older read.
pub(crate) fn record(
    state_root: &Path,
    tracker: &str,
    ticket_id: &str,
    pull: &PullState,
    read_at: DateTime<Utc>,
) {
    let path = snapshot_path(state_root, tracker, ticket_id);
    let snapshot = PullSnapshot {
        read_at,
        pull: pull.clone(),
    };
    if let Err(err) = write_atomically(&path, &snapshot) {
        tracing::warn!(
            ticket = %ticket_id,
            path = %path.display(),
            %err,
            "cannot keep the pull request's last read for the dashboard"
        );
    }
}

/// The last read of `ticket_id`'s pull request on this host, if any. A missing file is
/// `None`; so is an unreadable one, with a warning.
pub fn read(state_root: &Path, tracker: &str, ticket_id: &str) -> Option<PullSnapshot> {
    let path = snapshot_path(state_root, tracker, ticket_id);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot read a pull request's last read");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(snapshot) => Some(snapshot),
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "ignoring a broken pull request snapshot");
            None
        }
    }
}

/// Write `snapshot` so a page being rendered (another process) never reads half a file.
fn write_atomically(path: &Path, snapshot: &PullSnapshot) -> std::io::Result<()> {
    crate::state_file::write_atomically(path, &serde_json::to_vec_pretty(snapshot)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::pulls::{Check, CheckState, PullLifecycle};

    fn pull() -> PullState {
        let mut pull = PullState::open(7, "https://github.com/a/b/pull/7", "abc123");
        pull.lifecycle = PullLifecycle::Merged {
            merge_commit: Some("def".into()),
            merged_by: None,
        };
        pull.checks.push(Check {
            id: "1".into(),
            name: "test".into(),
            state: CheckState::Failure,
            url: None,
            summary: "2 tests failed".into(),
        });
        pull
    }

    #[test]
    fn a_recorded_read_is_read_back_and_a_newer_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let at = Utc::now();
        assert_eq!(read(dir.path(), "github:a/b", "T-1"), None);
        record(dir.path(), "github:a/b", "T-1", &pull(), at);
        let back = read(dir.path(), "github:a/b", "T-1").expect("recorded");
        assert_eq!(back.pull, pull());
        assert_eq!(back.read_at, at);

        let newer = PullState::open(7, "https://github.com/a/b/pull/7", "fff");
        record(dir.path(), "github:a/b", "T-1", &newer, at);
        assert_eq!(
            read(dir.path(), "github:a/b", "T-1").unwrap().pull.head_sha,
            "fff"
        );
        // Another ticket, another tracker: their own files.
        assert_eq!(read(dir.path(), "github:a/b", "T-2"), None);
        assert_eq!(read(dir.path(), "github:a/c", "T-1"), None);
    }

    #[test]
    fn ids_cannot_climb_out_of_the_snapshot_directory() {
        let root = Path::new("/state");
        let path = snapshot_path(root, "../x", "../../etc/passwd");
        assert!(path.starts_with("/state/pulls"), "{}", path.display());
        assert_eq!(path.components().count(), 5, "{}", path.display());
    }

    #[test]
    fn a_write_that_fails_is_only_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        // `pulls` is a file, so its directories cannot be made.
        std::fs::write(dir.path().join(PULLS_DIR), "").unwrap();
        record(dir.path(), "local", "T-1", &pull(), Utc::now());
        assert_eq!(read(dir.path(), "local", "T-1"), None);
    }
}

//! Removing the workspaces of finished tickets.

use serde::Serialize;

use super::{Pipeline, PipelineError};
use crate::tracker::TrackerError;

/// What pruning did with one workspace.
#[derive(Debug, Clone, Serialize)]
pub struct PruneLine {
    /// The workspace directory.
    pub workspace: String,
    /// The ticket it belongs to, when known.
    pub ticket: Option<String>,
    /// `removed`, `would remove`, `kept` or `failed`.
    pub action: String,
    /// Why.
    pub reason: String,
}

/// File counting ticks since the last automatic prune.
const COUNTER_FILE: &str = "prune-tick-count";

impl Pipeline {
    /// Remove the workspaces of tickets that are terminal, closed or gone, running the
    /// `before_remove` hook first (a git worktree goes with its mirror's record; its
    /// branch stays), then prune stale worktrees from every mirror. A ticket the tracker cannot be asked about keeps its
    /// workspace. With `dry_run`, only say what would be removed.
    pub async fn prune_workspaces(&self, dry_run: bool) -> Result<Vec<PruneLine>, PipelineError> {
        let ctx = &self.ctx;
        let state_root = &ctx.config.state_root;
        let workspaces = crate::agent::list_workspaces(state_root).map_err(|e| {
            PipelineError::Io(format!(
                "cannot list workspaces under {}: {e}",
                state_root.display()
            ))
        })?;
        let mut lines = Vec::new();
        for (dir, owner) in workspaces {
            let mut line = PruneLine {
                workspace: dir.display().to_string(),
                ticket: owner.clone(),
                action: "kept".to_string(),
                reason: String::new(),
            };
            let Some(id) = owner else {
                line.reason = "owner unknown".to_string();
                lines.push(line);
                continue;
            };
            let finished = match ctx.tracker.get(&id).await {
                Ok(t) if t.closed || ctx.config.is_terminal(&t.status) => {
                    Some(format!("ticket is {}", t.status))
                }
                Ok(t) => {
                    line.reason = format!("ticket is {}", t.status);
                    None
                }
                Err(TrackerError::NotFound(_)) => Some("ticket no longer exists".to_string()),
                Err(err) => {
                    line.reason = format!("tracker: {err}");
                    None
                }
            };
            if let Some(reason) = finished {
                line.reason = reason;
                if dry_run {
                    line.action = "would remove".to_string();
                } else {
                    if let Some(hook) = &ctx.config.workspace.hooks.before_remove {
                        let env = [
                            ("SORTIE_TICKET_ID".to_string(), id.clone()),
                            ("SORTIE_WORKSPACE".to_string(), dir.display().to_string()),
                        ];
                        if let Err(err) = crate::agent::run_hook(
                            hook,
                            &dir,
                            &env,
                            ctx.config.workspace.hook_timeout,
                        )
                        .await
                        {
                            tracing::warn!(ticket = %id, %err, "before_remove workspace hook failed");
                        }
                    }
                    match crate::agent::remove_workspace(state_root, &dir) {
                        Ok(()) => line.action = "removed".to_string(),
                        Err(err) => {
                            line.action = "failed".to_string();
                            line.reason = format!("cannot remove: {err}");
                        }
                    }
                }
            }
            lines.push(line);
        }
        if !dry_run {
            // Worktrees whose directory is gone (removed above, or by a person): the
            // mirrors forget them, so their branches can be checked out again.
            crate::agent::git::prune_stale_worktrees(state_root);
        }
        Ok(lines)
    }

    /// Count this tick and prune when `workspace.prune_every_ticks` ticks have passed.
    pub(super) async fn maybe_prune(&self) {
        let every = self.ctx.config.workspace.prune_every_ticks;
        if every == 0 {
            return;
        }
        let path = self.ctx.config.state_root.join(COUNTER_FILE);
        let count = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0)
            + 1;
        let due = count >= every;
        let _ = std::fs::write(
            &path,
            if due {
                "0".to_string()
            } else {
                count.to_string()
            },
        );
        if due {
            match self.prune_workspaces(false).await {
                Ok(lines) => {
                    let removed = lines.iter().filter(|l| l.action == "removed").count();
                    if removed > 0 {
                        tracing::info!(removed, "pruned workspaces of finished tickets");
                    }
                }
                Err(err) => tracing::warn!(%err, "workspace pruning failed"),
            }
        }
    }
}

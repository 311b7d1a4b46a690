//! Removing the workspaces of finished tickets: right after a write-back moves a ticket
//! to a terminal status, when reconcile finds a ticket terminal, when the daemon starts,
//! every `workspace.prune_every_ticks` ticks, and on `sortie workspaces prune`.
//!
//! The removal itself (the `before_remove` hook, then the directory) is
//! [`crate::agent::remove_terminal`]; this module decides when. A ticket counts as
//! finished when the tracker says it is terminal or closed. A ticket missing from a
//! listing, one the tracker cannot be asked about and one on a status outside the
//! pipeline keep their workspace; only `sortie workspaces prune` (a person asking)
//! also removes the workspaces of tickets the tracker says no longer exist.

use std::collections::HashSet;

use serde::Serialize;

use super::context::Context;
use super::{Pipeline, PipelineError};
use crate::agent::Removal;
use crate::ledger::Scope;
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
/// File holding the name of the last workspace an automatic sweep read the ticket of,
/// so successive sweeps go round all workspaces even when each reads only some.
const CURSOR_FILE: &str = "prune-cursor";
/// Tickets an automatic sweep (daemon start, `workspace.prune_every_ticks`) reads at
/// most; the rest wait for the next sweep, which starts where this one stopped.
pub const MAX_READS_PER_SWEEP: usize = 50;

/// How a sweep over every workspace goes.
#[derive(Debug, Clone, Copy)]
struct SweepOptions {
    /// Only say what would be removed.
    dry_run: bool,
    /// Also remove the workspaces of tickets the tracker says do not exist.
    gone: bool,
    /// Read at most this many tickets, starting after the last one read before.
    max_reads: Option<usize>,
}

impl Pipeline {
    /// `sortie workspaces prune`: remove the workspaces of tickets that are terminal,
    /// closed or gone (the tracker says they do not exist), running the `before_remove`
    /// hook first. A ticket the tracker cannot be asked about, or on any other status,
    /// keeps its workspace. With `dry_run`, only say what would be removed.
    /// Then stale worktrees are pruned from every git mirror (a worktree goes with its
    /// mirror's record; its branch stays).
    pub async fn prune_workspaces(&self, dry_run: bool) -> Result<Vec<PruneLine>, PipelineError> {
        let lines = sweep(
            &self.ctx,
            SweepOptions {
                dry_run,
                gone: true,
                max_reads: None,
            },
        )
        .await?;
        if !dry_run {
            // Worktrees whose directory is gone (removed above, or by a person): the
            // mirrors forget them, so their branches can be checked out again.
            crate::agent::git::prune_stale_worktrees(&self.ctx.config.state_root);
        }
        Ok(lines)
    }

    /// What the daemon does when it starts: remove the workspaces of tickets that are
    /// terminal or closed, reading at most [`MAX_READS_PER_SWEEP`] tickets (one request
    /// each; the rest wait for the next automatic prune). Workspaces of tickets that
    /// are gone, unreadable or on any other status are kept.
    pub async fn clean_finished_workspaces(&self) -> Result<Vec<PruneLine>, PipelineError> {
        sweep(&self.ctx, automatic()).await
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
            report_sweep(sweep(&self.ctx, automatic()).await);
        }
    }
}

fn automatic() -> SweepOptions {
    SweepOptions {
        dry_run: false,
        gone: false,
        max_reads: Some(MAX_READS_PER_SWEEP),
    }
}

/// Log what an automatic sweep did.
pub(crate) fn report_sweep(result: Result<Vec<PruneLine>, PipelineError>) {
    match result {
        Ok(lines) => {
            let removed = lines.iter().filter(|l| l.action == "removed").count();
            if removed > 0 {
                tracing::info!(removed, "removed workspaces of finished tickets");
            }
            for line in lines.iter().filter(|l| l.action == "failed") {
                tracing::warn!(workspace = %line.workspace, reason = %line.reason, "could not remove a workspace");
            }
        }
        Err(err) => tracing::warn!(%err, "workspace pruning failed"),
    }
}

/// The tickets with a live claim in this tracker (a run may be working in their
/// workspace), other than `except` (the caller's own claim).
fn claimed_tickets(
    ctx: &Context,
    except: Option<(&str, &str)>,
) -> Result<HashSet<String>, PipelineError> {
    let now = ctx.clock.now();
    Ok(ctx
        .ledger
        .claims(Scope::Tracker(ctx.tracker_name()))?
        .into_iter()
        .filter(|c| c.lease_expires_at > now)
        .filter(|c| except != Some((c.key.ticket_id.as_str(), c.key.role.as_str())))
        .map(|c| c.key.ticket_id)
        .collect())
}

/// A ticket was seen finished (terminal or closed) by a write-back (`own_claim`: the
/// claim of the run writing back) or by reconcile: remove its workspace now, or, while
/// another run holds a claim on the ticket, once no run does ([`remove_waiting`]).
pub(super) async fn ticket_finished(ctx: &Context, ticket_id: &str, own_claim: Option<&str>) {
    let except = own_claim.map(|role| (ticket_id, role));
    match claimed_tickets(ctx, except) {
        Ok(claimed) if claimed.contains(ticket_id) => ctx.finished.push(ticket_id),
        Ok(_) => remove_logged(ctx, ticket_id).await,
        Err(err) => {
            tracing::warn!(ticket = %ticket_id, %err, "cannot tell whether a run still uses the workspace; removing it later");
            ctx.finished.push(ticket_id);
        }
    }
}

/// Remove the workspaces of finished tickets that waited for their runs to end; those
/// still claimed wait on.
pub(super) async fn remove_waiting(ctx: &Context) {
    let waiting = ctx.finished.take();
    if waiting.is_empty() {
        return;
    }
    let claimed = match claimed_tickets(ctx, None) {
        Ok(claimed) => claimed,
        Err(err) => {
            tracing::warn!(%err, "cannot read the claims; finished tickets' workspaces wait");
            for id in &waiting {
                ctx.finished.push(id);
            }
            return;
        }
    };
    for id in waiting {
        if claimed.contains(&id) {
            ctx.finished.push(&id);
        } else {
            remove_logged(ctx, &id).await;
        }
    }
}

async fn remove_logged(ctx: &Context, ticket_id: &str) {
    if let Err(err) = crate::agent::remove_terminal(&ctx.config, ticket_id).await {
        tracing::warn!(ticket = %ticket_id, %err, "could not remove the workspace of a finished ticket");
    }
}

/// Go over every workspace and remove those of finished tickets.
async fn sweep(ctx: &Context, opts: SweepOptions) -> Result<Vec<PruneLine>, PipelineError> {
    let state_root = &ctx.config.state_root;
    let mut workspaces = crate::agent::list_workspaces(state_root).map_err(|e| {
        PipelineError::Io(format!(
            "cannot list workspaces under {}: {e}",
            state_root.display()
        ))
    })?;
    let cursor_path = state_root.join(CURSOR_FILE);
    if opts.max_reads.is_some() {
        // Start after the workspace the last sweep read last, and wrap around.
        if let Ok(cursor) = std::fs::read_to_string(&cursor_path) {
            let split = workspaces
                .iter()
                .position(|(dir, _)| {
                    dir.file_name()
                        .is_some_and(|n| n.to_string_lossy().as_ref() > cursor.as_str())
                })
                .unwrap_or(workspaces.len());
            workspaces.rotate_left(split);
        }
    }
    let claimed = claimed_tickets(ctx, None)?;
    let mut reads = 0usize;
    let mut unreachable: Option<String> = None;
    let mut last_read = None;
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
        if claimed.contains(&id) {
            line.reason = "a run holds a claim on the ticket".to_string();
            lines.push(line);
            continue;
        }
        if let Some(err) = &unreachable {
            line.reason = format!("not read: the tracker failed earlier ({err})");
            lines.push(line);
            continue;
        }
        if opts.max_reads.is_some_and(|max| reads >= max) {
            line.reason = format!(
                "not read this time (at most {} tickets per automatic sweep)",
                opts.max_reads.unwrap_or_default()
            );
            lines.push(line);
            continue;
        }
        reads += 1;
        last_read = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let finished = match ctx.tracker.get(&id).await {
            Ok(t) if t.closed || ctx.config.is_terminal(&t.status) => {
                Some(format!("ticket is {}", t.status))
            }
            Ok(t) => {
                line.reason = format!("ticket is {}", t.status);
                None
            }
            Err(TrackerError::NotFound(_)) if opts.gone => {
                Some("ticket no longer exists".to_string())
            }
            Err(TrackerError::NotFound(_)) => {
                line.reason = "the tracker does not find the ticket; kept (`sortie workspaces prune` removes it)".to_string();
                None
            }
            Err(err) => {
                line.reason = format!("tracker: {err}");
                if opts.max_reads.is_some() {
                    // Not worth a request per workspace against a tracker that is down.
                    unreachable = Some(err.to_string());
                }
                None
            }
        };
        if let Some(reason) = finished {
            line.reason = reason;
            if opts.dry_run {
                line.action = "would remove".to_string();
            } else {
                match crate::agent::remove_terminal(&ctx.config, &id).await {
                    Ok(Removal::Removed) => line.action = "removed".to_string(),
                    Ok(Removal::Absent) => line.reason = "already removed".to_string(),
                    Err(err) => {
                        line.action = "failed".to_string();
                        line.reason = format!("cannot remove: {err}");
                    }
                }
            }
        }
        lines.push(line);
    }
    if let (Some(_), Some(last)) = (opts.max_reads, last_read) {
        let _ = std::fs::write(&cursor_path, last);
    }
    Ok(lines)
}

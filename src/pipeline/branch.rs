//! The ticket's branch around a run (`workspace.git`): the worktree before it; after
//! it, what changed (into the block's artifacts and `evidence`), the stage's evidence
//! policy (`super::evidence`), the push and the pull request. Every side effect is named by the ticket id (its branch), so a
//! re-run or a replay finds what an earlier one did instead of doing it twice.

use std::path::Path;

use super::context::Context;
use crate::agent::baseline::WorkSeen;
use crate::agent::git::{self, BranchOwner, Worktree};
use crate::agent::AgentOutcome;
use crate::block::{Category, ChangeEvidence, Evidence, NextAction, OutcomeBlock};
use crate::config::Stage;
use crate::tracker::{PullRequestSpec, Ticket, TrackerError};

/// The reason code of a pull request that could not be opened.
pub const PULL_REQUEST_FAILED: &str = "git.pull_request_failed";

/// The ticket's worktree at `dir` (its workspace), fetched and on its branch; `None`
/// without `workspace.git`. `blocks` are the ticket's outcome blocks: a branch that
/// exists already is taken up only when it is this ticket's (`agent::git::BranchOwner`).
pub(super) async fn prepare(
    ctx: &Context,
    ticket: &Ticket,
    blocks: &[OutcomeBlock],
    dir: &Path,
) -> Result<Option<Worktree>, AgentOutcome> {
    let Some(git_cfg) = &ctx.config.workspace.git else {
        return Ok(None);
    };
    let board = crate::config::board_key(&ctx.config.tracker);
    let branch = crate::config::ticket_branch(git_cfg, &board, &ticket.id, &ticket.title);
    let branch = branch.map_err(|e| {
        AgentOutcome::failure(
            git::GIT_FAILED,
            Category::Permanent,
            NextAction::Escalate,
            format!("the branch name does not render: {e}"),
        )
    })?;
    let heads = blocks
        .iter()
        .filter_map(|b| match b {
            OutcomeBlock::Success(s) => s.artifacts.get("head").cloned(),
            OutcomeBlock::Failure(_) => None,
        })
        .collect();
    let created_at = ticket.created_at.to_rfc3339();
    let owner = BranchOwner::new(ctx.tracker.name(), &ticket.id, &created_at, heads);
    let timeout = ctx.config.agent.timeout;
    let state_root = &ctx.config.state_root;
    let worktree = git::prepare_worktree(state_root, git_cfg, dir, &branch, &owner, timeout)
        .await
        .map_err(|e| e.outcome())?;
    if worktree.created {
        tracing::info!(branch = %worktree.branch, dir = %dir.display(), "worktree created");
    }
    Ok(Some(worktree))
}

/// After a finished run: a success gets the branch's artifacts (branch, base, head,
/// commits, uncommitted changes) and the run's change and work as `evidence`, then the
/// stage's evidence policy, the push and the pull request apply; any of them may turn it into a
/// failure. A failure is returned as it is (the worktree keeps whatever the agent left).
pub(super) async fn conclude(
    ctx: &Context,
    ticket: &Ticket,
    stage: &Stage,
    worktree: &Worktree,
    outcome: AgentOutcome,
    evidence: &mut Evidence,
) -> AgentOutcome {
    let AgentOutcome::Success {
        summary,
        mut artifacts,
    } = outcome
    else {
        return outcome;
    };
    let Some(git_cfg) = &ctx.config.workspace.git else {
        return AgentOutcome::Success { summary, artifacts };
    };
    let timeout = ctx.config.agent.timeout;
    let changes = match git::run_changes(worktree, timeout).await {
        Ok(changes) => changes,
        Err(err) => return err.outcome(),
    };
    match git::diff_stat(worktree, timeout).await {
        Ok((files_changed, insertions, deletions)) => {
            evidence.change = Some(ChangeEvidence {
                base: worktree.start.clone(),
                head: changes.head.clone(),
                commits: changes.commit_count as u64,
                files_changed,
                insertions,
                deletions,
            });
        }
        Err(err) => tracing::warn!(%err, "could not read the run's diff figures"),
    }
    artifacts.insert("branch".to_string(), worktree.branch.clone());
    artifacts.insert("base".to_string(), worktree.base.clone());
    artifacts.insert("head".to_string(), changes.head.clone());
    artifacts.insert("commits".to_string(), changes.commit_count.to_string());
    if !changes.commits.is_empty() {
        let mut log = changes.commits.join("\n");
        if changes.commit_count > changes.commits.len() {
            log.push_str(&format!(
                "\n… and {} more",
                changes.commit_count - changes.commits.len()
            ));
        }
        artifacts.insert("commit_log".to_string(), log);
    }
    if changes.uncommitted_count > 0 {
        let mut list = changes.uncommitted.join("\n");
        if changes.uncommitted_count > changes.uncommitted.len() {
            list.push_str(&format!(
                "\n… and {} more",
                changes.uncommitted_count - changes.uncommitted.len()
            ));
        }
        artifacts.insert("uncommitted".to_string(), list);
    }
    let seen = if changes.is_empty() {
        WorkSeen::Absent
    } else {
        WorkSeen::Observed
    };
    let outcome = super::evidence::judge(
        stage,
        &seen,
        AgentOutcome::Success { summary, artifacts },
        evidence,
        || {
            format!(
                "the run succeeded but left no new commit on {} and no change in the worktree \
                 (head {})",
                worktree.branch, changes.head
            )
        },
    );
    let AgentOutcome::Success {
        summary,
        mut artifacts,
    } = outcome
    else {
        return outcome;
    };
    if git_cfg.push {
        if let Err(err) = git::push(worktree, timeout).await {
            return err.outcome();
        }
        ctx.faults.hit("after_push");
    }
    if let Some(pr) = &ctx.config.pull_request {
        if pr.after == stage.role {
            match open_pull_request(ctx, ticket, worktree, pr).await {
                Ok(url) => {
                    artifacts.insert("pull_request".to_string(), url);
                }
                Err(outcome) => return outcome,
            }
            ctx.faults.hit("after_pull_request");
        }
    }
    AgentOutcome::Success { summary, artifacts }
}

/// Open (or find) the ticket's pull request; its URL.
async fn open_pull_request(
    ctx: &Context,
    ticket: &Ticket,
    worktree: &Worktree,
    pr: &crate::config::PullRequestConfig,
) -> Result<String, AgentOutcome> {
    let title = crate::config::render_ticket_template(&pr.title, &ticket.id, &ticket.title)
        .map_err(|e| {
            AgentOutcome::failure(
                PULL_REQUEST_FAILED,
                Category::Permanent,
                NextAction::Escalate,
                format!("the pull request title does not render: {e}"),
            )
        })?;
    let mut body = format!("Work on ticket {}", ticket.id);
    if let Some(url) = &ticket.url {
        body.push_str(&format!(" ({url})"));
    }
    body.push_str(", opened by sortie.\n");
    let spec = PullRequestSpec {
        ticket_id: ticket.id.clone(),
        head: worktree.branch.clone(),
        base: worktree.base.clone(),
        title,
        body,
        draft: pr.draft,
    };
    let opened = match &ctx.forge {
        Some(forge) => forge.open_pull_request(&spec).await,
        None => Err(crate::tracker::not_a_code_host(
            ctx.tracker.name(),
            &spec.head,
        )),
    };
    match opened {
        Ok(found) => {
            tracing::info!(url = %found.url, reused = found.reused, "pull request");
            Ok(found.url)
        }
        Err(err) => {
            let (category, next) = if err.is_retryable() {
                (Category::Transient, NextAction::Retry)
            } else if matches!(
                err,
                TrackerError::Unsupported(_) | TrackerError::Unauthorized(_)
            ) {
                (Category::Policy, NextAction::Manual)
            } else {
                (Category::Permanent, NextAction::Escalate)
            };
            Err(AgentOutcome::failure(
                PULL_REQUEST_FAILED,
                category,
                next,
                format!("cannot open the pull request for {}: {err}", spec.head),
            ))
        }
    }
}

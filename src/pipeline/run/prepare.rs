//! Preparing a run, before its agent starts: the budget check, the in-progress move,
//! the workspace (and its git worktree and hooks), the prompt and the agent's plan.

use std::collections::BTreeMap;

use crate::agent::{
    AgentOutcome, CommentVars, FailureVars, PriorVars, PromptContext, QuestionVars, ReworkVars,
    RunPlan, StageVars, TicketVars,
};
use crate::block::{Category, NextAction, OutcomeBlock};
use crate::config::{Route, Stage};
use crate::ledger::Claim;
use crate::pipeline::context::Context;
use crate::pipeline::decide::question::{Continuation, ANSWERED_BY_TIMEOUT};
use crate::pipeline::history::TicketHistory;
use crate::pipeline::supervisor::Supervisor;
use crate::tracker::{Ticket, TrackerError};

/// How preparing a run ended.
pub(super) enum Prepared<'s> {
    /// The agent may start.
    Ready(Box<Ready<'s>>),
    /// The run ends before its agent with this outcome (written back like any other).
    Failed(AgentOutcome),
    /// A budget refuses the run before its agent starts: this outcome is written back
    /// like any other, but it is not a run (no run-history row, so `pipeline status`
    /// and `sortie stats` do not count it; issue #52).
    Refused(AgentOutcome),
    /// The run does not start, nothing is written, the claim goes back: why.
    NotStarted(String),
}

/// A run ready for its agent.
pub(super) struct Ready<'s> {
    /// Where sortie moved the ticket, so an interrupted run can move it back.
    pub moved_to: Option<&'s str>,
    /// The ticket's git worktree, with `workspace.git`.
    pub worktree: Option<crate::agent::git::Worktree>,
    /// The environment of the workspace hooks.
    pub hook_env: Vec<(String, String)>,
    /// What the agent runs, where, with which session.
    pub plan: RunPlan,
}

/// Prepare the run of `claim` on `ticket` for `stage`, taking `route` (recorded as
/// `route_label`): in order, the budget check, the in-progress move, the workspace, the
/// prompt and the agent's plan (resuming the last session of the same route).
#[allow(clippy::too_many_arguments)]
pub(super) async fn prepare<'s>(
    ctx: &Context,
    supervisor: &Supervisor,
    ticket: &Ticket,
    stage: &'s Stage,
    claim: &Claim,
    history: &TicketHistory,
    route: Option<(usize, &Route)>,
    route_label: &Option<String>,
    continuation: Option<&Continuation>,
) -> Prepared<'s> {
    let limits = match super::budget::check(ctx, stage, &ticket.id) {
        super::budget::BudgetCheck::Run(limits) => limits,
        super::budget::BudgetCheck::TicketOver(over) => {
            let outcome = AgentOutcome::failure(
                "budget.exceeded",
                Category::Policy,
                NextAction::Escalate,
                over,
            );
            return Prepared::Refused(outcome);
        }
        super::budget::BudgetCheck::DayOver(over) => return Prepared::NotStarted(over),
    };

    // Where sortie moved the ticket, so an interrupted run can move it back.
    let mut moved_to: Option<&str> = None;
    if let Some(in_progress) = &stage.in_progress_status {
        if ticket.status == stage.claim_status {
            match ctx
                .tracker
                .transition(&ticket.id, &stage.claim_status, in_progress)
                .await
            {
                Ok(()) => {
                    ctx.faults.hit("after_in_progress");
                    moved_to = Some(in_progress);
                }
                Err(refused @ TrackerError::TransitionRefused { .. }) => {
                    // The workflow will not let the ticket start: an observation worth a
                    // failure block (and a hold), not a silent retry every tick.
                    let outcome = AgentOutcome::failure(
                        "transition.refused",
                        Category::Policy,
                        NextAction::Manual,
                        refused.to_string(),
                    );
                    return Prepared::Failed(outcome);
                }
                Err(err) => {
                    return Prepared::NotStarted(match err {
                        TrackerError::Conflict { current, .. } => {
                            format!("moved by a person to {current} before the run")
                        }
                        other => format!("could not set {in_progress}: {other}"),
                    });
                }
            }
        }
    }

    let workspace = crate::agent::workspace_dir(&ctx.config.state_root, &ticket.id);
    let hook_env = vec![
        ("SORTIE_TICKET_ID".to_string(), env_value(&ticket.id)),
        ("SORTIE_ROLE".to_string(), stage.role.clone()),
        (
            "SORTIE_STAGE_ATTEMPT".to_string(),
            claim.stage_attempt.to_string(),
        ),
        (
            "SORTIE_WORKSPACE".to_string(),
            workspace.display().to_string(),
        ),
    ];
    // The role file's front matter overrides the config's agent settings, and a route's
    // role file and `agent:` override those.
    let agent = ctx
        .templates
        .agent_for(&ctx.config, stage, route.map(|(_, r)| r));
    let mut sandbox = agent.bubblewrap.as_ref().map(|jail| {
        let env = |name: &str| std::env::var(name).ok();
        crate::agent::sandbox::SandboxPlan::new(
            jail,
            &agent,
            &ctx.config.state_root,
            &ticket.id,
            &claim.run_id,
            &env,
        )
    });
    let worktree = match prepare_workspace(ctx, ticket, history, &hook_env, sandbox.as_mut()).await
    {
        Ok(worktree) => worktree,
        Err(outcome) => return Prepared::Failed(outcome),
    };

    let run_dir = crate::agent::run_dir(&ctx.config.state_root, &claim.run_id);
    let question = continuation.and_then(question_vars);
    let mut context = prompt_context(
        ticket,
        stage,
        claim.stage_attempt,
        history,
        reaction_payload(ctx, ticket, stage, history),
        review_vars(ctx, stage, worktree.as_ref()).await,
    );
    context.question = question.clone();
    let prompt = match ctx
        .templates
        .render_for(&stage.role, route.map(|(_, r)| r), &context)
    {
        // A template that says nothing of the question still hands the answer over.
        Ok(prompt) => match &question {
            Some(q) if !prompt.contains(&q.id) => format!("{}{}", prompt.trim_end(), q.paragraph()),
            _ => prompt,
        },
        Err(err) => {
            let outcome = AgentOutcome::failure(
                "role.template_error",
                Category::Permanent,
                NextAction::Escalate,
                err.to_string(),
            );
            return Prepared::Failed(outcome);
        }
    };
    let mut plan = RunPlan::for_agent(&agent, prompt, workspace, run_dir);
    plan.env_remove = ctx.config.secret_env_names();
    // The daemon shows the agent's last event, turns and usage while it runs.
    plan.stream.progress = supervisor.progress(&claim.run_id);
    // Resume the agent's last session of this ticket and role (issue #19).
    // A session of another route ran another agent setup: it is not resumed.
    // A fresh reviewer (`review.fresh_session`, issue #33) resumes nothing: it reads the
    // ticket and its blocks, never a transcript of an earlier attempt.
    // A sandbox with an ephemeral home removed the session's files with the last run's
    // home: starting fresh saves a start of the CLI that could only fail.
    let fresh = stage.review.as_ref().is_some_and(|r| r.fresh_session)
        || sandbox.as_ref().is_some_and(|s| s.remove_home);
    if let Some(prev) = ctx
        .ledger
        .last_session(&claim.key)
        .ok()
        .flatten()
        .filter(|_| !fresh)
    {
        if let Some(session) = prev
            .session_id
            .as_ref()
            .filter(|_| prev.route == *route_label)
        {
            let prev_dir = crate::agent::run_dir(&ctx.config.state_root, &prev.run_id);
            let earlier =
                crate::agent::read_session_record(&prev_dir).and_then(|r| r.reported_usage);
            plan.resume_session(&agent, session, earlier);
        }
    }
    plan.sandbox = sandbox;
    // The run is held to its limits while it runs, its tokens priced for its model.
    let mut limits = limits;
    limits.model = crate::config::model_in_argv(plan.preset, &plan.command, &plan.env);
    if !limits.is_empty() {
        let unchecked = limits.unchecked_dollar_limits();
        if !unchecked.is_empty() {
            tracing::warn!(
                model = limits.model.as_deref().unwrap_or("unknown"),
                limits = %unchecked.join(", "),
                "the run's cost is unknown until its agent reports one (no price for its model in `prices`): these dollar limits cannot be checked for it"
            );
        }
        plan.stream.budget = Some(crate::budget::BudgetWatch::new(limits));
    }
    Prepared::Ready(Box::new(Ready {
        moved_to,
        worktree,
        hook_env,
        plan,
    }))
}

/// Create the ticket's workspace if needed (with `workspace.git`, its worktree on the
/// ticket's branch) and run the `after_create` and `before_run` hooks. A failed
/// `after_create` removes the half-made workspace so the next attempt starts clean. The
/// workspace is checked before the hooks run in it and again before the agent does
/// (`workspace.unsafe`); a hook failure is `workspace.hook_failed`.
async fn prepare_workspace(
    ctx: &Context,
    ticket: &Ticket,
    history: &TicketHistory,
    env: &[(String, String)],
    sandbox: Option<&mut crate::agent::sandbox::SandboxPlan>,
) -> Result<Option<crate::agent::git::Worktree>, AgentOutcome> {
    let hook_failed = |detail: String| {
        AgentOutcome::failure(
            "workspace.hook_failed",
            Category::Transient,
            NextAction::Retry,
            detail,
        )
    };
    let state_root = &ctx.config.state_root;
    let dir = crate::agent::workspace_dir(state_root, &ticket.id);
    let hooks = &ctx.config.workspace.hooks;
    let timeout = ctx.config.workspace.hook_timeout;
    let created = crate::agent::ensure_workspace(state_root, &ticket.id)
        .map_err(|e| hook_failed(format!("cannot create workspace {}: {e}", dir.display())))?;
    crate::agent::check_workspace(state_root, &dir).map_err(|e| e.outcome())?;
    let worktree = match crate::pipeline::branch::prepare(ctx, ticket, history.blocks(), &dir).await
    {
        Ok(worktree) => worktree,
        Err(outcome) => {
            if created {
                // Empty still: the next attempt creates it (and runs after_create) again.
                let _ = crate::agent::remove_workspace(state_root, &dir);
            }
            return Err(outcome);
        }
    };
    let created = created || worktree.as_ref().is_some_and(|w| w.created);
    if created {
        if let Some(hook) = &hooks.after_create {
            if let Err(err) = crate::agent::run_hook(hook, &dir, env, timeout, None).await {
                let _ = crate::agent::remove_workspace(state_root, &dir);
                return Err(hook_failed(format!("after_create hook failed: {err}")));
            }
        }
    }
    // From here on the worktree is the sandbox's (its HEAD detached): the `before_run`
    // hook runs in the sandbox, as the agent will.
    let sandbox = match (sandbox, &worktree) {
        (Some(sandbox), Some(worktree)) => {
            sandbox.git = Some(
                crate::agent::git::enter_sandbox(worktree, ctx.config.agent.timeout)
                    .await
                    .map_err(|e| e.outcome())?,
            );
            Some(&*sandbox)
        }
        (sandbox, _) => sandbox.map(|s| &*s),
    };
    if let Some(hook) = &hooks.before_run {
        crate::agent::run_hook(hook, &dir, env, timeout, sandbox)
            .await
            .map_err(|err| hook_failed(format!("before_run hook failed: {err}")))?;
    }
    crate::agent::check_workspace(state_root, &dir).map_err(|e| e.outcome())?;
    Ok(worktree)
}

/// What the role template is rendered with: the ticket, the stage, the prior roles'
/// summaries, the last failure, returned work and people's comments.
/// The payload of the reaction a run of `stage` answers, from the ledger (the block on
/// the ticket names it by its idempotency key, the reaction's fingerprint).
fn reaction_payload(
    ctx: &Context,
    ticket: &Ticket,
    stage: &Stage,
    history: &TicketHistory,
) -> Option<serde_json::Value> {
    let block = history.pending_reaction(&stage.role, &stage.claim_status)?;
    match ctx.ledger.reactions(ctx.tracker_name(), Some(&ticket.id)) {
        Ok(found) => found
            .into_iter()
            .find(|r| r.fingerprint == block.idempotency_key)
            .map(|r| r.payload),
        Err(err) => {
            tracing::warn!(%err, ticket = %ticket.id, "cannot read the reaction this run answers");
            None
        }
    }
}

fn prompt_context(
    ticket: &Ticket,
    stage: &Stage,
    attempt: u32,
    history: &TicketHistory,
    reaction: Option<serde_json::Value>,
    review: Option<crate::agent::ReviewVars>,
) -> PromptContext {
    let mut prior = BTreeMap::new();
    for block in history.blocks() {
        if let OutcomeBlock::Success(s) = block {
            if s.role != stage.role {
                prior.insert(
                    s.role.clone(),
                    PriorVars {
                        summary: s.summary.clone(),
                        artifacts: s.artifacts.clone(),
                        evidence: s.evidence.clone(),
                    },
                );
            }
        }
    }
    PromptContext {
        ticket: TicketVars::of(ticket),
        stage: StageVars {
            role: stage.role.clone(),
            claim_status: stage.claim_status.clone(),
            in_progress_status: stage.in_progress_status.clone(),
            success_status: stage.success_status.clone(),
            failure_status: stage.failure_status.clone(),
        },
        attempt,
        prior,
        last_failure: history.last_failure(&stage.role).map(|f| FailureVars {
            attempt: f.stage_attempt,
            reason_code: f.reason_code.clone(),
            detail: f.detail.clone(),
        }),
        rework: history
            .returned_work(&stage.role, &stage.claim_status)
            .map(|(f, count)| ReworkVars {
                count,
                from_role: f.role.clone(),
                failure: FailureVars {
                    attempt: f.stage_attempt,
                    reason_code: f.reason_code.clone(),
                    detail: f.detail.clone(),
                },
            }),
        comments: history
            .human_comments()
            .iter()
            .map(|c| CommentVars {
                author: c.author.clone(),
                created_at: c.created_at.to_rfc3339(),
                body: c.body.clone(),
            })
            .collect(),
        reaction,
        review,
        question: None,
    }
}

/// The `question` value of a run that goes on from an answered question.
fn question_vars(continuation: &Continuation) -> Option<QuestionVars> {
    let (answer, by) = continuation.answer.clone()?;
    let q = &continuation.question;
    Some(QuestionVars {
        id: q.question_id.clone(),
        question: q.question.clone(),
        options: q.options.clone(),
        default: q.default.clone(),
        context: q.context.clone(),
        answer,
        timed_out: by == ANSWERED_BY_TIMEOUT,
        answered_by: by,
    })
}

/// Longest ticket-derived value put in the agent's environment: the kernel refuses a
/// single variable over 128 KiB, and the full text is in the prompt anyway.
const MAX_ENV_VALUE: usize = 4096;

/// Ticket text as an environment value: no NUL (which cannot be passed), bounded.
fn env_value(text: &str) -> String {
    let mut value: String = text.chars().filter(|c| *c != '\0').collect();
    if value.len() > MAX_ENV_VALUE {
        let mut end = MAX_ENV_VALUE;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
    value
}

/// The `SORTIE_*` environment of the agent.
pub(super) fn agent_vars(
    ticket: &Ticket,
    stage: &Stage,
    claim: &Claim,
    plan: &RunPlan,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("SORTIE_TICKET_ID".to_string(), env_value(&ticket.id)),
        ("SORTIE_TICKET_TITLE".to_string(), env_value(&ticket.title)),
        (
            "SORTIE_TICKET_STATUS".to_string(),
            env_value(&ticket.status),
        ),
        (
            "SORTIE_TICKET_LABELS".to_string(),
            env_value(&ticket.labels.join(",")),
        ),
        ("SORTIE_ROLE".to_string(), stage.role.clone()),
        ("SORTIE_STAGE".to_string(), stage.claim_status.clone()),
        (
            "SORTIE_STAGE_ATTEMPT".to_string(),
            claim.stage_attempt.to_string(),
        ),
        ("SORTIE_RUN_ID".to_string(), claim.run_id.clone()),
        (
            "SORTIE_WORKSPACE".to_string(),
            plan.workspace.display().to_string(),
        ),
    ])
}

/// Characters of a reviewed diff put into the prompt, at most.
const REVIEW_DIFF_CHARS: usize = 30_000;

/// The change a stage with `review:` reviews: the branch from where it left its base to
/// its head, as `git diff` shows it, bounded; none without `review:` or `workspace.git`.
async fn review_vars(
    ctx: &Context,
    stage: &Stage,
    worktree: Option<&crate::agent::git::Worktree>,
) -> Option<crate::agent::ReviewVars> {
    stage.review.as_ref()?;
    let worktree = worktree?;
    let timeout = ctx.config.agent.timeout;
    let (diff_stat, diff) = crate::agent::git::branch_diff(worktree, timeout).await?;
    let count = diff.chars().count();
    let diff = if count > REVIEW_DIFF_CHARS {
        let kept: String = diff.chars().take(REVIEW_DIFF_CHARS).collect();
        format!(
            "{kept}\n[... {} more characters of the diff cut; run `git diff` in the workspace for the rest ...]",
            count - REVIEW_DIFF_CHARS
        )
    } else {
        diff
    };
    Some(crate::agent::ReviewVars { diff_stat, diff })
}

//! Apply one dispatch: in-progress write, agent with a renewed lease and a watched
//! cancel flag, outcome decision, outbox, write-back, release.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::{run_ref, Context};
use super::decide::outcome::{decide, RunFacts};
use super::history::TicketHistory;
use super::lease::{next_backoff, retry_within_lease, LeaseEnd, FIRST_BACKOFF};
use super::report::RunLine;
use super::supervisor::{LiveRun, Supervisor};
use super::writeback::{self, WritebackResult};
use crate::agent::{
    run_agent, AgentOutcome, AgentSpec, CancelReason, CommentVars, FailureVars, PriorVars,
    PromptContext, ReworkVars, RunEnd, RunPlan, StageVars, TicketVars,
};
use crate::block::{render_comment, Category, NextAction, OutcomeBlock};
use crate::config::Stage;
use crate::hooks::Event;
use crate::ledger::{
    Claim, OutboxEntry, OutboxPut, OutboxState, RenewOutcome, RunPhase, RunRecord, RunUsage,
};
use crate::tracker::{Ticket, TrackerError};

/// How often a run looks at its claim's cancel flag: a person closing the ticket stops
/// the agent within this (plus the next tick that notices the move).
pub const CANCEL_POLL: Duration = Duration::from_secs(2);

/// Run the agent for a claim this process holds, and write the result back.
pub(super) async fn run_claimed(
    ctx: Arc<Context>,
    supervisor: Arc<Supervisor>,
    ticket: Ticket,
    stage_idx: usize,
    claim: Claim,
    history: TicketHistory,
) -> RunLine {
    let stage = ctx.config.stages[stage_idx].clone();
    // Every line of the run carries these; `session_id` once the agent reports it
    // (recorded by the agent runner, `agent::process`).
    let span = tracing::info_span!("run", ticket = %ticket.id, role = %stage.role, attempt = claim.stage_attempt, run_id = %claim.run_id, session_id = tracing::field::Empty);
    supervisor.started(LiveRun {
        ticket: ticket.id.clone(),
        role: stage.role.clone(),
        attempt: claim.stage_attempt,
        run_id: claim.run_id.clone(),
        started_at: ctx.clock.now(),
        log_path: crate::agent::run_dir(&ctx.config.state_root, &claim.run_id)
            .join("agent.log")
            .display()
            .to_string(),
        progress: Default::default(),
    });
    let run_id = claim.run_id.clone();
    tracing::info!(parent: &span, status = %ticket.status, "run started");
    let line = run_stage(&ctx, &supervisor, ticket, stage, claim, history)
        .instrument(span.clone())
        .await;
    tracing::info!(parent: &span, outcome = %line.outcome, reason_code = %line.reason_code.as_deref().unwrap_or("-"), to_status = %line.to_status.as_deref().unwrap_or("-"), writeback = %line.writeback.as_deref().unwrap_or("-"), "run ended");
    supervisor.ended(&run_id);
    line
}

async fn run_stage(
    ctx: &Arc<Context>,
    supervisor: &Supervisor,
    ticket: Ticket,
    stage: Stage,
    claim: Claim,
    history: TicketHistory,
) -> RunLine {
    let mut line = RunLine {
        ticket: ticket.id.clone(),
        role: stage.role.clone(),
        attempt: claim.stage_attempt,
        outcome: "not_started".to_string(),
        reason_code: None,
        from_status: ticket.status.clone(),
        to_status: None,
        writeback: None,
        note: None,
        log_path: None,
        duration_seconds: None,
        route: None,
        cancel_reason: None,
        ledger_error: None,
    };
    ctx.faults.hit("after_claim");
    // The route is chosen from the ticket this run starts with (a retry chooses again).
    let route = super::decide::route::choose(&stage, &ticket, &ctx.identity);
    line.route = route.map(|(i, r)| r.label(i));
    let lease = Arc::new(LeaseEnd::new(claim.lease_expires_at));
    let run = Finish {
        ctx,
        ticket: &ticket,
        stage: &stage,
        claim: &claim,
        history: &history,
        route: line.route.clone(),
        lease: &lease,
        // The run's start, for its duration in run history: from here, whatever ends it.
        begun_at: ctx.clock.now(),
    };

    if let Some(over) = over_budget(ctx, &ticket.id) {
        let outcome = AgentOutcome::failure(
            "budget.exceeded",
            Category::Policy,
            NextAction::Escalate,
            over,
        );
        return run.finish(outcome, None, run.begun_at, line).await;
    }

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
                    return run.finish(outcome, None, run.begun_at, line).await;
                }
                Err(err) => {
                    line.note = Some(match err {
                        TrackerError::Conflict { current, .. } => {
                            format!("moved by a person to {current} before the run")
                        }
                        other => format!("could not set {in_progress}: {other}"),
                    });
                    release(ctx, &claim);
                    return line;
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
    let worktree = match prepare_workspace(ctx, &ticket, &hook_env).await {
        Ok(worktree) => worktree,
        Err(outcome) => return run.finish(outcome, None, run.begun_at, line).await,
    };

    let run_dir = crate::agent::run_dir(&ctx.config.state_root, &claim.run_id);
    let prompt = match ctx.templates.render_for(
        &stage.role,
        route.map(|(_, r)| r),
        &prompt_context(&ticket, &stage, claim.stage_attempt, &history),
    ) {
        Ok(prompt) => prompt,
        Err(err) => {
            let outcome = AgentOutcome::failure(
                "role.template_error",
                Category::Permanent,
                NextAction::Escalate,
                err.to_string(),
            );
            return run.finish(outcome, None, run.begun_at, line).await;
        }
    };
    // The role file's front matter overrides the config's agent settings, and a route's
    // role file and `agent:` override those.
    let agent = ctx
        .templates
        .agent_for(&ctx.config, &stage, route.map(|(_, r)| r));
    let mut plan = RunPlan::for_agent(&agent, prompt, workspace, run_dir);
    plan.env_remove = ctx.config.secret_env_names();
    // The daemon shows the agent's last event, turns and usage while it runs.
    plan.stream.progress = supervisor.progress(&claim.run_id);
    // Resume the agent's last session of this ticket and role (issue #19).
    // A session of another route ran another agent setup: it is not resumed.
    if let Ok(Some(prev)) = ctx.ledger.last_session(&claim.key) {
        if let Some(session) = prev.session_id.as_ref().filter(|_| prev.route == run.route) {
            let prev_dir = crate::agent::run_dir(&ctx.config.state_root, &prev.run_id);
            let earlier =
                crate::agent::read_session_record(&prev_dir).and_then(|r| r.reported_usage);
            plan.resume_session(&agent, session, earlier);
        }
    }
    let vars = agent_vars(&ticket, &stage, &claim, &plan);
    let started_at = ctx.clock.now();
    let log_path = plan.run_dir.join("agent.log");
    record_run(
        ctx,
        &claim,
        run.route.as_deref(),
        Some(&ticket.title),
        RunPhase::Running,
        None,
        None,
        Some(&log_path),
        started_at,
        None,
    );

    // A child of the supervisor's token: a shutdown or an operator's signal stops it.
    let cancel = supervisor.run_token();
    let cancel_reason = Arc::new(Mutex::new(None));
    let watch = tokio::spawn(
        watch_claim(
            ctx.clone(),
            claim.clone(),
            lease.clone(),
            cancel.clone(),
            cancel_reason.clone(),
        )
        .in_current_span(),
    );
    let ledger = ctx.ledger.clone();
    let (key, claimer) = (claim.key.clone(), claim.claimer_id.clone());
    let faults = ctx.faults.clone();
    ctx.events.notify(Event::run_started(&run_ref(&claim)));
    let end = run_agent(AgentSpec { plan: &plan, vars }, cancel, move |pid| {
        if let Err(err) = ledger.set_agent_pid(&key, &claimer, Some(pid)) {
            tracing::warn!(%err, "could not record agent pid");
        }
        faults.hit("mid_agent");
    })
    .await;
    watch.abort();
    let _ = ctx
        .ledger
        .set_agent_pid(&claim.key, &claim.claimer_id, None);
    if let Some(hook) = &ctx.config.workspace.hooks.after_run {
        if let Err(err) = crate::agent::run_hook(
            hook,
            &plan.workspace,
            &hook_env,
            ctx.config.workspace.hook_timeout,
        )
        .await
        {
            tracing::warn!(%err, "after_run workspace hook failed");
        }
    }

    let (usage, session) = match &end {
        RunEnd::Cancelled {
            usage, session_id, ..
        } => (*usage, session_id.clone()),
        RunEnd::Finished(report) => (report.usage, report.session_id.clone()),
    };
    record_usage_and_session(ctx, &claim, usage, session);
    match end {
        RunEnd::Cancelled { log_path, .. } => {
            let reason = cancel_reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(if supervisor.is_cancelled() {
                    CancelReason::Shutdown
                } else {
                    CancelReason::TicketLeftStage
                });
            line.outcome = "cancelled".to_string();
            line.cancel_reason = Some(reason);
            line.log_path = Some(log_path.display().to_string());
            line.duration_seconds = Some(seconds_between(started_at, ctx.clock.now()));
            line.note = Some(match reason {
                CancelReason::LeaseLost => "lease lost; nothing written".to_string(),
                CancelReason::TicketLeftStage => match moved_to {
                    Some(in_progress) => {
                        withdrawn_note(ctx, &ticket.id, in_progress, &stage, &mut line).await
                    }
                    None => cancelled_note(ctx, &ticket.id).await,
                },
                CancelReason::Shutdown => {
                    interrupted_note(ctx, &ticket, &stage, moved_to, &mut line).await
                }
            });
            record_run(
                ctx,
                &claim,
                run.route.as_deref(),
                None,
                RunPhase::Cancelled,
                Some("cancelled"),
                None,
                Some(&log_path),
                started_at,
                Some(ctx.clock.now()),
            );
            let why = match reason {
                CancelReason::LeaseLost => "lease_lost",
                CancelReason::TicketLeftStage => "ticket_left_stage",
                CancelReason::Shutdown => "shutdown",
            };
            ctx.events
                .notify(Event::run_cancelled(&run_ref(&claim), why));
            if reason != CancelReason::LeaseLost {
                release(ctx, &claim);
            }
            line
        }
        RunEnd::Finished(mut report) => {
            line.log_path = Some(report.log_path.display().to_string());
            if let Some(worktree) = &worktree {
                report.outcome =
                    super::branch::conclude(ctx, &ticket, &stage, worktree, report.outcome).await;
            }
            let reason_code = match &report.outcome {
                AgentOutcome::Failure { reason_code, .. } => Some(reason_code.as_str()),
                AgentOutcome::Success { .. } => None,
            };
            ctx.events.notify(Event::run_finished(
                &run_ref(&claim),
                report.outcome.is_success(),
                reason_code,
            ));
            run.finish(
                report.outcome,
                Some(report.duration.as_secs_f64()),
                started_at,
                line,
            )
            .await
        }
    }
}

/// Record what the run consumed (also when it failed or was cancelled) and the agent
/// session it ended with, which the next attempt of the same ticket and role resumes.
fn record_usage_and_session(
    ctx: &Context,
    claim: &Claim,
    usage: Option<crate::agent::Usage>,
    session: Option<String>,
) {
    if let Some(usage) = usage {
        let record = RunUsage {
            run_id: claim.run_id.clone(),
            key: claim.key.clone(),
            tokens_in: usage.input_tokens,
            tokens_out: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cost_usd: usage.cost_usd,
            recorded_at: ctx.clock.now(),
        };
        if let Err(err) = ctx.ledger.record_usage(&record) {
            tracing::warn!(%err, "could not record the run's usage");
        }
    }
    // The run's row exists (recorded as running); the upsert keeps a session id once set.
    if let (Some(session), Ok(Some(mut run))) = (session, ctx.ledger.run(&claim.run_id)) {
        run.session_id = Some(session);
        if let Err(err) = ctx.ledger.record_run(&run) {
            tracing::warn!(%err, "could not record the agent's session id");
        }
    }
}

/// Seconds from `start` to `end`, never negative.
fn seconds_between(
    start: chrono::DateTime<chrono::Utc>,
    end: chrono::DateTime<chrono::Utc>,
) -> f64 {
    ((end - start).num_milliseconds().max(0) as f64) / 1000.0
}

/// The note of a run cancelled because its ticket left the stage: where it is now.
async fn cancelled_note(ctx: &Context, id: &str) -> String {
    match ctx.tracker.get(id).await {
        Ok(t) if t.closed => format!("ticket closed ({}); nothing written", t.status),
        Ok(t) => format!("ticket is now {}; nothing written", t.status),
        Err(TrackerError::NotFound(_)) => "ticket no longer exists; nothing written".to_string(),
        Err(_) => "ticket left the stage; nothing written".to_string(),
    }
}

/// A run cancelled while its ticket may still be in the in-progress status sortie moved
/// it to (a person withdrew it by removing the opt-in label, not by moving it): the
/// ticket goes back to the claim status. A ticket a person moved stays where it is.
async fn withdrawn_note(
    ctx: &Context,
    id: &str,
    in_progress: &str,
    stage: &Stage,
    line: &mut RunLine,
) -> String {
    match ctx
        .tracker
        .transition(id, in_progress, &stage.claim_status)
        .await
    {
        Ok(()) => {
            line.from_status = in_progress.to_string();
            line.to_status = Some(stage.claim_status.clone());
            format!(
                "withdrawn; nothing written, ticket back to {}",
                stage.claim_status
            )
        }
        Err(_) => cancelled_note(ctx, id).await,
    }
}

/// An operator stopped the run (a signal, a shutdown past its grace): nothing is written
/// on the ticket, and a ticket sortie moved to the in-progress status goes back to the
/// claim status, so it runs again from where it was.
async fn interrupted_note(
    ctx: &Context,
    ticket: &Ticket,
    stage: &Stage,
    moved_to: Option<&str>,
    line: &mut RunLine,
) -> String {
    let Some(in_progress) = moved_to.or(stage
        .in_progress_status
        .as_deref()
        .filter(|s| *s == ticket.status))
    else {
        return "interrupted; nothing written".to_string();
    };
    match ctx
        .tracker
        .transition(&ticket.id, in_progress, &stage.claim_status)
        .await
    {
        Ok(()) => {
            line.from_status = in_progress.to_string();
            line.to_status = Some(stage.claim_status.clone());
            format!(
                "interrupted; nothing written, ticket back to {}",
                stage.claim_status
            )
        }
        Err(TrackerError::Conflict { current, .. }) => {
            format!("interrupted; nothing written (a person moved the ticket to {current})")
        }
        Err(err) => {
            format!("interrupted; nothing written, but the ticket stays {in_progress}: {err}")
        }
    }
}

/// Create the ticket's workspace if needed (with `workspace.git`, its worktree on the
/// ticket's branch) and run the `after_create` and `before_run` hooks. A failed
/// `after_create` removes the half-made workspace so the next attempt starts clean. The
/// workspace is checked before the hooks run in it and again before the agent does
/// (`workspace.unsafe`); a hook failure is `workspace.hook_failed`.
async fn prepare_workspace(
    ctx: &Context,
    ticket: &Ticket,
    env: &[(String, String)],
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
    let worktree = match super::branch::prepare(ctx, ticket, &dir).await {
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
            if let Err(err) = crate::agent::run_hook(hook, &dir, env, timeout).await {
                let _ = crate::agent::remove_workspace(state_root, &dir);
                return Err(hook_failed(format!("after_create hook failed: {err}")));
            }
        }
    }
    if let Some(hook) = &hooks.before_run {
        crate::agent::run_hook(hook, &dir, env, timeout)
            .await
            .map_err(|err| hook_failed(format!("before_run hook failed: {err}")))?;
    }
    crate::agent::check_workspace(state_root, &dir).map_err(|e| e.outcome())?;
    Ok(worktree)
}

/// Why the ticket may not run again under `budgets:`, if it may not.
fn over_budget(ctx: &Context, ticket_id: &str) -> Option<String> {
    let budgets = &ctx.config.budgets;
    if budgets.max_cost_usd_per_ticket.is_none()
        && budgets.max_tokens_per_ticket.is_none()
        && budgets.max_runs_per_ticket.is_none()
    {
        return None;
    }
    let used = match ctx.ledger.ticket_usage(ctx.tracker_name(), ticket_id) {
        Ok(used) => used,
        Err(err) => {
            tracing::warn!(%err, "cannot read the ticket's usage; running without a budget check");
            return None;
        }
    };
    if let Some(max) = budgets.max_runs_per_ticket {
        if used.runs >= max {
            return Some(format!(
                "the ticket has had {} runs; budgets.max_runs_per_ticket is {max}",
                used.runs
            ));
        }
    }
    if let Some(max) = budgets.max_tokens_per_ticket {
        let tokens = used.total_tokens();
        if tokens >= max {
            return Some(format!(
                "the ticket has used {tokens} tokens; budgets.max_tokens_per_ticket is {max}"
            ));
        }
    }
    if let Some(max) = budgets.max_cost_usd_per_ticket {
        if used.cost_usd >= max {
            return Some(format!(
                "the ticket has cost ${:.2}; budgets.max_cost_usd_per_ticket is ${max:.2}",
                used.cost_usd
            ));
        }
    }
    None
}

/// What ending a run needs: the run's facts and where to write.
struct Finish<'a> {
    ctx: &'a Arc<Context>,
    ticket: &'a Ticket,
    stage: &'a Stage,
    claim: &'a Claim,
    history: &'a TicketHistory,
    /// The route the run takes, as recorded (name or index).
    route: Option<String>,
    /// The lease as last renewed: storing the outcome is retried until it runs out.
    lease: &'a LeaseEnd,
    begun_at: chrono::DateTime<chrono::Utc>,
}

impl Finish<'_> {
    /// Decide what `outcome` becomes, store it in the outbox, write it back, release.
    async fn finish(
        &self,
        outcome: AgentOutcome,
        duration: Option<f64>,
        started_at: chrono::DateTime<chrono::Utc>,
        mut line: RunLine,
    ) -> RunLine {
        let (ctx, stage, claim) = (self.ctx, self.stage, self.claim);
        line.duration_seconds =
            Some(duration.unwrap_or_else(|| seconds_between(started_at, ctx.clock.now())));
        // A run that lost its lease never writes back: someone else owns the ticket now.
        // An unreachable ledger is retried while the lease lasts (issue #20).
        let (renewed, mut failed_tries) = retry_within_lease(
            ctx,
            self.lease,
            "renewing the lease to store the outcome",
            || {
                ctx.ledger.renew(
                    &claim.key,
                    &claim.claimer_id,
                    ctx.config.claim_ttl,
                    ctx.clock.now(),
                )
            },
        )
        .await;
        match renewed {
            Ok(RenewOutcome::Renewed {
                lease_expires_at, ..
            }) => self.lease.renewed(lease_expires_at),
            Ok(RenewOutcome::Lost) => {
                line.outcome = "cancelled".to_string();
                line.note = Some("lease lost before write-back; nothing written".to_string());
                return line;
            }
            Err(err) => {
                line.outcome = "cancelled".to_string();
                not_stored(&mut line, &err);
                return line;
            }
        }
        let now = ctx.clock.now();
        let facts = RunFacts {
            tracker: ctx.tracker_name(),
            ticket_id: &self.ticket.id,
            stage,
            attempt: claim.stage_attempt,
            run_id: &claim.run_id,
            duration_seconds: duration,
            route: self.route.as_deref(),
            failures_before: self
                .history
                .failures_this_round(&stage.role, stage.rework_target()),
            rework_rounds: stage
                .rework_target()
                .map(|to| {
                    self.history
                        .sent_back(&stage.role, to)
                        .into_iter()
                        .map(|f| (f.reason_code.clone(), f.detail.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let decision = decide(&ctx.config.retry, &facts, &outcome);
        line.outcome = decision.block.kind().to_string();
        if let OutcomeBlock::Failure(f) = &decision.block {
            line.reason_code = Some(f.reason_code.clone());
        }
        if let crate::ledger::FollowUp::Retry { after_seconds, .. } = &decision.follow_up {
            line.note = Some(format!(
                "attempt {} in {after_seconds}s",
                claim.stage_attempt + 1
            ));
        }
        let entry = OutboxEntry {
            idempotency_key: decision.block.idempotency_key().to_string(),
            key: claim.key.clone(),
            stage: stage.claim_status.clone(),
            stage_attempt: claim.stage_attempt,
            run_id: claim.run_id.clone(),
            outcome: decision.block.kind().to_string(),
            from_status: stage.claim_status.clone(),
            to_status: decision.block.to_status().to_string(),
            comment_body: render_comment(&decision.prose, &decision.block),
            state: OutboxState::Pending,
            write_attempts: 0,
            next_attempt_at: now,
            last_error: None,
            created_at: now,
            follow_up: decision.follow_up,
        };
        // Fenced: stored only while this process still holds the claim. A retry after
        // an answer lost on the way back finds the entry there (`Exists`).
        let (put, failed_puts) = retry_within_lease(ctx, self.lease, "storing the outcome", || {
            ctx.ledger
                .outbox_put(&entry, &claim.claimer_id, ctx.config.claim_ttl, now)
        })
        .await;
        failed_tries += failed_puts;
        match put {
            Ok(OutboxPut::Stored | OutboxPut::Exists) => {}
            Ok(OutboxPut::LeaseLost) => {
                line.outcome = "cancelled".to_string();
                line.note = Some("lease lost before write-back; nothing written".to_string());
                return line;
            }
            Err(err) => {
                // Without a durable outcome nothing may be written; the lease runs out
                // and the ticket runs again on whichever host claims it next.
                not_stored(&mut line, &err);
                return line;
            }
        }
        if failed_tries > 0 {
            let retried = format!(
                "outcome stored after {failed_tries} failed ledger call(s) (ledger unavailable)"
            );
            line.note = Some(match line.note.take() {
                Some(note) => format!("{note}; {retried}"),
                None => retried,
            });
        }
        ctx.faults.hit("after_outbox");
        record_run(
            ctx,
            claim,
            self.route.as_deref(),
            None,
            RunPhase::Finished,
            Some(&entry.outcome),
            line.reason_code.as_deref(),
            line.log_path.as_deref().map(std::path::Path::new),
            started_at,
            Some(ctx.clock.now()),
        );
        let idempotency_key = entry.idempotency_key.clone();
        let applied = writeback::apply(ctx, entry).await;
        if let Err(err) = ctx
            .ledger
            .outbox_release(&idempotency_key, &claim.claimer_id)
        {
            tracing::warn!(%err, "could not release the outbox entry's write lease");
        }
        match applied {
            Ok(result) => {
                match &result {
                    WritebackResult::Done { to_status } => line.to_status = Some(to_status.clone()),
                    WritebackResult::Dropped {
                        status: Some(status),
                        ..
                    } => line.to_status = Some(status.clone()),
                    _ => {}
                }
                line.writeback = Some(result.describe());
            }
            Err(err) => line.writeback = Some(format!("deferred: ledger error {err}")),
        }
        ctx.faults.hit("before_release");
        release(ctx, claim);
        line
    }
}

/// Log, and mark on the run's line, an outcome the ledger could not store: retried until
/// the lease ran out when the ledger was unreachable (issue #20), given up at once on any
/// other ledger error. The line's `ledger_error` makes the tick exit 1 (issue #29).
fn not_stored(line: &mut RunLine, err: &crate::ledger::LedgerError) {
    if matches!(err, crate::ledger::LedgerError::Unavailable(_)) {
        tracing::error!(%err, "the outcome could not be stored before the lease ran out; nothing is written, and the ticket runs again on whichever host claims it next");
        line.note = Some(format!("outcome not stored before the lease ran out ({err}); nothing written, the ticket runs again on the next claim"));
    } else {
        tracing::error!(%err, "the outcome could not be stored; nothing is written, and the ticket runs again on whichever host claims it next");
        line.note = Some(format!(
            "outcome not stored ({err}); nothing written, the ticket runs again on the next claim"
        ));
    }
    line.ledger_error = Some(err.to_string());
}

/// Renew the lease every TTL/3 and look at the claim's cancel flag every
/// [`CANCEL_POLL`]; cancel the run when the lease is lost or a cancel is requested. A
/// renewal that fails (the ledger unreachable) is tried again after 250 ms, 500 ms, ...
/// rather than a whole interval later; the agent keeps running meanwhile.
async fn watch_claim(
    ctx: Arc<Context>,
    claim: Claim,
    lease: Arc<LeaseEnd>,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
) {
    let renew_every = (ctx.config.claim_ttl / 3).max(Duration::from_millis(100));
    let poll = CANCEL_POLL.min(renew_every);
    let mut since_renewal = Duration::ZERO;
    // After a failed renewal: how soon to try again, and whether the lease's end passed.
    let mut retry_in: Option<Duration> = None;
    let mut expired_warned = false;
    loop {
        let wait = retry_in.map_or(poll, |r| r.min(poll));
        tokio::time::sleep(wait).await;
        since_renewal += wait;
        let due = match retry_in {
            Some(r) => since_renewal >= r,
            None => since_renewal >= renew_every,
        };
        let stop = if due {
            since_renewal = Duration::ZERO;
            match ctx.ledger.renew(
                &claim.key,
                &claim.claimer_id,
                ctx.config.claim_ttl,
                ctx.clock.now(),
            ) {
                Ok(RenewOutcome::Renewed {
                    cancel_requested,
                    lease_expires_at,
                }) => {
                    lease.renewed(lease_expires_at);
                    retry_in = None;
                    expired_warned = false;
                    cancel_requested.then_some(CancelReason::TicketLeftStage)
                }
                Ok(RenewOutcome::Lost) => Some(CancelReason::LeaseLost),
                Err(err) => {
                    let next = retry_in
                        .map_or(FIRST_BACKOFF, next_backoff)
                        .min(renew_every);
                    retry_in = Some(next);
                    if lease.until() <= ctx.clock.now() && !expired_warned {
                        expired_warned = true;
                        tracing::error!(%err, "the lease ran out while the ledger was unreachable; the agent goes on, and its outcome is stored only if no other host took the ticket meanwhile");
                    } else {
                        tracing::warn!(%err, retry_in_ms = next.as_millis() as u64, "lease renewal failed; retrying");
                    }
                    None
                }
            }
        } else {
            // A local read, cheap: the cancel flag set by whichever tick saw the move.
            match ctx.ledger.claim(&claim.key) {
                Ok(Some(row)) if row.claimer_id != claim.claimer_id => {
                    Some(CancelReason::LeaseLost)
                }
                Ok(Some(row)) => row
                    .cancel_requested
                    .then_some(CancelReason::TicketLeftStage),
                Ok(None) => Some(CancelReason::LeaseLost),
                Err(_) => None,
            }
        };
        if let Some(why) = stop {
            tracing::info!(reason = ?why, "stopping the agent");
            *reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            cancel.cancel();
            return;
        }
    }
}

fn release(ctx: &Context, claim: &Claim) {
    if let Err(err) = ctx.ledger.release(&claim.key, &claim.claimer_id) {
        tracing::warn!(%err, "could not release claim; it will expire");
    }
}

#[allow(clippy::too_many_arguments)]
fn record_run(
    ctx: &Context,
    claim: &Claim,
    route: Option<&str>,
    title: Option<&str>,
    phase: RunPhase,
    outcome: Option<&str>,
    reason_code: Option<&str>,
    log_path: Option<&std::path::Path>,
    started_at: chrono::DateTime<chrono::Utc>,
    finished_at: Option<chrono::DateTime<chrono::Utc>>,
) {
    let record = RunRecord {
        run_id: claim.run_id.clone(),
        key: claim.key.clone(),
        stage: claim.stage.clone(),
        stage_attempt: claim.stage_attempt,
        claimer_id: claim.claimer_id.clone(),
        phase,
        outcome: outcome.map(str::to_string),
        reason_code: reason_code.map(str::to_string),
        log_path: log_path.map(|p| p.display().to_string()),
        started_at,
        finished_at,
        session_id: None,
        route: route.map(str::to_string),
        title: title.map(str::to_string),
    };
    if let Err(err) = ctx.ledger.record_run(&record) {
        tracing::warn!(%err, "could not record run history");
    }
}

fn prompt_context(
    ticket: &Ticket,
    stage: &Stage,
    attempt: u32,
    history: &TicketHistory,
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
                    },
                );
            }
        }
    }
    PromptContext {
        ticket: TicketVars {
            id: ticket.id.clone(),
            title: ticket.title.clone(),
            body: ticket.body.clone(),
            url: ticket.url.clone().unwrap_or_default(),
            status: ticket.status.clone(),
            labels: ticket.labels.clone(),
            priority: ticket.priority,
        },
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
    }
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

fn agent_vars(
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

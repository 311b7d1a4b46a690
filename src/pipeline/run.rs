//! One claimed run: in-progress write, agent with a renewed lease, outcome into the
//! outbox, write-back, release.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::history::TicketHistory;
use super::report::RunLine;
use super::writeback::{self, WritebackResult};
use super::Inner;
use crate::agent::{
    run_agent, AgentOutcome, AgentSpec, CancelReason, CommentVars, FailureVars, PriorVars,
    PromptContext, RunEnd, RunPlan, StageVars, TicketVars,
};
use crate::block::{
    idempotency_key, render_comment, Category, FailureBlock, NextAction, OutcomeBlock, SuccessBlock,
};
use crate::config::Stage;
use crate::hooks::Event;
use crate::ledger::{
    Claim, FollowUp, OutboxEntry, OutboxPut, OutboxState, RenewOutcome, RunPhase, RunRecord,
    RunUsage,
};
use crate::tracker::{Ticket, TrackerError};

/// Run the agent for a claim this process holds, and write the result back.
pub(super) async fn run_claimed(
    inner: Arc<Inner>,
    ticket: Ticket,
    stage_idx: usize,
    claim: Claim,
    history: TicketHistory,
) -> RunLine {
    let stage = inner.config.stages[stage_idx].clone();
    let span = tracing::info_span!("run", ticket = %ticket.id, role = %stage.role, attempt = claim.stage_attempt);
    let live = super::LiveRun {
        ticket: ticket.id.clone(),
        role: stage.role.clone(),
        attempt: claim.stage_attempt,
        run_id: claim.run_id.clone(),
        started_at: inner.clock.now(),
        log_path: crate::agent::run_dir(&inner.config.state_root, &claim.run_id)
            .join("agent.log")
            .display()
            .to_string(),
    };
    let run_id = claim.run_id.clone();
    inner
        .live
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(run_id.clone(), live);
    let line = run_stage(inner.clone(), ticket, stage, claim, history)
        .instrument(span)
        .await;
    inner
        .live
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&run_id);
    line
}

async fn run_stage(
    inner: Arc<Inner>,
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
    };
    inner.faults.hit("after_claim");
    // The run's start, for its duration in run history: from here, whatever ends it.
    let begun_at = inner.clock.now();

    if let Some(over) = over_budget(&inner, &ticket.id) {
        let outcome = AgentOutcome::failure(
            "budget.exceeded",
            Category::Policy,
            NextAction::Escalate,
            over,
        );
        return finish(
            &inner, &ticket, &stage, &claim, outcome, None, begun_at, line,
        )
        .await;
    }

    if let Some(in_progress) = &stage.in_progress_status {
        if ticket.status == stage.claim_status {
            match inner
                .tracker
                .transition(&ticket.id, &stage.claim_status, in_progress)
                .await
            {
                Ok(()) => inner.faults.hit("after_in_progress"),
                Err(refused @ TrackerError::TransitionRefused { .. }) => {
                    // The workflow will not let the ticket start: an observation worth a
                    // failure block (and a hold), not a silent retry every tick.
                    let outcome = AgentOutcome::failure(
                        "transition.refused",
                        Category::Policy,
                        NextAction::Manual,
                        refused.to_string(),
                    );
                    return finish(
                        &inner, &ticket, &stage, &claim, outcome, None, begun_at, line,
                    )
                    .await;
                }
                Err(err) => {
                    line.note = Some(match err {
                        TrackerError::Conflict { current, .. } => {
                            format!("moved by a person to {current} before the run")
                        }
                        other => format!("could not set {in_progress}: {other}"),
                    });
                    release(&inner, &claim);
                    return line;
                }
            }
        }
    }

    let hook_env = vec![
        ("SORTIE_TICKET_ID".to_string(), env_value(&ticket.id)),
        ("SORTIE_ROLE".to_string(), stage.role.clone()),
        (
            "SORTIE_STAGE_ATTEMPT".to_string(),
            claim.stage_attempt.to_string(),
        ),
        (
            "SORTIE_WORKSPACE".to_string(),
            crate::agent::workspace_dir(&inner.config.state_root, &ticket.id)
                .display()
                .to_string(),
        ),
    ];
    if let Err(detail) = prepare_workspace(&inner, &ticket, &hook_env).await {
        let outcome = AgentOutcome::failure(
            "workspace.hook_failed",
            Category::Transient,
            NextAction::Retry,
            detail,
        );
        return finish(
            &inner, &ticket, &stage, &claim, outcome, None, begun_at, line,
        )
        .await;
    }

    let run_dir = crate::agent::run_dir(&inner.config.state_root, &claim.run_id);
    let prompt = match inner.templates.render(
        &stage.role,
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
            return finish(
                &inner, &ticket, &stage, &claim, outcome, None, begun_at, line,
            )
            .await;
        }
    };
    // The role file's front matter overrides the config's agent settings.
    let agent = inner
        .templates
        .settings(&stage.role)
        .apply(&inner.config.agent);
    let mut plan = RunPlan::for_agent(
        &agent,
        prompt,
        crate::agent::workspace_dir(&inner.config.state_root, &ticket.id),
        run_dir,
    );
    plan.env_remove = inner.config.secret_env_names();
    // Resume the agent's last session of this ticket and role (issue #19).
    if let Ok(Some(prev)) = inner.ledger.last_session(&claim.key) {
        if let Some(session) = &prev.session_id {
            let prev_dir = crate::agent::run_dir(&inner.config.state_root, &prev.run_id);
            let earlier =
                crate::agent::read_session_record(&prev_dir).and_then(|r| r.reported_usage);
            plan.resume_session(&agent, session, earlier);
        }
    }
    let vars = agent_vars(&ticket, &stage, &claim, &plan);
    let started_at = inner.clock.now();
    record_run(
        &inner,
        &claim,
        RunPhase::Running,
        None,
        None,
        Some(&plan.run_dir.join("agent.log")),
        started_at,
        None,
    );

    // A child of the pipeline's shutdown token: the end of a shutdown grace stops it.
    let cancel = inner.shutdown.child_token();
    let cancel_reason = Arc::new(Mutex::new(None));
    let heartbeat = tokio::spawn(heartbeat(
        inner.clone(),
        claim.clone(),
        cancel.clone(),
        cancel_reason.clone(),
    ));
    let ledger = inner.ledger.clone();
    let (key, claimer) = (claim.key.clone(), claim.claimer_id.clone());
    let faults = inner.faults.clone();
    inner.notify(Event::run_started(&inner.run_ref(&claim)));
    let end = run_agent(AgentSpec { plan: &plan, vars }, cancel, move |pid| {
        if let Err(err) = ledger.set_agent_pid(&key, &claimer, Some(pid)) {
            tracing::warn!(%err, "could not record agent pid");
        }
        faults.hit("mid_agent");
    })
    .await;
    heartbeat.abort();
    let _ = inner
        .ledger
        .set_agent_pid(&claim.key, &claim.claimer_id, None);
    if let Some(hook) = &inner.config.workspace.hooks.after_run {
        if let Err(err) = crate::agent::run_hook(
            hook,
            &plan.workspace,
            &hook_env,
            inner.config.workspace.hook_timeout,
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
    record_usage_and_session(&inner, &claim, usage, session);
    match end {
        RunEnd::Cancelled { log_path, .. } => {
            let reason = cancel_reason.lock().expect("cancel reason lock").unwrap_or(
                if inner.shutdown.is_cancelled() {
                    CancelReason::Shutdown
                } else {
                    CancelReason::TicketLeftStage
                },
            );
            line.outcome = "cancelled".to_string();
            line.log_path = Some(log_path.display().to_string());
            line.note = Some(match reason {
                CancelReason::LeaseLost => "lease lost; nothing written".to_string(),
                CancelReason::TicketLeftStage => {
                    "ticket left the stage; nothing written".to_string()
                }
                CancelReason::Shutdown => "shutting down; nothing written".to_string(),
            });
            record_run(
                &inner,
                &claim,
                RunPhase::Cancelled,
                Some("cancelled"),
                None,
                Some(&log_path),
                started_at,
                Some(inner.clock.now()),
            );
            let why = match reason {
                CancelReason::LeaseLost => "lease_lost",
                CancelReason::TicketLeftStage => "ticket_left_stage",
                CancelReason::Shutdown => "shutdown",
            };
            inner.notify(Event::run_cancelled(&inner.run_ref(&claim), why));
            if reason != CancelReason::LeaseLost {
                release(&inner, &claim);
            }
            line
        }
        RunEnd::Finished(report) => {
            line.log_path = Some(report.log_path.display().to_string());
            let reason_code = match &report.outcome {
                AgentOutcome::Failure { reason_code, .. } => Some(reason_code.as_str()),
                AgentOutcome::Success { .. } => None,
            };
            inner.notify(Event::run_finished(
                &inner.run_ref(&claim),
                report.outcome.is_success(),
                reason_code,
            ));
            finish(
                &inner,
                &ticket,
                &stage,
                &claim,
                report.outcome,
                Some(report.duration.as_secs_f64()),
                started_at,
                line,
            )
            .await
        }
    }
}

/// Record what the run consumed (also when it failed or was cancelled) and the agent session
/// it ended with, which the next attempt of the same ticket and role resumes.
fn record_usage_and_session(
    inner: &Inner,
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
            recorded_at: inner.clock.now(),
        };
        if let Err(err) = inner.ledger.record_usage(&record) {
            tracing::warn!(%err, "could not record the run's usage");
        }
    }
    // The run's row exists (recorded as running); the upsert keeps a session id once set.
    if let (Some(session), Ok(Some(mut run))) = (session, inner.ledger.run(&claim.run_id)) {
        run.session_id = Some(session);
        if let Err(err) = inner.ledger.record_run(&run) {
            tracing::warn!(%err, "could not record the agent's session id");
        }
    }
}

/// Create the ticket's workspace if needed and run the `after_create` and
/// `before_run` hooks. A failed `after_create` removes the half-made workspace so the
/// next attempt starts clean.
async fn prepare_workspace(
    inner: &Inner,
    ticket: &Ticket,
    env: &[(String, String)],
) -> Result<(), String> {
    let state_root = &inner.config.state_root;
    let dir = crate::agent::workspace_dir(state_root, &ticket.id);
    let hooks = &inner.config.workspace.hooks;
    let timeout = inner.config.workspace.hook_timeout;
    let created = crate::agent::ensure_workspace(state_root, &ticket.id)
        .map_err(|e| format!("cannot create workspace {}: {e}", dir.display()))?;
    if created {
        if let Some(hook) = &hooks.after_create {
            if let Err(err) = crate::agent::run_hook(hook, &dir, env, timeout).await {
                let _ = crate::agent::remove_workspace(state_root, &dir);
                return Err(format!("after_create hook failed: {err}"));
            }
        }
    }
    if let Some(hook) = &hooks.before_run {
        crate::agent::run_hook(hook, &dir, env, timeout)
            .await
            .map_err(|err| format!("before_run hook failed: {err}"))?;
    }
    Ok(())
}

/// Why the ticket may not run again under `budgets:`, if it may not.
fn over_budget(inner: &Inner, ticket_id: &str) -> Option<String> {
    let budgets = &inner.config.budgets;
    if budgets.max_cost_usd_per_ticket.is_none()
        && budgets.max_tokens_per_ticket.is_none()
        && budgets.max_runs_per_ticket.is_none()
    {
        return None;
    }
    let used = match inner.ledger.ticket_usage(inner.tracker.name(), ticket_id) {
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
        let tokens = used.tokens_in + used.tokens_out;
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

/// Store the outcome in the outbox, write it back, release the claim.
#[allow(clippy::too_many_arguments)]
async fn finish(
    inner: &Arc<Inner>,
    ticket: &Ticket,
    stage: &Stage,
    claim: &Claim,
    outcome: AgentOutcome,
    duration: Option<f64>,
    started_at: chrono::DateTime<chrono::Utc>,
    mut line: RunLine,
) -> RunLine {
    let now = inner.clock.now();
    // A run that lost its lease never writes back: someone else owns the ticket now.
    match inner
        .ledger
        .renew(&claim.key, &claim.claimer_id, inner.config.claim_ttl, now)
    {
        Ok(RenewOutcome::Renewed { .. }) => {}
        Ok(RenewOutcome::Lost) => {
            line.outcome = "cancelled".to_string();
            line.note = Some("lease lost before write-back; nothing written".to_string());
            return line;
        }
        Err(err) => {
            line.outcome = "cancelled".to_string();
            line.note = Some(format!("ledger unavailable before write-back: {err}"));
            return line;
        }
    }
    let (block, prose, follow_up) = outcome_block(inner, ticket, stage, claim, &outcome, duration);
    line.outcome = block.kind().to_string();
    if let OutcomeBlock::Failure(f) = &block {
        line.reason_code = Some(f.reason_code.clone());
        if f.next_action == NextAction::Retry && f.to_status == stage.claim_status {
            let delay = inner.config.retry.backoff(claim.stage_attempt).as_secs();
            line.note = Some(format!("attempt {} in {delay}s", claim.stage_attempt + 1));
        }
    }
    let entry = OutboxEntry {
        idempotency_key: block.idempotency_key().to_string(),
        key: claim.key.clone(),
        stage: stage.claim_status.clone(),
        stage_attempt: claim.stage_attempt,
        run_id: claim.run_id.clone(),
        outcome: block.kind().to_string(),
        from_status: stage.claim_status.clone(),
        to_status: block.to_status().to_string(),
        comment_body: render_comment(&prose, &block),
        state: OutboxState::Pending,
        write_attempts: 0,
        next_attempt_at: now,
        last_error: None,
        created_at: now,
        follow_up,
    };
    match inner
        .ledger
        .outbox_put(&entry, &claim.claimer_id, inner.config.claim_ttl, now)
    {
        Ok(OutboxPut::Stored | OutboxPut::Exists) => {}
        Ok(OutboxPut::LeaseLost) => {
            line.outcome = "cancelled".to_string();
            line.note = Some("lease lost before write-back; nothing written".to_string());
            return line;
        }
        Err(err) => {
            // Without a durable outcome nothing may be written; the lease will expire
            // and the ticket will run again.
            line.note = Some(format!("could not store the outcome: {err}"));
            return line;
        }
    }
    inner.faults.hit("after_outbox");
    record_run(
        inner,
        claim,
        RunPhase::Finished,
        Some(&entry.outcome),
        line.reason_code.as_deref(),
        line.log_path.as_deref().map(std::path::Path::new),
        started_at,
        Some(inner.clock.now()),
    );
    let idempotency_key = entry.idempotency_key.clone();
    let applied = writeback::apply(inner, entry).await;
    if let Err(err) = inner
        .ledger
        .outbox_release(&idempotency_key, &claim.claimer_id)
    {
        tracing::warn!(%err, "could not release the outbox entry's write lease");
    }
    match applied {
        Ok(result) => {
            if let WritebackResult::Done { to_status } = &result {
                line.to_status = Some(to_status.clone());
            }
            line.writeback = Some(result.describe());
        }
        Err(err) => line.writeback = Some(format!("deferred: ledger error {err}")),
    }
    inner.faults.hit("before_release");
    release(inner, claim);
    line
}

/// The block, prose and follow-up for an outcome, deciding between retry and final failure.
fn outcome_block(
    inner: &Inner,
    ticket: &Ticket,
    stage: &Stage,
    claim: &Claim,
    outcome: &AgentOutcome,
    duration: Option<f64>,
) -> (OutcomeBlock, String, FollowUp) {
    let attempt = claim.stage_attempt;
    let key = idempotency_key(
        inner.tracker.name(),
        &ticket.id,
        &stage.role,
        &stage.claim_status,
        attempt,
    );
    match outcome {
        AgentOutcome::Success { summary, artifacts } => {
            let to = stage
                .success_status
                .clone()
                .unwrap_or_else(|| stage.claim_status.clone());
            let prose = format!("sortie: **{}** succeeded on attempt {attempt}.", stage.role);
            let block = OutcomeBlock::Success(SuccessBlock {
                role: stage.role.clone(),
                stage_attempt: attempt,
                idempotency_key: key,
                from_status: stage.claim_status.clone(),
                to_status: to,
                summary: summary.clone(),
                run_id: Some(claim.run_id.clone()),
                duration_seconds: duration,
                artifacts: artifacts.clone(),
                extra: BTreeMap::new(),
            });
            let follow_up = if stage.success_status.is_none() {
                FollowUp::Continue { after_seconds: 1 }
            } else {
                FollowUp::Clear
            };
            (block, prose, follow_up)
        }
        AgentOutcome::Failure {
            reason_code,
            category,
            next_action,
            detail,
        } => {
            let max = inner.config.retry.max_attempts;
            let wants_retry = *category == Category::Transient && *next_action == NextAction::Retry;
            let retry = wants_retry && attempt < max;
            let (to, next_action, detail, prose) = if retry {
                let delay = inner.config.retry.backoff(attempt).as_secs();
                let prose = format!(
                    "sortie: **{}** failed on attempt {attempt} of {max} ({reason_code}); retrying in {delay}s.",
                    stage.role
                );
                (
                    stage.claim_status.clone(),
                    NextAction::Retry,
                    detail.clone(),
                    prose,
                )
            } else {
                let to = stage
                    .failure_status
                    .clone()
                    .unwrap_or_else(|| stage.claim_status.clone());
                let mut detail = detail.clone();
                let mut next = *next_action;
                if wants_retry {
                    next = NextAction::Escalate;
                    detail = format!("{detail}\nretry limit reached: attempt {attempt} of {max}")
                        .trim_start()
                        .to_string();
                }
                let prose = format!(
                    "sortie: **{}** failed on attempt {attempt} ({reason_code}); {next}.",
                    stage.role
                );
                (to, next, detail, prose)
            };
            let block = OutcomeBlock::Failure(FailureBlock {
                role: stage.role.clone(),
                stage_attempt: attempt,
                idempotency_key: key,
                from_status: stage.claim_status.clone(),
                to_status: to,
                reason_code: reason_code.clone(),
                category: *category,
                transient: *category == Category::Transient,
                next_action,
                detail,
                run_id: Some(claim.run_id.clone()),
                duration_seconds: duration,
                extra: BTreeMap::new(),
            });
            let follow_up = if retry {
                FollowUp::Retry {
                    after_seconds: inner.config.retry.backoff(attempt).as_secs(),
                    reason_code: reason_code.clone(),
                }
            } else if stage.failure_status.is_none() {
                FollowUp::Hold {
                    reason_code: reason_code.clone(),
                }
            } else {
                FollowUp::Clear
            };
            (block, prose, follow_up)
        }
    }
}

/// Renew the lease every TTL/3; cancel the run when it is lost or a cancel is requested.
async fn heartbeat(
    inner: Arc<Inner>,
    claim: Claim,
    cancel: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
) {
    let every = (inner.config.claim_ttl / 3).max(std::time::Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        let stop = match inner.ledger.renew(
            &claim.key,
            &claim.claimer_id,
            inner.config.claim_ttl,
            inner.clock.now(),
        ) {
            Ok(RenewOutcome::Renewed {
                cancel_requested: false,
                ..
            }) => None,
            Ok(RenewOutcome::Renewed {
                cancel_requested: true,
                ..
            }) => Some(CancelReason::TicketLeftStage),
            Ok(RenewOutcome::Lost) => Some(CancelReason::LeaseLost),
            Err(err) => {
                tracing::warn!(%err, "lease renewal failed; will retry");
                None
            }
        };
        if let Some(why) = stop {
            tracing::info!(reason = ?why, "stopping the agent");
            *reason.lock().expect("cancel reason lock") = Some(why);
            cancel.cancel();
            return;
        }
    }
}

fn release(inner: &Inner, claim: &Claim) {
    if let Err(err) = inner.ledger.release(&claim.key, &claim.claimer_id) {
        tracing::warn!(%err, "could not release claim; it will expire");
    }
}

#[allow(clippy::too_many_arguments)]
fn record_run(
    inner: &Inner,
    claim: &Claim,
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
        route: None,
    };
    if let Err(err) = inner.ledger.record_run(&record) {
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

//! Apply one dispatch: prepare (`prepare`: budget, in-progress write, workspace,
//! prompt), run the agent with its claim watched (`watch`: lease renewed, cancel flag
//! read), finish (`finish`: outcome decision, outbox, write-back, release).

mod budget;
mod finish;
mod prepare;
mod verify;
mod watch;

use std::sync::{Arc, Mutex};

use tracing::Instrument;

pub use self::watch::CANCEL_POLL;

use self::finish::Finish;
use self::prepare::{Prepared, Ready};
use super::context::{run_ref, Clock, Context};
use super::decide::question::Continuation;
use super::history::TicketHistory;
use super::lease::LeaseEnd;
use super::report::RunLine;
use super::supervisor::{LiveRun, Supervisor};
use crate::agent::{run_agent, AgentOutcome, AgentSpec, RunEnd};
use crate::config::Stage;
use crate::hooks::Event;
use crate::ledger::{Claim, Ledger, RunPhase, RunRecord, RunUsage};
use crate::tracker::Ticket;

/// Run the agent for a claim this process holds, and write the result back.
pub(super) async fn run_claimed(
    ctx: Arc<Context>,
    supervisor: Arc<Supervisor>,
    ticket: Ticket,
    stage_index: usize,
    claim: Claim,
    history: TicketHistory,
    continuation: Option<Continuation>,
) -> RunLine {
    let stage = ctx.config.stages[stage_index].clone();
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
    let line = run_stage(
        &ctx,
        &supervisor,
        ticket,
        stage,
        claim,
        history,
        continuation,
    )
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
    continuation: Option<Continuation>,
) -> RunLine {
    let mut line =
        RunLine::not_started(&ticket.id, &stage.role, claim.stage_attempt, &ticket.status);
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
        continuation: continuation.as_ref(),
        in_history: true,
    };

    // A question past its deadline with no default to take ends the attempt here.
    if let Some(c) = continuation.as_ref().filter(|c| c.answer.is_none()) {
        return run
            .finish(c.unanswered(), None, None, run.begun_at, line)
            .await;
    }
    if let Some(c) = &continuation {
        if let Some((_, by)) = &c.answer {
            line.note = Some(format!(
                "goes on from {} (answered by {by})",
                c.question.question_id
            ));
        }
    }
    let Ready {
        moved_to,
        mut worktree,
        hook_env,
        plan,
    } = match prepare::prepare(
        ctx,
        supervisor,
        &ticket,
        &stage,
        &claim,
        &history,
        route,
        &run.route,
        continuation.as_ref(),
    )
    .await
    {
        Prepared::Ready(ready) => *ready,
        Prepared::Failed(outcome) => {
            return run.finish(outcome, None, None, run.begun_at, line).await
        }
        Prepared::Refused(outcome) => {
            let refused = Finish {
                in_history: false,
                ..run
            };
            return refused
                .finish(outcome, None, None, refused.begun_at, line)
                .await;
        }
        Prepared::NotStarted(note) => {
            line.note = Some(note);
            release(&*ctx.ledger, &claim);
            return line;
        }
    };
    // The work of this stage is what its branch gained since the ticket's last handoff
    // (the head the latest success block recorded; before any, where the branch left
    // its base), not only since this run started: a run after a crash that lost the
    // earlier run's outcome finds that run's commits already there, and they are this
    // stage's work.
    if let Some(worktree) = &mut worktree {
        let timeout = ctx.config.agent.timeout;
        let handoff = history.blocks().iter().rev().find_map(|b| match b {
            crate::block::OutcomeBlock::Success(s) => s.artifacts.get("head").cloned(),
            crate::block::OutcomeBlock::Failure(_) => None,
        });
        let handoff = match handoff {
            Some(head) => Some(head),
            None => crate::agent::git::fork_point(worktree, timeout).await,
        };
        if let Some(head) = handoff.filter(|h| *h != worktree.start) {
            if crate::agent::git::is_ancestor(worktree, &head, &worktree.start, timeout).await {
                worktree.start = head;
            }
        }
    }
    let vars = prepare::agent_vars(&ticket, &stage, &claim, &plan);
    let verify_vars = stage.verify.as_ref().map(|_| vars.clone());
    // A git worktree is its own baseline (`Worktree::start`); a plain workspace's is taken now.
    let mut baseline = match &worktree {
        Some(_) => None,
        None => super::evidence::plain_baseline(&stage, &plan.workspace).await,
    };
    let started_at = ctx.clock.now();
    let log_path = plan.run_dir.join("agent.log");
    let begun = Begun {
        title: &ticket.title,
        agent: plan.preset.as_str(),
        model: crate::config::model_in_argv(plan.preset, &plan.command, &plan.env),
    };
    record_run(
        &*ctx.ledger,
        &claim,
        run.route.as_deref(),
        Some(&begun),
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
        watch::watch_claim(
            ctx.ledger.clone(),
            ctx.clock.clone(),
            ctx.config.claim_ttl,
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
    // An earlier run of this attempt whose agent succeeded but whose outcome was never
    // stored (a crash while verifying): its success is verified again, the agent is
    // not run again.
    let replay = stage
        .verify
        .as_ref()
        .and_then(|_| verify::replayable(&*ctx.ledger, &ctx.config.state_root, &claim));
    let mut end = match &replay {
        Some(done) => {
            tracing::info!(earlier_run = %done.run_id, "the agent of an earlier run succeeded before a crash; verifying its work again instead of running it");
            // The baseline is the one the agent started from, not today's workspace.
            if let Some((start, changes)) = &done.start {
                match &mut worktree {
                    Some(worktree) => {
                        worktree.start = start.clone();
                        worktree.start_changes = changes.clone();
                    }
                    None => {
                        baseline = baseline.map(|_| crate::agent::baseline::Baseline::Git {
                            head: start.clone(),
                            digest: changes.clone(),
                        });
                    }
                }
            }
            RunEnd::Finished(crate::agent::RunReport {
                outcome: done.outcome(),
                log_path: done.log_path.clone(),
                exit_code: Some(0),
                duration: std::time::Duration::from_secs_f64(done.duration_seconds.max(0.0)),
                usage: None,
                session_id: None,
                session_start: None,
                rate_limits: Vec::new(),
                notes: vec![format!(
                    "the agent ran in run {}, which ended before its outcome was stored",
                    done.run_id
                )],
            })
        }
        None => {
            run_agent(
                AgentSpec { plan: &plan, vars },
                cancel.clone(),
                move |pid| {
                    if let Err(err) = ledger.set_agent_pid(&key, &claimer, Some(pid)) {
                        tracing::warn!(%err, "could not record agent pid");
                    }
                    faults.hit("mid_agent");
                },
            )
            .await
        }
    };
    // The checks run while the claim is still watched (its lease renewed, a person's
    // move or a shutdown stopping them).
    let mut checks = Vec::new();
    if let (RunEnd::Finished(report), Some(verify), Some(vars)) =
        (&mut end, &stage.verify, &verify_vars)
    {
        if let AgentOutcome::Success { summary, artifacts } = &report.outcome {
            verify::save_agent_done(
                &plan.run_dir,
                &verify::AgentDone {
                    run_id: replay
                        .as_ref()
                        .map_or(claim.run_id.clone(), |d| d.run_id.clone()),
                    stage_attempt: claim.stage_attempt,
                    summary: summary.clone(),
                    artifacts: artifacts.clone(),
                    start: match (&worktree, &baseline) {
                        (Some(w), _) => Some((w.start.clone(), w.start_changes.clone())),
                        (None, Some(crate::agent::baseline::Baseline::Git { head, digest })) => {
                            Some((head.clone(), digest.clone()))
                        }
                        _ => None,
                    },
                    log_path: report.log_path.clone(),
                    duration_seconds: report.duration.as_secs_f64(),
                },
            );
            let outcome = std::mem::replace(
                &mut report.outcome,
                AgentOutcome::Success {
                    summary: String::new(),
                    artifacts: Default::default(),
                },
            );
            let (outcome, ran) = verify::verify(verify, &plan, vars, &cancel, outcome).await;
            report.outcome = outcome;
            checks = ran;
            ctx.faults.hit("after_verify");
            if cancel.is_cancelled() {
                end = RunEnd::Cancelled {
                    log_path: report.log_path.clone(),
                    usage: report.usage,
                    session_id: report.session_id.clone(),
                    rate_limits: std::mem::take(&mut report.rate_limits),
                };
            }
        }
    }
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
            plan.sandbox.as_ref(),
        )
        .await
        {
            tracing::warn!(%err, "after_run workspace hook failed");
        }
    }
    // The agent, its checks and the after_run hook committed on a detached HEAD into
    // objects of their own: onto the ticket's branch before anything reads the branch.
    if let Some(sandbox) = &plan.sandbox {
        if let Some(worktree) = &worktree {
            if let Err(err) =
                crate::agent::git::leave_sandbox(worktree, ctx.config.agent.timeout).await
            {
                tracing::warn!(%err, "could not move the sandboxed run's commits onto the branch");
                if let RunEnd::Finished(report) = &mut end {
                    report.outcome = err.outcome();
                }
            }
        }
        sandbox.clean_up();
    }

    let (usage, session, rate_limits) = match &end {
        RunEnd::Cancelled {
            usage,
            session_id,
            rate_limits,
            ..
        } => (*usage, session_id.clone(), rate_limits.clone()),
        RunEnd::Finished(report) => (
            report.usage,
            report.session_id.clone(),
            report.rate_limits.clone(),
        ),
    };
    line.rate_limits = rate_limits.clone();
    // Priced from `prices:` when the agent reported tokens without a cost.
    let model = crate::config::model_in_argv(plan.preset, &plan.command, &plan.env);
    let cost =
        usage.and_then(|u| crate::budget::run_cost(&u, model.as_deref(), &ctx.config.prices).usd());
    let ran = Ran {
        cost_usd: cost,
        agent: plan.preset.as_str(),
        model,
    };
    record_usage_and_session(
        &*ctx.ledger,
        &*ctx.clock,
        &claim,
        usage,
        ran,
        (session, rate_limits),
    );
    match end {
        RunEnd::Cancelled { log_path, .. } => {
            run.cancelled(
                supervisor,
                &cancel_reason,
                moved_to,
                log_path,
                started_at,
                line,
            )
            .await
        }
        RunEnd::Finished(mut report) => {
            line.log_path = Some(report.log_path.display().to_string());
            line.session = report.session_start;
            line.verify = checks.iter().map(|c| c.result.clone()).collect();
            let mut evidence = crate::block::Evidence {
                checks,
                model: crate::config::model_in_argv(plan.preset, &plan.command, &plan.env),
                ..Default::default()
            };
            if let Some(worktree) = &worktree {
                report.outcome = super::branch::conclude(
                    ctx,
                    &ticket,
                    &stage,
                    worktree,
                    report.outcome,
                    &mut evidence,
                )
                .await;
            } else if let Some(baseline) = &baseline {
                report.outcome = super::evidence::conclude_plain(
                    &stage,
                    &plan.workspace,
                    baseline,
                    report.outcome,
                    &mut evidence,
                )
                .await;
            }
            let (outcome, reason_code) = match &report.outcome {
                AgentOutcome::Failure { reason_code, .. } => {
                    ("failure", Some(reason_code.as_str()))
                }
                AgentOutcome::Success { .. } => ("success", None),
                AgentOutcome::Question(_) => ("question", None),
            };
            ctx.events
                .notify(Event::run_finished(&run_ref(&claim), outcome, reason_code));
            run.finish(
                report.outcome,
                Some(&evidence),
                Some(report.duration.as_secs_f64()),
                started_at,
                line,
            )
            .await
        }
    }
}

/// What ran, for the usage row: its cost (reported or priced, `None` when unknown), its
/// agent preset and its model.
struct Ran {
    cost_usd: Option<f64>,
    agent: &'static str,
    model: Option<String>,
}

/// Record what the run consumed (also when it failed or was cancelled), the agent
/// session it ended with, which the next attempt of the same ticket and role resumes, and
/// the rate-limit reports its agent's stream carried (on the run's history row).
fn record_usage_and_session(
    ledger: &dyn Ledger,
    clock: &dyn Clock,
    claim: &Claim,
    usage: Option<crate::agent::Usage>,
    ran: Ran,
    (session, rate_limits): (Option<String>, Vec<crate::rate_limit::RateLimit>),
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
            cost_usd: ran.cost_usd,
            recorded_at: clock.now(),
            agent: Some(ran.agent.to_string()),
            model: ran.model,
        };
        if let Err(err) = ledger.record_usage(&record) {
            tracing::warn!(%err, "could not record the run's usage");
        }
    }
    // The run's row exists (recorded as running); the upsert keeps a session id and rate
    // limits once set.
    if session.is_none() && rate_limits.is_empty() {
        return;
    }
    if let Ok(Some(mut run)) = ledger.run(&claim.run_id) {
        run.session_id = session.or(run.session_id);
        if !rate_limits.is_empty() {
            run.rate_limits = rate_limits;
        }
        if let Err(err) = ledger.record_run(&run) {
            tracing::warn!(%err, "could not record the agent's session id and rate limits");
        }
    }
}

/// Why nothing may start at `now`: the day's spending at `budgets.max_cost_usd_per_day`
/// (a ledger that cannot tell lets runs start, logged).
pub(super) fn day_hold(
    ctx: &Context,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<super::decide::eligibility::SkipReason> {
    let budgets = &ctx.config.budgets;
    budgets.max_cost_usd_per_day?;
    let day = crate::budget::day_window(now, budgets.timezone);
    match crate::budget::day_spent(&*ctx.ledger, ctx.tracker_name(), day.start) {
        Ok(spent) => super::decide::budget::day_hold(budgets, spent, now),
        Err(err) => {
            tracing::warn!(%err, "cannot read the day's spending; dispatching without the day limit");
            None
        }
    }
}

/// Give the claim back (a failure leaves it to expire).
pub(super) fn release(ledger: &dyn Ledger, claim: &Claim) {
    if let Err(err) = ledger.release(&claim.key, &claim.claimer_id) {
        tracing::warn!(%err, "could not release claim; it will expire");
    }
}

/// What the run's first history row records and later ones keep: the ticket's title,
/// the agent preset and the model it was told to use.
pub(super) struct Begun<'a> {
    title: &'a str,
    agent: &'static str,
    model: Option<String>,
}

/// Record the run's history row at one of its phases (`begun`: at its start).
#[allow(clippy::too_many_arguments)]
pub(super) fn record_run(
    ledger: &dyn Ledger,
    claim: &Claim,
    route: Option<&str>,
    begun: Option<&Begun<'_>>,
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
        title: begun.map(|b| b.title.to_string()),
        agent: begun.map(|b| b.agent.to_string()),
        model: begun.and_then(|b| b.model.clone()),
        rate_limits: Vec::new(),
    };
    if let Err(err) = ledger.record_run(&record) {
        tracing::warn!(%err, "could not record run history");
    }
}

//! `sortie pipeline ...`: validate, tick and inspect a pipeline.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use clap::Subcommand;
use serde::Serialize;

use super::UsageError;
use crate::config::Config;
use crate::ledger::{
    Claim, Hold, HookDelivery, Ledger, OutboxEntry, RetryEntry, RunRecord, Scope, UsageTotal,
};
use crate::pipeline::{Pipeline, PipelineError, TickOptions};

/// Pipeline commands.
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Check a config and print the pipeline as a chain; exit 2 with every error otherwise.
    Validate {
        #[command(flatten)]
        config: super::ConfigPath,
        /// Do not reach the network: skip the `git ls-remote` check of `workspace.git.url`.
        #[arg(long)]
        offline: bool,
    },
    /// Run one reconcile sweep: claim, run and write back what the board asks for.
    Tick {
        #[command(flatten)]
        config: super::ConfigPath,
        /// Claim nothing, run nothing, write nothing: say what would run and why the rest would not.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON document instead of lines.
        #[arg(long)]
        json: bool,
        /// On SIGINT/SIGTERM, let runs finish for this many seconds before stopping them
        /// (default 0: stop them at once). A second signal exits at once.
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        grace: u64,
    },
    /// Run as a daemon: tick every `poll_interval_seconds`, on `POST /api/v1/refresh`
    /// and on GitHub webhooks; serve state and metrics over HTTP; drain on SIGTERM. The
    /// config is reloaded when it or a role file changes.
    Run {
        #[command(flatten)]
        config: super::ConfigPath,
        /// HTTP address to listen on (port 0 picks a free port; the bound address is printed).
        #[arg(long, default_value = "127.0.0.1:8626")]
        listen: std::net::SocketAddr,
        /// Allow a non-loopback `--listen` without `http.token_env`.
        #[arg(long)]
        insecure_listen: bool,
    },
    /// Show live claims, the retry queue, held tickets and recent runs.
    Status {
        #[command(flatten)]
        config: super::ConfigPath,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run a pipeline command.
pub fn run(cmd: PipelineCommand) -> anyhow::Result<u8> {
    match cmd {
        PipelineCommand::Validate { config, offline } => {
            super::validate::run(&config.locate()?, offline)
        }
        PipelineCommand::Tick {
            config,
            dry_run,
            json,
            grace,
        } => tick(
            &config.locate()?,
            dry_run,
            json,
            std::time::Duration::from_secs(grace),
        ),
        PipelineCommand::Status { config, json } => status(&config.locate()?, json),
        PipelineCommand::Run {
            config,
            listen,
            insecure_listen,
        } => daemon(config.locate()?, listen, insecure_listen),
    }
}

fn tick(
    config_path: &Path,
    dry_run: bool,
    json: bool,
    grace: std::time::Duration,
) -> anyhow::Result<u8> {
    use tokio::signal::unix::{signal, SignalKind};
    let config = Config::load(config_path)?;
    if let Some(missing) = super::validate::missing_board(&config) {
        return Err(UsageError(missing.to_string()).into());
    }
    // A refused start writes nothing: what `Pipeline::build` refuses (a role file, a
    // missing agent program) is checked before the ledger file is created (issue #30).
    if !dry_run {
        let templates = crate::agent::RoleTemplates::for_config(&config)
            .map_err(|p| UsageError(super::validate::role_error(&config, &p)))?;
        if let Some((role, program)) = templates.missing_programs(&config).into_iter().next() {
            return Err(config_error(PipelineError::AgentNotFound { role, program }));
        }
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let (report, signalled) = runtime.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let tracker = crate::tracker::open(&config)?;
        // A dry run writes nothing, not even a new ledger file.
        let ledger: Arc<dyn Ledger> = if dry_run
            && matches!(config.ledger, crate::config::LedgerConfig::Sqlite)
            && !config.ledger_path().exists()
        {
            Arc::new(crate::ledger::SqliteLedger::open_in_memory()?)
        } else {
            crate::ledger::open(&config)?
        };
        // A dry run starts no agent: it runs without them and says which are missing.
        let positioned = config.clone();
        let pipeline = Pipeline::builder(config, tracker, ledger)
            .require_agents(!dry_run)
            .build()
            .await
            .map_err(|err| match err {
                PipelineError::Prompt(p) => {
                    UsageError(super::validate::role_error(&positioned, &p)).into()
                }
                other => config_error(other),
            })?;
        for (role, program) in pipeline.missing_agents() {
            super::say(format_args!(
                "{}",
                missing_agent_warning(pipeline.config(), &role, &program)
            ));
        }
        let tick = pipeline.tick(TickOptions { dry_run });
        tokio::pin!(tick);
        let mut signalled: Option<i32> = None;
        let deadline = tokio::time::sleep(std::time::Duration::MAX / 4);
        tokio::pin!(deadline);
        let result = loop {
            let number = tokio::select! {
                result = &mut tick => break result,
                _ = term.recv() => 15,
                _ = int.recv() => 2,
                _ = &mut deadline, if signalled.is_some() => {
                    pipeline.interrupt();
                    deadline.as_mut().reset(tokio::time::Instant::now() + std::time::Duration::MAX / 4);
                    continue;
                }
            };
            if signalled.is_some() {
                super::say(format_args!("sortie: second signal: exiting now; the next tick takes over the claims and stops their agents"));
                pipeline.interrupt();
                std::process::exit(128 + number);
            }
            signalled = Some(number);
            if grace.is_zero() {
                super::say(format_args!("sortie: interrupted: stopping the runs of this tick (nothing is written on their tickets); a second signal exits at once"));
                pipeline.interrupt();
            } else {
                super::say(format_args!(
                    "sortie: interrupted: no new claims; runs get {}s to finish, then are stopped; a second signal exits at once",
                    grace.as_secs()
                ));
                pipeline.stop_claiming();
                deadline
                    .as_mut()
                    .reset(tokio::time::Instant::now() + grace);
            }
        };
        result
            .map(|report| (report, signalled))
            .map_err(anyhow::Error::from)
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text())?;
    }
    out.flush()?;
    drop(out);
    if let Some(number) = signalled {
        return Ok(u8::try_from(128 + number).unwrap_or(super::EXIT_FAILURE));
    }
    // The tick finished, but a run's outcome is lost with its ledger write: a runtime
    // failure, whoever watches the exit code must hear of it (issue #29).
    let unstored: Vec<_> = report.unstored_runs().collect();
    if let Some(first) = unstored.first() {
        super::say(format_args!(
            "sortie: the ledger failed: the outcome of {} run(s) could not be stored ({}); nothing was written on their tickets, and they run again at their next claim",
            unstored.len(),
            first.ledger_error.as_deref().unwrap_or_default()
        ));
        return Ok(super::EXIT_FAILURE);
    }
    Ok(super::EXIT_OK)
}

/// The warning a dry run prints for a role whose agent program is not installed.
fn missing_agent_warning(config: &Config, role: &str, program: &str) -> String {
    let preset = config.agent.preset;
    let key = match preset.default_program() {
        Some(default) if default == program => format!(
            "`agent.preset: {}` needs `{program}` on PATH",
            preset.as_str()
        ),
        _ => format!("`agent.command` (or the role file's `command`) names `{program}`"),
    };
    format!(
        "warning: role {role}: agent program `{program}` not found; {key}. A dry run starts no \
         agent, so it goes on; a real tick refuses. To watch tickets flow without an agent CLI, \
         use the demo agent (README, \"Running it on your own board\")."
    )
}

fn daemon(
    config_path: PathBuf,
    listen: std::net::SocketAddr,
    insecure_listen: bool,
) -> anyhow::Result<u8> {
    let config = Config::load(&config_path)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(crate::daemon::run(
        config,
        &config_path,
        listen,
        insecure_listen,
    ))?;
    Ok(super::EXIT_OK)
}

/// A missing or broken role template is the user's to fix: exit 2.
fn config_error(err: PipelineError) -> anyhow::Error {
    match err {
        PipelineError::Prompt(p) => UsageError(p.to_string()).into(),
        err @ PipelineError::AgentNotFound { .. } => UsageError(err.to_string()).into(),
        other => other.into(),
    }
}

/// Everything `pipeline status` shows.
#[derive(Debug, Serialize)]
struct StatusReport {
    claims: Vec<Claim>,
    retries: Vec<RetryEntry>,
    holds: Vec<Hold>,
    pending_writebacks: Vec<OutboxEntry>,
    recent_runs: Vec<RunRecord>,
    hook_failures: Vec<HookDelivery>,
    usage: Vec<UsageTotal>,
    /// The last `verify` result of each recently run ticket whose stage verifies.
    verify: Vec<TicketVerify>,
    /// Why the tickets' verify results could not be read from the tracker.
    verify_error: Option<String>,
    /// Questions agents asked that are still open on their tickets (issue #34).
    questions: Vec<OpenQuestionRow>,
    /// Why the open questions could not be read from the tracker.
    questions_error: Option<String>,
}

/// A question still open on its ticket, as `pipeline status` shows it.
#[derive(Debug, Serialize)]
struct OpenQuestionRow {
    ticket: String,
    role: String,
    question_id: String,
    /// The question, as the agent asked it.
    question: String,
    /// The choices it offers; empty when none.
    options: Vec<String>,
    asked_at: chrono::DateTime<Utc>,
    deadline: Option<chrono::DateTime<Utc>>,
    /// `waiting`, `answered by <author>` (the next tick goes on), or `timed out`.
    state: String,
}

impl OpenQuestionRow {
    /// One line of `pipeline status`: `7 architect: waiting for an answer to
    /// architect-1-q1 (asked ..., times out ...): "Which API?" (options: 1. REST v2, 2. GraphQL)`.
    fn to_text(&self) -> String {
        let state = match self.state.as_str() {
            "waiting" => format!("waiting for an answer to {}", self.question_id),
            "timed out" => format!("{} timed out", self.question_id),
            answered => format!("{} {answered}; the next tick goes on", self.question_id),
        };
        let deadline = self
            .deadline
            .map(|d| format!(", times out {}", d.to_rfc3339()))
            .unwrap_or_default();
        format!(
            "{} {}: {state} (asked {}{deadline}): {}",
            self.ticket,
            self.role,
            self.asked_at.to_rfc3339(),
            crate::block::question::one_line(&self.question, &self.options)
        )
    }
}

/// How many recent runs `pipeline status` looks through for questions.
const QUESTION_RUNS: usize = 200;

/// The questions still open on the tickets whose recent runs asked one (at most
/// [`VERIFY_TICKETS`] tickets): one comment read per ticket, none when no run asked.
fn open_questions(
    config: &Config,
    ledger: &dyn crate::ledger::Ledger,
) -> anyhow::Result<Vec<OpenQuestionRow>> {
    use crate::pipeline::decide::question::{state, QuestionState};
    let tracker_name = config.tracker.name();
    let runs = ledger.recent_runs(Scope::Tracker(&tracker_name), QUESTION_RUNS)?;
    let mut asked: Vec<(String, String)> = Vec::new();
    for r in runs
        .iter()
        .filter(|r| r.outcome.as_deref() == Some("question"))
    {
        let key = (r.key.ticket_id.clone(), r.key.role.clone());
        if !asked.contains(&key) && asked.len() < VERIFY_TICKETS {
            asked.push(key);
        }
    }
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = asked.iter().map(|(t, _)| t.clone()).collect();
    let (identity, histories) = read_histories(config, &ids)?;
    let who = crate::pipeline::history::Answerers {
        identity: &identity,
        trusted_authors: &config.trusted_authors,
    };
    let now = Utc::now();
    let mut out = Vec::new();
    for ((ticket, role), history) in asked.iter().zip(&histories) {
        let Some(open) = history.open_question(role, &who) else {
            continue;
        };
        let state = match state(&open, now) {
            QuestionState::Waiting => "waiting".to_string(),
            QuestionState::Answered { by, .. } => format!("answered by {by}"),
            QuestionState::Unanswered => "timed out".to_string(),
        };
        out.push(OpenQuestionRow {
            ticket: ticket.clone(),
            role: role.clone(),
            question_id: open.block.question_id.clone(),
            question: open.block.question.clone(),
            options: open.block.options.clone(),
            asked_at: open.posted_at,
            deadline: open.block.deadline,
            state,
        });
    }
    Ok(out)
}

/// A ticket's last `verify` result, as its blocks record it (issue #33).
#[derive(Debug, Serialize)]
struct TicketVerify {
    ticket: String,
    #[serde(flatten)]
    result: crate::pipeline::verify_result::VerifyResult,
}

/// How many tickets `pipeline status` reads verify results for at most.
const VERIFY_TICKETS: usize = 20;

/// The last verify result of the tickets among `runs` (newest first) whose role's stage
/// has `verify`, read from their trusted blocks: one comment read per ticket, so a
/// pipeline without `verify` makes no tracker request.
fn verify_results(config: &Config, runs: &[RunRecord]) -> anyhow::Result<Vec<TicketVerify>> {
    let verifies = |role: &str| {
        config
            .stages
            .iter()
            .any(|s| s.role == role && s.verify.is_some())
    };
    let mut tickets: Vec<String> = Vec::new();
    for r in runs.iter().filter(|r| verifies(&r.key.role)) {
        if !tickets.contains(&r.key.ticket_id) && tickets.len() < VERIFY_TICKETS {
            tickets.push(r.key.ticket_id.clone());
        }
    }
    if tickets.is_empty() {
        return Ok(Vec::new());
    }
    let (_, histories) = read_histories(config, &tickets)?;
    let mut out = Vec::new();
    for (ticket, history) in tickets.iter().zip(histories) {
        let result = crate::pipeline::verify_result::VerifyResult::last_of(
            history.blocks().iter().filter(|b| verifies(b.role())),
        );
        if let Some(result) = result {
            out.push(TicketVerify {
                ticket: ticket.clone(),
                result,
            });
        }
    }
    Ok(out)
}

/// sortie's identity on the tracker and the histories of `tickets` (their trusted blocks,
/// questions and answers), read with one `comments_of` call; any read failing is the error.
fn read_histories(
    config: &Config,
    tickets: &[String],
) -> anyhow::Result<(String, Vec<crate::pipeline::history::TicketHistory>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let tracker = crate::tracker::open(config)?;
        let identity = tracker.identity().await?;
        let trusted: std::collections::HashSet<String> = std::iter::once(identity.clone())
            .chain(config.trusted_authors.iter().cloned())
            .collect();
        let mut histories = Vec::new();
        for comments in tracker.comments_of(tickets).await {
            histories.push(crate::pipeline::history::TicketHistory::from_comments(
                &comments?, &trusted,
            ));
        }
        Ok((identity, histories))
    })
}

fn status(config_path: &Path, json: bool) -> anyhow::Result<u8> {
    let config = Config::load(config_path)?;
    let ledger = crate::ledger::open(&config)?;
    let tracker = config.tracker.name();
    let recent_runs = ledger.recent_runs(Scope::Tracker(&tracker), 20)?;
    let (verify, verify_error) = match verify_results(&config, &recent_runs) {
        Ok(verify) => (verify, None),
        Err(err) => (Vec::new(), Some(format!("{err:#}"))),
    };
    let (questions, questions_error) = match open_questions(&config, &*ledger) {
        Ok(questions) => (questions, None),
        Err(err) => (Vec::new(), Some(format!("{err:#}"))),
    };
    let report = StatusReport {
        questions,
        questions_error,
        claims: ledger.claims(Scope::Tracker(&tracker))?,
        retries: ledger.retries(Scope::Tracker(&tracker))?,
        holds: ledger.holds(Scope::Tracker(&tracker))?,
        pending_writebacks: ledger.outbox_pending(&tracker)?,
        hook_failures: ledger.hook_failures(20)?,
        usage: ledger.usage_totals(&tracker)?,
        recent_runs,
        verify,
        verify_error,
    };
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(super::EXIT_OK);
    }
    let now = Utc::now();
    writeln!(out, "claims ({}):", report.claims.len())?;
    for c in &report.claims {
        let left = (c.lease_expires_at - now).num_seconds();
        let lease = if left > 0 {
            format!("lease {left}s left")
        } else {
            "expired".to_string()
        };
        let age = (now - c.claimed_at).num_seconds();
        writeln!(
            out,
            "  {} {} #{} held by {} for {age}s, {lease}{}",
            c.key.ticket_id,
            c.key.role,
            c.stage_attempt,
            c.claimer_id,
            if c.cancel_requested {
                ", cancel requested"
            } else {
                ""
            }
        )?;
    }
    writeln!(out, "retry queue ({}):", report.retries.len())?;
    for r in &report.retries {
        writeln!(
            out,
            "  {} {} after attempt {} ({}), due {}",
            r.key.ticket_id,
            r.key.role,
            r.failed_attempt,
            r.reason_code,
            r.due_at.to_rfc3339()
        )?;
    }
    writeln!(out, "held ({}):", report.holds.len())?;
    for h in &report.holds {
        writeln!(
            out,
            "  {} {} in {} after {}; change its status, comment /retry or run `sortie ticket release {}` to run it again",
            h.key.ticket_id, h.key.role, h.status, h.reason_code, h.key.ticket_id
        )?;
    }
    writeln!(
        out,
        "pending write-backs ({}):",
        report.pending_writebacks.len()
    )?;
    for e in &report.pending_writebacks {
        writeln!(
            out,
            "  {} {} #{} {} -> {}: {}",
            e.key.ticket_id,
            e.key.role,
            e.stage_attempt,
            e.outcome,
            e.to_status,
            e.last_error.as_deref().unwrap_or("not yet written")
        )?;
    }
    writeln!(out, "usage per ticket and role ({}):", report.usage.len())?;
    for u in &report.usage {
        writeln!(out, "  {}", usage_line(u))?;
    }
    writeln!(out, "failing hooks ({}):", report.hook_failures.len())?;
    for h in &report.hook_failures {
        writeln!(
            out,
            "  {} {} for {} after {} attempt(s): {}",
            h.sink_id,
            serde_json::to_value(h.state)?.as_str().unwrap_or(""),
            h.event,
            h.attempts,
            h.last_error.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(out, "last verify per ticket ({}):", report.verify.len())?;
    if let Some(err) = &report.verify_error {
        writeln!(out, "  not read from the tracker: {err}")?;
    }
    for v in &report.verify {
        writeln!(out, "  {} {}", v.ticket, v.result.to_text())?;
    }
    writeln!(out, "open questions ({}):", report.questions.len())?;
    if let Some(err) = &report.questions_error {
        writeln!(out, "  not read from the tracker: {err}")?;
    }
    for q in &report.questions {
        writeln!(out, "  {}", q.to_text())?;
    }
    writeln!(out, "recent runs ({}):", report.recent_runs.len())?;
    for r in &report.recent_runs {
        let took = r
            .finished_at
            .map(|f| {
                format!(
                    "{:.1}s",
                    (f - r.started_at).num_milliseconds() as f64 / 1000.0
                )
            })
            .unwrap_or_else(|| "running".to_string());
        writeln!(
            out,
            "  {} {} #{} {} {}{} ({took}) log {}",
            r.key.ticket_id,
            r.key.role,
            r.stage_attempt,
            serde_json::to_value(r.phase)?.as_str().unwrap_or(""),
            r.outcome.as_deref().unwrap_or(""),
            r.reason_code
                .as_deref()
                .map(|c| format!(" {c}"))
                .unwrap_or_default(),
            r.log_path.as_deref().unwrap_or("-"),
        )?;
    }
    Ok(super::EXIT_OK)
}

/// One usage row of `pipeline status`: tokens by kind, and the cost when agents
/// reported one (a preset that reports tokens without a cost, such as Codex, leaves it
/// unknown, never `$0`).
fn usage_line(u: &UsageTotal) -> String {
    let mut tokens = format!("{} tokens in, {} out", u.tokens_in, u.tokens_out);
    if u.cache_read_tokens + u.cache_write_tokens > 0 {
        tokens.push_str(&format!(
            ", {} cache read, {} cache write",
            u.cache_read_tokens, u.cache_write_tokens
        ));
    }
    if u.reasoning_tokens > 0 {
        tokens.push_str(&format!(" ({} reasoning)", u.reasoning_tokens));
    }
    if u.runs_without_usage > 0 {
        if u.runs_without_usage == u.runs {
            // Nothing reported: no figure at all, never 0.
            return format!(
                "{} {}: {} run(s), usage unknown (none reported)",
                u.ticket_id, u.role, u.runs
            );
        }
        tokens = format!("at least {tokens}");
    }
    let cost = usage_cost(u);
    let unknown = match u.runs_without_usage {
        0 => String::new(),
        n => format!(" ({n} run(s) reported no usage)"),
    };
    format!(
        "{} {}: {} run(s), {tokens}{unknown}, {cost}",
        u.ticket_id, u.role, u.runs
    )
}

/// A usage row's cost: `unknown` when no run's cost is known (never `$0`), a lower
/// bound when some runs' is not.
fn usage_cost(u: &UsageTotal) -> String {
    match (u.known_cost(), u.runs_without_cost + u.runs_without_usage) {
        (None, n) => format!("cost unknown ({n} run(s) reported none)"),
        (Some(usd), 0) => format!("${usd:.4}"),
        (Some(usd), n) => format!("at least ${usd:.4} ({n} run(s) reported no cost)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(cost: f64, without: u32) -> UsageTotal {
        UsageTotal {
            ticket_id: "7".into(),
            role: "backend".into(),
            runs: 2,
            tokens_in: 1200,
            tokens_out: 80,
            cost_usd: cost,
            runs_without_cost: without,
            ..UsageTotal::default()
        }
    }

    /// Regression (#12, 4): a cost no agent reported prints as unknown, not `$0.0000`.
    #[test]
    fn an_unreported_cost_is_unknown_not_zero() {
        assert_eq!(
            usage_line(&total(0.0, 2)),
            "7 backend: 2 run(s), 1200 tokens in, 80 out, cost unknown (2 run(s) reported none)"
        );
        assert_eq!(
            usage_line(&total(0.25, 0)),
            "7 backend: 2 run(s), 1200 tokens in, 80 out, $0.2500"
        );
        assert!(
            usage_line(&total(0.25, 1)).ends_with("at least $0.2500 (1 run(s) reported no cost)")
        );
    }

    /// #36: an agent that reports no usage at all (claude-code-acp, a bare command)
    /// leaves its runs' tokens and cost unknown, never 0.
    #[test]
    fn runs_that_reported_no_usage_are_unknown_not_zero() {
        let none = UsageTotal {
            runs_without_usage: 2,
            tokens_in: 0,
            tokens_out: 0,
            ..total(0.0, 0)
        };
        assert_eq!(
            usage_line(&none),
            "7 backend: 2 run(s), usage unknown (none reported)"
        );
        let one_of_two = UsageTotal {
            runs_without_usage: 1,
            ..total(0.25, 0)
        };
        assert_eq!(
            usage_line(&one_of_two),
            "7 backend: 2 run(s), at least 1200 tokens in, 80 out (1 run(s) reported no usage), \
             at least $0.2500 (1 run(s) reported no cost)"
        );
    }
}

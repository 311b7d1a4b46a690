//! Spawning the agent process and watching it: output to the run log, timeout,
//! stall detection, cancellation, resume with a fresh-start fallback, and killing every
//! process the run started.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::orphans::{
    become_subreaper, collect_adopted_zombies, kill_all, kill_tree, observe, record, tree_cpu_ticks,
};
use super::outcome::{classify_exit, parse_result_file, AgentOutcome, Usage};
use super::presets::{EventStream, StreamOptions, SESSION_NOT_FOUND};
use super::streams::{spawn_reader, spawn_writer, summary_from_tail, Conversation, TAIL_BYTES};
use super::RunPlan;
use crate::block::{Category, NextAction};
use crate::config::AgentPreset;

/// How long a killed agent gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// The pause before another look for a run's processes, when a look could not tell an
/// adopted orphan apart (caught in `execve`).
const RESCAN_AFTER: Duration = Duration::from_millis(20);
/// How often a live run's processes are looked at and recorded for crash recovery.
const SUPERVISE_EVERY: Duration = Duration::from_secs(1);
/// How long an ACP agent gets to end its turn after `session/cancel` before it is killed.
const ACP_CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long an ACP agent whose turn is over may take to exit by itself once its stdin is
/// closed (saving its session) before it is stopped.
const ACP_EXIT_GRACE: Duration = Duration::from_secs(5);

/// What to run and with which `SORTIE_*` variables.
#[derive(Debug, Clone)]
pub struct AgentSpec<'a> {
    /// The plan (argv, prompt, directories, limits).
    pub plan: &'a RunPlan,
    /// `SORTIE_*` variables describing the ticket and run.
    pub vars: BTreeMap<String, String>,
}

/// Why a run was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// The claim's lease was lost (expired and taken, or released by force).
    LeaseLost,
    /// The ticket left the stage or became terminal.
    TicketLeftStage,
    /// sortie is shutting down.
    Shutdown,
}

/// The end of a run that was not cancelled.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// What happened.
    pub outcome: AgentOutcome,
    /// Where stdout and stderr went.
    pub log_path: PathBuf,
    /// Exit status, when the process exited by itself.
    pub exit_code: Option<i32>,
    /// Wall time.
    pub duration: Duration,
    /// Tokens and cost, when the agent's CLI preset reports them on its event stream; also
    /// after a failure, a timeout or a stall, from what the stream reported until then.
    pub usage: Option<Usage>,
    /// The agent's session (Claude Code `session_id`, Codex `thread_id`), to resume on the
    /// next attempt of the same ticket and role.
    pub session_id: Option<String>,
    /// Things the runner did that a person reading the run should know (a resume that fell
    /// back to a fresh start). Also written to the run log.
    pub notes: Vec<String>,
    /// How the agent's session began: new, resumed, or new after a resume that failed;
    /// `None` when the run had no session (preset `command`, or the agent never started one).
    pub session_start: Option<SessionStart>,
    /// The latest rate-limit report of each limit type the agent's stream carried
    /// (Claude Code's `rate_limit_event`); empty when it carried none.
    pub rate_limits: Vec<crate::rate_limit::RateLimit>,
}

/// How a run's agent session began (issue #36): said in the tick report, so that a retry
/// that lost its context is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStart {
    /// A new session: nothing to resume.
    New,
    /// The previous attempt's session, resumed (`--resume`, `codex exec resume`,
    /// ACP `session/load`).
    Resumed,
    /// Resuming was asked for and failed (the agent no longer had the session, refused the
    /// load, or does not offer it): a new session instead.
    FellBack,
}

impl SessionStart {
    /// The report spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStart::New => "new",
            SessionStart::Resumed => "resumed",
            SessionStart::FellBack => "fell_back",
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// It ran to an outcome (which may be a failure, a timeout or a stall).
    Finished(RunReport),
    /// It was cancelled; nothing must be written back.
    Cancelled {
        /// The run log, kept.
        log_path: PathBuf,
        /// Tokens and cost the stream reported before the cancel (to record, not to bill twice).
        usage: Option<Usage>,
        /// The agent's session, as far as the stream told it.
        session_id: Option<String>,
        /// The rate-limit reports the stream carried before the cancel.
        rate_limits: Vec<crate::rate_limit::RateLimit>,
    },
}

/// The file in a run's directory that keeps the agent's session for the next attempt.
const SESSION_FILE: &str = "session.json";

/// The agent session a run ended with, kept in its run directory.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionRecord {
    /// Claude Code's `session_id` or Codex's `thread_id`.
    pub session_id: String,
    /// Usage as the CLI reported it at the end (Codex after a resume: the whole thread's),
    /// the baseline a later resume of this session subtracts.
    pub reported_usage: Option<Usage>,
}

fn write_session_record(run_dir: &Path, record: &SessionRecord) -> std::io::Result<()> {
    let text = serde_json::to_string(record).map_err(std::io::Error::other)?;
    std::fs::write(run_dir.join(SESSION_FILE), text)
}

/// The session the run whose directory is `run_dir` ended with, if it kept one.
pub fn read_session_record(run_dir: &Path) -> Option<SessionRecord> {
    let text = std::fs::read_to_string(run_dir.join(SESSION_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// What ended the watch over one process.
enum Watch {
    Exited(Option<i32>),
    /// An ACP conversation ended (its turn stopped, or it failed); the agent still runs.
    ConversationOver,
    Cancelled,
    TimedOut,
    Stalled,
    /// An ACP agent did not finish its handshake within `handshake_timeout`.
    HandshakeTimedOut,
    /// A limit of `budgets:` was reached while it ran.
    OverBudget,
    /// It ended by itself, but its usage (as last reported) is over a limit.
    EndedOverBudget,
}

/// How a run that ended by itself ends once its budget is checked against its whole
/// usage (`usage`: every attempt's, as last reported): over a limit, it is
/// [`Watch::EndedOverBudget`], whatever its agent said (issue #52: a stream that
/// reports everything at once, or a limit reached just before the process exited, must
/// not slip past the watch). Other ends are kept.
fn over_budget_at_end(
    end: Watch,
    budget: Option<&crate::budget::BudgetWatch>,
    usage: Option<&Usage>,
) -> Watch {
    let (Watch::Exited(_) | Watch::ConversationOver, Some(watch)) = (&end, budget) else {
        return end;
    };
    if let Some(usage) = usage {
        watch.observe(usage);
    }
    match watch.tripped() {
        Some(_) => Watch::EndedOverBudget,
        None => end,
    }
}

/// One process run: how it ended and what it printed.
struct Attempt {
    end: Watch,
    exit_code: Option<i32>,
    stream: Option<EventStream>,
    output_tail: String,
    err_tail: String,
}

/// Run the agent described by `spec` until it ends, times out, stalls or `cancel` fires.
/// `on_spawn` receives the agent's process id (also its process group id), once per process
/// started (twice when a resume falls back to a fresh start).
///
/// With `plan.resume_command`, the previous session is resumed; when the CLI no longer has
/// it (`agent.session_not_found`), the run starts afresh with `plan.command` and a note.
/// Whatever ends the run, every process it started is killed (see `orphans::kill_tree`).
pub async fn run_agent(
    spec: AgentSpec<'_>,
    cancel: CancellationToken,
    mut on_spawn: impl FnMut(u32),
) -> RunEnd {
    let plan = spec.plan;
    let started = Instant::now();
    let log_path = plan.run_dir.join("agent.log");
    let result_path = plan.run_dir.join("result.yaml");
    let prompt_path = plan.run_dir.join("prompt.md");
    let finished = |outcome: AgentOutcome,
                    exit_code: Option<i32>,
                    usage: Option<Usage>,
                    session_id: Option<String>,
                    notes: Vec<String>| {
        RunEnd::Finished(RunReport {
            outcome,
            log_path: log_path.clone(),
            exit_code,
            duration: started.elapsed(),
            usage,
            session_id,
            notes,
            session_start: None,
            rate_limits: Vec::new(),
        })
    };

    let prepared = prepare_dirs(plan, &prompt_path).and_then(|()| match &plan.sandbox {
        Some(sandbox) => sandbox.prepare(),
        None => Ok(()),
    });
    if let Err(err) = prepared {
        return finished(
            AgentOutcome::failure(
                "workspace.unavailable",
                Category::Transient,
                NextAction::Retry,
                err.to_string(),
            ),
            None,
            None,
            None,
            Vec::new(),
        );
    }
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
    {
        Ok(f) => Arc::new(Mutex::new(f)),
        Err(err) => {
            return finished(
                AgentOutcome::failure(
                    "workspace.unavailable",
                    Category::Transient,
                    NextAction::Retry,
                    format!("cannot open {}: {err}", log_path.display()),
                ),
                None,
                None,
                None,
                Vec::new(),
            )
        }
    };

    let mut notes = Vec::new();
    let mut spent: Option<Usage> = None;
    let mut options = plan.stream.clone();
    let mut resuming = plan.resume_command.is_some();
    let mut command = plan.resume_command.as_ref().unwrap_or(&plan.command);
    let deadline = started + plan.timeout;
    let attempt = loop {
        let attempt = match run_process(
            &spec,
            command,
            &options,
            &log,
            &cancel,
            deadline,
            &mut on_spawn,
        )
        .await
        {
            Ok(attempt) => attempt,
            Err(outcome) => return finished(outcome, None, None, None, notes),
        };
        let lost_session = resuming
            && matches!(attempt.end, Watch::Exited(_))
            && !result_path.exists()
            && attempt.stream.as_ref().is_some_and(|s| {
                matches!(
                    s.outcome(attempt.exit_code, &attempt.err_tail),
                    AgentOutcome::Failure { ref reason_code, .. } if reason_code == SESSION_NOT_FOUND
                )
            });
        if !lost_session {
            if let Some(stream) = &attempt.stream {
                notes.extend(stream.notes());
            }
            break attempt;
        }
        let note = format!(
            "the agent no longer has session {}; starting a fresh session",
            plan.resume.as_deref().unwrap_or("?")
        );
        tracing::warn!(session = plan.resume.as_deref().unwrap_or(""), "{note}");
        {
            use std::io::Write;
            let mut file = log.lock().expect("log lock");
            let _ = writeln!(file, "\n[sortie] {note}\n");
        }
        notes.push(note);
        if let Some(usage) = attempt.stream.as_ref().and_then(EventStream::usage) {
            spent.get_or_insert_with(Usage::default).add(&usage);
        }
        command = &plan.command;
        resuming = false;
        // A fresh thread reports its own usage: nothing to subtract.
        options.usage_baseline = None;
    };

    let Attempt {
        end,
        exit_code,
        stream,
        output_tail,
        err_tail,
    } = attempt;
    // A reader that did not finish leaves its preset's stream unread, hence incomplete.
    let stream = stream.or_else(|| EventStream::with_options(plan.preset, &options));
    let usage = match (spent, stream.as_ref().and_then(EventStream::usage)) {
        (Some(mut a), Some(b)) => {
            a.add(&b);
            Some(a)
        }
        (a, b) => a.or(b),
    };
    let session_id = stream
        .as_ref()
        .and_then(EventStream::session_id)
        .map(str::to_string);
    let rate_limits = stream
        .as_ref()
        .map(EventStream::rate_limits)
        .unwrap_or_default();
    if let Some(session_id) = &session_id {
        let record = SessionRecord {
            session_id: session_id.clone(),
            reported_usage: stream.as_ref().and_then(EventStream::reported_usage),
        };
        if let Err(err) = write_session_record(&plan.run_dir, &record) {
            tracing::warn!(%err, "could not keep the agent's session id");
        }
    }
    let session_start = match stream.as_ref().and_then(EventStream::session_start) {
        Some(start) => Some(start),
        None if session_id.is_none() => None,
        None if plan.resume_command.is_none() => Some(SessionStart::New),
        None if resuming => Some(SessionStart::Resumed),
        None => Some(SessionStart::FellBack),
    };
    // ACP: a handshake left unanswered, or a turn that stopped other than `end_turn`.
    let waited = match end {
        Watch::TimedOut => Some(plan.timeout),
        Watch::Stalled => plan.stall_timeout,
        Watch::HandshakeTimedOut => Some(plan.handshake_timeout),
        _ => None,
    };
    let handshake = waited.and_then(|waited| {
        let waited = format!("{}s", waited.as_secs());
        stream.as_ref()?.handshake_failure(&waited)
    });
    let decisive = stream.as_ref().and_then(EventStream::decisive_outcome);
    let end = over_budget_at_end(end, options.budget.as_ref(), usage.as_ref());
    let outcome = match (end, handshake, decisive) {
        (Watch::Cancelled, ..) => {
            return RunEnd::Cancelled {
                log_path,
                usage,
                session_id,
                rate_limits,
            }
        }
        (_, Some(handshake), _) => handshake,
        // The stream was not recovered to say which request went unanswered.
        (Watch::HandshakeTimedOut, None, _) => AgentOutcome::failure(
            "agent.acp_handshake",
            Category::Transient,
            NextAction::Retry,
            format!(
                "the agent did not finish the ACP handshake within {}s and was killed; log: {}",
                plan.handshake_timeout.as_secs(),
                log_path.display()
            ),
        ),
        (Watch::TimedOut, ..) => AgentOutcome::failure(
            "agent.timeout",
            Category::Transient,
            NextAction::Retry,
            format!(
                "agent ran longer than {}s and was killed; log: {}",
                plan.timeout.as_secs(),
                log_path.display()
            ),
        ),
        (Watch::Stalled, ..) if plan.preset == AgentPreset::Acp => AgentOutcome::failure(
            "agent.stalled",
            Category::Transient,
            NextAction::Retry,
            format!(
                "the agent sent no ACP message for {}s, and it was killed; log: {}",
                plan.stall_timeout.unwrap_or_default().as_secs(),
                log_path.display()
            ),
        ),
        (Watch::Stalled, ..) => AgentOutcome::failure(
            "agent.stalled",
            Category::Transient,
            NextAction::Retry,
            format!(
                "agent printed nothing and its processes used no CPU for {}s, and it was \
                 killed; log: {}",
                plan.stall_timeout.unwrap_or_default().as_secs(),
                log_path.display()
            ),
        ),
        // Stopped like a stall: the block names the limit and the figures, and the
        // usage read until then is recorded with the run.
        (Watch::OverBudget, ..) => AgentOutcome::failure(
            "budget.exceeded",
            Category::Policy,
            NextAction::Escalate,
            format!(
                "{}; the agent was stopped; log: {}",
                crate::budget::stop_detail(options.budget.as_ref()),
                log_path.display()
            ),
        ),
        // Over a limit by its last report (usage reported all at once, at the end): its
        // result is not handed on.
        (Watch::EndedOverBudget, ..) => AgentOutcome::failure(
            "budget.exceeded",
            Category::Policy,
            NextAction::Escalate,
            format!(
                "{}; the agent had already ended, and its result is not handed on; log: {}",
                crate::budget::stop_detail(options.budget.as_ref()),
                log_path.display()
            ),
        ),
        (Watch::Exited(_) | Watch::ConversationOver, _, Some(decisive)) => decisive,
        (Watch::Exited(_) | Watch::ConversationOver, _, None) => {
            match std::fs::read_to_string(&result_path) {
                Ok(text) => parse_result_file(&text).unwrap_or_else(|err| {
                    AgentOutcome::failure(
                        "agent.bad_result",
                        Category::Permanent,
                        NextAction::Escalate,
                        err.to_string(),
                    )
                }),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => match &stream {
                    Some(stream) => stream.outcome(exit_code, &err_tail),
                    None => classify_exit(exit_code, &output_tail),
                },
                Err(err) => AgentOutcome::failure(
                    "agent.bad_result",
                    Category::Permanent,
                    NextAction::Escalate,
                    format!("cannot read result file {}: {err}", result_path.display()),
                ),
            }
        }
    };
    let mut end = finished(outcome, exit_code, usage, session_id, notes);
    if let RunEnd::Finished(report) = &mut end {
        report.session_start = session_start;
        report.rate_limits = rate_limits;
    }
    end
}

/// Start `command` and watch it to its end; `Err` is the outcome of a process that could
/// not start.
async fn run_process(
    spec: &AgentSpec<'_>,
    command: &[String],
    options: &StreamOptions,
    log: &Arc<Mutex<std::fs::File>>,
    cancel: &CancellationToken,
    deadline: Instant,
    on_spawn: &mut impl FnMut(u32),
) -> Result<Attempt, AgentOutcome> {
    let plan = spec.plan;
    let prompt_path = plan.run_dir.join("prompt.md");
    let result_path = plan.run_dir.join("result.yaml");
    let Some((program, args)) = command.split_first() else {
        return Err(spawn_failed("", "agent.command is empty"));
    };
    let mut cmd = match &plan.sandbox {
        None => {
            let mut cmd = Command::new(program);
            for name in plan
                .env_remove
                .iter()
                .filter(|n| !plan.env.contains_key(*n))
            {
                cmd.env_remove(name);
            }
            cmd.args(args)
                .envs(&plan.env)
                .envs(&spec.vars)
                .env("SORTIE_PROMPT_FILE", &prompt_path)
                .env("SORTIE_RESULT_FILE", &result_path);
            cmd
        }
        // Nothing of sortie's environment goes in but what the sandbox names.
        Some(sandbox) => {
            let mut vars = spec.vars.clone();
            vars.insert(
                "SORTIE_PROMPT_FILE".into(),
                prompt_path.display().to_string(),
            );
            vars.insert(
                "SORTIE_RESULT_FILE".into(),
                result_path.display().to_string(),
            );
            sandbox.command(
                program,
                args,
                &plan.workspace,
                &plan.run_dir,
                &plan.env,
                &vars,
            )
        }
    };
    cmd.current_dir(&plan.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    become_subreaper();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => return Err(spawn_failed(program, &err.to_string())),
    };
    let pid = child.id().unwrap_or(0);
    let run_id = spec.vars.get("SORTIE_RUN_ID").map(String::as_str);
    // Recorded before the ledger names the agent, so a crash recovery that finds the
    // agent's pid also finds its start time.
    let mut recorded = observe(pid, None);
    record(&plan.run_dir, &recorded);
    on_spawn(pid);

    // An ACP agent converses over stdin and stdout for the whole run, and keeps running
    // once its turn is over; the other presets read the prompt on stdin and exit.
    let acp = plan.preset == AgentPreset::Acp;
    let conversation_over = Arc::new(Notify::new());
    let cancel_turn = CancellationToken::new();
    let handshaken = CancellationToken::new();
    let close_stdin = CancellationToken::new();
    let handshake_deadline = Instant::now() + plan.handshake_timeout;
    let mut to_agent = None;
    if let Some(mut stdin) = child.stdin.take() {
        if acp {
            to_agent = Some(spawn_writer(stdin, log.clone(), close_stdin.clone()));
        } else {
            let prompt = plan.prompt.clone();
            // An agent that never reads stdin must not block us: write in the background
            // and ignore a closed pipe.
            tokio::spawn(async move {
                let _ = stdin.write_all(prompt.as_bytes()).await;
            });
        }
    }
    let last_output = Arc::new(Mutex::new(Instant::now()));
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_BYTES)));
    let err_tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_BYTES)));
    // An ACP agent is alive when it speaks the protocol: what it writes on stderr, like
    // the CPU its processes use, says nothing of whether its model still answers.
    let err_output = if acp {
        Arc::new(Mutex::new(Instant::now()))
    } else {
        last_output.clone()
    };
    let readers = [
        child.stdout.take().map(|out| {
            let mut options = options.clone();
            options.acp.prompt.clone_from(&plan.prompt);
            options.acp.workspace.clone_from(&plan.workspace);
            options.acp.result_file.clone_from(&result_path);
            let stream = EventStream::with_options(plan.preset, &options);
            let conversation = to_agent.take().map(|to_agent| Conversation {
                to_agent,
                over: conversation_over.clone(),
                cancel: cancel_turn.clone(),
                handshaken: handshaken.clone(),
            });
            spawn_reader(
                out,
                log.clone(),
                last_output.clone(),
                tail.clone(),
                stream,
                conversation,
            )
        }),
        child
            .stderr
            .take()
            .map(|err| spawn_reader(err, log.clone(), err_output, err_tail.clone(), None, None)),
    ];

    // CPU ticks of the agent's descendants at the last look: growth is liveness.
    let mut tree_cpu = tree_cpu_ticks(pid, run_id);
    // ACP: silence is judged once the handshake is over; until then the handshake's own
    // bound holds (an agent that relaunches itself or loads a long session starts slowly).
    let mut handshake_over = !acp;
    let mut next_look = Instant::now() + SUPERVISE_EVERY;
    let end = loop {
        let stall_at = plan
            .stall_timeout
            .filter(|_| handshake_over)
            .map(|stall| *last_output.lock().expect("last_output lock") + stall);
        tokio::select! {
            status = child.wait() => break Watch::Exited(status.ok().and_then(|s| s.code())),
            _ = conversation_over.notified(), if acp => break Watch::ConversationOver,
            _ = cancel.cancelled() => break Watch::Cancelled,
            _ = crate::budget::limit_reached(options.budget.as_ref()) => break Watch::OverBudget,
            _ = tokio::time::sleep_until(deadline) => break Watch::TimedOut,
            // Its own bound, whatever the stall timeout (which may be off or long).
            _ = tokio::time::sleep_until(handshake_deadline), if acp && !handshaken.is_cancelled() => {
                if !handshaken.is_cancelled() {
                    break Watch::HandshakeTimedOut;
                }
            }
            _ = tokio::time::sleep_until(next_look) => {
                next_look = Instant::now() + SUPERVISE_EVERY;
                let seen = observe(pid, run_id);
                if seen != recorded {
                    record(&plan.run_dir, &seen);
                    recorded = seen;
                }
                collect_adopted_zombies();
            }
            _ = handshaken.cancelled(), if !handshake_over => {
                handshake_over = true;
                *last_output.lock().expect("last_output lock") = Instant::now();
            }
            _ = sleep_until_opt(stall_at) => {
                let quiet_since = *last_output.lock().expect("last_output lock");
                if plan.stall_timeout.is_some_and(|stall| quiet_since.elapsed() >= stall) {
                    // Silent, but a tool call (a compile, a test run) may be working.
                    let now_cpu = tree_cpu_ticks(pid, run_id);
                    if !acp && now_cpu > tree_cpu {
                        tree_cpu = now_cpu;
                        *last_output.lock().expect("last_output lock") = Instant::now();
                        continue;
                    }
                    break Watch::Stalled;
                }
            }
        }
    };
    // Whatever ended the run, nothing it started may outlive it: its process group, its
    // descendants in sessions of their own, and anything carrying its run id.
    let exit_code = match end {
        Watch::Exited(code) => {
            kill_group(pid, Signal::SIGKILL);
            kill_remains(run_id).await;
            code
        }
        Watch::ConversationOver => {
            // The turn is over: end the conversation (stdin closed) and let the agent exit
            // by itself, saving its session for a later `session/load`, before stopping
            // whatever is left.
            close_stdin.cancel();
            let _ = tokio::time::timeout(ACP_EXIT_GRACE, child.wait()).await;
            terminate(&mut child, pid, run_id).await
        }
        _ => {
            if acp {
                // Ask for the turn to end before the process does (the agent may save its
                // session); a turn that does not end in time is ended by the kill.
                cancel_turn.cancel();
                let _ = tokio::time::timeout(ACP_CANCEL_GRACE, async {
                    tokio::select! {
                        _ = conversation_over.notified() => {}
                        _ = child.wait() => {}
                    }
                })
                .await;
            }
            terminate(&mut child, pid, run_id).await
        }
    };
    let mut stream = None;
    for reader in readers.into_iter().flatten() {
        if let Ok(Ok(Some(parsed))) = tokio::time::timeout(Duration::from_secs(2), reader).await {
            stream = Some(parsed);
        }
    }
    let output_tail = summary_from_tail(&tail.lock().expect("tail lock"));
    let err_tail = summary_from_tail(&err_tail.lock().expect("tail lock"));
    Ok(Attempt {
        end,
        exit_code,
        stream,
        output_tail,
        err_tail,
    })
}

fn prepare_dirs(plan: &RunPlan, prompt_path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(&plan.workspace)?;
    std::fs::create_dir_all(&plan.run_dir)?;
    std::fs::write(prompt_path, &plan.prompt)
}

fn spawn_failed(program: &str, err: &str) -> AgentOutcome {
    AgentOutcome::failure(
        "agent.spawn_failed",
        Category::Permanent,
        NextAction::Escalate,
        format!("cannot start agent `{program}`: {err}"),
    )
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn kill_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        if raw > 0 {
            let _ = killpg(Pid::from_raw(raw), signal);
        }
    }
}

/// SIGTERM the agent's process group and tree, wait a grace period, then SIGKILL them.
/// The tree is signalled before the agent can exit and orphan it; processes it started
/// during the grace are found by their run id.
async fn terminate(child: &mut Child, pid: u32, run_id: Option<&str>) -> Option<i32> {
    kill_tree(pid, run_id, Signal::SIGTERM);
    kill_group(pid, Signal::SIGTERM);
    let status = match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            kill_tree(pid, run_id, Signal::SIGKILL);
            kill_group(pid, Signal::SIGKILL);
            child.wait().await.ok()
        }
    };
    kill_group(pid, Signal::SIGKILL);
    kill_remains(run_id).await;
    status.and_then(|s| s.code())
}

/// Once the agent was waited for (its pid may already name another process): SIGKILL what
/// is left of the run, its descendants having been re-parented to sortie. A process caught
/// in execve while it was looked at shows an empty environment (its old memory is gone, the
/// new one not yet set up), so it could not be told apart by its mark; another look a
/// moment later finds it.
async fn kill_remains(run_id: Option<&str>) {
    if kill_all(0, run_id) {
        tokio::time::sleep(RESCAN_AFTER).await;
        kill_all(0, run_id);
    }
}

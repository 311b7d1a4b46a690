//! Spawning the agent process and watching it: output to the run log, timeout,
//! stall detection, cancellation, and killing the whole process group.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::outcome::{classify_exit, parse_result_file, AgentOutcome, Usage};
use super::presets::EventStream;
use super::RunPlan;
use crate::block::{Category, NextAction};

/// How long a killed agent gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// Output kept in memory for the summary of an agent that wrote no result file.
const TAIL_BYTES: usize = 4096;
/// Lines of that tail that make the summary.
const SUMMARY_LINES: usize = 20;

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
    /// Tokens and cost, when the agent's CLI preset reports them on its event stream.
    pub usage: Option<Usage>,
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
    },
}

/// Run the agent described by `spec` until it ends, times out, stalls or `cancel` fires.
/// `on_spawn` receives the agent's process id (also its process group id).
pub async fn run_agent(
    spec: AgentSpec<'_>,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(u32),
) -> RunEnd {
    let plan = spec.plan;
    let started = Instant::now();
    let log_path = plan.run_dir.join("agent.log");
    let result_path = plan.run_dir.join("result.yaml");
    let prompt_path = plan.run_dir.join("prompt.md");
    let finished = |outcome: AgentOutcome, exit_code: Option<i32>, usage: Option<Usage>| {
        RunEnd::Finished(RunReport {
            outcome,
            log_path: log_path.clone(),
            exit_code,
            duration: started.elapsed(),
            usage,
        })
    };

    if let Err(err) = prepare_dirs(plan, &prompt_path) {
        return finished(
            AgentOutcome::failure(
                "workspace.unavailable",
                Category::Transient,
                NextAction::Retry,
                err.to_string(),
            ),
            None,
            None,
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
            )
        }
    };

    let Some((program, args)) = plan.command.split_first() else {
        return finished(spawn_failed("", "agent.command is empty"), None, None);
    };
    let mut command = Command::new(program);
    for name in plan
        .env_remove
        .iter()
        .filter(|n| !plan.env.contains_key(*n))
    {
        command.env_remove(name);
    }
    command
        .args(args)
        .current_dir(&plan.workspace)
        .envs(&plan.env)
        .envs(&spec.vars)
        .env("SORTIE_PROMPT_FILE", &prompt_path)
        .env("SORTIE_RESULT_FILE", &result_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return finished(spawn_failed(program, &err.to_string()), None, None),
    };
    let pid = child.id().unwrap_or(0);
    on_spawn(pid);

    if let Some(mut stdin) = child.stdin.take() {
        let prompt = plan.prompt.clone();
        // An agent that never reads stdin must not block us: write in the background
        // and ignore a closed pipe.
        tokio::spawn(async move {
            let _ = stdin.write_all(prompt.as_bytes()).await;
        });
    }
    let last_output = Arc::new(Mutex::new(Instant::now()));
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_BYTES)));
    let err_tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_BYTES)));
    let readers = [
        child.stdout.take().map(|out| {
            let stream = EventStream::new(plan.preset);
            spawn_reader(out, log.clone(), last_output.clone(), tail.clone(), stream)
        }),
        child.stderr.take().map(|err| {
            spawn_reader(
                err,
                log.clone(),
                last_output.clone(),
                err_tail.clone(),
                None,
            )
        }),
    ];

    let deadline = started + plan.timeout;
    let end = loop {
        let stall_at = plan
            .stall_timeout
            .map(|stall| *last_output.lock().expect("last_output lock") + stall);
        tokio::select! {
            status = child.wait() => break Watch::Exited(status.ok().and_then(|s| s.code())),
            _ = cancel.cancelled() => break Watch::Cancelled,
            _ = tokio::time::sleep_until(deadline) => break Watch::TimedOut,
            _ = sleep_until_opt(stall_at) => {
                let quiet_since = *last_output.lock().expect("last_output lock");
                if plan.stall_timeout.is_some_and(|stall| quiet_since.elapsed() >= stall) {
                    break Watch::Stalled;
                }
            }
        }
    };
    // Whatever ended the run, nothing it started may outlive it.
    let exit_code = match end {
        Watch::Exited(code) => {
            kill_group(pid, Signal::SIGKILL);
            code
        }
        _ => terminate(&mut child, pid).await,
    };
    let mut stream = None;
    for reader in readers.into_iter().flatten() {
        if let Ok(Ok(Some(parsed))) = tokio::time::timeout(Duration::from_secs(2), reader).await {
            stream = Some(parsed);
        }
    }
    // A reader that did not finish leaves its preset's stream unread, hence incomplete.
    let stream = stream.or_else(|| EventStream::new(plan.preset));
    let usage = stream.as_ref().and_then(EventStream::usage);
    let output_tail = summary_from_tail(&tail.lock().expect("tail lock"));
    let outcome = match end {
        Watch::Cancelled => return RunEnd::Cancelled { log_path },
        Watch::TimedOut => AgentOutcome::failure(
            "agent.timeout",
            Category::Transient,
            NextAction::Retry,
            format!(
                "agent ran longer than {}s and was killed; log: {}",
                plan.timeout.as_secs(),
                log_path.display()
            ),
        ),
        Watch::Stalled => AgentOutcome::failure(
            "agent.stalled",
            Category::Transient,
            NextAction::Retry,
            format!(
                "agent printed nothing for {}s and was killed; log: {}",
                plan.stall_timeout.unwrap_or_default().as_secs(),
                log_path.display()
            ),
        ),
        Watch::Exited(code) => match std::fs::read_to_string(&result_path) {
            Ok(text) => parse_result_file(&text).unwrap_or_else(|err| {
                AgentOutcome::failure(
                    "agent.bad_result",
                    Category::Permanent,
                    NextAction::Escalate,
                    err.to_string(),
                )
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => match &stream {
                Some(stream) => stream.outcome(
                    code,
                    &summary_from_tail(&err_tail.lock().expect("tail lock")),
                ),
                None => classify_exit(code, &output_tail),
            },
            Err(err) => AgentOutcome::failure(
                "agent.bad_result",
                Category::Permanent,
                NextAction::Escalate,
                format!("cannot read result file {}: {err}", result_path.display()),
            ),
        },
    };
    finished(outcome, exit_code, usage)
}

enum Watch {
    Exited(Option<i32>),
    Cancelled,
    TimedOut,
    Stalled,
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

/// Copy `stream` to the log, keep its tail, and feed `events` (a CLI preset's stdout parser),
/// which the task hands back when the stream closes.
fn spawn_reader(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    log: Arc<Mutex<std::fs::File>>,
    last_output: Arc<Mutex<Instant>>,
    tail: Arc<Mutex<VecDeque<u8>>>,
    mut events: Option<EventStream>,
) -> tokio::task::JoinHandle<Option<EventStream>> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 8192];
        loop {
            let n = match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            *last_output.lock().expect("last_output lock") = Instant::now();
            {
                use std::io::Write;
                let mut file = log.lock().expect("log lock");
                let _ = file.write_all(&buf[..n]);
            }
            {
                let mut tail = tail.lock().expect("tail lock");
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(TAIL_BYTES);
                tail.drain(..excess);
            }
            if let Some(events) = &mut events {
                events.feed(&buf[..n]);
            }
        }
        if let Some(events) = &mut events {
            events.end();
        }
        events
    })
}

fn summary_from_tail(tail: &VecDeque<u8>) -> String {
    let bytes: Vec<u8> = tail.iter().copied().collect();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let start = lines.len().saturating_sub(SUMMARY_LINES);
    lines[start..].join("\n")
}

fn kill_group(pid: u32, signal: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        if raw > 0 {
            let _ = killpg(Pid::from_raw(raw), signal);
        }
    }
}

/// SIGTERM the agent's process group, wait a grace period, then SIGKILL it.
async fn terminate(child: &mut Child, pid: u32) -> Option<i32> {
    kill_group(pid, Signal::SIGTERM);
    let status = match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            kill_group(pid, Signal::SIGKILL);
            child.wait().await.ok()
        }
    };
    kill_group(pid, Signal::SIGKILL);
    status.and_then(|s| s.code())
}

//! After the agent says success: the stage's `verify` commands decide whether it was
//! (issue #33). All pass: the success stands, with each check in the block's
//! `evidence`. One fails: a `verify.failed` failure (`verify.timeout` past its limit)
//! naming the command, with the tail of its output in the detail, which the next
//! attempt's prompt shows as its last failure. One cannot start: `verify.cannot_start`,
//! permanent, whatever `retry_with_output` says (issue #52).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::verify::{run_checks, CheckRun, VerifyEnv};
use crate::agent::{AgentOutcome, RunPlan};
use crate::block::{Category, CheckEvidence, NextAction};
use crate::config::Verify;
use crate::ledger::{Claim, Ledger, RunPhase};

/// The reason code of a `verify` command that failed.
pub const VERIFY_FAILED: &str = "verify.failed";
/// The reason code of a `verify` command killed at its time limit.
pub const VERIFY_TIMEOUT: &str = "verify.timeout";
/// The reason code of a `verify` command that could not be started (not installed, not
/// executable, not there in the sandbox): a permanent failure, never retried.
pub const VERIFY_CANNOT_START: &str = "verify.cannot_start";
/// Characters of a failing command's output kept in the failure's detail (the tail).
const DETAIL_OUTPUT_CHARS: usize = 3000;

/// Run `verify` in the run's workspace with the agent's environment rules (`vars`:
/// the run's `SORTIE_*` variables); `outcome` as it stands after them, and the checks
/// as evidence. Only a success is verified.
pub(super) async fn verify(
    verify: &Verify,
    plan: &RunPlan,
    vars: &BTreeMap<String, String>,
    cancel: &tokio_util::sync::CancellationToken,
    outcome: AgentOutcome,
) -> (AgentOutcome, Vec<CheckEvidence>) {
    if !outcome.is_success() {
        return (outcome, Vec::new());
    }
    let mut env = vars.clone();
    env.extend(plan.env.clone());
    let runs = run_checks(
        &verify.commands,
        VerifyEnv {
            dir: &plan.workspace,
            env: &env,
            env_remove: &plan.env_remove,
            timeout: verify.timeout,
            cancel: Some(cancel),
            sandbox: plan.sandbox.as_ref(),
        },
    )
    .await;
    let evidence = runs.iter().map(evidence).collect();
    let Some(failed) = runs.iter().find(|r| !r.passed()) else {
        tracing::info!(checks = runs.len(), "verify passed");
        return (outcome, evidence);
    };
    tracing::info!(command = %failed.command, exit_code = ?failed.exit_code, timed_out = failed.timed_out, "verify failed");
    // A command that cannot start is the config's problem (or the machine's): running
    // the agent again cannot fix it (issue #52).
    let (category, next) = if verify.retry_with_output && failed.spawn_error.is_none() {
        (Category::Transient, NextAction::Retry)
    } else {
        (Category::Permanent, NextAction::Manual)
    };
    let reason = if failed.spawn_error.is_some() {
        VERIFY_CANNOT_START
    } else if failed.timed_out {
        VERIFY_TIMEOUT
    } else {
        VERIFY_FAILED
    };
    (
        AgentOutcome::failure(reason, category, next, detail(failed, verify, runs.len())),
        evidence,
    )
}

/// What the failed check was, how it ended, and the tail of what it printed.
fn detail(run: &CheckRun, verify: &Verify, position: usize) -> String {
    let how = match (&run.spawn_error, run.timed_out, run.exit_code) {
        (Some(why), _, _) => {
            return format!(
                "verify command {position} of {}, `{}`, {why}; this is the config's problem or \
                 this machine's, not the agent's work: install the program, or change the \
                 stage's `verify.commands` (`sortie pipeline validate` checks them), then move \
                 the ticket back",
                verify.commands.len(),
                run.command,
            )
        }
        (None, true, _) => format!(
            "did not finish within {} s and was killed with its processes",
            verify.timeout.as_secs()
        ),
        (None, false, Some(code)) => format!("exited with {code}"),
        (None, false, None) => "was stopped by a signal".to_string(),
    };
    let mut text = format!(
        "the agent reported success, but verify command {position} of {}, `{}`, {how} after {:.1} s",
        verify.commands.len(),
        run.command,
        run.duration.as_secs_f64()
    );
    if let Some(tests) = run.tests {
        text.push_str(&format!(
            " ({} passed, {} failed)",
            tests.passed, tests.failed
        ));
    }
    let output = run.output.trim_end();
    if !output.is_empty() {
        text.push_str(".\nIts output ends with:\n\n");
        text.push_str(&crate::tracker::pulls::tail_excerpt(
            output,
            DETAIL_OUTPUT_CHARS,
        ));
    }
    text
}

fn evidence(run: &CheckRun) -> CheckEvidence {
    let result = if run.cancelled {
        "cancelled"
    } else if run.timed_out {
        "timed_out"
    } else if run.passed() {
        "passed"
    } else {
        "failed"
    };
    CheckEvidence {
        command: run.command.clone(),
        result: result.to_string(),
        exit_code: run.exit_code,
        duration_seconds: (run.duration.as_secs_f64() * 1000.0).round() / 1000.0,
        tests: run.tests,
    }
}

/// The file in a run's directory saying its agent finished with a success, written
/// before the checks run: a crash during them (or before the outcome is stored) is
/// recovered by the next claim re-running the checks, never the agent.
const AGENT_DONE: &str = "agent-done.json";

/// What an agent's success was, kept while it is verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct AgentDone {
    /// The run whose agent it was.
    pub run_id: String,
    /// Its stage attempt.
    pub stage_attempt: u32,
    /// The agent's summary.
    pub summary: String,
    /// The agent's artifacts.
    pub artifacts: BTreeMap<String, String>,
    /// The worktree's commit and uncommitted digest before the agent ran (its no-work
    /// and change baseline), with `workspace.git`.
    pub start: Option<(String, String)>,
    /// The agent's log.
    pub log_path: PathBuf,
    /// The agent's wall time, seconds.
    pub duration_seconds: f64,
}

impl AgentDone {
    /// The success it was.
    pub fn outcome(&self) -> AgentOutcome {
        AgentOutcome::Success {
            summary: self.summary.clone(),
            artifacts: self.artifacts.clone(),
        }
    }
}

/// Keep `done` in `run_dir` (tmp file and rename); a failure only costs the agent
/// being run again after a crash.
pub(super) fn save_agent_done(run_dir: &Path, done: &AgentDone) {
    let path = run_dir.join(AGENT_DONE);
    let written = serde_json::to_vec(done)
        .map_err(std::io::Error::other)
        .and_then(|bytes| crate::state_file::write_atomically(&path, &bytes));
    if let Err(err) = written {
        tracing::warn!(%err, path = %path.display(), "could not keep the agent's outcome while verifying");
    }
}

/// The success of the previous run of the same claim key whose agent finished but
/// whose outcome was never stored (the process died while verifying or before the
/// outbox): the latest run of the key, still `running` in the history (a stored
/// outcome records it finished), whose directory holds [`AGENT_DONE`]. The attempt
/// that takes it over is a new one (a claim after a crash counts one more).
pub(super) fn replayable(
    ledger: &dyn Ledger,
    state_root: &Path,
    claim: &Claim,
) -> Option<AgentDone> {
    let runs = ledger
        .ticket_runs(&claim.key.tracker, &claim.key.ticket_id, 20)
        .ok()?;
    let previous = runs
        .iter()
        .find(|r| r.key == claim.key && r.run_id != claim.run_id)?;
    if previous.phase != RunPhase::Running {
        return None;
    }
    let dir = crate::agent::run_dir(state_root, &previous.run_id);
    let bytes = std::fs::read(dir.join(AGENT_DONE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

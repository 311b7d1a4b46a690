//! Running a role's coding agent on one ticket: prompt, workspace, process, outcome.
//!
//! The agent is an argv (never a shell string built from ticket text). It gets the
//! rendered prompt on stdin and in `SORTIE_PROMPT_FILE`, runs in the ticket's
//! workspace, and reports through `SORTIE_RESULT_FILE` or its exit status; with a CLI
//! preset (`claude-code`, `codex`) sortie also reads the CLI's JSON event stream on stdout
//! for the outcome, summary and usage (`presets`); with `acp` it converses with the agent in
//! the Agent Client Protocol over stdin and stdout (`presets::acp`).

pub mod baseline;
mod confine;
pub mod git;
mod orphans;
mod outcome;
mod presets;
mod process;
mod proctree;
mod progress;
mod prompt;
pub mod sandbox;
mod streams;
pub mod verify;
mod workspace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{AgentConfig, AgentPreset};

pub use crate::program::find_program;
pub use confine::{check_workspace, UnsafeWorkspace, UNSAFE_WORKSPACE};
pub use orphans::reap_run;
pub use orphans::{kill_tree, tree_cpu_ticks};
pub use outcome::{
    classify_exit, parse_result_file, AgentOutcome, AskedQuestion, ResultFileError, Usage,
    NO_CHANGE_NEEDED,
};
pub use presets::{
    preset_argv, resume_argv, AcpOptions, EventStream, StreamOptions, MAX_EVENT_LINE_BYTES,
    MAX_STREAM_TEXT_BYTES, SESSION_NOT_FOUND,
};
pub use process::{
    read_session_record, run_agent, AgentSpec, CancelReason, RunEnd, RunReport, SessionRecord,
    SessionStart,
};
pub use progress::{AgentEvent, Progress, ProgressHandle, EVENT_TEXT_CHARS};
pub use prompt::{
    template_files, CommentVars, FailureVars, PriorVars, PromptContext, PromptError, QuestionVars,
    ReviewVars, ReworkVars, RoleSettings, RoleTemplates, StageVars, TicketVars,
};
pub use workspace::{
    adopt_legacy_workspace, ensure_workspace, legacy_workspace_name, list_workspaces,
    remove_terminal, remove_workspace, run_dir, run_hook, workspace_dir, workspace_name,
    workspace_owner_file, Removal,
};

/// Environment variables handed to every agent, besides the inherited ones and `agent.env`.
pub const ENV_VARS: &[&str] = &[
    "SORTIE_TICKET_ID",
    "SORTIE_TICKET_TITLE",
    "SORTIE_TICKET_STATUS",
    "SORTIE_TICKET_LABELS",
    "SORTIE_ROLE",
    "SORTIE_STAGE",
    "SORTIE_STAGE_ATTEMPT",
    "SORTIE_RUN_ID",
    "SORTIE_WORKSPACE",
    "SORTIE_PROMPT_FILE",
    "SORTIE_RESULT_FILE",
];

/// Everything a run needs that the pipeline decides.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// argv of the agent (for a CLI preset, as `preset_argv` builds it).
    pub command: Vec<String>,
    /// Which CLI runs, and so how its stdout is read (`command`: free text).
    pub preset: AgentPreset,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Inherited variables to remove (secrets such as the tracker token); a name that
    /// is also in `env` is passed on, because the config asked for it explicitly.
    pub env_remove: Vec<String>,
    /// Rendered prompt.
    pub prompt: String,
    /// Working directory (the ticket's workspace).
    pub workspace: PathBuf,
    /// Directory for this run's prompt, result file and log.
    pub run_dir: PathBuf,
    /// Hard time limit.
    pub timeout: Duration,
    /// Kill after this long without output or CPU time spent by the agent's descendants
    /// (`None` disables).
    pub stall_timeout: Option<Duration>,
    /// An ACP agent that has not finished its handshake this long after it started is
    /// killed (`agent.acp_handshake`); other presets ignore it.
    pub handshake_timeout: Duration,
    /// The session to resume (a Claude Code session id, a Codex thread id), set by
    /// `resume_session`; `None` starts fresh.
    pub resume: Option<String>,
    /// The argv that resumes `resume`; `command` stays the fresh start the runner falls back
    /// to when the CLI no longer has the session.
    pub resume_command: Option<Vec<String>>,
    /// How the preset's stream is judged (permission denials, Codex's resumed usage).
    pub stream: StreamOptions,
    /// The bubblewrap confinement (`agent.sandbox`, `kind: bubblewrap`); `None` runs the
    /// agent unconfined.
    pub sandbox: Option<sandbox::SandboxPlan>,
}

/// `argv` letting the agent write its result file: Codex's `workspace-write` sandbox
/// confines writes to the workspace (and `/tmp`), and `SORTIE_RESULT_FILE` is in the
/// run's directory under `state_root`, so that directory is added (`--add-dir`, right
/// after `exec --json`). Other presets and sandboxes are left as they are.
fn result_dir_writable(agent: &AgentConfig, mut argv: Vec<String>, run_dir: &Path) -> Vec<String> {
    if agent.preset == AgentPreset::Codex && agent.sandbox.as_deref() == Some("workspace-write") {
        let at = agent.program_argv().len() + 2;
        if argv.get(at - 2).map(String::as_str) == Some("exec") && at <= argv.len() {
            argv.splice(
                at..at,
                ["--add-dir".to_string(), run_dir.display().to_string()],
            );
        }
    }
    argv
}

impl RunPlan {
    /// The plan for running `agent` on `prompt`: argv from its preset, its environment and limits.
    pub fn for_agent(
        agent: &AgentConfig,
        prompt: String,
        workspace: PathBuf,
        run_dir: PathBuf,
    ) -> RunPlan {
        let acp = AcpOptions {
            permissions: agent.permissions,
            model: agent.model.clone(),
            resume: None,
            workspace: workspace.clone(),
            result_file: run_dir.join("result.yaml"),
            prompt: String::new(),
        };
        RunPlan {
            command: result_dir_writable(agent, preset_argv(agent), &run_dir),
            preset: agent.preset,
            env: agent.env.clone(),
            env_remove: Vec::new(),
            prompt,
            workspace,
            run_dir,
            timeout: agent.timeout,
            stall_timeout: agent.stall_timeout,
            handshake_timeout: agent.handshake_timeout,
            resume: None,
            resume_command: None,
            stream: StreamOptions {
                allow_permission_denials: agent.allow_permission_denials,
                usage_baseline: None,
                progress: None,
                acp,
                budget: None,
            },
            sandbox: None,
        }
    }

    /// Resume `session` (from the ledger's `last_session` of the same ticket and role) instead
    /// of starting cold, unless `agent.resume` is off or the preset has no sessions.
    /// `earlier_usage` is the usage already recorded for that session's attempts: Codex
    /// reports a resumed thread's cumulative usage, and only this attempt's share is kept.
    pub fn resume_session(
        &mut self,
        agent: &AgentConfig,
        session: &str,
        earlier_usage: Option<Usage>,
    ) {
        if !agent.resume || agent.preset == AgentPreset::Command || session.trim().is_empty() {
            return;
        }
        self.resume = Some(session.to_string());
        if agent.preset == AgentPreset::Acp {
            // The same process loads the session over the protocol (`session/load`) and
            // falls back to `session/new` itself.
            self.stream.acp.resume = Some(session.to_string());
            return;
        }
        self.resume_command = Some(result_dir_writable(
            agent,
            resume_argv(agent, Some(session)),
            &self.run_dir,
        ));
        if agent.preset == AgentPreset::Codex {
            self.stream.usage_baseline = earlier_usage;
        }
    }
}

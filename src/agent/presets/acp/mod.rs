//! The Agent Client Protocol client, without I/O: JSON-RPC 2.0 messages, one per line, are
//! fed in as the agent prints them; the answers and requests to write back are taken out.
//!
//! One run is one prompt turn: `initialize`, then `session/load` of the previous session
//! (when resuming and the agent offers `loadSession`; `session/new` when the load fails) or
//! `session/new`, the model when one is configured, then `session/prompt`. Meanwhile the
//! agent's `session/update` notifications feed the live run, its permission requests are
//! answered by the `permissions` policy, and its file requests are served inside the
//! workspace. The prompt's stop reason decides the outcome with the result file.

mod policy;
mod requests;
mod updates;
mod usage;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::{clip, Taken};
use crate::agent::outcome::{AgentOutcome, Usage};
use crate::agent::SessionStart;
use crate::block::{Category, NextAction};
use crate::config::AcpPermissions;
use policy::{Confinement, ToolFacts};

/// The ACP version sortie speaks.
const PROTOCOL_VERSION: u64 = 1;
/// Largest file a client-side read returns (agents read source files, not data sets).
const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
/// Tool calls remembered for permission requests that name only their id.
const MAX_TOOLS: usize = 4096;

/// What an ACP run needs besides the argv (`StreamOptions::acp`).
#[derive(Debug, Clone, Default)]
pub struct AcpOptions {
    /// How permission requests and file requests are answered.
    pub permissions: AcpPermissions,
    /// The model to select (`session/set_model`, else `session/set_config_option`).
    pub model: Option<String>,
    /// The session to resume with `session/load`.
    pub resume: Option<String>,
    /// The session's working directory (the ticket's workspace).
    pub workspace: PathBuf,
    /// Where the agent writes its result (`SORTIE_RESULT_FILE`).
    pub result_file: PathBuf,
    /// The rendered role prompt.
    pub prompt: String,
}

/// A request sortie sent and awaits the answer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Initialize,
    Load,
    New,
    SetModel,
    SetConfigModel,
    Prompt,
}

impl Pending {
    fn method(self) -> &'static str {
        match self {
            Pending::Initialize => "initialize",
            Pending::Load => "session/load",
            Pending::New => "session/new",
            Pending::SetModel => "session/set_model",
            Pending::SetConfigModel => "session/set_config_option",
            Pending::Prompt => "session/prompt",
        }
    }
}

/// Where the conversation is.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Waiting for the answer to a request of the handshake or the turn.
    Awaiting(Pending),
    /// The prompt turn ended with this stop reason.
    Stopped(String),
    /// The conversation failed before the turn could end.
    Failed(AgentOutcome),
}

/// One agent's side of the conversation, as sortie sees it.
#[derive(Debug)]
pub(crate) struct AcpSession {
    options: AcpOptions,
    room: Confinement,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    phase: Phase,
    outgoing: Vec<String>,
    log: Vec<String>,
    notes: Vec<String>,
    session_id: Option<String>,
    /// How the session began, once it did.
    start: Option<SessionStart>,
    cancel_sent: bool,
    tools: BTreeMap<String, ToolFacts>,
    denials: Vec<String>,
    /// The agent's current message, and whether it was cut.
    message: String,
    message_cut: bool,
    last_output: Option<&'static str>,
    event: Option<(&'static str, String)>,
    events_seen: u64,
    rounds: u32,
    after_tool: bool,
    update_usage: Option<Usage>,
    usage_updates: u32,
    answer_usage: Option<Usage>,
}

impl AcpSession {
    /// A client for one run; `initialize` is queued at once.
    pub(crate) fn new(options: AcpOptions) -> Self {
        let room = Confinement::new(&options.workspace, &options.result_file);
        let mut session = AcpSession {
            options,
            room,
            next_id: 0,
            pending: BTreeMap::new(),
            phase: Phase::Awaiting(Pending::Initialize),
            outgoing: Vec::new(),
            log: Vec::new(),
            notes: Vec::new(),
            session_id: None,
            start: None,
            cancel_sent: false,
            tools: BTreeMap::new(),
            denials: Vec::new(),
            message: String::new(),
            message_cut: false,
            last_output: None,
            event: None,
            events_seen: 0,
            rounds: 0,
            after_tool: false,
            update_usage: None,
            usage_updates: 0,
            answer_usage: None,
        };
        session.request(
            Pending::Initialize,
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": true, "writeTextFile": true},
                    "terminal": false
                },
                "clientInfo": {"name": "sortie", "version": env!("CARGO_PKG_VERSION")}
            }),
        );
        session
    }

    /// Lines to write to the agent's stdin, in order (each without its newline).
    pub(crate) fn take_outgoing(&mut self) -> Vec<String> {
        std::mem::take(&mut self.outgoing)
    }

    /// Lines for the run log (permission answers, file requests refused, fallbacks).
    pub(crate) fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Things a person reading the run should know (a resume that fell back).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether the conversation is over: the turn stopped, or it failed.
    pub(crate) fn finished(&self) -> bool {
        !matches!(self.phase, Phase::Awaiting(_))
    }

    /// The handshake request still unanswered (`initialize`, `session/new`, ...), if the
    /// prompt was not sent yet.
    pub(crate) fn handshake_waiting(&self) -> Option<&'static str> {
        match self.phase {
            Phase::Awaiting(Pending::Prompt) => None,
            Phase::Awaiting(p) => Some(p.method()),
            _ => None,
        }
    }

    /// Ask the agent to stop the turn (`session/cancel`), once, if a turn is running.
    pub(crate) fn cancel(&mut self) {
        if self.cancel_sent || self.phase != Phase::Awaiting(Pending::Prompt) {
            return;
        }
        if let Some(session) = self.session_id.clone() {
            self.cancel_sent = true;
            self.send(json!({"jsonrpc": "2.0", "method": "session/cancel",
                "params": {"sessionId": session}}));
        }
    }

    /// The session in use (the loaded one, or the new one).
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// How the session began: loaded, new, or new because the load failed or is not offered.
    pub(crate) fn session_start(&self) -> Option<SessionStart> {
        self.start
    }

    /// Model calls so far: Qwen Code's usage reports (one per call), else the rounds seen
    /// (a round starts with the first output after a tool result).
    pub(crate) fn turns(&self) -> Option<u32> {
        let n = if self.usage_updates > 0 {
            self.usage_updates
        } else {
            self.rounds
        };
        (n > 0).then_some(n)
    }

    /// The last event worth showing, and how many were seen.
    pub(crate) fn last_event(&self) -> (u64, Option<(&'static str, &str)>) {
        let event = self.event.as_ref().map(|(k, t)| (*k, t.as_str()));
        (self.events_seen, event)
    }

    /// Tokens as the agent reported them: summed per-call usage (Qwen Code), else the
    /// prompt answer's (Gemini CLI's quota, else the standard `usage`); `None` when the
    /// agent reported none.
    pub(crate) fn usage(&self) -> Option<Usage> {
        self.update_usage.or(self.answer_usage)
    }

    /// A failure that decides the run whatever the result file says: a stop reason other
    /// than `end_turn`, or a conversation that failed. A `cancelled` stop after sortie's own
    /// `session/cancel` is not one (the run is cancelled).
    pub(crate) fn decisive(&self) -> Option<AgentOutcome> {
        let stop = match &self.phase {
            Phase::Failed(outcome) => return Some(outcome.clone()),
            Phase::Awaiting(_) => return None,
            Phase::Stopped(stop) => stop.as_str(),
        };
        let (code, category, next, why) = match stop {
            "end_turn" => return None,
            "cancelled" if self.cancel_sent => return None,
            "max_tokens" => (
                "agent.max_tokens",
                Category::Policy,
                NextAction::Escalate,
                "the model reached its token limit",
            ),
            "max_turn_requests" => (
                "agent.max_turns",
                Category::Policy,
                NextAction::Escalate,
                "the agent reached its limit of model requests in one turn",
            ),
            "refusal" => (
                "agent.refusal",
                Category::Policy,
                NextAction::Manual,
                "the model refused to go on",
            ),
            "cancelled" => (
                "agent.cancelled_by_agent",
                Category::Transient,
                NextAction::Retry,
                "the agent cancelled the turn though sortie did not ask it to",
            ),
            _ => (
                "agent.stop_reason",
                Category::Unknown,
                NextAction::Escalate,
                "the agent ended the turn with a stop reason sortie does not know",
            ),
        };
        let mut detail = format!("{why} (stop reason `{stop}`)");
        self.append_last_words(&mut detail);
        Some(AgentOutcome::failure(code, category, next, clip(&detail)))
    }

    /// The outcome when the agent wrote no result file. `ended` says how the process ended
    /// (for a conversation that did not finish); `stderr_tail` goes into that detail.
    pub(crate) fn outcome(&self, ended: &str, stderr_tail: &str, counts: &str) -> AgentOutcome {
        if let Some(outcome) = self.decisive() {
            return outcome;
        }
        match &self.phase {
            Phase::Stopped(_) if !self.denials.is_empty() => {
                let detail = format!(
                    "the turn ended without a result file after sortie denied (policy {}):\n{}",
                    self.options.permissions.as_str(),
                    self.denials.join("\n")
                );
                AgentOutcome::failure(
                    "agent.permission_denied",
                    Category::Policy,
                    NextAction::Manual,
                    clip(&detail),
                )
            }
            Phase::Stopped(_) => AgentOutcome::Success {
                summary: match self.message.trim() {
                    "" => "the agent ended its turn without a final message".to_string(),
                    text => clip(text),
                },
                artifacts: BTreeMap::new(),
            },
            Phase::Awaiting(pending) => {
                let mut detail = format!(
                    "the agent's ACP conversation ended before it answered `{}` ({ended}; {counts})",
                    pending.method()
                );
                self.append_last_words(&mut detail);
                if !stderr_tail.trim().is_empty() {
                    detail.push_str(&format!("\nstderr:\n{}", stderr_tail.trim()));
                }
                AgentOutcome::failure(
                    "agent.stream_incomplete",
                    Category::Transient,
                    NextAction::Retry,
                    clip(&detail),
                )
            }
            Phase::Failed(outcome) => outcome.clone(),
        }
    }

    /// The failure of a run stalled or timed out during the handshake, if it was.
    pub(crate) fn handshake_failure(&self, waited: &str) -> Option<AgentOutcome> {
        let method = self.handshake_waiting()?;
        Some(AgentOutcome::failure(
            "agent.acp_handshake",
            Category::Transient,
            NextAction::Retry,
            format!("the agent did not answer `{method}` within {waited} and was killed"),
        ))
    }

    fn append_last_words(&self, detail: &mut String) {
        let words = self.message.trim();
        if !words.is_empty() {
            detail.push_str(&format!("\nlast words:\n{words}"));
        }
    }

    /// Take one line of the agent's stdout.
    pub(crate) fn line(&mut self, line: &str) -> Taken {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return Taken::Noise;
        };
        let Some(object) = message.as_object() else {
            return Taken::Noise;
        };
        let id = object.get("id").filter(|id| !id.is_null()).cloned();
        match (object.get("method"), id) {
            (Some(Value::String(method)), Some(id)) => {
                let params = object.get("params").cloned().unwrap_or(Value::Null);
                self.on_request(method, id, &params);
                Taken::Event
            }
            (Some(Value::String(method)), None) => {
                let params = object.get("params").cloned().unwrap_or(Value::Null);
                self.on_notification(method, &params);
                Taken::Event
            }
            (Some(_), Some(id)) => {
                self.reply_error(id, -32600, "invalid request: `method` is not a string");
                Taken::Noise
            }
            (None, Some(id)) => {
                let Some(pending) = id.as_u64().and_then(|n| self.pending.remove(&n)) else {
                    return Taken::Noise;
                };
                match (object.get("result"), object.get("error")) {
                    (_, Some(error)) => self.on_error(pending, error),
                    (Some(result), None) => self.on_result(pending, result),
                    (None, None) => self.on_error(
                        pending,
                        &json!({"message": "an answer with neither `result` nor `error`"}),
                    ),
                }
                Taken::Event
            }
            _ => Taken::Noise,
        }
    }

    fn send(&mut self, message: Value) {
        self.outgoing.push(message.to_string());
    }

    fn request(&mut self, pending: Pending, params: Value) {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, pending);
        self.phase = Phase::Awaiting(pending);
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": pending.method(), "params": params}),
        );
    }

    fn reply(&mut self, id: Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn reply_error(&mut self, id: Value, code: i64, message: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }

    fn fail(&mut self, code: &str, category: Category, next: NextAction, detail: String) {
        if !self.finished() {
            self.phase = Phase::Failed(AgentOutcome::failure(code, category, next, clip(&detail)));
        }
    }

    fn note(&mut self, text: String) {
        tracing::warn!("{text}");
        self.log.push(text.clone());
        self.notes.push(text);
    }

    fn on_result(&mut self, pending: Pending, result: &Value) {
        match pending {
            Pending::Initialize => {
                let loads = result
                    .pointer("/agentCapabilities/loadSession")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                match self.options.resume.clone() {
                    Some(session) if loads => self.request(
                        Pending::Load,
                        json!({"sessionId": session, "cwd": self.options.workspace, "mcpServers": []}),
                    ),
                    Some(session) => {
                        self.note(format!(
                            "the agent does not offer session/load; session {session} is not \
                             resumed, a new session starts"
                        ));
                        self.new_session();
                    }
                    None => self.new_session(),
                }
            }
            Pending::Load => {
                self.session_id = self.options.resume.clone();
                self.start = Some(SessionStart::Resumed);
                self.log.push(format!(
                    "resumed session {} with session/load",
                    self.session_id.as_deref().unwrap_or("")
                ));
                self.choose_model();
            }
            Pending::New => match result.get("sessionId").and_then(Value::as_str) {
                Some(session) => {
                    self.session_id = Some(session.to_string());
                    self.start = Some(if self.options.resume.is_some() {
                        SessionStart::FellBack
                    } else {
                        SessionStart::New
                    });
                    self.choose_model();
                }
                None => self.fail(
                    "agent.acp_protocol",
                    Category::Permanent,
                    NextAction::Manual,
                    format!("the agent's answer to session/new has no sessionId: {result}"),
                ),
            },
            Pending::SetModel | Pending::SetConfigModel => self.prompt(),
            Pending::Prompt => {
                self.answer_usage = usage::of_answer(result);
                let stop = result
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                // An event of its own, so the live run shows the answer's usage too.
                self.saw("stop", stop.to_string());
                self.phase = Phase::Stopped(stop.to_string());
            }
        }
    }

    fn on_error(&mut self, pending: Pending, error: &Value) {
        let code = error.get("code").and_then(Value::as_i64);
        let mut text = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_string();
        if let Some(data) = error.get("data").filter(|d| !d.is_null()) {
            text.push_str(&format!(" ({data})"));
        }
        let method = pending.method();
        match pending {
            Pending::Load => {
                let session = self.options.resume.clone().unwrap_or_default();
                self.note(format!(
                    "session/load of session {session} failed ({text}); starting a new session"
                ));
                self.new_session();
            }
            Pending::SetModel => {
                let model = self.options.model.clone().unwrap_or_default();
                self.log.push(format!(
                    "session/set_model {model} refused ({text}); trying session/set_config_option"
                ));
                let session = self.session_id.clone();
                self.request(
                    Pending::SetConfigModel,
                    json!({"sessionId": session, "configId": "model", "value": model}),
                );
            }
            Pending::SetConfigModel => self.fail(
                "agent.config",
                Category::Permanent,
                NextAction::Manual,
                format!(
                    "the agent took model {:?} neither with session/set_model nor with \
                     session/set_config_option ({text}); see docs/agents.md for how this agent \
                     chooses its model",
                    self.options.model.as_deref().unwrap_or("")
                ),
            ),
            // ACP's "authentication required".
            _ if code == Some(-32000) => self.fail(
                "agent.auth",
                Category::Permanent,
                NextAction::Manual,
                format!("the agent refused `{method}`: {text}"),
            ),
            Pending::Prompt => self.fail(
                "agent.error_result",
                Category::Transient,
                NextAction::Retry,
                format!("the agent answered `{method}` with an error: {text}"),
            ),
            Pending::Initialize | Pending::New => self.fail(
                "agent.acp_protocol",
                Category::Permanent,
                NextAction::Manual,
                format!("the agent refused `{method}`: {text}"),
            ),
        }
    }

    fn new_session(&mut self) {
        // The path as the run knows it (a sandbox binds it there), not its resolved form.
        let cwd = self.options.workspace.clone();
        self.request(Pending::New, json!({"cwd": cwd, "mcpServers": []}));
    }

    fn choose_model(&mut self) {
        match self.options.model.clone() {
            Some(model) => {
                let session = self.session_id.clone();
                self.request(
                    Pending::SetModel,
                    json!({"sessionId": session, "modelId": model}),
                );
            }
            None => self.prompt(),
        }
    }

    fn prompt(&mut self) {
        let mut text = self.options.prompt.clone();
        let result = self.options.result_file.display().to_string();
        if !result.is_empty() && !text.contains(&result) {
            text.push_str(&format!(
                "\n\n---\nsortie: write your result file (`SORTIE_RESULT_FILE`) at {result}\n"
            ));
        }
        let session = self.session_id.clone();
        self.request(
            Pending::Prompt,
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
    }
}

#[cfg(test)]
mod tests;

//! Codex's `exec --json` events: `thread.started`, `turn.started`, `item.*` (the agent's
//! messages among them), and a turn that ends in `turn.completed` (with usage) or `turn.failed`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{clip, Taken, SESSION_NOT_FOUND};
use crate::agent::outcome::{AgentOutcome, Usage};
use crate::block::{Category, NextAction};

/// What the stream has told so far.
#[derive(Debug, Default)]
pub(super) struct CodexStream {
    thread_id: Option<String>,
    /// Text of the last completed agent message, clipped.
    last_message: Option<String>,
    /// How the last turn ended, if one did.
    turn_end: Option<TurnEnd>,
    /// The last `error` event's message. Codex also reports recoverable trouble this way
    /// (reconnecting), so it does not end the run by itself.
    last_error: Option<String>,
    /// Usage summed over the turns.
    usage: Option<Usage>,
    /// Usage the thread had already reported before this run (after `exec resume`, Codex
    /// reports the whole thread's cumulative usage): subtracted from what it reports.
    pub(super) baseline: Option<Usage>,
    /// Non-fatal `item.completed` items of type `error` (warnings), the last few, clipped.
    warnings: Vec<String>,
    /// Turns started so far.
    turns: u32,
    /// The last event worth showing a person: kind and text.
    event: Option<(&'static str, String)>,
    /// How many such events were seen (tells a reader that `event` changed).
    events_seen: u64,
}

/// Warnings kept for a failure's detail.
const KEPT_WARNINGS: usize = 5;

#[derive(Debug)]
enum TurnEnd {
    Completed,
    Failed(String),
}

/// The fields of any event sortie uses; the others are ignored.
#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    thread_id: Option<String>,
    #[serde(default)]
    usage: Option<CodexUsage>,
    #[serde(default)]
    error: Option<ErrorBody>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    item: Option<Item>,
}

/// Codex's usage: `input_tokens` includes `cached_input_tokens` (and cache writes), and
/// `output_tokens` includes `reasoning_output_tokens`, as in the OpenAI Responses API.
#[derive(Debug, Deserialize)]
struct CodexUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    cache_write_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    reasoning_output_tokens: u64,
}

impl CodexUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self
                .input_tokens
                .saturating_sub(self.cached_input_tokens)
                .saturating_sub(self.cache_write_input_tokens),
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cached_input_tokens,
            cache_write_tokens: self.cache_write_input_tokens,
            reasoning_tokens: self.reasoning_output_tokens,
            cost_usd: None,
        }
    }
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Item {
    /// `type`; early releases of the format called it `item_type`.
    #[serde(rename = "type", alias = "item_type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    changes: Option<Vec<FileChange>>,
}

#[derive(Debug, Deserialize)]
struct FileChange {
    #[serde(default)]
    path: Option<String>,
}

impl Item {
    /// The item as an event a person reads, when it is one.
    fn event(&self, started: bool) -> Option<(&'static str, String)> {
        let text = || self.text.clone().unwrap_or_default();
        match self.kind.as_deref()? {
            "agent_message" | "assistant_message" if !started => Some(("message", text())),
            "reasoning" if !started => Some(("reasoning", text())),
            "command_execution" => {
                let command = self.command.clone().unwrap_or_default();
                Some(match (started, self.exit_code) {
                    (false, Some(code)) => ("command", format!("{command} (exit {code})")),
                    _ => ("command", command),
                })
            }
            "file_change" if !started => {
                let paths: Vec<&str> = (self.changes.iter().flatten())
                    .filter_map(|c| c.path.as_deref())
                    .collect();
                Some(("file_change", paths.join(", ")))
            }
            "error" if !started => Some(("warning", self.message.clone().unwrap_or_default())),
            _ => None,
        }
    }
}

impl CodexStream {
    /// Take one non-empty line that starts with `{`.
    pub(super) fn line(&mut self, line: &str) -> Taken {
        let Ok(event) = serde_json::from_str::<Event>(line) else {
            return Taken::Noise;
        };
        if let Some(seen) = self.event_of(&event) {
            self.event = Some((seen.0, crate::agent::progress::short_text(&seen.1)));
            self.events_seen += 1;
        }
        match event.kind.as_str() {
            "thread.started" => self.thread_id = event.thread_id,
            "turn.started" => {
                self.turn_end = None;
                self.turns += 1;
            }
            "turn.completed" | "turn.failed" => {
                if let Some(u) = event.usage {
                    self.usage
                        .get_or_insert_with(Usage::default)
                        .add(&u.to_usage());
                }
                self.turn_end = Some(if event.kind == "turn.completed" {
                    TurnEnd::Completed
                } else {
                    let message = event.error.and_then(|e| e.message);
                    TurnEnd::Failed(message.unwrap_or_else(|| "the turn failed".to_string()))
                });
            }
            "item.completed" => match event.item {
                Some(Item {
                    kind: Some(kind),
                    text: Some(text),
                    ..
                }) if kind == "agent_message" || kind == "assistant_message" => {
                    self.last_message = Some(clip(&text));
                }
                Some(Item {
                    kind: Some(kind),
                    message: Some(message),
                    ..
                }) if kind == "error" => {
                    if self.warnings.len() == KEPT_WARNINGS {
                        self.warnings.remove(0);
                    }
                    self.warnings.push(clip(&message));
                }
                _ => {}
            },
            "error" => self.last_error = event.message.or(event.error.and_then(|e| e.message)),
            _ => {}
        }
        Taken::Event
    }

    /// An event as a person reads it, when it is one worth showing.
    fn event_of(&self, event: &Event) -> Option<(&'static str, String)> {
        match event.kind.as_str() {
            "thread.started" => Some(("thread", "started".to_string())),
            "turn.started" => Some(("turn", format!("turn {} started", self.turns + 1))),
            "turn.completed" => Some(("turn", format!("turn {} completed", self.turns.max(1)))),
            "turn.failed" => {
                let message = event.error.as_ref().and_then(|e| e.message.clone());
                Some(("turn_failed", message.unwrap_or_default()))
            }
            "item.started" => event.item.as_ref()?.event(true),
            "item.completed" => event.item.as_ref()?.event(false),
            "error" => {
                let message = (event.message.clone())
                    .or_else(|| event.error.as_ref().and_then(|e| e.message.clone()));
                Some(("error", message.unwrap_or_default()))
            }
            _ => None,
        }
    }

    /// The last event worth showing, and how many were seen so far.
    pub(super) fn last_event(&self) -> (u64, Option<(&'static str, &str)>) {
        let event = self.event.as_ref().map(|(k, t)| (*k, t.as_str()));
        (self.events_seen, event)
    }

    /// Turns started so far (`None` before the first).
    pub(super) fn turns(&self) -> Option<u32> {
        (self.turns > 0).then_some(self.turns)
    }

    /// Usage summed over the turns, less the resumed thread's earlier usage; Codex reports
    /// no cost.
    pub(super) fn usage(&self) -> Option<Usage> {
        let usage = self.usage?;
        Some(match &self.baseline {
            Some(earlier) => usage.minus(earlier),
            None => usage,
        })
    }

    /// Usage as Codex reported it, before the baseline is taken away (after `exec resume`:
    /// the thread's cumulative usage, the next resume's baseline).
    pub(super) fn reported_usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The thread this stream belongs to, for `codex exec resume`.
    pub(super) fn thread_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    /// The outcome the last turn's end gives, if a turn ended.
    pub(super) fn outcome(&self) -> Option<AgentOutcome> {
        match self.turn_end.as_ref()? {
            TurnEnd::Completed => Some(AgentOutcome::Success {
                summary: match self.last_message.as_deref().map(str::trim) {
                    Some(text) if !text.is_empty() => text.to_string(),
                    _ => "Codex finished the turn without a final message".to_string(),
                },
                artifacts: BTreeMap::new(),
            }),
            TurnEnd::Failed(message) => {
                let mut detail = format!("Codex turn failed: {message}");
                if let Some(thread) = &self.thread_id {
                    detail.push_str(&format!("\n(thread {thread})"));
                }
                if let Some(words) = self.warning_words() {
                    detail.push_str(&format!("\nlast words:\n{words}"));
                }
                let (code, category, next) = classify_turn_failure(message);
                Some(AgentOutcome::failure(code, category, next, clip(&detail)))
            }
        }
    }

    /// The outcome of a run that printed no turn end, when its stderr explains it (the
    /// trusted-directory refusal, a thread `exec resume` cannot find).
    pub(super) fn outcome_from_stderr(&self, stderr_tail: &str) -> Option<AgentOutcome> {
        if stderr_tail.contains("Not inside a trusted directory") {
            return Some(AgentOutcome::failure(
                "agent.config",
                Category::Permanent,
                NextAction::Manual,
                clip(&format!(
                    "Codex refused to run: the workspace is not a git repository it trusts. \
                     Make the workspace a git repository (a workspace hook such as \
                     `after_create: [git, init]`) or add `--skip-git-repo-check` to \
                     agent.extra_args.\nstderr:\n{}",
                    stderr_tail.trim()
                )),
            ));
        }
        if stderr_tail.contains("no rollout found for thread id") {
            return Some(AgentOutcome::failure(
                SESSION_NOT_FOUND,
                Category::Transient,
                NextAction::Retry,
                clip(stderr_tail.trim()),
            ));
        }
        None
    }

    /// The warnings, one a line.
    fn warning_words(&self) -> Option<String> {
        (!self.warnings.is_empty()).then(|| self.warnings.join("\n"))
    }

    /// The last error event or agent message and the warnings, for the detail of a stream
    /// that ended early.
    pub(super) fn last_words(&self) -> Option<String> {
        let said = self.last_error.as_deref().or(self.last_message.as_deref());
        match (said, self.warning_words()) {
            (Some(said), Some(warnings)) => Some(format!("{said}\n{warnings}")),
            (Some(said), None) => Some(said.to_string()),
            (None, warnings) => warnings,
        }
    }
}

/// Reason code, category and next action for a `turn.failed` message, in Codex's words.
///
/// Credentials (a 401/403, a missing key variable) are `agent.auth` and a request the API
/// refuses as wrong (a 400, an unknown model) `agent.config`: both permanent until a person
/// fixes the config. Anything else (5xx, a cut or failed stream, high demand) is transient.
fn classify_turn_failure(message: &str) -> (&'static str, Category, NextAction) {
    let auth = [
        "401 Unauthorized",
        "403 Forbidden",
        "Incorrect API key",
        "Missing environment variable",
        "invalid_api_key",
    ];
    let config = [
        "400 Bad Request",
        "invalid_request_error",
        "model_not_found",
        "404 Not Found",
    ];
    if auth.iter().any(|w| message.contains(w)) {
        ("agent.auth", Category::Permanent, NextAction::Manual)
    } else if config.iter().any(|w| message.contains(w)) {
        ("agent.config", Category::Permanent, NextAction::Manual)
    } else {
        ("agent.error_result", Category::Transient, NextAction::Retry)
    }
}

//! Codex's `exec --json` events: `thread.started`, `turn.started`, `item.*` (the agent's
//! messages among them), and a turn that ends in `turn.completed` (with usage) or `turn.failed`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{clip, Taken};
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
}

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

#[derive(Debug, Deserialize)]
struct CodexUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
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
}

impl CodexStream {
    /// Take one non-empty line that starts with `{`.
    pub(super) fn line(&mut self, line: &str) -> Taken {
        let Ok(event) = serde_json::from_str::<Event>(line) else {
            return Taken::Noise;
        };
        match event.kind.as_str() {
            "thread.started" => self.thread_id = event.thread_id,
            "turn.started" => self.turn_end = None,
            "turn.completed" | "turn.failed" => {
                if let Some(u) = event.usage {
                    let total = self.usage.get_or_insert_with(Usage::default);
                    total.input_tokens += u.input_tokens;
                    total.output_tokens += u.output_tokens;
                }
                self.turn_end = Some(if event.kind == "turn.completed" {
                    TurnEnd::Completed
                } else {
                    let message = event.error.and_then(|e| e.message);
                    TurnEnd::Failed(message.unwrap_or_else(|| "the turn failed".to_string()))
                });
            }
            "item.completed" => {
                if let Some(Item {
                    kind: Some(kind),
                    text: Some(text),
                }) = event.item
                {
                    if kind == "agent_message" || kind == "assistant_message" {
                        self.last_message = Some(clip(&text));
                    }
                }
            }
            "error" => self.last_error = event.message.or(event.error.and_then(|e| e.message)),
            _ => {}
        }
        Taken::Event
    }

    /// Usage summed over the turns; Codex reports no cost. `input_tokens` already counts
    /// cached input.
    pub(super) fn usage(&self) -> Option<Usage> {
        self.usage
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
                Some(AgentOutcome::failure(
                    "agent.error_result",
                    Category::Transient,
                    NextAction::Retry,
                    clip(&detail),
                ))
            }
        }
    }

    /// The last error event or agent message, for the detail of a stream that ended early.
    pub(super) fn last_words(&self) -> Option<&str> {
        self.last_error.as_deref().or(self.last_message.as_deref())
    }
}

//! Claude Code's `--output-format stream-json` events: a `system` init, `assistant` and
//! `user` messages, and a final `result` carrying the outcome, usage and cost.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{clip, Taken};
use crate::agent::outcome::{AgentOutcome, Usage};
use crate::block::{Category, NextAction};

/// What the stream has told so far.
#[derive(Debug, Default)]
pub(super) struct ClaudeStream {
    /// The last `result` event.
    result: Option<ResultEvent>,
    /// The session, from any event that names it (for `claude --resume`).
    session_id: Option<String>,
    /// The text of the last assistant message, clipped (for an incomplete stream's detail).
    last_text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    session_id: Option<String>,
}

/// The fields of a `result` event sortie uses; the others are ignored.
#[derive(Debug, Deserialize)]
struct ResultEvent {
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    is_error: bool,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    errors: Vec<Value>,
    #[serde(default)]
    total_cost_usd: Option<f64>,
    #[serde(default)]
    usage: Option<ClaudeUsage>,
    #[serde(default)]
    num_turns: Option<u64>,
    #[serde(default)]
    api_error_status: Option<u16>,
}

#[derive(Debug, Deserialize)]
struct ClaudeUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
}

#[derive(Debug, Deserialize)]
struct AssistantEvent {
    message: AssistantMessage,
}

#[derive(Debug, Deserialize)]
struct AssistantMessage {
    #[serde(default)]
    content: Value,
}

impl ClaudeStream {
    /// Take one non-empty line that starts with `{`.
    pub(super) fn line(&mut self, line: &str) -> Taken {
        let Ok(envelope) = serde_json::from_str::<Envelope>(line) else {
            return Taken::Noise;
        };
        if envelope.session_id.is_some() {
            self.session_id = envelope.session_id;
        }
        match envelope.kind.as_str() {
            "result" => match serde_json::from_str::<ResultEvent>(line) {
                Ok(result) => self.result = Some(result),
                Err(_) => return Taken::Noise,
            },
            "assistant" => {
                if let Ok(event) = serde_json::from_str::<AssistantEvent>(line) {
                    if let Some(text) = message_text(&event.message.content) {
                        self.last_text = Some(clip(&text));
                    }
                }
            }
            _ => {}
        }
        Taken::Event
    }

    /// Tokens and cost from the `result` event. Claude Code reports `input_tokens` without
    /// cache reads and writes; here they are added in, so the count is every input token read.
    pub(super) fn usage(&self) -> Option<Usage> {
        let result = self.result.as_ref()?;
        if result.usage.is_none() && result.total_cost_usd.is_none() {
            return None;
        }
        let usage = result.usage.as_ref();
        Some(Usage {
            input_tokens: usage.map_or(0, |u| {
                u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            }),
            output_tokens: usage.map_or(0, |u| u.output_tokens),
            cost_usd: result.total_cost_usd,
        })
    }

    /// The outcome the `result` event gives, if there was one.
    pub(super) fn outcome(&self) -> Option<AgentOutcome> {
        let result = self.result.as_ref()?;
        let subtype = result.subtype.as_deref().unwrap_or("");
        if subtype == "success" && !result.is_error {
            let summary = match result.result.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => clip(text),
                _ => "Claude Code finished without a final message".to_string(),
            };
            return Some(AgentOutcome::Success {
                summary,
                artifacts: BTreeMap::new(),
            });
        }
        let (code, category, next) = classify(subtype, result.api_error_status);
        Some(AgentOutcome::failure(
            code,
            category,
            next,
            clip(&self.failure_detail(result, subtype)),
        ))
    }

    fn failure_detail(&self, result: &ResultEvent, subtype: &str) -> String {
        let errors: Vec<String> = result
            .errors
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let said = match result.result.as_deref().map(str::trim) {
            Some(text) if !text.is_empty() => text.to_string(),
            _ if !errors.is_empty() => errors.join("\n"),
            _ => format!("Claude Code ended with `{subtype}`"),
        };
        let mut facts = vec![format!("result `{subtype}`")];
        if let Some(status) = result.api_error_status {
            facts.push(format!("API status {status}"));
        }
        if let Some(turns) = result.num_turns {
            facts.push(format!("{turns} turns"));
        }
        if let Some(session) = &self.session_id {
            facts.push(format!("session {session}"));
        }
        format!("{said}\n({})", facts.join(", "))
    }

    /// The last assistant text, for the detail of a stream that ended early.
    pub(super) fn last_words(&self) -> Option<&str> {
        self.last_text.as_deref()
    }
}

/// Reason code, category and next action for an error `result`.
///
/// Turn and budget limits are the config's own ceilings: retrying would spend the same
/// budget again on the same prompt, so a person decides (policy, escalate). API errors are
/// transient unless the status says the request itself is wrong (4xx other than 408/429).
fn classify(subtype: &str, api_status: Option<u16>) -> (&'static str, Category, NextAction) {
    match subtype {
        "error_max_turns" => ("agent.max_turns", Category::Policy, NextAction::Escalate),
        "error_max_budget_usd" => ("agent.max_budget", Category::Policy, NextAction::Escalate),
        "success" => match api_status {
            Some(status) if (400..500).contains(&status) && status != 408 && status != 429 => {
                ("agent.api_error", Category::Permanent, NextAction::Escalate)
            }
            _ => ("agent.api_error", Category::Transient, NextAction::Retry),
        },
        "error_during_execution" => ("agent.error_result", Category::Transient, NextAction::Retry),
        _ => (
            "agent.error_result",
            Category::Unknown,
            NextAction::Escalate,
        ),
    }
}

/// The text blocks of a message's content, joined.
fn message_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

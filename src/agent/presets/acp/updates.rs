//! The agent's `session/update` notifications: the live run's events, its rounds, its
//! usage, the message that becomes the summary, and the tool calls a permission request
//! may name by id only.

use serde_json::Value;

use super::policy::{tool_id, ToolFacts};
use super::{usage, AcpSession, Pending, Phase, MAX_TOOLS};
use crate::agent::outcome::Usage;
use crate::agent::presets::MAX_STREAM_TEXT_BYTES;

impl AcpSession {
    /// Take a notification (only `session/update` means anything to sortie).
    pub(super) fn on_notification(&mut self, method: &str, params: &Value) {
        if method != "session/update" {
            return;
        }
        // A loaded session's history is replayed before the load is answered: not this run.
        if self.phase != Phase::Awaiting(Pending::Prompt) {
            return;
        }
        if let Some(usage) = usage::of_update(params) {
            self.update_usage
                .get_or_insert_with(Usage::default)
                .add(&usage);
            self.usage_updates += 1;
        }
        let Some(update) = params.get("update") else {
            return;
        };
        let kind = update
            .get("sessionUpdate")
            .and_then(Value::as_str)
            .unwrap_or("");
        match kind {
            "agent_message_chunk" => {
                let text = update
                    .pointer("/content/text")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.output("message");
                self.push_message(text);
                self.saw("message", self.message.clone());
            }
            "agent_thought_chunk" => {
                self.output("thought");
                let text = update
                    .pointer("/content/text")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !text.trim().is_empty() {
                    self.saw("thought", text.to_string());
                }
            }
            "tool_call" => {
                self.output("tool_call");
                let id = tool_id(update);
                let facts = self.remember(id, update);
                self.saw("tool_call", facts.describe());
            }
            "tool_call_update" => {
                let id = tool_id(update);
                let facts = self.remember(id, update);
                let status = update.get("status").and_then(Value::as_str).unwrap_or("");
                if matches!(status, "completed" | "failed") {
                    self.after_tool = true;
                    let title = facts.title.unwrap_or_else(|| "tool call".into());
                    self.saw("tool_result", format!("{title}: {status}"));
                }
            }
            "plan" => {
                let entries = update.get("entries").and_then(Value::as_array);
                let entries = entries.map(Vec::as_slice).unwrap_or_default();
                let current = entries
                    .iter()
                    .find(|e| e.get("status").and_then(Value::as_str) == Some("in_progress"))
                    .or_else(|| {
                        entries
                            .iter()
                            .find(|e| e.get("status").and_then(Value::as_str) == Some("pending"))
                    })
                    .and_then(|e| e.get("content").and_then(Value::as_str))
                    .unwrap_or("all done");
                self.saw("plan", format!("{} steps; now: {current}", entries.len()));
            }
            _ => {}
        }
    }

    /// An output of the model: a new round when it follows a tool result.
    fn output(&mut self, kind: &'static str) {
        if self.rounds == 0 || self.after_tool {
            self.rounds += 1;
            self.after_tool = false;
        }
        if kind != "message" && kind != "thought" {
            self.last_output = Some(kind);
            return;
        }
        if kind == "message" && self.last_output != Some("message") {
            self.message.clear();
            self.message_cut = false;
        }
        if kind == "message" {
            self.last_output = Some(kind);
        }
    }

    fn push_message(&mut self, text: &str) {
        if self.message_cut {
            return;
        }
        let room = MAX_STREAM_TEXT_BYTES.saturating_sub(self.message.len());
        if text.len() <= room {
            self.message.push_str(text);
            return;
        }
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.message.push_str(&text[..end]);
        self.message_cut = true;
    }

    /// Record the last event worth showing.
    pub(super) fn saw(&mut self, kind: &'static str, text: String) {
        self.event = Some((kind, crate::agent::progress::short_text(&text)));
        self.events_seen += 1;
    }

    /// What is known of tool call `id` once `call` is merged in.
    pub(super) fn remember(&mut self, id: Option<String>, call: &Value) -> ToolFacts {
        let Some(id) = id else {
            let mut facts = ToolFacts::default();
            facts.merge(call);
            return facts;
        };
        if self.tools.len() >= MAX_TOOLS && !self.tools.contains_key(&id) {
            self.tools.clear();
        }
        let facts = self.tools.entry(id).or_default();
        facts.merge(call);
        facts.clone()
    }
}

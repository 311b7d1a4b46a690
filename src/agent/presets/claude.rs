//! Claude Code's `--output-format stream-json` events: a `system` init, `assistant` and
//! `user` messages, and a final `result` carrying the outcome, usage and cost.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{clip, Taken, SESSION_NOT_FOUND};
use crate::agent::outcome::{AgentOutcome, Usage};
use crate::block::{Category, NextAction};
use crate::rate_limit::RateLimit;

/// What the stream has told so far.
#[derive(Debug, Default)]
pub(super) struct ClaudeStream {
    /// The last `result` event.
    result: Option<ResultEvent>,
    /// The session, from any event that names it (for `claude --resume`).
    session_id: Option<String>,
    /// The text of the last assistant message, clipped (for an incomplete stream's detail).
    last_text: Option<String>,
    /// The last `error` an assistant message carried (`authentication_failed`,
    /// `server_error`, `overloaded`, `unknown`).
    last_error: Option<String>,
    /// The last `system`/`api_retry` event: HTTP status and error kind.
    last_retry: Option<(Option<u16>, Option<String>)>,
    /// Usage per assistant message id, as the stream reported it so far (one `assistant`
    /// event per content block repeats the message's usage: kept once, the latest).
    messages: BTreeMap<String, Usage>,
    /// Whether denied tool calls are accepted (`allow_permission_denials`).
    pub(super) allow_permission_denials: bool,
    /// The last event worth showing a person: kind and text.
    event: Option<(&'static str, String)>,
    /// How many such events were seen (tells a reader that `event` changed).
    events_seen: u64,
    /// The latest `rate_limit_event` of each limit type.
    rate_limits: Vec<RateLimit>,
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
    /// Per model, in camelCase; counts every model call, unlike `usage` (see `usage()`).
    #[serde(default, rename = "modelUsage")]
    model_usage: Option<BTreeMap<String, ModelUsage>>,
    #[serde(default)]
    permission_denials: Vec<PermissionDenial>,
    #[serde(default)]
    terminal_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default, rename = "costUSD")]
    cost_usd: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct PermissionDenial {
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RetryEvent {
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    error_status: Option<u16>,
    #[serde(default)]
    error: Option<String>,
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
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AssistantMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    usage: Option<ClaudeUsage>,
}

impl ClaudeUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_creation_input_tokens,
            reasoning_tokens: 0,
            cost_usd: None,
        }
    }
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
                Ok(result) => {
                    let subtype = result.subtype.clone().unwrap_or_default();
                    let said = result.result.clone().unwrap_or_default();
                    self.saw("result", format!("{subtype}: {said}"));
                    self.result = Some(result);
                }
                Err(_) => return Taken::Noise,
            },
            "user" => {
                if let Some(seen) = serde_json::from_str::<Value>(line)
                    .ok()
                    .and_then(|v| tool_result(&v))
                {
                    self.saw(seen.0, seen.1);
                }
            }
            "assistant" => {
                if let Ok(event) = serde_json::from_str::<AssistantEvent>(line) {
                    if let Some((kind, text)) = last_block(&event.message.content) {
                        self.saw(kind, text);
                    }
                    if let Some(text) = message_text(&event.message.content) {
                        self.last_text = Some(clip(&text));
                    }
                    if event.error.is_some() {
                        self.last_error = event.error;
                    }
                    if let (Some(id), Some(usage)) = (event.message.id, event.message.usage) {
                        self.messages.insert(id, usage.to_usage());
                    }
                }
            }
            "system" => {
                if let Ok(event) = serde_json::from_str::<RetryEvent>(line) {
                    match event.subtype.as_deref() {
                        Some("api_retry") => {
                            let status = event.error_status.map(|s| format!("status {s} "));
                            let text = format!(
                                "API request retried ({}{})",
                                status.unwrap_or_default(),
                                event.error.as_deref().unwrap_or("no error given")
                            );
                            self.saw("retry", text);
                            self.last_retry = Some((event.error_status, event.error));
                        }
                        Some("init") => self.saw("init", "session started".to_string()),
                        _ => {}
                    }
                }
            }
            "rate_limit_event" => {
                if let Some(limit) = serde_json::from_str::<Value>(line)
                    .ok()
                    .and_then(|v| rate_limit(&v, chrono::Utc::now()))
                {
                    let mut text = format!("{} {}", limit.limit_type, limit.status);
                    if let Some(used) = limit.utilization {
                        text.push_str(&format!(", {:.0}% used", used * 100.0));
                    }
                    if let Some(resets) = limit.resets_at {
                        text.push_str(&format!(", resets {}", resets.format("%Y-%m-%dT%H:%MZ")));
                    }
                    self.saw("rate_limit", text);
                    crate::rate_limit::keep_latest(&mut self.rate_limits, limit);
                }
            }
            _ => {}
        }
        Taken::Event
    }

    /// The latest rate-limit report of each limit type.
    pub(super) fn rate_limits(&self) -> &[RateLimit] {
        &self.rate_limits
    }

    /// Tokens and cost. From the `result` event's `modelUsage` summed over models when it
    /// names any: its `usage` misses calls (all zeros after a non-streaming fallback, one call
    /// of two on `error_max_budget_usd`). Else its `usage`. Without a `result` (a killed or
    /// cut run), the usage each assistant message reported so far, once per message.
    pub(super) fn usage(&self) -> Option<Usage> {
        let Some(result) = self.result.as_ref() else {
            if self.messages.is_empty() {
                return None;
            }
            let mut total = Usage::default();
            for usage in self.messages.values() {
                total.add(usage);
            }
            return Some(total);
        };
        if let Some(models) = result.model_usage.as_ref().filter(|m| !m.is_empty()) {
            let mut total = Usage::default();
            for m in models.values() {
                total.add(&Usage {
                    input_tokens: m.input_tokens,
                    output_tokens: m.output_tokens,
                    cache_read_tokens: m.cache_read_input_tokens,
                    cache_write_tokens: m.cache_creation_input_tokens,
                    reasoning_tokens: 0,
                    cost_usd: m.cost_usd,
                });
            }
            total.cost_usd = result.total_cost_usd.or(total.cost_usd);
            return Some(total);
        }
        if result.usage.is_none() && result.total_cost_usd.is_none() {
            return None;
        }
        let mut usage = result
            .usage
            .as_ref()
            .map(ClaudeUsage::to_usage)
            .unwrap_or_default();
        usage.cost_usd = result.total_cost_usd;
        Some(usage)
    }

    /// The last event worth showing, and how many were seen so far.
    pub(super) fn last_event(&self) -> (u64, Option<(&'static str, &str)>) {
        let event = self.event.as_ref().map(|(k, t)| (*k, t.as_str()));
        (self.events_seen, event)
    }

    /// Model turns so far: the `result`'s `num_turns`, else the assistant messages seen.
    pub(super) fn turns(&self) -> Option<u32> {
        if let Some(n) = self.result.as_ref().and_then(|r| r.num_turns) {
            return Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        (!self.messages.is_empty()).then(|| u32::try_from(self.messages.len()).unwrap_or(u32::MAX))
    }

    fn saw(&mut self, kind: &'static str, text: String) {
        self.event = Some((kind, crate::agent::progress::short_text(&text)));
        self.events_seen += 1;
    }

    /// The session this stream belongs to, for `claude --resume`.
    pub(super) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The outcome the `result` event gives, if there was one.
    pub(super) fn outcome(&self) -> Option<AgentOutcome> {
        let result = self.result.as_ref()?;
        let subtype = result.subtype.as_deref().unwrap_or("");
        if subtype == "success" && !result.is_error {
            if !result.permission_denials.is_empty() && !self.allow_permission_denials {
                return Some(AgentOutcome::failure(
                    "agent.permission_denied",
                    Category::Policy,
                    NextAction::Manual,
                    clip(&denials_detail(result)),
                ));
            }
            let summary = match result.result.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => clip(text),
                _ => "Claude Code finished without a final message".to_string(),
            };
            return Some(AgentOutcome::Success {
                summary,
                artifacts: BTreeMap::new(),
            });
        }
        let (code, category, next) = self.classify(result, subtype);
        Some(AgentOutcome::failure(
            code,
            category,
            next,
            clip(&self.failure_detail(result, subtype)),
        ))
    }

    /// Reason code, category and next action for an error `result`.
    ///
    /// Turn and budget limits are the config's own ceilings: retrying would spend the same
    /// budget again on the same prompt, so a person decides (policy, escalate). Credentials
    /// and requests the API refuses as wrong (a 4xx other than 408/429, an unknown model) are
    /// permanent until a person fixes the config (manual); 5xx, 529, `overloaded`,
    /// `server_error`, rate limits and unexplained errors are transient.
    fn classify(
        &self,
        result: &ResultEvent,
        subtype: &str,
    ) -> (&'static str, Category, NextAction) {
        match subtype {
            "error_max_turns" => {
                return ("agent.max_turns", Category::Policy, NextAction::Escalate)
            }
            "error_max_budget_usd" => {
                return ("agent.max_budget", Category::Policy, NextAction::Escalate)
            }
            _ => {}
        }
        let said = result.result.as_deref().unwrap_or("");
        let errors = result.errors.iter().filter_map(Value::as_str);
        if errors
            .clone()
            .any(|e| e.starts_with("No conversation found with session ID"))
        {
            return (SESSION_NOT_FOUND, Category::Transient, NextAction::Retry);
        }
        let status = result
            .api_error_status
            .or_else(|| self.last_retry.as_ref().and_then(|(s, _)| *s));
        let kind = self
            .last_error
            .as_deref()
            .or_else(|| self.last_retry.as_ref().and_then(|(_, e)| e.as_deref()));
        if kind == Some("authentication_failed")
            || matches!(status, Some(401 | 403))
            || said.contains("Not logged in")
            || said.contains("Invalid API key")
        {
            return ("agent.auth", Category::Permanent, NextAction::Manual);
        }
        let model_refused = said.contains("selected model") || said.contains("model:");
        match status {
            Some(400 | 404 | 422) => ("agent.config", Category::Permanent, NextAction::Manual),
            Some(status) if (400..500).contains(&status) && status != 408 && status != 429 => {
                ("agent.config", Category::Permanent, NextAction::Manual)
            }
            None if model_refused && subtype == "success" => {
                ("agent.config", Category::Permanent, NextAction::Manual)
            }
            _ if subtype == "success" => {
                ("agent.api_error", Category::Transient, NextAction::Retry)
            }
            _ if subtype == "error_during_execution" => {
                ("agent.error_result", Category::Transient, NextAction::Retry)
            }
            _ => (
                "agent.error_result",
                Category::Unknown,
                NextAction::Escalate,
            ),
        }
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
        if let Some(kind) = &self.last_error {
            facts.push(format!("error `{kind}`"));
        }
        if let Some(reason) = &result.terminal_reason {
            facts.push(format!("terminal reason `{reason}`"));
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

/// The detail of a run whose tool calls were denied: each tool and its input.
fn denials_detail(result: &ResultEvent) -> String {
    let mut detail = format!(
        "Claude Code was denied {} tool call(s); the run's work is likely incomplete. \
         Allow the tools (agent.allowed_tools, permission_mode) or set \
         allow_permission_denials: true.",
        result.permission_denials.len()
    );
    for denial in &result.permission_denials {
        let input = denial
            .tool_input
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default();
        let tool = denial.tool_name.as_deref().unwrap_or("(unnamed tool)");
        detail.push_str(&format!("\n- {tool} {input}"));
    }
    detail
}

/// The last content block of an assistant message, as an event: `message` (text),
/// `tool_use` (the tool and its main argument) or `thinking`.
fn last_block(content: &Value) -> Option<(&'static str, String)> {
    let block = match content {
        Value::String(s) => return Some(("message", s.clone())),
        Value::Array(blocks) => blocks.last()?,
        _ => return None,
    };
    let text = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_string);
    match block.get("type").and_then(Value::as_str)? {
        "text" => Some(("message", text("text")?)),
        "thinking" => Some(("thinking", text("thinking").unwrap_or_default())),
        "tool_use" => {
            let name = text("name").unwrap_or_else(|| "a tool".to_string());
            let input = block.get("input");
            let arg = [
                "command",
                "file_path",
                "path",
                "pattern",
                "url",
                "description",
            ]
            .iter()
            .find_map(|k| input.and_then(|i| i.get(*k)).and_then(Value::as_str));
            Some(("tool_use", format!("{name} {}", arg.unwrap_or_default())))
        }
        _ => None,
    }
}

/// A `user` event carrying a tool's result, as an event: `tool_result` or `tool_error`.
fn tool_result(event: &Value) -> Option<(&'static str, String)> {
    let blocks = event.get("message")?.get("content")?.as_array()?;
    let block = blocks
        .iter()
        .rev()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    let kind = if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        "tool_error"
    } else {
        "tool_result"
    };
    let text = match block.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    };
    Some((kind, text))
}

/// A `rate_limit_event`'s `rate_limit_info`, read at `now`. Lenient: a field of an
/// unexpected type is left out, an unknown status or limit type is kept as spelled, a
/// missing one reads `unknown`; `None` only without a `rate_limit_info` object.
///
/// Claude Code 2.1.197 emits it when the limits it reads from the API's
/// `anthropic-ratelimit-unified-*` response headers change:
/// `{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning",
/// "resetsAt":1765000000,"rateLimitType":"five_hour","utilization":0.82,
/// "overageStatus":"rejected","isUsingOverage":false,"surpassedThreshold":0.8},
/// "uuid":"...","session_id":"..."}`.
pub(super) fn rate_limit(event: &Value, now: chrono::DateTime<chrono::Utc>) -> Option<RateLimit> {
    let info = event.get("rate_limit_info")?.as_object()?;
    let text = |key: &str| info.get(key).and_then(Value::as_str).map(str::to_string);
    let number = |key: &str| {
        info.get(key)
            .and_then(Value::as_f64)
            .filter(|n| n.is_finite())
    };
    let resets_at = number("resetsAt").and_then(|secs| {
        // Seconds since the epoch; a value in milliseconds would be past the year 2600.
        let secs = if secs > 2e10 { secs / 1000.0 } else { secs };
        chrono::DateTime::from_timestamp(secs as i64, 0)
    });
    Some(RateLimit {
        limit_type: text("rateLimitType").unwrap_or_else(|| "unknown".to_string()),
        status: text("status").unwrap_or_else(|| "unknown".to_string()),
        resets_at,
        utilization: number("utilization"),
        overage_status: text("overageStatus"),
        is_using_overage: info.get("isUsingOverage").and_then(Value::as_bool),
        surpassed_threshold: number("surpassedThreshold"),
        observed_at: now,
    })
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

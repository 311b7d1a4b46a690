//! A scripted model server on 127.0.0.1 for the real agent CLIs: the Anthropic Messages API
//! (`POST /v1/messages`, streaming SSE and the non-streaming form Claude Code falls back to),
//! the OpenAI Responses API (`POST /v1/responses`, SSE), OpenAI Chat Completions (`chat`) and
//! the Gemini API (`gemini`), answering each model call with the next step of a per-test
//! script (whatever the protocol), logging every request, and counting the tokens it bills
//! so tests can hold the CLI's accounting to it.
//!
//! Shapes follow the vendors' API references (Anthropic "Streaming Messages": `message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, `error`; OpenAI
//! "Responses streaming events": `response.created`, `response.output_item.added/done`,
//! `response.output_text.delta`, `response.completed`, `response.failed`).

mod chat;
mod gemini;
mod tools;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};

/// One answer to one model call.
#[derive(Debug, Clone)]
pub enum Step {
    /// A short text, then a tool call writing `content` to `file` (Claude: the Write tool with
    /// an absolute path; Codex: an `exec_command` call run in the working directory).
    WriteFile {
        /// File name; Claude gets it joined to the workspace path.
        file: String,
        /// What to write.
        content: String,
    },
    /// A tool call running a shell command (Claude: Bash; Codex: exec_command).
    Shell(String),
    /// A final text, no tool call.
    Text(String),
    /// This HTTP status with the vendor's error body (`x-should-retry: false` for Anthropic).
    Status(u16),
    /// An SSE `error` event mid-stream (Anthropic: after `message_start`; OpenAI: after the
    /// first output item, as `response.failed`).
    StreamError,
    /// The connection closed mid-stream.
    Cut,
    /// A stream that starts (a first event or a first text chunk) and then never goes on
    /// nor ends: a model that hangs. Not billed.
    Hang,
}

/// Tokens billed per completed Anthropic call: input, cache writes, cache reads, output. A
/// streamed call the server ends with an `error` event after `message_start` bills the input
/// and the one output token that event reported; a cut connection bills nothing.
pub const CLAUDE_CALL: [u64; 4] = [1000, 200, 30, 40];
/// Tokens billed per completed OpenAI call: input (cached included), cached, output,
/// reasoning (included in output).
pub const CODEX_CALL: [u64; 4] = [1500, 1200, 60, 7];

/// Tokens billed per completed Gemini API call: `promptTokenCount`, `candidatesTokenCount`
/// (no cached content, no thoughts: Gemini CLI reports only these two counts).
pub const GEMINI_CALL: [u64; 2] = [2000, 80];
/// Tokens billed per completed Chat Completions call: `prompt_tokens` (cached included),
/// `prompt_tokens_details.cached_tokens`, `completion_tokens`.
pub const CHAT_CALL: [u64; 3] = [1800, 600, 70];

/// What the server billed, in sortie's disjoint fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Billed {
    /// Completed model calls.
    pub calls: u64,
    /// Input tokens outside any cache.
    pub input: u64,
    /// Cache reads.
    pub cache_read: u64,
    /// Cache writes.
    pub cache_write: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Logged {
    /// Request path.
    pub path: String,
    /// `x-api-key` or `authorization`, as sent.
    pub credential: Option<String>,
    /// The JSON body (Null when not JSON).
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    steps: VecDeque<Step>,
    /// Answer once the script is used up (a loop for `--max-turns`).
    then: Option<Step>,
    workspace: String,
    log: Vec<Logged>,
    billed: Billed,
    /// The part of `billed` spent on side calls (see `ModelServer::side_billed`).
    side: Billed,
    /// The last completed call that was not a side call, alone.
    last: Billed,
    /// Streams of `Step::Hang` still open (the client has not gone away).
    hanging: usize,
    counter: u64,
}

impl Shared {
    /// Bill one completed Gemini or Chat Completions call of these disjoint counts.
    fn bill(&mut self, side: bool, input: u64, cache_read: u64, output: u64) {
        self.billed.add(input, cache_read, 0, output, 0);
        if side {
            self.side.add(input, cache_read, 0, output, 0);
        } else {
            self.last = Billed::default();
            self.last.add(input, cache_read, 0, output, 0);
        }
    }
}

impl Billed {
    /// Add one completed call of these disjoint counts.
    fn add(&mut self, input: u64, cache_read: u64, cache_write: u64, output: u64, reasoning: u64) {
        self.calls += 1;
        self.input += input;
        self.cache_read += cache_read;
        self.cache_write += cache_write;
        self.output += output;
        self.reasoning += reasoning;
    }

    /// This bill less `other` (an earlier reading, or the side calls).
    pub fn minus(&self, other: &Billed) -> Billed {
        Billed {
            calls: self.calls - other.calls,
            input: self.input - other.input,
            cache_read: self.cache_read - other.cache_read,
            cache_write: self.cache_write - other.cache_write,
            output: self.output - other.output,
            reasoning: self.reasoning - other.reasoning,
        }
    }
}

/// The model call a request path is, if it is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Messages,
    Responses,
    Chat,
    /// Gemini `:generateContent` (`false`) or `:streamGenerateContent` (`true`).
    Gemini(bool),
}

fn endpoint(path: &str) -> Option<Endpoint> {
    match path {
        "/v1/messages" => Some(Endpoint::Messages),
        "/v1/responses" => Some(Endpoint::Responses),
        "/v1/chat/completions" => Some(Endpoint::Chat),
        _ if path.starts_with("/v1beta/models/") => match path.rsplit_once(':')?.1 {
            "generateContent" => Some(Endpoint::Gemini(false)),
            "streamGenerateContent" => Some(Endpoint::Gemini(true)),
            _ => None,
        },
        _ => None,
    }
}

/// A running server; dropped with the test's runtime.
#[derive(Clone)]
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl ModelServer {
    /// Start on a free 127.0.0.1 port with `steps` for the model calls, in order; once they are
    /// used up, `then` answers every call (or a 500 when `None`). `workspace` is the absolute
    /// path Claude's Write tool calls use.
    pub async fn start(steps: Vec<Step>, then: Option<Step>, workspace: &str) -> ModelServer {
        let shared = Arc::new(Mutex::new(Shared {
            steps: steps.into(),
            then,
            workspace: workspace.to_string(),
            ..Default::default()
        }));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ModelServer { addr, shared }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.shared.lock().unwrap().log.clone()
    }

    /// The model calls so far (requests to a messages, responses, chat completions or
    /// Gemini generate endpoint; token counts are not model calls).
    pub fn model_calls(&self) -> Vec<Logged> {
        self.requests()
            .into_iter()
            .filter(|r| endpoint(&r.path).is_some())
            .collect()
    }

    /// Tokens billed for completed calls.
    pub fn billed(&self) -> Billed {
        self.shared.lock().unwrap().billed
    }

    /// The part of [`ModelServer::billed`] spent on side calls: calls that offer the model
    /// no tools (`tools: []` for the Messages API), or force one tool (an agent's
    /// next-speaker checks, titles, JSON classifiers, Claude Code's list of the files a
    /// command touched). They are answered (a short text, or JSON fitting the schema asked
    /// for) without taking a step of the script.
    pub fn side_billed(&self) -> Billed {
        self.shared.lock().unwrap().side
    }

    /// What the last completed call that was not a side call billed, alone.
    pub fn last_call_billed(&self) -> Billed {
        self.shared.lock().unwrap().last
    }

    /// How many `Step::Hang` streams are still open: 0 once every hung client went away.
    pub fn hanging(&self) -> usize {
        self.shared.lock().unwrap().hanging
    }

    /// The absolute path Claude's Write tool calls use from now on.
    pub fn set_workspace(&self, workspace: &str) {
        self.shared.lock().unwrap().workspace = workspace.to_string();
    }

    /// Replace the script (for a second attempt against the same server).
    pub fn script(&self, steps: Vec<Step>, then: Option<Step>) {
        let mut shared = self.shared.lock().unwrap();
        shared.steps = steps.into();
        shared.then = then;
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Shared>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let credential = ["x-api-key", "x-goog-api-key", "authorization"]
        .iter()
        .find_map(|h| headers.get(*h))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let path = uri.path().to_string();
    let (step, n, workspace, side) = {
        let mut s = shared.lock().unwrap();
        s.log.push(Logged {
            path: path.clone(),
            credential,
            body: body.clone(),
        });
        let side = match endpoint(&path) {
            // Claude Code's own small calls with `tools: []` (after a Bash call, the haiku
            // call that lists the files the command touched).
            Some(Endpoint::Messages) => body["tools"].as_array().is_some_and(Vec::is_empty),
            Some(Endpoint::Chat) => chat::is_side(&body),
            Some(Endpoint::Gemini(_)) => gemini::is_side(&body),
            _ => false,
        };
        let step = if endpoint(&path).is_some() && !side {
            s.steps.pop_front().or_else(|| s.then.clone())
        } else {
            None
        };
        s.counter += 1;
        (step, s.counter, s.workspace.clone(), side)
    };
    let model = body["model"].as_str().unwrap_or("mock-model").to_string();
    match endpoint(&path) {
        Some(Endpoint::Messages) => {
            let step = step_or_side(step, side, || "ok".into());
            anthropic(&shared, step, n, &model, &workspace, &body, side)
        }
        Some(Endpoint::Responses) => openai(&shared, step.unwrap_or(Step::Status(500)), n, &model),
        Some(Endpoint::Chat) => chat::answer(&shared, step, n, &model, &workspace, &body),
        Some(Endpoint::Gemini(stream)) => {
            let model = path
                .trim_start_matches("/v1beta/models/")
                .split(':')
                .next()
                .unwrap_or("mock-gemini");
            gemini::answer(&shared, step, stream, model, &workspace, &body)
        }
        None if path.ends_with(":countTokens") => json_response(200, gemini::count_tokens()),
        // Anything else the CLIs ask (metadata): an empty success.
        None => json_response(200, json!({})),
    }
}

fn json_response(status: u16, body: Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-should-retry", "false")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// How a stream ends after its events.
enum Tail {
    /// As the protocol ends it.
    End,
    /// The connection closes mid-stream.
    Cut,
    /// It never ends: counted in `Shared::hanging` until the client goes away.
    Hang,
}

fn sse(events: Vec<(String, Value)>, cut: bool) -> Response {
    let frames = events
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    sse_frames(frames, if cut { Tail::Cut } else { Tail::End }, None)
}

/// Counts a hung stream while its body lives (the body is dropped when the client goes).
struct HangGuard(Arc<Mutex<Shared>>);

impl Drop for HangGuard {
    fn drop(&mut self) {
        self.0.lock().unwrap().hanging -= 1;
    }
}

/// An SSE response of these raw frames, then `tail` (`shared` counts a hang).
fn sse_frames(frames: Vec<String>, tail: Tail, shared: Option<&Arc<Mutex<Shared>>>) -> Response {
    use futures_util::StreamExt;
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        frames.into_iter().map(|f| Ok(Bytes::from(f))).collect();
    let body = futures_util::stream::iter(chunks);
    let body = match tail {
        Tail::End => body.boxed(),
        // Let the events reach the client, then drop the connection mid-stream.
        Tail::Cut => body
            .chain(futures_util::stream::once(async {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                Err(std::io::Error::other("cut by the script"))
            }))
            .boxed(),
        Tail::Hang => {
            let shared = shared.expect("a hang is counted").clone();
            shared.lock().unwrap().hanging += 1;
            let guard = HangGuard(shared);
            body.chain(
                futures_util::stream::pending::<Result<Bytes, std::io::Error>>().map(move |x| {
                    let _held = &guard;
                    x
                }),
            )
            .boxed()
        }
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(body))
        .unwrap()
}

/// The names of the tools a request offers (`tools[].name`).
fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// The offered tool that does `what` (`Write`, `Bash`): Claude Code's own, else one an MCP
/// server offers under that name (claude-code-acp's `mcp__acp__Write`, which writes through
/// the ACP client), else the plain name.
fn tool_named(tools: &[String], what: &str) -> String {
    let suffix = format!("__{what}");
    tools
        .iter()
        .find(|t| *t == what)
        .or_else(|| tools.iter().find(|t| t.ends_with(&suffix)))
        .cloned()
        .unwrap_or_else(|| what.to_string())
}

/// Content blocks of a step: Anthropic JSON blocks, calling the tools `tools` offers.
fn claude_blocks(step: &Step, n: u64, workspace: &str, tools: &[String]) -> Vec<Value> {
    match step {
        Step::WriteFile { file, content } => vec![
            json!({"type": "text", "text": "I'll write the file."}),
            json!({"type": "tool_use", "id": format!("toolu_{n:04}"), "name": tool_named(tools, "Write"),
                   "input": {"file_path": tools::target(workspace, file), "content": content}}),
        ],
        Step::Shell(command) => vec![
            json!({"type": "text", "text": "I'll run a command."}),
            json!({"type": "tool_use", "id": format!("toolu_{n:04}"), "name": tool_named(tools, "Bash"),
                   "input": {"command": command, "description": "run the command"}}),
        ],
        Step::Text(text) => vec![json!({"type": "text", "text": text})],
        _ => vec![json!({"type": "text", "text": "partial"})],
    }
}

fn anthropic(
    shared: &Arc<Mutex<Shared>>,
    step: Step,
    n: u64,
    model: &str,
    workspace: &str,
    body: &Value,
    side: bool,
) -> Response {
    let stream = body["stream"] == true;
    let tools = &offered_tools(body);
    if let Step::Status(status) = step {
        let kind = match status {
            401 => "authentication_error",
            400 => "invalid_request_error",
            404 => "not_found_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        return json_response(
            status,
            json!({"type": "error", "error": {"type": kind, "message": format!("mock: {kind}")}}),
        );
    }
    let [input, cache_write, cache_read, output] = CLAUDE_CALL;
    let blocks = claude_blocks(&step, n, workspace, tools);
    let stop = if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let id = format!("msg_{n:04}");
    let usage = json!({"input_tokens": input, "cache_creation_input_tokens": cache_write,
                       "cache_read_input_tokens": cache_read, "output_tokens": output});
    let completes = matches!(
        step,
        Step::WriteFile { .. } | Step::Shell(_) | Step::Text(_)
    );
    {
        // A stream the server ends with an `error` event after `message_start` has reported
        // its input and one output token, and the server counts them; a connection cut
        // mid-stream is not billed (the response never ended).
        let mut s = shared.lock().unwrap();
        let errored = stream && matches!(step, Step::StreamError);
        if completes {
            s.billed.calls += 1;
            s.billed.output += output;
        } else if errored {
            s.billed.output += 1;
        }
        if completes || errored {
            s.billed.input += input;
            s.billed.cache_write += cache_write;
            s.billed.cache_read += cache_read;
        }
        if completes && side {
            s.side.add(input, cache_read, cache_write, output, 0);
        }
    }
    if !stream {
        let mut message = json!({"id": id, "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": null, "usage": usage});
        if !completes {
            message = json!({"type": "error", "error": {"type": "api_error", "message": "mock: the stream failed"}});
            return json_response(500, message);
        }
        return json_response(200, message);
    }
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![(
        "message_start".to_string(),
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    )];
    // Trouble comes after `message_start`, before any content block: what makes Claude
    // Code retry the call without streaming.
    match step {
        Step::StreamError => {
            events.push((
                "error".into(),
                json!({"type": "error",
                    "error": {"type": "overloaded_error", "message": "mock: the stream failed"}}),
            ));
            return sse(events, false);
        }
        Step::Cut => return sse(events, true),
        Step::Hang => return hang(shared, events),
        _ => {}
    }
    for (i, block) in blocks.iter().enumerate() {
        let (start, delta) = if block["type"] == "tool_use" {
            let mut start = block.clone();
            start["input"] = json!({});
            (
                start,
                json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
            )
        } else {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            )
        };
        events.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        events.push((
            "content_block_delta".into(),
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
        events.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    events.push((
        "message_delta".into(),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    ));
    events.push(("message_stop".into(), json!({"type": "message_stop"})));
    sse(events, false)
}

/// The named events, then a stream that never ends.
fn hang(shared: &Arc<Mutex<Shared>>, events: Vec<(String, Value)>) -> Response {
    let frames = events
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    sse_frames(frames, Tail::Hang, Some(shared))
}

/// OpenAI's error body for `status` (Responses and Chat Completions alike).
fn openai_error(status: u16) -> Response {
    let (kind, message) = match status {
        401 => ("invalid_api_key", "mock: Incorrect API key provided"),
        400 => ("invalid_request_error", "mock: the request is invalid"),
        _ => ("server_error", "mock: internal server error"),
    };
    json_response(
        status,
        json!({"error": {"message": message, "type": kind, "code": kind, "param": null}}),
    )
}

/// The step that answers a call: the script's; else, for a side call, `side_answer` as a
/// text; else (the script is used up) a 500.
fn step_or_side(step: Option<Step>, side: bool, side_answer: impl FnOnce() -> String) -> Step {
    match step {
        Some(step) => step,
        None if side => Step::Text(side_answer()),
        None => Step::Status(500),
    }
}

fn openai(shared: &Arc<Mutex<Shared>>, step: Step, n: u64, model: &str) -> Response {
    if let Step::Status(status) = step {
        return openai_error(status);
    }
    let [input, cached, output, reasoning] = CODEX_CALL;
    let resp_id = format!("resp_{n:04}");
    let response = |status: &str, usage: Value| {
        json!({"id": resp_id, "object": "response", "created_at": 1_700_000_000, "status": status,
               "model": model, "output": [], "usage": usage})
    };
    let mut events = vec![(
        "response.created".to_string(),
        json!({"type": "response.created", "response": response("in_progress", Value::Null)}),
    )];
    let text = match &step {
        Step::WriteFile { .. } => "I'll write the file.",
        Step::Shell(_) => "I'll run a command.",
        Step::Text(text) => text.as_str(),
        _ => "partial",
    };
    let msg_id = format!("msg_{n:04}");
    events.push((
        "response.output_item.added".into(),
        json!({"type": "response.output_item.added",
        "output_index": 0, "item": {"type": "message", "id": msg_id, "role": "assistant",
        "status": "in_progress", "content": []}}),
    ));
    events.push((
        "response.output_text.delta".into(),
        json!({"type": "response.output_text.delta",
        "item_id": msg_id, "output_index": 0, "content_index": 0, "delta": text}),
    ));
    events.push(("response.output_item.done".into(), json!({"type": "response.output_item.done",
        "output_index": 0, "item": {"type": "message", "id": msg_id, "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}})));
    match &step {
        Step::StreamError => {
            events.push((
                "response.failed".into(),
                json!({"type": "response.failed",
                "response": {"id": resp_id, "status": "failed",
                "error": {"code": "server_error", "message": "mock: the stream failed"}}}),
            ));
            return sse(events, false);
        }
        Step::Cut => return sse(events, true),
        Step::Hang => return hang(shared, events),
        _ => {}
    }
    let command = match &step {
        Step::WriteFile { file, content } => Some(format!(
            "printf '%s' '{}' > {file}",
            content.replace('\'', "'\\''")
        )),
        Step::Shell(command) => Some(command.clone()),
        _ => None,
    };
    if let Some(command) = command {
        let call = json!({"type": "function_call", "id": format!("fc_{n:04}"),
            "call_id": format!("call_{n:04}"), "name": "exec_command", "status": "completed",
            "arguments": json!({"cmd": command}).to_string()});
        events.push((
            "response.output_item.added".into(),
            json!({"type": "response.output_item.added",
            "output_index": 1, "item": call}),
        ));
        events.push((
            "response.output_item.done".into(),
            json!({"type": "response.output_item.done",
            "output_index": 1, "item": call}),
        ));
    }
    {
        let mut s = shared.lock().unwrap();
        s.billed.calls += 1;
        s.billed.input += input - cached;
        s.billed.cache_read += cached;
        s.billed.output += output;
        s.billed.reasoning += reasoning;
    }
    let usage = json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output});
    events.push((
        "response.completed".into(),
        json!({"type": "response.completed",
        "response": response("completed", usage)}),
    ));
    sse(events, false)
}

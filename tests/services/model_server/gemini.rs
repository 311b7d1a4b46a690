//! The Gemini API as Gemini CLI calls it: `POST /v1beta/models/{model}:streamGenerateContent
//! ?alt=sse` (data-only SSE of `GenerateContentResponse` chunks), `:generateContent` (one
//! JSON response) and `:countTokens`. A step's tool call is a `functionCall` part of the
//! tool the request declares; the last chunk carries `finishReason` and `usageMetadata`.

use std::sync::{Arc, Mutex};

use axum::response::Response;
use serde_json::{json, Value};

use super::tools::{call_for, filler, Offered};
use super::{json_response, sse_frames, step_or_side, Shared, Step, Tail, GEMINI_CALL};

/// The function declarations a request offers.
fn offered(body: &Value) -> Vec<Offered> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().into_iter().flatten())
        .filter_map(|f| {
            let schema = if f["parametersJsonSchema"].is_object() {
                f["parametersJsonSchema"].clone()
            } else {
                f["parameters"].clone()
            };
            Some(Offered {
                name: f["name"].as_str()?.to_string(),
                schema,
            })
        })
        .collect()
}

/// A call that declares no function: Gemini CLI's own checks (next speaker, loops), not
/// a step of the agent's turn.
pub(super) fn is_side(body: &Value) -> bool {
    offered(body).is_empty()
}

/// `:countTokens`: a fixed count (not billed; nothing is generated).
pub(super) fn count_tokens() -> Value {
    json!({"totalTokens": GEMINI_CALL[0]})
}

fn chunk(parts: Vec<Value>, model: &str, finish: Option<&str>, usage: Option<Value>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    let mut chunk = json!({"candidates": [candidate], "modelVersion": model,
        "responseId": format!("mock-{model}")});
    if let Some(usage) = usage {
        chunk["usageMetadata"] = usage;
    }
    chunk
}

/// The answer to a generate call: `step` (`None` for a side call or a used-up script).
pub(super) fn answer(
    shared: &Arc<Mutex<Shared>>,
    step: Option<Step>,
    stream: bool,
    model: &str,
    workspace: &str,
    body: &Value,
) -> Response {
    let side = is_side(body);
    let step = step_or_side(step, side, || side_text(body));
    if let Step::Status(status) = step {
        let kind = match status {
            400 => "INVALID_ARGUMENT",
            401 | 403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            429 => "RESOURCE_EXHAUSTED",
            503 => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        return json_response(
            status,
            json!({"error": {"code": status, "message": format!("mock: {kind}"), "status": kind}}),
        );
    }
    let text = match &step {
        Step::WriteFile { .. } => "I'll write the file.".to_string(),
        Step::Shell(_) => "I'll run a command.".to_string(),
        Step::Text(text) => text.clone(),
        _ => "partial".to_string(),
    };
    let first = chunk(vec![json!({"text": text})], model, None, None);
    match step {
        Step::Cut | Step::StreamError => {
            return sse_frames(vec![frame(&first)], Tail::Cut, None);
        }
        Step::Hang => return sse_frames(vec![frame(&first)], Tail::Hang, Some(shared)),
        _ => {}
    }
    let [prompt, candidates] = GEMINI_CALL;
    shared.lock().unwrap().bill(side, prompt, 0, candidates);
    let usage = json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates});
    let call = call_for(&step, &offered(body), workspace)
        .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}}));
    if !stream {
        let mut parts = vec![json!({"text": text})];
        parts.extend(call);
        return json_response(200, chunk(parts, model, Some("STOP"), Some(usage)));
    }
    // A text-only answer is one chunk (Gemini CLI counts a final chunk without parts as an
    // invalid stream); a tool call comes in a second chunk after the text.
    let frames = match call {
        Some(call) => vec![
            frame(&first),
            frame(&chunk(vec![call], model, Some("STOP"), Some(usage))),
        ],
        None => vec![frame(&chunk(
            vec![json!({"text": text})],
            model,
            Some("STOP"),
            Some(usage),
        ))],
    };
    sse_frames(frames, Tail::End, None)
}

fn frame(chunk: &Value) -> String {
    format!("data: {chunk}\r\n\r\n")
}

/// A side call's answer: JSON fitting the schema it asks for, else a short text.
fn side_text(body: &Value) -> String {
    let config = &body["generationConfig"];
    if config["responseMimeType"] == "application/json" {
        let schema = if config["responseJsonSchema"].is_object() {
            &config["responseJsonSchema"]
        } else {
            &config["responseSchema"]
        };
        return filler("answer", schema).to_string();
    }
    "ok".to_string()
}

//! OpenAI Chat Completions as Qwen Code and OpenCode call it: `POST /v1/chat/completions`,
//! streaming (`chat.completion.chunk` SSE: a text delta, the tool call's deltas, the chunk
//! with `finish_reason`, then a chunk with no choices carrying `usage`, then `[DONE]`) or not
//! (one `chat.completion`). A step's tool call is a call of the function the request offers.

use std::sync::{Arc, Mutex};

use axum::response::Response;
use serde_json::{json, Value};

use super::tools::{call_for, filler, Offered};
use super::{json_response, openai_error, sse_frames, step_or_side, Shared, Step, Tail, CHAT_CALL};

/// The functions a request offers.
fn offered(body: &Value) -> Vec<Offered> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Offered {
                name: t["function"]["name"].as_str()?.to_string(),
                schema: t["function"]["parameters"].clone(),
            })
        })
        .collect()
}

/// The function a request forces (`tool_choice: {"type": "function", ...}`), if any.
fn forced(body: &Value) -> Option<Offered> {
    let name = body["tool_choice"]["function"]["name"].as_str()?;
    offered(body).into_iter().find(|t| t.name == name)
}

/// A call that offers no tools, or forces one (a title, a JSON classification): the
/// agent's side call, not a step of its turn.
pub(super) fn is_side(body: &Value) -> bool {
    offered(body).is_empty() || forced(body).is_some()
}

/// The answer to a chat completion: `step` (`None` for a side call or a used-up script).
pub(super) fn answer(
    shared: &Arc<Mutex<Shared>>,
    step: Option<Step>,
    n: u64,
    model: &str,
    workspace: &str,
    body: &Value,
) -> Response {
    let side = is_side(body);
    let forced = forced(body);
    let step = step_or_side(step, side, || side_text(body));
    if let Step::Status(status) = step {
        return openai_error(status);
    }
    let text = match &step {
        Step::WriteFile { .. } => "I'll write the file.".to_string(),
        Step::Shell(_) => "I'll run a command.".to_string(),
        Step::Text(text) => text.clone(),
        _ => "partial".to_string(),
    };
    let id = format!("chatcmpl-{n:04}");
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let first = chunk(json!({"role": "assistant", "content": text}), None);
    match step {
        Step::Cut | Step::StreamError => return sse_frames(vec![frame(&first)], Tail::Cut, None),
        Step::Hang => return sse_frames(vec![frame(&first)], Tail::Hang, Some(shared)),
        _ => {}
    }
    let [prompt, cached, completion] = CHAT_CALL;
    shared
        .lock()
        .unwrap()
        .bill(side, prompt - cached, cached, completion);
    let usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}});
    let call = match &forced {
        Some(tool) => Some((tool.name.clone(), filler(&tool.name, &tool.schema))),
        None => call_for(&step, &offered(body), workspace),
    };
    let call_id = format!("call_{n:04}");
    let finish = if call.is_some() { "tool_calls" } else { "stop" };
    if body["stream"] != true {
        let mut message = json!({"role": "assistant", "content": text});
        if let Some((name, args)) = &call {
            message["tool_calls"] = json!([{"id": call_id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]);
        }
        return json_response(
            200,
            json!({"id": id, "object": "chat.completion", "created": 1_700_000_000,
                "model": model, "choices": [{"index": 0, "message": message,
                "finish_reason": finish}], "usage": usage}),
        );
    }
    let mut frames = vec![frame(&first)];
    if let Some((name, args)) = &call {
        frames.push(frame(&chunk(
            json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        )));
        frames.push(frame(&chunk(
            json!({"tool_calls": [{"index": 0,
                "function": {"arguments": args.to_string()}}]}),
            None,
        )));
    }
    frames.push(frame(&chunk(json!({}), Some(finish))));
    let mut last = chunk(json!({}), None);
    last["choices"] = json!([]);
    last["usage"] = usage;
    frames.push(frame(&last));
    frames.push("data: [DONE]\n\n".to_string());
    sse_frames(frames, Tail::End, None)
}

fn frame(chunk: &Value) -> String {
    format!("data: {chunk}\n\n")
}

/// A side call's answer: JSON fitting the schema it asks for, else a short text.
fn side_text(body: &Value) -> String {
    let format = &body["response_format"];
    match format["type"].as_str() {
        Some("json_schema") => filler("answer", &format["json_schema"]["schema"]).to_string(),
        Some("json_object") => "{}".to_string(),
        _ => "ok".to_string(),
    }
}

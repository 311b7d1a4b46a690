//! Tokens as each ACP agent reports them, read into sortie's [`Usage`].
//!
//! The agents spell their counts differently (the ACP `Usage` shape in camelCase, OpenAI's
//! `prompt_tokens`, Gemini's `promptTokenCount`, snake case in `_meta`), and they differ on
//! whether cached input is a part of the input count and reasoning a part of the output
//! count. Where the agent gives a total, the reading that adds up to it is taken; without
//! one, the counts are taken as disjoint (cache apart from input) with reasoning inside the
//! output, as the ACP schema describes them.

use serde_json::Value;

use crate::agent::outcome::Usage;

const INPUT: &[&str] = &[
    "inputTokens",
    "input_tokens",
    "promptTokens",
    "prompt_tokens",
    "promptTokenCount",
];
const OUTPUT: &[&str] = &[
    "outputTokens",
    "output_tokens",
    "completionTokens",
    "completion_tokens",
    "candidatesTokenCount",
    "candidates_tokens",
];
const CACHE_READ: &[&str] = &[
    "cachedReadTokens",
    "cachedInputTokens",
    "cached_input_tokens",
    "cache_read_tokens",
    "cache_read_input_tokens",
    "cachedTokens",
    "cached_tokens",
    "cachedContentTokenCount",
];
const CACHE_WRITE: &[&str] = &[
    "cachedWriteTokens",
    "cache_write_tokens",
    "cache_creation_input_tokens",
];
const REASONING: &[&str] = &[
    "thoughtTokens",
    "thoughtsTokens",
    "thoughts_tokens",
    "thoughtsTokenCount",
    "reasoningOutputTokens",
    "reasoning_output_tokens",
    "reasoning_tokens",
];
const TOTAL: &[&str] = &["totalTokens", "total_tokens", "totalTokenCount"];

fn count(value: &Value, names: &[&str]) -> Option<u64> {
    names
        .iter()
        .find_map(|name| value.get(*name).and_then(Value::as_u64))
}

/// The token counts in `value` (an object of counts), or `None` when it holds neither an
/// input nor an output count.
pub(super) fn tokens(value: &Value) -> Option<Usage> {
    if !value.is_object() {
        return None;
    }
    let input = count(value, INPUT);
    let output = count(value, OUTPUT);
    if input.is_none() && output.is_none() {
        return None;
    }
    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
    let cache_read = count(value, CACHE_READ).unwrap_or(0);
    let cache_write = count(value, CACHE_WRITE).unwrap_or(0);
    let reasoning = count(value, REASONING).unwrap_or(0);
    let cache = cache_read.saturating_add(cache_write);
    // (cache counted inside input, reasoning counted outside output), the schema's reading first.
    let readings = [(false, false), (true, false), (false, true), (true, true)];
    let usage = |(cache_in_input, reasoning_apart): (bool, bool)| Usage {
        input_tokens: if cache_in_input {
            input.saturating_sub(cache)
        } else {
            input
        },
        output_tokens: if reasoning_apart {
            output.saturating_add(reasoning)
        } else {
            output
        },
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
        reasoning_tokens: reasoning,
        cost_usd: None,
    };
    let chosen = match count(value, TOTAL) {
        Some(total) => readings
            .into_iter()
            .find(|r| (!r.0 || input >= cache) && usage(*r).total_tokens() == total)
            .unwrap_or((false, false)),
        None => (false, false),
    };
    Some(usage(chosen))
}

/// Usage on a `session/update` (Qwen Code: `_meta.usage` on the update, one per model call).
pub(super) fn of_update(params: &Value) -> Option<Usage> {
    [
        params.pointer("/update/_meta/usage"),
        params.pointer("/_meta/usage"),
    ]
    .into_iter()
    .flatten()
    .find_map(tokens)
}

/// Usage on the `session/prompt` answer: Gemini CLI's `_meta.quota.token_count`, else the
/// standard `usage` (OpenCode: its last model call only).
pub(super) fn of_answer(result: &Value) -> Option<Usage> {
    [
        result.pointer("/_meta/quota/token_count"),
        result.get("usage"),
    ]
    .into_iter()
    .flatten()
    .find_map(tokens)
}

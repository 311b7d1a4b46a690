//! What one run consumed, in tokens and money, as its agent reported it: a leaf that the
//! agent runner, the budgets and the ledger all speak of.

use serde::Deserialize;

/// Tokens and money one run consumed, as the agent CLI reported them.
///
/// The four token counts are disjoint: `input_tokens` excludes cache reads and writes, and
/// `reasoning_tokens` is a part of `output_tokens`, so the billed total is
/// `input + cache_read + cache_write + output`.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to a prompt cache.
    pub input_tokens: u64,
    /// Output tokens the model wrote (reasoning included).
    pub output_tokens: u64,
    /// Input tokens read from a prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to a prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Output tokens spent on reasoning (a part of `output_tokens`).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Cost in US dollars, when the CLI reports one (Claude Code does, Codex does not).
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Every token billed: input, cache reads and writes, output.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
            .saturating_add(self.output_tokens)
    }

    /// Add `other` in (cost: the sum of the known costs).
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    /// What is left of `self` once `earlier` is taken away, field by field, never below
    /// zero (Codex reports a resumed thread's cumulative usage; this is one attempt's share).
    pub fn minus(&self, earlier: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_sub(earlier.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_sub(earlier.cache_write_tokens),
            reasoning_tokens: self
                .reasoning_tokens
                .saturating_sub(earlier.reasoning_tokens),
            cost_usd: match (self.cost_usd, earlier.cost_usd) {
                (Some(a), Some(b)) => Some((a - b).max(0.0)),
                (a, _) => a,
            },
        }
    }
}

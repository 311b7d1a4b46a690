//! What a run cost: the agent's own figure, else its tokens priced from `prices:`, else
//! unknown (never $0).

use serde::Serialize;

use crate::config::{Price, Prices};
use crate::usage::Usage;

/// A run's cost in US dollars, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "source", content = "usd", rename_all = "snake_case")]
pub enum Cost {
    /// The agent reported it (Claude Code's `total_cost_usd`); it wins over the table.
    Reported(f64),
    /// Computed from the run's tokens and its model's entry in `prices:`.
    Priced(f64),
    /// Neither: the agent reported no cost and the model has no price (or is not known).
    Unknown,
}

impl Cost {
    /// The dollars, when known.
    pub fn usd(self) -> Option<f64> {
        match self {
            Cost::Reported(usd) | Cost::Priced(usd) => Some(usd),
            Cost::Unknown => None,
        }
    }
}

/// `usage` priced at `price`: input and cache writes at `input`, cache reads at
/// `cached_input`, output (reasoning included) at `output`, each per million tokens.
pub fn price_usage(usage: &Usage, price: &Price) -> f64 {
    let per = |tokens: u64, usd_per_million: f64| tokens as f64 * usd_per_million / 1_000_000.0;
    per(
        usage.input_tokens.saturating_add(usage.cache_write_tokens),
        price.input,
    ) + per(usage.cache_read_tokens, price.cached_input)
        + per(usage.output_tokens, price.output)
}

/// What a run that used `usage` with `model` cost, given `prices`.
pub fn run_cost(usage: &Usage, model: Option<&str>, prices: &Prices) -> Cost {
    if let Some(usd) = usage.cost_usd {
        return Cost::Reported(usd);
    }
    match model.and_then(|m| prices.get(m)) {
        Some(price) => Cost::Priced(price_usage(usage, price)),
        None => Cost::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codex_usage() -> Usage {
        // Codex's own figures, as `agent::presets::codex` reads them: 12 000 input of
        // which 8 000 cached, 1 500 output.
        Usage {
            input_tokens: 4_000,
            cache_read_tokens: 8_000,
            output_tokens: 1_500,
            ..Usage::default()
        }
    }

    fn prices() -> Prices {
        Prices::from([(
            "gpt-5-codex".to_string(),
            Price {
                input: 1.25,
                cached_input: 0.125,
                output: 10.0,
            },
        )])
    }

    /// Issue #37: Codex reports tokens and no cost; the table prices them exactly.
    #[test]
    fn codex_tokens_are_priced_from_the_table() {
        // 4 000 * 1.25 + 8 000 * 0.125 + 1 500 * 10, per million: 0.005 + 0.001 + 0.015.
        let cost = run_cost(&codex_usage(), Some("gpt-5-codex"), &prices());
        assert!(matches!(cost, Cost::Priced(_)), "{cost:?}");
        let cost = cost.usd().unwrap();
        assert!((cost - 0.021).abs() < 1e-12, "{cost}");
    }

    /// A cost the agent reported wins over the table.
    #[test]
    fn a_reported_cost_wins_over_the_table() {
        let mut usage = codex_usage();
        usage.cost_usd = Some(0.5);
        assert_eq!(
            run_cost(&usage, Some("gpt-5-codex"), &prices()),
            Cost::Reported(0.5)
        );
    }

    /// An unknown model, or none, is an unknown cost: never $0.
    #[test]
    fn no_price_is_an_unknown_cost_not_zero() {
        assert_eq!(
            run_cost(&codex_usage(), Some("gpt-9"), &prices()),
            Cost::Unknown
        );
        assert_eq!(run_cost(&codex_usage(), None, &prices()), Cost::Unknown);
        assert_eq!(Cost::Unknown.usd(), None);
    }

    /// Cache writes cost what input costs.
    #[test]
    fn cache_writes_are_priced_as_input() {
        let usage = Usage {
            cache_write_tokens: 1_000_000,
            ..Usage::default()
        };
        let price = Price {
            input: 3.0,
            cached_input: 0.3,
            output: 15.0,
        };
        assert_eq!(price_usage(&usage, &price), 3.0);
    }
}

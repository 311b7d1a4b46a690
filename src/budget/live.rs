//! The limits one run is held to while it runs (per run of its stage, its ticket's, the
//! day's), checked against the usage its agent reports as it grows.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::cost::{run_cost, Cost};
use crate::config::Prices;
use crate::usage::Usage;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Tokens billed (input, cache reads and writes, output).
    Tokens,
    /// US dollars.
    Dollars,
}

/// One limit a run is held to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// The config key that sets it (`budgets.per_stage.qa.max_tokens_per_run`).
    pub key: String,
    /// What it counts.
    pub measure: Measure,
    /// The limit.
    pub max: f64,
    /// What its scope (the ticket, the day) had used before this run; 0 for a run limit.
    pub before: f64,
}

/// Every limit of one run, and how its tokens become dollars.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunLimits {
    /// The limits, in the order they are checked.
    pub limits: Vec<Limit>,
    /// The model the run's agent runs, when sortie can tell.
    pub model: Option<String>,
    /// `prices:`.
    pub prices: Prices,
}

/// A limit reached, with the figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exceeded {
    /// The limit.
    pub limit: Limit,
    /// What the run had used when it was stopped.
    pub run: f64,
}

impl Exceeded {
    /// The failure block's detail: the limit, its value and the figures.
    pub fn detail(&self) -> String {
        let l = &self.limit;
        let show = |v: f64| match l.measure {
            Measure::Tokens => format!("{} tokens", v.round() as u64),
            Measure::Dollars => format!("${v:.4}"),
        };
        let total = l.before + self.run;
        if l.before > 0.0 {
            format!(
                "stopped at {} in this run, {} with the {} before it; {} is {}",
                show(self.run),
                show(total),
                show(l.before),
                l.key,
                show(l.max)
            )
        } else {
            format!(
                "stopped at {} in this run; {} is {}",
                show(self.run),
                l.key,
                show(l.max)
            )
        }
    }
}

impl RunLimits {
    /// Whether no limit applies.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// The run's cost so far, from `usage`.
    pub fn cost(&self, usage: &Usage) -> Cost {
        run_cost(usage, self.model.as_deref(), &self.prices)
    }

    /// The first limit `usage` (the run's so far) reaches, if any. A dollar limit is
    /// not checked while the cost is unknown.
    pub fn check(&self, usage: &Usage) -> Option<Exceeded> {
        let tokens = usage.total_tokens() as f64;
        let dollars = self.cost(usage).usd();
        self.limits.iter().find_map(|limit| {
            let run = match limit.measure {
                Measure::Tokens => tokens,
                Measure::Dollars => dollars?,
            };
            (limit.before + run >= limit.max).then(|| Exceeded {
                limit: limit.clone(),
                run,
            })
        })
    }

    /// The dollar limits, by key, when the run's cost is unknown (nothing reported
    /// yet and no price for its model): they cannot be checked against it.
    pub fn unchecked_dollar_limits(&self) -> Vec<&str> {
        let priced = self
            .model
            .as_deref()
            .is_some_and(|m| self.prices.contains_key(m));
        if priced {
            return Vec::new();
        }
        self.limits
            .iter()
            .filter(|l| l.measure == Measure::Dollars)
            .map(|l| l.key.as_str())
            .collect()
    }
}

/// A run's limits, watched: the agent's stream reader hands it the usage as it grows,
/// and the first limit reached cancels the run (clones share the state).
#[derive(Debug, Clone, Default)]
pub struct BudgetWatch {
    limits: Arc<RunLimits>,
    tripped: Arc<Mutex<Option<Exceeded>>>,
    token: CancellationToken,
}

impl BudgetWatch {
    /// A watch over `limits`.
    pub fn new(limits: RunLimits) -> Self {
        BudgetWatch {
            limits: Arc::new(limits),
            ..Default::default()
        }
    }

    /// The limits watched.
    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// Compare the run's usage so far with the limits; the first one reached is kept
    /// and cancels the run.
    pub fn observe(&self, usage: &Usage) {
        if self.token.is_cancelled() {
            return;
        }
        if let Some(exceeded) = self.limits.check(usage) {
            *self.tripped.lock().unwrap_or_else(|e| e.into_inner()) = Some(exceeded);
            self.token.cancel();
        }
    }

    /// The limit that stopped the run, once one did.
    pub fn tripped(&self) -> Option<Exceeded> {
        self.tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves once a limit is reached.
    pub async fn reached(&self) {
        self.token.cancelled().await
    }
}

/// Resolves once `watch` saw a limit reached; never without a watch.
pub async fn limit_reached(watch: Option<&BudgetWatch>) {
    match watch {
        Some(watch) => watch.reached().await,
        None => std::future::pending().await,
    }
}

/// The detail of the failure of a run `watch` stopped: the limit and the figures.
pub fn stop_detail(watch: Option<&BudgetWatch>) -> String {
    watch
        .and_then(BudgetWatch::tripped)
        .map_or_else(|| "a budget limit was reached".to_string(), |e| e.detail())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Price;

    fn tokens(n: u64) -> Usage {
        Usage {
            input_tokens: n,
            ..Usage::default()
        }
    }

    fn limit(key: &str, measure: Measure, max: f64, before: f64) -> Limit {
        Limit {
            key: key.into(),
            measure,
            max,
            before,
        }
    }

    #[test]
    fn a_run_limit_trips_at_the_limit_not_before() {
        let limits = RunLimits {
            limits: vec![limit(
                "budgets.per_stage.qa.max_tokens_per_run",
                Measure::Tokens,
                200.0,
                0.0,
            )],
            ..Default::default()
        };
        assert_eq!(limits.check(&tokens(199)), None);
        let hit = limits.check(&tokens(250)).expect("over");
        assert_eq!(hit.run, 250.0);
        assert_eq!(
            hit.detail(),
            "stopped at 250 tokens in this run; budgets.per_stage.qa.max_tokens_per_run is 200 tokens"
        );
    }

    #[test]
    fn a_ticket_limit_counts_what_the_ticket_used_before() {
        let limits = RunLimits {
            limits: vec![limit(
                "budgets.max_tokens_per_ticket",
                Measure::Tokens,
                1000.0,
                900.0,
            )],
            ..Default::default()
        };
        assert_eq!(limits.check(&tokens(99)), None);
        let hit = limits.check(&tokens(100)).expect("at the limit");
        assert_eq!(
            hit.detail(),
            "stopped at 100 tokens in this run, 1000 tokens with the 900 tokens before it; \
             budgets.max_tokens_per_ticket is 1000 tokens"
        );
    }

    #[test]
    fn dollar_limits_use_the_reported_cost_else_the_price_else_wait() {
        let mut limits = RunLimits {
            limits: vec![limit(
                "budgets.max_cost_usd_per_day",
                Measure::Dollars,
                1.0,
                0.5,
            )],
            model: Some("m".into()),
            prices: Prices::new(),
        };
        let big = tokens(10_000_000);
        assert_eq!(limits.check(&big), None, "unknown cost: not checked");
        assert_eq!(
            limits.unchecked_dollar_limits(),
            ["budgets.max_cost_usd_per_day"]
        );
        limits.prices.insert(
            "m".into(),
            Price {
                input: 0.1,
                cached_input: 0.1,
                output: 0.1,
            },
        );
        assert!(limits.unchecked_dollar_limits().is_empty());
        let hit = limits.check(&big).expect("$1 priced + $0.5 before");
        assert!((hit.run - 1.0).abs() < 1e-9);
        let mut reported = tokens(1);
        reported.cost_usd = Some(0.25);
        assert_eq!(limits.check(&reported), None, "the reported $0.25 wins");
    }

    #[test]
    fn the_watch_keeps_the_first_limit_reached_and_cancels_once() {
        let watch = BudgetWatch::new(RunLimits {
            limits: vec![
                limit("a", Measure::Tokens, 100.0, 0.0),
                limit("b", Measure::Tokens, 50.0, 0.0),
            ],
            ..Default::default()
        });
        watch.observe(&tokens(10));
        assert_eq!(watch.tripped(), None);
        watch.observe(&tokens(60));
        assert_eq!(watch.tripped().unwrap().limit.key, "b");
        watch.observe(&tokens(500));
        assert_eq!(watch.tripped().unwrap().run, 60.0, "kept as first reached");
    }
}

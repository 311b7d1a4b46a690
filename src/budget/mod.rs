//! Spending: what a run cost (reported by its agent, priced from `prices:`, or unknown),
//! the limits of `budgets:` a run is held to while it runs, and the day those of
//! `max_cost_usd_per_day` count in (issue #37). Pure but for the cancel token.

mod cost;
mod day;
mod live;

pub use cost::{price_usage, run_cost, Cost};
pub use day::{day_spent, day_window, DayWindow};
pub use live::{limit_reached, stop_detail, BudgetWatch, Exceeded, Limit, Measure, RunLimits};

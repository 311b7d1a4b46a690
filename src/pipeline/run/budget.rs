//! A run's budget: the limits of `budgets:` checked before it starts (the ticket's
//! runs, tokens and dollars so far, the day's dollars), and the limits it is held to
//! while it runs (its stage's per-run limits, what is left of the ticket's and the
//! day's), built from the ledger's figures as the run starts.

use crate::budget::{day_window, Limit, Measure, RunLimits};
use crate::config::{Budgets, Stage};
use crate::ledger::UsageTotal;
use crate::pipeline::context::Context;

/// What the budget says about a run about to start.
pub(super) enum BudgetCheck {
    /// It may run, held to these limits (none may apply).
    Run(RunLimits),
    /// The ticket is at a limit: a `budget.exceeded` failure block, with this detail.
    TicketOver(String),
    /// The day's spending is at its limit: the run does not start, nothing is written.
    DayOver(String),
}

/// Check the limits that apply to `ticket_id`'s run of `stage` and build the ones it is
/// held to while it runs. A ledger that cannot tell the figures lets the run start
/// without the limits that need them (logged).
pub(super) fn check(ctx: &Context, stage: &Stage, ticket_id: &str) -> BudgetCheck {
    let budgets = &ctx.config.budgets;
    let ledger = &*ctx.ledger;
    let tracker = ctx.tracker_name();
    let mut limits = RunLimits {
        prices: ctx.config.prices.clone(),
        ..RunLimits::default()
    };
    let own = budgets.for_role(&stage.role);
    let key = |name: &str| format!("budgets.per_stage.{}.{name}", stage.role);
    if let Some(max) = own.max_tokens_per_run {
        limits.limits.push(limit(
            key("max_tokens_per_run"),
            Measure::Tokens,
            max as f64,
            0.0,
        ));
    }
    if let Some(max) = own.max_cost_usd_per_run {
        limits.limits.push(limit(
            key("max_cost_usd_per_run"),
            Measure::Dollars,
            max,
            0.0,
        ));
    }
    if budgets.max_cost_usd_per_day.is_some() {
        let day = day_window(ctx.clock.now(), budgets.timezone);
        match crate::budget::day_spent(ledger, tracker, day.start) {
            Ok(spent) => {
                if let Some(over) = day_over(budgets, spent, day.end) {
                    return BudgetCheck::DayOver(over);
                }
                let max = budgets.max_cost_usd_per_day.unwrap_or_default();
                limits.limits.push(limit(
                    "budgets.max_cost_usd_per_day".into(),
                    Measure::Dollars,
                    max,
                    spent,
                ));
            }
            Err(err) => {
                tracing::warn!(%err, "cannot read the day's spending; running without the day limit")
            }
        }
    }
    let ticket_limits = budgets.max_cost_usd_per_ticket.is_some()
        || budgets.max_tokens_per_ticket.is_some()
        || budgets.max_runs_per_ticket.is_some();
    if ticket_limits {
        match ledger.ticket_usage(tracker, ticket_id) {
            Ok(used) => {
                if let Some(over) = ticket_over(budgets, &used) {
                    return BudgetCheck::TicketOver(over);
                }
                if let Some(max) = budgets.max_tokens_per_ticket {
                    limits.limits.push(limit(
                        "budgets.max_tokens_per_ticket".into(),
                        Measure::Tokens,
                        max as f64,
                        used.total_tokens() as f64,
                    ));
                }
                if let Some(max) = budgets.max_cost_usd_per_ticket {
                    limits.limits.push(limit(
                        "budgets.max_cost_usd_per_ticket".into(),
                        Measure::Dollars,
                        max,
                        used.cost_usd,
                    ));
                }
            }
            Err(err) => {
                tracing::warn!(%err, "cannot read the ticket's usage; running without a budget check")
            }
        }
    }
    BudgetCheck::Run(limits)
}

fn limit(key: String, measure: Measure, max: f64, before: f64) -> Limit {
    Limit {
        key,
        measure,
        max,
        before,
    }
}

/// Why no run may start today, when the day's spending `spent` is at its limit; it
/// lifts at `ends`.
pub(crate) fn day_over(
    budgets: &Budgets,
    spent: f64,
    ends: chrono::DateTime<chrono::Utc>,
) -> Option<String> {
    let max = budgets.max_cost_usd_per_day?;
    (spent >= max).then(|| {
        let local = ends.with_timezone(&budgets.timezone.offset());
        format!(
            "the pipeline has spent ${spent:.2} today; budgets.max_cost_usd_per_day is \
             ${max:.2} (no run starts until {} {})",
            local.format("%Y-%m-%d %H:%M"),
            budgets.timezone.label()
        )
    })
}

/// Why the ticket may not run again under `budgets:`, if it may not.
fn ticket_over(budgets: &Budgets, used: &UsageTotal) -> Option<String> {
    if let Some(max) = budgets.max_runs_per_ticket {
        if used.runs >= max {
            return Some(format!(
                "the ticket has had {} runs; budgets.max_runs_per_ticket is {max}",
                used.runs
            ));
        }
    }
    if let Some(max) = budgets.max_tokens_per_ticket {
        let tokens = used.total_tokens();
        if tokens >= max {
            return Some(format!(
                "the ticket has used {tokens} tokens; budgets.max_tokens_per_ticket is {max}"
            ));
        }
    }
    if let Some(max) = budgets.max_cost_usd_per_ticket {
        if used.cost_usd >= max {
            return Some(format!(
                "the ticket has cost ${:.2}; budgets.max_cost_usd_per_ticket is ${max:.2}",
                used.cost_usd
            ));
        }
    }
    None
}

//! The day limit's hold on dispatch (`budgets.max_cost_usd_per_day`, issue #37): once
//! the day's spending reaches it, every run the plan would start waits for the next day.

use chrono::{DateTime, Utc};

use super::eligibility::SkipReason;
use super::plan::{Plan, Skip};
use crate::budget::day_window;
use crate::config::Budgets;

/// Why nothing may start now, when `spent_usd` (the day's spending so far, the day
/// `now` falls in) is at `budgets.max_cost_usd_per_day`.
pub fn day_hold(budgets: &Budgets, spent_usd: f64, now: DateTime<Utc>) -> Option<SkipReason> {
    let limit_usd = budgets.max_cost_usd_per_day?;
    (spent_usd >= limit_usd).then(|| SkipReason::DayBudgetSpent {
        spent_usd,
        limit_usd,
        until: day_window(now, budgets.timezone).end,
    })
}

/// Turn every dispatch of `plan` into a skip with `reason`.
pub fn hold_dispatches(plan: &mut Plan<'_>, reason: &SkipReason) {
    for d in plan.dispatches.drain(..) {
        plan.skips.push(Skip {
            ticket: d.ticket,
            stage: d.stage,
            reason: reason.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn the_day_limit_holds_at_the_limit_until_the_zone_s_midnight() {
        let mut budgets = Budgets {
            max_cost_usd_per_day: Some(40.0),
            ..Budgets::default()
        };
        let now = at("2026-12-05T21:00:00Z");
        assert_eq!(day_hold(&budgets, 39.99, now), None);
        let Some(SkipReason::DayBudgetSpent { until, .. }) = day_hold(&budgets, 40.0, now) else {
            panic!("held at the limit")
        };
        assert_eq!(until, at("2026-12-06T00:00:00Z"));
        budgets.timezone = crate::config::DayZone {
            offset_seconds: -5 * 3600,
        };
        let Some(reason) = day_hold(&budgets, 41.0, now) else {
            panic!("held over the limit")
        };
        assert_eq!(
            reason.to_string(),
            "the pipeline spent $41.00 today; budgets.max_cost_usd_per_day is $40.00; \
             no run starts until 2026-12-06 05:00 UTC"
        );
        assert_eq!(day_hold(&Budgets::default(), 1e9, now), None, "no limit");
    }
}

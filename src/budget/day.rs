//! The day `budgets.max_cost_usd_per_day` counts in: midnight to midnight in
//! `budgets.timezone`.

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};

use crate::config::DayZone;

/// One day of the day limit, as instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayWindow {
    /// Its first instant (midnight in the zone).
    pub start: DateTime<Utc>,
    /// The next day's first instant: when a day limit reached lifts.
    pub end: DateTime<Utc>,
}

/// The day of `zone` that `now` falls in.
pub fn day_window(now: DateTime<Utc>, zone: DayZone) -> DayWindow {
    let offset = zone.offset();
    let local = now.with_timezone(&offset).date_naive();
    let midnight = local.and_time(NaiveTime::MIN);
    let start = offset
        .from_local_datetime(&midnight)
        .single()
        .map(|t| t.with_timezone(&Utc))
        // A fixed offset has exactly one of every local time.
        .unwrap_or(now);
    DayWindow {
        start,
        end: start + Duration::days(1),
    }
}

/// Dollars the runs of `tracker` that started at or after `since` cost, all hosts
/// sharing the ledger (runs of unknown cost count nothing: the figure is then a lower
/// bound).
pub fn day_spent(
    ledger: &dyn crate::ledger::Ledger,
    tracker: &str,
    since: DateTime<Utc>,
) -> Result<f64, crate::ledger::LedgerError> {
    Ok(ledger
        .usage_by_role_since(tracker, since)?
        .iter()
        .map(|t| t.cost_usd)
        .sum())
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
    fn a_day_is_midnight_to_midnight_in_the_zone() {
        let utc = day_window(at("2026-12-05T23:59:59Z"), DayZone::default());
        assert_eq!(utc.start, at("2026-12-05T00:00:00Z"));
        assert_eq!(utc.end, at("2026-12-06T00:00:00Z"));
        // 23:30 UTC is already the 6th at +02:00, whose day began at 22:00 UTC.
        let paris = DayZone {
            offset_seconds: 7200,
        };
        let w = day_window(at("2026-12-05T23:30:00Z"), paris);
        assert_eq!(w.start, at("2026-12-05T22:00:00Z"));
        assert_eq!(w.end, at("2026-12-06T22:00:00Z"));
        // The last instant of a day and the first of the next are in different days.
        assert_eq!(day_window(utc.end, DayZone::default()).start, utc.end);
    }
}

//! The dashboard's picture of the last 24 hours: runs per hour by outcome, an inline
//! SVG drawn here from run history (no chart library, no script).

use std::fmt::Write as _;

use chrono::{DateTime, Duration, Timelike, Utc};

use crate::ledger::{RunPhase, RunRecord};

/// Runs started in one hour, by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourCounts {
    /// Finished with `success`.
    pub success: u32,
    /// Finished with `failure`.
    pub failure: u32,
    /// Cancelled (the ticket moved, the lease was lost, an operator stopped it).
    pub cancelled: u32,
    /// Still running.
    pub running: u32,
}

impl HourCounts {
    fn total(&self) -> u32 {
        self.success + self.failure + self.cancelled + self.running
    }
}

/// The 24 hours ending with the current one, oldest first: (start of the hour, counts).
pub fn runs_per_hour(runs: &[RunRecord], now: DateTime<Utc>) -> Vec<(DateTime<Utc>, HourCounts)> {
    let this_hour = now
        .with_minute(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(now);
    let first = this_hour - Duration::hours(23);
    let mut hours: Vec<(DateTime<Utc>, HourCounts)> = (0..24)
        .map(|h| (first + Duration::hours(h), HourCounts::default()))
        .collect();
    for run in runs {
        let index = (run.started_at - first).num_hours();
        if run.started_at < first || !(0..24).contains(&index) {
            continue;
        }
        let counts = &mut hours[index as usize].1;
        match (run.phase, run.outcome.as_deref()) {
            (RunPhase::Cancelled, _) => counts.cancelled += 1,
            (RunPhase::Running, _) => counts.running += 1,
            (_, Some("success")) => counts.success += 1,
            _ => counts.failure += 1,
        }
    }
    hours
}

/// Colours of the outcomes, shared with the legend.
const SERIES: [(&str, &str); 4] = [
    ("success", "#2e7d32"),
    ("failure", "#c62828"),
    ("cancelled", "#9e9e9e"),
    ("running", "#1565c0"),
];

/// The chart as an `<svg>` element: one stacked bar per hour, hour labels every 3
/// hours, the tallest bar's count on the axis, a `<title>` per bar for hover.
pub fn chart(hours: &[(DateTime<Utc>, HourCounts)]) -> String {
    let (width, height, left, bottom, top) = (720.0, 160.0, 28.0, 20.0, 8.0);
    let max = hours
        .iter()
        .map(|(_, c)| c.total())
        .max()
        .unwrap_or(0)
        .max(1);
    let plot = height - bottom - top;
    let slot = (width - left) / hours.len().max(1) as f64;
    let mut svg = String::new();
    let total: u32 = hours.iter().map(|(_, c)| c.total()).sum();
    let _ = write!(
        svg,
        r#"<svg id="runs-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="runs per hour over the last 24 hours: {total} runs">"#
    );
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{y}" x2="{width}" y2="{y}" stroke="#bbb"/><text x="{tx}" y="{ty}" font-size="10" text-anchor="end">{max}</text><text x="{tx}" y="{y}" font-size="10" text-anchor="end">0</text>"##,
        y = height - bottom,
        tx = left - 4.0,
        ty = top + 8.0,
    );
    for (i, (start, counts)) in hours.iter().enumerate() {
        let x = left + i as f64 * slot + 1.0;
        let mut y = height - bottom;
        let values = [
            counts.success,
            counts.failure,
            counts.cancelled,
            counts.running,
        ];
        let _ = write!(
            svg,
            "<g><title>{} UTC: {} success, {} failure, {} cancelled, {} running</title>",
            start.format("%H:00"),
            counts.success,
            counts.failure,
            counts.cancelled,
            counts.running
        );
        // An invisible full-height rectangle so hovering an empty hour shows its title.
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="{top}" width="{w:.1}" height="{plot}" fill="transparent"/>"#,
            w = slot - 2.0
        );
        for (value, (name, colour)) in values.iter().zip(SERIES) {
            if *value == 0 {
                continue;
            }
            let h = plot * f64::from(*value) / f64::from(max);
            y -= h;
            let _ = write!(
                svg,
                r#"<rect class="bar-{name}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{colour}"/>"#,
                w = slot - 2.0
            );
        }
        svg.push_str("</g>");
        if i % 3 == 0 {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{}" font-size="10">{}</text>"#,
                x,
                height - 6.0,
                start.format("%H:00")
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The legend under the chart, as HTML.
pub fn legend() -> String {
    SERIES
        .iter()
        .map(|(name, colour)| {
            format!(r#"<span class="legend"><span class="swatch" style="background:{colour}"></span>{name}</span>"#)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ClaimKey;

    fn run(started_at: DateTime<Utc>, phase: RunPhase, outcome: Option<&str>) -> RunRecord {
        RunRecord {
            run_id: "r".into(),
            key: ClaimKey::new("memory", "1", "architect"),
            stage: "ready".into(),
            stage_attempt: 1,
            claimer_id: "c".into(),
            phase,
            outcome: outcome.map(str::to_string),
            reason_code: None,
            log_path: None,
            started_at,
            finished_at: None,
            session_id: None,
            route: None,
            title: None,
        }
    }

    #[test]
    fn runs_land_in_their_hour_by_outcome_and_old_ones_are_left_out() {
        let now: DateTime<Utc> = "2026-12-01T12:30:00Z".parse().unwrap();
        let runs = [
            run(
                "2026-12-01T12:05:00Z".parse().unwrap(),
                RunPhase::Finished,
                Some("success"),
            ),
            run(
                "2026-12-01T12:10:00Z".parse().unwrap(),
                RunPhase::Finished,
                Some("failure"),
            ),
            run(
                "2026-12-01T10:59:59Z".parse().unwrap(),
                RunPhase::Cancelled,
                None,
            ),
            run(
                "2026-11-30T13:05:00Z".parse().unwrap(),
                RunPhase::Finished,
                Some("success"),
            ),
            run(
                "2026-11-30T11:00:00Z".parse().unwrap(),
                RunPhase::Finished,
                Some("success"),
            ),
        ];
        let hours = runs_per_hour(&runs, now);
        assert_eq!(hours.len(), 24);
        assert_eq!(
            hours[23].0,
            "2026-12-01T12:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            hours[23].1,
            HourCounts {
                success: 1,
                failure: 1,
                cancelled: 0,
                running: 0
            }
        );
        assert_eq!(hours[21].1.cancelled, 1);
        assert_eq!(hours[0].1.success, 1, "13:00 yesterday is the first hour");
        let total: u32 = hours.iter().map(|(_, c)| c.total()).sum();
        assert_eq!(total, 4, "the run 25 h ago is not drawn");
        let svg = chart(&hours);
        assert_eq!(svg.matches("class=\"bar-success\"").count(), 2);
        assert_eq!(svg.matches("class=\"bar-cancelled\"").count(), 1);
        assert!(svg.contains("12:00 UTC: 1 success, 1 failure"));
    }
}

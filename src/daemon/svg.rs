//! The dashboard's pictures: runs per hour by outcome over the last 24 hours, and runs
//! per day with their `sortie stats` figures over the last 7 days; inline SVG drawn
//! here from run history (no chart library, no script).

use std::fmt::Write as _;

use chrono::{DateTime, Duration, Timelike, Utc};

use crate::ledger::{RunPhase, RunRecord};
use crate::stats::Figures;

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

/// The frame both charts share: a 720 x 160 view, a left margin for the axis
/// (0 at the baseline, the tallest bar's count at the top) and room for labels below.
struct Frame {
    height: f64,
    left: f64,
    bottom: f64,
    top: f64,
    /// The count a full-height bar stands for.
    max: u32,
    /// Width given to each bar.
    slot: f64,
}

impl Frame {
    /// Open `<svg id=...>` with its axis, for `bars` bars the tallest of which is `max`.
    fn open(svg: &mut String, id: &str, label: &str, top: f64, bars: usize, max: u32) -> Frame {
        let (width, height, left, bottom) = (720.0, 160.0, 28.0, 20.0);
        let max = max.max(1);
        let _ = write!(
            svg,
            r#"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{label}">"#
        );
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y}" x2="{width}" y2="{y}" stroke="#bbb"/><text x="{tx}" y="{ty}" font-size="10" text-anchor="end">{max}</text><text x="{tx}" y="{y}" font-size="10" text-anchor="end">0</text>"##,
            y = height - bottom,
            tx = left - 4.0,
            ty = top + 8.0,
        );
        Frame {
            height,
            left,
            bottom,
            top,
            max,
            slot: (width - left) / bars.max(1) as f64,
        }
    }

    /// Height of the plotting area.
    fn plot(&self) -> f64 {
        self.height - self.bottom - self.top
    }

    /// An invisible full-height rectangle at `x`, `w` wide, so hovering an empty bar
    /// shows its title.
    fn hover(&self, svg: &mut String, x: f64, w: f64) {
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="{}" width="{w:.1}" height="{}" fill="transparent"/>"#,
            self.top,
            self.plot()
        );
    }

    /// `values` stacked from the baseline at `x`, `w` wide, each in its `series`
    /// colour (none drawn for a zero); the stack's top.
    fn stack(
        &self,
        svg: &mut String,
        x: f64,
        w: f64,
        values: &[u32],
        series: &[(&str, &str)],
    ) -> f64 {
        let mut y = self.height - self.bottom;
        for (value, (name, colour)) in values.iter().zip(series) {
            if *value == 0 {
                continue;
            }
            let h = self.plot() * f64::from(*value) / f64::from(self.max);
            y -= h;
            let _ = write!(
                svg,
                r#"<rect class="bar-{name}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{colour}"/>"#
            );
        }
        y
    }
}

/// The chart as an `<svg>` element: one stacked bar per hour, hour labels every 3
/// hours, the tallest bar's count on the axis, a `<title>` per bar for hover.
pub fn chart(hours: &[(DateTime<Utc>, HourCounts)]) -> String {
    let max = hours.iter().map(|(_, c)| c.total()).max().unwrap_or(0);
    let total: u32 = hours.iter().map(|(_, c)| c.total()).sum();
    let mut svg = String::new();
    let label = format!("runs per hour over the last 24 hours: {total} runs");
    let frame = Frame::open(&mut svg, "runs-chart", &label, 8.0, hours.len(), max);
    for (i, (start, counts)) in hours.iter().enumerate() {
        let x = frame.left + i as f64 * frame.slot + 1.0;
        let w = frame.slot - 2.0;
        let _ = write!(
            svg,
            "<g><title>{} UTC: {} success, {} failure, {} cancelled, {} running</title>",
            start.format("%H:00"),
            counts.success,
            counts.failure,
            counts.cancelled,
            counts.running
        );
        frame.hover(&mut svg, x, w);
        let values = [
            counts.success,
            counts.failure,
            counts.cancelled,
            counts.running,
        ];
        frame.stack(&mut svg, x, w, &values, &SERIES);
        svg.push_str("</g>");
        if i % 3 == 0 {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{}" font-size="10">{}</text>"#,
                x,
                frame.height - 6.0,
                start.format("%H:00")
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// What a day's bar says on hover: its runs by outcome, success rate, duration
/// percentiles, tokens and cost (the `sortie stats` figures of that day).
pub fn day_title(day: &Figures) -> String {
    let other = day.runs - day.finished;
    let rate = day.success_rate.map_or("no run finished".to_string(), |r| {
        format!("success rate {:.0}%", r * 100.0)
    });
    let durations = match (day.p50_seconds, day.p95_seconds) {
        (Some(p50), Some(p95)) => format!(", p50 {p50:.0}s, p95 {p95:.0}s"),
        _ => String::new(),
    };
    format!(
        "{}: {} runs ({} success, {} failure, {other} other); {rate}{durations}; {} tokens; {}",
        day.group,
        day.runs,
        day.succeeded,
        day.finished - day.succeeded,
        day.tokens.map_or("unknown".to_string(), |t| t.to_string()),
        known_cost(day)
    )
}

/// A cost with its unknown part apart: `$0.60`, `$0.60 + 2 run(s) of unknown cost`,
/// `cost unknown (2 run(s))` when no run's cost is known.
pub fn known_cost(f: &Figures) -> String {
    match (f.cost_usd, f.runs_cost_unknown) {
        (None, n) => format!("cost unknown ({n} run(s))"),
        (Some(usd), 0) => format!("${usd:.2}"),
        (Some(usd), n) => format!("${usd:.2} + {n} run(s) of unknown cost"),
    }
}

/// The 7-day chart as an `<svg>` element: one stacked bar per day (success, failure,
/// other: cancelled, a question, still running), its run count above it and its date
/// under it, a `<title>` per day with its figures for hover.
pub fn days_chart(days: &[Figures]) -> String {
    let max = days.iter().map(|d| d.runs).max().unwrap_or(0);
    let total: u32 = days.iter().map(|d| d.runs).sum();
    let mut svg = String::new();
    let label = format!(
        "runs per day over the last {} days: {total} runs",
        days.len()
    );
    let frame = Frame::open(&mut svg, "days-chart", &label, 16.0, days.len(), max);
    for (i, day) in days.iter().enumerate() {
        let x = frame.left + i as f64 * frame.slot + 4.0;
        let w = frame.slot - 8.0;
        let _ = write!(
            svg,
            r#"<g class="day" data-day="{}"><title>{}</title>"#,
            day.group,
            day_title(day)
        );
        frame.hover(&mut svg, x, w);
        let values = [
            day.succeeded,
            day.finished - day.succeeded,
            day.runs - day.finished,
        ];
        let y = frame.stack(&mut svg, x, w, &values, &DAY_SERIES);
        let _ = write!(
            svg,
            r#"<text class="runs" x="{cx:.1}" y="{ly:.1}" font-size="10" text-anchor="middle">{}</text><text x="{cx:.1}" y="{dy}" font-size="10" text-anchor="middle">{}</text></g>"#,
            day.runs,
            day.group.get(5..).unwrap_or(&day.group),
            cx = x + w / 2.0,
            ly = y - 3.0,
            dy = frame.height - 6.0,
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Colours of the 7-day chart's series, shared with its legend.
const DAY_SERIES: [(&str, &str); 3] = [
    ("success", "#2e7d32"),
    ("failure", "#c62828"),
    ("other", "#9e9e9e"),
];

/// The legend under the 7-day chart, as HTML.
pub fn days_legend() -> String {
    swatches(&DAY_SERIES)
}

/// The legend under the chart, as HTML.
pub fn legend() -> String {
    swatches(&SERIES)
}

fn swatches(series: &[(&str, &str)]) -> String {
    series
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
            agent: None,
            model: None,
            rate_limits: Vec::new(),
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

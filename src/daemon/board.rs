//! The board as the dashboard shows it: every ticket on a pipeline status, by status,
//! with why it waits, taken from a dry-run tick (the same plan a tick applies).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::pipeline::eligibility::{scope_word, SkipReason};
use crate::pipeline::report::TickReport;
use crate::pipeline::{LiveRun, Pipeline, TickOptions};
use crate::tracker::{same_name, Ticket};

/// How many tickets a column lists; the rest are counted.
pub const COLUMN_LISTED: usize = 25;

/// One ticket on the board.
#[derive(Debug, Clone, Serialize)]
pub struct BoardTicket {
    /// Ticket id.
    pub id: String,
    /// Title.
    pub title: String,
    /// Link on the tracker, when it has one.
    pub url: Option<String>,
    /// `running`, `next` (a tick now would run it), `waiting`, `failed` (on a stage's
    /// failure status: a person releases it), `idle` (no stage claims it) or `unknown`
    /// (on a status the config does not name).
    pub state: &'static str,
    /// Why, in a word or two (`cap: role 1`, `retry due in 40s`, `held: spec.unclear`).
    pub reason: String,
}

/// One status of the pipeline with its tickets.
#[derive(Debug, Clone, Serialize)]
pub struct StatusColumn {
    /// The status, in the config's spelling.
    pub status: String,
    /// What the status is to the pipeline (`architect claims`, `architect success`).
    pub roles: Vec<String>,
    /// Tickets on it.
    pub count: usize,
    /// The first [`COLUMN_LISTED`] of them, running and next first.
    pub tickets: Vec<BoardTicket>,
    /// How many are not listed.
    pub more: usize,
    /// The status is only some stage's failure status: the page sets it apart.
    pub failure: bool,
}

/// A terminal status and how many tickets it holds.
#[derive(Debug, Clone, Serialize)]
pub struct TerminalCount {
    /// The status.
    pub status: String,
    /// Tickets on it (tickets the tracker closed are counted under `closed`).
    pub count: usize,
}

/// The whole board at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct BoardView {
    /// When it was read.
    pub read_at: DateTime<Utc>,
    /// Non-terminal statuses, in pipeline order.
    pub columns: Vec<StatusColumn>,
    /// Terminal statuses, counted.
    pub terminal: Vec<TerminalCount>,
    /// Tickets on statuses the config does not name (a typo, a status added on the
    /// tracker), where the tracker lists them at no extra cost (the local board); each
    /// one's reason names its status.
    pub other: Option<StatusColumn>,
    /// Every ticket on the board: on the statuses the config names, terminal included,
    /// and on the other statuses.
    pub total: usize,
    /// The title of every ticket listed (terminal and other statuses too), for the rows
    /// of runs whose ticket left the pipeline's columns.
    #[serde(skip)]
    pub titles: std::collections::BTreeMap<String, String>,
    /// Listing warnings (unreadable board entries).
    pub warnings: Vec<String>,
}

/// How long a board read is reused: refreshes of several open pages share one read,
/// and a read is a listing plus a dry-run tick.
pub fn reuse_for(poll_interval: Duration) -> Duration {
    poll_interval.clamp(Duration::from_secs(2), Duration::from_secs(15))
}

/// Read the board: one unfiltered listing (so tickets `tracker.filter` leaves out can
/// be shown as such) and one dry-run tick for the reasons.
pub async fn read(
    pipeline: &Pipeline,
    live: &[LiveRun],
    now: DateTime<Utc>,
) -> Result<BoardView, String> {
    let config = pipeline.config();
    let listing = pipeline
        .tracker()
        .list(&board_statuses(config))
        .await
        .map_err(|e| format!("listing the board: {e}"))?;
    let mut warnings = listing.warnings;
    // The tracker counted tickets on statuses nobody asked for: list them too, so the
    // board shows them (the local board reads its folder again; no other adapter counts).
    let others: Vec<String> = listing.other_statuses.keys().cloned().collect();
    let other_tickets = if others.is_empty() {
        Vec::new()
    } else {
        match pipeline.tracker().list(&others).await {
            Ok(l) => l.tickets,
            Err(e) => {
                warnings.push(format!("listing the other statuses: {e}"));
                Vec::new()
            }
        }
    };
    let report = pipeline
        .tick(TickOptions { dry_run: true })
        .await
        .map_err(|e| format!("dry-run tick: {e}"))?;
    let failures = last_failures(pipeline, config, &listing.tickets);
    let mut view = arrange(
        config,
        &listing.tickets,
        &report,
        live,
        now,
        warnings,
        &failures,
    );
    place_others(&mut view, config, &other_tickets);
    Ok(view)
}

/// For each ticket on a stage's failure status, the reason code of that stage's last
/// failed run, from the ledger (none when the ledger has no such run).
fn last_failures(
    pipeline: &Pipeline,
    config: &crate::config::Config,
    tickets: &[Ticket],
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let tracker = pipeline.tracker().name();
    for ticket in tickets.iter().filter(|t| !t.closed) {
        let Some(stage) = failure_stage(config, &ticket.status) else {
            continue;
        };
        match pipeline.ledger().ticket_runs(tracker, &ticket.id, 20) {
            Ok(runs) => {
                let failed = runs
                    .into_iter()
                    .filter(|r| r.key.role == stage.role && r.outcome.as_deref() == Some("failure"))
                    .max_by_key(|r| r.started_at);
                if let Some(code) = failed.and_then(|r| r.reason_code) {
                    out.insert(ticket.id.clone(), code);
                }
            }
            Err(e) => {
                tracing::debug!(ticket = %ticket.id, error = %e, "cannot read the ticket's runs")
            }
        }
    }
    out
}

/// The stage `status` is the failure status of, when no stage claims it.
pub(super) fn failure_stage<'c>(
    config: &'c crate::config::Config,
    status: &str,
) -> Option<&'c crate::config::Stage> {
    let claimed = config.stages.iter().any(|s| {
        same_name(&s.claim_status, status)
            || s.in_progress_status
                .as_deref()
                .is_some_and(|p| same_name(p, status))
    });
    if claimed {
        return None;
    }
    config.stages.iter().find(|s| {
        s.failure_status
            .as_deref()
            .is_some_and(|f| same_name(f, status))
    })
}

/// Put tickets on statuses the config does not name in the board's `other` column.
fn place_others(view: &mut BoardView, config: &crate::config::Config, tickets: &[Ticket]) {
    if tickets.is_empty() {
        return;
    }
    let known = board_statuses(config);
    let mut listed: Vec<BoardTicket> = tickets
        .iter()
        .map(|t| {
            let hint = closest(&t.status, &known)
                .map(|k| format!("; did you mean {k}?"))
                .unwrap_or_default();
            BoardTicket {
                id: t.id.clone(),
                title: t.title.clone(),
                url: web_link(t.url.as_deref()),
                state: "unknown",
                reason: format!("status {} is not in the config{hint}", t.status),
            }
        })
        .collect();
    listed.sort_by(|a, b| crate::pipeline::eligibility::natural_cmp(&a.id, &b.id));
    let mut statuses: Vec<String> = Vec::new();
    for t in tickets {
        if !statuses.iter().any(|s| same_name(s, &t.status)) {
            statuses.push(t.status.clone());
        }
        view.titles.insert(t.id.clone(), t.title.clone());
    }
    statuses.sort();
    view.total += tickets.len();
    view.other = Some(StatusColumn {
        status: "other statuses".to_string(),
        roles: vec![format!("no stage knows {}", statuses.join(", "))],
        count: listed.len(),
        more: listed.len().saturating_sub(COLUMN_LISTED),
        tickets: listed.into_iter().take(COLUMN_LISTED).collect(),
        failure: false,
    });
}

/// The configured status `status` is most likely a typo of (at most two edits away,
/// ignoring case).
fn closest<'k>(status: &str, known: &'k [String]) -> Option<&'k str> {
    let status = status.to_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&status, &k.to_lowercase()), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Every status the config names (claim, in-progress, success, failure, terminal), once
/// each ignoring case, in stage order.
fn board_statuses(config: &crate::config::Config) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in config.configured_statuses() {
        if !out.iter().any(|o| same_name(o, s)) {
            out.push(s.to_string());
        }
    }
    out
}

/// Place `tickets` in columns with their reasons. Pure.
pub fn arrange(
    config: &crate::config::Config,
    tickets: &[Ticket],
    report: &TickReport,
    live: &[LiveRun],
    now: DateTime<Utc>,
    warnings: Vec<String>,
    failures: &std::collections::BTreeMap<String, String>,
) -> BoardView {
    let mut columns: Vec<StatusColumn> = Vec::new();
    let mut terminal: Vec<TerminalCount> = Vec::new();
    for status in board_statuses(config) {
        if config.is_terminal(&status) {
            terminal.push(TerminalCount { status, count: 0 });
            continue;
        }
        let mut roles = Vec::new();
        for s in &config.stages {
            if same_name(&s.claim_status, &status) {
                roles.push(format!("{} claims", s.role));
            }
            if s.in_progress_status
                .as_deref()
                .is_some_and(|p| same_name(p, &status))
            {
                roles.push(format!("{} in progress", s.role));
            }
            if s.success_status
                .as_deref()
                .is_some_and(|p| same_name(p, &status))
            {
                roles.push(format!("{} success", s.role));
            }
            if s.failure_status
                .as_deref()
                .is_some_and(|p| same_name(p, &status))
            {
                roles.push(format!("{} failure", s.role));
            }
        }
        columns.push(StatusColumn {
            failure: failure_stage(config, &status).is_some(),
            status,
            roles,
            count: 0,
            tickets: Vec::new(),
            more: 0,
        });
    }
    let mut closed = 0;
    let mut all: Vec<Vec<BoardTicket>> = vec![Vec::new(); columns.len()];
    let mut titles = std::collections::BTreeMap::new();
    for ticket in tickets {
        titles.insert(ticket.id.clone(), ticket.title.clone());
        if ticket.closed {
            closed += 1;
            continue;
        }
        if let Some(t) = terminal
            .iter_mut()
            .find(|t| same_name(&t.status, &ticket.status))
        {
            t.count += 1;
            continue;
        }
        let Some(i) = columns
            .iter()
            .position(|c| same_name(&c.status, &ticket.status))
        else {
            continue;
        };
        let (state, reason) = why(config, ticket, report, live, now, failures);
        all[i].push(BoardTicket {
            id: ticket.id.clone(),
            title: ticket.title.clone(),
            url: web_link(ticket.url.as_deref()),
            state,
            reason,
        });
    }
    if closed > 0 {
        terminal.push(TerminalCount {
            status: "closed".to_string(),
            count: closed,
        });
    }
    for (column, mut listed) in columns.iter_mut().zip(all) {
        let rank = |s: &str| match s {
            "running" => 0,
            "next" => 1,
            "waiting" => 2,
            _ => 3,
        };
        listed.sort_by(|a, b| {
            rank(a.state)
                .cmp(&rank(b.state))
                .then_with(|| crate::pipeline::eligibility::natural_cmp(&a.id, &b.id))
        });
        column.count = listed.len();
        column.more = listed.len().saturating_sub(COLUMN_LISTED);
        listed.truncate(COLUMN_LISTED);
        column.tickets = listed;
    }
    BoardView {
        read_at: now,
        total: tickets.len(),
        columns,
        terminal,
        other: None,
        warnings,
        titles,
    }
}

/// The state and short reason of one ticket on a non-terminal status.
fn why(
    config: &crate::config::Config,
    ticket: &Ticket,
    report: &TickReport,
    live: &[LiveRun],
    now: DateTime<Utc>,
    failures: &std::collections::BTreeMap<String, String>,
) -> (&'static str, String) {
    if let Some(run) = live.iter().find(|r| r.ticket == ticket.id) {
        return ("running", format!("running: {} #{}", run.role, run.attempt));
    }
    if let Some(run) = report.runs.iter().find(|r| r.ticket == ticket.id) {
        return ("next", format!("next: {}", run.role));
    }
    if let Some(skip) = report.skips.iter().find(|s| s.ticket == ticket.id) {
        return ("waiting", short_reason(&skip.reason, now));
    }
    if let Some(stage) = failure_stage(config, &ticket.status) {
        let failed = match failures.get(&ticket.id) {
            Some(code) => format!("{} failed: {code}", stage.role),
            None => format!("{} failed", stage.role),
        };
        return (
            "failed",
            format!("{failed}; move to {} to re-run", stage.claim_status),
        );
    }
    let claimed = config.stages.iter().any(|s| {
        same_name(&s.claim_status, &ticket.status)
            || s.in_progress_status
                .as_deref()
                .is_some_and(|p| same_name(p, &ticket.status))
    });
    if !claimed {
        ("idle", "no stage claims it".to_string())
    } else if !config.filter.is_empty() {
        ("waiting", "filtered out".to_string())
    } else {
        ("waiting", "not listed by the tick".to_string())
    }
}

/// How much of a question a card shows (the waiting table and the ticket page show
/// all of it).
const CARD_QUESTION_CHARS: usize = 80;

/// A skip reason in a word or two.
pub fn short_reason(reason: &SkipReason, now: DateTime<Utc>) -> String {
    match reason {
        SkipReason::Terminal { .. } => "terminal".to_string(),
        SkipReason::Claimed { holder, .. } => format!("claimed by {}", short_holder(holder)),
        SkipReason::RetryNotDue {
            due_at,
            reason_code,
        } => format!(
            "retry due in {} ({reason_code})",
            human_duration((*due_at - now).num_seconds().max(0))
        ),
        SkipReason::Held { reason_code } => format!("held: {reason_code}"),
        SkipReason::WritebackPending => "write-back pending".to_string(),
        SkipReason::PriorRoleMissing { role } => format!("prior role {role} missing"),
        SkipReason::PriorRoleNotRedone { role, .. } => format!("waits for {role} (rework)"),
        SkipReason::Blocked { by } => format!("blocked by {}", by.join(", ")),
        SkipReason::BlockersUnknown { .. } => "blockers unreadable".to_string(),
        SkipReason::Filtered { detail } => format!("filtered out: {detail}"),
        SkipReason::CapReached { scope, limit } => {
            format!("cap: {} {limit}", scope_word(*scope))
        }
        SkipReason::HostShareReached {
            scope,
            share,
            limit,
        } => format!("host share: {} {share} of {limit}", scope_word(*scope)),
        SkipReason::EndedSinceListing { .. } => "ran elsewhere".to_string(),
        SkipReason::WaitingForAnswer {
            question_id,
            question,
            ..
        } => format!(
            "waiting for an answer to {question_id}: {}",
            crate::block::question::flatten(question, CARD_QUESTION_CHARS)
        ),
        SkipReason::DayBudgetSpent { until, .. } => format!(
            "day budget spent (until {})",
            until.format("%Y-%m-%d %H:%M UTC")
        ),
        SkipReason::TrackerError { .. } => "tracker error".to_string(),
    }
}

/// `host:pid:random` -> `host:pid`.
fn short_holder(holder: &str) -> &str {
    match holder.rmatch_indices(':').next() {
        Some((i, _)) if holder[..i].contains(':') => &holder[..i],
        _ => holder,
    }
}

/// `url` when it is an `http(s)` link, so a hostile tracker entry cannot put a
/// `javascript:` link on the page.
pub fn web_link(url: Option<&str>) -> Option<String> {
    let url = url?.trim();
    let lower = url.to_ascii_lowercase();
    (lower.starts_with("https://") || lower.starts_with("http://")).then(|| url.to_string())
}

/// Seconds as a person reads them: `45s`, `3m 12s`, `2h 5m`, `3d 4h`.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// How long ago `at` was: `just now`, `2 min ago`, `3 h ago`, `2 days ago`; a
/// future time reads `in 3m 12s`.
pub fn relative(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - at).num_seconds();
    match s {
        i64::MIN..=-10 => format!("in {}", human_duration(-s)),
        -9..=9 => "just now".to_string(),
        10..=59 => format!("{s} s ago"),
        60..=3599 => format!("{} min ago", s / 60),
        3600..=86_399 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// An exact time without fractional seconds, for hover titles.
pub fn exact(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_writes_them() {
        assert_eq!(human_duration(192), "3m 12s");
        assert_eq!(human_duration(40), "40s");
        assert_eq!(human_duration(7500), "2h 5m");
        assert_eq!(short_holder("host:12:abcd"), "host:12");
        assert_eq!(short_holder("someone"), "someone");
    }

    #[test]
    fn a_typo_of_a_status_names_the_status_it_likely_meant() {
        let known = vec!["ready-for-design".to_string(), "done".to_string()];
        assert_eq!(
            closest("ready-for-desing", &known),
            Some("ready-for-design")
        );
        assert_eq!(closest("Done", &known), Some("done"));
        assert_eq!(closest("parked", &known), None);
    }

    #[test]
    fn only_web_links_reach_the_page() {
        assert_eq!(
            web_link(Some("https://github.com/o/r/issues/1")).as_deref(),
            Some("https://github.com/o/r/issues/1")
        );
        assert_eq!(web_link(Some(" JavaScript:alert(1)")), None);
        assert_eq!(web_link(Some("file:///etc/passwd")), None);
        assert_eq!(web_link(None), None);
    }
}

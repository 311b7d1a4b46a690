//! The ticket's page (`GET /tickets/{id}`): its view ([`super::ticket::TicketView`])
//! made readable, per stage, claim, block and run.

use serde::Serialize;

use super::board::{self, human_duration};
use super::pages::When;
use super::ticket::{BlockView, TicketView};
use super::Shared;
use crate::tracker::same_name;

/// One stage's verdict on a ticket.
#[derive(Serialize)]
struct StageRow {
    role: String,
    claim_status: String,
    verdict: String,
    eligible: bool,
}

/// One outcome block, readable.
#[derive(Serialize)]
struct BlockRow {
    when: When,
    author: String,
    kind: String,
    role: String,
    attempt: u32,
    from: String,
    to: String,
    reason: String,
    text: String,
    run_id: Option<String>,
}

/// One run of the ticket.
#[derive(Serialize)]
struct RunRow {
    run_id: String,
    role: String,
    attempt: u32,
    started: When,
    duration: String,
    phase: String,
    outcome: String,
    reason: String,
    log_url: Option<String>,
}

/// Everything `GET /tickets/{id}` shows.
#[derive(Serialize)]
pub(super) struct TicketPage {
    id: String,
    title: String,
    status: String,
    url: Option<String>,
    closed: bool,
    labels: Vec<String>,
    stages: Vec<StageRow>,
    claims: Vec<(String, String, When)>,
    retries: Vec<(String, u32, String, When)>,
    holds: Vec<(String, String, String, When)>,
    blocks: Vec<BlockRow>,
    runs: Vec<RunRow>,
}

/// The reason code of `role`'s newest failure block on the ticket.
fn newest_failure<'b>(blocks: &'b [BlockView], role: &str) -> Option<&'b str> {
    blocks
        .iter()
        .filter(|b| b.block.block.role() == role)
        .max_by_key(|b| b.created_at)
        .and_then(|b| match &b.block.block {
            crate::block::OutcomeBlock::Failure(f) => Some(f.reason_code.as_str()),
            crate::block::OutcomeBlock::Success(_) => None,
        })
}

/// Make a ticket's view readable.
pub(super) fn ticket(shared: &Shared, view: &TicketView) -> TicketPage {
    let config = shared.config();
    let now = shared.now();
    let t = &view.ticket;
    // On the failure status of a stage no stage claims: a person releases it.
    let failed_in = board::failure_stage(&config, &t.status).map(|s| s.role.as_str());
    let stages = config
        .stages
        .iter()
        .map(|s| {
            let owns = same_name(&s.claim_status, &t.status)
                || s.in_progress_status
                    .as_deref()
                    .is_some_and(|p| same_name(p, &t.status));
            let run = view.would_run.iter().find(|r| r.role == s.role);
            let skip = view.skipped.iter().find(|k| k.role == s.role);
            let (verdict, eligible) = if let Some(r) = run {
                (
                    format!("eligible: a tick now would run {} on it", r.role),
                    true,
                )
            } else if let Some(k) = skip {
                (
                    format!("{} — {}", board::short_reason(&k.reason, now), k.reason),
                    false,
                )
            } else if t.closed || config.is_terminal(&t.status) {
                ("terminal: no stage runs on it".to_string(), false)
            } else if failed_in == Some(s.role.as_str()) {
                // The ledger's newest run of the role (as the board says), else the block.
                let code = view
                    .runs
                    .iter()
                    .find(|r| r.key.role == s.role && r.outcome.is_some())
                    .map(|r| r.reason_code.as_deref())
                    .unwrap_or_else(|| newest_failure(&view.blocks, &s.role));
                let failed = match code {
                    Some(code) => format!("{} failed: {code}", s.role),
                    None => format!("{} failed", s.role),
                };
                (
                    format!("{failed}; move to {} to re-run", s.claim_status),
                    false,
                )
            } else if owns {
                if config.filter.is_empty() {
                    ("not listed by the tick".to_string(), false)
                } else {
                    ("filtered out by tracker.filter".to_string(), false)
                }
            } else {
                (
                    format!(
                        "not its stage: this stage claims {}, the ticket is in {}",
                        s.claim_status, t.status
                    ),
                    false,
                )
            };
            StageRow {
                role: s.role.clone(),
                claim_status: s.claim_status.clone(),
                verdict,
                eligible,
            }
        })
        .collect();
    let blocks = view
        .blocks
        .iter()
        .map(|b| {
            use crate::block::OutcomeBlock;
            let (kind, reason, text, run_id) = match &b.block.block {
                OutcomeBlock::Success(s) => (
                    "success",
                    String::new(),
                    s.summary.clone(),
                    s.run_id.clone(),
                ),
                OutcomeBlock::Failure(f) => (
                    "failure",
                    f.reason_code.clone(),
                    f.detail.clone(),
                    f.run_id.clone(),
                ),
            };
            BlockRow {
                when: When::of(b.created_at, now),
                author: b.author.clone(),
                kind: kind.to_string(),
                role: b.block.block.role().to_string(),
                attempt: b.block.block.stage_attempt(),
                from: b.block.block.from_status().to_string(),
                to: b.block.block.to_status().to_string(),
                reason,
                text,
                run_id,
            }
        })
        .collect();
    let runs = view
        .runs
        .iter()
        .map(|r| RunRow {
            run_id: r.run_id.clone(),
            role: r.key.role.clone(),
            attempt: r.stage_attempt,
            started: When::of(r.started_at, now),
            duration: r
                .finished_at
                .map(|f| human_duration((f - r.started_at).num_seconds()))
                .unwrap_or_else(|| {
                    format!(
                        "{} so far",
                        human_duration((now - r.started_at).num_seconds())
                    )
                }),
            phase: serde_json::to_value(r.phase)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            outcome: r.outcome.clone().unwrap_or_default(),
            reason: r.reason_code.clone().unwrap_or_default(),
            log_url: r
                .log_path
                .as_ref()
                .map(|_| format!("/runs/{}/log", r.run_id)),
        })
        .collect();
    TicketPage {
        id: t.id.clone(),
        title: t.title.clone(),
        status: t.status.clone(),
        url: board::web_link(t.url.as_deref()),
        closed: t.closed,
        labels: t.labels.clone(),
        stages,
        claims: view
            .claims
            .iter()
            .map(|c| {
                (
                    c.key.role.clone(),
                    c.claimer_id.to_string(),
                    When::of(c.lease_expires_at, now),
                )
            })
            .collect(),
        retries: view
            .retry_queue
            .iter()
            .map(|r| {
                (
                    r.key.role.clone(),
                    r.failed_attempt,
                    r.reason_code.clone(),
                    When::of(r.due_at, now),
                )
            })
            .collect(),
        holds: view
            .held
            .iter()
            .map(|h| {
                (
                    h.key.role.clone(),
                    h.status.clone(),
                    h.reason_code.clone(),
                    When::of(h.created_at, now),
                )
            })
            .collect(),
        blocks,
        runs,
    }
}

//! The ticket's page (`GET /tickets/{id}`): its view ([`super::ticket::TicketView`])
//! made readable, per stage, claim, block and run, and its pull request and reactions.

use serde::Serialize;

use super::board::{self, human_duration};
use super::pages::When;
use super::ticket::{BlockView, PullRequestView, ReactionView, TicketView};
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
    /// What sortie observed of a success (its `evidence`, issue #33).
    evidence: Option<EvidenceRow>,
}

/// A success block's evidence, readable.
#[derive(Serialize)]
struct EvidenceRow {
    checks: Vec<EvidenceCheckRow>,
    /// `3 commits, 5 files changed, +120 -14, head abc1234 (from def5678)`.
    change: Option<String>,
    work: Option<String>,
}

/// One `verify` command as it ran.
#[derive(Serialize)]
struct EvidenceCheckRow {
    command: String,
    result: String,
    exit_code: String,
    duration: String,
    tests: String,
}

impl EvidenceRow {
    fn of(e: &crate::block::Evidence) -> Option<Self> {
        if e.is_empty() {
            return None;
        }
        let checks = e
            .checks
            .iter()
            .map(|c| EvidenceCheckRow {
                command: c.command.clone(),
                result: c.result.clone(),
                exit_code: c
                    .exit_code
                    .map_or_else(|| "none".to_string(), |code| code.to_string()),
                duration: format!("{:.1} s", c.duration_seconds),
                tests: c
                    .tests
                    .map(|t| {
                        let mut text = format!("{} passed, {} failed", t.passed, t.failed);
                        if t.skipped > 0 {
                            text.push_str(&format!(", {} skipped", t.skipped));
                        }
                        text
                    })
                    .unwrap_or_default(),
            })
            .collect();
        let change = e.change.as_ref().map(|c| {
            format!(
                "{} commit{}, {} file{} changed, +{} -{}, head {} (from {})",
                c.commits,
                if c.commits == 1 { "" } else { "s" },
                c.files_changed,
                if c.files_changed == 1 { "" } else { "s" },
                c.insertions,
                c.deletions,
                short_sha(&c.head),
                short_sha(&c.base)
            )
        });
        Some(EvidenceRow {
            checks,
            change,
            work: e.work.clone(),
        })
    }
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

/// Characters of a check's summary the page shows (its first line).
const CHECK_SUMMARY_CHARS: usize = 200;

/// The ticket's pull request as this host last read it, readable.
#[derive(Serialize)]
struct PullRow {
    number: u64,
    url: Option<String>,
    head: String,
    head_branch: String,
    base_branch: String,
    draft: bool,
    lifecycle: String,
    mergeability: String,
    labels: Vec<String>,
    checks: Vec<CheckRow>,
    reviews: Vec<ReviewRow>,
    comments: Vec<CommentRow>,
    comments_not_shown: usize,
    read: When,
}

/// One check of the head, as last read.
#[derive(Serialize)]
struct CheckRow {
    state: &'static str,
    name: String,
    summary: String,
    url: Option<String>,
}

/// One review, as last read.
#[derive(Serialize)]
struct ReviewRow {
    author: String,
    verdict: &'static str,
    url: Option<String>,
}

/// One review comment, as last read.
#[derive(Serialize)]
struct CommentRow {
    author: String,
    place: String,
    resolved: bool,
    outdated: bool,
    url: Option<String>,
}

/// One reaction, readable.
#[derive(Serialize)]
struct ReactionRow {
    kind: String,
    round: String,
    to_role: Option<String>,
    pull_request: u64,
    head: String,
    handed: usize,
    decided: When,
}

/// A question an agent asked on the ticket, waiting for a person's answer.
#[derive(Serialize)]
struct QuestionRow {
    role: String,
    question_id: String,
    question: String,
    options: Vec<String>,
    asked: When,
    deadline: Option<When>,
    /// Comments that tried to answer and do not count, with why.
    ignored: Vec<String>,
}

impl QuestionRow {
    /// The waiting question among a stage's skip reasons, if it is one.
    fn of(
        skip: &crate::pipeline::report::SkipLine,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Self> {
        let crate::pipeline::eligibility::SkipReason::WaitingForAnswer {
            question_id,
            question,
            options,
            asked_at,
            deadline,
            ignored,
        } = &skip.reason
        else {
            return None;
        };
        Some(QuestionRow {
            role: skip.role.clone(),
            question_id: question_id.clone(),
            question: question.clone(),
            options: options.clone(),
            asked: When::of(*asked_at, now),
            deadline: deadline.map(|d| When::of(d, now)),
            ignored: ignored.clone(),
        })
    }
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
    /// Questions its stages' agents asked that wait for an answer.
    questions: Vec<QuestionRow>,
    claims: Vec<(String, String, When)>,
    retries: Vec<(String, u32, String, When)>,
    holds: Vec<(String, String, String, When)>,
    blocks: Vec<BlockRow>,
    runs: Vec<RunRow>,
    pull_request: Option<PullRow>,
    reactions: Vec<ReactionRow>,
    /// Whether the page has a pull request to speak of: `reactions:` watches pull
    /// requests, or this host read one or reacted to one before (issue #52: a board
    /// with no forge shows no empty sections).
    watches_pulls: bool,
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
                // The tick's own sentence: it says all the short reason would.
                (k.reason.to_string(), false)
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
            let (kind, reason, text, run_id, evidence) = match &b.block.block {
                OutcomeBlock::Success(s) => (
                    "success",
                    String::new(),
                    s.summary.clone(),
                    s.run_id.clone(),
                    s.evidence.as_ref().and_then(EvidenceRow::of),
                ),
                OutcomeBlock::Failure(f) => (
                    "failure",
                    f.reason_code.clone(),
                    f.detail.clone(),
                    f.run_id.clone(),
                    None,
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
                evidence,
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
    let questions = view
        .skipped
        .iter()
        .filter_map(|k| QuestionRow::of(k, now))
        .collect();
    TicketPage {
        watches_pulls: config.reactions.is_some()
            || view.pull_request.is_some()
            || !view.reactions.is_empty(),
        questions,
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
        pull_request: view.pull_request.as_ref().map(|p| pull_row(p, now)),
        reactions: view
            .reactions
            .iter()
            .map(|r| reaction_row(r, now))
            .collect(),
    }
}

/// A commit's first 7 hex digits, as people quote them.
fn short_sha(sha: &str) -> String {
    sha.chars().take(7).collect()
}

fn pull_row(view: &PullRequestView, now: chrono::DateTime<chrono::Utc>) -> PullRow {
    use crate::tracker::pulls::{CheckState, Mergeability, PullLifecycle, ReviewVerdict};
    let p = &view.pull;
    let lifecycle = match &p.lifecycle {
        PullLifecycle::Open if p.draft => "open, draft".to_string(),
        PullLifecycle::Open => "open".to_string(),
        PullLifecycle::Merged {
            merge_commit,
            merged_by,
        } => {
            let mut text = "merged".to_string();
            if let Some(by) = merged_by {
                text.push_str(&format!(" by {by}"));
            }
            if let Some(sha) = merge_commit {
                text.push_str(&format!(" as {}", short_sha(sha)));
            }
            text
        }
        PullLifecycle::Closed => "closed unmerged".to_string(),
    };
    let mergeability = match p.mergeability {
        Mergeability::Clean => "mergeable",
        Mergeability::Blocked => "blocked (a required review or check, or behind its base)",
        Mergeability::Conflict => "conflicts with its base",
        Mergeability::Unknown => "not computed by the forge yet",
    };
    let checks = p
        .checks
        .iter()
        .map(|c| CheckRow {
            state: match c.state {
                CheckState::Pending => "pending",
                CheckState::Success => "success",
                CheckState::Failure => "failure",
                CheckState::Neutral => "neutral",
            },
            name: c.name.clone(),
            summary: c
                .summary
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(CHECK_SUMMARY_CHARS)
                .collect(),
            url: board::web_link(c.url.as_deref()),
        })
        .collect();
    let reviews = p
        .reviews
        .iter()
        .map(|r| ReviewRow {
            author: r.author.clone(),
            verdict: match r.verdict {
                ReviewVerdict::Approved => "approved",
                ReviewVerdict::ChangesRequested => "changes requested",
                ReviewVerdict::Commented => "commented",
                ReviewVerdict::Other => "dismissed or pending",
            },
            url: board::web_link(r.url.as_deref()),
        })
        .collect();
    let comments = p
        .comments
        .iter()
        .map(|c| CommentRow {
            author: c.author.clone(),
            place: match (&c.path, c.line) {
                (Some(path), Some(line)) => format!("{path}:{line}"),
                (Some(path), None) => path.clone(),
                (None, _) => String::new(),
            },
            resolved: c.resolved,
            outdated: c.outdated,
            url: board::web_link(c.url.as_deref()),
        })
        .collect();
    PullRow {
        number: p.number,
        url: board::web_link(Some(&p.url)),
        head: short_sha(&p.head_sha),
        head_branch: p.head_branch.clone(),
        base_branch: p.base_branch.clone(),
        draft: p.draft,
        lifecycle,
        mergeability: mergeability.to_string(),
        labels: p.labels.clone(),
        checks,
        reviews,
        comments,
        comments_not_shown: view.comments_not_shown,
        read: When::of(view.read_at, now),
    }
}

fn reaction_row(r: &ReactionView, now: chrono::DateTime<chrono::Utc>) -> ReactionRow {
    let round = match (r.round, r.max_rounds) {
        (0, _) => String::new(),
        (n, Some(max)) => format!("round {n} of {max}"),
        (n, None) => format!("round {n}"),
    };
    ReactionRow {
        kind: r.kind.clone(),
        round,
        to_role: r.to_role.clone(),
        pull_request: r.pull_request,
        head: short_sha(&r.head_sha),
        handed: r.comments_handed,
        decided: When::of(r.decided_at, now),
    }
}

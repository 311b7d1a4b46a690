//! One ticket as `/api/v1/tickets/{id}` and `/tickets/{id}` show it: a dry-run tick
//! filtered to it, its ledger rows, its outcome blocks and its runs, its pull request as
//! this host last read it and the reactions to it.

use axum::http::StatusCode;
use chrono::Utc;
use serde::Serialize;

use super::api_error::ApiError;
use super::Shared;
use crate::ledger::{Hold, ReactionRecord, RetryEntry, RunRecord, Scope};
use crate::pipeline::verify_result::VerifyResult;
use crate::tracker::PullState;

/// Review comments a ticket's view lists at most, the newest first.
pub(super) const MAX_REVIEW_COMMENTS: usize = 20;

/// One outcome block on a ticket, with the comment that carries it.
#[derive(Serialize)]
pub(super) struct BlockView {
    pub(super) author: String,
    pub(super) created_at: chrono::DateTime<Utc>,
    #[serde(flatten)]
    pub(super) block: crate::block::ParsedBlock,
}

/// `GET /api/v1/tickets/{id}`.
#[derive(Serialize)]
pub(super) struct TicketView {
    pub(super) ticket: crate::tracker::Ticket,
    /// What a tick now would do with it: `would_run` lines and skip reasons, per stage.
    pub(super) would_run: Vec<crate::pipeline::report::RunLine>,
    pub(super) skipped: Vec<crate::pipeline::report::SkipLine>,
    pub(super) claims: Vec<crate::ledger::Claim>,
    pub(super) retry_queue: Vec<RetryEntry>,
    pub(super) held: Vec<Hold>,
    pub(super) blocks: Vec<BlockView>,
    /// Its runs, newest first (at most 50).
    pub(super) runs: Vec<RunRecord>,
    /// Its pull request as this host's react step last read it; `null` when it never did.
    pub(super) pull_request: Option<PullRequestView>,
    /// The reactions to its pull request, newest first.
    pub(super) reactions: Vec<ReactionView>,
    /// Its last `verify` result, from the newest block by sortie or a trusted author
    /// that records one (issue #33); `null` when none does.
    pub(super) verify: Option<VerifyResult>,
}

/// A pull request as this host last read it (`state_root/pulls/`).
#[derive(Serialize)]
pub(super) struct PullRequestView {
    /// When it was read.
    pub(super) read_at: chrono::DateTime<Utc>,
    /// What the forge answered, the review comments cut to the newest
    /// [`MAX_REVIEW_COMMENTS`].
    #[serde(flatten)]
    pub(super) pull: PullState,
    /// Review comments read but not listed.
    pub(super) comments_not_shown: usize,
}

impl PullRequestView {
    fn of(snapshot: crate::pipeline::pull_snapshot::PullSnapshot) -> Self {
        let mut pull = snapshot.pull;
        // RFC 3339 times in UTC compare as text; a comment without a time goes last.
        pull.comments
            .sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
        let comments_not_shown = pull.comments.len().saturating_sub(MAX_REVIEW_COMMENTS);
        pull.comments.truncate(MAX_REVIEW_COMMENTS);
        PullRequestView {
            read_at: snapshot.read_at,
            pull,
            comments_not_shown,
        }
    }
}

/// One reaction to the ticket's pull request, from the ledger.
#[derive(Serialize)]
pub(super) struct ReactionView {
    /// `ci_failure`, `review_comments`, `bot_review`, `merge_conflict`, `exhausted`,
    /// `merged` or `closed_unmerged`.
    pub(super) kind: String,
    /// Its round of the kind (0 for kinds without rounds).
    pub(super) round: u32,
    /// The kind's `max_rounds` in the config now, when it has rounds.
    pub(super) max_rounds: Option<u32>,
    /// The role whose stage the ticket was sent to.
    pub(super) to_role: Option<String>,
    pub(super) pull_request: u64,
    pub(super) head_sha: String,
    /// Review comments (and reviews) handed to the fixing stage.
    pub(super) comments_handed: usize,
    pub(super) decided_at: chrono::DateTime<Utc>,
}

impl ReactionView {
    fn of(record: ReactionRecord, config: &crate::config::Config) -> Self {
        let max_rounds = config.reactions.as_ref().and_then(|r| {
            crate::config::ReactionKind::ALL
                .into_iter()
                .find(|k| k.as_str() == record.kind)
                .and_then(|k| r.rule(k))
                .map(|rule| rule.max_rounds)
        });
        ReactionView {
            kind: record.kind,
            round: record.round,
            max_rounds,
            to_role: record.to_role,
            pull_request: record.pull_request,
            head_sha: record.head_sha,
            comments_handed: record.handed.len(),
            decided_at: record.decided_at,
        }
    }
}

/// What `/api/v1/tickets/{id}` and `/tickets/{id}` show.
pub(super) async fn ticket_view(shared: &Shared, id: &str) -> Result<TicketView, ApiError> {
    let Some(pipeline) = shared.pipeline() else {
        let reason = shared
            .status()
            .not_ready
            .clone()
            .unwrap_or_else(|| "starting".to_string());
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            format!("no pipeline yet: {reason}"),
        ));
    };
    let tracker_error = |e: crate::tracker::TrackerError| {
        ApiError::new(StatusCode::BAD_GATEWAY, "tracker", format!("tracker: {e}"))
    };
    let tracker = pipeline.tracker();
    let ticket = match tracker.get(id).await {
        Ok(t) => t,
        Err(crate::tracker::TrackerError::NotFound(_)) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "unknown_ticket",
                format!("no ticket {id}"),
            ))
        }
        Err(e) => return Err(tracker_error(e)),
    };
    let report = pipeline
        .tick(crate::pipeline::TickOptions { dry_run: true })
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "dry_run",
                format!("dry-run tick: {e}"),
            )
        })?;
    let comments = tracker.comments(id).await.map_err(tracker_error)?;
    let blocks: Vec<BlockView> = comments
        .iter()
        .flat_map(|c| {
            crate::block::parse_blocks(&c.body)
                .into_iter()
                .filter_map(Result::ok)
                .map(|block| BlockView {
                    author: c.author.clone(),
                    created_at: c.created_at,
                    block,
                })
        })
        .collect();
    let verify = match tracker.identity().await {
        Ok(me) => VerifyResult::last_of(
            blocks
                .iter()
                .filter(|b| b.author == me || pipeline.config().trusted_authors.contains(&b.author))
                .map(|b| &b.block.block),
        ),
        Err(_) => None,
    };
    let name = tracker.name().to_string();
    let ledger = pipeline.ledger();
    let scope = Scope::Tracker(&name);
    let ledger_error = |e: crate::ledger::LedgerError| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ledger",
            format!("ledger: {e}"),
        )
    };
    let would_run: Vec<_> = report.runs.into_iter().filter(|r| r.ticket == id).collect();
    let mut skipped: Vec<_> = report
        .skips
        .into_iter()
        .filter(|s| s.ticket == id)
        .collect();
    // A tracker that filters server-side did not list it: say which filter keeps it out.
    if would_run.is_empty() && skipped.is_empty() {
        skipped.extend(filtered_out(pipeline.config(), &**tracker, &ticket).await);
    }
    let pull_request =
        crate::pipeline::pull_snapshot::read(&pipeline.config().state_root, &name, id)
            .map(PullRequestView::of);
    let mut reactions: Vec<ReactionView> = ledger
        .reactions(&name, Some(id))
        .map_err(ledger_error)?
        .into_iter()
        .map(|r| ReactionView::of(r, pipeline.config()))
        .collect();
    reactions.sort_by(|a, b| b.decided_at.cmp(&a.decided_at).then(b.round.cmp(&a.round)));
    Ok(TicketView {
        verify,
        pull_request,
        reactions,
        would_run,
        skipped,
        claims: ledger
            .claims(scope)
            .map_err(ledger_error)?
            .into_iter()
            .filter(|c| c.key.ticket_id == id)
            .collect(),
        retry_queue: ledger
            .retries(scope)
            .map_err(ledger_error)?
            .into_iter()
            .filter(|r| r.key.ticket_id == id)
            .collect(),
        held: ledger
            .holds(scope)
            .map_err(ledger_error)?
            .into_iter()
            .filter(|h| h.key.ticket_id == id)
            .collect(),
        runs: ledger.ticket_runs(&name, id, 50).map_err(ledger_error)?,
        blocks,
        ticket,
    })
}

/// The skip line of a ticket on a stage's status that its stage's filter keeps out.
async fn filtered_out(
    config: &crate::config::Config,
    tracker: &dyn crate::tracker::Tracker,
    ticket: &crate::tracker::Ticket,
) -> Option<crate::pipeline::report::SkipLine> {
    let mut ticket = ticket.clone();
    if let Some(status) = config.canonical_status(&ticket.status) {
        ticket.status = status.to_string();
    }
    let stage =
        &config.stages[crate::pipeline::eligibility::stage_for_status(config, &ticket.status)?];
    let identity = tracker.identity().await.ok()?;
    let detail = crate::pipeline::decide::filter::mismatch(&stage.filter, &ticket, &identity)?;
    Some(crate::pipeline::report::SkipLine {
        ticket: ticket.id.clone(),
        role: stage.role.clone(),
        status: ticket.status.clone(),
        reason: crate::pipeline::eligibility::SkipReason::Filtered { detail },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::pull_snapshot::PullSnapshot;
    use crate::tracker::pulls::ReviewComment;

    fn comment(n: u32) -> ReviewComment {
        ReviewComment {
            id: n.to_string(),
            author: "ana".into(),
            bot: false,
            path: Some("src/lib.rs".into()),
            line: Some(n.into()),
            body: format!("comment {n}"),
            url: None,
            resolved: false,
            outdated: false,
            updated_at: Some(format!("2026-12-01T10:{n:02}:00Z")),
        }
    }

    #[test]
    fn the_view_lists_the_newest_review_comments_and_counts_the_rest() {
        let mut pull = PullState::open(7, "https://github.com/a/b/pull/7", "abc");
        pull.comments = (0..25).map(comment).collect();
        let view = PullRequestView::of(PullSnapshot {
            read_at: Utc::now(),
            pull,
        });
        assert_eq!(view.pull.comments.len(), MAX_REVIEW_COMMENTS);
        assert_eq!(view.comments_not_shown, 5);
        assert_eq!(view.pull.comments[0].id, "24", "newest first");
        assert_eq!(view.pull.comments[MAX_REVIEW_COMMENTS - 1].id, "5");
    }
}

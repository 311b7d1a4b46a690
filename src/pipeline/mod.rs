//! The tick: reconcile the board with the ledger, dispatch what the board asks for,
//! and write the results back.
//!
//! A tick is a function of the board and the ledger, never of an event: it does not
//! know why it runs, so running it again (from cron, after a crash, twice at once)
//! converges instead of duplicating work.

pub mod eligibility;
mod faults;
pub mod history;
pub mod report;
mod run;
mod writeback;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;

pub use faults::Faults;

use self::eligibility::{candidates, stage_for_status, InFlight, LedgerSnapshot, SkipReason};
use self::history::TicketHistory;
use self::report::{CancelLine, RunLine, SkipLine, TickReport, WritebackLine};
use crate::agent::{PromptError, RoleTemplates};
use crate::config::Config;
use crate::ledger::{Caps, Claim, ClaimKey, ClaimOutcome, ClaimRequest, Ledger, LedgerError};
use crate::tracker::{Ticket, Tracker, TrackerError};

/// Where "now" comes from; tests inject a fixed or stepped clock.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Why a tick could not run. Agent failures are not errors: they are outcomes.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The tracker could not be listed.
    #[error("tracker: {0}")]
    Tracker(#[from] TrackerError),
    /// The ledger could not be read or written.
    #[error("ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// A role template is missing or invalid.
    #[error("role template: {0}")]
    Prompt(#[from] PromptError),
}

/// Options of one tick.
#[derive(Debug, Clone, Copy, Default)]
pub struct TickOptions {
    /// Claim nothing, run nothing, write nothing; report what would happen.
    pub dry_run: bool,
}

/// State shared by the tick and the runs it starts.
struct Inner {
    config: Config,
    tracker: Arc<dyn Tracker>,
    ledger: Arc<dyn Ledger>,
    templates: RoleTemplates,
    clock: Arc<dyn Clock>,
    claimer_id: String,
    trusted: HashSet<String>,
    faults: Faults,
}

/// A configured pipeline bound to a tracker and a ledger.
pub struct Pipeline {
    inner: Arc<Inner>,
}

impl Pipeline {
    /// Bind `config` to a tracker and a ledger. Loads and checks every role template.
    pub async fn new(
        config: Config,
        tracker: Arc<dyn Tracker>,
        ledger: Arc<dyn Ledger>,
    ) -> Result<Self, PipelineError> {
        Self::with_clock(
            config,
            tracker,
            ledger,
            Arc::new(SystemClock),
            Faults::from_env(),
        )
        .await
    }

    /// Like [`Pipeline::new`] with an injected clock and fault points.
    pub async fn with_clock(
        config: Config,
        tracker: Arc<dyn Tracker>,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        faults: Faults,
    ) -> Result<Self, PipelineError> {
        let templates = RoleTemplates::load(
            &config.roles_dir,
            config.stages.iter().map(|s| s.role.as_str()),
        )?;
        let identity = tracker.identity().await?;
        let trusted = std::iter::once(identity)
            .chain(config.trusted_authors.iter().cloned())
            .collect();
        let inner = Inner {
            config,
            tracker,
            ledger,
            templates,
            clock,
            claimer_id: new_claimer_id(),
            trusted,
            faults,
        };
        Ok(Pipeline {
            inner: Arc::new(inner),
        })
    }

    /// This process's claimer id (`host:pid:random`).
    pub fn claimer_id(&self) -> &str {
        &self.inner.claimer_id
    }

    /// One reconcile sweep. Returns when every run it started has finished.
    pub async fn tick(&self, opts: TickOptions) -> Result<TickReport, PipelineError> {
        let inner = &self.inner;
        let config = &inner.config;
        let tracker_name = inner.tracker.name().to_string();
        let started_at = inner.clock.now();
        let mut report = TickReport {
            dry_run: opts.dry_run,
            tracker: tracker_name.clone(),
            started_at,
            tickets_listed: 0,
            warnings: Vec::new(),
            replays: Vec::new(),
            cancels: Vec::new(),
            runs: Vec::new(),
            skips: Vec::new(),
        };

        // Finish what earlier runs stored but could not write, before anything new.
        if !opts.dry_run {
            self.replay_outbox(&mut report).await?;
        }

        let listing = inner.tracker.list(&config.pipeline_statuses()).await?;
        report.warnings = listing.warnings;
        report.tickets_listed = listing.tickets.len();
        let tickets = listing.tickets;

        let now = inner.clock.now();
        let claims: Vec<Claim> = inner
            .ledger
            .claims()?
            .into_iter()
            .filter(|c| c.key.tracker == tracker_name && c.lease_expires_at > now)
            .collect();
        self.reconcile(&tickets, &claims, opts, &mut report)?;

        let retries: Vec<_> = inner
            .ledger
            .retries()?
            .into_iter()
            .filter(|r| r.key.tracker == tracker_name)
            .collect();
        let holds: Vec<_> = inner
            .ledger
            .holds()?
            .into_iter()
            .filter(|h| h.key.tracker == tracker_name)
            .collect();
        let pending_writebacks = inner
            .ledger
            .outbox_pending(&tracker_name)?
            .into_iter()
            .map(|e| (e.key.ticket_id, e.key.role))
            .collect();
        let snapshot = LedgerSnapshot {
            claims: &claims,
            retries: &retries,
            holds: &holds,
            pending_writebacks,
        };
        let (ordered, skips) = candidates(config, &tickets, &snapshot, now);
        report.skips.extend(
            skips
                .into_iter()
                .map(|s| skip_line(config, s.ticket, s.stage, s.reason)),
        );

        let mut in_flight = InFlight::from_claims(&claims, now);
        let mut runs = JoinSet::new();
        for candidate in ordered {
            let stage = &config.stages[candidate.stage];
            let ticket = candidate.ticket;
            if let Some(reason) = in_flight.ceiling(config, stage) {
                report
                    .skips
                    .push(skip_line(config, ticket, candidate.stage, reason));
                continue;
            }
            let history = match inner.tracker.comments(&ticket.id).await {
                Ok(comments) => TicketHistory::from_comments(&comments, &inner.trusted),
                Err(err) => {
                    let reason = SkipReason::TrackerError {
                        message: err.to_string(),
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                    continue;
                }
            };
            if let Some(prior) = &stage.requires_prior_role {
                if !history.has_success(prior) {
                    let reason = SkipReason::PriorRoleMissing {
                        role: prior.clone(),
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                    continue;
                }
            }
            if opts.dry_run {
                in_flight.add(&stage.role, &stage.claim_status);
                report.runs.push(RunLine {
                    ticket: ticket.id.clone(),
                    role: stage.role.clone(),
                    attempt: 0,
                    outcome: "would_run".to_string(),
                    reason_code: None,
                    from_status: ticket.status.clone(),
                    to_status: None,
                    writeback: None,
                    note: candidate.retry.then(|| "retry due".to_string()),
                    log_path: None,
                });
                continue;
            }
            let request = ClaimRequest {
                key: ClaimKey::new(&tracker_name, &ticket.id, &stage.role),
                stage: stage.claim_status.clone(),
                claimer_id: inner.claimer_id.clone(),
                run_id: new_run_id(),
                ttl: config.claim_ttl,
                caps: Caps {
                    global: config.concurrency.max_in_flight,
                    role: stage.max_in_flight,
                    status: config
                        .concurrency
                        .per_status_max_in_flight
                        .get(&stage.claim_status)
                        .copied(),
                },
                attempt_floor: history.max_attempt(&stage.role) + 1,
            };
            match inner.ledger.try_claim(&request, inner.clock.now())? {
                ClaimOutcome::Acquired(claim) => {
                    in_flight.add(&stage.role, &stage.claim_status);
                    if let Err(err) = inner.ledger.clear_retry(&claim.key) {
                        tracing::warn!(%err, "could not clear the retry entry");
                    }
                    let task = run::run_claimed(
                        inner.clone(),
                        ticket.clone(),
                        candidate.stage,
                        claim,
                        history,
                    );
                    runs.spawn(task);
                }
                ClaimOutcome::Held {
                    holder,
                    lease_expires_at,
                } => {
                    let reason = SkipReason::Claimed {
                        holder,
                        lease_expires_at,
                    };
                    report
                        .skips
                        .push(skip_line(config, ticket, candidate.stage, reason));
                }
                ClaimOutcome::Ceiling(scope) => {
                    let limit = match scope {
                        crate::ledger::CeilingScope::Global => config.concurrency.max_in_flight,
                        crate::ledger::CeilingScope::Role => stage.max_in_flight,
                        crate::ledger::CeilingScope::Status => config
                            .concurrency
                            .per_status_max_in_flight
                            .get(&stage.claim_status)
                            .copied()
                            .unwrap_or(0),
                    };
                    report.skips.push(skip_line(
                        config,
                        ticket,
                        candidate.stage,
                        SkipReason::CapReached { scope, limit },
                    ));
                }
            }
        }
        while let Some(done) = runs.join_next().await {
            match done {
                Ok(line) => report.runs.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }
        report.runs.sort_by(|a, b| {
            eligibility::natural_cmp(&a.ticket, &b.ticket).then(a.role.cmp(&b.role))
        });
        Ok(report)
    }

    /// Replay outbox entries that are due: the agent already ran; only writes remain.
    async fn replay_outbox(&self, report: &mut TickReport) -> Result<(), PipelineError> {
        let inner = &self.inner;
        let now = inner.clock.now();
        for entry in inner.ledger.outbox_pending(inner.tracker.name())? {
            if entry.next_attempt_at > now {
                continue;
            }
            let (ticket, role, attempt) = (
                entry.key.ticket_id.clone(),
                entry.key.role.clone(),
                entry.stage_attempt,
            );
            let result = writeback::apply(inner, entry).await?;
            report.replays.push(WritebackLine {
                ticket,
                role,
                attempt,
                result: result.describe(),
            });
        }
        Ok(())
    }

    /// Ask the holders of claims whose ticket left its stage (or became terminal) to stop.
    /// Drop queued retries and holds of tickets that left their stage.
    fn reconcile(
        &self,
        tickets: &[Ticket],
        claims: &[Claim],
        opts: TickOptions,
        report: &mut TickReport,
    ) -> Result<(), PipelineError> {
        let inner = &self.inner;
        let config = &inner.config;
        let by_id: HashMap<&str, &Ticket> = tickets.iter().map(|t| (t.id.as_str(), t)).collect();
        let status_of = |id: &str| by_id.get(id).copied();
        for claim in claims {
            let Some(stage) = config.stages.iter().find(|s| s.role == claim.key.role) else {
                continue;
            };
            let reason = match status_of(&claim.key.ticket_id) {
                None => Some("ticket left the pipeline's statuses".to_string()),
                Some(t) if t.closed || config.is_terminal(&t.status) => {
                    Some(format!("ticket is terminal ({})", t.status))
                }
                Some(t) if !stage.owned_statuses().any(|s| s == t.status) => {
                    Some(format!("ticket moved to {}", t.status))
                }
                Some(_) => None,
            };
            let Some(reason) = reason else { continue };
            if claim.cancel_requested {
                continue;
            }
            if !opts.dry_run {
                inner.ledger.request_cancel(&claim.key)?;
            }
            report.cancels.push(CancelLine {
                ticket: claim.key.ticket_id.clone(),
                role: claim.key.role.clone(),
                holder: claim.claimer_id.clone(),
                reason,
            });
        }
        if opts.dry_run {
            return Ok(());
        }
        // A retry belongs to its stage: a ticket that left the stage's statuses drops it.
        let in_stage = |id: &str, claim_status: &str| {
            status_of(id).is_some_and(|t| {
                stage_for_status(config, &t.status) == stage_for_status(config, claim_status)
            })
        };
        for retry in inner.ledger.retries()? {
            if retry.key.tracker == inner.tracker.name()
                && !in_stage(&retry.key.ticket_id, &retry.stage)
            {
                inner.ledger.clear_retry(&retry.key)?;
            }
        }
        for hold in inner.ledger.holds()? {
            if hold.key.tracker == inner.tracker.name()
                && status_of(&hold.key.ticket_id).is_none_or(|t| t.status != hold.status)
            {
                inner.ledger.clear_hold(&hold.key)?;
            }
        }
        Ok(())
    }
}

fn skip_line(config: &Config, ticket: &Ticket, stage: usize, reason: SkipReason) -> SkipLine {
    SkipLine {
        ticket: ticket.id.clone(),
        role: config.stages[stage].role.clone(),
        status: ticket.status.clone(),
        reason,
    }
}

fn new_claimer_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".to_string());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &nonce[..8])
}

fn new_run_id() -> String {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("r{}", &nonce[..16])
}

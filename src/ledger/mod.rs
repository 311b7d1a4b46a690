//! The claim ledger: who runs what, attempts, the retry queue, run history and the outbox.
//!
//! All SQL lives below this module. Callers see the [`Ledger`] trait and get one from
//! [`open`]: SQLite is the embedded default ([`SqliteLedger`]), PostgreSQL the shared one
//! for several hosts ([`PostgresLedger`]). Every method takes `now` explicitly so lease
//! and backoff logic is tested without a clock or sleeping.

mod claimer;
mod codec;
mod fleet;
mod postgres;
mod sqlite;

pub use postgres::PostgresLedger;
pub use sqlite::SqliteLedger;

pub use claimer::ClaimerId;
pub use fleet::{HostPresence, HostShare};
use std::sync::Arc;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// A point in time as the ledger stores it.
pub type Timestamp = DateTime<Utc>;

/// The primary key of a claim: one role working on one ticket of one tracker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ClaimKey {
    /// Tracker identity ([`crate::tracker::Tracker::name`]).
    pub tracker: String,
    /// Ticket id on that tracker.
    pub ticket_id: String,
    /// Pipeline role.
    pub role: String,
}

impl ClaimKey {
    /// Build a key from its three parts.
    pub fn new(
        tracker: impl Into<String>,
        ticket_id: impl Into<String>,
        role: impl Into<String>,
    ) -> Self {
        Self {
            tracker: tracker.into(),
            ticket_id: ticket_id.into(),
            role: role.into(),
        }
    }
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.tracker, self.ticket_id, self.role)
    }
}

/// In-flight limits checked atomically with the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimLimits {
    /// Live claims across all roles of this tracker.
    pub global: u32,
    /// Live claims of this role.
    pub role: u32,
    /// Live claims whose stage (claim status) is this one, if capped.
    pub status: Option<u32>,
    /// The claiming host's share of each cap while other hosts share them (`None`: the
    /// host is alone, and the caps are all its own).
    pub host: Option<HostShare>,
}

/// A request to claim `key` for `claimer_id`.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// What to claim.
    pub key: ClaimKey,
    /// The status the ticket is claimed from (the stage).
    pub stage: String,
    /// Unique id of the claiming process/run owner (`host:pid:uuid`).
    pub claimer_id: ClaimerId,
    /// Run id recorded with the claim.
    pub run_id: String,
    /// Lease length.
    pub ttl: Duration,
    /// Ceilings to respect.
    pub limits: ClaimLimits,
    /// Lowest acceptable attempt number (rebuilt from the ticket's blocks after a ledger loss):
    /// the claim's attempt is `max(last recorded + 1, attempt_floor)`.
    pub attempt_floor: u32,
}

/// A live claim row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// What is claimed.
    pub key: ClaimKey,
    /// The status it was claimed from.
    pub stage: String,
    /// Who holds it.
    pub claimer_id: ClaimerId,
    /// When it was first claimed.
    pub claimed_at: Timestamp,
    /// When the lease runs out unless renewed.
    pub lease_expires_at: Timestamp,
    /// The attempt this claim runs.
    pub stage_attempt: u32,
    /// Run id of the run holding it.
    pub run_id: String,
    /// Someone (a tick that saw the ticket leave its stage) asked the holder to stop.
    pub cancel_requested: bool,
    /// Process id of the agent the holder runs, when known.
    pub agent_pid: Option<u32>,
}

/// Which ceiling refused a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CeilingScope {
    /// The global in-flight cap.
    Global,
    /// The role's in-flight cap.
    Role,
    /// The stage status's in-flight cap.
    Status,
}

/// What [`Ledger::try_claim`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller now holds the claim (fresh, taken over from an expired lease, or renewed
    /// because the caller already held it: then the attempt is unchanged).
    Acquired(Claim),
    /// Someone else holds a live lease.
    Held {
        /// The holder's `claimer_id`.
        holder: ClaimerId,
        /// When the holder's lease runs out.
        lease_expires_at: Timestamp,
    },
    /// A ceiling is reached; nothing was written.
    Ceiling(CeilingScope),
    /// The fleet's cap has room, but the claiming host holds its share of it
    /// ([`ClaimLimits::host`]); nothing was written.
    HostShare(CeilingScope),
}

/// What [`Ledger::renew`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The lease now runs until this time.
    Renewed {
        /// New expiry.
        lease_expires_at: Timestamp,
        /// A cancel was requested for this claim; the holder should stop.
        cancel_requested: bool,
    },
    /// The caller no longer holds the claim (expired and taken, released, or forced).
    Lost,
}

/// A queued retry of a failed attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryEntry {
    /// Which (ticket, role).
    pub key: ClaimKey,
    /// Status the ticket must still be in for the retry to run.
    pub stage: String,
    /// The attempt that failed.
    pub failed_attempt: u32,
    /// Not to be dispatched before this time.
    pub due_at: Timestamp,
    /// Why the attempt failed.
    pub reason_code: String,
}

/// A ticket left where it is after its final failure, not dispatched again until its status changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hold {
    /// Which (ticket, role).
    pub key: ClaimKey,
    /// The status the ticket was held in; a different status releases the hold.
    pub status: String,
    /// Reason code of the final failure.
    pub reason_code: String,
    /// When it was held.
    pub created_at: Timestamp,
    /// The ticket's updated time as the tracker reported it right after sortie's own
    /// writes (`None`: not read). A later one means someone else changed the ticket
    /// after the hold (docs/pipeline.md, *Releasing a held ticket*).
    pub ticket_updated_at: Option<Timestamp>,
}

/// Life-cycle phase of a run in run history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// Agent running.
    Running,
    /// Agent finished; outcome recorded.
    Finished,
    /// Stopped because the ticket left the stage or the lease was lost.
    Cancelled,
}

/// One row of run history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    /// Unique run id.
    pub run_id: String,
    /// Which (ticket, role).
    pub key: ClaimKey,
    /// Stage (claim status).
    pub stage: String,
    /// Attempt number.
    pub stage_attempt: u32,
    /// Who ran it.
    pub claimer_id: ClaimerId,
    /// Phase.
    pub phase: RunPhase,
    /// `success` / `failure` once finished.
    pub outcome: Option<String>,
    /// Failure reason code, if any.
    pub reason_code: Option<String>,
    /// Where the agent's output went.
    pub log_path: Option<String>,
    /// Start time.
    pub started_at: Timestamp,
    /// End time.
    pub finished_at: Option<Timestamp>,
    /// The agent's session (thread) id, once the agent reported it: a retry resumes it.
    pub session_id: Option<String>,
    /// The stage route the run took (`routes:`), when one matched.
    pub route: Option<String>,
    /// The ticket's title when the run started (kept once recorded: a later record with
    /// none leaves it), so history names a ticket that has left the board.
    pub title: Option<String>,
    /// The agent preset that ran it (`claude-code`, `codex`, `acp`, `command`), kept
    /// once recorded like `title`; `None` in rows from before it was (`sortie stats`
    /// counts them as `unknown`).
    pub agent: Option<String>,
    /// The model its agent was told to use, when sortie could tell it from the argv;
    /// kept once recorded like `agent`.
    pub model: Option<String>,
    /// The latest rate-limit report of each limit type the run's agent reported (Claude
    /// Code's `rate_limit_event`), recorded when the run ends and kept once recorded like
    /// `title`; empty when it reported none (and in rows from before they were kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<crate::rate_limit::RateLimit>,
}

/// Progress of an outbox entry through write-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    /// Nothing confirmed on the tracker yet.
    Pending,
    /// The comment is on the ticket; the transition may not be.
    CommentPosted,
    /// Comment and transition done (hooks may still be pending).
    Done,
    /// Dropped on purpose (terminal wins / moved by a person); `last_error` says why.
    Dropped,
}

/// A tracker write-back waiting to be applied, stored before any tracker write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxEntry {
    /// Idempotency key of the outcome block (primary key).
    pub idempotency_key: String,
    /// Which (ticket, role).
    pub key: ClaimKey,
    /// Stage (claim status).
    pub stage: String,
    /// Attempt the outcome belongs to.
    pub stage_attempt: u32,
    /// Run that produced it.
    pub run_id: String,
    /// `success` or `failure`.
    pub outcome: String,
    /// Status the ticket is expected in before the transition (claim or in-progress status).
    pub from_status: String,
    /// Status to move to; equal to `from_status` when the ticket stays.
    pub to_status: String,
    /// Full comment body (prose + fenced block).
    pub comment_body: String,
    /// Where it is.
    pub state: OutboxState,
    /// How many write attempts failed so far.
    pub write_attempts: u32,
    /// Earliest time of the next write attempt.
    pub next_attempt_at: Timestamp,
    /// Last error, or the reason it was dropped.
    pub last_error: Option<String>,
    /// When it was stored.
    pub created_at: Timestamp,
    /// What the ledger does once the write-back is done, decided with the outcome.
    pub follow_up: FollowUp,
}

/// What happens after a write-back is done: decided once, with the outcome, stored with
/// the outbox entry, and applied by the write-back. Nothing re-reads the comment to learn it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FollowUp {
    /// Queue a retry of the stage, due this many seconds after the write-back.
    Retry {
        /// Delay in seconds.
        after_seconds: u64,
        /// Why the attempt failed.
        reason_code: String,
    },
    /// Keep the ticket out of dispatch until its status changes.
    Hold {
        /// Why.
        reason_code: String,
    },
    /// The ticket stays in its claim status after a success: run the stage again soon.
    Continue {
        /// Delay in seconds.
        after_seconds: u64,
    },
    /// The ticket moved on: drop any retry and hold of this (ticket, role).
    Clear,
}

/// What [`Ledger::outbox_put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxPut {
    /// Stored, with the write lease held by the caller.
    Stored,
    /// An entry with this idempotency key was already stored; nothing changed.
    Exists,
    /// The caller no longer holds the claim (taken over or released): nothing was stored,
    /// and the run must not write back.
    LeaseLost,
}

/// A reaction to a ticket's pull request, decided once (issue #32): its fingerprint is
/// also the idempotency key of the block it writes, so a reaction is stored, and
/// written, at most once whoever decides it, on however many hosts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReactionRecord {
    /// The tracker's identity.
    pub tracker: String,
    /// The ticket.
    pub ticket_id: String,
    /// `ci_failure`, `review_comments`, `bot_review`, `merge_conflict`, `exhausted`,
    /// `merged` or `closed_unmerged`.
    pub kind: String,
    /// 64 hex digits: kind, head SHA and what it answers, hashed (primary key).
    pub fingerprint: String,
    /// The round of this kind on this ticket (1-based; 0 for kinds without rounds).
    pub round: u32,
    /// The role whose stage the ticket is sent to, when it is sent to one.
    pub to_role: Option<String>,
    /// The pull request's number.
    pub pull_request: u64,
    /// The pull request's head SHA the reaction answers.
    pub head_sha: String,
    /// Review comment (and review) ids handed over by this reaction.
    pub handed: Vec<String>,
    /// What the fixing stage's prompt receives as `reaction` (JSON).
    pub payload: serde_json::Value,
    /// When it was decided.
    pub decided_at: Timestamp,
}

/// A pull request whose merge sortie observed (or made): its `merged` reaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergedPull {
    /// The ticket whose pull request it is.
    pub ticket_id: String,
    /// The pull request's number.
    pub pull_request: u64,
    /// When sortie decided the `merged` reaction (saw the merge, or merged it).
    pub merged_at: Timestamp,
}

/// What [`Ledger::put_reaction`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReactionPut {
    /// Stored, with its outbox entry (write lease held by the caller).
    Stored,
    /// This reaction (its fingerprint, or its kind's round on the ticket) was stored
    /// already, by this host or another: nothing changed.
    Exists,
}

/// Which rows a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every tracker's.
    All,
    /// Only this tracker's ([`crate::tracker::Tracker::name`]).
    Tracker(&'a str),
}

impl Scope<'_> {
    /// Whether a row of `tracker` is in scope.
    pub fn includes(&self, tracker: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Tracker(t) => *t == tracker,
        }
    }
}

/// Everything a tick reads from the ledger about one tracker, read together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerSnapshot {
    /// Claim rows, live or expired.
    pub claims: Vec<Claim>,
    /// Queued retries.
    pub retries: Vec<RetryEntry>,
    /// Holds.
    pub holds: Vec<Hold>,
    /// Outbox entries not yet written back.
    pub outbox_pending: Vec<OutboxEntry>,
    /// Hosts ticking this tracker ([`Ledger::announce`]), present or expired.
    pub hosts: Vec<HostPresence>,
}

/// Where one event's delivery to one hook stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookDeliveryState {
    /// The hook has the event; a replay skips it.
    Delivered,
    /// The last attempt failed; retried from `next_attempt_at` while attempts remain.
    Failed,
    /// The last allowed attempt failed; not retried.
    GaveUp,
}

/// The record of one event's delivery to one hook, keyed `(delivery_id, sink_id)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookDelivery {
    /// The event's delivery id (a handoff's idempotency key).
    pub delivery_id: String,
    /// The hook's stable id.
    pub sink_id: String,
    /// Event name.
    pub event: String,
    /// The payload as JSON text, kept so a failed delivery can be retried later.
    pub payload: String,
    /// Where it stands.
    pub state: HookDeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// When a `Failed` delivery is due again.
    pub next_attempt_at: Option<Timestamp>,
    /// When the first attempt was recorded (kept on update).
    pub created_at: Timestamp,
    /// When this record last changed.
    pub updated_at: Timestamp,
}

/// What one run consumed, as its agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunUsage {
    /// The run.
    pub run_id: String,
    /// Which (ticket, role).
    pub key: ClaimKey,
    /// Input tokens not read from or written to a prompt cache.
    pub tokens_in: u64,
    /// Output tokens (reasoning tokens included).
    pub tokens_out: u64,
    /// Input tokens read from a prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to a prompt cache.
    pub cache_write_tokens: u64,
    /// Output tokens spent on reasoning (a part of `tokens_out`, not added to it).
    pub reasoning_tokens: u64,
    /// Cost in US dollars: the agent's own figure, else priced from `prices:`; `None`
    /// when unknown.
    pub cost_usd: Option<f64>,
    /// When it was recorded.
    pub recorded_at: Timestamp,
    /// The agent preset that ran (`claude-code`, `codex`, `command`), when recorded.
    pub agent: Option<String>,
    /// The model it ran, when sortie could tell.
    pub model: Option<String>,
}

impl RunUsage {
    /// Every token the run was billed for: input, cache reads and writes, output.
    pub fn total_tokens(&self) -> u64 {
        self.tokens_in
            .saturating_add(self.tokens_out)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }
}

/// Totals of runs and usage for one ticket (and role, when grouped by role). In JSON
/// (`pipeline status --json`, `/api/v1/state`) the token counts are `null` when no run
/// reported usage and `cost_usd` is `null` when no run's cost is known: unknown, never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(into = "UsageTotalJson")]
pub struct UsageTotal {
    /// Ticket id.
    pub ticket_id: String,
    /// Role, or empty for a whole-ticket total.
    pub role: String,
    /// Runs recorded in run history.
    pub runs: u32,
    /// Input tokens (not from or to a cache).
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// Input tokens read from a prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to a prompt cache.
    pub cache_write_tokens: u64,
    /// Reasoning tokens (part of `tokens_out`).
    pub reasoning_tokens: u64,
    /// Cost in US dollars of the runs whose cost is known (the others count as 0 here;
    /// [`UsageTotal::known_cost`] says when none is known).
    pub cost_usd: f64,
    /// Runs that reported usage without a cost: `cost_usd` is then a lower bound.
    pub runs_without_cost: u32,
    /// Runs that reported no usage at all (an agent that reports none, such as a bare
    /// command or claude-code-acp, or a run still going): their tokens and cost are
    /// unknown, never 0, and the sums are lower bounds.
    #[serde(default)]
    pub runs_without_usage: u32,
}

impl UsageTotal {
    /// Every token billed: input, cache reads and writes, output.
    pub fn total_tokens(&self) -> u64 {
        self.tokens_in
            .saturating_add(self.tokens_out)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Whether some run reported usage (or there is no run): the token counts are then
    /// figures (lower bounds when `runs_without_usage` > 0), else unknown.
    pub fn tokens_known(&self) -> bool {
        self.runs == 0 || self.runs_without_usage < self.runs
    }

    /// The dollars of the runs whose cost is known (a lower bound when some are not);
    /// `None` when no run's cost is known (issue #52: unknown, never $0).
    pub fn known_cost(&self) -> Option<f64> {
        let unknown = self
            .runs_without_cost
            .saturating_add(self.runs_without_usage);
        (self.runs == 0 || unknown < self.runs).then_some(self.cost_usd)
    }
}

/// [`UsageTotal`] as JSON: unknown figures are `null`.
#[derive(Serialize)]
struct UsageTotalJson {
    ticket_id: String,
    role: String,
    runs: u32,
    tokens_in: Option<u64>,
    tokens_out: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    cost_usd: Option<f64>,
    runs_without_cost: u32,
    runs_without_usage: u32,
}

impl From<UsageTotal> for UsageTotalJson {
    fn from(u: UsageTotal) -> Self {
        let known = u.tokens_known();
        let tokens = |n: u64| known.then_some(n);
        UsageTotalJson {
            cost_usd: u.known_cost(),
            tokens_in: tokens(u.tokens_in),
            tokens_out: tokens(u.tokens_out),
            cache_read_tokens: tokens(u.cache_read_tokens),
            cache_write_tokens: tokens(u.cache_write_tokens),
            reasoning_tokens: tokens(u.reasoning_tokens),
            ticket_id: u.ticket_id,
            role: u.role,
            runs: u.runs,
            runs_without_cost: u.runs_without_cost,
            runs_without_usage: u.runs_without_usage,
        }
    }
}

/// Ledger failures. Every variant means the ledger could not answer; callers treat
/// them as "cannot run this tick" (exit 1), never as "nobody holds it".
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The database refused a statement or failed (it answered: SQLite, or a PostgreSQL
    /// server that is reachable). The backend's own error is the source.
    #[error("ledger database error: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The ledger file was written by a newer sortie.
    #[error("ledger {path} has schema version {found}, newer than this sortie supports ({supported}); upgrade sortie, or move the file away (SQLite) or point ledger.url_env at another database (PostgreSQL)")]
    TooNew {
        /// File path.
        path: String,
        /// Version found in the file.
        found: i64,
        /// Newest version this build knows.
        supported: i64,
    },
    /// The ledger file or its directory could not be created or opened.
    #[error("cannot open ledger {path}: {cause}")]
    Open {
        /// File path.
        path: String,
        /// Underlying error (in the message, not a `#[source]`, so it is printed once).
        cause: std::io::Error,
    },
    /// A stored value could not be decoded.
    #[error("corrupt ledger row: {0}")]
    Corrupt(String),
    /// The ledger's database could not be reached (a server-backed ledger).
    #[error("ledger unavailable: {0}")]
    Unavailable(String),
}

impl From<rusqlite::Error> for LedgerError {
    fn from(err: rusqlite::Error) -> Self {
        LedgerError::Database(Box::new(err))
    }
}

/// Open the ledger `config` names (`ledger.kind`): the SQLite file under the state root,
/// or the PostgreSQL database whose URL is in the environment variable `ledger.url_env`.
pub fn open(config: &crate::config::Config) -> Result<Arc<dyn Ledger>, LedgerError> {
    match &config.ledger {
        crate::config::LedgerConfig::Sqlite => {
            Ok(Arc::new(SqliteLedger::open(&config.ledger_path())?))
        }
        crate::config::LedgerConfig::Postgres { url_env } => {
            let url = std::env::var(url_env).map_err(|_| {
                LedgerError::Unavailable(format!(
                    "ledger.url_env names {url_env}, which is not set (export the database \
                     URL, e.g. {url_env}=postgres://user@host:5432/sortie)"
                ))
            })?;
            Ok(Arc::new(PostgresLedger::open(&url)?))
        }
    }
}

/// The environment variable naming this host in claimer ids (default: the host name).
pub const HOST_ID_ENV: &str = "SORTIE_HOST_ID";

/// This host's identity: `SORTIE_HOST_ID` when set and not blank, else the host name,
/// else `localhost`. A `:` is replaced (it separates the parts of a claimer id).
pub fn host_id() -> String {
    let from_env = std::env::var(HOST_ID_ENV)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let id = from_env
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string());
    id.replace(':', "_")
}

/// A fresh claimer id (see [`ClaimerId::fresh`]).
pub fn claimer_id() -> ClaimerId {
    ClaimerId::fresh()
}

/// The host part of a claimer id.
pub fn claimer_host(claimer_id: &str) -> &str {
    claimer::host_of(claimer_id)
}

/// The claim ledger. Implementations are safe to share between threads.
pub trait Ledger: Send + Sync {
    /// Claim `req.key` atomically (see the module docs of the implementation for the steps).
    fn try_claim(&self, req: &ClaimRequest, now: Timestamp) -> Result<ClaimOutcome, LedgerError>;
    /// Extend the lease to `now + ttl` if `claimer_id` still holds it.
    fn renew(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<RenewOutcome, LedgerError>;
    /// Delete the claim if `claimer_id` holds it; returns whether a row was deleted.
    fn release(&self, key: &ClaimKey, claimer_id: &str) -> Result<bool, LedgerError>;
    /// Delete the claim whoever holds it; returns whether a row was deleted.
    fn force_release(&self, key: &ClaimKey) -> Result<bool, LedgerError>;
    /// Claim rows in `scope`, live or expired, ordered by key.
    fn claims(&self, scope: Scope<'_>) -> Result<Vec<Claim>, LedgerError>;
    /// The claim row of `key`, live or expired, if any.
    fn claim(&self, key: &ClaimKey) -> Result<Option<Claim>, LedgerError>;
    /// Ask the holder of `key` to stop; returns whether a claim row exists.
    fn request_cancel(&self, key: &ClaimKey) -> Result<bool, LedgerError>;
    /// Record (or clear) the agent process id of the holder's run.
    fn set_agent_pid(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        pid: Option<u32>,
    ) -> Result<(), LedgerError>;
    /// The highest attempt ever recorded for `key` (0 if none).
    fn last_attempt(&self, key: &ClaimKey) -> Result<u32, LedgerError>;

    /// Record that `host` ticks `tracker` and runs each `(role, claim status)` of
    /// `stages` until `expires_at` (replacing its earlier rows of those stages), and
    /// forget every presence of `tracker` that expired by `now`.
    fn announce(
        &self,
        tracker: &str,
        host: &str,
        stages: &[(String, String)],
        expires_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), LedgerError>;

    /// The presence rows of `tracker` ([`Ledger::announce`]), ordered by host, role and
    /// status.
    fn hosts(&self, tracker: &str) -> Result<Vec<HostPresence>, LedgerError>;

    /// Queue (or replace) the retry for `entry.key`.
    fn schedule_retry(&self, entry: &RetryEntry) -> Result<(), LedgerError>;
    /// Queued retries in `scope`, ordered by due time.
    fn retries(&self, scope: Scope<'_>) -> Result<Vec<RetryEntry>, LedgerError>;
    /// Drop the queued retry of `key`, if any.
    fn clear_retry(&self, key: &ClaimKey) -> Result<bool, LedgerError>;

    /// Record (or replace) a hold.
    fn put_hold(&self, hold: &Hold) -> Result<(), LedgerError>;
    /// Holds in `scope`, ordered by key.
    fn holds(&self, scope: Scope<'_>) -> Result<Vec<Hold>, LedgerError>;
    /// Remove the hold of `key`, if any.
    fn clear_hold(&self, key: &ClaimKey) -> Result<bool, LedgerError>;

    /// Record (or replace) what a run consumed.
    fn record_usage(&self, usage: &RunUsage) -> Result<(), LedgerError>;
    /// Totals per ticket and role for `tracker`, ordered by ticket and role.
    fn usage_totals(&self, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError>;
    /// Totals per role (`ticket_id` empty) of the runs of `tracker` started at or after
    /// `since`, ordered by role.
    fn usage_by_role_since(
        &self,
        tracker: &str,
        since: Timestamp,
    ) -> Result<Vec<UsageTotal>, LedgerError>;
    /// Totals of one ticket across its roles (runs from run history).
    fn ticket_usage(&self, tracker: &str, ticket_id: &str) -> Result<UsageTotal, LedgerError>;
    /// The usage rows of the runs of `tracker` started at or after `since`, by run id.
    fn usage_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunUsage>, LedgerError>;

    /// Insert or replace a run-history row (keyed by `run_id`).
    fn record_run(&self, run: &RunRecord) -> Result<(), LedgerError>;
    /// The most recent runs in `scope`, newest first, at most `limit`.
    fn recent_runs(&self, scope: Scope<'_>, limit: usize) -> Result<Vec<RunRecord>, LedgerError>;
    /// Runs of `tracker` started at or after `since`, oldest first.
    fn runs_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunRecord>, LedgerError>;
    /// One run by id.
    fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LedgerError>;
    /// The runs of one ticket, newest first, at most `limit`.
    fn ticket_runs(
        &self,
        tracker: &str,
        ticket_id: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, LedgerError>;
    /// The latest run of `key` that recorded an agent session id (the one a retry resumes).
    fn last_session(&self, key: &ClaimKey) -> Result<Option<RunRecord>, LedgerError>;

    /// Store an outcome durably (fsync'd) before any tracker write, fenced by the claim:
    /// in one transaction, check that `claimer_id` still holds the claim of `entry.key`
    /// (else [`OutboxPut::LeaseLost`], nothing stored) and insert the entry with its write
    /// lease held by `claimer_id` until `now + write_lease`. A key already stored is kept
    /// as it is ([`OutboxPut::Exists`]).
    fn outbox_put(
        &self,
        entry: &OutboxEntry,
        claimer_id: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<OutboxPut, LedgerError>;
    /// Take the write lease of a pending entry for `holder` until `now + lease`: granted
    /// when nobody holds it, its lease ran out, or `holder` already holds it. Only the
    /// holder writes the entry to the tracker, so concurrent replays post it once.
    fn outbox_take(
        &self,
        idempotency_key: &str,
        holder: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Result<bool, LedgerError>;
    /// Give up the write lease of an entry if `holder` holds it.
    fn outbox_release(&self, idempotency_key: &str, holder: &str) -> Result<(), LedgerError>;
    /// Entries in state `Pending` or `CommentPosted` for `tracker`, oldest first.
    fn outbox_pending(&self, tracker: &str) -> Result<Vec<OutboxEntry>, LedgerError>;
    /// Look up one entry.
    fn outbox_get(&self, idempotency_key: &str) -> Result<Option<OutboxEntry>, LedgerError>;
    /// Update an entry's state, attempt count, next attempt time and last error.
    fn outbox_update(&self, entry: &OutboxEntry) -> Result<(), LedgerError>;

    /// The delivery record of `delivery_id` to hook `sink_id`, if any.
    fn hook_delivery(
        &self,
        delivery_id: &str,
        sink_id: &str,
    ) -> Result<Option<HookDelivery>, LedgerError>;
    /// Whether hook `sink_id` already has the event `delivery_id`.
    fn hook_delivered(&self, delivery_id: &str, sink_id: &str) -> Result<bool, LedgerError> {
        Ok(self
            .hook_delivery(delivery_id, sink_id)?
            .is_some_and(|d| d.state == HookDeliveryState::Delivered))
    }
    /// Insert or update the record keyed `(delivery_id, sink_id)`; `created_at` of an
    /// existing record is kept.
    fn record_hook_delivery(&self, delivery: &HookDelivery) -> Result<(), LedgerError>;
    /// Failed and given-up deliveries, most recently changed first, at most `limit`.
    fn hook_failures(&self, limit: usize) -> Result<Vec<HookDelivery>, LedgerError>;
    /// `Failed` deliveries due at `now`, soonest first, at most `limit`.
    fn hook_retries_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<HookDelivery>, LedgerError>;

    /// When each ticket of `tracker` last had its blockers read, or tried to (to rotate
    /// bounded blocker reads fairly across ticks and processes).
    fn blocker_checks(&self, tracker: &str) -> Result<Vec<(String, Timestamp)>, LedgerError>;
    /// Record that the blockers of `ticket_id` were read, or tried, at `at`.
    fn record_blocker_check(
        &self,
        tracker: &str,
        ticket_id: &str,
        at: Timestamp,
    ) -> Result<(), LedgerError>;

    /// Store a reaction and the outbox entry that writes its block, in one durable
    /// transaction: both or neither. A reaction whose fingerprint, or whose
    /// (ticket, kind, round), is stored already is [`ReactionPut::Exists`].
    fn put_reaction(
        &self,
        reaction: &ReactionRecord,
        entry: &OutboxEntry,
        holder: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<ReactionPut, LedgerError>;
    /// The reactions stored for `tracker` (for one ticket when `ticket_id` is given),
    /// oldest first.
    fn reactions(
        &self,
        tracker: &str,
        ticket_id: Option<&str>,
    ) -> Result<Vec<ReactionRecord>, LedgerError>;

    /// The pull requests of `tracker` whose merge a `merged` reaction recorded at or
    /// after `since`, oldest first (`sortie stats`' cost per merged pull request).
    fn merges_since(
        &self,
        tracker: &str,
        since: Timestamp,
    ) -> Result<Vec<MergedPull>, LedgerError> {
        Ok(self
            .reactions(tracker, None)?
            .into_iter()
            .filter(|r| r.kind == "merged" && r.decided_at >= since)
            .map(|r| MergedPull {
                ticket_id: r.ticket_id,
                pull_request: r.pull_request,
                merged_at: r.decided_at,
            })
            .collect())
    }

    /// Everything a tick reads about `tracker`: claims, retries, holds, pending outbox, hosts.
    fn snapshot(&self, tracker: &str) -> Result<LedgerSnapshot, LedgerError> {
        Ok(LedgerSnapshot {
            claims: self.claims(Scope::Tracker(tracker))?,
            retries: self.retries(Scope::Tracker(tracker))?,
            holds: self.holds(Scope::Tracker(tracker))?,
            outbox_pending: self.outbox_pending(tracker)?,
            hosts: self.hosts(tracker)?,
        })
    }

    /// Whether the ledger answers (`/readyz`). Default: it always does.
    fn ping(&self) -> Result<(), LedgerError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimer_id_names_the_host_and_the_process_and_is_unique() {
        let (a, b) = (claimer_id(), claimer_id());
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split(':').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0], host_id());
        assert_eq!(parts[1], std::process::id().to_string());
        assert_eq!(claimer_host(&a), host_id());
        assert!(!host_id().is_empty() && !host_id().contains(':'));
    }
}

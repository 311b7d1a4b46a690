//! Issue #20: a tick that claims from a stale listing gives the claim back without
//! running. Host B runs and finishes a ticket between host A's listing and A's claim
//! (A's tracker hands A a listing taken before B's run: deterministic, no sleeps), and
//! A must not run the agent again.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use sortie::block::parse_blocks;
use sortie::config::{Config, TicketFilter};
use sortie::ledger::{Ledger, Scope, SqliteLedger};
use sortie::pipeline::{Faults, Pipeline, SystemClock, TickOptions};
use sortie::tracker::memory::MemoryTracker;
use sortie::tracker::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

/// The memory board, except that `list` answers with the listing frozen by
/// [`Stale::freeze`]: what a tick sees when the board changed right after it listed.
struct Stale {
    inner: Arc<MemoryTracker>,
    frozen: Mutex<Option<Listing>>,
    comment_reads: Mutex<usize>,
    /// Another host's tick, run right after A's first comments read has returned (so
    /// between A's history read and A's claim).
    interleave: tokio::sync::Mutex<Option<Arc<Pipeline>>>,
}

impl Stale {
    async fn freeze(&self, statuses: &[String]) {
        let listing = self.inner.list(statuses).await.unwrap();
        *self.frozen.lock().unwrap() = Some(listing);
    }
}

#[async_trait]
impl Tracker for Stale {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn identity(&self) -> Result<String, TrackerError> {
        self.inner.identity().await
    }
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let frozen = self.frozen.lock().unwrap().clone();
        match frozen {
            Some(listing) => Ok(listing),
            None => self.inner.list(statuses).await,
        }
    }
    async fn list_filtered(
        &self,
        statuses: &[String],
        _filter: &TicketFilter,
    ) -> Result<Listing, TrackerError> {
        self.list(statuses).await
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        self.inner.get(id).await
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        *self.comment_reads.lock().unwrap() += 1;
        let comments = self.inner.comments(id).await;
        if let Some(other) = self.interleave.lock().await.take() {
            other.tick(TickOptions::default()).await.unwrap();
        }
        comments
    }
    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        self.inner.post_comment(id, body, key).await
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        self.inner.transition(id, from, to).await
    }
}

/// One stage, no in-progress status (so no status write stands between the claim and
/// the agent), an agent that appends its run to `marker` and exits `exit`.
/// With `retry`, a failure stays in the claim status to be retried; without, it goes
/// to `blocked`.
fn config(dir: &Path, marker: &Path, exit: u32, retry: bool) -> Config {
    let script = format!("echo ran >> {}; exit {exit}", marker.display());
    let max_attempts = if retry { 3 } else { 1 };
    let text = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent:
  command: ["sh", "-c", {script:?}]
  timeout_seconds: 30
retry:
  max_attempts: {max_attempts}
  backoff_base_seconds: 60
  backoff_max_seconds: 60
pipeline_stages:
  - role: architect
    claim_status: ready
    success_status: designed
    failure_status: blocked
"#,
        roles = crate::common::repo().join("roles").display(),
    );
    Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid test config")
}

async fn host(cfg: Config, tracker: Arc<dyn Tracker>, ledger: Arc<SqliteLedger>) -> Pipeline {
    Pipeline::with_clock(
        cfg,
        tracker,
        ledger,
        Arc::new(SystemClock::default()),
        Faults::none(),
    )
    .await
    .expect("pipeline")
}

fn runs(marker: &Path) -> usize {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .count()
}

struct Fleet {
    board: Arc<MemoryTracker>,
    a_view: Arc<Stale>,
    a: Pipeline,
    b: Arc<Pipeline>,
    ledger: Arc<SqliteLedger>,
    marker: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// Hosts A and B on one board and one ledger; A's listing is frozen before B runs.
async fn fleet(exit: u32, retry: bool) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("agent-ran");
    let cfg = config(dir.path(), &marker, exit, retry);
    let board = Arc::new(MemoryTracker::new());
    board.insert(MemoryTracker::ticket("1", "t", "ready"));
    let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
    let a_view = Arc::new(Stale {
        inner: board.clone(),
        frozen: Mutex::new(None),
        comment_reads: Mutex::new(0),
        interleave: tokio::sync::Mutex::new(None),
    });
    a_view.freeze(&cfg.pipeline_statuses()).await;
    let a = host(cfg.clone(), a_view.clone(), ledger.clone()).await;
    let b = Arc::new(host(cfg, board.clone(), ledger.clone()).await);
    Fleet {
        board,
        a_view,
        a,
        b,
        ledger,
        marker,
        _dir: dir,
    }
}

#[tokio::test]
async fn a_claim_from_a_stale_listing_is_given_back_when_the_stage_succeeded_since() {
    let f = fleet(0, false).await;
    // B runs the ticket to the next status and releases its claim...
    let rb = f.b.tick(TickOptions::default()).await.unwrap();
    assert_eq!(rb.runs.len(), 1, "{}", rb.to_text());
    assert_eq!(f.board.snapshot("1").unwrap().status, "designed");
    assert_eq!(runs(&f.marker), 1);
    // ...then A, whose listing still shows the ticket ready, claims the free key.
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert!(ra.runs.is_empty(), "A ran it again: {}", ra.to_text());
    assert_eq!(runs(&f.marker), 1, "the agent ran twice for one stage");
    let skip = ra
        .skips
        .iter()
        .find(|s| s.ticket == "1")
        .expect("a skip line");
    let text = skip.reason.to_string();
    assert!(
        text.contains("ended (success) after this tick listed the board"),
        "{text}"
    );
    // The claim went back: nothing is left held, and only one outcome is on the ticket.
    assert!(f.ledger.claims(Scope::All).unwrap().is_empty());
    let blocks: usize = f
        .board
        .comment_snapshot("1")
        .iter()
        .map(|c| parse_blocks(&c.body).len())
        .sum();
    assert_eq!(blocks, 1);
    assert_eq!(f.board.snapshot("1").unwrap().status, "designed");
}

#[tokio::test]
async fn a_claim_from_a_stale_listing_is_given_back_when_the_stage_failed_since() {
    let f = fleet(1, false).await;
    f.b.tick(TickOptions::default()).await.unwrap();
    assert_eq!(f.board.snapshot("1").unwrap().status, "blocked");
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert!(ra.runs.is_empty(), "A ran it again: {}", ra.to_text());
    assert_eq!(runs(&f.marker), 1);
    let text = ra.skips[0].reason.to_string();
    assert!(text.contains("ended (failure ("), "{text}");
}

#[tokio::test]
async fn a_fresh_listing_runs_and_costs_one_comments_read_per_claim() {
    let f = fleet(0, false).await;
    // No other host: A's frozen listing is the board as it is.
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert_eq!(ra.runs.len(), 1, "{}", ra.to_text());
    assert_eq!(runs(&f.marker), 1);
    // The history read of the plan, the re-read after the claim, the write-back's
    // "already posted?" check.
    assert_eq!(*f.a_view.comment_reads.lock().unwrap(), 3);
}

#[tokio::test]
async fn a_person_moving_the_ticket_back_to_the_stage_runs_it_again() {
    let f = fleet(0, false).await;
    f.b.tick(TickOptions::default()).await.unwrap();
    // A person sends it back for another pass; A lists the board as it is now.
    f.board.set_status("1", "ready");
    f.a_view.freeze(&f.a.config().pipeline_statuses()).await;
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert_eq!(ra.runs.len(), 1, "{}", ra.to_text());
    assert_eq!(runs(&f.marker), 2);
}

#[tokio::test]
async fn a_claim_is_given_back_when_the_stage_failed_between_the_history_read_and_the_claim() {
    // B fails attempt 1 (to be retried in 60 s: the ticket stays `ready`) after A read
    // the ticket's history and before A claims: only the block that A's history lacks
    // tells A that its plan is stale.
    let f = fleet(3, true).await;
    *f.a_view.interleave.lock().await = Some(f.b.clone());
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert_eq!(
        runs(&f.marker),
        1,
        "A retried at once what B had just failed"
    );
    assert!(ra.runs.is_empty(), "{}", ra.to_text());
    let text = ra.skips[0].reason.to_string();
    assert!(
        text.contains("attempt 1 of this stage ended (failure ("),
        "{text}"
    );
    // B's retry stays queued, and the key is free for it.
    assert_eq!(f.ledger.retries(Scope::All).unwrap().len(), 1);
    assert!(f.ledger.claims(Scope::All).unwrap().is_empty());
    assert_eq!(f.board.snapshot("1").unwrap().status, "ready");
}

impl Stale {
    /// Make the frozen listing's `updated_at` of ticket `id` equal `at`: trackers keep
    /// whole seconds, so a block written within the second of the listing's last change
    /// carries the same time.
    fn listed_at(&self, id: &str, at: chrono::DateTime<chrono::Utc>) {
        let mut frozen = self.frozen.lock().unwrap();
        let listing = frozen.as_mut().expect("a frozen listing");
        for t in listing.tickets.iter_mut().filter(|t| t.id == id) {
            t.updated_at = at;
        }
    }
}

fn last_comment_time(board: &MemoryTracker, id: &str) -> chrono::DateTime<chrono::Utc> {
    board
        .comment_snapshot(id)
        .last()
        .expect("a block on the ticket")
        .created_at
}

#[tokio::test]
async fn a_block_written_in_the_listing_s_second_is_settled_by_the_ticket_s_status() {
    let f = fleet(0, false).await;
    f.b.tick(TickOptions::default()).await.unwrap();
    assert_eq!(f.board.snapshot("1").unwrap().status, "designed");
    // A's stale listing and B's block share one second (a fast run on a board that
    // keeps whole seconds: seen in the three-host Postgres test).
    f.a_view.listed_at("1", last_comment_time(&f.board, "1"));
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert!(ra.runs.is_empty(), "A ran it again: {}", ra.to_text());
    assert_eq!(runs(&f.marker), 1, "the agent ran twice for one stage");
    assert!(f.ledger.claims(Scope::All).unwrap().is_empty());
}

#[tokio::test]
async fn a_person_moving_the_ticket_back_within_the_block_s_second_runs_it_again() {
    let f = fleet(0, false).await;
    f.b.tick(TickOptions::default()).await.unwrap();
    f.board.set_status("1", "ready");
    f.a_view.freeze(&f.a.config().pipeline_statuses()).await;
    f.a_view.listed_at("1", last_comment_time(&f.board, "1"));
    let ra = f.a.tick(TickOptions::default()).await.unwrap();
    assert_eq!(ra.runs.len(), 1, "{}", ra.to_text());
    assert_eq!(runs(&f.marker), 2);
}

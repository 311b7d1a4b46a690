//! The embedded SQLite ledger: one file in WAL mode shared by every thread and process
//! of a host.
//!
//! # Claiming
//!
//! [`Ledger::try_claim`] runs in one `BEGIN IMMEDIATE` transaction, so the steps below see a
//! single consistent state even with many processes racing for the same key:
//!
//! 1. delete this key's row if its lease ran out (`lease_expires_at <= now`);
//! 2. a live row of another claimer: `Held { holder, lease_expires_at }`; a live row of the
//!    *same* claimer: its lease is renewed and it is `Acquired` with the unchanged attempt;
//! 3. count live claims of this tracker: for the role (`Ceiling(Role)`), all roles
//!    (`Ceiling(Global)`) and, if capped, the stage (`Ceiling(Status)`); expired rows don't count;
//!    then, when the request carries a host share, the same counts of the claimer's host's
//!    claims (`HostShare(..)`);
//! 4. `INSERT OR FAIL` the claim with attempt `max(last_attempt + 1, attempt_floor, 1)` and
//!    write that attempt back to `attempts`, which release, expiry and takeover never reset.
//!
//! [`Ledger::renew`] extends the lease while the caller's row is still there, even if the lease
//! ran out in the meantime: nobody took it over (a takeover replaces the row), so there is
//! still exactly one holder.
//!
//! # Durability
//!
//! Claims, attempts, retries, holds and run history are disposable execution state and commit
//! with `synchronous = NORMAL` (no fsync per commit in WAL mode). Outbox writes switch the
//! connection to `synchronous = FULL` for their transaction, so an outcome is on disk when
//! [`Ledger::outbox_put`] returns. `docs/ledger.md` explains what a power loss can cost.

mod claims;
mod hook_deliveries;
mod hosts;
mod migrations;
mod reactions;
mod records;
mod usage;

use std::cell::Cell;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::{
    Claim, ClaimKey, ClaimOutcome, ClaimRequest, Hold, HookDelivery, Ledger, LedgerError,
    OutboxEntry, OutboxPut, ReactionPut, ReactionRecord, RenewOutcome, RetryEntry, RunRecord,
    RunUsage, Scope, Timestamp, UsageTotal,
};

/// The tracker filter of a scoped read, as the SQL binds it (`NULL` = every tracker).
fn tracker_of<'a>(scope: Scope<'a>) -> Option<&'a str> {
    match scope {
        Scope::All => None,
        Scope::Tracker(t) => Some(t),
    }
}

/// How long one statement waits for another connection's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per connection; more than the ledger has distinct statements.
const STATEMENT_CACHE: usize = 64;

/// The embedded SQLite ledger.
///
/// One connection behind a mutex: SQLite allows one writer per file at a time anyway, and
/// every operation is a single short transaction, so a pool would only add lock traffic.
#[derive(Debug)]
pub struct SqliteLedger {
    conn: Mutex<Connection>,
    /// The file the connection opened, to tell when it was removed or replaced under it
    /// (`None` in memory).
    file: Option<LedgerFile>,
}

/// A ledger file's path and the identity (device, inode) it had when opened.
#[derive(Debug)]
struct LedgerFile {
    path: std::path::PathBuf,
    identity: (u64, u64),
}

impl LedgerFile {
    fn open(path: &Path) -> Result<LedgerFile, LedgerError> {
        let meta = std::fs::metadata(path).map_err(|cause| LedgerError::Open {
            path: path.display().to_string(),
            cause,
        })?;
        Ok(LedgerFile {
            path: path.to_path_buf(),
            identity: identity(&meta),
        })
    }

    /// Whether the path still names the file the connection has open. A removed or
    /// replaced file is not an error SQLite reports: the open connection keeps reading
    /// and writing the unlinked file, which no other process sees.
    fn check(&self) -> Result<(), LedgerError> {
        let shown = self.path.display();
        match std::fs::metadata(&self.path) {
            Ok(meta) if identity(&meta) == self.identity => Ok(()),
            Ok(_) => Err(LedgerError::Unavailable(format!(
                "the ledger file {shown} was replaced by another file after sortie opened it; \
                 restart sortie to use the new one"
            ))),
            Err(err) => Err(LedgerError::Unavailable(format!(
                "the ledger file {shown} is gone ({err}): it was removed after sortie opened \
                 it, and what sortie writes now no other process sees; restart sortie"
            ))),
        }
    }
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl SqliteLedger {
    /// The schema version this build writes; files with a higher `user_version` are refused.
    pub const SCHEMA_VERSION: i64 = migrations::SCHEMA_VERSION;

    /// Open (creating the file and its parent directories if needed) and migrate the ledger
    /// at `path`. Refuses a file written by a newer schema with [`LedgerError::TooNew`].
    pub fn open(path: &Path) -> Result<SqliteLedger, LedgerError> {
        let shown = path.display().to_string();
        let open_error = |cause: std::io::Error| LedgerError::Open {
            path: shown.clone(),
            cause,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(open_error)?;
        }
        // Opening races with other processes converting a new file to WAL or migrating it;
        // SQLite answers some of those lock conflicts with SQLITE_BUSY without consulting the
        // busy handler (to avoid deadlocks), so the whole open is retried for a while.
        let started = Instant::now();
        loop {
            match Self::open_once(path, &shown) {
                Err(err) if is_busy(&err) && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(LedgerError::Database(e)) => return Err(open_error(std::io::Error::other(e))),
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, shown: &str) -> Result<SqliteLedger, LedgerError> {
        let mut conn = Connection::open(path)?;
        configure(&conn, true)?;
        migrations::migrate(&mut conn, shown)?;
        Ok(SqliteLedger {
            conn: Mutex::new(conn),
            file: Some(LedgerFile::open(path)?),
        })
    }

    /// The SQL of schema migration `version` (1-based): for tests that build the file an
    /// older sortie left, to prove the upgrade.
    #[doc(hidden)]
    pub fn migration_sql(version: usize) -> Option<&'static str> {
        migrations::sql(version)
    }

    /// A private ledger in memory, for tests.
    pub fn open_in_memory() -> Result<SqliteLedger, LedgerError> {
        let mut conn = Connection::open_in_memory()?;
        configure(&conn, false)?;
        migrations::migrate(&mut conn, ":memory:")?;
        Ok(SqliteLedger {
            conn: Mutex::new(conn),
            file: None,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a transaction open (the guard in
        // `in_immediate_transaction` rolls back), so the connection is still usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Run `body` in one `BEGIN IMMEDIATE` transaction and commit it if it succeeds.
    fn write<T>(
        &self,
        body: impl FnOnce(&Connection) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        in_immediate_transaction(&self.lock(), body)
    }

    /// Like [`Self::write`], but the commit is fsync'd before this returns.
    fn durable_write<T>(
        &self,
        body: impl FnOnce(&Connection) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let conn = self.lock();
        conn.execute_batch("PRAGMA synchronous = FULL")?;
        let result = in_immediate_transaction(&conn, body);
        let restored = conn.execute_batch("PRAGMA synchronous = NORMAL");
        let value = result?;
        restored?;
        Ok(value)
    }

    /// Run queries, or one write statement, which SQLite commits on its own (autocommit):
    /// a single statement is atomic, and its implicit transaction takes the write lock
    /// through the same busy handler as `BEGIN IMMEDIATE`.
    fn with_conn<T>(
        &self,
        body: impl FnOnce(&Connection) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        body(&self.lock())
    }
}

/// Run `body` in one `BEGIN IMMEDIATE` transaction; commit on success, roll back on error
/// or panic. `BEGIN` and `COMMIT` are cached statements: parsing them on every claim showed
/// up in profiles.
fn in_immediate_transaction<T>(
    conn: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let open = OpenTransaction(conn);
    let value = body(conn)?;
    conn.prepare_cached("COMMIT")?.execute([])?;
    drop(open);
    Ok(value)
}

/// Rolls back the connection's transaction when dropped before `COMMIT` succeeded.
struct OpenTransaction<'a>(&'a Connection);

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if !self.0.is_autocommit() {
            // Nothing better to do with a failed rollback: the next BEGIN reports it.
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// Connection settings: a fast busy handler, WAL, and no fsync on ordinary commits.
/// Whether `err` is SQLite reporting a lock held by another connection.
fn is_busy(err: &LedgerError) -> bool {
    let LedgerError::Database(e) = err else {
        return false;
    };
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(e, _))
            if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn configure(conn: &Connection, file_backed: bool) -> rusqlite::Result<()> {
    conn.busy_handler(Some(wait_for_lock))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    if file_backed {
        // Only takes effect on a new, empty file. Ledger rows are small, and every commit
        // copies and checksums whole pages into the WAL (which a checkpoint then writes to
        // disk): 1 KiB pages cut that work, and the claim cycle's cost, by a third or more.
        conn.execute_batch("PRAGMA page_size = 1024")?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(rusqlite::Error::InvalidParameterName(format!(
                "journal_mode stayed {mode:?}; WAL is required"
            )));
        }
    }
    // mmap stays off: with WAL, every page fetch through mmap first searches the WAL index,
    // which made claims slower, not faster. The checkpoint interval stays at SQLite's 1000
    // pages: longer WALs make every commit's WAL-index insert slower (the hot claim page
    // forms long hash chains), shorter ones pay a checkpoint's two fsyncs more often.
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA temp_store = MEMORY;
         PRAGMA mmap_size = 0;",
    )?;
    Ok(())
}

thread_local! {
    /// When the current wait for a lock began (the busy handler runs on the waiting thread).
    static BUSY_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// SQLite busy handler: retry almost at once, then back off in microseconds, up to
/// [`BUSY_TIMEOUT`].
///
/// SQLite's own `busy_timeout` sleeps in millisecond steps; a claim transaction holds the lock
/// for a few microseconds, so those sleeps would dominate contended throughput.
fn wait_for_lock(retries: i32) -> bool {
    let now = Instant::now();
    let since = BUSY_SINCE.with(|cell| {
        let since = match cell.get() {
            Some(since) if retries > 0 => since,
            _ => now,
        };
        cell.set(Some(since));
        since
    });
    if now.duration_since(since) >= BUSY_TIMEOUT {
        return false;
    }
    if retries < 4 {
        std::thread::yield_now();
    } else {
        let micros = (u64::try_from(retries).unwrap_or(u64::MAX) * 20).min(1_000);
        std::thread::sleep(Duration::from_micros(micros));
    }
    true
}

impl Ledger for SqliteLedger {
    fn try_claim(&self, req: &ClaimRequest, now: Timestamp) -> Result<ClaimOutcome, LedgerError> {
        self.write(|tx| claims::try_claim(tx, req, now))
    }

    fn renew(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<RenewOutcome, LedgerError> {
        self.write(|tx| claims::renew(tx, key, claimer_id, ttl, now))
    }

    fn release(&self, key: &ClaimKey, claimer_id: &str) -> Result<bool, LedgerError> {
        self.with_conn(|conn| claims::release(conn, key, Some(claimer_id)))
    }

    fn force_release(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        self.with_conn(|conn| claims::release(conn, key, None))
    }

    fn announce(
        &self,
        tracker: &str,
        host: &str,
        stages: &[(String, String)],
        expires_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        self.write(|tx| hosts::announce(tx, tracker, host, stages, expires_at, now))
    }

    fn hosts(&self, tracker: &str) -> Result<Vec<super::HostPresence>, LedgerError> {
        self.with_conn(|conn| hosts::list(conn, tracker))
    }

    fn claims(&self, scope: Scope<'_>) -> Result<Vec<Claim>, LedgerError> {
        self.with_conn(|conn| claims::all(conn, tracker_of(scope)))
    }

    fn claim(&self, key: &ClaimKey) -> Result<Option<Claim>, LedgerError> {
        self.with_conn(|conn| claims::one(conn, key))
    }

    fn request_cancel(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        self.with_conn(|conn| claims::request_cancel(conn, key))
    }

    fn set_agent_pid(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        pid: Option<u32>,
    ) -> Result<(), LedgerError> {
        self.with_conn(|conn| claims::set_agent_pid(conn, key, claimer_id, pid))
    }

    fn last_attempt(&self, key: &ClaimKey) -> Result<u32, LedgerError> {
        self.with_conn(|conn| claims::last_attempt(conn, key))
    }

    fn schedule_retry(&self, entry: &RetryEntry) -> Result<(), LedgerError> {
        self.with_conn(|conn| records::schedule_retry(conn, entry))
    }

    fn retries(&self, scope: Scope<'_>) -> Result<Vec<RetryEntry>, LedgerError> {
        self.with_conn(|conn| records::retries(conn, tracker_of(scope)))
    }

    fn clear_retry(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        self.with_conn(|conn| records::clear_retry(conn, key))
    }

    fn put_hold(&self, hold: &Hold) -> Result<(), LedgerError> {
        self.with_conn(|conn| records::put_hold(conn, hold))
    }

    fn holds(&self, scope: Scope<'_>) -> Result<Vec<Hold>, LedgerError> {
        self.with_conn(|conn| records::holds(conn, tracker_of(scope)))
    }

    fn clear_hold(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        self.with_conn(|conn| records::clear_hold(conn, key))
    }

    fn record_run(&self, run: &RunRecord) -> Result<(), LedgerError> {
        self.with_conn(|conn| records::record_run(conn, run))
    }

    fn recent_runs(&self, scope: Scope<'_>, limit: usize) -> Result<Vec<RunRecord>, LedgerError> {
        self.with_conn(|conn| records::recent_runs(conn, tracker_of(scope), limit))
    }

    fn runs_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunRecord>, LedgerError> {
        self.with_conn(|conn| records::runs_since(conn, tracker, since))
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LedgerError> {
        self.with_conn(|conn| records::run(conn, run_id))
    }

    fn ticket_runs(
        &self,
        tracker: &str,
        ticket_id: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, LedgerError> {
        self.with_conn(|conn| records::ticket_runs(conn, tracker, ticket_id, limit))
    }

    fn last_session(&self, key: &ClaimKey) -> Result<Option<RunRecord>, LedgerError> {
        self.with_conn(|conn| records::last_session(conn, key))
    }

    fn outbox_put(
        &self,
        entry: &OutboxEntry,
        claimer_id: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<OutboxPut, LedgerError> {
        // The fence and the insert share one transaction: no takeover can fall between them.
        self.durable_write(|tx| {
            if !claims::is_held_by(tx, &entry.key, claimer_id)? {
                return Ok(OutboxPut::LeaseLost);
            }
            let lease_until = super::codec::expiry_millis(now, write_lease);
            Ok(
                if records::outbox_put(tx, entry, claimer_id, lease_until)? {
                    OutboxPut::Stored
                } else {
                    OutboxPut::Exists
                },
            )
        })
    }

    fn outbox_take(
        &self,
        idempotency_key: &str,
        holder: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        self.with_conn(|conn| records::outbox_take(conn, idempotency_key, holder, lease, now))
    }

    fn outbox_release(&self, idempotency_key: &str, holder: &str) -> Result<(), LedgerError> {
        self.with_conn(|conn| records::outbox_release(conn, idempotency_key, holder))
    }

    fn outbox_pending(&self, tracker: &str) -> Result<Vec<OutboxEntry>, LedgerError> {
        self.with_conn(|conn| records::outbox_pending(conn, tracker))
    }

    fn outbox_get(&self, idempotency_key: &str) -> Result<Option<OutboxEntry>, LedgerError> {
        self.with_conn(|conn| records::outbox_get(conn, idempotency_key))
    }

    fn outbox_update(&self, entry: &OutboxEntry) -> Result<(), LedgerError> {
        self.durable_write(|tx| records::outbox_update(tx, entry))
    }

    fn hook_delivery(
        &self,
        delivery_id: &str,
        sink_id: &str,
    ) -> Result<Option<HookDelivery>, LedgerError> {
        self.with_conn(|conn| hook_deliveries::get(conn, delivery_id, sink_id))
    }

    fn record_hook_delivery(&self, delivery: &HookDelivery) -> Result<(), LedgerError> {
        self.with_conn(|conn| hook_deliveries::record(conn, delivery))
    }

    fn record_usage(&self, u: &RunUsage) -> Result<(), LedgerError> {
        self.with_conn(|conn| usage::record(conn, u))
    }

    fn usage_totals(&self, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError> {
        self.with_conn(|conn| usage::totals(conn, tracker))
    }

    fn usage_by_role_since(
        &self,
        tracker: &str,
        since: Timestamp,
    ) -> Result<Vec<UsageTotal>, LedgerError> {
        self.with_conn(|conn| usage::by_role_since(conn, tracker, since))
    }

    fn ticket_usage(&self, tracker: &str, ticket_id: &str) -> Result<UsageTotal, LedgerError> {
        self.with_conn(|conn| usage::ticket(conn, tracker, ticket_id))
    }

    fn usage_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunUsage>, LedgerError> {
        self.with_conn(|conn| usage::since(conn, tracker, since))
    }

    fn hook_failures(&self, limit: usize) -> Result<Vec<HookDelivery>, LedgerError> {
        self.with_conn(|conn| hook_deliveries::failures(conn, limit))
    }

    fn hook_retries_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<HookDelivery>, LedgerError> {
        self.with_conn(|conn| hook_deliveries::due(conn, now, limit))
    }

    fn blocker_checks(&self, tracker: &str) -> Result<Vec<(String, Timestamp)>, LedgerError> {
        self.with_conn(|conn| records::blocker_checks(conn, tracker))
    }

    fn record_blocker_check(
        &self,
        tracker: &str,
        ticket_id: &str,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        self.with_conn(|conn| records::record_blocker_check(conn, tracker, ticket_id, at))
    }

    fn put_reaction(
        &self,
        reaction: &ReactionRecord,
        entry: &OutboxEntry,
        holder: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<ReactionPut, LedgerError> {
        self.durable_write(|tx| {
            let lease_until = super::codec::expiry_millis(now, write_lease);
            reactions::put(tx, reaction, entry, holder, lease_until)
        })
    }

    fn reactions(
        &self,
        tracker: &str,
        ticket_id: Option<&str>,
    ) -> Result<Vec<ReactionRecord>, LedgerError> {
        self.with_conn(|conn| reactions::list(conn, tracker, ticket_id))
    }

    fn snapshot(&self, tracker: &str) -> Result<super::LedgerSnapshot, LedgerError> {
        // One read transaction: the five reads see the same state.
        let conn = self.lock();
        conn.prepare_cached("BEGIN")?.execute([])?;
        let open = OpenTransaction(&conn);
        let snapshot = super::LedgerSnapshot {
            claims: claims::all(&conn, Some(tracker))?,
            retries: records::retries(&conn, Some(tracker))?,
            holds: records::holds(&conn, Some(tracker))?,
            outbox_pending: records::outbox_pending(&conn, tracker)?,
            hosts: hosts::list(&conn, tracker)?,
        };
        conn.prepare_cached("COMMIT")?.execute([])?;
        drop(open);
        Ok(snapshot)
    }

    /// The file is still the one opened (not removed or replaced), and a read of it
    /// answers (waiting like any statement for a lock, up to the busy timeout).
    fn ping(&self) -> Result<(), LedgerError> {
        if let Some(file) = &self.file {
            file.check()?;
        }
        self.with_conn(|conn| {
            conn.prepare_cached("SELECT count(*) FROM sqlite_master")?
                .query_row([], |row| row.get::<_, i64>(0))?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SqliteLedger>();
    }

    #[test]
    fn busy_handler_gives_up_after_the_timeout() {
        assert!(wait_for_lock(0));
        BUSY_SINCE.with(|cell| cell.set(Some(Instant::now() - BUSY_TIMEOUT)));
        assert!(!wait_for_lock(5));
        // A new wait (retries == 0) starts a fresh clock.
        assert!(wait_for_lock(0));
    }
}

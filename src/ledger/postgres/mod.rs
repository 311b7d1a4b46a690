//! The PostgreSQL ledger: one database shared by every host of a pipeline.
//!
//! Same trait, same rows and same behaviour as the SQLite ledger (`src/ledger/sqlite*`,
//! the reference); what differs is how each guarantee is made to hold across hosts:
//!
//! - **Claims** are one statement each, with no lock in the common cases
//!   ([`claims::try_claim`]): one winner per key, the loser learns the holder, and the
//!   per-role, per-status and global caps hold for the whole fleet because every claim
//!   takes a slot below each cap and the slot indexes are unique. Only while a row sits at
//!   or above a cap (after a cap was lowered, or an expired row was parked) does a claim
//!   take the tracker's advisory lock and count. `docs/ledger.md` has the alternatives
//!   measured.
//! - **Fencing**: [`Ledger::outbox_put`] checks the claim with `SELECT ... FOR SHARE` and
//!   inserts the entry in the same transaction, so a takeover (which deletes the row)
//!   either happened before (the put answers `LeaseLost`) or waits for the put's commit.
//! - **Durability**: as on SQLite, the outbox is durable and the rest is disposable:
//!   outbox writes commit with `synchronous_commit = on` (the commit waits for the WAL
//!   flush), everything else with `off` (visible to every host at once, but a crash of
//!   the database server may forget the last fraction of a second of claims: a host whose
//!   claim was forgotten finds it lost at its next renewal or outbox put and never writes
//!   back; `docs/ledger.md`). A URL that sets `synchronous_commit` itself is obeyed.
//! - **Plans**: sessions run with `enable_seqscan = off` and `jit = off`
//!   (`SESSION_SETTINGS`): the churning claims table's statistics say it is empty.
//! - **Migrations** run at start in one transaction under an advisory lock; a schema
//!   newer than this build is refused with [`LedgerError::TooNew`].
//! - **Unreachable database**: every call answers [`LedgerError::Unavailable`] and the
//!   next call reconnects.
//!
//! The `postgres` client cannot be used from inside a tokio runtime, and this trait is
//! called from tokio tasks: [`pool`] runs every request on a dedicated thread.

mod claims;
mod hosts;
mod migrations;
mod pool;
mod reactions;
mod records;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use pool::{Conn, Pool};

use super::{
    Claim, ClaimKey, ClaimOutcome, ClaimRequest, Hold, HookDelivery, Ledger, LedgerError,
    LedgerSnapshot, OutboxEntry, OutboxPut, ReactionPut, ReactionRecord, RenewOutcome, RetryEntry,
    RunRecord, RunUsage, Scope, Timestamp, UsageTotal,
};
use crate::ledger::codec::expiry_millis;

/// Connections per ledger: a tick's reads are sequential and runs in flight renew and
/// store outcomes now and then, so a handful is plenty, and each costs a server process.
pub const DEFAULT_POOL_SIZE: usize = 4;

/// How long connecting may take when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Session settings of a ledger connection, each set unless the URL sets it itself
/// (`options=-c name=value`):
///
/// - `synchronous_commit = off`: ordinary commits do not wait for the WAL flush (the outbox's
///   do, [`DURABLE_BEGIN`]);
/// - `enable_seqscan = off`: plans use an index wherever one fits. The claims table holds a
///   few live rows and churns (every claim inserts a row, every release deletes one), so its
///   statistics say it is empty, and a plan made from them reads it whole, dead rows included,
///   for every key lookup, release and cap probe; under thousands of claims a second that
///   scan grows until the next vacuum and becomes most of a claim's cost. The index plans
///   cost the same on an empty table and stay logarithmic on a bloated one. Every ledger
///   query has an index that fits; the usage reports over a long run history get slower
///   (measured: `docs/ledger.md`);
/// - `jit = off`: a plan whose only path is a table scan (the one-row `sortie_schema`, a
///   snapshot read of a whole table) is costed at PostgreSQL's "disabled" penalty, which is
///   far above `jit_above_cost`, and JIT compiling it takes a fresh backend about 100 ms
///   (measured on a tick's first read: `docs/benchmarks.md`). None of the ledger's queries
///   is long enough for JIT to pay.
const SESSION_SETTINGS: [(&str, &str); 3] = [
    ("synchronous_commit", "off"),
    ("enable_seqscan", "off"),
    ("jit", "off"),
];

/// The `SET` statements of [`SESSION_SETTINGS`] that `url` does not set itself (as
/// `name=value` in its options, `=` written or `%3D`-encoded).
fn session_setup(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let sets: Vec<String> = SESSION_SETTINGS
        .iter()
        .filter(|(name, _)| {
            !lower.contains(&format!("{name}=")) && !lower.contains(&format!("{name}%3d"))
        })
        .map(|(name, value)| format!("SET {name} = {value}"))
        .collect();
    (!sets.is_empty()).then(|| sets.join("; "))
}

/// Opens a transaction whose commit waits until the WAL is flushed (to the standbys too
/// when the server has synchronous replication), whatever the session's setting.
const DURABLE_BEGIN: &str = "BEGIN; SET LOCAL synchronous_commit = on";

/// The PostgreSQL ledger.
pub struct PostgresLedger {
    pool: Pool,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger")
            .field("target", &self.pool.target())
            .finish()
    }
}

impl PostgresLedger {
    /// The schema version this build writes; a database with a higher version is refused.
    pub const SCHEMA_VERSION: i64 = migrations::SCHEMA_VERSION;

    /// Connect to the database of a libpq-style `url` (`postgres://user:pw@host:port/db`,
    /// with `?options=-c search_path=...` to use another schema) and migrate it.
    ///
    /// A malformed URL is [`LedgerError::Open`]; a database that cannot be reached is
    /// [`LedgerError::Unavailable`]; a newer schema is [`LedgerError::TooNew`].
    pub fn open(url: &str) -> Result<PostgresLedger, LedgerError> {
        Self::open_with(url, DEFAULT_POOL_SIZE)
    }

    /// [`Self::open`] with `pool_size` connections.
    pub fn open_with(url: &str, pool_size: usize) -> Result<PostgresLedger, LedgerError> {
        let target = describe(url);
        refuse_tls(url, &target)?;
        // libpq's `allow` (plain first, TLS if the server insists) is what the client
        // does without TLS; the client does not parse the word.
        let url = url.replace("sslmode=allow", "sslmode=disable");
        let mut config = postgres::Config::from_str(&url).map_err(|err| LedgerError::Open {
            path: target.clone(),
            cause: std::io::Error::new(std::io::ErrorKind::InvalidInput, err.to_string()),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("sortie");
        }
        // Claims, leases, retries and history are disposable execution state: they commit
        // without waiting for the WAL flush (the SQLite ledger's `synchronous = NORMAL`),
        // and the outbox, which must survive, commits with it (DURABLE_BEGIN). A URL that
        // sets `synchronous_commit` itself (`options=-c synchronous_commit=on`) keeps it,
        // and so for each of SESSION_SETTINGS.
        let setup = session_setup(&url);
        let pool = Pool::start(config, target.clone(), setup, pool_size);
        pool.call(move |conn| migrations::migrate(conn, &target))?;
        Ok(PostgresLedger { pool })
    }

    /// The SQL of schema migration `version` (1-based): for tests that build the schema
    /// an older sortie left, to prove the upgrade.
    #[doc(hidden)]
    pub fn migration_sql(version: usize) -> Option<&'static str> {
        migrations::sql(version)
    }

    /// The claim statements as sortie sends them, by name (`fast`: a free key of a status
    /// without a cap; `claim`: the one-statement claim that reads the tracker's rows) and
    /// the release, for the bench to time the same SQL from pgbench. Parameters are those
    /// of `claims::try_claim`.
    #[doc(hidden)]
    pub fn claim_statements() -> [(&'static str, &'static str); 3] {
        claims::STATEMENTS
    }

    /// The settings every ledger session runs with unless its URL sets them, as `(name,
    /// value)`: for the bench to give pgbench the same sessions.
    #[doc(hidden)]
    pub fn session_settings() -> &'static [(&'static str, &'static str)] {
        &SESSION_SETTINGS
    }

    /// Open as a shared trait object.
    pub fn open_shared(url: &str) -> Result<Arc<dyn Ledger>, LedgerError> {
        Ok(Arc::new(Self::open(url)?))
    }

    fn call<T: Send + 'static>(
        &self,
        body: impl Fn(&mut Conn) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        self.pool.call(body)
    }
}

/// A URL as shown in messages: scheme, hosts and database, never the user or password.
fn describe(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "postgres ledger (key=value connection string)".to_string();
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split_once('?').map_or(rest, |(before, _)| before);
    format!("{scheme}://{rest}")
}

/// The `sslmode` a URL or key=value connection string asks for, if it names one.
fn sslmode(url: &str) -> Option<String> {
    let pairs: Vec<&str> = match url.split_once("://") {
        Some((_, rest)) => rest
            .split_once('?')
            .map(|(_, query)| query.split('&').collect())
            .unwrap_or_default(),
        None => url.split_whitespace().collect(),
    };
    pairs.iter().rev().find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == "sslmode").then(|| value.trim().trim_matches('\'').to_ascii_lowercase())
    })
}

/// This build has no TLS: a URL that requires it is refused before anything is sent,
/// naming the setting, rather than failing later with the client's terse "TLS not
/// supported" or being silently downgraded. `disable`, `allow` and `prefer` (libpq's
/// default) connect without TLS, which those modes permit.
fn refuse_tls(url: &str, target: &str) -> Result<(), LedgerError> {
    let Some(mode) = sslmode(url) else {
        return Ok(());
    };
    let message = match mode.as_str() {
        "disable" | "allow" | "prefer" => return Ok(()),
        "require" | "verify-ca" | "verify-full" => format!(
            "the URL asks for TLS (sslmode={mode}), which this sortie build does not support; \
             connect through a TLS tunnel on the host (stunnel, pgbouncer with \
             server_tls_sslmode) with sslmode=disable to it, or use sslmode=disable on a \
             network you trust (docs/ledger.md)"
        ),
        other => format!(
            "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
        ),
    };
    Err(LedgerError::Open {
        path: target.to_string(),
        cause: std::io::Error::new(std::io::ErrorKind::InvalidInput, message),
    })
}

fn owned(scope: Scope<'_>) -> Option<String> {
    match scope {
        Scope::All => None,
        Scope::Tracker(t) => Some(t.to_string()),
    }
}

impl Ledger for PostgresLedger {
    fn try_claim(&self, req: &ClaimRequest, now: Timestamp) -> Result<ClaimOutcome, LedgerError> {
        let req = req.clone();
        self.call(move |c| claims::try_claim(c, &req, now))
    }

    fn renew(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<RenewOutcome, LedgerError> {
        let (key, claimer_id) = (key.clone(), claimer_id.to_string());
        self.call(move |c| claims::renew(c, &key, &claimer_id, ttl, now))
    }

    fn release(&self, key: &ClaimKey, claimer_id: &str) -> Result<bool, LedgerError> {
        let (key, claimer_id) = (key.clone(), claimer_id.to_string());
        self.call(move |c| claims::release(c, &key, Some(&claimer_id)))
    }

    fn force_release(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        let key = key.clone();
        self.call(move |c| claims::release(c, &key, None))
    }

    fn announce(
        &self,
        tracker: &str,
        host: &str,
        stages: &[(String, String)],
        expires_at: Timestamp,
        now: Timestamp,
    ) -> Result<(), LedgerError> {
        let (tracker, host, stages) = (tracker.to_string(), host.to_string(), stages.to_vec());
        self.call(move |c| hosts::announce(c, &tracker, &host, &stages, expires_at, now))
    }

    fn hosts(&self, tracker: &str) -> Result<Vec<super::HostPresence>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| hosts::list(c, &tracker))
    }

    fn claims(&self, scope: Scope<'_>) -> Result<Vec<Claim>, LedgerError> {
        let tracker = owned(scope);
        self.call(move |c| claims::all(c, tracker.as_deref()))
    }

    fn claim(&self, key: &ClaimKey) -> Result<Option<Claim>, LedgerError> {
        let key = key.clone();
        self.call(move |c| claims::one(c, &key))
    }

    fn request_cancel(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        let key = key.clone();
        self.call(move |c| claims::request_cancel(c, &key))
    }

    fn set_agent_pid(
        &self,
        key: &ClaimKey,
        claimer_id: &str,
        pid: Option<u32>,
    ) -> Result<(), LedgerError> {
        let (key, claimer_id) = (key.clone(), claimer_id.to_string());
        self.call(move |c| claims::set_agent_pid(c, &key, &claimer_id, pid))
    }

    fn last_attempt(&self, key: &ClaimKey) -> Result<u32, LedgerError> {
        let key = key.clone();
        self.call(move |c| claims::last_attempt(c, &key))
    }

    fn schedule_retry(&self, entry: &RetryEntry) -> Result<(), LedgerError> {
        let entry = entry.clone();
        self.call(move |c| records::schedule_retry(c, &entry))
    }

    fn retries(&self, scope: Scope<'_>) -> Result<Vec<RetryEntry>, LedgerError> {
        let tracker = owned(scope);
        self.call(move |c| records::retries(c, tracker.as_deref()))
    }

    fn clear_retry(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        let key = key.clone();
        self.call(move |c| records::clear_retry(c, &key))
    }

    fn put_hold(&self, hold: &Hold) -> Result<(), LedgerError> {
        let hold = hold.clone();
        self.call(move |c| records::put_hold(c, &hold))
    }

    fn holds(&self, scope: Scope<'_>) -> Result<Vec<Hold>, LedgerError> {
        let tracker = owned(scope);
        self.call(move |c| records::holds(c, tracker.as_deref()))
    }

    fn clear_hold(&self, key: &ClaimKey) -> Result<bool, LedgerError> {
        let key = key.clone();
        self.call(move |c| records::clear_hold(c, &key))
    }

    fn record_usage(&self, usage: &RunUsage) -> Result<(), LedgerError> {
        let usage = usage.clone();
        self.call(move |c| records::record_usage(c, &usage))
    }

    fn usage_totals(&self, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::usage_totals(c, &tracker))
    }

    fn usage_by_role_since(
        &self,
        tracker: &str,
        since: Timestamp,
    ) -> Result<Vec<UsageTotal>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::usage_by_role_since(c, &tracker, since))
    }

    fn ticket_usage(&self, tracker: &str, ticket_id: &str) -> Result<UsageTotal, LedgerError> {
        let (tracker, ticket_id) = (tracker.to_string(), ticket_id.to_string());
        self.call(move |c| records::ticket_usage(c, &tracker, &ticket_id))
    }

    fn usage_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunUsage>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::usage_since(c, &tracker, since))
    }

    fn record_run(&self, run: &RunRecord) -> Result<(), LedgerError> {
        let run = run.clone();
        self.call(move |c| records::record_run(c, &run))
    }

    fn recent_runs(&self, scope: Scope<'_>, limit: usize) -> Result<Vec<RunRecord>, LedgerError> {
        let tracker = owned(scope);
        self.call(move |c| records::recent_runs(c, tracker.as_deref(), limit))
    }

    fn runs_since(&self, tracker: &str, since: Timestamp) -> Result<Vec<RunRecord>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::runs_since(c, &tracker, since))
    }

    fn run(&self, run_id: &str) -> Result<Option<RunRecord>, LedgerError> {
        let run_id = run_id.to_string();
        self.call(move |c| records::run(c, &run_id))
    }

    fn ticket_runs(
        &self,
        tracker: &str,
        ticket_id: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, LedgerError> {
        let (tracker, ticket_id) = (tracker.to_string(), ticket_id.to_string());
        self.call(move |c| records::ticket_runs(c, &tracker, &ticket_id, limit))
    }

    fn last_session(&self, key: &ClaimKey) -> Result<Option<RunRecord>, LedgerError> {
        let key = key.clone();
        self.call(move |c| records::last_session(c, &key))
    }

    fn outbox_put(
        &self,
        entry: &OutboxEntry,
        claimer_id: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<OutboxPut, LedgerError> {
        let (entry, claimer_id) = (entry.clone(), claimer_id.to_string());
        self.call(move |c| {
            // The fence and the insert share one transaction; the row lock keeps a
            // takeover from falling between them. The commit is flushed before the
            // answer: the outcome survives a crash of the database server.
            c.transaction(DURABLE_BEGIN, |tx| {
                if !claims::is_held_by_locked(tx, &entry.key, &claimer_id)? {
                    return Ok(OutboxPut::LeaseLost);
                }
                let lease_until = expiry_millis(now, write_lease);
                Ok(
                    if records::outbox_put(tx, &entry, &claimer_id, lease_until)? {
                        OutboxPut::Stored
                    } else {
                        OutboxPut::Exists
                    },
                )
            })
        })
    }

    fn outbox_take(
        &self,
        idempotency_key: &str,
        holder: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Result<bool, LedgerError> {
        let (key, holder) = (idempotency_key.to_string(), holder.to_string());
        self.call(move |c| records::outbox_take(c, &key, &holder, lease, now))
    }

    fn outbox_release(&self, idempotency_key: &str, holder: &str) -> Result<(), LedgerError> {
        let (key, holder) = (idempotency_key.to_string(), holder.to_string());
        self.call(move |c| records::outbox_release(c, &key, &holder))
    }

    fn outbox_pending(&self, tracker: &str) -> Result<Vec<OutboxEntry>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::outbox_pending(c, &tracker))
    }

    fn outbox_get(&self, idempotency_key: &str) -> Result<Option<OutboxEntry>, LedgerError> {
        let key = idempotency_key.to_string();
        self.call(move |c| records::outbox_get(c, &key))
    }

    fn outbox_update(&self, entry: &OutboxEntry) -> Result<(), LedgerError> {
        let entry = entry.clone();
        self.call(move |c| c.transaction(DURABLE_BEGIN, |tx| records::outbox_update(tx, &entry)))
    }

    fn hook_delivery(
        &self,
        delivery_id: &str,
        sink_id: &str,
    ) -> Result<Option<HookDelivery>, LedgerError> {
        let (delivery_id, sink_id) = (delivery_id.to_string(), sink_id.to_string());
        self.call(move |c| records::hook_delivery(c, &delivery_id, &sink_id))
    }

    fn record_hook_delivery(&self, delivery: &HookDelivery) -> Result<(), LedgerError> {
        let delivery = delivery.clone();
        self.call(move |c| records::record_hook_delivery(c, &delivery))
    }

    fn hook_failures(&self, limit: usize) -> Result<Vec<HookDelivery>, LedgerError> {
        self.call(move |c| records::hook_failures(c, limit))
    }

    fn hook_retries_due(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<HookDelivery>, LedgerError> {
        self.call(move |c| records::hook_retries_due(c, now, limit))
    }

    fn blocker_checks(&self, tracker: &str) -> Result<Vec<(String, Timestamp)>, LedgerError> {
        let tracker = tracker.to_string();
        self.call(move |c| records::blocker_checks(c, &tracker))
    }

    fn record_blocker_check(
        &self,
        tracker: &str,
        ticket_id: &str,
        at: Timestamp,
    ) -> Result<(), LedgerError> {
        let (tracker, ticket_id) = (tracker.to_string(), ticket_id.to_string());
        self.call(move |c| records::record_blocker_check(c, &tracker, &ticket_id, at))
    }

    fn put_reaction(
        &self,
        reaction: &ReactionRecord,
        entry: &OutboxEntry,
        holder: &str,
        write_lease: Duration,
        now: Timestamp,
    ) -> Result<ReactionPut, LedgerError> {
        let (reaction, entry, holder) = (reaction.clone(), entry.clone(), holder.to_string());
        self.call(move |c| {
            c.transaction(DURABLE_BEGIN, |tx| {
                let lease_until = expiry_millis(now, write_lease);
                reactions::put(tx, &reaction, &entry, &holder, lease_until)
            })
        })
    }

    fn reactions(
        &self,
        tracker: &str,
        ticket_id: Option<&str>,
    ) -> Result<Vec<ReactionRecord>, LedgerError> {
        let (tracker, ticket_id) = (tracker.to_string(), ticket_id.map(str::to_string));
        self.call(move |c| reactions::list(c, &tracker, ticket_id.as_deref()))
    }

    fn snapshot(&self, tracker: &str) -> Result<LedgerSnapshot, LedgerError> {
        let tracker = tracker.to_string();
        // One repeatable-read transaction: the five reads see the same state.
        self.call(move |c| {
            c.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", |tx| {
                Ok(LedgerSnapshot {
                    claims: claims::all(tx, Some(&tracker))?,
                    retries: records::retries(tx, Some(&tracker))?,
                    holds: records::holds(tx, Some(&tracker))?,
                    outbox_pending: records::outbox_pending(tx, &tracker)?,
                    hosts: hosts::list(tx, &tracker)?,
                })
            })
        })
    }

    fn ping(&self) -> Result<(), LedgerError> {
        self.call(|c| c.batch("SELECT 1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PostgresLedger>();
    }

    #[test]
    fn session_settings_yield_to_the_ones_the_url_sets() {
        assert_eq!(
            session_setup("postgres://h/db").as_deref(),
            Some("SET synchronous_commit = off; SET enable_seqscan = off; SET jit = off")
        );
        assert_eq!(
            session_setup("postgres://h/db?options=-c%20enable_seqscan%3Don").as_deref(),
            Some("SET synchronous_commit = off; SET jit = off")
        );
        assert_eq!(
            session_setup("postgres://h/db?options=-c%20synchronous_commit%3Don").as_deref(),
            Some("SET enable_seqscan = off; SET jit = off")
        );
        assert_eq!(
            session_setup(
                "postgres://h/db?options=-c%20synchronous_commit%3Don%20-c%20enable_seqscan%3Don\
                 %20-c%20jit%3Don"
            ),
            None
        );
        // A name elsewhere in the URL (a user, a database) sets nothing.
        assert_eq!(
            session_setup("host=h user=jit dbname=jit options='-c synchronous_commit=on'")
                .as_deref(),
            Some("SET enable_seqscan = off; SET jit = off")
        );
    }

    #[test]
    fn messages_never_show_credentials() {
        assert_eq!(
            describe("postgres://u:secret@db.example:5432/sortie?sslmode=require"),
            "postgres://db.example:5432/sortie"
        );
        assert_eq!(describe("postgresql://h/db"), "postgresql://h/db");
        assert!(!describe("host=h password=secret").contains("secret"));
    }

    #[test]
    fn malformed_url_is_an_open_error_naming_the_target() {
        let err = PostgresLedger::open("postgres://u:pw@h:notaport/db").unwrap_err();
        assert!(matches!(err, LedgerError::Open { .. }), "{err:?}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn a_url_that_requires_tls_is_refused_naming_sslmode() {
        for mode in ["require", "verify-ca", "verify-full", "REQUIRE"] {
            let url =
                format!("postgres://u:secret@127.0.0.1:1/db?connect_timeout=1&sslmode={mode}");
            let err = PostgresLedger::open(&url).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, LedgerError::Open { .. }), "{mode}: {err:?}");
            assert!(
                text.contains(&format!("sslmode={}", mode.to_ascii_lowercase())),
                "{text}"
            );
            assert!(text.contains("does not support"), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }
        let err = PostgresLedger::open("host=127.0.0.1 port=1 sslmode=verify-full").unwrap_err();
        assert!(err.to_string().contains("sslmode=verify-full"), "{err}");
        let err = PostgresLedger::open("postgres://h/db?sslmode=sometimes").unwrap_err();
        assert!(
            err.to_string().contains("sslmode=sometimes is not one of"),
            "{err}"
        );
    }

    #[test]
    fn modes_that_allow_plain_connections_connect_without_tls() {
        // Nothing listens on port 1: getting as far as connecting (Unavailable) shows the
        // mode was accepted.
        for mode in ["disable", "allow", "prefer"] {
            let url =
                format!("postgres://sortie@127.0.0.1:1/sortie?connect_timeout=2&sslmode={mode}");
            let err = PostgresLedger::open(&url).unwrap_err();
            assert!(
                matches!(err, LedgerError::Unavailable(_)),
                "{mode}: {err:?}"
            );
        }
    }

    #[test]
    fn unreachable_database_is_unavailable_not_a_panic() {
        // Port 1 on the loopback interface: nothing listens there.
        let err = PostgresLedger::open("postgres://sortie@127.0.0.1:1/sortie?connect_timeout=2")
            .unwrap_err();
        assert!(matches!(err, LedgerError::Unavailable(_)), "{err:?}");
        assert!(err.to_string().contains("127.0.0.1:1/sortie"), "{err}");
    }
}

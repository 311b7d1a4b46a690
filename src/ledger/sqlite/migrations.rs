//! The ledger schema as an ordered list of migrations, applied by `PRAGMA user_version`.
//!
//! Migration `n` (1-based) brings a file from `user_version = n - 1` to `n`. Never edit a
//! released migration: append a new one (e.g. `ALTER TABLE runs ADD COLUMN tokens INTEGER`).

use rusqlite::{Connection, TransactionBehavior};

use crate::ledger::LedgerError;

/// Every migration in order; the schema version of this build is its length.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema. Times are integer milliseconds since the epoch (UTC).
    // Claims and attempts are WITHOUT ROWID (the key is the primary key) and carry no
    // secondary index: live claims are bounded by the in-flight caps, so counting them is a
    // scan of a handful of rows, and every index would cost a page write per claim.
    "
    CREATE TABLE claims (
        tracker          TEXT    NOT NULL,
        ticket_id        TEXT    NOT NULL,
        role             TEXT    NOT NULL,
        stage            TEXT    NOT NULL,
        claimer_id       TEXT    NOT NULL,
        claimed_at       INTEGER NOT NULL,
        lease_expires_at INTEGER NOT NULL,
        stage_attempt    INTEGER NOT NULL,
        run_id           TEXT    NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        agent_pid        INTEGER,
        PRIMARY KEY (tracker, ticket_id, role)
    ) WITHOUT ROWID;

    CREATE TABLE attempts (
        tracker      TEXT    NOT NULL,
        ticket_id    TEXT    NOT NULL,
        role         TEXT    NOT NULL,
        last_attempt INTEGER NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    ) WITHOUT ROWID;

    CREATE TABLE retries (
        tracker        TEXT    NOT NULL,
        ticket_id      TEXT    NOT NULL,
        role           TEXT    NOT NULL,
        stage          TEXT    NOT NULL,
        failed_attempt INTEGER NOT NULL,
        due_at         INTEGER NOT NULL,
        reason_code    TEXT    NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    ) WITHOUT ROWID;

    CREATE TABLE holds (
        tracker     TEXT    NOT NULL,
        ticket_id   TEXT    NOT NULL,
        role        TEXT    NOT NULL,
        status      TEXT    NOT NULL,
        reason_code TEXT    NOT NULL,
        created_at  INTEGER NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    ) WITHOUT ROWID;

    CREATE TABLE runs (
        run_id        TEXT    NOT NULL PRIMARY KEY,
        tracker       TEXT    NOT NULL,
        ticket_id     TEXT    NOT NULL,
        role          TEXT    NOT NULL,
        stage         TEXT    NOT NULL,
        stage_attempt INTEGER NOT NULL,
        claimer_id    TEXT    NOT NULL,
        phase         TEXT    NOT NULL,
        outcome       TEXT,
        reason_code   TEXT,
        log_path      TEXT,
        started_at    INTEGER NOT NULL,
        finished_at   INTEGER
    );
    CREATE INDEX runs_by_start ON runs (started_at);

    CREATE TABLE outbox (
        idempotency_key TEXT    NOT NULL PRIMARY KEY,
        tracker         TEXT    NOT NULL,
        ticket_id       TEXT    NOT NULL,
        role            TEXT    NOT NULL,
        stage           TEXT    NOT NULL,
        stage_attempt   INTEGER NOT NULL,
        run_id          TEXT    NOT NULL,
        outcome         TEXT    NOT NULL,
        from_status     TEXT    NOT NULL,
        to_status       TEXT    NOT NULL,
        comment_body    TEXT    NOT NULL,
        state           TEXT    NOT NULL,
        write_attempts  INTEGER NOT NULL,
        next_attempt_at INTEGER NOT NULL,
        last_error      TEXT,
        created_at      INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX outbox_by_tracker_state ON outbox (tracker, state, created_at);
    ",
    // 2: hook delivery records, one per (event delivery id, hook). The payload is kept so
    // a failed delivery can be retried on a later tick without the event at hand.
    "
    CREATE TABLE hook_deliveries (
        delivery_id     TEXT    NOT NULL,
        sink_id         TEXT    NOT NULL,
        event           TEXT    NOT NULL,
        payload         TEXT    NOT NULL,
        state           TEXT    NOT NULL,
        attempts        INTEGER NOT NULL,
        last_error      TEXT,
        next_attempt_at INTEGER,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL,
        PRIMARY KEY (delivery_id, sink_id)
    ) WITHOUT ROWID;
    CREATE INDEX hook_deliveries_by_state ON hook_deliveries (state, next_attempt_at);
    ",
    // 3: what each run cost (tokens, dollars), for accounting and per-ticket budgets.
    "
    CREATE TABLE run_usage (
        run_id      TEXT    NOT NULL PRIMARY KEY,
        tracker     TEXT    NOT NULL,
        ticket_id   TEXT    NOT NULL,
        role        TEXT    NOT NULL,
        tokens_in   INTEGER NOT NULL,
        tokens_out  INTEGER NOT NULL,
        cost_usd    REAL,
        recorded_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX run_usage_by_ticket ON run_usage (tracker, ticket_id);
    CREATE INDEX runs_by_ticket ON runs (tracker, ticket_id);
    ",
    // 4: the follow-up decided with an outcome and the write lease of an outbox entry
    // (one writer per entry at a time); agent session ids and routes in run history;
    // cache and reasoning tokens in their own columns; when each ticket's blockers were
    // last read. Rows from before have no follow-up (NULL): see `codec::legacy_follow_up`.
    "
    ALTER TABLE outbox ADD COLUMN follow_up TEXT;
    ALTER TABLE outbox ADD COLUMN lease_holder TEXT;
    ALTER TABLE outbox ADD COLUMN lease_expires_at INTEGER;
    ALTER TABLE runs ADD COLUMN session_id TEXT;
    ALTER TABLE runs ADD COLUMN route TEXT;
    ALTER TABLE run_usage ADD COLUMN cache_read_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE run_usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE run_usage ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX runs_by_key ON runs (tracker, ticket_id, role, stage_attempt);
    CREATE TABLE blocker_checks (
        tracker    TEXT    NOT NULL,
        ticket_id  TEXT    NOT NULL,
        checked_at INTEGER NOT NULL,
        PRIMARY KEY (tracker, ticket_id)
    ) WITHOUT ROWID;
    ",
    // 5: the ticket's title as the run knew it, so run history names a ticket that has
    // since left the board (done, closed, deleted) after a restart too.
    "
    ALTER TABLE runs ADD COLUMN title TEXT;
    ",
    // 6: reactions to pull requests (issue #32). The fingerprint is the idempotency key
    // of the reaction's block; one round of a kind per ticket is stored once.
    "
    CREATE TABLE reactions (
        fingerprint  TEXT    NOT NULL PRIMARY KEY,
        tracker      TEXT    NOT NULL,
        ticket_id    TEXT    NOT NULL,
        kind         TEXT    NOT NULL,
        round        INTEGER NOT NULL,
        to_role      TEXT,
        pull_request INTEGER NOT NULL,
        head_sha     TEXT    NOT NULL,
        handed       TEXT    NOT NULL,
        payload      TEXT    NOT NULL,
        decided_at   INTEGER NOT NULL,
        UNIQUE (tracker, ticket_id, kind, round)
    );
    ",
    // 7: the agent (preset) and model of the run a usage row belongs to, for
    // `sortie stats --by agent|model` (issue #37).
    "
    ALTER TABLE run_usage ADD COLUMN agent TEXT;
    ALTER TABLE run_usage ADD COLUMN model TEXT;
    ",
    // 8: the agent (preset) and model on run history itself, so a run without a usage
    // row (a `command` agent, a run stopped before its agent reported) still has them
    // (issue #37). Rows from before read as NULL: `unknown` in `sortie stats`.
    "
    ALTER TABLE runs ADD COLUMN agent TEXT;
    ALTER TABLE runs ADD COLUMN model TEXT;
    ",
    // 9: the latest rate-limit report of each limit type a run's agent reported, as JSON
    // (issue #39). Rows from before read as NULL: no reports.
    "
    ALTER TABLE runs ADD COLUMN rate_limits TEXT;
    ",
    // 10: the hosts ticking each tracker, one row per stage they run, so the fleet's caps
    // can be shared between them (issue #52). A file opened by several processes of one
    // host has one host; the table is what several hosts of a PostgreSQL ledger share.
    "
    CREATE TABLE hosts (
        tracker    TEXT    NOT NULL,
        host       TEXT    NOT NULL,
        role       TEXT    NOT NULL,
        status     TEXT    NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (tracker, host, role, status)
    ) WITHOUT ROWID;
    ",
    // 11: the ticket's updated time right after the writes that held it, so a person's
    // change made after the hold releases it even when the ticket is back on the same
    // status before the next tick (issue #52, item 8). Rows from before read as NULL:
    // only a different status releases them.
    "
    ALTER TABLE holds ADD COLUMN ticket_updated_at INTEGER;
    ",
];

/// The SQL of migration `version` (1-based), if this build has it.
pub(super) fn sql(version: usize) -> Option<&'static str> {
    MIGRATIONS.get(version.checked_sub(1)?).copied()
}

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the file to [`SCHEMA_VERSION`], refusing a file from a newer sortie.
///
/// Runs in one `BEGIN IMMEDIATE` transaction and re-reads the version inside it, so several
/// processes opening a fresh file at once apply each migration exactly once.
pub(super) fn migrate(conn: &mut Connection, path: &str) -> Result<(), LedgerError> {
    let found = user_version(conn)?;
    check_not_newer(found, path)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    check_not_newer(found, path)?;
    let start = usize::try_from(found)
        .map_err(|_| LedgerError::Corrupt(format!("negative schema version {found}")))?;
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tx.execute_batch(sql)?;
        // PRAGMA arguments cannot be bound; the value is our own integer.
        tx.execute_batch(&format!("PRAGMA user_version = {}", index + 1))?;
    }
    tx.commit()?;
    Ok(())
}

fn user_version(conn: &Connection) -> Result<i64, LedgerError> {
    Ok(conn.query_row("PRAGMA user_version", [], |row| row.get(0))?)
}

fn check_not_newer(found: i64, path: &str) -> Result<(), LedgerError> {
    if found > SCHEMA_VERSION {
        return Err(LedgerError::TooNew {
            path: path.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

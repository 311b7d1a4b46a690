//! The Postgres ledger schema as an ordered list of migrations, recorded in
//! `sortie_schema.version`.
//!
//! Migration `n` (1-based) brings a schema from version `n - 1` to `n`. Never edit a
//! released migration: append a new one. Version 1 is the SQLite ledger's schema 4 (the
//! same tables and columns; times are integer milliseconds since the epoch, UTC), so both
//! backends hold the same rows.

use super::pool::Conn;
use crate::ledger::LedgerError;

/// Every migration in order; the schema version of this build is its length.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE claims (
        tracker          TEXT COLLATE "C"    NOT NULL,
        ticket_id        TEXT COLLATE "C"    NOT NULL,
        role             TEXT COLLATE "C"    NOT NULL,
        stage            TEXT COLLATE "C"    NOT NULL,
        claimer_id       TEXT COLLATE "C"    NOT NULL,
        claimed_at       BIGINT  NOT NULL,
        lease_expires_at BIGINT  NOT NULL,
        stage_attempt    BIGINT  NOT NULL,
        run_id           TEXT COLLATE "C"    NOT NULL,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        agent_pid        BIGINT,
        PRIMARY KEY (tracker, ticket_id, role)
    );
    CREATE TABLE attempts (
        tracker      TEXT COLLATE "C"   NOT NULL,
        ticket_id    TEXT COLLATE "C"   NOT NULL,
        role         TEXT COLLATE "C"   NOT NULL,
        last_attempt BIGINT NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    );
    CREATE TABLE retries (
        tracker        TEXT COLLATE "C"   NOT NULL,
        ticket_id      TEXT COLLATE "C"   NOT NULL,
        role           TEXT COLLATE "C"   NOT NULL,
        stage          TEXT COLLATE "C"   NOT NULL,
        failed_attempt BIGINT NOT NULL,
        due_at         BIGINT NOT NULL,
        reason_code    TEXT COLLATE "C"   NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    );
    CREATE TABLE holds (
        tracker     TEXT COLLATE "C"   NOT NULL,
        ticket_id   TEXT COLLATE "C"   NOT NULL,
        role        TEXT COLLATE "C"   NOT NULL,
        status      TEXT COLLATE "C"   NOT NULL,
        reason_code TEXT COLLATE "C"   NOT NULL,
        created_at  BIGINT NOT NULL,
        PRIMARY KEY (tracker, ticket_id, role)
    );
    CREATE TABLE runs (
        run_id        TEXT COLLATE "C"   NOT NULL PRIMARY KEY,
        tracker       TEXT COLLATE "C"   NOT NULL,
        ticket_id     TEXT COLLATE "C"   NOT NULL,
        role          TEXT COLLATE "C"   NOT NULL,
        stage         TEXT COLLATE "C"   NOT NULL,
        stage_attempt BIGINT NOT NULL,
        claimer_id    TEXT COLLATE "C"   NOT NULL,
        phase         TEXT COLLATE "C"   NOT NULL,
        outcome       TEXT,
        reason_code   TEXT,
        log_path      TEXT,
        started_at    BIGINT NOT NULL,
        finished_at   BIGINT,
        session_id    TEXT,
        route         TEXT COLLATE "C"
    );
    CREATE INDEX runs_by_start ON runs (started_at);
    CREATE INDEX runs_by_ticket ON runs (tracker, ticket_id);
    CREATE INDEX runs_by_key ON runs (tracker, ticket_id, role, stage_attempt);
    CREATE TABLE outbox (
        idempotency_key  TEXT COLLATE "C"   NOT NULL PRIMARY KEY,
        tracker          TEXT COLLATE "C"   NOT NULL,
        ticket_id        TEXT COLLATE "C"   NOT NULL,
        role             TEXT COLLATE "C"   NOT NULL,
        stage            TEXT COLLATE "C"   NOT NULL,
        stage_attempt    BIGINT NOT NULL,
        run_id           TEXT COLLATE "C"   NOT NULL,
        outcome          TEXT COLLATE "C"   NOT NULL,
        from_status      TEXT COLLATE "C"   NOT NULL,
        to_status        TEXT COLLATE "C"   NOT NULL,
        comment_body     TEXT COLLATE "C"   NOT NULL,
        state            TEXT COLLATE "C"   NOT NULL,
        write_attempts   BIGINT NOT NULL,
        next_attempt_at  BIGINT NOT NULL,
        last_error       TEXT,
        created_at       BIGINT NOT NULL,
        follow_up        TEXT,
        lease_holder     TEXT,
        lease_expires_at BIGINT
    );
    CREATE INDEX outbox_by_tracker_state ON outbox (tracker, state, created_at);
    CREATE TABLE hook_deliveries (
        delivery_id     TEXT COLLATE "C"   NOT NULL,
        sink_id         TEXT COLLATE "C"   NOT NULL,
        event           TEXT COLLATE "C"   NOT NULL,
        payload         TEXT COLLATE "C"   NOT NULL,
        state           TEXT COLLATE "C"   NOT NULL,
        attempts        BIGINT NOT NULL,
        last_error      TEXT,
        next_attempt_at BIGINT,
        created_at      BIGINT NOT NULL,
        updated_at      BIGINT NOT NULL,
        PRIMARY KEY (delivery_id, sink_id)
    );
    CREATE INDEX hook_deliveries_by_state ON hook_deliveries (state, next_attempt_at);
    CREATE TABLE run_usage (
        run_id             TEXT COLLATE "C"   NOT NULL PRIMARY KEY,
        tracker            TEXT COLLATE "C"   NOT NULL,
        ticket_id          TEXT COLLATE "C"   NOT NULL,
        role               TEXT COLLATE "C"   NOT NULL,
        tokens_in          BIGINT NOT NULL,
        tokens_out         BIGINT NOT NULL,
        cost_usd           DOUBLE PRECISION,
        recorded_at        BIGINT NOT NULL,
        cache_read_tokens  BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0,
        reasoning_tokens   BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX run_usage_by_ticket ON run_usage (tracker, ticket_id);
    CREATE TABLE blocker_checks (
        tracker    TEXT COLLATE "C"   NOT NULL,
        ticket_id  TEXT COLLATE "C"   NOT NULL,
        checked_at BIGINT NOT NULL,
        PRIMARY KEY (tracker, ticket_id)
    );
    -- The whole claim as one statement (one round trip), serialized per tracker by a
    -- transaction-scoped advisory lock held until the statement's commit: see
    -- claims::try_claim for the steps and why the lock makes the caps fleet-wide.
    CREATE FUNCTION sortie_try_claim(
        p_tracker TEXT, p_ticket TEXT, p_role TEXT, p_stage TEXT, p_claimer TEXT, p_run TEXT,
        p_now BIGINT, p_expires BIGINT, p_role_cap BIGINT, p_global_cap BIGINT,
        p_status_cap BIGINT, p_floor BIGINT)
    RETURNS TABLE (o_outcome TEXT, o_claimer TEXT, o_stage TEXT, o_claimed_at BIGINT,
                   o_expires BIGINT, o_attempt BIGINT, o_run TEXT, o_cancel BOOLEAN,
                   o_pid BIGINT)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        cur claims%ROWTYPE;
        role_live BIGINT;
        global_live BIGINT;
        stage_live BIGINT;
        last BIGINT;
        attempt BIGINT;
    BEGIN
        PERFORM pg_advisory_xact_lock(hashtext('sortie.claims'),
                                      hashtext(COALESCE(current_schema(), '') || '/' || p_tracker));
        SELECT * INTO cur FROM claims c
         WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role;
        IF FOUND THEN
            IF cur.lease_expires_at > p_now THEN
                IF cur.claimer_id <> p_claimer THEN
                    RETURN QUERY SELECT 'held'::TEXT, cur.claimer_id, cur.stage, cur.claimed_at,
                        cur.lease_expires_at, cur.stage_attempt, cur.run_id,
                        cur.cancel_requested, cur.agent_pid;
                    RETURN;
                END IF;
                UPDATE claims c SET lease_expires_at = p_expires
                 WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role;
                RETURN QUERY SELECT 'acquired'::TEXT, cur.claimer_id, cur.stage, cur.claimed_at,
                    p_expires, cur.stage_attempt, cur.run_id, cur.cancel_requested, cur.agent_pid;
                RETURN;
            END IF;
            DELETE FROM claims c
             WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role;
        END IF;
        SELECT COUNT(*) FILTER (WHERE c.role = p_role), COUNT(*),
               COUNT(*) FILTER (WHERE c.stage = p_stage)
          INTO role_live, global_live, stage_live
          FROM claims c WHERE c.tracker = p_tracker AND c.lease_expires_at > p_now;
        IF role_live >= p_role_cap THEN
            RETURN QUERY SELECT 'ceiling_role'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BOOLEAN, NULL::BIGINT;
            RETURN;
        END IF;
        IF global_live >= p_global_cap THEN
            RETURN QUERY SELECT 'ceiling_global'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BOOLEAN, NULL::BIGINT;
            RETURN;
        END IF;
        IF p_status_cap IS NOT NULL AND stage_live >= p_status_cap THEN
            RETURN QUERY SELECT 'ceiling_status'::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BOOLEAN, NULL::BIGINT;
            RETURN;
        END IF;
        SELECT a.last_attempt INTO last FROM attempts a
         WHERE a.tracker = p_tracker AND a.ticket_id = p_ticket AND a.role = p_role;
        attempt := GREATEST(COALESCE(last, 0) + 1, p_floor, 1);
        INSERT INTO claims (tracker, ticket_id, role, stage, claimer_id, claimed_at,
                            lease_expires_at, stage_attempt, run_id, cancel_requested, agent_pid)
        VALUES (p_tracker, p_ticket, p_role, p_stage, p_claimer, p_now, p_expires, attempt,
                p_run, FALSE, NULL);
        INSERT INTO attempts AS a (tracker, ticket_id, role, last_attempt)
        VALUES (p_tracker, p_ticket, p_role, attempt)
        ON CONFLICT (tracker, ticket_id, role) DO UPDATE SET last_attempt = excluded.last_attempt;
        RETURN QUERY SELECT 'acquired'::TEXT, p_claimer, p_stage, p_now, p_expires, attempt,
            p_run, FALSE, NULL::BIGINT;
    END
    $fn$;
    "#,
    SLOTS,
    // 3: the ticket's title as the run knew it (the SQLite ledger's schema 5).
    "ALTER TABLE runs ADD COLUMN title TEXT;",
    // 4: reactions to pull requests (the SQLite ledger's schema 6).
    r#"
    CREATE TABLE reactions (
        fingerprint  TEXT COLLATE "C" NOT NULL PRIMARY KEY,
        tracker      TEXT COLLATE "C" NOT NULL,
        ticket_id    TEXT COLLATE "C" NOT NULL,
        kind         TEXT COLLATE "C" NOT NULL,
        round        BIGINT NOT NULL,
        to_role      TEXT COLLATE "C",
        pull_request BIGINT NOT NULL,
        head_sha     TEXT COLLATE "C" NOT NULL,
        handed       TEXT NOT NULL,
        payload      TEXT NOT NULL,
        decided_at   BIGINT NOT NULL,
        UNIQUE (tracker, ticket_id, kind, round)
    );
    "#,
    // 5: the agent and model of a usage row's run (the SQLite ledger's schema 7).
    "ALTER TABLE run_usage ADD COLUMN agent TEXT; ALTER TABLE run_usage ADD COLUMN model TEXT;",
    // 6: the agent and model on run history itself (the SQLite ledger's schema 8).
    "ALTER TABLE runs ADD COLUMN agent TEXT; ALTER TABLE runs ADD COLUMN model TEXT;",
    // 7: a run's rate-limit reports, as JSON (the SQLite ledger's schema 9).
    "ALTER TABLE runs ADD COLUMN rate_limits TEXT;",
    // 8: the hosts ticking each tracker, one row per stage they run, so the fleet's caps
    // are shared between them (issue #52; the SQLite ledger's schema 10).
    r#"
    CREATE TABLE hosts (
        tracker    TEXT COLLATE "C" NOT NULL,
        host       TEXT COLLATE "C" NOT NULL,
        role       TEXT COLLATE "C" NOT NULL,
        status     TEXT COLLATE "C" NOT NULL,
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (tracker, host, role, status)
    );
    "#,
    // 9: a hold's ticket updated time after sortie's own writes (the SQLite ledger's
    // schema 11).
    "ALTER TABLE holds ADD COLUMN ticket_updated_at BIGINT;",
];

/// Migration 2: claims hold slots, so the caps hold without a lock.
///
/// A claim of a scope capped at N (the role, the tracker, the claim status) takes one of
/// the slot numbers 0..N-1 of that scope, and a unique index per scope stops two rows
/// from sharing one: at most N rows hold slots below N, whoever inserts them and however
/// they race. A claim whose status has no cap has no status slot (NULL). Expired rows that
/// sit on slots a claim needs are "parked" (moved to a unique slot at or above 2^40, far
/// above any cap) and otherwise kept, for reaping and a late renewal. A row whose slot is
/// at or above the caller's cap (claimed under a larger cap, or parked) is not bounded by
/// the index, so while one exists in a scope the claim falls back to counting under the
/// tracker's advisory lock, as version 1 always did. `claims::try_claim` has the steps
/// and why each answer is exact.
///
/// Rows of version 1 are parked (they were claimed with no slot); the 12-argument
/// `sortie_try_claim` of version 1 stays, as a wrapper, for hosts still running it.
const SLOTS: &str = r#"
    ALTER TABLE claims ADD COLUMN role_slot BIGINT, ADD COLUMN global_slot BIGINT,
                       ADD COLUMN status_slot BIGINT;
    CREATE SEQUENCE sortie_parked_slot;
    UPDATE claims
       SET role_slot = (1::BIGINT << 40) + nextval('sortie_parked_slot'),
           global_slot = (1::BIGINT << 40) + nextval('sortie_parked_slot');
    ALTER TABLE claims ALTER COLUMN role_slot SET NOT NULL,
                       ALTER COLUMN global_slot SET NOT NULL;
    CREATE UNIQUE INDEX claims_role_slot ON claims (tracker, role, role_slot);
    CREATE UNIQUE INDEX claims_global_slot ON claims (tracker, global_slot);
    -- A claim whose status has no cap has no status slot (NULL), and costs no entry here.
    CREATE UNIQUE INDEX claims_status_slot ON claims (tracker, stage, status_slot)
     WHERE status_slot IS NOT NULL;
    -- Every claim inserts a row and its release deletes it: vacuum by count of dead rows,
    -- not by a fraction of a table that is always nearly empty.
    ALTER TABLE claims SET (autovacuum_vacuum_scale_factor = 0,
                            autovacuum_vacuum_threshold = 1000);

    -- The first slot of 0..cap-1 from `seed` on that is not in `taken`; NULL if none.
    CREATE FUNCTION sortie_free_slot(taken BIGINT[], cap BIGINT, seed BIGINT) RETURNS BIGINT
    LANGUAGE plpgsql IMMUTABLE AS $fn$
    DECLARE
        s BIGINT;
        tried BIGINT := 1;
    BEGIN
        IF cap <= 0 THEN
            RETURN NULL;
        END IF;
        s := abs(seed) % cap;
        WHILE s = ANY (taken) LOOP
            IF tried >= cap THEN
                RETURN NULL;
            END IF;
            tried := tried + 1;
            s := (s + 1) % cap;
        END LOOP;
        RETURN s;
    END
    $fn$;

    DROP FUNCTION sortie_try_claim(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT,
                                   BIGINT, BIGINT, BIGINT);
    -- Every case of a claim (claims::try_claim sends the common ones as one statement
    -- first): a live row of another claimer is `held`; of the same claimer, renewed; an
    -- expired row of the key is deleted. Then, in one read of the tracker's rows: the
    -- live counts of the three scopes, the slots taken, and whether a row sits at or
    -- above a cap; if one does, take the tracker's lock and read again, so the counts are
    -- exact. Ceilings as in SQLite (role, global, status); then a free slot per scope
    -- (parking expired rows that hold the last ones) and the insert, which a unique index
    -- refuses if a racing claim took the key or a slot: then look again.
    CREATE FUNCTION sortie_try_claim(
        p_tracker TEXT, p_ticket TEXT, p_role TEXT, p_stage TEXT, p_claimer TEXT, p_run TEXT,
        p_now BIGINT, p_expires BIGINT, p_role_cap BIGINT, p_global_cap BIGINT,
        p_status_cap BIGINT, p_floor BIGINT, p_seed BIGINT)
    RETURNS TABLE (o_outcome TEXT, o_claimer TEXT, o_stage TEXT, o_claimed_at BIGINT,
                   o_expires BIGINT, o_attempt BIGINT, o_run TEXT, o_cancel BOOLEAN,
                   o_pid BIGINT)
    LANGUAGE plpgsql AS $fn$
    DECLARE
        cur claims%ROWTYPE;
        role_live BIGINT;
        global_live BIGINT;
        stage_live BIGINT;
        above BOOLEAN;
        role_taken BIGINT[];
        global_taken BIGINT[];
        status_taken BIGINT[];
        r_slot BIGINT;
        g_slot BIGINT;
        s_slot BIGINT;
        locked BOOLEAN := FALSE;
        ceiling TEXT;
        last BIGINT;
        attempt BIGINT;
        inserted INT;
        tries INT := 0;
    BEGIN
        LOOP
            tries := tries + 1;
            IF tries > 50 THEN
                RAISE EXCEPTION 'sortie_try_claim: no free slot after 50 looks'
                    USING ERRCODE = '40001';
            END IF;
            SELECT * INTO cur FROM claims c
             WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role;
            IF FOUND THEN
                IF cur.lease_expires_at > p_now THEN
                    IF cur.claimer_id <> p_claimer THEN
                        RETURN QUERY SELECT 'held'::TEXT, cur.claimer_id, cur.stage,
                            cur.claimed_at, cur.lease_expires_at, cur.stage_attempt, cur.run_id,
                            cur.cancel_requested, cur.agent_pid;
                        RETURN;
                    END IF;
                    UPDATE claims c SET lease_expires_at = p_expires
                     WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role;
                    RETURN QUERY SELECT 'acquired'::TEXT, cur.claimer_id, cur.stage,
                        cur.claimed_at, p_expires, cur.stage_attempt, cur.run_id,
                        cur.cancel_requested, cur.agent_pid;
                    RETURN;
                END IF;
                DELETE FROM claims c
                 WHERE c.tracker = p_tracker AND c.ticket_id = p_ticket AND c.role = p_role
                   AND c.lease_expires_at <= p_now;
                CONTINUE;
            END IF;
            SELECT COUNT(*) FILTER (WHERE c.role = p_role AND c.lease_expires_at > p_now),
                   COUNT(*) FILTER (WHERE c.lease_expires_at > p_now),
                   COUNT(*) FILTER (WHERE c.stage = p_stage AND c.lease_expires_at > p_now),
                   COALESCE(bool_or((c.role = p_role AND c.role_slot >= p_role_cap)
                                    OR c.global_slot >= p_global_cap
                                    OR (p_status_cap IS NOT NULL AND c.stage = p_stage
                                        AND (c.status_slot IS NULL
                                             OR c.status_slot >= p_status_cap))),
                            FALSE),
                   COALESCE(array_agg(c.role_slot) FILTER (WHERE c.role = p_role), '{}'),
                   COALESCE(array_agg(c.global_slot), '{}'),
                   COALESCE(array_agg(c.status_slot)
                            FILTER (WHERE c.stage = p_stage AND c.status_slot IS NOT NULL), '{}')
              INTO role_live, global_live, stage_live, above,
                   role_taken, global_taken, status_taken
              FROM claims c WHERE c.tracker = p_tracker;
            IF above AND NOT locked THEN
                PERFORM pg_advisory_xact_lock(hashtext('sortie.claims'),
                    hashtext(COALESCE(current_schema(), '') || '/' || p_tracker));
                locked := TRUE;
                CONTINUE;
            END IF;
            ceiling := CASE
                WHEN role_live >= p_role_cap THEN 'ceiling_role'
                WHEN global_live >= p_global_cap THEN 'ceiling_global'
                WHEN stage_live >= p_status_cap THEN 'ceiling_status'
            END;
            IF ceiling IS NOT NULL THEN
                RETURN QUERY SELECT ceiling, NULL::TEXT, NULL::TEXT, NULL::BIGINT,
                    NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BOOLEAN, NULL::BIGINT;
                RETURN;
            END IF;
            r_slot := sortie_free_slot(role_taken, p_role_cap, p_seed);
            g_slot := sortie_free_slot(global_taken, p_global_cap, p_seed);
            s_slot := sortie_free_slot(status_taken, p_status_cap, p_seed);
            IF r_slot IS NULL OR g_slot IS NULL
               OR (p_status_cap IS NOT NULL AND s_slot IS NULL) THEN
                -- Fewer live claims than the cap, so expired rows hold the rest of the
                -- slots: park them (rows another claim is parking or renewing are skipped).
                UPDATE claims c SET role_slot = (1::BIGINT << 40) + nextval('sortie_parked_slot')
                 WHERE (c.tracker, c.ticket_id, c.role) IN (
                       SELECT e.tracker, e.ticket_id, e.role FROM claims e
                        WHERE r_slot IS NULL AND e.tracker = p_tracker AND e.role = p_role
                          AND e.lease_expires_at <= p_now AND e.role_slot < p_role_cap
                          FOR UPDATE SKIP LOCKED);
                UPDATE claims c SET global_slot = (1::BIGINT << 40) + nextval('sortie_parked_slot')
                 WHERE (c.tracker, c.ticket_id, c.role) IN (
                       SELECT e.tracker, e.ticket_id, e.role FROM claims e
                        WHERE g_slot IS NULL AND e.tracker = p_tracker
                          AND e.lease_expires_at <= p_now AND e.global_slot < p_global_cap
                          FOR UPDATE SKIP LOCKED);
                UPDATE claims c SET status_slot = (1::BIGINT << 40) + nextval('sortie_parked_slot')
                 WHERE (c.tracker, c.ticket_id, c.role) IN (
                       SELECT e.tracker, e.ticket_id, e.role FROM claims e
                        WHERE p_status_cap IS NOT NULL AND s_slot IS NULL
                          AND e.tracker = p_tracker AND e.stage = p_stage
                          AND e.lease_expires_at <= p_now AND e.status_slot < p_status_cap
                          FOR UPDATE SKIP LOCKED);
                CONTINUE;
            END IF;
            SELECT a.last_attempt INTO last FROM attempts a
             WHERE a.tracker = p_tracker AND a.ticket_id = p_ticket AND a.role = p_role;
            attempt := GREATEST(COALESCE(last, 0) + 1, p_floor, 1);
            INSERT INTO claims (tracker, ticket_id, role, stage, claimer_id, claimed_at,
                                lease_expires_at, stage_attempt, run_id, cancel_requested,
                                agent_pid, role_slot, global_slot, status_slot)
            VALUES (p_tracker, p_ticket, p_role, p_stage, p_claimer, p_now, p_expires, attempt,
                    p_run, FALSE, NULL, r_slot, g_slot, s_slot)
            ON CONFLICT DO NOTHING;
            GET DIAGNOSTICS inserted = ROW_COUNT;
            IF inserted = 1 THEN
                INSERT INTO attempts AS a (tracker, ticket_id, role, last_attempt)
                VALUES (p_tracker, p_ticket, p_role, attempt)
                ON CONFLICT (tracker, ticket_id, role)
                DO UPDATE SET last_attempt = excluded.last_attempt;
                RETURN QUERY SELECT 'acquired'::TEXT, p_claimer, p_stage, p_now, p_expires,
                    attempt, p_run, FALSE, NULL::BIGINT;
                RETURN;
            END IF;
        END LOOP;
    END
    $fn$;

    -- Version 1's signature, for a host that still runs it during an upgrade.
    CREATE FUNCTION sortie_try_claim(
        p_tracker TEXT, p_ticket TEXT, p_role TEXT, p_stage TEXT, p_claimer TEXT, p_run TEXT,
        p_now BIGINT, p_expires BIGINT, p_role_cap BIGINT, p_global_cap BIGINT,
        p_status_cap BIGINT, p_floor BIGINT)
    RETURNS TABLE (o_outcome TEXT, o_claimer TEXT, o_stage TEXT, o_claimed_at BIGINT,
                   o_expires BIGINT, o_attempt BIGINT, o_run TEXT, o_cancel BOOLEAN,
                   o_pid BIGINT)
    LANGUAGE sql AS $fn$
        SELECT * FROM sortie_try_claim(p_tracker, p_ticket, p_role, p_stage, p_claimer, p_run,
            p_now, p_expires, p_role_cap, p_global_cap, p_status_cap, p_floor,
            hashtext(p_ticket || '/' || p_role)::BIGINT)
    $fn$;
"#;

/// The SQL of migration `version` (1-based), if this build has it.
pub(super) fn sql(version: usize) -> Option<&'static str> {
    MIGRATIONS.get(version.checked_sub(1)?).copied()
}

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring the schema to [`SCHEMA_VERSION`], refusing one from a newer sortie.
///
/// One transaction holding a transaction-scoped advisory lock (keyed by the schema the
/// connection writes to): hosts starting at once wait for each other, and the second one
/// finds the schema up to date. A failed migration rolls back whole.
pub(super) fn migrate(conn: &mut Conn, target: &str) -> Result<(), LedgerError> {
    conn.transaction("BEGIN", |tx| {
        tx.row(
            "SELECT pg_advisory_xact_lock(hashtext('sortie.migrate'), \
             hashtext(COALESCE(current_schema(), '')))",
            &[],
        )?;
        if tx
            .row("SELECT current_schema()::text", &[])?
            .and_then(|row| row.get::<_, Option<String>>(0))
            .is_none()
        {
            return Err(LedgerError::Database(
                format!(
                    "{target}: no schema of the search_path exists to create the ledger in \
                 (create it, or fix `options=-c search_path=...` in the URL)"
                )
                .into(),
            ));
        }
        tx.batch(
            "CREATE TABLE IF NOT EXISTS sortie_schema (\
                 only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row), \
                 version BIGINT NOT NULL)",
        )?;
        let found: i64 = tx
            .row("SELECT version FROM sortie_schema", &[])?
            .map(|row| row.get(0))
            .unwrap_or(0);
        if found > SCHEMA_VERSION {
            return Err(LedgerError::TooNew {
                path: target.to_string(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        let start = usize::try_from(found)
            .map_err(|_| LedgerError::Corrupt(format!("negative schema version {found}")))?;
        for sql in MIGRATIONS.iter().skip(start) {
            tx.batch(sql)?;
        }
        if start < MIGRATIONS.len() {
            tx.exec(
                "INSERT INTO sortie_schema (only_row, version) VALUES (TRUE, $1) \
                 ON CONFLICT (only_row) DO UPDATE SET version = excluded.version",
                &[&SCHEMA_VERSION],
            )?;
        }
        Ok(())
    })
}

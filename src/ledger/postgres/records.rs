//! SQL for the retry queue, holds, run history, the outbox, blocker checks, usage and
//! hook deliveries. Each function is the SQLite ledger's (src/ledger/sqlite/*.rs) in
//! Postgres' dialect; the behaviour is the same.

use postgres::Row;

use super::claims::corrupt;
use super::pool::Conn;
use crate::ledger::codec::{
    expiry_millis, follow_up_text, from_millis, legacy_follow_up, outbox_state_name,
    parse_follow_up, parse_outbox_state, parse_phase, parse_rate_limits, phase_name,
    rate_limits_text, to_millis, to_u32,
};
use crate::ledger::{
    ClaimKey, Hold, HookDelivery, HookDeliveryState, LedgerError, OutboxEntry, RetryEntry,
    RunRecord, RunUsage, Timestamp, UsageTotal,
};

fn get<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, LedgerError> {
    row.try_get(index).map_err(corrupt)
}

fn key_at(row: &Row, first: usize) -> Result<ClaimKey, LedgerError> {
    Ok(ClaimKey::new(
        get::<String>(row, first)?,
        get::<String>(row, first + 1)?,
        get::<String>(row, first + 2)?,
    ))
}

fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// ----- retry queue -----

pub(super) fn schedule_retry(conn: &mut Conn, entry: &RetryEntry) -> Result<(), LedgerError> {
    conn.exec(
        "INSERT INTO retries (tracker, ticket_id, role, stage, failed_attempt, due_at, reason_code) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tracker, ticket_id, role) DO UPDATE SET \
         stage = excluded.stage, failed_attempt = excluded.failed_attempt, \
         due_at = excluded.due_at, reason_code = excluded.reason_code",
        &[
            &entry.key.tracker,
            &entry.key.ticket_id,
            &entry.key.role,
            &entry.stage,
            &i64::from(entry.failed_attempt),
            &to_millis(entry.due_at),
            &entry.reason_code,
        ],
    )?;
    Ok(())
}

pub(super) fn retries(
    conn: &mut Conn,
    tracker: Option<&str>,
) -> Result<Vec<RetryEntry>, LedgerError> {
    conn.rows(
        "SELECT tracker, ticket_id, role, stage, failed_attempt, due_at, reason_code \
         FROM retries WHERE $1::text IS NULL OR tracker = $1::text \
         ORDER BY due_at, tracker, ticket_id, role",
        &[&tracker],
    )?
    .iter()
    .map(|row| {
        Ok(RetryEntry {
            key: key_at(row, 0)?,
            stage: get(row, 3)?,
            failed_attempt: to_u32(get(row, 4)?, "failed_attempt")?,
            due_at: from_millis(get(row, 5)?)?,
            reason_code: get(row, 6)?,
        })
    })
    .collect()
}

pub(super) fn clear_retry(conn: &mut Conn, key: &ClaimKey) -> Result<bool, LedgerError> {
    Ok(conn.exec(
        "DELETE FROM retries WHERE tracker = $1 AND ticket_id = $2 AND role = $3",
        &[&key.tracker, &key.ticket_id, &key.role],
    )? > 0)
}

// ----- holds -----

pub(super) fn put_hold(conn: &mut Conn, hold: &Hold) -> Result<(), LedgerError> {
    conn.exec(
        "INSERT INTO holds \
         (tracker, ticket_id, role, status, reason_code, created_at, ticket_updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tracker, ticket_id, role) DO UPDATE SET \
         status = excluded.status, reason_code = excluded.reason_code, \
         created_at = excluded.created_at, ticket_updated_at = excluded.ticket_updated_at",
        &[
            &hold.key.tracker,
            &hold.key.ticket_id,
            &hold.key.role,
            &hold.status,
            &hold.reason_code,
            &to_millis(hold.created_at),
            &hold.ticket_updated_at.map(to_millis),
        ],
    )?;
    Ok(())
}

pub(super) fn holds(conn: &mut Conn, tracker: Option<&str>) -> Result<Vec<Hold>, LedgerError> {
    conn.rows(
        "SELECT tracker, ticket_id, role, status, reason_code, created_at, ticket_updated_at \
         FROM holds WHERE $1::text IS NULL OR tracker = $1::text ORDER BY tracker, ticket_id, role",
        &[&tracker],
    )?
    .iter()
    .map(|row| {
        Ok(Hold {
            key: key_at(row, 0)?,
            status: get(row, 3)?,
            reason_code: get(row, 4)?,
            created_at: from_millis(get(row, 5)?)?,
            ticket_updated_at: get::<Option<i64>>(row, 6)?.map(from_millis).transpose()?,
        })
    })
    .collect()
}

pub(super) fn clear_hold(conn: &mut Conn, key: &ClaimKey) -> Result<bool, LedgerError> {
    Ok(conn.exec(
        "DELETE FROM holds WHERE tracker = $1 AND ticket_id = $2 AND role = $3",
        &[&key.tracker, &key.ticket_id, &key.role],
    )? > 0)
}

// ----- run history -----

macro_rules! run_columns {
    () => {
        "run_id, tracker, ticket_id, role, stage, stage_attempt, claimer_id, phase, \
         outcome, reason_code, log_path, started_at, finished_at, session_id, route, title, \
         agent, model, rate_limits"
    };
}

pub(super) fn record_run(conn: &mut Conn, run: &RunRecord) -> Result<(), LedgerError> {
    conn.exec(
        concat!(
            "INSERT INTO runs (",
            run_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) \
             ON CONFLICT (run_id) DO UPDATE SET tracker = excluded.tracker, \
             ticket_id = excluded.ticket_id, role = excluded.role, stage = excluded.stage, \
             stage_attempt = excluded.stage_attempt, claimer_id = excluded.claimer_id, \
             phase = excluded.phase, outcome = excluded.outcome, \
             reason_code = excluded.reason_code, log_path = excluded.log_path, \
             started_at = excluded.started_at, finished_at = excluded.finished_at, \
             session_id = COALESCE(excluded.session_id, runs.session_id), \
             route = COALESCE(excluded.route, runs.route), \
             title = COALESCE(excluded.title, runs.title), \
             agent = COALESCE(excluded.agent, runs.agent), \
             model = COALESCE(excluded.model, runs.model), \
             rate_limits = COALESCE(excluded.rate_limits, runs.rate_limits)"
        ),
        &[
            &run.run_id,
            &run.key.tracker,
            &run.key.ticket_id,
            &run.key.role,
            &run.stage,
            &i64::from(run.stage_attempt),
            &run.claimer_id.as_str(),
            &phase_name(run.phase),
            &run.outcome,
            &run.reason_code,
            &run.log_path,
            &to_millis(run.started_at),
            &run.finished_at.map(to_millis),
            &run.session_id,
            &run.route,
            &run.title,
            &run.agent,
            &run.model,
            &rate_limits_text(&run.rate_limits),
        ],
    )?;
    Ok(())
}

fn decode_run(row: &Row) -> Result<RunRecord, LedgerError> {
    Ok(RunRecord {
        run_id: get(row, 0)?,
        key: key_at(row, 1)?,
        stage: get(row, 4)?,
        stage_attempt: to_u32(get(row, 5)?, "stage_attempt")?,
        claimer_id: get::<String>(row, 6)?.into(),
        phase: parse_phase(&get::<String>(row, 7)?)?,
        outcome: get(row, 8)?,
        reason_code: get(row, 9)?,
        log_path: get(row, 10)?,
        started_at: from_millis(get(row, 11)?)?,
        finished_at: get::<Option<i64>>(row, 12)?.map(from_millis).transpose()?,
        session_id: get(row, 13)?,
        route: get(row, 14)?,
        title: get(row, 15)?,
        agent: get(row, 16)?,
        model: get(row, 17)?,
        rate_limits: parse_rate_limits(get::<Option<String>>(row, 18)?.as_deref())?,
    })
}

fn runs(rows: Vec<Row>) -> Result<Vec<RunRecord>, LedgerError> {
    rows.iter().map(decode_run).collect()
}

pub(super) fn recent_runs(
    conn: &mut Conn,
    tracker: Option<&str>,
    limit: usize,
) -> Result<Vec<RunRecord>, LedgerError> {
    runs(conn.rows(
        concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE $1::text IS NULL OR tracker = $1::text \
             ORDER BY started_at DESC, run_id DESC LIMIT $2"
        ),
        &[&tracker, &limit_param(limit)],
    )?)
}

pub(super) fn runs_since(
    conn: &mut Conn,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<RunRecord>, LedgerError> {
    runs(conn.rows(
        concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE tracker = $1 AND started_at >= $2 ORDER BY started_at, run_id"
        ),
        &[&tracker, &to_millis(since)],
    )?)
}

pub(super) fn run(conn: &mut Conn, run_id: &str) -> Result<Option<RunRecord>, LedgerError> {
    conn.row(
        concat!("SELECT ", run_columns!(), " FROM runs WHERE run_id = $1"),
        &[&run_id],
    )?
    .as_ref()
    .map(decode_run)
    .transpose()
}

pub(super) fn ticket_runs(
    conn: &mut Conn,
    tracker: &str,
    ticket_id: &str,
    limit: usize,
) -> Result<Vec<RunRecord>, LedgerError> {
    runs(conn.rows(
        concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE tracker = $1 AND ticket_id = $2 \
             ORDER BY started_at DESC, run_id DESC LIMIT $3"
        ),
        &[&tracker, &ticket_id, &limit_param(limit)],
    )?)
}

pub(super) fn last_session(
    conn: &mut Conn,
    key: &ClaimKey,
) -> Result<Option<RunRecord>, LedgerError> {
    conn.row(
        concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE tracker = $1 AND ticket_id = $2 AND role = $3 \
             AND session_id IS NOT NULL ORDER BY stage_attempt DESC, started_at DESC LIMIT 1"
        ),
        &[&key.tracker, &key.ticket_id, &key.role],
    )?
    .as_ref()
    .map(decode_run)
    .transpose()
}

// ----- blocker checks -----

pub(super) fn blocker_checks(
    conn: &mut Conn,
    tracker: &str,
) -> Result<Vec<(String, Timestamp)>, LedgerError> {
    conn.rows(
        "SELECT ticket_id, checked_at FROM blocker_checks WHERE tracker = $1 ORDER BY ticket_id",
        &[&tracker],
    )?
    .iter()
    .map(|row| Ok((get(row, 0)?, from_millis(get(row, 1)?)?)))
    .collect()
}

pub(super) fn record_blocker_check(
    conn: &mut Conn,
    tracker: &str,
    ticket_id: &str,
    at: Timestamp,
) -> Result<(), LedgerError> {
    conn.exec(
        "INSERT INTO blocker_checks (tracker, ticket_id, checked_at) VALUES ($1, $2, $3) \
         ON CONFLICT (tracker, ticket_id) DO UPDATE SET checked_at = excluded.checked_at",
        &[&tracker, &ticket_id, &to_millis(at)],
    )?;
    Ok(())
}

// ----- outbox -----

macro_rules! outbox_columns {
    () => {
        "idempotency_key, tracker, ticket_id, role, stage, stage_attempt, run_id, outcome, \
         from_status, to_status, comment_body, state, write_attempts, next_attempt_at, \
         last_error, created_at, follow_up"
    };
}

/// Insert `entry` unless its key is stored, with its write lease held by `holder` until
/// `lease_until` (ms); whether it was inserted.
pub(super) fn outbox_put(
    conn: &mut Conn,
    entry: &OutboxEntry,
    holder: &str,
    lease_until: i64,
) -> Result<bool, LedgerError> {
    let inserted = conn.exec(
        concat!(
            "INSERT INTO outbox (",
            outbox_columns!(),
            ", lease_holder, lease_expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15, $16, $17, $18, $19) ON CONFLICT (idempotency_key) DO NOTHING"
        ),
        &[
            &entry.idempotency_key,
            &entry.key.tracker,
            &entry.key.ticket_id,
            &entry.key.role,
            &entry.stage,
            &i64::from(entry.stage_attempt),
            &entry.run_id,
            &entry.outcome,
            &entry.from_status,
            &entry.to_status,
            &entry.comment_body,
            &outbox_state_name(entry.state),
            &i64::from(entry.write_attempts),
            &to_millis(entry.next_attempt_at),
            &entry.last_error,
            &to_millis(entry.created_at),
            &follow_up_text(&entry.follow_up),
            &holder,
            &lease_until,
        ],
    )?;
    Ok(inserted > 0)
}

pub(super) fn outbox_take(
    conn: &mut Conn,
    idempotency_key: &str,
    holder: &str,
    lease: std::time::Duration,
    now: Timestamp,
) -> Result<bool, LedgerError> {
    Ok(conn.exec(
        "UPDATE outbox SET lease_holder = $2, lease_expires_at = $4 \
         WHERE idempotency_key = $1 AND state IN ('pending', 'comment_posted') \
         AND (lease_holder IS NULL OR lease_holder = $2 OR lease_expires_at <= $3)",
        &[
            &idempotency_key,
            &holder,
            &to_millis(now),
            &expiry_millis(now, lease),
        ],
    )? > 0)
}

pub(super) fn outbox_release(
    conn: &mut Conn,
    idempotency_key: &str,
    holder: &str,
) -> Result<(), LedgerError> {
    conn.exec(
        "UPDATE outbox SET lease_holder = NULL, lease_expires_at = NULL \
         WHERE idempotency_key = $1 AND lease_holder = $2",
        &[&idempotency_key, &holder],
    )?;
    Ok(())
}

pub(super) fn outbox_update(conn: &mut Conn, entry: &OutboxEntry) -> Result<(), LedgerError> {
    conn.exec(
        "UPDATE outbox SET state = $2, write_attempts = $3, next_attempt_at = $4, \
         last_error = $5 WHERE idempotency_key = $1",
        &[
            &entry.idempotency_key,
            &outbox_state_name(entry.state),
            &i64::from(entry.write_attempts),
            &to_millis(entry.next_attempt_at),
            &entry.last_error,
        ],
    )?;
    Ok(())
}

fn decode_outbox(row: &Row) -> Result<OutboxEntry, LedgerError> {
    let outcome: String = get(row, 7)?;
    let stage: String = get(row, 4)?;
    let to_status: String = get(row, 9)?;
    let follow_up = match get::<Option<String>>(row, 16)? {
        Some(text) => parse_follow_up(&text)?,
        None => legacy_follow_up(&outcome, to_status == stage),
    };
    Ok(OutboxEntry {
        idempotency_key: get(row, 0)?,
        key: key_at(row, 1)?,
        stage,
        stage_attempt: to_u32(get(row, 5)?, "stage_attempt")?,
        run_id: get(row, 6)?,
        outcome,
        from_status: get(row, 8)?,
        to_status,
        comment_body: get(row, 10)?,
        state: parse_outbox_state(&get::<String>(row, 11)?)?,
        write_attempts: to_u32(get(row, 12)?, "write_attempts")?,
        next_attempt_at: from_millis(get(row, 13)?)?,
        last_error: get(row, 14)?,
        created_at: from_millis(get(row, 15)?)?,
        follow_up,
    })
}

pub(super) fn outbox_pending(
    conn: &mut Conn,
    tracker: &str,
) -> Result<Vec<OutboxEntry>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE tracker = $1 AND state IN ('pending', 'comment_posted') \
             ORDER BY created_at, idempotency_key"
        ),
        &[&tracker],
    )?
    .iter()
    .map(decode_outbox)
    .collect()
}

pub(super) fn outbox_get(
    conn: &mut Conn,
    idempotency_key: &str,
) -> Result<Option<OutboxEntry>, LedgerError> {
    conn.row(
        concat!(
            "SELECT ",
            outbox_columns!(),
            " FROM outbox WHERE idempotency_key = $1"
        ),
        &[&idempotency_key],
    )?
    .as_ref()
    .map(decode_outbox)
    .transpose()
}

// ----- usage -----

pub(super) fn record_usage(conn: &mut Conn, u: &RunUsage) -> Result<(), LedgerError> {
    conn.exec(
        "INSERT INTO run_usage (run_id, tracker, ticket_id, role, tokens_in, tokens_out, \
         cost_usd, recorded_at, cache_read_tokens, cache_write_tokens, reasoning_tokens, \
         agent, model) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (run_id) DO UPDATE SET \
         tracker = excluded.tracker, ticket_id = excluded.ticket_id, role = excluded.role, \
         tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out, \
         cost_usd = excluded.cost_usd, recorded_at = excluded.recorded_at, \
         cache_read_tokens = excluded.cache_read_tokens, \
         cache_write_tokens = excluded.cache_write_tokens, \
         reasoning_tokens = excluded.reasoning_tokens, agent = excluded.agent, \
         model = excluded.model",
        &[
            &u.run_id,
            &u.key.tracker,
            &u.key.ticket_id,
            &u.key.role,
            &stored(u.tokens_in),
            &stored(u.tokens_out),
            &u.cost_usd,
            &to_millis(u.recorded_at),
            &stored(u.cache_read_tokens),
            &stored(u.cache_write_tokens),
            &stored(u.reasoning_tokens),
            &u.agent,
            &u.model,
        ],
    )?;
    Ok(())
}

macro_rules! total_columns {
    () => {
        "COUNT(*), COALESCE(SUM(u.tokens_in), 0)::BIGINT, COALESCE(SUM(u.tokens_out), 0)::BIGINT, \
         COALESCE(SUM(u.cache_read_tokens), 0)::BIGINT, \
         COALESCE(SUM(u.cache_write_tokens), 0)::BIGINT, \
         COALESCE(SUM(u.reasoning_tokens), 0)::BIGINT, \
         COALESCE(SUM(u.cost_usd), 0.0)::DOUBLE PRECISION, \
         COUNT(*) FILTER (WHERE u.run_id IS NOT NULL AND u.cost_usd IS NULL), \
         COUNT(*) FILTER (WHERE u.run_id IS NULL)"
    };
}

fn total_from(
    row: &Row,
    first: usize,
    ticket_id: String,
    role: String,
) -> Result<UsageTotal, LedgerError> {
    let count = |i: usize| -> Result<u64, LedgerError> {
        Ok(u64::try_from(get::<i64>(row, i)?).unwrap_or(0))
    };
    Ok(UsageTotal {
        ticket_id,
        role,
        runs: u32::try_from(get::<i64>(row, first)?).unwrap_or(u32::MAX),
        tokens_in: count(first + 1)?,
        tokens_out: count(first + 2)?,
        cache_read_tokens: count(first + 3)?,
        cache_write_tokens: count(first + 4)?,
        reasoning_tokens: count(first + 5)?,
        cost_usd: get(row, first + 6)?,
        runs_without_cost: u32::try_from(get::<i64>(row, first + 7)?).unwrap_or(u32::MAX),
        runs_without_usage: u32::try_from(get::<i64>(row, first + 8)?).unwrap_or(u32::MAX),
    })
}

pub(super) fn usage_totals(conn: &mut Conn, tracker: &str) -> Result<Vec<UsageTotal>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT r.ticket_id, r.role, ",
            total_columns!(),
            " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
             WHERE r.tracker = $1 GROUP BY r.ticket_id, r.role ORDER BY r.ticket_id, r.role"
        ),
        &[&tracker],
    )?
    .iter()
    .map(|row| total_from(row, 2, get(row, 0)?, get(row, 1)?))
    .collect()
}

pub(super) fn usage_by_role_since(
    conn: &mut Conn,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<UsageTotal>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT r.role, ",
            total_columns!(),
            " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
             WHERE r.tracker = $1 AND r.started_at >= $2 GROUP BY r.role ORDER BY r.role"
        ),
        &[&tracker, &to_millis(since)],
    )?
    .iter()
    .map(|row| total_from(row, 1, String::new(), get(row, 0)?))
    .collect()
}

pub(super) fn ticket_usage(
    conn: &mut Conn,
    tracker: &str,
    ticket_id: &str,
) -> Result<UsageTotal, LedgerError> {
    let row = conn.row(
        concat!(
            "SELECT ",
            total_columns!(),
            " FROM runs r LEFT JOIN run_usage u ON u.run_id = r.run_id \
             WHERE r.tracker = $1 AND r.ticket_id = $2"
        ),
        &[&tracker, &ticket_id],
    )?;
    match row {
        Some(row) => total_from(&row, 0, ticket_id.to_string(), String::new()),
        None => Ok(UsageTotal::default()),
    }
}

pub(super) fn usage_since(
    conn: &mut Conn,
    tracker: &str,
    since: Timestamp,
) -> Result<Vec<RunUsage>, LedgerError> {
    let count = |row: &Row, i: usize| -> Result<u64, LedgerError> {
        Ok(u64::try_from(get::<i64>(row, i)?).unwrap_or(0))
    };
    conn.rows(
        "SELECT u.run_id, u.tracker, u.ticket_id, u.role, u.tokens_in, u.tokens_out, \
         u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens, u.cost_usd, \
         u.recorded_at, u.agent, u.model FROM run_usage u JOIN runs r ON r.run_id = u.run_id \
         WHERE r.tracker = $1 AND r.started_at >= $2 ORDER BY u.run_id",
        &[&tracker, &to_millis(since)],
    )?
    .iter()
    .map(|row| {
        Ok(RunUsage {
            run_id: get(row, 0)?,
            key: crate::ledger::ClaimKey::new(
                get::<String>(row, 1)?,
                get::<String>(row, 2)?,
                get::<String>(row, 3)?,
            ),
            tokens_in: count(row, 4)?,
            tokens_out: count(row, 5)?,
            cache_read_tokens: count(row, 6)?,
            cache_write_tokens: count(row, 7)?,
            reasoning_tokens: count(row, 8)?,
            cost_usd: get(row, 9)?,
            recorded_at: from_millis(get(row, 10)?)?,
            agent: get(row, 11)?,
            model: get(row, 12)?,
        })
    })
    .collect()
}

// ----- hook deliveries -----

macro_rules! hook_columns {
    () => {
        "delivery_id, sink_id, event, payload, state, attempts, last_error, \
         next_attempt_at, created_at, updated_at"
    };
}

fn hook_state_name(state: HookDeliveryState) -> &'static str {
    match state {
        HookDeliveryState::Delivered => "delivered",
        HookDeliveryState::Failed => "failed",
        HookDeliveryState::GaveUp => "gave_up",
    }
}

fn parse_hook_state(name: &str) -> Result<HookDeliveryState, LedgerError> {
    match name {
        "delivered" => Ok(HookDeliveryState::Delivered),
        "failed" => Ok(HookDeliveryState::Failed),
        "gave_up" => Ok(HookDeliveryState::GaveUp),
        other => Err(LedgerError::Corrupt(format!(
            "unknown hook delivery state {other:?}"
        ))),
    }
}

fn decode_hook(row: &Row) -> Result<HookDelivery, LedgerError> {
    Ok(HookDelivery {
        delivery_id: get(row, 0)?,
        sink_id: get(row, 1)?,
        event: get(row, 2)?,
        payload: get(row, 3)?,
        state: parse_hook_state(&get::<String>(row, 4)?)?,
        attempts: to_u32(get(row, 5)?, "hook attempts")?,
        last_error: get(row, 6)?,
        next_attempt_at: get::<Option<i64>>(row, 7)?.map(from_millis).transpose()?,
        created_at: from_millis(get(row, 8)?)?,
        updated_at: from_millis(get(row, 9)?)?,
    })
}

pub(super) fn hook_delivery(
    conn: &mut Conn,
    delivery_id: &str,
    sink_id: &str,
) -> Result<Option<HookDelivery>, LedgerError> {
    conn.row(
        concat!(
            "SELECT ",
            hook_columns!(),
            " FROM hook_deliveries WHERE delivery_id = $1 AND sink_id = $2"
        ),
        &[&delivery_id, &sink_id],
    )?
    .as_ref()
    .map(decode_hook)
    .transpose()
}

pub(super) fn record_hook_delivery(conn: &mut Conn, d: &HookDelivery) -> Result<(), LedgerError> {
    conn.exec(
        concat!(
            "INSERT INTO hook_deliveries (",
            hook_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (delivery_id, sink_id) DO UPDATE SET \
             event = excluded.event, payload = excluded.payload, state = excluded.state, \
             attempts = excluded.attempts, last_error = excluded.last_error, \
             next_attempt_at = excluded.next_attempt_at, updated_at = excluded.updated_at"
        ),
        &[
            &d.delivery_id,
            &d.sink_id,
            &d.event,
            &d.payload,
            &hook_state_name(d.state),
            &i64::from(d.attempts),
            &d.last_error,
            &d.next_attempt_at.map(to_millis),
            &to_millis(d.created_at),
            &to_millis(d.updated_at),
        ],
    )?;
    Ok(())
}

pub(super) fn hook_failures(
    conn: &mut Conn,
    limit: usize,
) -> Result<Vec<HookDelivery>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT ",
            hook_columns!(),
            " FROM hook_deliveries WHERE state IN ('failed', 'gave_up') \
             ORDER BY updated_at DESC, delivery_id, sink_id LIMIT $1"
        ),
        &[&limit_param(limit)],
    )?
    .iter()
    .map(decode_hook)
    .collect()
}

pub(super) fn hook_retries_due(
    conn: &mut Conn,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<HookDelivery>, LedgerError> {
    conn.rows(
        concat!(
            "SELECT ",
            hook_columns!(),
            " FROM hook_deliveries WHERE state = 'failed' AND next_attempt_at <= $1 \
             ORDER BY next_attempt_at, delivery_id, sink_id LIMIT $2"
        ),
        &[&to_millis(now), &limit_param(limit)],
    )?
    .iter()
    .map(decode_hook)
    .collect()
}

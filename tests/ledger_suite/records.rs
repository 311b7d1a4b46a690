//! The outbox, the retry queue, holds and run history, on every backend.

use chrono::DateTime;
use sortie::ledger::{
    ClaimKey, FollowUp, Hold, Ledger, OutboxEntry, OutboxPut, OutboxState, RetryEntry, RunPhase,
    RunRecord, Scope, Timestamp,
};

use super::Backend;

fn at(secs: i64) -> Timestamp {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn key(ticket: &str, role: &str) -> ClaimKey {
    ClaimKey::new("local", ticket, role)
}

fn outbox_entry(idempotency_key: &str, tracker: &str, created: i64) -> OutboxEntry {
    OutboxEntry {
        idempotency_key: idempotency_key.into(),
        key: ClaimKey::new(tracker, "T-1", "backend"),
        stage: "ready".into(),
        stage_attempt: 2,
        run_id: "run-1".into(),
        outcome: "success".into(),
        from_status: "in-progress".into(),
        to_status: "review".into(),
        comment_body: "Done.\n\n```yaml sortie:success\nrole: backend\n```\n".into(),
        state: OutboxState::Pending,
        write_attempts: 0,
        next_attempt_at: at(created),
        last_error: None,
        created_at: at(created),
        follow_up: FollowUp::Clear,
    }
}

/// Store `entry` as its run would: under a claim of its key.
fn put(ledger: &dyn Ledger, entry: &OutboxEntry) -> OutboxPut {
    crate::common::store_crashed_outcome(ledger, entry, entry.created_at)
}

pub fn outbox_put_is_idempotent_on_the_key(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let entry = outbox_entry("k1", "local", 0);
    assert_eq!(put(&*ledger, &entry), OutboxPut::Stored);

    let mut different = entry.clone();
    different.comment_body = "a second rendering must not replace the first".into();
    assert_eq!(put(&*ledger, &different), OutboxPut::Exists);
    assert_eq!(ledger.outbox_get("k1").unwrap(), Some(entry));
    assert_eq!(ledger.outbox_get("missing").unwrap(), None);
}

pub fn outbox_pending_and_update_round_trip(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let older = outbox_entry("older", "local", 0);
    let newer = outbox_entry("newer", "local", 10);
    let elsewhere = outbox_entry("elsewhere", "github:o/r", 5);
    for e in [&newer, &older, &elsewhere] {
        assert_eq!(put(&*ledger, e), OutboxPut::Stored);
    }
    assert_eq!(
        ledger.outbox_pending("local").unwrap(),
        vec![older.clone(), newer.clone()]
    );

    let mut posted = older.clone();
    posted.state = OutboxState::CommentPosted;
    posted.write_attempts = 3;
    posted.next_attempt_at = at(60);
    posted.last_error = Some("HTTP 502 from tracker".into());
    ledger.outbox_update(&posted).unwrap();
    assert_eq!(ledger.outbox_get("older").unwrap(), Some(posted.clone()));
    assert_eq!(
        ledger.outbox_pending("local").unwrap(),
        vec![posted.clone(), newer.clone()]
    );

    let mut done = posted.clone();
    done.state = OutboxState::Done;
    done.last_error = None;
    ledger.outbox_update(&done).unwrap();
    let mut dropped = newer.clone();
    dropped.state = OutboxState::Dropped;
    dropped.last_error = Some("ticket closed by a person".into());
    ledger.outbox_update(&dropped).unwrap();
    assert!(ledger.outbox_pending("local").unwrap().is_empty());
    assert_eq!(ledger.outbox_get("newer").unwrap(), Some(dropped));
    assert_eq!(
        ledger.outbox_pending("github:o/r").unwrap(),
        vec![elsewhere]
    );
}

pub fn outbox_entries_survive_reopening_the_ledger(backend: &dyn Backend) {
    let store = backend.store();
    let entry = outbox_entry("k1", "local", 0);
    put(&*store.open(), &entry);
    let reopened = store.open();
    assert_eq!(reopened.outbox_pending("local").unwrap(), vec![entry]);
    // Ordinary writes still work after the durable one.
    put(&*reopened, &outbox_entry("k2", "local", 1));
    assert_eq!(reopened.outbox_pending("local").unwrap().len(), 2);
}
pub fn retries_are_queued_replaced_listed_by_due_time_and_cleared(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let retry = |ticket: &str, failed: u32, due: i64| RetryEntry {
        key: key(ticket, "backend"),
        stage: "ready".into(),
        failed_attempt: failed,
        due_at: at(due),
        reason_code: "agent_exit_nonzero".into(),
    };
    ledger.schedule_retry(&retry("T-1", 1, 50)).unwrap();
    ledger.schedule_retry(&retry("T-2", 1, 20)).unwrap();
    // A later failure of the same key replaces its entry.
    ledger.schedule_retry(&retry("T-1", 2, 10)).unwrap();
    assert_eq!(
        ledger.retries(Scope::All).unwrap(),
        vec![retry("T-1", 2, 10), retry("T-2", 1, 20)]
    );
    assert!(ledger.clear_retry(&key("T-1", "backend")).unwrap());
    assert!(!ledger.clear_retry(&key("T-1", "backend")).unwrap());
    assert_eq!(
        ledger.retries(Scope::All).unwrap(),
        vec![retry("T-2", 1, 20)]
    );
}

pub fn holds_are_recorded_replaced_and_cleared(backend: &dyn Backend) {
    let ledger = backend.fresh();
    // The ticket's updated time is kept as written, or its absence (issue #52, item 8).
    let hold = |ticket: &str, status: &str| Hold {
        key: key(ticket, "qa"),
        status: status.into(),
        reason_code: "max_attempts".into(),
        created_at: at(5),
        ticket_updated_at: (ticket == "T-1").then(|| at(4)),
    };
    ledger.put_hold(&hold("T-2", "review")).unwrap();
    ledger.put_hold(&hold("T-1", "review")).unwrap();
    ledger.put_hold(&hold("T-1", "testing")).unwrap();
    assert_eq!(
        ledger.holds(Scope::All).unwrap(),
        vec![hold("T-1", "testing"), hold("T-2", "review")]
    );
    assert!(ledger.clear_hold(&key("T-2", "qa")).unwrap());
    assert!(!ledger.clear_hold(&key("T-2", "qa")).unwrap());
    assert_eq!(
        ledger.holds(Scope::All).unwrap(),
        vec![hold("T-1", "testing")]
    );
}

pub fn runs_are_upserted_by_run_id_and_listed_newest_first(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let run = |id: &str, started: i64| RunRecord {
        run_id: id.into(),
        key: key("T-1", "backend"),
        stage: "ready".into(),
        stage_attempt: 1,
        claimer_id: "host:1:a".into(),
        phase: RunPhase::Running,
        outcome: None,
        reason_code: None,
        log_path: None,
        started_at: at(started),
        session_id: None,
        route: None,
        title: None,
        agent: None,
        model: None,
        rate_limits: Vec::new(),
        finished_at: None,
    };
    // The title, agent and model are recorded when the run starts (#37: the agent and
    // model on run history); a later record without them keeps them.
    let mut started = run("r1", 0);
    started.title = Some("Export the invoices".into());
    started.agent = Some("codex".into());
    started.model = Some("gpt-5-codex".into());
    ledger.record_run(&started).unwrap();
    ledger.record_run(&run("r3", 20)).unwrap();
    ledger.record_run(&run("r2", 10)).unwrap();

    let mut finished = run("r1", 0);
    finished.phase = RunPhase::Finished;
    finished.outcome = Some("failure".into());
    finished.reason_code = Some("timeout".into());
    finished.log_path = Some("state/logs/r1.log".into());
    finished.finished_at = Some(at(3600));
    ledger.record_run(&finished).unwrap();
    finished.title = Some("Export the invoices".into());
    finished.agent = Some("codex".into());
    finished.model = Some("gpt-5-codex".into());

    assert_eq!(
        ledger.recent_runs(Scope::All, 10).unwrap(),
        vec![run("r3", 20), run("r2", 10), finished]
    );
    assert_eq!(
        ledger.recent_runs(Scope::All, 1).unwrap(),
        vec![run("r3", 20)]
    );
    assert!(ledger.recent_runs(Scope::All, 0).unwrap().is_empty());
}

/// Issue #39 (items 16, 18): the rate-limit reports a run's agent made are stored on its
/// history row when it ends, and a later record without them (written at another phase)
/// keeps them, like the title.
pub fn agent_rate_limits_on_a_run_record_are_kept_once_recorded(backend: &dyn Backend) {
    use sortie::rate_limit::RateLimit;
    let ledger = backend.fresh();
    let mut run = RunRecord {
        run_id: "r1".into(),
        key: key("T-1", "backend"),
        stage: "ready".into(),
        stage_attempt: 1,
        claimer_id: "host:1:a".into(),
        phase: RunPhase::Running,
        outcome: None,
        reason_code: None,
        log_path: None,
        started_at: at(0),
        session_id: None,
        route: None,
        title: None,
        agent: Some("claude-code".into()),
        model: None,
        rate_limits: Vec::new(),
        finished_at: None,
    };
    ledger.record_run(&run).unwrap();
    assert!(ledger.run("r1").unwrap().unwrap().rate_limits.is_empty());
    let limits = vec![
        RateLimit {
            limit_type: "five_hour".into(),
            status: "allowed_warning".into(),
            resets_at: Some(at(18_000)),
            utilization: Some(0.82),
            overage_status: Some("rejected".into()),
            is_using_overage: Some(false),
            surpassed_threshold: Some(0.8),
            observed_at: at(60),
        },
        RateLimit {
            limit_type: "a_limit_from_a_newer_cli".into(),
            status: "queued".into(),
            resets_at: None,
            utilization: None,
            overage_status: None,
            is_using_overage: None,
            surpassed_threshold: None,
            observed_at: at(61),
        },
    ];
    run.rate_limits = limits.clone();
    ledger.record_run(&run).unwrap();
    run.rate_limits = Vec::new();
    run.phase = RunPhase::Finished;
    run.outcome = Some("success".into());
    run.finished_at = Some(at(120));
    ledger.record_run(&run).unwrap();
    let stored = ledger.run("r1").unwrap().unwrap();
    assert_eq!(stored.rate_limits, limits);
    assert_eq!(stored.outcome.as_deref(), Some("success"));
    assert_eq!(
        ledger.runs_since("local", at(0)).unwrap()[0].rate_limits,
        limits
    );
}

/// Issue #37: the usage rows of the runs started in a window (what `sortie stats` and
/// the day limit read), a cost never reported kept as unknown.
pub fn usage_since_lists_the_usage_of_the_runs_started_in_the_window(backend: &dyn Backend) {
    use sortie::ledger::RunUsage;
    let ledger = backend.fresh();
    let run = |id: &str, tracker: &str, started: i64| RunRecord {
        run_id: id.into(),
        key: ClaimKey::new(tracker, "T-1", "backend"),
        stage: "ready".into(),
        stage_attempt: 1,
        claimer_id: "host:1:a".into(),
        phase: RunPhase::Finished,
        outcome: Some("success".into()),
        reason_code: None,
        log_path: None,
        started_at: at(started),
        session_id: None,
        route: None,
        title: None,
        agent: None,
        model: None,
        rate_limits: Vec::new(),
        finished_at: Some(at(started + 5)),
    };
    let usage = |id: &str, tracker: &str, cost: Option<f64>| RunUsage {
        run_id: id.into(),
        key: ClaimKey::new(tracker, "T-1", "backend"),
        tokens_in: 100,
        tokens_out: 20,
        cache_read_tokens: 3,
        cache_write_tokens: 4,
        reasoning_tokens: 5,
        cost_usd: cost,
        recorded_at: at(60),
        agent: Some("codex".into()),
        model: cost.map(|_| "gpt-5-codex".into()),
    };
    for (id, tracker, started, cost) in [
        ("before", "local", 0, Some(1.0)),
        ("priced", "local", 100, Some(0.25)),
        ("unknown", "local", 200, None),
        ("other", "github:o/r", 150, Some(2.0)),
    ] {
        ledger.record_run(&run(id, tracker, started)).unwrap();
        ledger.record_usage(&usage(id, tracker, cost)).unwrap();
    }
    let got = ledger.usage_since("local", at(100)).unwrap();
    assert_eq!(
        got,
        [
            usage("priced", "local", Some(0.25)),
            usage("unknown", "local", None)
        ]
    );
    assert!(ledger.usage_since("local", at(201)).unwrap().is_empty());
}

/// Two runs as a sortie wrote them before run history kept the agent and model (SQLite
/// schema 7, PostgreSQL 5): one with a usage row naming its agent, one without usage (a
/// `command` agent).
pub const ROWS_WITHOUT_RUN_AGENTS: &str = "
    INSERT INTO runs (run_id, tracker, ticket_id, role, stage, stage_attempt,
                      claimer_id, phase, outcome, started_at, finished_at)
    VALUES ('old-1', 'local', '1', 'backend', 'ready', 1, 'h:1:x', 'finished',
            'success', 1764579600000, 1764579660000),
           ('old-2', 'local', '2', 'backend', 'ready', 1, 'h:1:x', 'finished',
            'failure', 1764579600000, 1764579630000);
    INSERT INTO run_usage (run_id, tracker, ticket_id, role, tokens_in, tokens_out,
                           cost_usd, recorded_at, agent, model)
    VALUES ('old-1', 'local', '1', 'backend', 100, 10, 0.5, 1764579660000,
            'claude-code', 'opus');";

/// Issue #37: on a ledger upgraded with [`ROWS_WITHOUT_RUN_AGENTS`] in it, the old runs
/// read with no agent or model, so `sortie stats --by agent` counts them from their
/// usage row when they have one and as `unknown` otherwise; a new run keeps its own.
pub fn rows_without_run_agents_read_as_unknown(ledger: &dyn Ledger) {
    use sortie::stats::{compute, GroupBy};
    let old = ledger.run("old-2").unwrap().unwrap();
    assert_eq!((old.agent, old.model), (None, None));
    // Issue #39: rows from before runs kept rate limits (SQLite schema 9, PostgreSQL 7)
    // read with none.
    assert!(old.rate_limits.is_empty());
    let since = at(0) - chrono::Duration::days(3650);
    let started_at = at(0);
    ledger
        .record_run(&RunRecord {
            run_id: "new".into(),
            key: ClaimKey::new("local", "3", "backend"),
            stage: "ready".into(),
            stage_attempt: 1,
            claimer_id: "h:1:x".into(),
            phase: RunPhase::Finished,
            outcome: Some("success".into()),
            reason_code: None,
            log_path: None,
            started_at,
            finished_at: Some(started_at),
            session_id: None,
            route: None,
            title: None,
            agent: Some("command".into()),
            model: None,
            rate_limits: Vec::new(),
        })
        .unwrap();
    let runs = ledger.runs_since("local", since).unwrap();
    let usage = ledger.usage_since("local", since).unwrap();
    let stats = compute(&runs, &usage, &[], GroupBy::Agent, "backend", since);
    let groups: Vec<(&str, u32)> = stats
        .groups
        .iter()
        .map(|g| (g.group.as_str(), g.runs))
        .collect();
    assert_eq!(
        groups,
        [("claude-code", 1), ("command", 1), ("unknown", 1)],
        "{stats:#?}"
    );
}

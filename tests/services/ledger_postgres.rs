//! The ledger suite (tests/ledger_suite) against a real PostgreSQL, plus what only a
//! server-backed ledger has: several hosts (here: ledgers with their own connections)
//! racing for claims and caps, fencing under a concurrent takeover, locked migrations,
//! a newer schema refused, an unreachable database, and calls from inside tokio runtimes.
//!
//! Needs `SORTIE_TEST_POSTGRES_URL` (scripts/services/postgres.sh); every test gets its
//! own schema, so tests run in parallel on one cluster.

use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use chrono::DateTime;
use sortie::ledger::{
    ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, FollowUp, Ledger, LedgerError, OutboxEntry,
    OutboxPut, OutboxState, PostgresLedger, Scope, Timestamp,
};

use crate::ledger_suite::{Backend, Store};

/// The test cluster's URL, or a failure saying how to start it.
pub fn server_url() -> String {
    std::env::var("SORTIE_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "SORTIE_TEST_POSTGRES_URL is not set: run ./scripts/test, or start the cluster by hand: \
             export SORTIE_TEST_SERVICES=$(mktemp -d); bash scripts/services/postgres.sh; \
             set -a; . \"$SORTIE_TEST_SERVICES/postgres.env\"; set +a"
        )
    })
}

/// A new, empty schema on the test cluster; the URL whose connections use it.
pub fn schema_url(prefix: &str) -> String {
    let base = server_url();
    let schema = format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap_or_else(|err| {
        panic!("cannot connect to {base} (is postgres.sh's cluster up?): {err}")
    });
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// A schema at `url` as a sortie of schema `version` left it: its migrations and its
/// version row, for upgrade tests.
pub fn old_schema(url: &str, version: usize) -> postgres::Client {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    for v in 1..=version {
        client
            .batch_execute(PostgresLedger::migration_sql(v).unwrap())
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "CREATE TABLE sortie_schema (only_row BOOLEAN PRIMARY KEY DEFAULT TRUE \
             CHECK (only_row), version BIGINT NOT NULL); \
             INSERT INTO sortie_schema (version) VALUES ({version})"
        ))
        .unwrap();
    client
}

struct Postgres;

struct PgSchema {
    url: String,
}

impl Store for PgSchema {
    fn open(&self) -> Arc<dyn Ledger> {
        Arc::new(PostgresLedger::open(&self.url).unwrap())
    }
}

impl Backend for Postgres {
    fn store(&self) -> Box<dyn Store> {
        Box::new(PgSchema {
            url: schema_url("suite"),
        })
    }
}

ledger_suite!(Postgres);

/// A time `secs` after a fixed start (also for `ledger_postgres_slots`).
pub fn at(secs: i64) -> Timestamp {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

/// A claim of `ticket` for `role` by `claimer` (also for `ledger_postgres_slots`).
pub fn request(ticket: &str, role: &str, claimer: &str, limits: ClaimLimits) -> ClaimRequest {
    ClaimRequest {
        key: ClaimKey::new("local", ticket, role),
        stage: "ready".into(),
        claimer_id: claimer.into(),
        run_id: format!("run-{claimer}-{ticket}"),
        ttl: Duration::from_secs(600),
        limits,
        attempt_floor: 0,
    }
}

#[test]
fn the_schema_is_created_once_and_a_second_open_finds_it_current() {
    let url = schema_url("migrate");
    // Eight hosts starting at once against an empty schema: the advisory lock lets one
    // migrate; the others wait and find it done.
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (url, barrier) = (url.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                PostgresLedger::open_with(&url, 1).map(|_| ())
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap().unwrap();
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let version: i64 = admin
        .query_one("SELECT version FROM sortie_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, PostgresLedger::SCHEMA_VERSION);
    let rows: i64 = admin
        .query_one("SELECT COUNT(*) FROM sortie_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_error() {
    let url = schema_url("newer");
    drop(PostgresLedger::open(&url).unwrap());
    let newer = PostgresLedger::SCHEMA_VERSION + 1;
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .execute("UPDATE sortie_schema SET version = $1", &[&newer])
        .unwrap();
    let err = PostgresLedger::open(&url).unwrap_err();
    match &err {
        LedgerError::TooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, newer);
            assert_eq!(*supported, PostgresLedger::SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("newer than this sortie supports"), "{text}");
    assert!(text.contains("127.0.0.1"), "names the database: {text}");
}

#[test]
fn a_schema_missing_from_the_search_path_is_a_clear_error() {
    let base = server_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3Dno_such_schema_here");
    let err = PostgresLedger::open(&url).unwrap_err();
    assert!(
        err.to_string()
            .contains("no schema of the search_path exists"),
        "{err}"
    );
}

/// The claims table holds a few live rows and churns, so after a vacuum its statistics say
/// it is empty, and plans made from them read the whole table (dead rows too) for every
/// release and cap probe. The ledger's sessions plan with `enable_seqscan = off`: 200 claim +
/// release cycles on a freshly vacuumed table read index entries, not the table. (With the
/// planner's default, the same cycles scan the table about three times each.)
#[test]
fn claims_and_releases_read_indexes_even_when_statistics_say_the_table_is_empty() {
    let url = schema_url("plans");
    let schema = url.rsplit("search_path%3D").next().unwrap().to_string();
    let mut admin = postgres::Client::connect(&server_url(), postgres::NoTls).unwrap();
    // One connection, used on this thread (no runtime here).
    let ledger = PostgresLedger::open_with(&url, 1).unwrap();
    admin
        .batch_execute(&format!("VACUUM ANALYZE {schema}.claims"))
        .unwrap();
    let scans = |admin: &mut postgres::Client| -> (i64, i64) {
        admin
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .unwrap();
        let row = admin
            .query_one(
                "SELECT COALESCE(seq_scan, 0), COALESCE(idx_scan, 0) FROM pg_stat_user_tables \
                 WHERE schemaname = $1 AND relname = 'claims'",
                &[&schema],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let (seq_before, idx_before) = scans(&mut admin);
    let limits = ClaimLimits {
        global: 100,
        role: 10,
        status: None,
        host: None,
    };
    for n in 0..200 {
        let req = request(&format!("T-{}", n % 7), "backend", "h1:1:x", limits);
        assert!(matches!(
            ledger.try_claim(&req, at(n)).unwrap(),
            ClaimOutcome::Acquired(_)
        ));
        assert!(ledger.release(&req.key, &req.claimer_id).unwrap());
    }
    // A backend reports its table counters when its session ends.
    drop(ledger);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (seq, idx) = loop {
        let (seq, idx) = scans(&mut admin);
        if idx - idx_before >= 400 || std::time::Instant::now() > deadline {
            break (seq - seq_before, idx - idx_before);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        idx >= 400,
        "200 claim + release cycles made only {idx} index scans of claims ({seq} table scans)"
    );
    assert!(
        seq < 20,
        "200 claim + release cycles scanned the claims table {seq} times (and its indexes {idx})"
    );
}

#[test]
fn one_winner_per_key_across_hosts_and_every_loser_names_it() {
    let url = schema_url("race");
    let hosts: Vec<Arc<dyn Ledger>> = (0..8)
        .map(|_| PostgresLedger::open_shared(&url).unwrap())
        .collect();
    let limits = ClaimLimits {
        global: 100,
        role: 100,
        status: None,
        host: None,
    };
    for round in 0..20 {
        let ticket = format!("T-{round}");
        let barrier = Arc::new(Barrier::new(hosts.len()));
        let handles: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let (host, barrier) = (Arc::clone(host), Arc::clone(&barrier));
                let req = request(&ticket, "backend", &format!("host{i}:1:x"), limits);
                std::thread::spawn(move || {
                    barrier.wait();
                    host.try_claim(&req, at(0)).unwrap()
                })
            })
            .collect();
        let outcomes: Vec<ClaimOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<&str> = outcomes
            .iter()
            .filter_map(|o| match o {
                ClaimOutcome::Acquired(c) => Some(c.claimer_id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        for outcome in &outcomes {
            if let ClaimOutcome::Held { holder, .. } = outcome {
                assert_eq!(holder, winners[0]);
            }
        }
    }
}

#[test]
fn role_and_global_caps_hold_for_the_whole_fleet_under_concurrent_claims() {
    let url = schema_url("caps");
    let hosts: Vec<Arc<dyn Ledger>> = (0..6)
        .map(|_| PostgresLedger::open_shared(&url).unwrap())
        .collect();
    let limits = ClaimLimits {
        global: 3,
        role: 2,
        status: None,
        host: None,
    };
    // Each host claims distinct tickets of two roles as fast as it can, releasing some
    // and claiming again; a sampler counts live claims per role all along.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (ledger, stop) = (
            PostgresLedger::open_shared(&url).unwrap(),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            let mut samples = 0;
            let mut worst = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let claims = ledger.claims(Scope::All).unwrap();
                let live: Vec<_> = claims
                    .iter()
                    .filter(|c| c.lease_expires_at > at(0))
                    .collect();
                let backend = live.iter().filter(|c| c.key.role == "backend").count();
                worst = (worst.0.max(backend), worst.1.max(live.len()));
                samples += 1;
            }
            (samples, worst)
        })
    };
    let handles: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(h, host)| {
            let host = Arc::clone(host);
            std::thread::spawn(move || {
                let mut acquired = 0;
                for n in 0..60 {
                    let role = if n % 2 == 0 { "backend" } else { "qa" };
                    let claimer = format!("host{h}:1:x");
                    let req = request(&format!("T-{h}-{n}"), role, &claimer, limits);
                    if let ClaimOutcome::Acquired(claim) = host.try_claim(&req, at(0)).unwrap() {
                        acquired += 1;
                        if n % 3 != 0 {
                            assert!(host.release(&claim.key, &claimer).unwrap());
                        }
                    }
                    // Drop one of the claims kept, so the caps keep being contested.
                    if n % 7 == 0 {
                        for c in host.claims(Scope::All).unwrap() {
                            if c.claimer_id == claimer {
                                host.release(&c.key, &claimer).unwrap();
                                break;
                            }
                        }
                    }
                }
                acquired
            })
        })
        .collect();
    let acquired: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (samples, (worst_role, worst_global)) = sampler.join().unwrap();
    assert!(
        acquired > 20,
        "the caps were contested: {acquired} claims acquired"
    );
    assert!(samples > 5, "sampled {samples} times");
    assert!(
        worst_role <= 2,
        "role cap 2 exceeded: {worst_role} live backend claims"
    );
    assert!(
        worst_global <= 3,
        "global cap 3 exceeded: {worst_global} live claims"
    );
    let live = hosts[0].claims(Scope::All).unwrap();
    assert!(live.len() <= 3, "{live:?}");
}

fn entry(key: &ClaimKey, idempotency_key: &str) -> OutboxEntry {
    OutboxEntry {
        idempotency_key: idempotency_key.into(),
        key: key.clone(),
        stage: "ready".into(),
        stage_attempt: 1,
        run_id: "run-a".into(),
        outcome: "success".into(),
        from_status: "in-progress".into(),
        to_status: "review".into(),
        comment_body: "Done.".into(),
        state: OutboxState::Pending,
        write_attempts: 0,
        next_attempt_at: at(0),
        last_error: None,
        created_at: at(0),
        follow_up: FollowUp::Clear,
    }
}

#[test]
fn a_host_that_lost_its_lease_to_another_host_cannot_store_an_outcome() {
    let url = schema_url("fence");
    let (paused, other) = (
        PostgresLedger::open_shared(&url).unwrap(),
        PostgresLedger::open_shared(&url).unwrap(),
    );
    let limits = ClaimLimits {
        global: 10,
        role: 10,
        status: None,
        host: None,
    };
    let mut first = request("T-1", "backend", "hostA:1:a", limits);
    first.ttl = Duration::from_secs(60);
    let ClaimOutcome::Acquired(claim) = paused.try_claim(&first, at(0)).unwrap() else {
        panic!("first claim refused")
    };
    // hostA is paused past its lease; hostB takes the ticket over.
    let takeover = request("T-1", "backend", "hostB:1:b", limits);
    let ClaimOutcome::Acquired(taken) = other.try_claim(&takeover, at(61)).unwrap() else {
        panic!("takeover refused")
    };
    assert_eq!(taken.stage_attempt, 2);
    // hostA wakes up and tries to store its outcome: fenced off, nothing stored.
    let late = entry(&claim.key, "late-key");
    assert_eq!(
        paused
            .outbox_put(&late, "hostA:1:a", Duration::from_secs(60), at(62))
            .unwrap(),
        OutboxPut::LeaseLost
    );
    assert_eq!(paused.outbox_get("late-key").unwrap(), None);
    // The new holder stores its own.
    assert_eq!(
        other
            .outbox_put(
                &entry(&claim.key, "b-key"),
                "hostB:1:b",
                Duration::from_secs(60),
                at(63)
            )
            .unwrap(),
        OutboxPut::Stored
    );
}

#[test]
fn takeovers_racing_outbox_puts_never_leave_an_outcome_of_a_lost_lease() {
    // Many rounds of: holder A's lease has run out; A stores its outcome while B takes
    // the key over, at the same moment. Either A's put wins (stored, B then holds a
    // later attempt) or B's takeover wins (A is told LeaseLost and nothing is stored):
    // never "stored" after B's claim committed.
    let url = schema_url("fencerace");
    let (a, b) = (
        PostgresLedger::open_shared(&url).unwrap(),
        PostgresLedger::open_shared(&url).unwrap(),
    );
    let limits = ClaimLimits {
        global: 100,
        role: 100,
        status: None,
        host: None,
    };
    let mut outcomes = (0, 0);
    for round in 0..30 {
        let ticket = format!("T-{round}");
        let mut first = request(&ticket, "backend", "hostA:1:a", limits);
        first.ttl = Duration::from_secs(1);
        let ClaimOutcome::Acquired(claim) = a.try_claim(&first, at(0)).unwrap() else {
            panic!()
        };
        let barrier = Arc::new(Barrier::new(2));
        let put = {
            let (a, barrier, e) = (
                Arc::clone(&a),
                Arc::clone(&barrier),
                entry(&claim.key, &format!("k-{round}")),
            );
            std::thread::spawn(move || {
                barrier.wait();
                a.outbox_put(&e, "hostA:1:a", Duration::from_secs(60), at(5))
                    .unwrap()
            })
        };
        let take = {
            let (b, barrier) = (Arc::clone(&b), Arc::clone(&barrier));
            let req = request(&ticket, "backend", "hostB:1:b", limits);
            std::thread::spawn(move || {
                barrier.wait();
                b.try_claim(&req, at(5)).unwrap()
            })
        };
        let put = put.join().unwrap();
        assert!(matches!(take.join().unwrap(), ClaimOutcome::Acquired(_)));
        match put {
            OutboxPut::Stored => outcomes.0 += 1,
            OutboxPut::LeaseLost => {
                outcomes.1 += 1;
                assert_eq!(a.outbox_get(&format!("k-{round}")).unwrap(), None);
            }
            OutboxPut::Exists => panic!("nothing stored this key before"),
        }
        let holder = a.claim(&claim.key).unwrap().unwrap();
        assert_eq!(holder.claimer_id, "hostB:1:b");
    }
    assert_eq!(outcomes.0 + outcomes.1, 30, "{outcomes:?}");
}

#[test]
fn an_unreachable_database_is_unavailable_and_ping_says_so() {
    let err =
        PostgresLedger::open("postgres://sortie@127.0.0.1:1/sortie?connect_timeout=2").unwrap_err();
    assert!(matches!(err, LedgerError::Unavailable(_)), "{err:?}");
    let ledger = PostgresLedger::open(&schema_url("ping")).unwrap();
    ledger.ping().unwrap();
}

#[test]
fn the_ledger_works_from_inside_current_thread_and_multi_thread_runtimes() {
    let ledger = PostgresLedger::open_shared(&schema_url("tokio")).unwrap();
    let limits = ClaimLimits {
        global: 10,
        role: 10,
        status: None,
        host: None,
    };
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = Arc::clone(&ledger);
    current.block_on(async move {
        let outcome = l
            .try_claim(&request("T-1", "qa", "h:1:a", limits), at(0))
            .unwrap();
        assert!(matches!(outcome, ClaimOutcome::Acquired(_)));
        // And from a spawned task on the same thread.
        let l2 = Arc::clone(&l);
        tokio::spawn(async move { l2.claims(Scope::All).unwrap().len() })
            .await
            .map(|n| assert_eq!(n, 1))
            .unwrap();
    });
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let l = Arc::clone(&ledger);
    multi.block_on(async move {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let l = Arc::clone(&l);
                tokio::spawn(async move {
                    l.try_claim(
                        &request(&format!("T-{i}"), "backend", "h:1:b", limits),
                        at(0),
                    )
                    .unwrap()
                })
            })
            .collect();
        let mut acquired = 0;
        for t in tasks {
            if matches!(t.await.unwrap(), ClaimOutcome::Acquired(_)) {
                acquired += 1;
            }
        }
        assert_eq!(acquired, 8);
    });
}

/// A private cluster of the test service's binaries, for tests that stop and restart the
/// server (the shared one serves every other test meanwhile).
pub(crate) struct PrivateCluster {
    _dir: tempfile::TempDir,
    data: std::path::PathBuf,
    bin: std::path::PathBuf,
    port: u16,
}

impl PrivateCluster {
    fn as_postgres(&self, program: &str) -> Command {
        as_postgres(&self.bin.join(program))
    }

    pub(crate) fn start() -> PrivateCluster {
        let bin = std::path::PathBuf::from(std::env::var("SORTIE_TEST_POSTGRES_BIN").unwrap_or_else(
            |_| panic!("SORTIE_TEST_POSTGRES_BIN is not set: start the test cluster with scripts/services/postgres.sh (see server_url)"),
        ));
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if running_as_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:", &dir.path().display().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
        }
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let cluster = PrivateCluster {
            _dir: dir,
            data,
            bin,
            port,
        };
        let out = cluster
            .as_postgres("initdb")
            .args([
                "-D",
                &cluster.data.display().to_string(),
                "-U",
                "sortie",
                "--auth=trust",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {out:?}");
        cluster.pg_ctl("start");
        cluster
    }

    pub(crate) fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.data.display()
        );
        // `-l`: the server's output goes to a file; a server inheriting our pipes would
        // keep them open and `output()` would never return.
        let log = self.data.join("server.log");
        let status = self
            .as_postgres("pg_ctl")
            .args(["-D", &self.data.display().to_string(), "-w", "-m", "fast"])
            .args(["-o", &options, "-l", &log.display().to_string(), action])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "pg_ctl {action} failed: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    pub(crate) fn url(&self) -> String {
        format!(
            "postgres://sortie@127.0.0.1:{}/postgres?connect_timeout=3",
            self.port
        )
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self
            .as_postgres("pg_ctl")
            .args([
                "-D",
                &self.data.display().to_string(),
                "-m",
                "immediate",
                "stop",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `program` run as the `postgres` user when we are root (the server refuses root).
fn as_postgres(program: &std::path::Path) -> Command {
    if running_as_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

#[test]
fn a_database_restart_loses_nothing_and_the_next_calls_reconnect() {
    let cluster = PrivateCluster::start();
    let ledger = PostgresLedger::open(&cluster.url()).unwrap();
    let limits = ClaimLimits {
        global: 10,
        role: 10,
        status: None,
        host: None,
    };
    let ClaimOutcome::Acquired(claim) = ledger
        .try_claim(&request("T-1", "backend", "h:1:a", limits), at(0))
        .unwrap()
    else {
        panic!("claim refused")
    };
    let stored = entry(&claim.key, "k-1");
    assert_eq!(
        ledger
            .outbox_put(&stored, "h:1:a", Duration::from_secs(60), at(1))
            .unwrap(),
        OutboxPut::Stored
    );
    // Restart mid-work: the pooled connections die with the old server.
    cluster.pg_ctl("restart");
    // A call on a dead connection is reported unavailable (never a panic, never "nobody
    // holds it"); calls after that reconnect. Four pooled connections may each fail once.
    let mut failures = 0;
    let claims = loop {
        match ledger.claims(Scope::All) {
            Ok(claims) => break claims,
            Err(LedgerError::Unavailable(_)) if failures < 8 => failures += 1,
            Err(other) => panic!("expected Unavailable, got {other:?}"),
        }
    };
    assert_eq!(
        claims,
        vec![claim.clone()],
        "the claim survived the restart"
    );
    assert_eq!(ledger.outbox_get("k-1").unwrap(), Some(stored));
    ledger.ping().unwrap();
    // Work converges: the holder renews and the next claim of another key works.
    assert!(matches!(
        ledger
            .renew(&claim.key, "h:1:a", Duration::from_secs(60), at(2))
            .unwrap(),
        sortie::ledger::RenewOutcome::Renewed { .. }
    ));
    assert!(matches!(
        ledger
            .try_claim(&request("T-2", "backend", "h:1:a", limits), at(2))
            .unwrap(),
        ClaimOutcome::Acquired(_)
    ));

    // Stopped: every call says unavailable and ping names the reason.
    cluster.pg_ctl("stop");
    let err = ledger.ping().unwrap_err();
    assert!(matches!(err, LedgerError::Unavailable(_)), "{err:?}");
    let err = ledger
        .try_claim(&request("T-3", "backend", "h:1:a", limits), at(3))
        .unwrap_err();
    assert!(matches!(err, LedgerError::Unavailable(_)), "{err:?}");
    // Back: the ledger answers again without being reopened.
    cluster.pg_ctl("start");
    let mut tries = 0;
    while ledger.ping().is_err() {
        tries += 1;
        assert!(tries < 8, "the ledger did not reconnect");
    }
    assert_eq!(ledger.claims(Scope::All).unwrap().len(), 2);
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

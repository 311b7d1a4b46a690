//! PostgreSQL ledger throughput: claim + release cycles per second, (a) one contender,
//! (b) 8 contending OS processes (each its own ledger and connection, as 8 hosts would
//! be), each on its own ticket; (c) the cap-respecting claim under contention: 8
//! processes claiming distinct tickets of ONE role whose cap is 4, so claims are refused
//! by the ceiling all along (a refused claim counts as a cycle: it is a full claim
//! transaction that read the fleet-wide count).
//!
//! Run against the test cluster (scripts/services/postgres.sh):
//!   SORTIE_BENCH_POSTGRES_URL=$SORTIE_TEST_POSTGRES_URL cargo bench --bench ledger_postgres
//! `SORTIE_BENCH_SECONDS` sets the measuring time per case (default 5). The server's
//! `synchronous_commit` is printed with the figures. The bench re-executes itself with
//! `SORTIE_BENCH_PG_CONTENDER` set for the contender processes: such a child opens the
//! ledger, prints `READY`, waits for a line on stdin, runs for the given time, and prints
//! `DONE <cycles> <acquired> <max_live_in_role>`.
//!
//! Then, in the same minute (this shared VM's speed moves by half between minutes), the
//! same cycle from pgbench (C, libpq, 8 clients on 2 threads, with the ledger's session
//! settings: commits not waiting for the flush, plans on indexes): the bare `INSERT` +
//! `DELETE` of a 4-column row; the claim row's insert (every column, three unique indexes,
//! no logic) and its release; that insert with the attempts upsert; the ledger's fast claim
//! and release; and its full claim and release, each statement of the last two the text
//! sortie sends (`PostgresLedger::claim_statements`). So the ledger's figures read against
//! what its SQL costs the server, against what each part of that SQL costs, and against
//! what the server can do at all. After each pgbench run the bench checks that every cycle
//! claimed and released (no row left, one attempt more per cycle), so a script that
//! measures the wrong thing fails. `SORTIE_BENCH_PGBENCH_JOBS` sets pgbench's threads.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use sortie::ledger::{
    ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, Ledger, PostgresLedger, Scope,
};

const CONTENDERS: usize = 8;
const CONTENDER_ENV: &str = "SORTIE_BENCH_PG_CONTENDER";
const URL_ENV: &str = "SORTIE_BENCH_POSTGRES_URL";
const CAP: u32 = 4;

fn request(worker: usize, n: u64, capped: bool) -> ClaimRequest {
    // Uncapped: each worker cycles one ticket. Capped: tickets rotate so the workers
    // contend for the role's cap, not for one key.
    let ticket = if capped {
        format!("T-{worker}-{}", n % 16)
    } else {
        format!("T-{worker}")
    };
    ClaimRequest {
        key: ClaimKey::new("local", ticket, "backend"),
        stage: "ready".into(),
        claimer_id: format!("bench{worker}:{}:x", std::process::id()).into(),
        run_id: format!("run-{worker}-{n}"),
        ttl: Duration::from_secs(600),
        limits: ClaimLimits {
            global: if capped { 1_000 } else { 100_000 },
            role: if capped { CAP } else { 100_000 },
            status: None,
            host: None,
        },
        attempt_floor: 0,
    }
}

/// Cycles for `duration`: (cycles, acquired). Uncapped, a cycle is claim + release of
/// the worker's ticket. Capped, the worker keeps what it acquired until its next cycle,
/// which releases it and then claims again: every worker holds a claim most of the time,
/// so the role's cap is what decides.
fn run(ledger: &dyn Ledger, worker: usize, capped: bool, duration: Duration) -> (u64, u64) {
    let started = Instant::now();
    let (mut cycles, mut acquired) = (0u64, 0u64);
    let mut held: Option<ClaimRequest> = None;
    while started.elapsed() < duration {
        if let Some(prev) = held.take() {
            assert!(ledger
                .release(&prev.key, &prev.claimer_id)
                .expect("release"));
        }
        let req = request(worker, cycles, capped);
        match ledger.try_claim(&req, Utc::now()).expect("claim") {
            ClaimOutcome::Acquired(_) if capped => {
                acquired += 1;
                held = Some(req);
            }
            ClaimOutcome::Acquired(_) => {
                acquired += 1;
                assert!(ledger.release(&req.key, &req.claimer_id).expect("release"));
            }
            ClaimOutcome::Ceiling(_) => assert!(capped, "ceiling in the uncapped case"),
            held => panic!("unexpected {held:?}"),
        }
        cycles += 1;
    }
    if let Some(prev) = held {
        ledger
            .release(&prev.key, &prev.claimer_id)
            .expect("release");
    }
    (cycles, acquired)
}

fn contender(url: &str) {
    let worker: usize = std::env::var(CONTENDER_ENV).unwrap().parse().unwrap();
    let capped = std::env::var("SORTIE_BENCH_CAPPED").is_ok();
    let secs: f64 = std::env::var("SORTIE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let ledger = PostgresLedger::open_with(url, 1).expect("open");
    ledger.ping().expect("ping");
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let (cycles, acquired) = run(&ledger, worker, capped, Duration::from_secs_f64(secs));
    println!("DONE {cycles} {acquired}");
}

fn processes(url: &str, capped: bool, secs: f64) -> (u64, u64, Duration, usize) {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..CONTENDERS)
        .map(|worker| {
            let mut cmd = Command::new(&exe);
            cmd.env(CONTENDER_ENV, worker.to_string())
                .env("SORTIE_BENCH_SECONDS", secs.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            if capped {
                cmd.env("SORTIE_BENCH_CAPPED", "1");
            }
            let mut child = cmd.spawn().unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "READY");
            (child, out)
        })
        .collect();
    // A sampler (its own connection) watches the live claims of the role meanwhile.
    let sampler = {
        let url = url.to_string();
        std::thread::spawn(move || {
            let ledger = PostgresLedger::open_with(&url, 1).unwrap();
            let started = Instant::now();
            let mut worst = 0;
            // A sample every millisecond: often enough to catch an excess that lasts a
            // claim's round trip, without taking a ninth client's share of the CPU.
            while started.elapsed() < Duration::from_secs_f64(secs) {
                let live = ledger.claims(Scope::All).unwrap().len();
                worst = worst.max(live);
                std::thread::sleep(Duration::from_millis(1));
            }
            worst
        })
    };
    let started = Instant::now();
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
    }
    let (mut cycles, mut acquired) = (0, 0);
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let parts: Vec<u64> = line
            .trim()
            .strip_prefix("DONE ")
            .unwrap()
            .split(' ')
            .map(|p| p.parse().unwrap())
            .collect();
        cycles += parts[0];
        acquired += parts[1];
        child.wait().unwrap();
    }
    let elapsed = started.elapsed();
    (cycles, acquired, elapsed, sampler.join().unwrap())
}

/// What a pgbench cycle must leave behind, checked after each run so a script that
/// measures the wrong thing (a claim that never inserts, a release that deletes nothing)
/// fails the bench instead of printing a fast figure.
#[derive(Clone, Copy)]
enum Leaves {
    /// `bare` is empty afterwards.
    BareEmpty,
    /// `claims` is empty afterwards: every claim was released.
    ClaimsEmpty,
    /// `claims` is empty and the attempts of the clients' tickets rose by one per cycle:
    /// every cycle inserted a claim (and its attempt) and released it.
    OneAttemptPerCycle,
}

/// A pgbench script: its name, its text, what it must leave behind.
struct Script {
    name: &'static str,
    text: String,
    leaves: Leaves,
}

/// pgbench scripts of one claim + release cycle per transaction (two autocommit statements):
/// the bare two statements; the claim row's own insert and delete (every column, the three
/// unique indexes, no logic); that insert with the attempts upsert; and the ledger's own
/// statements as sortie sends them (`PostgresLedger::claim_statements`), each `$n` a pgbench
/// variable with the type sortie's parameter has (the status cap is NULL, as in the bench's
/// uncapped case). The first three show where the server's cost of the ledger's cycle goes.
fn pgbench_scripts() -> Vec<Script> {
    let statements = PostgresLedger::claim_statements();
    // Each statement's parameters in order: `$n` is `params[n - 1]`.
    let sql = |name: &str, params: &[&str]| {
        let text = statements.iter().find(|(n, _)| *n == name).unwrap().1;
        let text = regex::Regex::new(r"\$(\d+)")
            .unwrap()
            .replace_all(text, |c: &regex::Captures| {
                let n: usize = c[1].parse().unwrap();
                match params.get(n.wrapping_sub(1)) {
                    Some(param) => param.to_string(),
                    None => panic!("statement {name:?}: parameter ${n} has no pgbench variable"),
                }
            })
            .into_owned();
        // One line per statement, so pgbench's error messages point at a whole one.
        format!("{};\n", text.replace('\n', " "))
    };
    // ClaimRequest's parameters (claims::try_claim): the claimer and the run are the
    // client's ticket, so the release can name the claimer.
    let claim_params = [
        "(:tracker)::TEXT",
        "(:ticket)::TEXT",
        "(:role)::TEXT",
        "(:stage)::TEXT",
        "(:ticket)::TEXT",
        "(:ticket)::TEXT",
        "(:now)::BIGINT",
        "(:expires)::BIGINT",
        "(:cap)::BIGINT",
        "(:cap)::BIGINT",
        "(NULL)",
        "(0)::BIGINT",
        "(:seed)::BIGINT",
    ];
    // The release's: tracker, ticket, role, claimer.
    let release_params = [
        "(:tracker)::TEXT",
        "(:ticket)::TEXT",
        "(:role)::TEXT",
        "(:ticket)::TEXT",
    ];
    let head = "\\set ticket :client_id\n\\set seed :client_id * 7919\n";
    let release = sql("release", &release_params);
    let insert = "INSERT INTO claims (tracker, ticket_id, role, stage, claimer_id, claimed_at, \
                  lease_expires_at, stage_attempt, run_id, cancel_requested, agent_pid, \
                  role_slot, global_slot, status_slot) \
                  VALUES (:tracker, :ticket, :role, :stage, :ticket, :now, :expires, 1, :ticket, \
                  FALSE, NULL, :seed, :seed, NULL) ON CONFLICT DO NOTHING";
    vec![
        Script {
            name: "bare INSERT + DELETE",
            text: format!(
                "{head}INSERT INTO bare VALUES (:tracker, :ticket, :role, :ticket) \
                 ON CONFLICT DO NOTHING;\n\
                 DELETE FROM bare WHERE tracker = :tracker AND ticket_id = :ticket \
                 AND role = :role AND claimer_id = :ticket;\n"
            ),
            leaves: Leaves::BareEmpty,
        },
        Script {
            name: "claim row INSERT + release",
            text: format!("{head}{insert};\n{release}"),
            leaves: Leaves::ClaimsEmpty,
        },
        Script {
            name: "claim row INSERT with attempts upsert + release",
            text: format!(
                "{head}WITH ins AS ({insert} RETURNING stage_attempt) \
                 INSERT INTO attempts (tracker, ticket_id, role, last_attempt) \
                 SELECT :tracker, :ticket, :role, 1 FROM ins ON CONFLICT (tracker, ticket_id, role) \
                 DO UPDATE SET last_attempt = attempts.last_attempt + 1;\n{release}"
            ),
            leaves: Leaves::OneAttemptPerCycle,
        },
        Script {
            name: "the ledger's fast claim + release",
            text: format!("{head}{}{release}", sql("fast", &claim_params)),
            leaves: Leaves::OneAttemptPerCycle,
        },
        Script {
            name: "the ledger's full claim + release",
            text: format!("{head}{}{release}", sql("claim", &claim_params)),
            leaves: Leaves::OneAttemptPerCycle,
        },
    ]
}

/// The sum of the attempts of the pgbench clients' tickets (`0`..`CONTENDERS - 1`).
fn pgbench_attempts(admin: &mut postgres::Client, schema: &str) -> i64 {
    admin
        .query_one(
            &format!(
                "SELECT COALESCE(SUM(last_attempt), 0)::BIGINT FROM {schema}.attempts \
                 WHERE tracker = 'local' AND role = 'backend' AND ticket_id ~ '^[0-9]+$'"
            ),
            &[],
        )
        .unwrap()
        .get(0)
}

/// Check that a pgbench run of `script` left what it must (see [`Leaves`]), given the
/// attempts sum before it and the cycles it reported.
fn check_pgbench(
    admin: &mut postgres::Client,
    schema: &str,
    script: &Script,
    attempts_before: i64,
    cycles: u64,
) {
    let count = |admin: &mut postgres::Client, table: &str| -> i64 {
        admin
            .query_one(&format!("SELECT COUNT(*) FROM {schema}.{table}"), &[])
            .unwrap()
            .get(0)
    };
    let name = script.name;
    match script.leaves {
        Leaves::BareEmpty => {
            let left = count(admin, "bare");
            assert_eq!(left, 0, "pgbench {name:?} left {left} rows in bare");
        }
        Leaves::ClaimsEmpty | Leaves::OneAttemptPerCycle => {
            let left = count(admin, "claims");
            assert_eq!(left, 0, "pgbench {name:?} left {left} claims unreleased");
        }
    }
    if let Leaves::OneAttemptPerCycle = script.leaves {
        let claimed = pgbench_attempts(admin, schema) - attempts_before;
        assert_eq!(
            claimed, cycles as i64,
            "pgbench {name:?}: {cycles} cycles but {claimed} claims inserted: the script does \
             not measure a claim + release\n{}",
            script.text
        );
    }
}

/// Run `script` with pgbench against `conninfo`: (cycles per second, cycles).
fn pgbench(conninfo: &str, script: &str, smoke: bool, secs: f64) -> (f64, u64) {
    let path = std::env::temp_dir().join(format!("sortie-pgbench-{}.sql", std::process::id()));
    std::fs::write(&path, script).unwrap();
    // SORTIE_BENCH_PGBENCH_JOBS: pgbench's client threads (default 2, one per core; 8 is
    // one per client, as the ledger's 8 processes are).
    let jobs = std::env::var("SORTIE_BENCH_PGBENCH_JOBS").unwrap_or_else(|_| "2".into());
    let mut cmd = Command::new("pgbench");
    let clients = CONTENDERS.to_string();
    cmd.args(["-n", "-M", "prepared", "-c", &clients, "-j", &jobs, "-f"])
        .arg(&path);
    let defines = [
        "tracker=local",
        "role=backend",
        "stage=ready",
        "now=1800000000000",
        "expires=1800000600000",
        "cap=100000",
    ];
    for define in defines {
        cmd.args(["-D", define]);
    }
    if smoke {
        cmd.args(["-t", "20"]);
    } else {
        cmd.args(["-T", &(secs.ceil() as u64).max(1).to_string()]);
    }
    let out = cmd.arg(conninfo).output().unwrap_or_else(|err| {
        panic!("pgbench: {err} (Debian: apt-get install postgresql; scripts/services/postgres.sh does)")
    });
    let _ = std::fs::remove_file(&path);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pgbench failed on\n{script}\n{text}");
    let tps = text
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|tps| tps.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench's output:\n{text}"));
    let cycles = text
        .lines()
        .find_map(|line| line.strip_prefix("number of transactions actually processed: "))
        .and_then(|rest| rest.split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no transaction count in pgbench's output:\n{text}"));
    (tps, cycles)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without
    // it, as a smoke test: every case briefly, against the test cluster.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let Ok(base) = std::env::var(URL_ENV).or_else(|_| std::env::var("SORTIE_TEST_POSTGRES_URL"))
    else {
        eprintln!(
            "neither {URL_ENV} nor SORTIE_TEST_POSTGRES_URL is set: run ./scripts/test, or start \
             the test cluster (export SORTIE_TEST_SERVICES=$(mktemp -d); bash \
             scripts/services/postgres.sh; set -a; . \"$SORTIE_TEST_SERVICES/postgres.env\"; \
             set +a) and run with {URL_ENV}=$SORTIE_TEST_POSTGRES_URL"
        );
        std::process::exit(2);
    };
    if std::env::var(CONTENDER_ENV).is_ok() {
        contender(&base);
        return;
    }
    let secs: f64 = std::env::var("SORTIE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if smoke { 0.3 } else { 5.0 });
    std::env::set_var("SORTIE_BENCH_SECONDS", secs.to_string());
    let schema = format!("bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).expect("connect");
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let sync: String = admin
        .query_one("SHOW synchronous_commit", &[])
        .unwrap()
        .get(0);
    let sep = if base.contains('?') { '&' } else { '?' };
    // SORTIE_BENCH_PG_OPTIONS: more `-c name=value` settings for the ledger's sessions,
    // e.g. `-c synchronous_commit=off` to see what the WAL flush costs.
    let extra = std::env::var("SORTIE_BENCH_PG_OPTIONS")
        .map(|o| format!(" {o}"))
        .unwrap_or_default()
        .replace(' ', "%20")
        .replace('=', "%3D");
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}{extra}");
    std::env::set_var(URL_ENV, &url);

    let session = std::env::var("SORTIE_BENCH_PG_OPTIONS").unwrap_or_default();
    println!("server synchronous_commit = {sync}; session options {session:?}; {secs} s per case");
    let ledger = PostgresLedger::open_with(&url, 1).unwrap();
    // Each case starts from tables without dead rows and with statistics, as autovacuum
    // keeps them between a real pipeline's claims; one case's churn of tens of thousands
    // of rows a second would otherwise slow the next one's scans.
    let vacuum = |admin: &mut postgres::Client| {
        admin
            .batch_execute(&format!(
                "VACUUM ANALYZE {schema}.claims, {schema}.attempts, {schema}.bare"
            ))
            .unwrap()
    };
    admin
        .batch_execute(&format!(
            "CREATE TABLE {schema}.bare (tracker TEXT NOT NULL, ticket_id TEXT NOT NULL, \
             role TEXT NOT NULL, claimer_id TEXT NOT NULL, PRIMARY KEY (tracker, ticket_id, role))"
        ))
        .unwrap();
    vacuum(&mut admin);
    let started = Instant::now();
    let (cycles, _) = run(&ledger, 99, false, Duration::from_secs_f64(secs));
    let rate = cycles as f64 / started.elapsed().as_secs_f64();
    println!("1 contender:                 {rate:>8.0} claim+release cycles/s");

    vacuum(&mut admin);
    let (cycles, _, elapsed, _) = processes(&url, false, secs);
    let rate = cycles as f64 / elapsed.as_secs_f64();
    println!(
        "{CONTENDERS} processes, own tickets:   {rate:>8.0} claim+release cycles/s (aggregate)"
    );

    vacuum(&mut admin);
    let (cycles, acquired, elapsed, worst) = processes(&url, true, secs);
    let rate = cycles as f64 / elapsed.as_secs_f64();
    let won = acquired as f64 / elapsed.as_secs_f64();
    println!(
        "{CONTENDERS} processes, one role cap {CAP}: {rate:>8.0} capped claim transactions/s \
         ({won:.0}/s acquired, each released by the next), most live claims sampled: {worst}"
    );
    assert!(worst <= CAP as usize, "cap {CAP} exceeded: {worst}");

    // The same SQL from pgbench (C, libpq), in the same minute: what the ledger's statements
    // cost the server with a client that costs next to nothing, beside the bare cycle.
    // The ledger's own session settings, so each row reads against the ledger's: commits
    // not waiting for the flush, plans on indexes.
    let settings: String = PostgresLedger::session_settings()
        .iter()
        .map(|(name, value)| format!("%20-c%20{name}%3D{value}"))
        .collect();
    let options = format!("-c%20search_path%3D{schema}{settings}{extra}");
    let conninfo = format!("{base}{sep}options={options}");
    for script in pgbench_scripts() {
        vacuum(&mut admin);
        let before = pgbench_attempts(&mut admin, &schema);
        let (rate, cycles) = pgbench(&conninfo, &script.text, smoke, secs);
        check_pgbench(&mut admin, &schema, &script, before, cycles);
        println!(
            "pgbench, {CONTENDERS} clients, {}: {rate:>8.0} cycles/s",
            script.name
        );
    }
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

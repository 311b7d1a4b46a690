//! Claim ledger throughput: claim + release cycles per second on a file-backed WAL ledger,
//! (a) alone, (b) with 8 contending threads, (c) with 8 contending OS processes.
//!
//! Run: `cargo bench --bench ledger` (defaults: 1 s warm-up, 3 s measurement per case).
//! Each contender works on its own ticket, so every cycle succeeds and the contention is
//! for SQLite's write lock, which is what limits a busy host. For the process case the bench
//! re-executes its own binary with `SORTIE_BENCH_CONTENDER` set; such a child opens the
//! ledger, prints `READY`, waits for a line on stdin, runs its cycles and prints `DONE`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use chrono::Utc;
use criterion::{BenchmarkId, Criterion, Throughput};
use sortie::ledger::{ClaimKey, ClaimLimits, ClaimOutcome, ClaimRequest, Ledger, SqliteLedger};

const CONTENDERS: usize = 8;
const CONTENDER_ENV: &str = "SORTIE_BENCH_CONTENDER";
const WORKER_ENV: &str = "SORTIE_BENCH_WORKER";
const CYCLES_ENV: &str = "SORTIE_BENCH_CYCLES";

fn request(worker: usize) -> ClaimRequest {
    ClaimRequest {
        key: ClaimKey::new("local", format!("T-{worker}"), "backend"),
        stage: "ready".into(),
        claimer_id: format!("bench:{}:{worker}", std::process::id()).into(),
        run_id: format!("run-{worker}"),
        ttl: Duration::from_secs(600),
        limits: ClaimLimits {
            global: 1_000,
            role: 1_000,
            status: None,
            host: None,
        },
        attempt_floor: 0,
    }
}

/// One claim + release; both must succeed or the figure would measure something else.
fn cycle(ledger: &SqliteLedger, req: &ClaimRequest) {
    let outcome = ledger.try_claim(req, Utc::now()).expect("claim");
    assert!(matches!(outcome, ClaimOutcome::Acquired(_)), "{outcome:?}");
    assert!(ledger.release(&req.key, &req.claimer_id).expect("release"));
}

fn run_cycles(ledger: &SqliteLedger, worker: usize, cycles: u64) {
    let req = request(worker);
    for _ in 0..cycles {
        cycle(ledger, &req);
    }
}

/// `iters` cycles split over the contenders: cycles per contender, rounded up.
fn share(iters: u64) -> u64 {
    iters.div_ceil(CONTENDERS as u64).max(1)
}

/// Scale the time of `share(iters) * CONTENDERS` cycles to `iters` cycles.
fn scaled(elapsed: Duration, iters: u64) -> Duration {
    let done = share(iters) * CONTENDERS as u64;
    elapsed.mul_f64(iters as f64 / done as f64)
}

fn uncontended(c: &mut Criterion, path: &Path) {
    let ledger = SqliteLedger::open(path).expect("open ledger");
    let req = request(0);
    let mut group = c.benchmark_group("ledger_claim_release");
    group.throughput(Throughput::Elements(1));
    group.bench_function("uncontended", |b| b.iter(|| cycle(&ledger, &req)));
    group.finish();
}

fn threads(c: &mut Criterion, path: &Path) {
    let mut group = c.benchmark_group("ledger_claim_release");
    group.throughput(Throughput::Elements(1)).sample_size(10);
    group.bench_function(BenchmarkId::new("threads", CONTENDERS), |b| {
        b.iter_custom(|iters| {
            let cycles = share(iters);
            let start = Arc::new(Barrier::new(CONTENDERS + 1));
            let workers: Vec<_> = (0..CONTENDERS)
                .map(|worker| {
                    // One ledger (connection) per thread: contention happens in SQLite,
                    // as between processes, not on one connection's mutex.
                    let ledger = SqliteLedger::open(path).expect("open ledger");
                    let start = Arc::clone(&start);
                    std::thread::spawn(move || {
                        start.wait();
                        run_cycles(&ledger, worker, cycles);
                    })
                })
                .collect();
            start.wait();
            let began = Instant::now();
            for worker in workers {
                worker.join().expect("worker thread");
            }
            scaled(began.elapsed(), iters)
        });
    });
    group.finish();
}

fn processes(c: &mut Criterion, path: &Path) {
    let exe = std::env::current_exe().expect("bench binary path");
    let mut group = c.benchmark_group("ledger_claim_release");
    group.throughput(Throughput::Elements(1)).sample_size(10);
    group.bench_function(BenchmarkId::new("processes", CONTENDERS), |b| {
        b.iter_custom(|iters| {
            let cycles = share(iters);
            let mut children: Vec<(Child, BufReader<ChildStdout>)> = (0..CONTENDERS)
                .map(|worker| spawn_contender(&exe, path, worker, cycles))
                .collect();
            for (_, out) in &mut children {
                expect_line(out, "READY");
            }
            let began = Instant::now();
            for (child, _) in &mut children {
                let stdin = child.stdin.as_mut().expect("contender stdin");
                stdin.write_all(b"go\n").expect("start contender");
            }
            for (_, out) in &mut children {
                expect_line(out, "DONE");
            }
            let elapsed = began.elapsed();
            for (mut child, _) in children {
                assert!(child.wait().expect("contender exit").success());
            }
            scaled(elapsed, iters)
        });
    });
    group.finish();
}

fn spawn_contender(
    exe: &Path,
    path: &Path,
    worker: usize,
    cycles: u64,
) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(exe)
        .env(CONTENDER_ENV, path)
        .env(WORKER_ENV, worker.to_string())
        .env(CYCLES_ENV, cycles.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn contender");
    let out = BufReader::new(child.stdout.take().expect("contender stdout"));
    (child, out)
}

fn expect_line(out: &mut impl BufRead, expected: &str) {
    let mut line = String::new();
    out.read_line(&mut line).expect("read contender");
    assert_eq!(line.trim_end(), expected, "contender protocol");
}

/// The child side of the process case.
fn contend(path: &Path) {
    let number = |name: &str| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} must be a number"))
    };
    let worker = usize::try_from(number(WORKER_ENV)).expect("worker index");
    let cycles = number(CYCLES_ENV);
    let ledger = SqliteLedger::open(path).expect("open ledger");
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "READY")
        .and_then(|()| stdout.flush())
        .expect("stdout");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("stdin");
    run_cycles(&ledger, worker, cycles);
    writeln!(stdout, "DONE")
        .and_then(|()| stdout.flush())
        .expect("stdout");
}

fn main() {
    if let Some(path) = std::env::var_os(CONTENDER_ENV) {
        contend(&PathBuf::from(path));
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.db");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    uncontended(&mut c, &path);
    threads(&mut c, &path);
    processes(&mut c, &path);
    c.final_summary();
}

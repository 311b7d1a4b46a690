//! Several hosts, one pipeline: `sortie pipeline tick` processes with their own
//! `SORTIE_HOST_ID` and state roots, one local board and one PostgreSQL ledger. Runs the
//! three-stage demo pipeline with overlapping ticks and a fleet-wide per-role cap of 2,
//! SIGKILLs a host with runs in flight, and pauses one past its lease.
//!
//! Needs `SORTIE_TEST_POSTGRES_URL` (scripts/services/postgres.sh).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use sortie::ledger::{Claim, Ledger, PostgresLedger, RunRecord, Scope};

use crate::common::{repo, Sandbox, THREE_STAGES};
use crate::ledger_postgres::schema_url;

/// One board, one database, `hosts` configs (`host-N.yaml`, state root `state-N`).
struct Fleet {
    sandbox: Sandbox,
    url: String,
}

impl Fleet {
    /// `agent_delay`: seconds the agent sleeps before doing its work (runs in flight).
    ///
    /// Each host has its own state root, so its own workspaces; the agents share their
    /// work through `shared/<ticket>` (as real agents on several machines share it
    /// through a git remote): the demo backend needs the architect's DESIGN.md.
    fn new(hosts: usize, ttl_seconds: u64, agent_delay: &str) -> Fleet {
        let sandbox = Sandbox::three_stages(2);
        let url = schema_url("hosts");
        let agent = sandbox.path().join("slow-agent");
        std::fs::write(
            &agent,
            format!(
                "#!/bin/sh\nsleep {agent_delay}\nshared={}/shared/$SORTIE_TICKET_ID\n\
                 mkdir -p \"$shared\" && cd \"$shared\" && exec {}\n",
                sandbox.path().display(),
                repo().join("scripts/demo-agent").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        for host in 1..=hosts {
            let config = THREE_STAGES
                .replace("ROLES", &repo().join("roles").display().to_string())
                .replace("AGENT", &agent.display().to_string())
                .replace("PER_ROLE", "2")
                .replace("state_root: state", &format!("state_root: state-{host}"))
                .replace(
                    "claim_lock_ttl_seconds: 60",
                    &format!("claim_lock_ttl_seconds: {ttl_seconds}"),
                )
                + "ledger:\n  kind: postgres\n  url_env: SORTIE_LEDGER_URL\n";
            std::fs::write(sandbox.path().join(format!("host-{host}.yaml")), config).unwrap();
        }
        Fleet { sandbox, url }
    }

    fn ledger(&self) -> PostgresLedger {
        PostgresLedger::open_with(&self.url, 1).unwrap()
    }

    fn log(&self, host: usize, n: usize) -> PathBuf {
        self.sandbox.path().join(format!("tick-{host}-{n}.log"))
    }

    /// Start one tick of `host`; its output goes to a log file.
    fn spawn_tick(&self, host: usize, n: usize) -> Child {
        let log = std::fs::File::create(self.log(host, n)).unwrap();
        Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(["pipeline", "tick", "--config", &format!("host-{host}.yaml")])
            .current_dir(self.sandbox.path())
            .env("SORTIE_HOST_ID", format!("host-{host}"))
            .env("SORTIE_LEDGER_URL", &self.url)
            .env_remove("SORTIE_FAULT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn sortie")
    }

    /// Wait for a tick and insist it succeeded.
    fn finish(&self, mut child: Child, host: usize, n: usize) {
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "tick {n} of host {host} exited {status:?}:\n{}",
            std::fs::read_to_string(self.log(host, n)).unwrap_or_default()
        );
    }

    fn add_tickets(&self, count: usize) -> Vec<String> {
        (0..count)
            .map(|i| {
                self.sandbox
                    .add(&format!("Feature {i}"), "ready-for-design", &[])
            })
            .collect()
    }

    fn all_done(&self, ids: &[String]) -> bool {
        ids.iter()
            .all(|id| self.sandbox.ticket(id).status == "done")
    }

    /// Overlapping ticks of `hosts` (staggered by 150 ms) until every ticket is done.
    fn run_until_done(&self, hosts: &[usize], ids: &[String], limit: Duration, first_n: usize) {
        let started = Instant::now();
        let mut n = first_n;
        while !self.all_done(ids) {
            assert!(
                started.elapsed() < limit,
                "not every ticket done after {limit:?}: {:?}",
                ids.iter()
                    .map(|id| (id.clone(), self.sandbox.ticket(id).status))
                    .collect::<Vec<_>>()
            );
            let children: Vec<_> = hosts
                .iter()
                .map(|&host| {
                    let child = self.spawn_tick(host, n);
                    std::thread::sleep(Duration::from_millis(150));
                    (host, child)
                })
                .collect();
            for (host, child) in children {
                self.finish(child, host, n);
            }
            n += 1;
        }
        eprintln!("{} rounds of ticks in {:?}", n - first_n, started.elapsed());
    }

    /// Every ticket went architect -> backend -> qa, with one success block per stage,
    /// except for the sequential re-runs counted by [`stale_listing_reruns`] (a pipeline
    /// race, not the ledger's: see that function). Returns how many extra blocks there were.
    fn assert_each_stage_wrote_back(&self, ids: &[String]) -> usize {
        let mut extra = 0;
        for id in ids {
            let blocks = self.sandbox.blocks(id);
            let mut roles: Vec<&str> = blocks.iter().map(|b| b.role()).collect();
            let all = roles.len();
            roles.dedup();
            assert_eq!(
                roles,
                ["architect", "backend", "qa"],
                "ticket {id}: the stages in order: {blocks:?}"
            );
            extra += all - roles.len();
            // Two blocks of one role never carry the same attempt (idempotency keys).
            let mut keys: Vec<&str> = blocks.iter().map(|b| b.idempotency_key()).collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(
                keys.len(),
                all,
                "ticket {id}: an outcome written twice: {blocks:?}"
            );
        }
        extra
    }
}

/// Samples the ledger's live claims per role while the fleet works.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<(usize, BTreeMap<String, usize>)>,
}

impl Sampler {
    fn start(ledger: PostgresLedger) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut samples = 0;
            let mut worst: BTreeMap<String, usize> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                let now = Utc::now();
                let claims: Vec<Claim> = ledger.claims(Scope::All).unwrap();
                let mut live: BTreeMap<String, usize> = BTreeMap::new();
                for c in claims.iter().filter(|c| c.lease_expires_at > now) {
                    *live.entry(c.key.role.clone()).or_default() += 1;
                }
                for (role, n) in live {
                    let w = worst.entry(role).or_default();
                    *w = (*w).max(n);
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (samples, worst)
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> (usize, BTreeMap<String, usize>) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// The most runs of one role that overlapped in time, from run history (independent of
/// sampling: a run's interval is from its start to its finish).
fn most_overlapping(runs: &[RunRecord], role: &str) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for run in runs.iter().filter(|r| r.key.role == role) {
        let end = run.finished_at.unwrap_or(run.started_at).timestamp_millis();
        edges.push((run.started_at.timestamp_millis(), 1));
        edges.push((end, -1));
    }
    // Ends sort before starts at the same millisecond: back-to-back is not overlap.
    edges.sort();
    let (mut now, mut worst) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        worst = worst.max(now);
    }
    usize::try_from(worst).unwrap_or(0)
}

/// The most runs of one (ticket, role) that overlapped in time: the ledger's guarantee
/// (one winner per key, across hosts) is that this is 1.
fn most_overlapping_per_key(runs: &[RunRecord]) -> usize {
    let mut keys: Vec<&sortie::ledger::ClaimKey> = runs.iter().map(|r| &r.key).collect();
    keys.sort();
    keys.dedup();
    keys.iter()
        .map(|key| {
            let of_key: Vec<RunRecord> = runs.iter().filter(|r| &r.key == *key).cloned().collect();
            most_overlapping(&of_key, &key.role)
        })
        .max()
        .unwrap_or(0)
}

/// Keys that ran more than once, one run after the other. With overlapping ticks a tick
/// can list a ticket, another host finish that stage and release its claim, and the
/// first tick then claim the (now free) key from its stale listing; the claim step's
/// re-read after `try_claim` gives such a claim back (issue #20), so there are none. The
/// ledger's part, one holder at a time, is [`most_overlapping_per_key`].
fn stale_listing_reruns(runs: &[RunRecord]) -> Vec<((String, String), usize)> {
    runs_per_key(runs)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect()
}

fn runs_per_key(runs: &[RunRecord]) -> BTreeMap<(String, String), usize> {
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for run in runs {
        *per.entry((run.key.ticket_id.clone(), run.key.role.clone()))
            .or_default() += 1;
    }
    per
}

#[test]
fn three_hosts_run_thirty_tickets_once_each_within_the_fleet_wide_cap() {
    let fleet = Fleet::new(3, 30, "0");
    let ids = fleet.add_tickets(30);
    let sampler = Sampler::start(fleet.ledger());
    let started = Instant::now();
    fleet.run_until_done(&[1, 2, 3], &ids, Duration::from_secs(600), 0);
    let (samples, worst) = sampler.finish();
    eprintln!(
        "30 tickets through 3 stages on 3 hosts in {:?}",
        started.elapsed()
    );

    let extra_blocks = fleet.assert_each_stage_wrote_back(&ids);
    let runs = fleet.ledger().recent_runs(Scope::All, 10_000).unwrap();
    let per_key = runs_per_key(&runs);
    assert_eq!(per_key.len(), 90, "30 tickets x 3 roles ran");
    assert_eq!(
        most_overlapping_per_key(&runs),
        1,
        "two hosts ran one (ticket, role) at the same time"
    );
    let reruns = stale_listing_reruns(&runs);
    assert!(
        reruns.is_empty(),
        "{} sequential re-runs from stale listings ({extra_blocks} extra outcome blocks): {reruns:?}",
        reruns.len()
    );
    assert!(samples > 20, "the ledger was sampled ({samples} samples)");
    for (role, n) in &worst {
        assert!(*n <= 2, "{n} live claims of {role} sampled; the cap is 2");
    }
    for role in ["architect", "backend", "qa"] {
        let overlap = most_overlapping(&runs, role);
        assert!(
            overlap <= 2,
            "{overlap} {role} runs overlapped; the cap is 2"
        );
    }
    // The work was shared: every host ran something.
    let hosts: std::collections::BTreeSet<&str> = runs
        .iter()
        .map(|r| r.claimer_id.split(':').next().unwrap_or(""))
        .collect();
    assert!(!hosts.is_empty());
    // Nothing is left claimed.
    assert_eq!(fleet.ledger().claims(Scope::All).unwrap(), vec![]);
}

/// Wait until a claim held by process `pid` shows up; returns it.
fn claim_of(ledger: &dyn Ledger, pid: u32, limit: Duration) -> Claim {
    let started = Instant::now();
    loop {
        if let Some(c) = ledger
            .claims(Scope::All)
            .unwrap()
            .into_iter()
            .find(|c| c.claimer_id.split(':').nth(1) == Some(&pid.to_string()))
        {
            return c;
        }
        assert!(started.elapsed() < limit, "process {pid} claimed nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_host_s_tickets_are_taken_over_after_its_lease_and_nothing_is_lost() {
    let fleet = Fleet::new(3, 3, "2");
    let ids = fleet.add_tickets(4);
    let ledger = fleet.ledger();
    let mut victim = fleet.spawn_tick(1, 0);
    claim_of(&ledger, victim.id(), Duration::from_secs(60));
    // Let it claim what it will, then, with runs in flight (the agent sleeps 2 s), kill
    // the host's tick outright.
    std::thread::sleep(Duration::from_millis(500));
    let pid = victim.id().to_string();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(victim.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    victim.wait().unwrap();
    let orphaned: Vec<Claim> = ledger
        .claims(Scope::All)
        .unwrap()
        .into_iter()
        .filter(|c| c.claimer_id.split(':').nth(1) == Some(pid.as_str()))
        .collect();
    assert!(!orphaned.is_empty(), "the killed host held claims");
    fleet.run_until_done(&[2, 3], &ids, Duration::from_secs(300), 1);
    fleet.assert_each_stage_wrote_back(&ids);
    let runs = ledger.recent_runs(Scope::All, 1_000).unwrap();
    assert_eq!(most_overlapping_per_key(&runs), 1);
    // The killed host's keys ran again, on another host, after its lease ran out.
    for claim in &orphaned {
        let again: Vec<&RunRecord> = runs
            .iter()
            .filter(|r| r.key == claim.key && r.claimer_id != claim.claimer_id)
            .collect();
        assert!(!again.is_empty(), "{} was not taken over", claim.key);
        for run in again {
            assert!(run.stage_attempt > claim.stage_attempt, "{run:?}");
            assert!(
                run.started_at >= claim.lease_expires_at,
                "{} was taken over before the killed host's lease ran out: {run:?}",
                claim.key
            );
        }
    }
    assert_eq!(ledger.claims(Scope::All).unwrap(), vec![]);
}

#[test]
fn a_host_paused_past_its_lease_never_writes_back() {
    let fleet = Fleet::new(3, 3, "3");
    let ids = fleet.add_tickets(2);
    let ledger = fleet.ledger();
    let mut paused = fleet.spawn_tick(1, 0);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(paused.id()).unwrap());
    let claim = claim_of(&ledger, paused.id(), Duration::from_secs(60));
    // Pause it while it waits for its agents (each claim has its agent's pid), not in
    // the middle of a board write: the local board's file lock would stay held by the
    // stopped process and stop every other host too (a remote tracker has no such lock).
    let started = Instant::now();
    while !ledger
        .claims(Scope::All)
        .unwrap()
        .iter()
        .filter(|c| c.claimer_id == claim.claimer_id)
        .all(|c| c.agent_pid.is_some())
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no agent started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Past the lease (3 s): another host takes the ticket over and finishes it.
    std::thread::sleep(Duration::from_secs(4));
    fleet.run_until_done(&[2], &ids, Duration::from_secs(300), 1);
    let before: Vec<usize> = ids
        .iter()
        .map(|id| fleet.sandbox.comments(id).len())
        .collect();
    // The paused host wakes up: it finds its lease lost and writes nothing.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    paused.wait().unwrap();
    let after: Vec<usize> = ids
        .iter()
        .map(|id| fleet.sandbox.comments(id).len())
        .collect();
    assert_eq!(
        before, after,
        "the paused host wrote to the board after waking up"
    );
    fleet.assert_each_stage_wrote_back(&ids);
    let runs = ledger.recent_runs(Scope::All, 1_000).unwrap();
    let taken_over = runs.iter().any(|r| {
        r.key == claim.key
            && r.claimer_id != claim.claimer_id
            && r.stage_attempt > claim.stage_attempt
            && r.started_at >= claim.lease_expires_at
    });
    assert!(
        taken_over,
        "the paused claim {claim:?} was taken over: {runs:?}"
    );
    // Its runs end cancelled (lease lost) or never finish; none reached an outcome.
    assert!(
        runs.iter().all(|r| r.claimer_id != claim.claimer_id
            || !matches!(r.outcome.as_deref(), Some("success" | "failure"))),
        "the paused host recorded an outcome: {runs:?}"
    );
}

//! Several hosts, one ledger, one board (every backend): the fleet's caps are shared
//! between the hosts ticking the tracker, so a fleet adds capacity (issue #52).
//!
//! Three pipelines of this process act as three hosts: each claims as its own host
//! (`PipelineBuilder::host`), with its own state root and its own ledger connection,
//! on one board. Nothing depends on timing: the hosts tick in a fixed order, as
//! daemons do (each once at start; the host whose run ended at once; one host's poll
//! timer after each run, in turn), and a run ends only when the test opens its gate, a
//! FIFO its agent reads: the oldest run in flight first.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sortie::config::Config;
use sortie::pipeline::{Pipeline, TickOptions};
use sortie::tracker::memory::MemoryTracker;

use super::Backend;

const HOSTS: usize = 3;
const TICKETS: usize = 60;
const ROLES: [&str; 3] = ["architect", "backend", "qa"];

/// The three-stage pipeline, a fleet cap of 6 runs per role (18 in all), and an agent
/// that succeeds once its gate is opened.
fn config(dir: &Path, host: usize, agent: &Path) -> Config {
    let text = format!(
        "tracker: {{kind: local, path: board}}\n\
         state_root: {state}\n\
         roles_dir: {roles}\n\
         claim_lock_ttl_seconds: 600\n\
         concurrency: {{max_in_flight: 18, per_role_max_in_flight: 6}}\n\
         terminal_states: [done]\n\
         agent: {{command: [{agent:?}], timeout_seconds: 600}}\n\
         pipeline_stages:\n\
         \x20 - {{role: architect, claim_status: ready, success_status: designed}}\n\
         \x20 - {{role: backend, claim_status: designed, success_status: review, requires_prior_role: architect}}\n\
         \x20 - {{role: qa, claim_status: review, success_status: done, requires_prior_role: backend}}\n",
        state = dir.join(format!("state-{host}")).display(),
        roles = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("roles").display(),
        agent = agent.display().to_string(),
    );
    Config::parse_str(&text, Some(&dir.join("pipeline.yaml")))
        .unwrap_or_else(|e| panic!("fleet config: {e}\n{text}"))
}

/// A run in flight: the host (index) that claimed it, its ticket and role.
type Run = (usize, String, String);

struct Fleet {
    hosts: Vec<Pipeline>,
    gates: PathBuf,
    /// Runs in flight, oldest first.
    in_flight: VecDeque<Run>,
    /// Run ids seen so far.
    seen: BTreeSet<String>,
}

impl Fleet {
    /// One daemon tick of `host`; the runs it started join the end of the queue, in
    /// ticket and role order.
    async fn tick(&mut self, host: usize) {
        let pipeline = &self.hosts[host];
        pipeline
            .tick_detached(TickOptions::default())
            .await
            .unwrap_or_else(|e| panic!("host-{} tick: {e}", host + 1));
        let mut started: Vec<(u32, String, String)> = Vec::new();
        for claim in pipeline
            .ledger()
            .claims(sortie::ledger::Scope::All)
            .unwrap()
        {
            if self.seen.insert(claim.run_id.clone()) {
                assert_eq!(
                    claim.claimer_id.host(),
                    format!("host-{}", host + 1),
                    "a claim appeared that this tick did not make"
                );
                let number: u32 = claim.key.ticket_id.parse().unwrap();
                started.push((number, claim.key.ticket_id, claim.key.role));
            }
        }
        started.sort();
        self.in_flight.extend(
            started
                .into_iter()
                .map(|(_, ticket, role)| (host, ticket, role)),
        );
    }

    /// Let the run's agent finish, then wait until its run has ended (written back,
    /// claim released).
    async fn finish(&self, (host, ticket, role): &Run) {
        let gate = self.gates.join(format!("{ticket}-{role}"));
        // Opening a FIFO for writing waits for its reader: the agent, started.
        let opened = tokio::task::spawn_blocking(move || {
            let mut fifo = std::fs::OpenOptions::new().write(true).open(&gate)?;
            fifo.write_all(b"go\n")
        });
        tokio::time::timeout(Duration::from_secs(120), opened)
            .await
            .unwrap_or_else(|_| panic!("the agent of {ticket}/{role} never started"))
            .unwrap()
            .unwrap();
        let pipeline = &self.hosts[*host];
        let ended = pipeline.run_ended();
        while pipeline
            .live_runs()
            .iter()
            .any(|run| run.ticket == *ticket && run.role == *role)
        {
            // A run's end stores a permit when nobody waits: none is lost between the
            // check and the wait.
            ended.notified().await;
        }
        pipeline.collect_finished();
    }
}

pub fn three_hosts_share_the_runs_of_a_fleet_cap(backend: &dyn Backend) {
    let store = backend.store();
    let dir = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    std::fs::create_dir(&gates).unwrap();
    let mut mkfifo = std::process::Command::new("mkfifo");
    for ticket in 1..=TICKETS {
        for role in ROLES {
            mkfifo.arg(gates.join(format!("{ticket}-{role}")));
        }
    }
    assert!(mkfifo.status().expect("mkfifo (coreutils)").success());
    let agent = dir.path().join("gated-agent");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nread go < \"{}/$SORTIE_TICKET_ID-$SORTIE_ROLE\"\n",
            gates.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let board = Arc::new(MemoryTracker::new());
    for ticket in 1..=TICKETS {
        board.insert(MemoryTracker::ticket(
            &ticket.to_string(),
            &format!("Ticket {ticket}"),
            "ready",
        ));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runs = runtime.block_on(async {
        let mut hosts = Vec::new();
        for host in 1..=HOSTS {
            let pipeline = Pipeline::builder(
                config(dir.path(), host, &agent),
                board.clone(),
                store.open(),
            )
            .host(format!("host-{host}"))
            .build()
            .await
            .unwrap();
            hosts.push(pipeline);
        }
        let mut fleet = Fleet {
            hosts,
            gates,
            in_flight: VecDeque::new(),
            seen: BTreeSet::new(),
        };
        for host in 0..HOSTS {
            fleet.tick(host).await;
        }
        let mut poll = 0;
        while let Some(run) = fleet.in_flight.pop_front() {
            fleet.finish(&run).await;
            fleet.tick(run.0).await;
            fleet.tick(poll % HOSTS).await;
            poll += 1;
        }
        fleet.hosts[0]
            .ledger()
            .recent_runs(sortie::ledger::Scope::All, 10 * TICKETS)
            .unwrap()
    });

    for ticket in 1..=TICKETS {
        let status = board.snapshot(&ticket.to_string()).unwrap().status;
        assert_eq!(
            status, "done",
            "ticket {ticket} did not finish the pipeline"
        );
    }
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for run in &runs {
        assert_eq!(run.outcome.as_deref(), Some("success"), "{run:?}");
        *per_host
            .entry(run.claimer_id.host().to_string())
            .or_default() += 1;
    }
    assert_eq!(runs.len(), TICKETS * ROLES.len(), "runs: {per_host:?}");
    for host in 1..=HOSTS {
        let ran = per_host.get(&format!("host-{host}")).copied().unwrap_or(0);
        assert!(
            ran * 5 >= runs.len(),
            "host-{host} ran {ran} of {} runs, less than a fifth: {per_host:?}",
            runs.len()
        );
    }
}

fn at(secs: i64) -> sortie::ledger::Timestamp {
    chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn share_request(ticket: &str, role: &str, claimer: &str) -> sortie::ledger::ClaimRequest {
    use sortie::ledger::{ClaimKey, ClaimLimits, ClaimRequest, HostShare};
    ClaimRequest {
        key: ClaimKey::new("local", ticket, role),
        stage: format!("{role}-ready"),
        claimer_id: claimer.into(),
        run_id: format!("run-{ticket}-{role}"),
        ttl: Duration::from_secs(600),
        limits: ClaimLimits {
            global: 5,
            role: 4,
            status: None,
            host: Some(HostShare {
                global: 3,
                role: 2,
                status: None,
            }),
        },
        attempt_floor: 0,
    }
}

pub fn a_host_holding_its_share_is_refused_while_other_hosts_claim(backend: &dyn Backend) {
    use sortie::ledger::{CeilingScope, ClaimOutcome};
    let ledger = backend.fresh();
    let claim = |ticket: &str, role: &str, claimer: &str, secs: i64| {
        ledger
            .try_claim(&share_request(ticket, role, claimer), at(secs))
            .unwrap()
    };
    let acquired = |outcome: ClaimOutcome| matches!(outcome, ClaimOutcome::Acquired(_));
    // Two processes of host-a fill its share of the role (2 of the fleet's 4).
    assert!(acquired(claim("1", "dev", "host-a:1:x", 0)));
    assert!(acquired(claim("2", "dev", "host-a:2:y", 0)));
    assert_eq!(
        claim("3", "dev", "host-a:1:x", 0),
        ClaimOutcome::HostShare(CeilingScope::Role)
    );
    // Another host (even one whose name starts with host-a) still has its share.
    assert!(acquired(claim("3", "dev", "host-a2:1:z", 0)));
    // host-a's third claim of any role reaches its share of the global cap (3 of 5).
    assert!(acquired(claim("4", "qa", "host-a:1:x", 0)));
    assert_eq!(
        claim("5", "qa", "host-a:1:x", 0),
        ClaimOutcome::HostShare(CeilingScope::Global)
    );
    // A full fleet answers with the fleet's cap, not the share.
    assert!(acquired(claim("5", "dev", "host-b:1:w", 0)));
    assert_eq!(
        claim("6", "dev", "host-a:1:x", 0),
        ClaimOutcome::Ceiling(CeilingScope::Role)
    );
    // Expired claims count toward no share.
    assert!(acquired(claim("6", "dev", "host-a:1:x", 601)));
}

pub fn announced_hosts_are_listed_until_they_expire(backend: &dyn Backend) {
    let ledger = backend.fresh();
    let stages = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(role, status)| (role.to_string(), status.to_string()))
            .collect()
    };
    let all = stages(&[("dev", "todo"), ("qa", "review")]);
    ledger
        .announce("local", "host-b", &all, at(600), at(0))
        .unwrap();
    ledger
        .announce(
            "local",
            "host-a",
            &stages(&[("qa", "review")]),
            at(100),
            at(0),
        )
        .unwrap();
    ledger
        .announce("other", "host-c", &all, at(600), at(0))
        .unwrap();
    let listed = |tracker: &str| -> Vec<(String, String, String, i64)> {
        ledger
            .hosts(tracker)
            .unwrap()
            .into_iter()
            .map(|p| {
                (
                    p.host,
                    p.role,
                    p.status,
                    p.expires_at.timestamp() - at(0).timestamp(),
                )
            })
            .collect()
    };
    let row = |host: &str, role: &str, status: &str, secs: i64| {
        (host.to_string(), role.to_string(), status.to_string(), secs)
    };
    assert_eq!(
        listed("local"),
        [
            row("host-a", "qa", "review", 100),
            row("host-b", "dev", "todo", 600),
            row("host-b", "qa", "review", 600),
        ]
    );
    // Announcing again moves the expiry; an announcement forgets the expired rows.
    ledger
        .announce("local", "host-b", &all, at(900), at(300))
        .unwrap();
    assert_eq!(
        listed("local"),
        [
            row("host-b", "dev", "todo", 900),
            row("host-b", "qa", "review", 900),
        ]
    );
    assert_eq!(listed("other").len(), 2);
    assert_eq!(ledger.snapshot("local").unwrap().hosts.len(), 2);
}

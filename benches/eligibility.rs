//! Eligibility, ordering and the plan over 10,000 in-memory tickets: the pure core of a
//! tick.
//!
//! `cargo bench --bench eligibility`

use std::time::Duration;

use chrono::{TimeZone, Utc};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

use sortie::config::Config;
use sortie::ledger::{Claim, ClaimKey, LedgerSnapshot, RetryEntry};
use std::collections::HashMap;

use sortie::pipeline::decide::plan::{plan, Facts, PlanInput, Planner};
use sortie::pipeline::eligibility::candidates;
use sortie::pipeline::history::TicketHistory;
use sortie::tracker::Ticket;

const CONFIG: &str = r#"
tracker: {kind: local, path: board}
agent: {command: ["true"]}
terminal_states: [done, cancelled]
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - {role: backend, claim_status: design-approved, success_status: code-review, requires_prior_role: architect}
  - {role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}
"#;

fn board(n: usize) -> Vec<Ticket> {
    let statuses = ["ready-for-design", "design-approved", "code-review"];
    let base = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    (0..n)
        .map(|i| Ticket {
            id: i.to_string(),
            title: format!("ticket {i}"),
            body: String::new(),
            status: statuses[i % 3].to_string(),
            labels: Vec::new(),
            priority: if i % 7 == 0 {
                None
            } else {
                Some((i % 5) as i64)
            },
            created_at: base + chrono::Duration::seconds((i * 7919 % n) as i64),
            updated_at: base,
            url: None,
            closed: false,
            assignees: Vec::new(),
            blocked_by: None,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let config = Config::parse_str(CONFIG, None).expect("bench config");
    let tickets = board(10_000);
    let now = Utc::now();
    // Every 10th ticket is claimed and every 13th has a retry not yet due: the steady state.
    let claims: Vec<Claim> = tickets
        .iter()
        .step_by(10)
        .map(|t| Claim {
            key: ClaimKey::new("local", &t.id, "architect"),
            stage: t.status.clone(),
            claimer_id: "bench".into(),
            claimed_at: now,
            lease_expires_at: now + chrono::Duration::seconds(600),
            stage_attempt: 1,
            run_id: "r".into(),
            cancel_requested: false,
            agent_pid: None,
        })
        .collect();
    let retries: Vec<RetryEntry> = tickets
        .iter()
        .step_by(13)
        .map(|t| RetryEntry {
            key: ClaimKey::new("local", &t.id, "architect"),
            stage: t.status.clone(),
            failed_attempt: 1,
            due_at: now + chrono::Duration::seconds(60),
            reason_code: "agent.timeout".into(),
        })
        .collect();
    let snapshot = LedgerSnapshot {
        claims,
        retries,
        ..LedgerSnapshot::default()
    };
    c.bench_function("eligibility_and_order_10k", |b| {
        b.iter(|| {
            let (ordered, skips) =
                candidates(&config, black_box(&tickets), &snapshot, "sortie", now);
            black_box((ordered.len(), skips.len()))
        })
    });
    let (histories, unreadable) = (Default::default(), Default::default());
    c.bench_function("plan_10k", |b| {
        b.iter(|| {
            let p = plan(PlanInput {
                config: &config,
                tickets: black_box(&tickets),
                ledger: &snapshot,
                histories: &histories,
                unreadable: &unreadable,
                identity: "sortie",
                host: "host-1",
                blockers: false,
                blockers_read: &Default::default(),
                now,
            });
            black_box((p.dispatches.len(), p.skips.len(), p.needs_history.len()))
        })
    });
}

/// Issue #29's board: a third `done`, a third `backlog` (no stage's status), a third in
/// `design-approved` with no architect block, so each of those is a candidate whose
/// history the plan must read before it can say the stage's one slot stays free.
fn thirds(n: usize) -> Vec<Ticket> {
    let mut tickets = board(n);
    for (i, t) in tickets.iter_mut().enumerate() {
        t.status = ["done", "backlog", "design-approved"][i % 3].to_string();
    }
    tickets
}

/// The tick's "read what the plan asks for" loop over in-memory histories (every read
/// finds no block): rounds of the planner until it needs nothing, then the plan.
fn plan_with_reads(config: &Config, tickets: &[Ticket], snapshot: &LedgerSnapshot) -> usize {
    let now = Utc::now();
    let mut histories: HashMap<String, TicketHistory> = HashMap::new();
    let (unreadable, blockers_read) = (HashMap::new(), HashMap::new());
    let mut planner = Planner::new(config, tickets, snapshot, "sortie", "host-1", now);
    let mut rounds = 0;
    loop {
        let facts = Facts {
            config,
            identity: "sortie",
            blockers: false,
            histories: &histories,
            unreadable: &unreadable,
            blockers_read: &blockers_read,
            now,
        };
        let ids: Vec<String> = planner
            .round(&facts)
            .history
            .iter()
            .map(|s| s.to_string())
            .collect();
        if ids.is_empty() {
            let plan = planner.finish(&facts);
            return rounds + plan.skips.len();
        }
        rounds += 1;
        for id in ids {
            histories.insert(id, TicketHistory::default());
        }
    }
}

fn bench_reads(c: &mut Criterion) {
    let config = Config::parse_str(CONFIG, None).expect("bench config");
    let snapshot = LedgerSnapshot::default();
    for n in [10_000, 100_000] {
        let tickets = thirds(n);
        c.bench_function(
            &format!("plan_with_history_reads_thirds_{}k", n / 1000),
            |b| b.iter(|| black_box(plan_with_reads(&config, black_box(&tickets), &snapshot))),
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench, bench_reads
}
criterion_main!(benches);

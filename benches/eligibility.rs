//! Eligibility, ordering and the plan over 10,000 in-memory tickets: the pure core of a
//! tick.
//!
//! `cargo bench --bench eligibility`

use std::time::Duration;

use chrono::{TimeZone, Utc};
use criterion::{black_box, criterion_group, criterion_main, Criterion};

use sortie::config::Config;
use sortie::ledger::{Claim, ClaimKey, LedgerSnapshot, RetryEntry};
use sortie::pipeline::decide::plan::{plan, PlanInput};
use sortie::pipeline::eligibility::candidates;
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
                blockers: false,
                blockers_read: &Default::default(),
                now,
            });
            black_box((p.dispatches.len(), p.skips.len(), p.needs_history.len()))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);

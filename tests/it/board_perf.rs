//! A quick, untimed look at how long listing a 10,000-ticket board takes.
//!
//! Run with `cargo test --release --test it board_perf -- --ignored --nocapture`.

use std::time::Instant;

use sortie::tracker::local::LocalBoard;

#[test]
#[ignore = "a measurement to read, not a check: run by hand in release mode"]
fn listing_ten_thousand_tickets() {
    let tmp = tempfile::tempdir().unwrap();
    let board = LocalBoard::init(&tmp.path().join("board")).unwrap();
    for i in 1..=10_000 {
        let dir = board.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        let status = if i % 10 == 0 { "done" } else { "backlog" };
        std::fs::write(
            dir.join("ticket.md"),
            format!(
                "---\ntitle: Ticket number {i}\nstatus: {status}\npriority: {}\nlabels: [flaky, ui]\n\
                 created_at: 2026-11-30T10:00:00Z\nupdated_at: 2026-11-30T10:00:00Z\n---\n{}",
                i % 5,
                "Body text for the ticket, a few lines long.\n".repeat(20)
            ),
        )
        .unwrap();
    }
    let wanted = vec!["ready-for-design".to_owned(), "ready-for-dev".to_owned()];
    for round in 0..3 {
        let start = Instant::now();
        let cpu_start = thread_cpu_ns();
        let listing = board.list_in(&wanted).unwrap();
        let none = start.elapsed();
        let cpu = thread_cpu_ns()
            .zip(cpu_start)
            .map(|(b, a)| (b - a) / 1_000_000);
        let start = Instant::now();
        let all = board.list_all().unwrap();
        let every = start.elapsed();
        assert!(listing.tickets.is_empty());
        assert_eq!(all.tickets.len(), 10_000);
        println!(
            "round {round}: list(statuses) with nothing eligible {none:?} wall, \
             {cpu:?} ms on the CPU; list_all {every:?} wall"
        );
    }
}

/// CPU time this thread has run, in nanoseconds (Linux), to read past a busy machine's queueing.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

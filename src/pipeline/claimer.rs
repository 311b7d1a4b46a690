//! Whether the process behind a claim of this host is still there. Claimer ids
//! themselves (`host:pid:nonce`, the host from `SORTIE_HOST_ID`) are the ledger's:
//! [`crate::ledger::ClaimerId`].

use chrono::{DateTime, Utc};

use crate::ledger::ClaimerId;

/// Whether the claim held by `claimer_id` since `claimed_at` belongs to a process of this
/// host (`my_claimer_id`'s host) that no longer runs: no process has its pid, the one
/// that has it is a zombie, or it started after the claim was taken (the pid was
/// reused). Claims of other hosts, and processes that cannot be inspected, are not gone:
/// only their lease says when they may be taken over.
pub fn holder_is_gone(
    claimer_id: &ClaimerId,
    claimed_at: DateTime<Utc>,
    my_claimer_id: &ClaimerId,
) -> bool {
    if claimer_id == my_claimer_id || claimer_id.host() != my_claimer_id.host() {
        return false;
    }
    let Some(pid) = claimer_id.pid() else {
        return false;
    };
    match process_start(pid) {
        ProcessStart::Missing => true,
        ProcessStart::Zombie => true,
        // A second of slack: boot time and clock ticks are coarse.
        ProcessStart::At(start) => start > claimed_at + chrono::Duration::seconds(1),
        ProcessStart::Unknown => false,
    }
}

/// What `/proc` says about a process.
enum ProcessStart {
    Missing,
    Zombie,
    At(DateTime<Utc>),
    Unknown,
}

fn process_start(pid: u32) -> ProcessStart {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return ProcessStart::Missing,
        Err(_) => return ProcessStart::Unknown,
    };
    // The command name (field 2) may hold spaces and parentheses: fields after it
    // start after the last `)`.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return ProcessStart::Unknown;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is the state (field 3); the start time is field 22, fields[19].
    if fields.first() == Some(&"Z") {
        return ProcessStart::Zombie;
    }
    let (Some(ticks), Some(boot)) = (
        fields.get(19).and_then(|t| t.parse::<u64>().ok()),
        boot_time(),
    ) else {
        return ProcessStart::Unknown;
    };
    // `/proc` reports times in USER_HZ, 100 per second on every Linux architecture
    // sortie runs on.
    let millis = ticks.saturating_mul(10);
    match DateTime::from_timestamp(boot, 0) {
        Some(boot) => ProcessStart::At(boot + chrono::Duration::milliseconds(millis as i64)),
        None => ProcessStart::Unknown,
    }
}

fn boot_time() -> Option<i64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    // How an id splits into host and pid: `ledger::claimer`'s tests.

    #[test]
    fn a_dead_process_of_this_host_is_gone_a_live_one_and_other_hosts_are_not() {
        let me = crate::ledger::claimer_id();
        let host = me.host().to_string();
        let long_ago = Utc::now() - chrono::Duration::days(3650);
        // This test process is alive and started before now.
        let alive = ClaimerId::from(format!("{host}:{}:00000000", std::process::id()));
        assert!(!holder_is_gone(&alive, Utc::now(), &me));
        // ... but it started after a claim taken ten years ago: that pid was reused.
        assert!(holder_is_gone(&alive, long_ago, &me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = ClaimerId::from(format!("{host}:{pid}:00000000"));
        assert!(holder_is_gone(&dead, Utc::now(), &me));
        let elsewhere = ClaimerId::from(format!("{host}-other:{pid}:00000000"));
        assert!(!holder_is_gone(&elsewhere, Utc::now(), &me));
        assert!(!holder_is_gone(&me, Utc::now(), &me));
    }
}

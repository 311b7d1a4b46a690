//! Finding and killing the processes of a run: the whole tree of a live run, and whatever a
//! run whose orchestrator died left behind.
//!
//! A process group is not enough: Claude Code's Bash tool starts commands in a session of
//! their own (setsid), out of the agent's group. A run's processes are found two ways: by
//! parent pid from the agent down (`/proc/<pid>/stat`), and by the `SORTIE_RUN_ID` mark in
//! their environment, which survives re-parenting once the agent has exited.
//!
//! Every agent process, and everything it starts, inherits `SORTIE_RUN_ID` in its
//! environment. After a crash, the next holder of the ticket looks for processes
//! carrying the dead run's id and kills them before the ticket runs again: a
//! recorded pid alone could have been reused by an unrelated process.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Kill every process on this host whose environment carries `SORTIE_RUN_ID=<run_id>`.
/// Returns how many were signalled. Processes that cannot be inspected are left alone.
pub fn reap_run(run_id: &str) -> usize {
    let needle = format!("SORTIE_RUN_ID={run_id}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id();
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if u32::try_from(pid).is_ok_and(|p| p == me) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|b| *b == 0)
            .any(|var| var == needle.as_bytes())
        {
            tracing::warn!(
                pid,
                run_id,
                "killing an agent process left behind by a crashed run"
            );
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// One process as `/proc` shows it.
#[derive(Debug, Clone, Copy)]
struct ProcEntry {
    pid: i32,
    ppid: i32,
    /// utime + stime + cutime + cstime, in clock ticks: CPU the process and its reaped
    /// children used.
    cpu_ticks: u64,
}

/// Parse `/proc/<pid>/stat`: the fields after the command name, which is in parentheses
/// and may itself hold spaces and parentheses.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is the state (field 3 of proc(5)); ppid is field 4, utime..cstime 14..17.
    let ppid = fields.get(1)?.parse().ok()?;
    let cpu_ticks = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    Some(ProcEntry {
        pid,
        ppid,
        cpu_ticks,
    })
}

fn carries_mark(pid: i32, needle: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|environ| environ.split(|b| *b == 0).any(|var| var == needle))
}

/// Every process of the run rooted at `root` (the agent itself excluded): its descendants by
/// parent pid, and any process marked `SORTIE_RUN_ID=<run_id>` (with theirs).
fn run_tree(root: u32, run_id: Option<&str>) -> Vec<ProcEntry> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = i32::try_from(std::process::id()).unwrap_or(-1);
    let root = i32::try_from(root).unwrap_or(-1);
    let needle = run_id.map(|id| format!("SORTIE_RUN_ID={id}").into_bytes());
    let procs: Vec<ProcEntry> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            parse_stat(
                pid,
                &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
            )
        })
        .collect();
    let mut inside: std::collections::BTreeSet<i32> = procs
        .iter()
        .filter(|p| p.pid != root)
        .filter(|p| needle.as_deref().is_some_and(|n| carries_mark(p.pid, n)))
        .map(|p| p.pid)
        .collect();
    inside.insert(root);
    // Parents before children is not guaranteed in /proc order: grow to a fixed point.
    loop {
        let before = inside.len();
        for p in &procs {
            if inside.contains(&p.ppid) && p.pid != me {
                inside.insert(p.pid);
            }
        }
        if inside.len() == before {
            break;
        }
    }
    procs
        .into_iter()
        .filter(|p| p.pid != root && inside.contains(&p.pid))
        .collect()
}

/// Send `signal` to every process of the run rooted at `root` (see `run_tree`) and to the
/// root itself. Returns how many processes other than the root were signalled.
pub fn kill_tree(root: u32, run_id: Option<&str>, signal: Signal) -> usize {
    let tree = run_tree(root, run_id);
    if let Ok(raw) = i32::try_from(root) {
        if raw > 0 {
            let _ = kill(Pid::from_raw(raw), signal);
        }
    }
    tree.iter()
        .filter(|p| kill(Pid::from_raw(p.pid), signal).is_ok())
        .count()
}

/// CPU time, in clock ticks, used so far by the descendants of `root` and the processes
/// marked with `run_id` (the root's own CPU is not counted: an idle agent CLI ticks).
/// A growing figure means a tool call is working, even when it prints nothing.
pub fn tree_cpu_ticks(root: u32, run_id: Option<&str>) -> u64 {
    run_tree(root, run_id).iter().map(|p| p.cpu_ticks).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a) (b c) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 1 1 1";
        let p = parse_stat(4242, line).unwrap();
        assert_eq!((p.pid, p.ppid, p.cpu_ticks), (4242, 17, 13));
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn the_tree_follows_parents_into_new_sessions_and_the_mark() {
        // A shell whose child escapes into its own session (setsid), as Claude Code's Bash
        // tool does: a process-group kill would miss it.
        let mut root = std::process::Command::new("sh")
            .arg("-c")
            .arg("setsid sleep 1000 & wait")
            .spawn()
            .unwrap();
        let root_pid = root.id();
        let mut found = Vec::new();
        for _ in 0..500 {
            found = run_tree(root_pid, None);
            if found.iter().any(|p| {
                std::fs::read_to_string(format!("/proc/{}/cmdline", p.pid))
                    .is_ok_and(|c| c.starts_with("sleep"))
            }) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(found.len(), 1, "{found:?}");
        let escaped = found[0].pid;
        assert_ne!(
            nix::unistd::getpgid(Some(Pid::from_raw(escaped))).unwrap(),
            nix::unistd::getpgid(Some(Pid::from_raw(root_pid as i32))).unwrap(),
            "the child runs in a group of its own"
        );
        assert_eq!(kill_tree(root_pid, None, Signal::SIGKILL), 1);
        root.wait().unwrap();
        for _ in 0..500 {
            let state =
                std::fs::read_to_string(format!("/proc/{escaped}/stat")).unwrap_or_default();
            if state.is_empty() || state.contains(") Z") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("the escaped sleep {escaped} survived");
    }

    #[test]
    fn kills_processes_of_the_run_and_spares_others() {
        let run_id = format!("test-{}", uuid::Uuid::new_v4().simple());
        let mut ours = std::process::Command::new("sleep")
            .arg("1000")
            .env("SORTIE_RUN_ID", &run_id)
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("1000")
            .env("SORTIE_RUN_ID", format!("{run_id}-other"))
            .spawn()
            .unwrap();
        // Until the child has exec'd, /proc shows the parent's environment: wait for it.
        let needle = format!("SORTIE_RUN_ID={run_id}");
        for _ in 0..500 {
            let environ = std::fs::read(format!("/proc/{}/environ", ours.id())).unwrap_or_default();
            if environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(reap_run(&run_id), 1);
        let status = ours.wait().unwrap();
        assert!(!status.success(), "killed");
        assert!(
            other.try_wait().unwrap().is_none(),
            "the other run's process lives"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}

//! Finding and killing the processes of a run: the whole tree of a live run, and whatever a
//! run whose orchestrator died left behind, without reading any process outside them.
//!
//! A process group is not enough: Claude Code's Bash tool starts commands in a session of
//! their own (setsid), out of the agent's group. So sortie is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`): a descendant whose parent exits is re-parented to sortie
//! instead of init. A run's processes are then the agent's descendants (walked through
//! `/proc/<pid>/task/<tid>/children`) and the orphans sortie adopted that carry the run's
//! `SORTIE_RUN_ID` mark (with theirs); only sortie's own adopted children have their
//! environment read.
//!
//! While a run lives, what the supervision sees (pid and start time of each process) is
//! kept in the run directory's `processes` file. After a crash, the next holder of the
//! ticket kills what is still alive of those processes, and their descendants: a
//! recorded pid whose start time differs was reused by an unrelated process and is left
//! alone.

use std::path::Path;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::proctree::{carries_mark, children, descendants, stat, Stat};

/// The file of a run directory that keeps the run's processes for crash recovery.
const RECORD_FILE: &str = "processes";

/// Make this process a child subreaper, once: orphans of the agents it starts are then
/// re-parented to it, where a run finds them. A host that refuses it (not Linux) keeps the
/// process-group and descendant kills.
pub fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(%err, "cannot become a child subreaper: an agent's detached processes may escape to init");
        }
    });
}

fn my_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(-1)
}

/// Whether `child`, a child of this process, was adopted (re-parented here as an orphan)
/// rather than started by sortie: sortie starts its commands either in its own group or in
/// a group of their own within its session, and never in a new session.
fn adopted(child: &Stat, mine: &Stat) -> bool {
    let own_group_in_my_session = child.pgid == child.pid && child.sid == mine.sid;
    child.pgid != mine.pgid && !own_group_in_my_session
}

/// The processes of a run, and whether an adopted orphan could not be told apart (its
/// environment unreadable for a moment, as during `execve`).
struct RunTree {
    procs: Vec<Stat>,
    unsure: bool,
}

/// Every process of the run rooted at `root` (the agent itself excluded): its descendants,
/// and the orphans adopted by sortie that carry `SORTIE_RUN_ID=<run_id>` (with theirs).
fn run_tree(root: u32, run_id: Option<&str>) -> RunTree {
    let root = i32::try_from(root).unwrap_or(-1);
    let me = my_pid();
    let mut roots = vec![root];
    let mut unsure = false;
    if let (Some(id), Some(mine)) = (run_id, stat(me)) {
        let needle = format!("SORTIE_RUN_ID={id}");
        for pid in children(me).into_iter().filter(|p| *p != root) {
            if !stat(pid).is_some_and(|c| !c.is_zombie() && adopted(&c, &mine)) {
                continue;
            }
            match carries_mark(pid, needle.as_bytes()) {
                Some(true) => roots.push(pid),
                Some(false) => {}
                None => unsure = true,
            }
        }
    }
    let procs = descendants(&roots)
        .into_iter()
        .filter(|p| p.pid != root && p.pid != me)
        .collect();
    RunTree { procs, unsure }
}

fn signal_all(procs: &[Stat], signal: Signal) -> usize {
    procs
        .iter()
        .filter(|p| kill(Pid::from_raw(p.pid), signal).is_ok())
        .count()
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
    signal_all(&tree.procs, signal)
}

/// SIGKILL every process of the run, again while the last pass found something (a process
/// may fork while the tree is read) or could not tell an adopted orphan apart. Returns
/// whether a pass could not tell one apart, to look once more a moment later.
pub fn kill_all(root: u32, run_id: Option<&str>) -> bool {
    let mut unsure = false;
    for _ in 0..3 {
        let tree = run_tree(root, run_id);
        if let Ok(raw) = i32::try_from(root) {
            if raw > 0 {
                let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            }
        }
        unsure = tree.unsure;
        if signal_all(&tree.procs, Signal::SIGKILL) == 0 {
            break;
        }
    }
    collect_adopted_zombies();
    unsure
}

/// CPU time, in clock ticks, used so far by the descendants of `root` and the processes
/// marked with `run_id` (the root's own CPU is not counted: an idle agent CLI ticks).
/// A growing figure means a tool call is working, even when it prints nothing.
pub fn tree_cpu_ticks(root: u32, run_id: Option<&str>) -> u64 {
    run_tree(root, run_id)
        .procs
        .iter()
        .map(|p| p.cpu_ticks)
        .sum()
}

/// Collect the adopted orphans that died (of any run): as their subreaper, sortie is their
/// parent and must wait for them, or they stay zombies. Children sortie started are left to
/// whoever waits for them.
pub fn collect_adopted_zombies() {
    let me = my_pid();
    let Some(mine) = stat(me) else { return };
    for pid in children(me) {
        if stat(pid).is_some_and(|c| c.is_zombie() && adopted(&c, &mine)) {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// The processes of a run as the supervision sees them now (the agent first), as
/// `(pid, start time)` pairs to record.
pub fn observe(root: u32, run_id: Option<&str>) -> Vec<(i32, u64)> {
    let root_stat = i32::try_from(root).ok().and_then(stat);
    root_stat
        .into_iter()
        .chain(run_tree(root, run_id).procs)
        .map(|p| (p.pid, p.start))
        .collect()
}

/// Keep `procs` in `run_dir` for the next holder of the ticket, should this process die.
pub fn record(run_dir: &Path, procs: &[(i32, u64)]) {
    let text: String = procs.iter().map(|(p, s)| format!("{p} {s}\n")).collect();
    let tmp = run_dir.join(format!("{RECORD_FILE}.tmp"));
    let written =
        std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, run_dir.join(RECORD_FILE)));
    if let Err(err) = written {
        tracing::warn!(%err, "could not record the run's processes");
    }
}

/// Kill what is alive of the processes recorded in `run_dir` by a run whose orchestrator
/// died, and their descendants. A recorded pid now naming another process (another start
/// time) is left alone. Returns how many were signalled.
pub fn reap_run(run_dir: &Path) -> usize {
    let Ok(text) = std::fs::read_to_string(run_dir.join(RECORD_FILE)) else {
        return 0;
    };
    let me = my_pid();
    let roots: Vec<i32> = text
        .lines()
        .filter_map(|line| {
            let (pid, start) = line.split_once(' ')?;
            let (pid, start) = (pid.parse::<i32>().ok()?, start.parse::<u64>().ok()?);
            stat(pid)
                .filter(|s| s.start == start && !s.is_zombie() && pid != me)
                .map(|s| s.pid)
        })
        .collect();
    let procs = descendants(&roots);
    for p in &procs {
        tracing::warn!(
            pid = p.pid,
            "killing an agent process left behind by a crashed run"
        );
    }
    signal_all(&procs, Signal::SIGKILL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_follows_parents_into_new_sessions() {
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
            found = run_tree(root_pid, None).procs;
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
            if stat(escaped).is_none_or(|s| s.is_zombie()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("the escaped sleep {escaped} survived");
    }

    #[test]
    fn a_recorded_process_is_reaped_and_a_reused_pid_spared() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let ours_pid = ours.id() as i32;
        let other_pid = other.id() as i32;
        let start = stat(ours_pid).unwrap().start;
        let other_start = stat(other_pid).unwrap().start;
        // The other's pid with another start time: a pid reused since the record.
        record(
            dir.path(),
            &[(ours_pid, start), (other_pid, other_start + 1)],
        );
        assert_eq!(reap_run(dir.path()), 1);
        assert!(!ours.wait().unwrap().success(), "killed");
        assert!(
            other.try_wait().unwrap().is_none(),
            "the process with another start time lives"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        assert_eq!(reap_run(&dir.path().join("missing")), 0);
    }
}

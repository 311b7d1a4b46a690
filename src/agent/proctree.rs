//! Reading a handful of named processes from `/proc`: their status line, their children and
//! the run mark in their environment. Nothing here lists `/proc` itself, except on a kernel
//! built without `/proc/<pid>/task/<tid>/children` (`CONFIG_PROC_CHILDREN`), where finding a
//! process's children has no other way.

use std::collections::BTreeSet;
use std::sync::OnceLock;

/// One process as its `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub pid: i32,
    pub ppid: i32,
    /// Process group and session ids.
    pub pgid: i32,
    pub sid: i32,
    /// `R`, `S`, `Z` ... (field 3 of proc(5)).
    pub state: char,
    /// utime + stime + cutime + cstime, in clock ticks: CPU the process and its reaped
    /// children used.
    pub cpu_ticks: u64,
    /// Start time after boot, in clock ticks: with the pid, names one process for good (a
    /// reused pid has a later start).
    pub start: u64,
}

impl Stat {
    /// A zombie: dead, waiting for its parent to collect it.
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parse `/proc/<pid>/stat`: the fields after the command name, which is in parentheses
/// and may itself hold spaces and parentheses.
pub(super) fn parse_stat(pid: i32, stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 of proc(5): index = field number - 3.
    let int = |i: usize| fields.get(i)?.parse::<i32>().ok();
    let cpu_ticks = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: int(1)?,
        pgid: int(2)?,
        sid: int(3)?,
        cpu_ticks,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The status of process `pid`, or `None` when it is gone (or unreadable).
pub(super) fn stat(pid: i32) -> Option<Stat> {
    parse_stat(
        pid,
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// Whether process `pid`'s environment holds `needle` (`SORTIE_RUN_ID=<id>`): `None` when it
/// cannot be told (no access, or an empty environment, as a process caught in `execve`
/// shows for a moment).
pub(super) fn carries_mark(pid: i32, needle: &[u8]) -> Option<bool> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    if environ.is_empty() {
        return None;
    }
    Some(environ.split(|b| *b == 0).any(|var| var == needle))
}

/// Whether this kernel lists a task's children (`CONFIG_PROC_CHILDREN`).
fn children_files() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        let me = std::process::id();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The children of process `pid` (of every thread of it: a child belongs to the thread that
/// forked it, and an adopted orphan to any thread of its new parent).
pub(super) fn children(pid: i32) -> Vec<i32> {
    if !children_files() {
        return children_by_scan(pid);
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    found
}

/// The fallback of a kernel without children files: every process's parent, from `/proc`.
fn children_by_scan(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| stat(*p).is_some_and(|s| s.ppid == pid))
        .collect()
}

/// `roots` and all their living descendants, each once, parents before children. The walk
/// is bounded by the processes it finds: a pid is visited once, whatever the kernel says.
pub(super) fn descendants(roots: &[i32]) -> Vec<Stat> {
    let mut seen: BTreeSet<i32> = BTreeSet::new();
    let mut queue: std::collections::VecDeque<i32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    while let Some(pid) = queue.pop_front() {
        if pid <= 0 || !seen.insert(pid) {
            continue;
        }
        let Some(st) = stat(pid) else { continue };
        if st.is_zombie() {
            continue;
        }
        found.push(st);
        queue.extend(children(pid));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (a) (b c) S 17 4242 4200 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 987 1 1";
        let p = parse_stat(4242, line).unwrap();
        assert_eq!((p.pid, p.ppid, p.pgid, p.sid), (4242, 17, 4242, 4200));
        assert_eq!((p.state, p.cpu_ticks, p.start), ('S', 13, 987));
        assert!(parse_stat(1, "garbage").is_none());
        assert!(
            parse_stat(1, "1 (x) S 0").is_none(),
            "a cut line is no status"
        );
    }

    #[test]
    fn our_own_children_are_listed() {
        let mut child = std::process::Command::new("sleep")
            .arg("1000")
            .spawn()
            .unwrap();
        let me = i32::try_from(std::process::id()).unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(children(me).contains(&pid));
        assert_eq!(stat(pid).map(|s| s.ppid), Some(me));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

//! Finding and killing the processes of a run whose orchestrator died.
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

#[cfg(test)]
mod tests {
    use super::*;

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

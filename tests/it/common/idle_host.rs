//! Idle processes on the host, unrelated to the test's own (issue #53): a shell holding `n`
//! sleeping children, all killed when the value is dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `n` idle `sleep` processes, children of one shell (not of the test process).
pub struct IdleHost {
    shell: Child,
    /// The idle processes' pids.
    pub pids: Vec<i32>,
}

impl IdleHost {
    /// Start `n` idle processes and return once each has been started.
    pub fn start(n: usize) -> Self {
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do sleep 1000 </dev/null >/dev/null 2>&1 & echo $!; \
             i=$((i+1)); done; echo ready; wait"
        );
        let mut shell = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the idle host's shell");
        let out = shell.stdout.take().expect("stdout");
        let mut host = IdleHost {
            shell,
            pids: Vec::with_capacity(n),
        };
        // Bounded by the shell's output: one line per process, then `ready` or EOF.
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if line == "ready" {
                return host;
            }
            host.pids.extend(line.trim().parse::<i32>().ok());
        }
        panic!(
            "the idle host's shell stopped after {} processes",
            host.pids.len()
        );
    }
}

impl Drop for IdleHost {
    fn drop(&mut self) {
        for pid in &self.pids {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        // The shell's `wait` collects its children, then it exits by itself: nothing is
        // left for the test process to collect.
        let _ = self.shell.wait();
    }
}

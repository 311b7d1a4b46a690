//! The shell-command sink: runs an argv (never a shell string) with the payload as JSON on
//! stdin and as `SORTIE_EVENT_*` variables, killing its whole process group at the timeout.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{Event, HookError, HookSink};

/// Bytes of stderr kept for the error message of a failed hook.
const STDERR_TAIL: usize = 2048;
/// How long stderr may stay open after the hook exited before we stop reading it.
const STDERR_LINGER: Duration = Duration::from_millis(200);

/// Runs a command for each event.
#[derive(Debug, Clone)]
pub struct ShellSink {
    argv: Vec<String>,
    dir: Option<PathBuf>,
    timeout: Duration,
}

impl ShellSink {
    /// A sink running `argv` (program first), killed after `timeout`.
    pub fn new(argv: Vec<String>, timeout: Duration) -> ShellSink {
        ShellSink {
            argv,
            dir: None,
            timeout,
        }
    }

    /// Run the command in `dir` (the config file's directory for config-built hooks).
    pub fn in_dir(mut self, dir: impl Into<PathBuf>) -> ShellSink {
        self.dir = Some(dir.into());
        self
    }

    /// The command's argv.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
}

/// SIGKILLs a process group when dropped while armed: a delivery future dropped mid-run
/// (the registry's backstop timeout, a cancelled tick) leaves no hook process behind.
struct GroupKill(Option<i32>);

impl GroupKill {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

#[async_trait]
impl HookSink for ShellSink {
    async fn deliver(&self, event: &Event) -> Result<(), HookError> {
        let Some((program, args)) = self.argv.split_first() else {
            return Err(HookError::Spawn {
                program: String::new(),
                cause: std::io::Error::other("the command is empty"),
            });
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(event.env_vars())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|cause| HookError::Spawn {
            program: program.clone(),
            cause,
        })?;
        let mut group = GroupKill(child.id().and_then(|pid| i32::try_from(pid).ok()));
        if let Some(mut stdin) = child.stdin.take() {
            let body = event.body();
            // A hook that never reads stdin must not block delivery: write in the
            // background and ignore a closed pipe.
            tokio::spawn(async move {
                let _ = stdin.write_all(body.as_bytes()).await;
            });
        }
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let reader = child.stderr.take().map(|mut stderr| {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                    tail.extend(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL);
                    tail.drain(..excess);
                }
            })
        });
        let waited = tokio::time::timeout(self.timeout, child.wait()).await;
        // Whatever ended the hook, nothing it started may outlive it (as for agents).
        group.kill();
        if let Some(mut reader) = reader {
            // Only a process that left the group (setsid) can still hold stderr open.
            if tokio::time::timeout(STDERR_LINGER, &mut reader)
                .await
                .is_err()
            {
                reader.abort();
            }
        }
        let status = match waited {
            Err(_) => {
                // Reap the killed child so it is gone, not a zombie, when we return.
                let _ = child.wait().await;
                return Err(HookError::TimedOut(self.timeout));
            }
            Ok(Err(err)) => {
                return Err(HookError::Exited {
                    status: format!("unknown status ({err})"),
                    stderr: String::new(),
                })
            }
            Ok(Ok(status)) => status,
        };
        if status.success() {
            return Ok(());
        }
        let bytes: Vec<u8> = tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => format!("code {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            (None, None) => status.to_string(),
        };
        Err(HookError::Exited {
            status,
            stderr: String::from_utf8_lossy(&bytes).trim().to_string(),
        })
    }
}

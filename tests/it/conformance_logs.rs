//! Issue #39, item 17 (Symphony SPEC.md section 17, log sink failure): a tick and the
//! daemon keep working when their log cannot be written, with stderr a pipe nobody reads
//! any more (every write fails with EPIPE, as for `sortie ... 2>&1 | head -1` once `head`
//! has exited) and with stderr on a full disk (`/dev/full`, where every write fails with
//! ENOSPC). The real binary, logging at debug so that every step writes log lines.
//!
//! Issue #52, item 17: a *closed* stderr is no broken sink. The Rust runtime reopens a
//! closed descriptor 0, 1 or 2 on `/dev/null` before `main`, so every write succeeds and
//! a test with stderr closed passes whatever the binary does with a failed write. The
//! broken pipe is the sink that really breaks.

use crate::common;
use crate::daemon_e2e::wait_until;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Sandbox;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Where the binary's stderr goes.
#[derive(Clone, Copy, Debug)]
enum Sink {
    /// A pipe whose read end is closed: every write fails with EPIPE (SIGPIPE is
    /// ignored by the Rust runtime, so the write returns the error).
    BrokenPipe,
    /// `/dev/full`: every write fails as on a full disk.
    Full,
}

/// `sortie -vv <args>` in the sandbox, its stderr going to `sink`, its stdout piped.
fn command(sb: &Sandbox, sink: Sink, args: &[&str]) -> Command {
    let bin = env!("CARGO_BIN_EXE_sortie");
    let mut cmd = match sink {
        Sink::BrokenPipe => {
            let mut cmd = Command::new(bin);
            cmd.stderr(Stdio::from(broken_pipe()));
            cmd
        }
        Sink::Full => {
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full exists on Linux");
            let mut cmd = Command::new(bin);
            cmd.stderr(full);
            cmd
        }
    };
    cmd.arg("-vv")
        .args(args)
        .current_dir(sb.path())
        .env_remove("SORTIE_LOG")
        .env_remove("SORTIE_FAULT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    cmd
}

/// A pipe whose read end is already closed: its write end.
fn broken_pipe() -> std::os::fd::OwnedFd {
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    write
}

/// The premise of [`Sink::BrokenPipe`]: a write to that descriptor fails with EPIPE in a
/// Rust process (SIGPIPE ignored), as it will in the binary.
fn assert_a_write_to_the_broken_pipe_fails() {
    use std::io::Write;
    let err = std::fs::File::from(broken_pipe())
        .write_all(
            b"probe
",
        )
        .expect_err("a write to a pipe nobody reads fails");
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
}

fn tick(sb: &Sandbox, sink: Sink) -> Output {
    command(sb, sink, &["pipeline", "tick", "--config", "pipeline.yaml"])
        .output()
        .expect("run sortie")
}

fn a_tick_still_moves_the_ticket(sink: Sink) {
    let sb = Sandbox::three_stages(1);
    let id = sb.add("widget", "ready-for-design", &[]);
    let out = tick(&sb, sink);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the tick exits 0 ({sink:?}), not on a panic: {stdout}"
    );
    assert!(
        stdout.contains(&format!("run ticket {id} role architect")),
        "{stdout}"
    );
    assert_eq!(sb.ticket(&id).status, "design-approved");
    assert_eq!(sb.blocks(&id).len(), 1, "the outcome block was posted");
}

#[test]
fn log_sink_failure_a_tick_with_stderr_a_broken_pipe_still_moves_the_ticket() {
    assert_a_write_to_the_broken_pipe_fails();
    a_tick_still_moves_the_ticket(Sink::BrokenPipe);
}

/// Regression: tracing-subscriber reported the failed write with `eprintln!`, which
/// panicked on the same full stderr (exit 101, the ticket left claimed).
#[test]
fn log_sink_failure_a_tick_with_stderr_on_a_full_disk_still_moves_the_ticket() {
    a_tick_still_moves_the_ticket(Sink::Full);
}

/// The cron example of docs/operations.md (`>> state/tick.log 2>&1`) on a full disk:
/// the tick's work is done; only its report to stdout is lost, which is a runtime
/// failure (exit 1), as for any other stdout that cannot be written.
#[test]
fn log_sink_failure_a_tick_with_stdout_and_stderr_on_a_full_disk_still_moves_the_ticket() {
    let sb = Sandbox::three_stages(1);
    let id = sb.add("widget", "ready-for-design", &[]);
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full exists on Linux")
    };
    let status = command(
        &sb,
        Sink::Full,
        &["pipeline", "tick", "--config", "pipeline.yaml"],
    )
    .stdout(full())
    .status()
    .expect("run sortie");
    assert_eq!(status.code(), Some(1), "not a panic (101): {status:?}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    assert_eq!(sb.blocks(&id).len(), 1, "the outcome block was posted");
}

/// A daemon process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn the_daemon_still_drains_the_board(sink: Sink) {
    let config = common::three_stages_config(1) + "poll_interval_seconds: 1\n";
    let sb = Sandbox::with_config(&config);
    let id = sb.add("widget", "ready-for-design", &[]);
    let args = [
        "pipeline",
        "run",
        "--config",
        "pipeline.yaml",
        "--listen",
        "127.0.0.1:0",
    ];
    let mut daemon = Running(command(&sb, sink, &args).spawn().expect("spawn daemon"));
    let mut line = String::new();
    BufReader::new(daemon.0.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    assert!(line.starts_with("listening on "), "{line:?}");
    wait_until(60, "the ticket through all three stages", || {
        sb.ticket(&id).status == "done"
    });
    assert_eq!(sb.blocks(&id).len(), 3, "one block per stage");
    assert_eq!(
        daemon.0.try_wait().expect("try_wait"),
        None,
        "the daemon is still running"
    );
    kill(Pid::from_raw(daemon.0.id() as i32), Signal::SIGTERM).expect("signal the daemon");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = daemon.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "the daemon exits 0 on SIGTERM: {status:?}"
    );
}

#[test]
fn log_sink_failure_the_daemon_with_stderr_a_broken_pipe_still_drains_the_board() {
    assert_a_write_to_the_broken_pipe_fails();
    the_daemon_still_drains_the_board(Sink::BrokenPipe);
}

/// Regression: as for the tick, a failed log write panicked the daemon's tasks.
#[test]
fn log_sink_failure_the_daemon_with_stderr_on_a_full_disk_still_drains_the_board() {
    the_daemon_still_drains_the_board(Sink::Full);
}

//! A stage's `verify` commands (issue #33): run by sortie in the ticket's workspace
//! after the agent reports success, one after the other, each as argv (no shell), with
//! the agent's environment rules (its extra variables, its secrets removed), in a
//! process group of its own that is killed at the time limit and once the command has
//! ended (so a background child cannot hold its output open). Output (stdout and
//! stderr as one stream, in the order written) is read as it comes and only its tail is
//! kept, with terminal escapes removed, so a flood of output costs bounded memory.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::io::AsyncReadExt;

use crate::block::TestCounts;

/// Bytes of output kept (the tail of stdout and stderr together).
const KEEP_BYTES: usize = 256 * 1024;
/// How long the output pipes may stay open once the command and its group are gone.
const DRAIN: Duration = Duration::from_secs(2);

/// Where and how the checks run.
#[derive(Debug, Clone, Copy)]
pub struct VerifyEnv<'a> {
    /// The ticket's workspace.
    pub dir: &'a Path,
    /// Variables set for the commands (the agent's `env` and the run's `SORTIE_*`).
    pub env: &'a BTreeMap<String, String>,
    /// Inherited variables removed (the secrets the agent does not get either).
    pub env_remove: &'a [String],
    /// Each command's time limit.
    pub timeout: Duration,
    /// Fired when the run is stopped from outside (the ticket left the stage, the lease
    /// was lost, a shutdown): the running command's group is killed, none after it runs.
    pub cancel: Option<&'a tokio_util::sync::CancellationToken>,
    /// The run's bubblewrap confinement: the checks run in it, as the agent did.
    pub sandbox: Option<&'a super::sandbox::SandboxPlan>,
}

/// How one command ended.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRun {
    /// The command as people read it.
    pub command: String,
    /// Its exit code; none when it could not start, was killed or died of a signal.
    pub exit_code: Option<i32>,
    /// Wall time.
    pub duration: Duration,
    /// Killed at the time limit.
    pub timed_out: bool,
    /// Killed because the run was stopped from outside.
    pub cancelled: bool,
    /// It could not be started: why.
    pub spawn_error: Option<String>,
    /// The tail of its output, stdout and stderr together in the order written (as a
    /// terminal shows `2>&1`), escapes removed.
    pub output: String,
    /// The test counts its output reported, when recognised.
    pub tests: Option<TestCounts>,
}

impl CheckRun {
    /// Exit code 0, in time.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }
}

/// Run `commands` in order; stop at the first that does not pass. Every command run is
/// in the answer, the failing one last.
pub async fn run_checks(commands: &[Vec<String>], env: VerifyEnv<'_>) -> Vec<CheckRun> {
    let mut out = Vec::new();
    for argv in commands {
        let run = run_one(argv, env).await;
        let passed = run.passed();
        out.push(run);
        if !passed {
            break;
        }
    }
    out
}

async fn run_one(argv: &[String], env: VerifyEnv<'_>) -> CheckRun {
    let command = display_command(argv);
    let started = Instant::now();
    let failed_to_start = |why: String| CheckRun {
        command: command.clone(),
        exit_code: None,
        duration: started.elapsed(),
        timed_out: false,
        cancelled: false,
        spawn_error: Some(why),
        output: String::new(),
        tests: None,
    };
    let Some((program, args)) = argv.split_first() else {
        return failed_to_start("the command is empty".to_string());
    };
    let mut cmd = match env.sandbox {
        Some(sandbox) => {
            // Inside, a program that is not there is bwrap's own exit 1, not a spawn error.
            if let Err(why) = sandbox.can_start(program, env.dir, env.env) {
                return failed_to_start(why);
            }
            sandbox.command(program, args, env.dir, env.dir, env.env, &BTreeMap::new())
        }
        None => {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args);
            for name in env.env_remove {
                if !env.env.contains_key(name) {
                    cmd.env_remove(name);
                }
            }
            cmd.envs(env.env);
            cmd
        }
    };
    cmd.current_dir(env.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return failed_to_start(format!("cannot start `{program}`: {e}")),
    };
    let group = child.id().and_then(|p| i32::try_from(p).ok());
    let tail = Arc::new(Mutex::new(Tail::default()));
    let output = tokio::spawn(keep_tail(
        child.stdout.take(),
        child.stderr.take(),
        tail.clone(),
    ));
    let never = tokio_util::sync::CancellationToken::new();
    let cancel = env.cancel.unwrap_or(&never);
    let (exit_code, timed_out, cancelled) = tokio::select! {
        waited = tokio::time::timeout(env.timeout, child.wait()) => match waited {
            Ok(Ok(status)) => (status.code(), false, false),
            Ok(Err(_)) => (None, false, false),
            Err(_) => (None, true, false),
        },
        _ = cancel.cancelled() => (None, false, true),
    };
    // The command is done (or out of time): whatever it left running goes with it.
    if let Some(pid) = group {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.wait().await;
    let duration = started.elapsed();
    // A pipe still open past the drain keeps what was read until then.
    let mut output = output;
    if tokio::time::timeout(DRAIN, &mut output).await.is_err() {
        output.abort();
    }
    let kept = std::mem::take(&mut tail.lock().unwrap_or_else(|e| e.into_inner()).bytes);
    let text = clean(&String::from_utf8_lossy(&kept));
    CheckRun {
        command,
        exit_code,
        duration,
        timed_out,
        cancelled,
        spawn_error: None,
        tests: test_counts(&text),
        output: text,
    }
}

/// The last [`KEEP_BYTES`] of a command's output, stdout and stderr together.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        // Trimmed in batches, so a flood of small chunks does not move the tail each time.
        if self.bytes.len() > 2 * KEEP_BYTES {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.bytes.len() > KEEP_BYTES {
            self.bytes.drain(..self.bytes.len() - KEEP_BYTES);
        }
    }
}

/// Read `stdout` and `stderr` to their ends into `tail`, each chunk as it arrives (one
/// tail of the two in the order they were written, as a terminal shows `2>&1`, so a
/// long stderr cannot push stdout's last lines out; issue #52).
async fn keep_tail<O, E>(stdout: Option<O>, stderr: Option<E>, tail: Arc<Mutex<Tail>>)
where
    O: tokio::io::AsyncRead + Unpin,
    E: tokio::io::AsyncRead + Unpin,
{
    let (mut out_open, mut err_open) = (stdout.is_some(), stderr.is_some());
    let (mut stdout, mut stderr) = (stdout, stderr);
    let mut out_buf = vec![0u8; 16 * 1024];
    let mut err_buf = vec![0u8; 16 * 1024];
    while out_open || err_open {
        let (read, from_out) = tokio::select! {
            n = read_some(stdout.as_mut(), &mut out_buf), if out_open => (n, true),
            n = read_some(stderr.as_mut(), &mut err_buf), if err_open => (n, false),
        };
        let buf = if from_out { &out_buf } else { &err_buf };
        match read {
            0 if from_out => out_open = false,
            0 => err_open = false,
            n => tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
    tail.lock().unwrap_or_else(|e| e.into_inner()).trim();
}

/// Read what `pipe` has into `buf`: the byte count, 0 at its end or on an error.
async fn read_some<R: tokio::io::AsyncRead + Unpin>(pipe: Option<&mut R>, buf: &mut [u8]) -> usize {
    match pipe {
        Some(pipe) => pipe.read(buf).await.unwrap_or(0),
        None => 0,
    }
}

/// The argv as one line: words joined by spaces, a word with a space or quote quoted.
pub fn display_command(argv: &[String]) -> String {
    argv.iter()
        .map(|w| {
            if w.is_empty() || w.contains([' ', '\t', '"', '\'', '\n']) {
                format!("{w:?}")
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Output as people read it: terminal escapes (colours, cursor moves, titles) removed,
/// a line redrawn with `\r` kept as last drawn, other control characters dropped.
pub fn clean(text: &str) -> String {
    static ESCAPES: OnceLock<Regex> = OnceLock::new();
    let escapes = ESCAPES.get_or_init(|| {
        Regex::new(r"\x1b\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
            .expect("a valid pattern")
    });
    let plain = escapes.replace_all(text, "");
    let mut out = String::with_capacity(plain.len());
    for line in plain.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body.strip_suffix('\r').unwrap_or(body), "\n"),
            None => (line, ""),
        };
        let last = body.rsplit('\r').next().unwrap_or(body);
        out.extend(last.chars().filter(|c| !c.is_control() || *c == '\t'));
        out.push_str(end);
    }
    out
}

/// The test counts a runner's summary reports: cargo test (`test result:` lines,
/// summed), Jest (`Tests: ...`), Vitest (` Tests  1 failed | 3 passed (4)`), pytest
/// (`=== 3 passed, 1 failed in 0.1s ===`), Python unittest (`Ran 4 tests in 0.1s` and
/// `OK` / `FAILED (failures=1, errors=1)`, summed), go test -v (`--- PASS:` lines), and
/// any `N passed, N failed`.
pub fn test_counts(text: &str) -> Option<TestCounts> {
    static CARGO: OnceLock<Regex> = OnceLock::new();
    static JEST: OnceLock<Regex> = OnceLock::new();
    static VITEST: OnceLock<Regex> = OnceLock::new();
    static PYTEST: OnceLock<Regex> = OnceLock::new();
    static GO: OnceLock<Regex> = OnceLock::new();
    static WORDS: OnceLock<Regex> = OnceLock::new();
    let re = |cell: &'static OnceLock<Regex>, pattern: &str| -> &'static Regex {
        cell.get_or_init(|| Regex::new(pattern).expect("a valid pattern"))
    };
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<u64>().ok());

    let cargo = re(
        &CARGO,
        r"(?m)^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored",
    );
    let mut sum: Option<TestCounts> = None;
    for c in cargo.captures_iter(text) {
        let total = sum.get_or_insert_with(TestCounts::default);
        total.passed += num(c.get(1)).unwrap_or(0);
        total.failed += num(c.get(2)).unwrap_or(0);
        total.skipped += num(c.get(3)).unwrap_or(0);
    }
    if sum.is_some() {
        return sum;
    }
    let counted = |line: &str| {
        let words = re(
            &WORDS,
            r"(\d+) (passed|failed|skipped|ignored|errors?|todo)",
        );
        let mut counts = TestCounts::default();
        let mut any = false;
        for c in words.captures_iter(line) {
            let n = num(c.get(1)).unwrap_or(0);
            any = true;
            match &c[2] {
                "passed" => counts.passed += n,
                "failed" | "error" | "errors" => counts.failed += n,
                _ => counts.skipped += n,
            }
        }
        any.then_some(counts)
    };
    let summary_line = |pattern: &Regex| {
        text.lines()
            .rev()
            .find(|l| pattern.is_match(l))
            .and_then(&counted)
    };
    let jest = re(&JEST, r"^\s*Tests:\s+.*\d+ total");
    let vitest = re(&VITEST, r"^\s*Tests\s+.*\(\d+\)\s*$");
    let pytest = re(
        &PYTEST,
        r"^=+ .*\d+ (passed|failed|errors?).* in [\d.]+s.*=+$",
    );
    if let Some(counts) = summary_line(jest)
        .or_else(|| summary_line(vitest))
        .or_else(|| summary_line(pytest))
    {
        return Some(counts);
    }
    if let Some(counts) = unittest_counts(text) {
        return Some(counts);
    }
    let go = re(&GO, r"(?m)^\s*--- (PASS|FAIL|SKIP):");
    let mut go_counts = None;
    for c in go.captures_iter(text) {
        let total = go_counts.get_or_insert_with(TestCounts::default);
        match &c[1] {
            "PASS" => total.passed += 1,
            "FAIL" => total.failed += 1,
            _ => total.skipped += 1,
        }
    }
    if go_counts.is_some() {
        return go_counts;
    }
    text.lines()
        .rev()
        .find(|l| l.contains(" passed") && (l.contains(" failed") || l.contains(',')))
        .and_then(counted)
}

/// Python unittest's summaries (`python -m unittest`, Django's `manage.py test`): each
/// `Ran N tests in T` with the `OK` or `FAILED (...)` line after it, summed. Failures,
/// errors and unexpected successes fail; skips are skipped; expected failures pass.
fn unittest_counts(text: &str) -> Option<TestCounts> {
    static RAN: OnceLock<Regex> = OnceLock::new();
    static KINDS: OnceLock<Regex> = OnceLock::new();
    let ran = RAN.get_or_init(|| {
        Regex::new(r"(?m)^Ran (\d+) tests? in [\d.]+s\s*$").expect("a valid pattern")
    });
    let kinds = KINDS.get_or_init(|| {
        Regex::new(r"(failures|errors|skipped|expected failures|unexpected successes)=(\d+)")
            .expect("a valid pattern")
    });
    let mut sum: Option<TestCounts> = None;
    for c in ran.captures_iter(text) {
        let after = &text[c.get(0).map_or(0, |m| m.end())..];
        // The verdict is the next non-empty line: `OK`, `OK (skipped=1)`, `FAILED (...)`.
        let Some(verdict) = after.lines().map(str::trim).find(|l| !l.is_empty()) else {
            continue;
        };
        let details = match verdict
            .strip_prefix("OK")
            .or(verdict.strip_prefix("FAILED"))
        {
            Some(rest) if rest.is_empty() || rest.starts_with(" (") => rest,
            _ => continue,
        };
        let total: u64 = c[1].parse().unwrap_or(0);
        let (mut failed, mut skipped) = (0u64, 0u64);
        for k in kinds.captures_iter(details) {
            let n: u64 = k[2].parse().unwrap_or(0);
            match &k[1] {
                "skipped" => skipped += n,
                "expected failures" => {}
                _ => failed += n,
            }
        }
        let counts = sum.get_or_insert_with(TestCounts::default);
        counts.failed += failed;
        counts.skipped += skipped;
        counts.passed += total.saturating_sub(failed + skipped);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(passed: u64, failed: u64, skipped: u64) -> Option<TestCounts> {
        Some(TestCounts {
            passed,
            failed,
            skipped,
        })
    }

    #[test]
    fn test_summaries_of_the_common_runners_are_read() {
        let cargo = "running 3 tests\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured\n\
                     running 2 tests\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured\n";
        assert_eq!(test_counts(cargo), counts(4, 1, 1));
        let jest =
            "PASS a.test.js\nTests:       1 failed, 2 skipped, 5 passed, 8 total\nTime: 1s\n";
        assert_eq!(test_counts(jest), counts(5, 1, 2));
        let vitest =
            " Test Files  1 failed | 2 passed (3)\n      Tests  1 failed | 9 passed (10)\n";
        assert_eq!(test_counts(vitest), counts(9, 1, 0));
        let pytest = "collected 4 items\n\n===== 3 passed, 1 failed, 2 skipped in 0.12s =====\n";
        assert_eq!(test_counts(pytest), counts(3, 1, 2));
        let go = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL\n";
        assert_eq!(test_counts(go), counts(1, 1, 0));
        assert_eq!(test_counts("12 passed, 0 failed\n"), counts(12, 0, 0));
        // Issue #52: Python unittest.
        let unittest = "..F.E.s\n======\nFAIL: test_b (t.T)\n------\n\
                        Ran 7 tests in 0.004s\n\nFAILED (failures=1, errors=1, skipped=1)\n";
        assert_eq!(test_counts(unittest), counts(4, 2, 1));
        let ok = "....\n----------------------------------------------------------------------\n\
                  Ran 4 tests in 0.001s\n\nOK\n";
        assert_eq!(test_counts(ok), counts(4, 0, 0));
        let one = "Ran 1 test in 0.000s\n\nOK (skipped=1, expected failures=0)\n";
        assert_eq!(test_counts(one), counts(0, 0, 1));
        assert_eq!(test_counts("Ran 3 tests in 0.1s\nnothing after"), None);
        assert_eq!(test_counts("compiling...\nall good\n"), None);
    }

    #[test]
    fn terminal_escapes_and_redrawn_lines_are_removed() {
        let text =
            "\x1b[1;31merror\x1b[0m: boom\n\x1b]0;title\x07progress 10%\rprogress 100%\n\x07bell";
        assert_eq!(clean(text), "error: boom\nprogress 100%\nbell");
    }

    #[test]
    fn a_command_is_shown_with_its_odd_words_quoted() {
        let argv = ["cargo", "test", "--", "a b"].map(String::from);
        assert_eq!(display_command(&argv), "cargo test -- \"a b\"");
    }

    fn env<'a>(dir: &'a Path, vars: &'a BTreeMap<String, String>, secs: u64) -> VerifyEnv<'a> {
        VerifyEnv {
            dir,
            env: vars,
            env_remove: &[],
            timeout: Duration::from_secs(secs),
            cancel: None,
            sandbox: None,
        }
    }

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn checks_stop_at_the_first_that_fails_with_its_exit_code_and_output() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::from([("GREETING".to_string(), "hi".to_string())]);
        let runs = run_checks(
            &[
                sh("echo $GREETING; echo '1 passed, 0 failed'"),
                sh("echo broken >&2; exit 3"),
                sh("echo never"),
            ],
            env(dir.path(), &vars, 10),
        )
        .await;
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(runs[0].passed());
        assert!(runs[0].output.starts_with("hi\n"), "{:?}", runs[0].output);
        assert_eq!(runs[0].tests, counts(1, 0, 0));
        assert_eq!(runs[1].exit_code, Some(3));
        assert_eq!(runs[1].output, "broken\n");
    }

    #[tokio::test]
    async fn a_hanging_check_is_killed_at_its_limit_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::new();
        let pid_file = dir.path().join("child.pid");
        let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let runs = run_checks(&[sh(&script)], env(dir.path(), &vars, 1)).await;
        assert!(runs[0].timed_out, "{runs:?}");
        assert!(!runs[0].passed());
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed with the group: no such process (a zombie at most, until reaped by init).
        // SIGKILL reaches the grandchild asynchronously: the check returns once the shell is
        // reaped, and the `sleep` may take a moment longer to die on a loaded machine, so
        // wait for it (a child left alive sleeps for 300 s and fails this).
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| !stat.contains(") Z ") && !stat.contains(") X "))
                .unwrap_or(false)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while alive() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(), "the child {pid} was killed with its group");
    }

    #[tokio::test]
    async fn a_flood_of_output_keeps_only_a_bounded_tail() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::new();
        // About 10 MB, then the line that says what happened.
        let script = "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo 'the end'";
        let runs = run_checks(&[sh(script)], env(dir.path(), &vars, 30)).await;
        assert!(runs[0].passed(), "{:?}", runs[0].exit_code);
        assert!(
            runs[0].output.len() <= 2 * KEEP_BYTES,
            "{}",
            runs[0].output.len()
        );
        assert!(runs[0].output.ends_with("the end\n"));
    }

    /// Issue #52: stdout and stderr are one tail in the order written (as `2>&1` shows
    /// them), so a test runner's summary at the end of a long stdout is not pushed out
    /// by a long stderr written before it.
    #[tokio::test]
    async fn the_kept_output_is_one_tail_of_both_streams_in_the_order_written() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::new();
        // 1 MB of warnings on stderr, then 10 MB on stdout ending in the summary.
        let script = "yes 'warning: unused' | head -c 1000000 >&2; \
                      head -c 10000000 /dev/zero | tr '\\0' x; echo; \
                      echo 'test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured'; \
                      exit 101";
        let runs = run_checks(&[sh(script)], env(dir.path(), &vars, 60)).await;
        let run = &runs[0];
        assert_eq!(run.exit_code, Some(101));
        assert!(
            run.output
                .ends_with("\ntest result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured\n"),
            "the output ends with stdout's summary: {:?}",
            &run.output[run.output.len().saturating_sub(200)..]
        );
        assert!(run.output.len() <= KEEP_BYTES, "{}", run.output.len());
        assert_eq!(run.tests, counts(3, 2, 0));
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let vars = BTreeMap::new();
        let runs = run_checks(
            &[vec!["/nonexistent/verify-tool".to_string()]],
            env(dir.path(), &vars, 5),
        )
        .await;
        assert!(!runs[0].passed());
        assert!(
            runs[0]
                .spawn_error
                .as_deref()
                .unwrap_or("")
                .contains("cannot start"),
            "{runs:?}"
        );
    }
}

//! Issue #35: agents confined with Debian's real bubblewrap (installed by
//! scripts/services/bubblewrap.sh). A scripted agent on a local board, in git worktrees of
//! a bare remote, tries to reach what the sandbox hides (the ledger, another ticket's
//! worktree, a key in the host home, sortie's environment, a process outside, paths
//! outside its worktree); each attempt fails, and its own commit and result file are
//! handed off. Also: `env:` passes exactly what it names, `network: none` cuts loopback,
//! and timeout and Ctrl-C still kill the whole tree.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sortie::block::OutcomeBlock;

use crate::common::Sandbox;

const HOW: &str =
    "start it with `./scripts/test`, or by hand: `export SORTIE_TEST_SERVICES=$(mktemp -d); \
bash scripts/services/bubblewrap.sh; set -a; . $SORTIE_TEST_SERVICES/bubblewrap.env; set +a`";

/// The `bwrap` the test command installed; fails (never skips) with how to install it.
fn bwrap() -> String {
    match std::env::var("SORTIE_TEST_BWRAP") {
        Ok(path) if Path::new(&path).exists() => path,
        Ok(path) => panic!("SORTIE_TEST_BWRAP={path} does not exist; {HOW}"),
        Err(_) => panic!("SORTIE_TEST_BWRAP is not set: bubblewrap is not installed; {HOW}"),
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Seed", "-c", "user.email=seed@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A bare repository `root/remote.git` with one commit on `main`.
fn bare_remote(root: &Path) -> PathBuf {
    git(
        root,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            "remote.git",
        ],
    );
    git(root, &["clone", "--quiet", "remote.git", "seed"]);
    let seed = root.join("seed");
    std::fs::write(seed.join("README"), "seed\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "--quiet", "-m", "initial"]);
    git(
        &seed,
        &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
    );
    root.join("remote.git")
}

/// A one-stage pipeline (`todo` -> `review`) whose agent is `script`, confined by
/// `sandbox` (YAML flow mapping), in git worktrees of a bare remote when `git` is set.
fn pipeline(script: &str, sandbox: &str, agent_env: &str, git: bool, timeout: u64) -> Sandbox {
    let sb = Sandbox::with_config("tracker: {kind: local, path: board}\n");
    let root = sb.path().canonicalize().unwrap();
    let agent = root.join("agent.sh");
    std::fs::write(&agent, script).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&agent)
        .status()
        .unwrap();
    let workspace = if git {
        let remote = bare_remote(&root);
        format!(
            "workspace:\n  prune_every_ticks: 0\n  git: {{url: \"file://{}\", base: main}}\n",
            remote.display()
        )
    } else {
        String::new()
    };
    let config = format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
concurrency: {{max_in_flight: 1}}
agent:
  command: ["{agent}"]
  timeout_seconds: {timeout}
  stall_timeout_seconds: 0
  sandbox: {sandbox}
  env: {{{agent_env}}}
{workspace}pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: review, failure_status: blocked}}
"#,
        roles = crate::common::repo().join("roles").display(),
        agent = agent.display(),
    );
    std::fs::write(sb.config_path(), config).unwrap();
    sb
}

/// `sortie pipeline tick` with `env` added to sortie's own environment.
fn tick(sb: &Sandbox, env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config"])
        .arg(sb.config_path())
        .current_dir(sb.path())
        .env("SORTIE_BWRAP", bwrap())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "tick failed: {text}");
    text
}

fn success_sandbox(sb: &Sandbox, id: &str) -> Option<String> {
    sb.blocks(id).iter().find_map(|b| match b {
        OutcomeBlock::Success(s) => s
            .extra
            .get("sandbox")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        OutcomeBlock::Failure(_) => None,
    })
}

/// The attempts the agent below writes, one `name: refused|ESCAPED` line each.
const PROBING_AGENT: &str = r#"#!/bin/sh
cat > /dev/null
out=attempts-$SORTIE_TICKET_ID.txt
try() { name=$1; shift; if "$@" > /dev/null 2>&1; then echo "$name: ESCAPED"; else echo "$name: refused"; fi >> "$out"; }
echo "secret of $SORTIE_TICKET_ID" > "secret-$SORTIE_TICKET_ID.txt"
try read-ledger cat "$LEDGER"
try list-state-root sh -c 'ls "$STATE_ROOT" "$STATE_ROOT/workspaces" | grep -q -e ledger.db -e "^1$"'
try read-other-worktree cat "$STATE_ROOT/workspaces/1/secret-1.txt"
try read-host-key cat "$HOST_KEY"
try read-host-home ls "$HOST_HOME"
try read-sortie-environ sh -c 'cat /proc/*/environ | tr "\0" "\n" | grep -q "^SORTIE_TEST_TOKEN="'
# Paths above the worktree exist inside only as the sandbox's own mount points: a write
# there lands in the sandbox, never on the host (checked from outside).
echo x > "$OUTSIDE/escaped" 2> /dev/null
echo x > "$STATE_ROOT/escaped" 2> /dev/null
try write-usr sh -c 'echo x > /usr/escaped'
try write-etc sh -c 'echo x > /etc/escaped'
try see-victim test -e "/proc/$VICTIM"
try kill-victim kill -9 "$VICTIM"
try write-mirror-config git config sandbox.escaped yes
echo "processes: $(ls /proc | grep -c '^[0-9]')" >> "$out"
echo "token: ${SORTIE_TEST_TOKEN:-absent}" >> "$out"
echo "github-token: ${GITHUB_TOKEN:-absent}" >> "$out"
echo "passed: ${SANDBOX_PASSED:-absent}" >> "$out"
git add . && git -c user.name=Agent -c user.email=agent@example.com commit -q -m "work on $SORTIE_TICKET_ID" || echo "commit: FAILED" >> "$out"
printf 'outcome: success\nsummary: tried\n' > "$SORTIE_RESULT_FILE"
"#;

#[test]
fn a_confined_agent_reaches_nothing_but_its_own_worktree_and_hands_off_its_commit() {
    bwrap();
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    std::fs::create_dir_all(home_path.join(".ssh")).unwrap();
    std::fs::write(home_path.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    let mut victim = Command::new("sleep").arg("600").spawn().unwrap();
    let probe_env = |sb: &Sandbox| {
        let root = sb.path().canonicalize().unwrap();
        format!(
            "LEDGER: \"{state}/ledger.db\", STATE_ROOT: \"{state}\", HOST_KEY: \"{home}/.ssh/id_ed25519\", HOST_HOME: \"{home}\", OUTSIDE: \"{root}\", VICTIM: \"{victim}\"",
            state = root.join("state").display(),
            home = home_path.display(),
            root = root.display(),
            victim = victim.id(),
        )
    };
    // The env is written after the sandbox exists (it names the sandbox's own paths).
    let sb = pipeline(
        PROBING_AGENT,
        "{kind: bubblewrap, env: [SANDBOX_PASSED]}",
        "",
        true,
        60,
    );
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    std::fs::write(
        sb.config_path(),
        config.replace("env: {}", &format!("env: {{{}}}", probe_env(&sb))),
    )
    .unwrap();
    // The before_run hook and the stage's checks run in the sandbox too.
    let ledger = sb.path().canonicalize().unwrap().join("state/ledger.db");
    let probe = |file: &str| {
        format!(
            "[\"sh\", \"-c\", \"if cat {} > /dev/null 2>&1; then echo ESCAPED > {file}; else echo refused > {file}; fi\"]",
            ledger.display()
        )
    };
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    let config = config
        .replace(
            "workspace:\n",
            &format!(
                "workspace:\n  hooks:\n    before_run: {}\n",
                probe("hook.txt")
            ),
        )
        .replace(
            "failure_status: blocked}",
            &format!(
                "failure_status: blocked, verify: {{commands: [{}, [\"git\", \"log\", \"-1\"]]}}}}",
                probe("check.txt")
            ),
        );
    std::fs::write(sb.config_path(), config).unwrap();
    let first = sb.add("First", "todo", &[]);
    let second = sb.add("Second", "todo", &[]);
    let env = [
        ("HOME", home_path.to_str().unwrap()),
        ("SORTIE_TEST_TOKEN", "sortie-test-token-value"),
        ("GITHUB_TOKEN", "ghp-not-for-agents"),
        ("SANDBOX_PASSED", "named-in-sandbox-env"),
    ];
    let ticks = format!("{}{}", tick(&sb, &env), tick(&sb, &env));
    assert_eq!(sb.ticket(&first).status, "review", "{ticks}");
    assert_eq!(sb.ticket(&second).status, "review");
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the process outside the sandbox was killed"
    );
    let _ = victim.kill();

    // The second ticket's agent ran after the first's worktree existed.
    let ws = sb.path().join("state/workspaces").join(&second);
    let attempts = std::fs::read_to_string(ws.join(format!("attempts-{second}.txt"))).unwrap();
    for line in attempts
        .lines()
        .filter(|l| l.ends_with(": refused") || l.ends_with(": ESCAPED"))
    {
        assert!(line.ends_with(": refused"), "{line}\n{attempts}");
    }
    for name in [
        "read-ledger",
        "list-state-root",
        "read-other-worktree",
        "read-host-key",
        "read-host-home",
        "read-sortie-environ",
        "write-usr",
        "write-etc",
        "see-victim",
        "kill-victim",
        "write-mirror-config",
    ] {
        assert!(
            attempts.contains(&format!("{name}: refused")),
            "{name} not tried: {attempts}"
        );
    }
    let processes: u32 = attempts
        .lines()
        .find_map(|l| l.strip_prefix("processes: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        processes <= 6,
        "the agent sees {processes} processes: {attempts}"
    );
    assert!(attempts.contains("token: absent"), "{attempts}");
    assert!(attempts.contains("github-token: absent"), "{attempts}");
    assert!(
        attempts.contains("passed: named-in-sandbox-env"),
        "{attempts}"
    );
    assert!(!attempts.contains("commit: FAILED"), "{attempts}");
    for file in ["hook.txt", "check.txt"] {
        let seen = std::fs::read_to_string(ws.join(file)).unwrap();
        assert_eq!(seen.trim(), "refused", "{file}");
    }
    assert!(!sb.path().join("escaped").exists());
    assert!(!sb.path().join("state/escaped").exists());

    // Its commit is on the ticket's branch, pushed, and the block says how it ran.
    for id in [&first, &second] {
        assert_eq!(
            success_sandbox(&sb, id).as_deref(),
            Some("bubblewrap"),
            "ticket {id}"
        );
        let remote = sb.path().join("remote.git");
        // The default branch carries the board's key (issue #52 item 1).
        let branch = crate::common::ticket_branch(&sb.config_path(), id);
        let log = git(
            &remote,
            &["log", "--format=%s", &format!("refs/heads/{branch}")],
        );
        assert!(log.starts_with(&format!("work on {id}")), "{log}");
        let ws = sb.path().join("state/workspaces").join(id);
        let head = git(&ws, &["symbolic-ref", "HEAD"]);
        assert_eq!(head, format!("refs/heads/{branch}"), "HEAD attached again");
    }
    // The mirror's config was never the agent's to write.
    let mirrors = std::fs::read_dir(sb.path().join("state/git")).unwrap();
    for m in mirrors.flatten() {
        let config = m.path().join("config");
        if config.exists() {
            let text = std::fs::read_to_string(config).unwrap();
            assert!(!text.contains("escaped"), "{text}");
        }
    }
}

#[test]
fn network_none_cuts_loopback_and_host_keeps_it() {
    bwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            drop(conn);
        }
    });
    let agent = format!(
        "#!/bin/sh\ncat > /dev/null\n\
         if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then r=connected; else r=refused; fi\n\
         printf 'outcome: success\\nsummary: %s\\n' \"$r\" > \"$SORTIE_RESULT_FILE\"\n"
    );
    for (network, expected) in [("none", "refused"), ("host", "connected")] {
        let sb = pipeline(
            &agent,
            &format!("{{kind: bubblewrap, network: {network}}}"),
            "",
            false,
            60,
        );
        let id = sb.add("Net", "todo", &[]);
        tick(&sb, &[]);
        let summary = sb
            .blocks(&id)
            .iter()
            .map(|b| match b {
                OutcomeBlock::Success(s) => s.summary.clone(),
                OutcomeBlock::Failure(f) => panic!("failed: {}", f.detail),
            })
            .next()
            .expect("the run wrote a block");
        assert_eq!(summary, expected, "network: {network}");
    }
}

/// Pids of processes whose command line holds `marker`.
fn marked(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut cmdline = String::new();
        if let Ok(mut f) = std::fs::File::open(entry.path().join("cmdline")) {
            let _ = f.read_to_string(&mut cmdline);
        }
        if cmdline.replace('\0', " ").contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An agent that leaves a process of its own session behind and then hangs.
fn hanging_agent(marker: &str) -> String {
    format!(
        "#!/bin/sh\ncat > /dev/null\nsetsid sh -c 'exec sleep {marker}1' &\n\
         touch started\nexec sleep {marker}2\n"
    )
}

#[test]
fn a_timed_out_sandboxed_run_leaves_no_process_behind() {
    bwrap();
    let marker = format!("31{}", std::process::id() % 10_000);
    let sb = pipeline(&hanging_agent(&marker), "{kind: bubblewrap}", "", false, 2);
    let id = sb.add("Hang", "todo", &[]);
    tick(&sb, &[]);
    let blocks = sb.blocks(&id);
    assert!(
        blocks
            .iter()
            .any(|b| matches!(b, OutcomeBlock::Failure(f) if f.reason_code == "agent.timeout")),
        "{blocks:?}"
    );
    wait_for(
        "the sandbox's processes to end",
        Duration::from_secs(5),
        || marked(&format!("sleep {marker}")).is_empty(),
    );
}

#[test]
fn a_stalled_sandboxed_run_leaves_no_process_behind() {
    bwrap();
    let marker = format!("33{}", std::process::id() % 10_000);
    let sb = pipeline(
        &hanging_agent(&marker),
        "{kind: bubblewrap}",
        "",
        false,
        120,
    );
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    std::fs::write(
        sb.config_path(),
        config.replace("stall_timeout_seconds: 0", "stall_timeout_seconds: 2"),
    )
    .unwrap();
    let id = sb.add("Stall", "todo", &[]);
    tick(&sb, &[]);
    let blocks = sb.blocks(&id);
    assert!(
        blocks
            .iter()
            .any(|b| matches!(b, OutcomeBlock::Failure(f) if f.reason_code == "agent.stalled")),
        "{blocks:?}"
    );
    wait_for(
        "the sandbox's processes to end",
        Duration::from_secs(5),
        || marked(&format!("sleep {marker}")).is_empty(),
    );
}

#[test]
fn ctrl_c_during_a_sandboxed_run_kills_the_whole_tree() {
    bwrap();
    let marker = format!("32{}", std::process::id() % 10_000);
    let sb = pipeline(
        &hanging_agent(&marker),
        "{kind: bubblewrap}",
        "",
        false,
        120,
    );
    let id = sb.add("Hang", "todo", &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config"])
        .arg(sb.config_path())
        .current_dir(sb.path())
        .env("SORTIE_BWRAP", bwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = sb.path().join("state/workspaces").join(&id).join("started");
    wait_for("the agent to start", Duration::from_secs(30), || {
        started.exists() && marked(&format!("sleep {marker}")).len() >= 2
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    wait_for("sortie to stop", Duration::from_secs(20), || {
        child.try_wait().unwrap().is_some()
    });
    wait_for(
        "the sandbox's processes to end",
        Duration::from_secs(5),
        || marked(&format!("sleep {marker}")).is_empty(),
    );
}

#[test]
fn kind_bubblewrap_without_a_usable_bwrap_is_a_config_error_with_its_line() {
    let sb = pipeline("#!/bin/sh\n", "{kind: bubblewrap}", "", false, 60);
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "validate", "--config"])
        .arg(sb.config_path())
        .env("SORTIE_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("pipeline.yaml:10"), "{err}");
    assert!(err.contains("agent.sandbox.kind"), "{err}");
    assert!(
        err.contains("/nonexistent/bwrap cannot be started"),
        "{err}"
    );
    // And with a usable one, validate says so.
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "validate", "--config"])
        .arg(sb.config_path())
        .env("SORTIE_BWRAP", bwrap())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("sandbox: bubblewrap ("), "{text}");
}

/// Variables `cargo test` sets for this test that a user's shell does not have: sortie
/// must find rustup's homes from `PATH` alone, as it would for them.
const CARGO_TEST_VARS: &[&str] = &["RUSTUP_HOME", "CARGO_HOME", "RUSTUP_TOOLCHAIN", "CARGO"];

/// `sortie pipeline ARGS` with `env` added to sortie's environment and cargo's own
/// variables removed: (success, stdout, stderr).
fn sortie_as_a_user(sb: &Sandbox, args: &[&str], env: &[(&str, String)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sortie"));
    cmd.arg("pipeline")
        .args(args)
        .arg("--config")
        .arg(sb.config_path())
        .current_dir(sb.path())
        .env("SORTIE_BWRAP", bwrap())
        .env_remove("SORTIE_LOG");
    for name in CARGO_TEST_VARS {
        cmd.env_remove(name);
    }
    let out = cmd.envs(env.iter().map(|(k, v)| (k, v))).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// This machine's `cargo` (a rustup proxy) and `python3` (a pyenv shim): what the
/// toolchain tests run. Fails, never skips, when they are not installed that way.
fn version_managed_toolchains() {
    let how = "this test needs `cargo` installed by rustup (https://rustup.rs) and `python3` \
               by pyenv (https://github.com/pyenv/pyenv) on PATH";
    let cargo = sortie::agent::find_program("cargo").unwrap_or_else(|| panic!("{how}"));
    let proxy = cargo.canonicalize().unwrap();
    assert!(
        proxy.ends_with("rustup"),
        "{} is not a rustup proxy; {how}",
        cargo.display()
    );
    let python = sortie::agent::find_program("python3").unwrap_or_else(|| panic!("{how}"));
    let shim = std::fs::read_to_string(&python).unwrap_or_default();
    assert!(
        shim.contains("pyenv"),
        "{} is not a pyenv shim; {how}",
        python.display()
    );
}

/// An agent that runs `cargo` and `python3` itself, then writes a crate with one test.
const TOOLCHAIN_AGENT: &str = r#"#!/bin/sh
cat > /dev/null
cargo --version > agent-cargo.txt 2>&1 || echo "cargo FAILED" >> agent-cargo.txt
python3 --version > agent-python.txt 2>&1 || echo "python3 FAILED" >> agent-python.txt
mkdir -p src
printf '[package]\nname = "widget"\nversion = "0.1.0"\nedition = "2021"\n' > Cargo.toml
printf '#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n' > src/lib.rs
printf 'outcome: success\nsummary: built\n' > "$SORTIE_RESULT_FILE"
"#;

/// Issue #52: toolchains installed by version managers work in the sandbox. The agent runs
/// `cargo` (a rustup proxy, which needs ~/.rustup) and `python3` (a pyenv shim, which
/// needs ~/.pyenv), and the stage's verify commands `cargo test` and `python3` pass, with
/// only `PATH` telling sortie where they are.
#[test]
fn cargo_and_python_of_version_managers_run_in_the_sandbox_issue_52() {
    bwrap();
    version_managed_toolchains();
    let sb = pipeline(TOOLCHAIN_AGENT, "{kind: bubblewrap}", "", false, 600);
    let config = std::fs::read_to_string(sb.config_path()).unwrap().replace(
        "failure_status: blocked}",
        "failure_status: blocked, verify: {commands: [[cargo, test], [python3, -c, \"import sys; print('python', sys.version_info[0])\"]]}}",
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb.add("Toolchains", "todo", &[]);
    let (ok, out, err) = sortie_as_a_user(&sb, &["tick"], &[]);
    assert!(ok, "tick failed: {out}{err}");

    let ws = sb.path().join("state/workspaces").join(&id);
    let agent_cargo = std::fs::read_to_string(ws.join("agent-cargo.txt")).unwrap();
    assert!(
        agent_cargo.starts_with("cargo 1."),
        "the agent's cargo: {agent_cargo}"
    );
    let agent_python = std::fs::read_to_string(ws.join("agent-python.txt")).unwrap();
    assert!(
        agent_python.starts_with("Python 3."),
        "the agent's python3: {agent_python}"
    );
    let blocks = sb.blocks(&id);
    let success = blocks
        .iter()
        .find_map(|b| match b {
            OutcomeBlock::Success(s) => Some(s),
            OutcomeBlock::Failure(_) => None,
        })
        .unwrap_or_else(|| panic!("no success: {blocks:?}"));
    let checks = &success.evidence.as_ref().expect("evidence").checks;
    assert_eq!(
        checks.iter().map(|c| c.result.as_str()).collect::<Vec<_>>(),
        ["passed", "passed"],
        "{checks:?}"
    );
    assert_eq!(checks[0].tests.map(|t| t.passed), Some(1), "{checks:?}");
    assert_eq!(sb.ticket(&id).status, "review");
}

/// Issue #52: `pipeline validate` starts each agent and verify program in the sandbox a
/// run gets. One that starts on the host but not inside (it reads a file nothing binds)
/// is reported at its key, with what it said; cargo and python3 of the version managers
/// start, so nothing is said of them. At run time a verify program that is not there
/// inside is `verify.cannot_start`, not a failure to retry.
#[test]
fn validate_reports_a_program_that_does_not_start_in_the_sandbox_issue_52() {
    bwrap();
    version_managed_toolchains();
    let sb = pipeline(
        "#!/bin/sh\ncat > /dev/null\nprintf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
        "{kind: bubblewrap}",
        "",
        false,
        60,
    );
    let root = sb.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("tools/bin")).unwrap();
    std::fs::create_dir_all(root.join("tools/share")).unwrap();
    std::fs::write(root.join("tools/share/version.txt"), "versioned 1.0\n").unwrap();
    let tool = root.join("tools/bin/versioned");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\nexec cat {}\n",
            root.join("tools/share/version.txt").display()
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&tool).status().unwrap();
    let config = std::fs::read_to_string(sb.config_path()).unwrap().replace(
        "failure_status: blocked}",
        "failure_status: blocked, verify: {commands: [[cargo, --version], [python3, --version], [versioned]]}}",
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let path = format!(
        "{}:{}",
        root.join("tools/bin").display(),
        std::env::var("PATH").unwrap()
    );
    let (ok, out, err) = sortie_as_a_user(&sb, &["validate"], &[("PATH", path.clone())]);
    assert!(ok, "{out}{err}");
    // Other warnings (this test's config has no git, no exit stage) are not this one's.
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("does not start in the sandbox"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "only `versioned`, not cargo or python3: {err}"
    );
    let expected_start = format!("warning: {}:13:", sb.config_path().display());
    assert!(warnings[0].starts_with(&expected_start), "{err}");
    assert!(
        warnings[0].contains(
            "pipeline_stages[0].verify.commands[2]: `versioned` (verify command 3 of role backend) is installed here but does not start in the sandbox: `versioned --version` exits 1 inside"
        ) && warnings[0].contains("version.txt: No such file or directory")
            && warnings[0].contains("`agent.sandbox.read_only`"),
        "{err}"
    );

    // At run time, a verify program that is not there inside is final, not retried.
    let config = std::fs::read_to_string(sb.config_path())
        .unwrap()
        .replace("[versioned]", "[no-such-tool-52]");
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb.add("Missing", "todo", &[]);
    let (ok, out, err) = sortie_as_a_user(&sb, &["tick"], &[("PATH", path)]);
    assert!(ok, "{out}{err}");
    let blocks = sb.blocks(&id);
    let failure = blocks
        .iter()
        .find_map(|b| match b {
            OutcomeBlock::Failure(f) => Some(f),
            OutcomeBlock::Success(_) => None,
        })
        .unwrap_or_else(|| panic!("no failure: {blocks:?}"));
    assert_eq!(
        failure.reason_code, "verify.cannot_start",
        "{}",
        failure.detail
    );
    assert!(
        failure.detail.contains("not found on the sandbox's PATH"),
        "{}",
        failure.detail
    );
    assert_eq!(sb.ticket(&id).status, "blocked");
}

//! Issue #53: a run reads no process outside its own tree. One `sortie pipeline tick` runs
//! under Debian's `strace` (installed by `scripts/services/strace.sh`) once with 10 and once
//! with 500 idle processes on the host: the `/proc/<pid>/` entries it opens do not grow with
//! them, and none of them is an idle process's.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use crate::common::idle_host::IdleHost;
use crate::common::{self, Sandbox};

const HOW: &str =
    "start it with `./scripts/test`, or by hand: `export SORTIE_TEST_SERVICES=$(mktemp -d); \
bash scripts/services/strace.sh; set -a; . $SORTIE_TEST_SERVICES/strace.env; set +a`";

/// The `strace` the test command installed; fails (never skips) with how to install it.
fn strace() -> String {
    match std::env::var("SORTIE_TEST_STRACE") {
        Ok(path) if Path::new(&path).exists() => path,
        Ok(path) => panic!("SORTIE_TEST_STRACE={path} does not exist; {HOW}"),
        Err(_) => panic!("SORTIE_TEST_STRACE is not set: strace is not installed; {HOW}"),
    }
}

fn config() -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
agent: {{command: ["sh", "-c", "sleep 0"], timeout_seconds: 120}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}
"#,
        roles = common::repo().join("roles").display(),
    )
}

/// The pids whose `/proc/<pid>/...` entries one tick of one run opened.
fn proc_entries_opened_by_one_run(idle: usize) -> (Vec<i32>, IdleHost) {
    let host = IdleHost::start(idle);
    let sb = Sandbox::with_config(&config());
    let id = sb.add("traced", "ready-for-design", &[]);
    let trace = sb.path().join("trace");
    let out = Command::new(strace())
        .args(["-f", "-qq", "-e", "trace=open,openat", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env_remove("SORTIE_FAULT")
        .output()
        .expect("run strace");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("run ticket {id}")),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).expect("the trace");
    let pids = text
        .lines()
        .filter_map(|line| {
            let path = line.split('"').nth(1)?;
            let rest = path.strip_prefix("/proc/")?;
            rest.split('/').next()?.parse::<i32>().ok()
        })
        .collect();
    (pids, host)
}

#[test]
fn a_run_opens_no_proc_entry_of_the_hosts_other_processes() {
    let (few, few_host) = proc_entries_opened_by_one_run(10);
    drop(few_host);
    let (many, many_host) = proc_entries_opened_by_one_run(500);
    let idle: BTreeSet<i32> = many_host.pids.iter().copied().collect();
    let read_idle: BTreeSet<i32> = many.iter().copied().filter(|p| idle.contains(p)).collect();
    assert!(
        read_idle.is_empty(),
        "the run opened /proc entries of {} idle processes of the host: {read_idle:?}",
        read_idle.len()
    );
    // The same work opens about as many entries whatever the host runs (a few more when a
    // thread of the runtime is added meanwhile); reading the host took 2 per process.
    assert!(
        many.len() <= few.len() + 40,
        "{} /proc/<pid> opens with 10 idle processes, {} with 500",
        few.len(),
        many.len()
    );
    eprintln!(
        "/proc/<pid> opens of one run: {} with 10 idle processes, {} with 500",
        few.len(),
        many.len()
    );
}

//! Shared helpers for end-to-end tests: a temp directory with a local board, a
//! pipeline config, the repository's roles and demo agent, and the real binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod graphql;
pub mod idle_host;
pub mod switchable;

use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::tracker::local::LocalBoard;
use sortie::tracker::{Comment, Ticket, Tracker};

/// A temp dir holding `board/`, `state/` and `pipeline.yaml`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

/// The three-stage demo pipeline on a local board, with settings a test can override
/// by text (`ROLES`, `AGENT` and `PER_ROLE` are placeholders).
pub static THREE_STAGES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    Pipeline3 {
        tracker: "tracker:\n  kind: local\n  path: board",
        statuses: KEBAB,
        terminal: "[done, cancelled]",
        per_role_max_in_flight: "PER_ROLE",
        agent_extra: "  stall_timeout_seconds: 30\n",
    }
    .yaml_with_roles("ROLES", &["AGENT".to_string()])
});

/// The pipeline's statuses as one tracker spells them, in the order: ready for design,
/// designing, design approved, design blocked, code review, blocked, done, QA failed.
pub type Spelling = [&'static str; 8];

/// Labels and label-status forges: the config's own words.
pub const KEBAB: Spelling = [
    "ready-for-design",
    "designing",
    "design-approved",
    "design-blocked",
    "code-review",
    "blocked",
    "done",
    "qa-failed",
];

/// The three-stage pipeline (architect -> backend -> qa), written once: what its YAML
/// varies in per tracker.
pub struct Pipeline3<'a> {
    /// The `tracker:` entry, key included (one line or an indented block).
    pub tracker: &'a str,
    pub statuses: Spelling,
    /// The `terminal_states:` list (`[done, cancelled]`).
    pub terminal: &'a str,
    /// `concurrency.per_role_max_in_flight` (text: a template may leave a placeholder).
    pub per_role_max_in_flight: &'a str,
    /// Lines added under `agent:` (two-space indented, each ending in a newline).
    pub agent_extra: &'a str,
}

impl Pipeline3<'_> {
    /// The three-stage pipeline (architect -> backend -> qa) running `agent`.
    pub fn yaml(&self, agent: &[String]) -> String {
        self.yaml_with_roles(&repo().join("roles").display().to_string(), agent)
    }

    /// Like [`Pipeline3::yaml`], with this `roles_dir`.
    pub fn yaml_with_roles(&self, roles: &str, agent: &[String]) -> String {
        let argv: Vec<String> = agent.iter().map(|a| format!("{a:?}")).collect();
        let [ready, designing, approved, design_blocked, review, blocked, done, qa_failed] =
            self.statuses;
        format!(
            r#"
{tracker}
state_root: state
roles_dir: {roles}
claim_lock_ttl_seconds: 60
concurrency: {{max_in_flight: 8, per_role_max_in_flight: {per_role}}}
terminal_states: {terminal}
agent:
  command: [{argv}]
  timeout_seconds: 60
{agent_extra}retry: {{max_attempts: 1, backoff_base_seconds: 1, backoff_max_seconds: 2}}
pipeline_stages:
  - role: architect
    claim_status: {ready}
    in_progress_status: {designing}
    success_status: {approved}
    failure_status: {design_blocked}
  - role: backend
    claim_status: {approved}
    success_status: {review}
    failure_status: {blocked}
    requires_prior_role: architect
  - role: qa
    claim_status: {review}
    success_status: {done}
    failure_status: {qa_failed}
    requires_prior_role: backend
"#,
            tracker = self.tracker,
            per_role = self.per_role_max_in_flight,
            agent_extra = self.agent_extra,
            terminal = self.terminal,
            argv = argv.join(", "),
        )
    }

    /// The parsed config, as if read from `dir/pipeline.yaml`.
    pub fn config(&self, dir: &Path, agent: &[String]) -> Config {
        let text = self.yaml(agent);
        Config::parse_str(&text, Some(&dir.join("pipeline.yaml")))
            .unwrap_or_else(|e| panic!("test config: {e}\n{text}"))
    }
}

/// The three-stage demo pipeline's config text: the repository's roles and demo agent,
/// `per_role` runs per role (more top-level keys may be appended).
pub fn three_stages_config(per_role: u32) -> String {
    THREE_STAGES
        .replace("ROLES", &repo().join("roles").display().to_string())
        .replace(
            "AGENT",
            &repo().join("scripts/demo-agent").display().to_string(),
        )
        .replace("PER_ROLE", &per_role.to_string())
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Sandbox {
    /// A sandbox with an empty board and the three-stage config (`per_role` runs per role).
    pub fn three_stages(per_role: u32) -> Self {
        Self::with_config(&three_stages_config(per_role))
    }

    /// A sandbox with an empty board and the given config text.
    pub fn with_config(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("pipeline.yaml"), config).expect("write config");
        let sandbox = Sandbox { dir };
        sandbox.ok(&["board", "init", "board"]);
        sandbox
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn board_path(&self) -> PathBuf {
        self.path().join("board")
    }

    pub fn config_path(&self) -> PathBuf {
        self.path().join("pipeline.yaml")
    }

    /// Run the real binary in the sandbox.
    pub fn sortie(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(args)
            .current_dir(self.path())
            .env_remove("SORTIE_FAULT")
            // Logs at the default level, whatever the shell running the tests sets.
            .env_remove("SORTIE_LOG")
            .output()
            .expect("run sortie")
    }

    /// Run the binary, assert exit 0, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.sortie(args);
        assert!(
            out.status.success(),
            "sortie {args:?} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Add a ticket through the CLI; returns its id.
    pub fn add(&self, title: &str, status: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "board", "add", "--board", "board", "--title", title, "--status", status,
        ];
        args.extend_from_slice(extra);
        self.ok(&args).trim().to_string()
    }

    /// One tick; returns stdout.
    pub fn tick(&self) -> String {
        self.ok(&["pipeline", "tick", "--config", "pipeline.yaml"])
    }

    /// One tick with `--json`, parsed.
    pub fn tick_json(&self, extra: &[&str]) -> serde_json::Value {
        let mut args = vec!["pipeline", "tick", "--config", "pipeline.yaml", "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&self.ok(&args)).expect("tick --json prints JSON")
    }

    /// `pipeline status --json`, parsed.
    pub fn status_json(&self) -> serde_json::Value {
        let out = self.ok(&["pipeline", "status", "--config", "pipeline.yaml", "--json"]);
        serde_json::from_str(&out).expect("status --json prints JSON")
    }

    fn board(&self) -> LocalBoard {
        LocalBoard::open(&self.board_path()).expect("open board")
    }

    /// Read a ticket through the library.
    pub fn ticket(&self, id: &str) -> Ticket {
        block_on(self.board().get(id)).expect("get ticket")
    }

    /// Read a ticket's comments through the library.
    pub fn comments(&self, id: &str) -> Vec<Comment> {
        block_on(self.board().comments(id)).expect("comments")
    }

    /// Every valid outcome block on a ticket, oldest first.
    pub fn blocks(&self, id: &str) -> Vec<OutcomeBlock> {
        self.comments(id)
            .iter()
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }

    /// Tick until a tick runs nothing (at most `max` ticks); returns the number of ticks.
    pub fn drain(&self, max: usize) -> usize {
        for n in 1..=max {
            let report = self.tick_json(&[]);
            if report["runs"].as_array().is_none_or(|r| r.is_empty()) {
                return n;
            }
        }
        panic!("board not drained after {max} ticks");
    }
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Store `entry` in the outbox as a run that crashed right after storing it would have
/// left it: claimed and stored at `at` by `crashed-run`, with the claim's lease and the
/// entry's write lease both run out at `at` (so the next tick may replay it).
pub fn store_crashed_outcome(
    ledger: &dyn sortie::ledger::Ledger,
    entry: &sortie::ledger::OutboxEntry,
    at: sortie::ledger::Timestamp,
) -> sortie::ledger::OutboxPut {
    use sortie::ledger::{ClaimLimits, ClaimOutcome, ClaimRequest};
    let request = ClaimRequest {
        key: entry.key.clone(),
        stage: entry.stage.clone(),
        claimer_id: "crashed-run".into(),
        run_id: entry.run_id.clone(),
        ttl: std::time::Duration::ZERO,
        limits: ClaimLimits {
            global: u32::MAX,
            role: u32::MAX,
            status: None,
            host: None,
        },
        attempt_floor: entry.stage_attempt,
    };
    match ledger.try_claim(&request, at).expect("claim") {
        ClaimOutcome::Acquired(_) => {}
        other => panic!("could not claim {}: {other:?}", entry.key),
    }
    ledger
        .outbox_put(entry, "crashed-run", std::time::Duration::ZERO, at)
        .expect("outbox put")
}

/// Whether `pid` is gone (no such process, or only a zombie waiting for its reaper).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X'])),
    }
}

/// Whether `pid` is gone within `limit`: a SIGKILL is delivered at once, but the process
/// dies only when the scheduler next runs it, which on a loaded machine takes a moment.
/// Tests pass a limit far above that moment and far below the `sleep` they kill.
pub fn gone_within(pid: i32, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while !gone(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// The rest of a config around a tracker section under test: one stage, `todo` to
/// `review`.
const AROUND_A_TRACKER: &str = r#"
agent: {command: ["true"]}
pipeline_stages:
  - {role: architect, claim_status: todo, success_status: review}
"#;

/// A config whose `tracker:` section is `tracker` (lines from 1), parsed.
pub fn parse_tracker(tracker: &str) -> Result<Config, sortie::config::ConfigError> {
    Config::parse_str(&format!("{tracker}{AROUND_A_TRACKER}"), None)
}

/// The problems the loader finds in a config whose `tracker:` section is `tracker`:
/// (line, field, message) each. Panics when it is accepted.
pub fn tracker_problems(tracker: &str) -> Vec<(usize, String, String)> {
    match parse_tracker(tracker) {
        Ok(_) => panic!("accepted: {tracker}"),
        Err(sortie::config::ConfigError::Invalid { diagnostics }) => diagnostics
            .into_iter()
            .map(|d| (d.line, d.field, d.message))
            .collect(),
        Err(other) => panic!("{other}"),
    }
}

/// Record, as the react step does when it sees pull request `number` of `ticket` merged
/// at `at`, its `merged` reaction (with the outbox entry that writes its block).
pub fn store_merged_reaction(
    ledger: &dyn sortie::ledger::Ledger,
    tracker: &str,
    ticket: &str,
    number: u64,
    at: sortie::ledger::Timestamp,
) {
    use sortie::ledger::{
        ClaimKey, FollowUp, OutboxEntry, OutboxState, ReactionPut, ReactionRecord,
    };
    let fingerprint = format!("merged-{ticket}-{number}");
    let reaction = ReactionRecord {
        tracker: tracker.into(),
        ticket_id: ticket.into(),
        kind: "merged".into(),
        fingerprint: fingerprint.clone(),
        round: 0,
        to_role: None,
        pull_request: number,
        head_sha: "abc".into(),
        handed: Vec::new(),
        payload: serde_json::json!({"kind": "merged", "merge_commit": "m1"}),
        decided_at: at,
    };
    let entry = OutboxEntry {
        idempotency_key: fingerprint.clone(),
        key: ClaimKey::new(tracker, ticket, "reactions"),
        stage: "review".into(),
        stage_attempt: 1,
        run_id: format!("reaction-{fingerprint}"),
        outcome: "success".into(),
        from_status: "review".into(),
        to_status: "done".into(),
        comment_body: "Merged.".into(),
        state: OutboxState::Done,
        write_attempts: 1,
        next_attempt_at: at,
        last_error: None,
        created_at: at,
        follow_up: FollowUp::Clear,
    };
    let put = ledger
        .put_reaction(&reaction, &entry, "test:1:x", std::time::Duration::ZERO, at)
        .expect("put reaction");
    assert_eq!(put, ReactionPut::Stored);
}

/// A claim on `key` in `stage` as another host's live run holds it (a 600 s lease, caps
/// of 10).
pub fn claim_by_another_host(
    key: sortie::ledger::ClaimKey,
    stage: &str,
) -> sortie::ledger::ClaimRequest {
    sortie::ledger::ClaimRequest {
        key,
        stage: stage.into(),
        claimer_id: "otherhost:1:abc".into(),
        run_id: "r-other".into(),
        ttl: std::time::Duration::from_secs(600),
        limits: sortie::ledger::ClaimLimits {
            global: 10,
            role: 10,
            status: None,
            host: None,
        },
        attempt_floor: 1,
    }
}

/// `git` in `dir` (any repository, bare or not), its trimmed output; a failure panics
/// with git's stderr. Commits are Alice's.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Alice")
        .env("GIT_AUTHOR_EMAIL", "alice@example.com")
        .env("GIT_COMMITTER_NAME", "Alice")
        .env("GIT_COMMITTER_EMAIL", "alice@example.com")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The branch sortie gives ticket `id` under the config at `config` (its
/// `workspace.git.branch`, by default unique to the board: `sortie/<board key>/<id>`).
pub fn ticket_branch(config: &Path, id: &str) -> String {
    let cfg = Config::load(config).expect("the test's config loads");
    let git = cfg
        .workspace
        .git
        .as_ref()
        .expect("workspace.git is configured");
    let board = sortie::config::board_key(&cfg.tracker);
    sortie::config::ticket_branch(git, &board, id, "").expect("the branch template renders")
}

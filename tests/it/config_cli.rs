//! `sortie pipeline validate` run as the real binary: whole stdout/stderr and exit codes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

/// Run `sortie pipeline validate --config <config>` from `cwd`: (exit code, stdout, stderr).
fn validate(cwd: &Path, config: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "validate", "--config", config])
        .current_dir(cwd)
        .env_remove("SORTIE_LOG")
        // The sandbox line says whether this host's `bwrap` could confine agents; a
        // stand-in that "starts" makes it the same on every host.
        .env("SORTIE_BWRAP", "/bin/true")
        .output()
        .expect("run sortie");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

/// Compare whole texts, showing both in full on a mismatch.
fn assert_text(got: &str, want: &str) {
    assert!(
        got == want,
        "output differs\n--- got ---\n{got}--- want ---\n{want}---"
    );
}

#[test]
fn valid_three_stage_pipeline_prints_the_chain_and_summary() {
    let dir = fixture_dir();
    let (code, stdout, stderr) = validate(&dir, "three-stage.yaml");
    let d = dir.display();
    let want = format!(
        "ready-for-design -[architect]-> design-approved -[backend]-> code-review -[qa]-> done

architect: claims ready-for-design, runs in designing, success -> design-approved, failure -> design-blocked, max 1 in flight
backend: claims design-approved, success -> code-review, failure -> blocked, requires architect, max 2 in flight
qa: claims code-review, success -> done, failure -> (stays, held), requires backend, max 1 in flight

tracker: local board at {d}/board
state root: {d}/state (ledger {d}/state/ledger.db)
roles: {d}/roles
terminal states: done, cancelled
in flight: at most 4 in total, 1 per role by default
per status: code-review 1
agent: {d}/scripts/demo-agent --role-file (timeout 3600s, stall detection off)
sandbox: none: agents run unconfined (/bin/true could confine them: `agent.sandbox: {{kind: bubblewrap}}`)
git: none: each ticket's workspace starts as an empty directory (`workspace.git` clones your repository)
pull requests: none (`pull_request` opens them)
reactions: none: pull requests are not watched (`reactions`)
budgets: none (`budgets`)
retry: 3 attempts, backoff 10s doubling up to 300s
claim lease: 600s
"
    );
    assert_text(&stdout, &want);
    assert_text(&stderr, "");
    assert_eq!(code, 0);
}

/// Regression (#52): every optional section that is on gets its own line, with the values
/// loaded (defaults filled in), so a user can confirm a key was picked up: the git
/// workspace, pull requests and their forge, reactions, budgets, each stage's `verify`
/// and the sandbox's extra paths. (The lines for sections that are off are in the test
/// above.)
#[test]
fn the_summary_says_which_optional_sections_are_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["board", "roles"] {
        std::fs::create_dir(d.join(sub)).unwrap();
    }
    for role in ["backend", "qa"] {
        std::fs::write(d.join("roles").join(format!("{role}.md")), "Work.\n").unwrap();
    }
    crate::common::git(d, &["init", "--quiet", "--bare", "widgets.git"]);
    std::fs::write(
        d.join("p.yaml"),
        r#"tracker: {kind: local, path: board}
forge: {kind: gitea, url: "http://127.0.0.1:3000", repo: acme/widgets}
agent:
  command: ["true"]
  sandbox: {kind: bubblewrap, read_only: [/opt/tools], writable: [cache], env: [LANG]}
workspace:
  git: {url: widgets.git, base: trunk, branch: "work/{{ ticket.id }}"}
pull_request: {after: backend, draft: false, title: "{{ ticket.title }}"}
reactions:
  watch: [qa-passed]
  ci_failure: {to_role: backend, max_rounds: 2}
  review_comments: {to: backend}
  merged: {to_status: shipped}
  escalate_to: needs-human
budgets:
  max_runs_per_ticket: 6
  per_stage: {backend: {max_cost_usd_per_run: 1.5}}
  max_cost_usd_per_day: 30
pipeline_stages:
  - role: backend
    claim_status: todo
    success_status: review
    verify:
      commands: [[git, diff, --check], [sh, -c, "exit 0"]]
      timeout_seconds: 600
      retry_with_output: false
  - {role: qa, claim_status: review, success_status: qa-passed}
"#,
    )
    .unwrap();
    let (code, stdout, stderr) = validate(d, "p.yaml");
    assert_eq!(code, 0, "{stderr}");
    let d = d.display();
    let want = format!(
        "todo -[backend]-> review -[qa]-> qa-passed

backend: claims todo, success -> review, failure -> (stays, held), max 1 in flight
  verify: `git diff --check`, then `sh -c exit 0` (each within 600s; a failure is final)
qa: claims review, success -> qa-passed, failure -> (stays, held), max 1 in flight

tracker: local board at {d}/board
state root: {d}/state (ledger {d}/state/ledger.db)
roles: {d}/roles
terminal states: done, cancelled
in flight: at most 4 in total, 1 per role by default
agent: true (timeout 3600s, stall 300s)
sandbox: bubblewrap (/bin/true starts a sandbox here; network host, home ephemeral); read-only /opt/tools; writable {d}/cache; env LANG
git: clone of {d}/widgets.git, base trunk, branch work/{{{{ ticket.id }}}}, pushed after each successful run
pull requests: opened after backend succeeds, on Gitea acme/widgets at http://127.0.0.1:3000, ready for review, titled \"{{{{ ticket.title }}}}\"
reactions: watch qa-passed; ci_failure back to backend (at most 2 rounds), review_comments back to backend (at most 3 rounds, quiet 120s); merged -> shipped; closed unmerged -> held; out of rounds -> needs-human; a person merges; hold label sortie:hold
budgets: per ticket 6 runs; per run of backend $1.5; per day $30 (UTC)
retry: 3 attempts, backoff 10s doubling up to 300s
claim lease: 600s
"
    );
    assert_text(&stdout, &want);
}

#[test]
fn a_role_template_with_an_unknown_variable_fails_validation_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("roles")).unwrap();
    std::fs::write(
        dir.path().join("roles/agent.md"),
        "---\ndescription: x\n---\nWork on {{ ticket.id }}\n{{ ticket.assignee }}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        "tracker: {kind: local, path: board}\nagent: {command: [x]}\nactive_states: [todo]\n",
    )
    .unwrap();
    let (code, stdout, stderr) = validate(dir.path(), "p.yaml");
    assert_eq!(code, 2, "{stdout}{stderr}");
    let file = dir.path().join("roles/agent.md");
    assert!(
        stderr.starts_with(&format!("sortie: {}:5: ", file.display())),
        "{stderr}"
    );
    assert!(stderr.contains("undefined"), "{stderr}");
}

#[test]
fn stages_off_the_main_chain_get_their_own_line() {
    let (code, stdout, _) = validate(&fixture_dir(), "two-chains.yaml");
    let roles = fixture_dir().join("roles");
    let want = format!(
        "todo -[backend]-> review -[qa]-> done
needs-docs -[docs]-> done

backend: claims todo, runs in coding, success -> review, failure -> blocked, max 1 in flight
docs: claims needs-docs, success -> done, failure -> (stays, held), max 1 in flight
qa: claims review, success -> done, failure -> todo (back edge qa -> backend: sent back at most 2 times, then needs-human), max 1 in flight

tracker: local board at {d}/board
state root: {d}/state (ledger {d}/state/ledger.db)
roles: {}
terminal states: done, cancelled
in flight: at most 2 in total, 1 per role by default
agent: {agent} --verbose (timeout 3600s, stall 120s)
sandbox: none: agents run unconfined (/bin/true could confine them: `agent.sandbox: {{kind: bubblewrap}}`)
git: none: each ticket's workspace starts as an empty directory (`workspace.git` clones your repository)
pull requests: none (`pull_request` opens them)
reactions: none: pull requests are not watched (`reactions`)
budgets: none (`budgets`)
retry: 3 attempts, backoff 10s doubling up to 300s
claim lease: 600s
",
        roles.display(),
        d = fixture_dir().display(),
        agent = fixture_dir().join("scripts/demo-agent").display()
    );
    assert_text(&stdout, &want);
    assert_eq!(code, 0);
}

#[test]
fn single_role_form_prints_a_one_stage_chain() {
    let (code, stdout, _) = validate(&fixture_dir(), "single-role.yaml");
    assert!(stdout.starts_with("todo -[agent]-> review\n\nagent: claims todo, runs in doing, success -> review, failure -> (stays, held), max 1 in flight\n"), "{stdout}");
    assert_eq!(code, 0);
}

#[test]
fn the_config_is_found_relative_to_the_current_directory_and_paths_to_the_file() {
    // Run from the crate root: paths in the file still resolve against the file's directory.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (code, stdout, _) = validate(&root, "tests/fixtures/config/single-role.yaml");
    assert_eq!(code, 0);
    assert!(
        stdout.contains(&format!(
            "tracker: local board at {}/board\n",
            fixture_dir().display()
        )),
        "{stdout}"
    );
}

#[test]
fn invalid_config_prints_every_problem_on_stderr_and_exits_2() {
    let (code, stdout, stderr) = validate(&fixture_dir(), "success-is-own-status.yaml");
    let want = "\
success-is-own-status.yaml:8:21: pipeline_stages[0].success_status: success_status `todo` is this stage's own claim_status, so the stage would re-dispatch itself forever; expected a status the stage does not own
success-is-own-status.yaml:9:21: pipeline_stages[0].failure_status: failure_status `coding` is this stage's own in_progress_status, so the stage would re-dispatch itself forever; expected a status the stage does not own
";
    assert_text(&stderr, want);
    assert_text(&stdout, "");
    assert_eq!(code, 2);
}

#[test]
fn a_typo_is_refused_with_a_suggestion() {
    let (code, _, stderr) = validate(&fixture_dir(), "unknown-key.yaml");
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown-key.yaml:7:5: pipeline_stages[0].claim_statu: unknown key `claim_statu`; did you mean `claim_status`?"), "{stderr}");
}

#[test]
fn a_missing_file_exits_2_with_a_clear_message() {
    let (code, stdout, stderr) = validate(&fixture_dir(), "no-such-file.yaml");
    assert_text(&stderr, "sortie: cannot read config file no-such-file.yaml: No such file or directory (os error 2)\n");
    assert_text(&stdout, "");
    assert_eq!(code, 2);
}

#[test]
fn a_directory_is_not_a_config() {
    let (code, _, stderr) = validate(&fixture_dir(), ".");
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("sortie: cannot read config file .: "),
        "{stderr}"
    );
}

/// Symphony conformance (#39, item 19): the config path may be the command's argument,
/// as well as `--config`; both at once is a usage error.
#[test]
fn a_positional_config_path_works_like_config() {
    let sb = crate::common::Sandbox::three_stages(1);
    let id = sb.add("Export", "ready-for-design", &[]);
    let by_flag = sb.ok(&["pipeline", "tick", "--dry-run", "--config", "pipeline.yaml"]);
    let by_argument = sb.ok(&["pipeline", "tick", "--dry-run", "pipeline.yaml"]);
    assert_eq!(by_argument, by_flag);
    assert!(by_argument.contains(&id), "{by_argument}");
    for command in [
        &["pipeline", "validate", "pipeline.yaml"][..],
        &["pipeline", "status", "pipeline.yaml"],
        &["tracker", "check", "pipeline.yaml"],
    ] {
        let out = sb.sortie(command);
        assert!(
            out.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let both = sb.sortie(&[
        "pipeline",
        "tick",
        "--config",
        "pipeline.yaml",
        "pipeline.yaml",
    ]);
    assert_eq!(both.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
    let missing = sb.sortie(&["pipeline", "tick", "nowhere.yaml"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("nowhere.yaml"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

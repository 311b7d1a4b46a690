//! Typos and traps that validate (issue #30): `pipeline validate` run as the real binary
//! warns about them as whole `warning: FILE:LINE:COL: field: message` lines.

use std::path::Path;
use std::process::Command;

/// A directory with `board/`, the role files `roles`, and `p.yaml` holding `config`.
fn setup(config: &str, roles: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("board")).unwrap();
    std::fs::create_dir(dir.path().join("roles")).unwrap();
    for (role, text) in roles {
        std::fs::write(dir.path().join("roles").join(format!("{role}.md")), text).unwrap();
    }
    std::fs::write(dir.path().join("p.yaml"), config).unwrap();
    dir
}

/// `sortie ARGS` in `dir`: (exit code, stdout, stderr).
fn sortie(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env_remove("SORTIE_LOG")
        .output()
        .expect("run sortie");
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn validate(dir: &Path) -> (i32, String) {
    let (code, _, stderr) = sortie(dir, &["pipeline", "validate", "--config", "p.yaml"]);
    (code, stderr)
}

const PLAIN: &[(&str, &str)] = &[("architect", "Design it.\n"), ("backend", "Build it.\n")];

#[test]
fn a_misspelt_claim_status_warns_with_its_line_and_the_status_meant() {
    let dir = setup(
        r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - role: backend
    claim_status: design-aproved
    success_status: done
"#,
        PLAIN,
    );
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        "warning: p.yaml:6:19: pipeline_stages[1].claim_status: no stage moves tickets to \
         `design-aproved` (it is no stage's success_status, failure_status or rework.then), so \
         only a person can put one there; did you mean `design-approved`? (if people do, mark \
         the stage `entry: true`)\n"
    );
}

#[test]
fn an_unclaimed_success_status_warns_unless_the_stage_says_exit() {
    let config = r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - {role: backend, claim_status: design-approved, success_status: ready-to-merge}
"#;
    let dir = setup(config, PLAIN);
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        "warning: p.yaml:5:68: pipeline_stages[1].success_status: no stage claims \
         `ready-to-merge` and it is not a terminal state, so tickets that succeed here wait \
         there for a person (if that is the plan, mark the stage `exit: true`)\n"
    );
    let marked = config.replace("ready-to-merge}", "ready-to-merge, exit: true}");
    std::fs::write(dir.path().join("p.yaml"), marked).unwrap();
    let (code, stderr) = validate(dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
}

/// Regression (#52): the last stage's success status that `reactions.watch` lists is where
/// sortie watches the pull request, not a place tickets wait for a person: no warning.
/// Without `reactions` the same status still warns.
#[test]
fn a_success_status_reactions_watch_is_not_warned_about() {
    let config = r#"tracker: {kind: local, path: board}
forge: {kind: github, repo: acme/widgets}
agent: {command: ["true"]}
workspace: {git: {url: widgets.git}}
pull_request: {after: backend}
pipeline_stages:
  - {role: backend, claim_status: todo, success_status: code-review}
  - {role: qa, claim_status: code-review, success_status: qa-passed}
reactions:
  watch: [qa-passed]
  ci_failure: {to: backend}
"#;
    let roles = [("backend", "Build it.\n"), ("qa", "Test it.\n")];
    let dir = setup(config, &roles);
    // `--offline`: the remote is an empty bare repository, without the base branch the
    // remote check would warn about (that check has its own test below).
    let validate = |dir: &Path| {
        let args = ["pipeline", "validate", "--config", "p.yaml", "--offline"];
        let (code, _, stderr) = sortie(dir, &args);
        (code, stderr)
    };
    crate::common::git(dir.path(), &["init", "--quiet", "--bare", "widgets.git"]);
    let (code, stderr) = validate(dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));

    let unwatched = config.split("reactions:").next().unwrap();
    std::fs::write(dir.path().join("p.yaml"), unwatched).unwrap();
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.starts_with(
            "warning: p.yaml:8:59: pipeline_stages[1].success_status: no stage claims \
             `qa-passed`"
        ),
        "{stderr}"
    );
}

#[test]
fn a_claim_status_people_fill_is_silent_when_marked_entry() {
    let dir = setup(
        r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - {role: backend, claim_status: design-approved, success_status: done}
  - {role: qa, claim_status: hotfix, success_status: done, entry: true}
"#,
        &[("architect", "a\n"), ("backend", "b\n"), ("qa", "q\n")],
    );
    let (code, stderr) = validate(dir.path());
    assert_eq!((code, stderr.as_str()), (0, ""));
}

#[test]
fn a_role_asking_for_commits_warns_when_no_git_workspace_is_configured() {
    let config = r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: design-approved}
  - {role: backend, claim_status: design-approved, success_status: done}
"#;
    let roles = [
        ("architect", "Write DESIGN.md.\n"),
        (
            "backend",
            "Implement it.\n2. Commit on a branch and open a pull request.\n",
        ),
    ];
    let dir = setup(config, &roles);
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, 0, "{stderr}");
    let d = dir.path().display();
    assert_eq!(
        stderr,
        format!(
            "warning: {d}/roles/backend.md:2:4: this role asks the agent to commit, but \
             `workspace.git` is not configured: each ticket's workspace is an empty directory, \
             not a clone of your repository; set `workspace.git.url` (docs/workspaces.md)\n"
        )
    );
    let with_git = format!("{config}workspace: {{git: {{url: ../widgets.git}}}}\n");
    std::fs::write(dir.path().join("p.yaml"), with_git).unwrap();
    // `--offline`: the remote (which does not exist here) is not asked.
    let (code, _, stderr) = sortie(
        dir.path(),
        &["pipeline", "validate", "--config", "p.yaml", "--offline"],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
}

/// Issue #52: a verify program that is not installed, a `workspace.git.url` nobody
/// answers at and a remote without the base branch are each said by validate once, at
/// their key, instead of failing every ticket at run time; `--offline` skips the remote.
#[test]
fn validate_says_a_missing_verify_program_and_an_unusable_git_remote_issue_52() {
    let dir = setup(
        r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
workspace: {git: {url: ../remote.git, base: main}}
pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    success_status: done
    verify: {commands: [["true"], ["no-such-verify-tool-52", "--all"]]}
"#,
        PLAIN,
    );
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::rename(dir.path().join("p.yaml"), work.join("p.yaml")).unwrap();
    std::fs::rename(dir.path().join("board"), work.join("board")).unwrap();
    std::fs::rename(dir.path().join("roles"), work.join("roles")).unwrap();
    let remote = dir.path().join("remote.git");
    let remote = remote.display();
    let missing_tool = "warning: p.yaml:8:35: pipeline_stages[0].verify.commands[1]: verify \
        program `no-such-verify-tool-52` (role architect) is not found on this machine; every \
        run of this stage would end `verify.cannot_start`: install it, or change the command\n";

    let (code, stderr) = validate(&work);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "{missing_tool}warning: p.yaml:3:24: workspace.git.url: `git ls-remote {remote}` \
             failed (fatal: '{remote}' does not appear to be a git repository); every run would \
             fail preparing its worktree: check the URL and this machine's access to it \
             (`--offline` skips this check)\n"
        )
    );
    let (code, _, stderr) = sortie(
        &work,
        &["pipeline", "validate", "--config", "p.yaml", "--offline"],
    );
    assert_eq!((code, stderr.as_str()), (0, missing_tool));

    // There, but without the base branch.
    crate::common::git(dir.path(), &["init", "--quiet", "--bare", "remote.git"]);
    let (_, stderr) = validate(&work);
    assert_eq!(
        stderr,
        format!(
            "{missing_tool}warning: p.yaml:3:45: workspace.git.base: branch `main` is not on \
             {remote}; every ticket's branch starts from it: push it, or set \
             `workspace.git.base` to a branch that is there\n"
        )
    );

    // With it, the remote is fine.
    crate::common::git(dir.path(), &["clone", "--quiet", "remote.git", "seed"]);
    let seed = dir.path().join("seed");
    crate::common::git(
        &seed,
        &["commit", "--quiet", "--allow-empty", "-m", "first"],
    );
    crate::common::git(
        &seed,
        &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
    );
    let (_, stderr) = validate(&work);
    assert_eq!(stderr, missing_tool);
}

#[test]
fn a_wrong_type_for_max_attempts_names_the_range_zero_is_refused_with() {
    let dir = setup(
        r#"tracker: {kind: local, path: board}
agent: {command: ["true"]}
retry: {max_attempts: two}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: done}
"#,
        PLAIN,
    );
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        "p.yaml:3:23: retry.max_attempts: expected a whole number between 1 and 4294967295, \
         found string \"two\"\n"
    );
}

#[test]
fn a_tick_refused_for_a_missing_agent_program_writes_no_ledger() {
    let dir = setup(
        r#"tracker: {kind: local, path: board}
state_root: state
agent: {command: ["no-such-agent-program-30"]}
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: done}
"#,
        PLAIN,
    );
    let (code, _, stderr) = sortie(dir.path(), &["pipeline", "tick", "--config", "p.yaml"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no-such-agent-program-30"), "{stderr}");
    assert!(
        !dir.path().join("state").exists(),
        "a refused tick created {}",
        dir.path().join("state").display()
    );
}

//! Issue #18, routes: a stage's first route whose `when` holds for a ticket picks the
//! agent settings and prompt of its run; the route is in the dry run, the outcome block
//! and run history; a ticket no route takes runs the stage's defaults; a bad route is
//! refused by `pipeline validate` with file and line. Through the real binary on a
//! local board, with the fake Claude Code CLI recording how it was called.

use crate::common;

use common::Sandbox;
use sortie::block::OutcomeBlock;
use sortie::ledger::{Ledger, SqliteLedger};

fn fake_claude() -> String {
    common::repo()
        .join("tests/fixtures/agents/fake-claude")
        .display()
        .to_string()
}

/// A backend stage on the fake Claude Code (model sonnet) whose `hard` route runs another
/// command (a wrapper that leaves a mark), model opus and its own prompt. `routes` replaces
/// the routes when given.
fn config(sb_dir: &std::path::Path, routes: Option<&str>) -> String {
    let out = |name: &str| sb_dir.join(name).display().to_string();
    let routes = routes.map(str::to_string).unwrap_or_else(|| {
        format!(
            r#"
      - name: hard
        when: {{labels: [hard], exclude_labels: [easy]}}
        agent:
          command: [./hard-claude]
          model: opus
          env: {{FAKE_ARGV_FILE: "{}", FAKE_STDIN_FILE: "{}"}}
        role_file: roles/backend-hard.md"#,
            out("hard-argv"),
            out("hard-prompt"),
        )
    });
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: roles
agent:
  preset: claude-code
  command: ["{claude}"]
  model: sonnet
  timeout_seconds: 60
  env: {{FAKE_ARGV_FILE: "{argv}", FAKE_STDIN_FILE: "{prompt}"}}
pipeline_stages:
  - role: backend
    claim_status: todo
    success_status: review
    routes:{routes}
"#,
        claude = fake_claude(),
        argv = out("default-argv"),
        prompt = out("default-prompt"),
    )
}

/// A sandbox with the role files and the `hard-claude` wrapper in place.
pub(crate) fn sandbox(routes: Option<&str>) -> Sandbox {
    let sb = Sandbox::with_config("");
    std::fs::write(sb.config_path(), config(sb.path(), routes)).unwrap();
    let roles = sb.path().join("roles");
    std::fs::create_dir(&roles).unwrap();
    std::fs::write(
        roles.join("backend.md"),
        "Default backend prompt for {{ ticket.title }}.\n",
    )
    .unwrap();
    std::fs::write(
        roles.join("backend-hard.md"),
        "HARD backend prompt for {{ ticket.title }}: think twice.\n",
    )
    .unwrap();
    let wrapper = sb.path().join("hard-claude");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ntouch \"$(dirname \"$0\")/hard-ran\"\nexec \"{}\" \"$@\"\n",
            fake_claude()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    sb
}

fn read(sb: &Sandbox, name: &str) -> String {
    std::fs::read_to_string(sb.path().join(name))
        .unwrap_or_else(|e| panic!("{name} not written: {e}"))
}

fn route_of(block: &OutcomeBlock) -> Option<serde_yaml::Value> {
    match block {
        OutcomeBlock::Success(b) => b.extra.get("route").cloned(),
        OutcomeBlock::Failure(b) => b.extra.get("route").cloned(),
    }
}

#[test]
fn a_label_route_runs_its_own_command_model_and_prompt_and_is_recorded() {
    let sb = sandbox(None);
    let hard = sb.add("rewrite the scheduler", "todo", &["--label", "hard"]);

    let dry = sb.tick_json(&["--dry-run"]);
    let runs = dry["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{dry:#}");
    assert_eq!(
        runs[0]["route"], "hard",
        "the dry run says which route: {dry:#}"
    );
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains(&format!("would run ticket {hard} role backend route hard")),
        "{text}"
    );

    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(report["runs"][0]["route"], "hard");
    assert_eq!(sb.ticket(&hard).status, "review");
    assert!(
        sb.path().join("hard-ran").exists(),
        "the route's command ran"
    );
    let argv = read(&sb, "hard-argv");
    assert!(argv.contains("\nopus\n"), "the route's model: {argv}");
    assert!(!argv.contains("sonnet"), "{argv}");
    let prompt = read(&sb, "hard-prompt");
    assert!(
        prompt.contains("HARD backend prompt for rewrite the scheduler"),
        "the route's role file: {prompt}"
    );
    assert!(
        !sb.path().join("default-argv").exists(),
        "the stage's defaults did not run"
    );

    let blocks = sb.blocks(&hard);
    assert_eq!(blocks.len(), 1);
    assert_eq!(
        route_of(&blocks[0]),
        Some(serde_yaml::Value::String("hard".into())),
        "the outcome block names the route"
    );
    let ledger = SqliteLedger::open(&sb.path().join("state/ledger.db")).unwrap();
    let history = ledger.ticket_runs("local", &hard, 10).unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].route.as_deref(), Some("hard"), "run history");
}

#[test]
fn a_ticket_no_route_takes_runs_the_stage_defaults() {
    let sb = sandbox(None);
    // `easy` excludes it from the hard route; no other route matches.
    let plain = sb.add(
        "fix a typo",
        "todo",
        &["--label", "hard", "--label", "easy"],
    );
    let dry = sb.tick_json(&["--dry-run"]);
    assert!(dry["runs"][0]["route"].is_null(), "{dry:#}");

    sb.drain(3);
    assert_eq!(sb.ticket(&plain).status, "review");
    let argv = read(&sb, "default-argv");
    assert!(argv.contains("\nsonnet\n"), "the stage's model: {argv}");
    assert!(read(&sb, "default-prompt").contains("Default backend prompt for fix a typo"));
    assert!(!sb.path().join("hard-ran").exists());
    let blocks = sb.blocks(&plain);
    assert_eq!(route_of(&blocks[0]), None, "no route field without a route");
    let ledger = SqliteLedger::open(&sb.path().join("state/ledger.db")).unwrap();
    assert_eq!(
        ledger.ticket_runs("local", &plain, 10).unwrap()[0].route,
        None
    );
}

#[test]
fn an_unnamed_route_is_recorded_by_its_index_and_each_run_chooses_from_the_board() {
    let sb = sandbox(Some(
        "\n      - {when: {labels: [docs]}, agent: {model: haiku}}\n      - {name: hard, when: {labels: [hard]}, agent: {model: opus}}",
    ));
    let id = sb.add("write the guide", "todo", &["--label", "docs"]);
    let dry = sb.tick_json(&["--dry-run"]);
    assert_eq!(dry["runs"][0]["route"], "0", "{dry:#}");
    // A person relabels the ticket before it runs: the run follows the board.
    let file = sb.board_path().join(&id).join("ticket.md");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen("labels: [docs]", "labels: [hard]", 1)).unwrap();
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["route"], "hard", "{report:#}");
    assert!(read(&sb, "default-argv").contains("\nopus\n"));
}

#[test]
fn validate_lists_the_routes() {
    let sb = sandbox(None);
    let out = sb.ok(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert!(
        out.contains("  route hard: when labels hard; not easy -> command "),
        "{out}"
    );
    assert!(out.contains("model opus, role file "), "{out}");
}

/// `pipeline validate` on a config whose routes are `routes`: its stderr, after checking
/// that it exits 2.
fn refused(routes: &str) -> String {
    let sb = sandbox(Some(routes));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "refused: {err}");
    err
}

#[test]
fn a_bad_route_is_refused_by_validate_with_file_and_line() {
    // Line 15 is the stage's first route.
    let err = refused("\n      - {name: hard, when: {labels: [hard]}, role_file: roles/nope.md}");
    assert!(
        err.contains("pipeline.yaml:15:")
            && err.contains("pipeline_stages[0].routes[0].role_file")
            && err.contains("nope.md"),
        "a missing role file: {err}"
    );
    let err =
        refused("\n      - {name: hard, when: {labels: [hard]}, agent: {preset: claude-cod}}");
    assert!(
        err.contains("pipeline.yaml:15:")
            && err.contains("routes[0].agent.preset")
            && err.contains("unknown preset `claude-cod`; did you mean `claude-code`?"),
        "an unknown preset: {err}"
    );
    let err = refused("\n      - {name: hard, when: {labels: [hard]}, agent: {modle: opus}}");
    assert!(
        err.contains("pipeline.yaml:15:") && err.contains("modle") && err.contains("model"),
        "an unknown agent key: {err}"
    );
    let err =
        refused("\n      - {name: hard, when: {labels: [hard]}, agent: {sandbox: read-only}}");
    assert!(
        err.contains("pipeline.yaml:15:")
            && err.contains("routes[0].agent.sandbox")
            && err.contains("not of `claude-code`"),
        "an option of another preset: {err}"
    );
    let err = refused("\n      - {name: hard, when: {label: [hard]}}");
    assert!(
        err.contains("pipeline.yaml:15:") && err.contains("label"),
        "an unknown condition key: {err}"
    );
    let err = refused("\n      - {name: hard, when: {}}");
    assert!(err.contains("needs a condition"), "{err}");
    let err = refused(
        "\n      - {name: hard, when: {labels: [a]}}\n      - {name: hard, when: {labels: [b]}}",
    );
    assert!(
        err.contains("pipeline.yaml:16:") && err.contains("already routes[0]"),
        "{err}"
    );
    // A template error in the route's role file is reported at its own line.
    let sb = sandbox(Some(
        "\n      - {name: hard, when: {labels: [hard]}, role_file: roles/broken.md}",
    ));
    std::fs::write(
        sb.path().join("roles/broken.md"),
        "line one\n{{ ticket.nope }}\n",
    )
    .unwrap();
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("broken.md:2"), "the role file's line: {err}");
}

#[test]
fn every_shipped_pipeline_validates_and_the_worked_example_routes_hard_tickets() {
    // A checkout laid out as the README's first steps leave it (`sortie board init
    // board`; the demo's board under state/demo): validate refuses a missing board.
    let checkout = tempfile::tempdir().unwrap();
    for linked in ["roles", "scripts"] {
        std::os::unix::fs::symlink(common::repo().join(linked), checkout.path().join(linked))
            .unwrap();
    }
    for board in ["board", "state/demo/board"] {
        std::fs::create_dir_all(checkout.path().join(board)).unwrap();
    }
    std::fs::create_dir(checkout.path().join("pipelines")).unwrap();
    let mut seen = 0;
    for shipped in shipped_pipelines(&common::repo()) {
        seen += 1;
        let path = checkout
            .path()
            .join("pipelines")
            .join(shipped.file_name().unwrap());
        std::fs::copy(&shipped, &path).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
            // `--offline`: the examples name github.com remotes, and tests reach only
            // 127.0.0.1 (the remote check has its own test in config_warnings).
            .args(["pipeline", "validate", "--offline", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        // No warning but the intended one (issue #30): architect-backend-qa runs a real
        // agent with roles/backend.md, which asks for commits, on a plain workspace. A
        // missing agent program depends on the machine and is left out.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("warning: agent program "))
            .collect();
        let want: Vec<String> = if path.ends_with("architect-backend-qa.yaml") {
            // The first line that asks is "3. Commit on a branch ..." (the reaction
            // section above it renders only with workspace.git).
            let text = std::fs::read_to_string(checkout.path().join("roles/backend.md")).unwrap();
            let line = 1 + text
                .lines()
                .position(|l| l.starts_with("3. Commit"))
                .expect("roles/backend.md asks for a commit");
            vec![format!(
                "warning: {}/roles/backend.md:{line}:4: this role asks the agent to \
                 commit, but `workspace.git` is not configured: each ticket's workspace is an \
                 empty directory, not a clone of your repository; set `workspace.git.url` \
                 (docs/workspaces.md)",
                checkout.path().display()
            )]
        } else {
            Vec::new()
        };
        assert_eq!(warnings, want, "{}", path.display());
        if path.ends_with("rework-loop.yaml") {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains("  route hard: when labels hard -> timeout 1800s, role file ")
                    && text.contains("backend-hard.md"),
                "{text}"
            );
        }
    }
    assert!(seen >= 6, "the pipelines directory: {seen} files");
}

/// The `pipelines/*.yaml` files git tracks in `repo`: the shipped examples, not a
/// scratch file someone left there (an untracked broken one used to fail the test).
fn shipped_pipelines(repo: &std::path::Path) -> Vec<std::path::PathBuf> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        // `glob`: the `*` stays in `pipelines/`, as the shipped examples do.
        .args(["ls-files", "-z", "--", ":(glob)pipelines/*.yaml"])
        .output()
        .expect("git runs (the shipped pipelines are the files git tracks)");
    assert!(
        out.status.success(),
        "git ls-files in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| repo.join(String::from_utf8_lossy(name).as_ref()))
        .collect()
}

/// Regression (#30): the shipped pipelines are the tracked ones; an untracked
/// `pipelines/scratch.yaml` is not among them, nor a tracked file in a subfolder
/// (the test used to read the folder, top level only).
#[test]
fn the_shipped_pipelines_are_the_tracked_yaml_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    std::fs::create_dir_all(repo.join("pipelines/old")).unwrap();
    for name in ["a.yaml", "b.yaml", "notes.md", "scratch.yaml", "old/c.yaml"] {
        std::fs::write(repo.join("pipelines").join(name), "x: 1\n").unwrap();
    }
    git(&[
        "add",
        "pipelines/a.yaml",
        "pipelines/b.yaml",
        "pipelines/notes.md",
        "pipelines/old/c.yaml",
    ]);
    let mut got: Vec<_> = shipped_pipelines(repo)
        .into_iter()
        .map(|p| p.strip_prefix(repo).unwrap().display().to_string())
        .collect();
    got.sort();
    assert_eq!(got, ["pipelines/a.yaml", "pipelines/b.yaml"]);
}

/// One `pipeline tick --json` with the clock `offset` seconds ahead (a retry is due).
fn tick_later(sb: &Sandbox, offset: u64) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml", "--json"])
        .current_dir(sb.path())
        .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
        .env_remove("SORTIE_FAULT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_retry_chooses_its_route_from_the_board_and_resumes_only_a_session_of_the_same_route() {
    for relabelled in [false, true] {
        let sb = sandbox(Some(
            "\n      - {name: hard, when: {labels: [hard]}, agent: {model: opus, env: {FAKE_SCENARIO: cut}}}",
        ));
        let mut text = std::fs::read_to_string(sb.config_path()).unwrap();
        text.push_str("retry: {backoff_base_seconds: 1, backoff_max_seconds: 1}\n");
        std::fs::write(sb.config_path(), text).unwrap();
        let id = sb.add("flaky", "todo", &["--label", "hard"]);

        // The hard route's agent is cut off mid-stream: a transient failure, retried.
        let first = sb.tick_json(&[]);
        assert_eq!(first["runs"][0]["route"], "hard", "{first:#}");
        assert_eq!(
            first["runs"][0]["reason_code"], "agent.stream_incomplete",
            "{first:#}"
        );
        if relabelled {
            let file = sb.board_path().join(&id).join("ticket.md");
            let text = std::fs::read_to_string(&file).unwrap();
            std::fs::write(&file, text.replacen("labels: [hard]", "labels: []", 1)).unwrap();
        }
        let retry = tick_later(&sb, 60);
        let argv = read(&sb, "default-argv");
        if relabelled {
            assert!(retry["runs"][0]["route"].is_null(), "{retry:#}");
            assert_eq!(retry["runs"][0]["outcome"], "success", "{retry:#}");
            assert!(argv.contains("\nsonnet\n"), "the stage's model now: {argv}");
            assert!(
                !argv.contains("--resume"),
                "the hard route's session is not resumed by the defaults: {argv}"
            );
        } else {
            assert_eq!(retry["runs"][0]["route"], "hard", "{retry:#}");
            assert!(argv.contains("\nopus\n"), "{argv}");
            assert!(
                argv.contains("--resume"),
                "the same route resumes its session: {argv}"
            );
        }
    }
}

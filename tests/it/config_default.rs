//! Issue #14: `--config` may be omitted. `sortie.yaml` in the current directory is
//! used, then `$SORTIE_CONFIG`; without either the error names both.

use std::path::Path;
use std::process::Output;

use crate::common;

fn config_text() -> String {
    format!(
        "tracker: {{kind: local, path: board}}\nstate_root: state\nroles_dir: {}\n\
         agent: {{command: [\"true\"]}}\n\
         pipeline_stages:\n  - {{role: architect, claim_status: ready-for-design, success_status: done}}\n",
        common::repo().join("roles").display()
    )
}

fn sortie(cwd: &Path, env: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
    cmd.args(args).current_dir(cwd).env_remove("SORTIE_CONFIG");
    if let Some(env) = env {
        cmd.env("SORTIE_CONFIG", env);
    }
    cmd.output().expect("run sortie")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const COMMANDS: &[&[&str]] = &[
    &["pipeline", "validate"],
    &["pipeline", "tick", "--dry-run"],
    &["pipeline", "status"],
    &["tracker", "check"],
    &["workspaces", "prune", "--dry-run"],
];

#[test]
fn sortie_yaml_in_the_current_directory_is_used() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sortie.yaml"), config_text()).unwrap();
    assert!(sortie(dir.path(), None, &["board", "init", "board"])
        .status
        .success());
    for args in COMMANDS {
        let out = sortie(dir.path(), None, args);
        assert!(out.status.success(), "{args:?}:\n{}", text(&out));
    }
    let out = sortie(dir.path(), None, &["pipeline", "validate"]);
    assert!(text(&out).contains("architect"), "{}", text(&out));
}

#[test]
fn sortie_config_is_used_when_the_directory_has_no_sortie_yaml() {
    let project = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let file = project.path().join("pipeline.yaml");
    std::fs::write(&file, config_text()).unwrap();
    assert!(sortie(project.path(), None, &["board", "init", "board"])
        .status
        .success());
    for args in COMMANDS {
        let out = sortie(elsewhere.path(), Some(&file), args);
        assert!(out.status.success(), "{args:?}:\n{}", text(&out));
    }
    // A sortie.yaml in the current directory comes first: a broken one is reported.
    std::fs::write(elsewhere.path().join("sortie.yaml"), "tracker: [nope]\n").unwrap();
    let out = sortie(elsewhere.path(), Some(&file), &["pipeline", "validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("sortie.yaml"), "{}", text(&out));
}

#[test]
fn without_either_every_command_names_both_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut commands = COMMANDS.to_vec();
    commands.push(&["pipeline", "run", "--listen", "127.0.0.1:0"]);
    for args in commands {
        for env in [None, Some(dir.path().join("missing.yaml"))] {
            let out = sortie(dir.path(), env.as_deref(), args);
            let said = text(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
            assert!(
                said.contains("sortie.yaml") && said.contains("$SORTIE_CONFIG"),
                "{args:?} {env:?}: {said}"
            );
        }
    }
}

//! Issue #14: a leading `~` or `~/` in path values (`state_root`, `roles_dir`, the
//! local board's `path`) and in the program of every command (agent, workspace hooks,
//! event hooks) expands to `$HOME`.

use std::path::{Path, PathBuf};

use sortie::config::{Config, HookTarget, TrackerConfig};

const CONFIG: &str = r#"
tracker: {kind: local, path: ~/board}
state_root: ~/sortie/state
roles_dir: "~"
agent: {command: ["~/bin/agent", "~/not-the-program"]}
workspace:
  hooks:
    before_run: ["~/bin/prepare"]
hooks:
  - event: tracker_pipeline.handoff
    command: ["~/bin/notify"]
pipeline_stages:
  - {role: architect, claim_status: ready-for-design, success_status: done}
"#;

fn home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("these tests need $HOME set"))
}

#[test]
fn tilde_paths_and_programs_expand_to_home() {
    let config = Config::parse_str(CONFIG, Some(Path::new("/etc/sortie/pipeline.yaml"))).unwrap();
    let home = home();
    assert_eq!(config.state_root, home.join("sortie/state"));
    assert_eq!(config.roles_dir, home);
    assert_eq!(
        config.tracker,
        TrackerConfig::Local {
            path: home.join("board")
        }
    );
    let s = |p: PathBuf| p.display().to_string();
    assert_eq!(
        config.agent.command,
        vec![s(home.join("bin/agent")), "~/not-the-program".to_string()],
        "only the program expands, like a path; arguments are passed as written"
    );
    assert_eq!(
        config.workspace.hooks.before_run,
        Some(vec![s(home.join("bin/prepare"))])
    );
    assert_eq!(
        config.hooks[0].target,
        HookTarget::Command {
            argv: vec![s(home.join("bin/notify"))]
        }
    );
}

#[test]
fn other_tildes_stay_relative_to_the_config_file() {
    let text = CONFIG
        .replace("~/board", "~board")
        .replace("~/sortie/state", "state~");
    let config = Config::parse_str(&text, Some(Path::new("/etc/sortie/pipeline.yaml"))).unwrap();
    assert_eq!(config.state_root, PathBuf::from("/etc/sortie/state~"));
    assert_eq!(
        config.tracker,
        TrackerConfig::Local {
            path: PathBuf::from("/etc/sortie/~board")
        }
    );
}

#[test]
fn validate_shows_the_expanded_paths_and_an_unset_home_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        "tracker: {kind: local, path: ~/board}\nstate_root: ~/state\nagent: {command: [\"true\"]}\n\
         roles_dir: ROLES\npipeline_stages:\n  - {role: architect, claim_status: todo, success_status: done}\n"
            .replace("ROLES", &crate::common::repo().join("roles").display().to_string()),
    )
    .unwrap();
    let fake_home = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake_home.path().join("board")).unwrap();
    let run = |home: Option<&Path>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "validate", "--config", "pipeline.yaml"])
            .current_dir(dir.path())
            .env_remove("HOME");
        if let Some(home) = home {
            cmd.env("HOME", home);
        }
        cmd.output().unwrap()
    };
    let out = run(Some(fake_home.path()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let home = fake_home.path().display();
    assert!(
        stdout.contains(&format!("tracker: local board at {home}/board")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("state root: {home}/state")),
        "{stdout}"
    );

    let out = run(None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("pipeline.yaml:1:") && stderr.contains("$HOME is not set"),
        "{stderr}"
    );
}

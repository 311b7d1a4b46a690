//! Issue #13, points 3 and 4, through the real binary: a dry run needs no agent
//! installed and writes nothing; typos in statuses are caught; a missing role file is
//! reported like any other config error.

use std::process::Command;

fn sortie(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run sortie");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn setup(role_2: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sortie.yaml"),
        format!(
            "tracker: {{kind: local, path: board}}\nagent: {{preset: claude-code}}\nroles_dir: {}\n\
             pipeline_stages:\n  - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}\n  \
             - {{role: {role_2}, claim_status: design-approved, success_status: done}}\n",
            crate::common::repo().join("roles").display()
        ),
    )
    .unwrap();
    dir
}

/// Regression (#13, 3): `--dry-run` with the agent CLI missing runs, warns naming the
/// role and the key to change, and creates no ledger file.
#[test]
fn a_dry_run_needs_no_agent_installed_and_writes_nothing() {
    let dir = setup("backend");
    sortie(dir.path(), &["board", "init", "board"]);
    sortie(
        dir.path(),
        &[
            "board",
            "add",
            "--title",
            "t",
            "--status",
            "ready-for-design",
        ],
    );
    let (code, stdout, stderr) = sortie(dir.path(), &["pipeline", "tick", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("would run ticket 1 role architect"),
        "{stdout}"
    );
    for role in ["architect", "backend"] {
        assert!(
            stderr.contains(&format!("role {role}: agent program `claude` not found; `agent.preset: claude-code` needs `claude`")),
            "{stderr}"
        );
    }
    assert!(
        !dir.path().join("state").exists(),
        "a dry run writes no ledger"
    );
    // A real tick still refuses, before touching any ticket.
    let (code, _, stderr) = sortie(dir.path(), &["pipeline", "tick"]);
    assert_eq!(code, 2, "{stderr}");
}

/// Regression (#13, 4): a status no stage names is refused by `board add`/`move` with a
/// config, warned about without one, and counted by a tick.
#[test]
fn typos_in_statuses_are_caught() {
    let dir = setup("backend");
    sortie(dir.path(), &["board", "init", "board"]);
    let (code, _, stderr) = sortie(
        dir.path(),
        &[
            "board",
            "add",
            "--title",
            "t",
            "--status",
            "ready-for-desing",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("did you mean `ready-for-design`?"),
        "{stderr}"
    );
    sortie(
        dir.path(),
        &[
            "board",
            "add",
            "--title",
            "ok",
            "--status",
            "ready-for-design",
        ],
    );
    let (code, _, stderr) = sortie(dir.path(), &["board", "move", "1", "desgin-approved"]);
    assert_eq!(code, 2, "{stderr}");
    // Without a config (an explicit --board): a warning, and the ticket is added.
    let (code, stdout, stderr) = sortie(
        dir.path(),
        &[
            "board",
            "add",
            "--board",
            "board",
            "--title",
            "typo",
            "--status",
            "ready-for-desing",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(stdout.trim(), "2");
    assert!(
        stderr.contains("no ticket on this board has status `ready-for-desing`"),
        "{stderr}"
    );
    let (_, stdout, _) = sortie(dir.path(), &["pipeline", "tick", "--dry-run"]);
    assert!(
        stdout.contains("1 ticket(s) on statuses no stage claims: ready-for-desing (1)"),
        "{stdout}"
    );
}

/// Regression (#13, 4): a missing role file is a positioned config error, and validate
/// says how to create a missing board (#29, 6: as an error, exit 2).
#[test]
fn a_missing_role_file_points_at_the_stage_and_a_missing_board_says_how_to_create_it() {
    let dir = setup("nosuchrole");
    let (code, _, stderr) = sortie(dir.path(), &["pipeline", "validate"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("sortie: sortie.yaml:6:12: pipeline_stages[1].role: cannot read the role file of role `nosuchrole`"),
        "{stderr}"
    );
    sortie(dir.path(), &["board", "init", "board"]);
    let (code, _, stderr) = sortie(dir.path(), &["pipeline", "tick"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("sortie.yaml:6:12: pipeline_stages[1].role"),
        "{stderr}"
    );
    let dir = setup("backend");
    let (code, _, stderr) = sortie(dir.path(), &["pipeline", "validate"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("create it with `sortie board init"),
        "{stderr}"
    );
}

/// Regression (#13, 4): `tracker check` counts the tickets a tick counts (the statuses
/// stages claim or run in, narrowed by `tracker.filter`), and says what its own board
/// line counts.
#[test]
fn tracker_check_counts_tickets_as_the_tick_does() {
    let dir = setup("backend");
    sortie(dir.path(), &["board", "init", "board"]);
    sortie(
        dir.path(),
        &[
            "board",
            "add",
            "--title",
            "waits",
            "--status",
            "ready-for-design",
        ],
    );
    sortie(
        dir.path(),
        &["board", "add", "--title", "finished", "--status", "done"],
    );
    let (code, stdout, stderr) = sortie(dir.path(), &["tracker", "check"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("pipeline: 1 ticket(s) on the statuses its stages claim or run in"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 ticket(s) on the statuses checked"),
        "{stdout}"
    );
    let (_, json, _) = sortie(dir.path(), &["pipeline", "tick", "--dry-run", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["tickets_listed"], 1);
}

/// Issue #52, 15: a new user reads the README first, and from it reaches every page
/// of the docs, wave 3's (evidence, review, questions, sandbox, reactions, stats) too:
/// each `docs/*.md` and `docs/trackers/*.md` is a Markdown link there, and every link
/// into `docs/` names a file that exists.
#[test]
fn the_readme_links_every_docs_page() {
    let repo = crate::common::repo();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let mut pages = Vec::new();
    for dir in ["docs", "docs/trackers"] {
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                pages.push(format!("{dir}/{name}"));
            }
        }
    }
    pages.sort();
    let unlinked: Vec<&String> = pages
        .iter()
        .filter(|p| !readme.contains(&format!("]({p})")) && !readme.contains(&format!("]({p}#")))
        .collect();
    assert!(unlinked.is_empty(), "README.md links none of: {unlinked:?}");
    let links = regex::Regex::new(r"\]\((docs/[^)#\s]+)").unwrap();
    for link in links.captures_iter(&readme) {
        assert!(
            repo.join(&link[1]).exists(),
            "README.md links {}, which does not exist",
            &link[1]
        );
    }
}

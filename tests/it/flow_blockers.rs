//! Issue #18, blockers on the local board: a ticket whose `blocked_by` tickets are not
//! all terminal waits, with the reason, and runs the tick after its last blocker
//! closes; a blocker that cannot be read holds it. Through the real binary.

use crate::common;

use common::Sandbox;

fn config() -> String {
    format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
agent: {{command: ["sh", "-c", "echo done"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: agent, claim_status: todo, success_status: review}}
"#,
        roles = common::repo().join("roles").display(),
    )
}

fn block(sb: &Sandbox, id: &str, by: &[&str]) {
    let path = sb.board_path().join(id).join("ticket.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "status: todo\n",
        &format!("status: todo\nblocked_by: [{}]\n", by.join(", ")),
        1,
    );
    std::fs::write(&path, text).unwrap();
}

fn skip_reason(report: &serde_json::Value, id: &str) -> serde_json::Value {
    report["skips"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["ticket"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("no skip for {id}: {report:#}"))
}

#[test]
fn a_blocked_ticket_waits_then_runs_the_tick_after_its_blocker_closes() {
    let sb = Sandbox::with_config(&config());
    let blocker = sb.add("the blocker", "backlog", &[]);
    let blocked = sb.add("waits", "todo", &[]);
    let out = sb.ok(&[
        "board", "block", "--board", "board", &blocked, "--by", &blocker,
    ]);
    assert_eq!(out.trim(), format!("{blocked}: blocked by {blocker}"));
    let refused = sb.sortie(&[
        "board", "block", "--board", "board", &blocked, "--by", "404",
    ]);
    assert!(!refused.status.success(), "an unknown blocker is refused");

    let report = sb.tick_json(&[]);
    let skip = skip_reason(&report, &blocked);
    assert_eq!(skip["reason"], "blocked", "{report:#}");
    assert_eq!(skip["by"][0], format!("#{blocker} (backlog)"));
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains(&format!("blocked by #{blocker} (backlog)")),
        "{text}"
    );
    assert_eq!(sb.ticket(&blocked).status, "todo");

    sb.ok(&["board", "move", "--board", "board", &blocker, "done"]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], blocked.as_str(), "{report:#}");
    assert_eq!(sb.ticket(&blocked).status, "review");
}

#[test]
fn a_blocker_that_cannot_be_read_holds_the_ticket() {
    let sb = Sandbox::with_config(&config());
    let broken = sb.add("broken blocker", "backlog", &[]);
    let blocked = sb.add("waits on a missing and a broken ticket", "todo", &[]);
    block(&sb, &blocked, &["99", &broken]);
    std::fs::write(
        sb.board_path().join(&broken).join("ticket.md"),
        "---\nno front matter end",
    )
    .unwrap();
    for _ in 0..2 {
        let report = sb.tick_json(&[]);
        assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
        let skip = skip_reason(&report, &blocked);
        assert_eq!(skip["reason"], "blocked", "{report:#}");
        assert_eq!(
            skip["by"],
            serde_json::json!([
                "#99 (status unknown: missing or unreadable)",
                format!("#{broken} (status unknown: missing or unreadable)")
            ])
        );
    }
    assert!(sb.comments(&blocked).is_empty());
}

#[test]
fn blockers_enabled_false_ignores_them() {
    let sb = Sandbox::with_config(&config().replace(
        "tracker: {kind: local, path: board}",
        "tracker: {kind: local, path: board, blockers: {enabled: false}}",
    ));
    let blocker = sb.add("the blocker", "backlog", &[]);
    let blocked = sb.add("runs anyway", "todo", &[]);
    block(&sb, &blocked, &[&blocker]);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], blocked.as_str(), "{report:#}");
}

/// The tracker section of a config of each kind, with the blockers default it should get.
const KINDS: &[(&str, &str, bool)] = &[
    ("local", "{kind: local, path: board}", true),
    (
        "github",
        "{kind: github, repo: acme/app, token_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        true,
    ),
    (
        "redmine",
        "{kind: redmine, url: 'http://127.0.0.1:9', project: app, api_key_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        true,
    ),
    (
        "linear",
        "{kind: linear, team: ENG, token_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        true,
    ),
    (
        "gitlab",
        "{kind: gitlab, project: acme/app, token_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        false,
    ),
    (
        "gitea",
        "{kind: gitea, url: 'http://127.0.0.1:9', repo: acme/app, token_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        false,
    ),
    (
        "jira",
        "{kind: jira, url: 'http://127.0.0.1:9', project: APP, email_env: SORTIE_TEST_BLOCKER_DEFAULTS, token_env: SORTIE_TEST_BLOCKER_DEFAULTS}",
        true,
    ),
];

fn kind_config(tracker: &str) -> String {
    format!(
        "tracker: {tracker}\nroles_dir: {}\nagent: {{command: [sh]}}\npipeline_stages:\n  - {{role: agent, claim_status: todo, success_status: review}}\n",
        common::repo().join("roles").display()
    )
}

#[test]
fn blockers_are_read_by_default_where_the_tracker_has_them_and_the_adapter_agrees() {
    // A variable no other test reads: the adapters want a token to open.
    std::env::set_var("SORTIE_TEST_BLOCKER_DEFAULTS", "token");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("board")).unwrap();
    let file = dir.path().join("pipeline.yaml");
    for (kind, tracker, expected) in KINDS {
        std::fs::write(&file, kind_config(tracker)).unwrap();
        let cfg = sortie::config::Config::load(&file).expect("valid config");
        assert_eq!(
            cfg.tracker.blockers_by_default(),
            *expected,
            "{kind}: the documented default"
        );
        let t = sortie::tracker::open(&cfg).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            t.capabilities().blockers,
            *expected,
            "{kind}: the adapter's default agrees with the config's"
        );
    }
}

#[test]
fn enabling_blockers_where_the_adapter_cannot_read_them_is_a_config_error() {
    for (kind, tracker, _) in KINDS.iter().filter(|(k, _, _)| *k == "gitea") {
        let with = tracker.replacen('{', "{blockers: {enabled: true}, ", 1);
        let sb = Sandbox::with_config(&kind_config(&with));
        let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
        assert_eq!(out.status.code(), Some(2), "{kind}: refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("pipeline.yaml:1:") && err.contains("tracker.blockers.enabled"),
            "{kind}: file, line and field:\n{err}"
        );
        assert!(err.contains("cannot read blockers"), "{kind}: {err}");
        // Off is fine, and so is the default.
        let off = tracker.replacen('{', "{blockers: {enabled: false}, ", 1);
        let sb = Sandbox::with_config(&kind_config(&off));
        let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_jira_link_type_is_refused_on_other_trackers_and_an_empty_one_on_jira() {
    // Issue #18: `tracker.blockers.link_type` names a Jira issue link type.
    let (_, github, _) = KINDS[1];
    let with = github.replacen('{', "{blockers: {link_type: Depends}, ", 1);
    let sb = Sandbox::with_config(&kind_config(&with));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2), "refused on GitHub");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pipeline.yaml:1:") && err.contains("tracker.blockers.link_type"),
        "file, line and field:\n{err}"
    );
    assert!(err.contains("Jira issue link type"), "{err}");

    let (_, jira, _) = KINDS.iter().find(|(k, _, _)| *k == "jira").unwrap();
    let empty = jira.replacen('{', "{blockers: {link_type: ' '}, ", 1);
    let sb = Sandbox::with_config(&kind_config(&empty));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert_eq!(out.status.code(), Some(2), "an empty link type");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tracker.blockers.link_type"), "{err}");

    let named = jira.replacen('{', "{blockers: {link_type: Depends}, ", 1);
    std::fs::write(sb.path().join("pipeline.yaml"), kind_config(&named)).unwrap();
    let cfg = sortie::config::Config::load(&sb.path().join("pipeline.yaml")).expect("valid");
    let settings = sortie::tracker::jira::JiraSettings::from_config(&cfg).unwrap();
    assert_eq!(settings.link_type, "Depends");
}

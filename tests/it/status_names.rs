//! Issue #14: status names compare ignoring case and surrounding whitespace wherever
//! the config meets a tracker: the local board (listing, transitions, `board list
//! --status`) and the GitHub adapter (`status:In Review` is `in review`).

use crate::common;
use crate::github_model;

use std::time::Duration;

use common::Sandbox;
use github_model::{GithubModel, REPO, TOKEN};
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::local::LocalBoard;
use sortie::tracker::{Tracker, TrackerError};

fn github(model: &GithubModel) -> GithubTracker {
    let settings = GithubSettings {
        repo: REPO.to_string(),
        api_url: model.api_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    };
    GithubTracker::new(settings, TOKEN.into(), options).unwrap()
}

#[tokio::test]
async fn github_lists_status_in_review_for_a_configured_in_review() {
    let model = GithubModel::start().await;
    let n = model.add_issue("review me", &["status:In Review"]);
    model.add_issue("elsewhere", &["status:todo"]);
    let t = github(&model);
    let listing = t.list(&[" in review ".to_string()]).await.unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [n.to_string()], "{:?}", listing.warnings);
    assert_eq!(
        listing.tickets[0].status, "In Review",
        "the tracker's spelling"
    );
}

#[tokio::test]
async fn github_transitions_reuse_the_existing_label_spelling() {
    let model = GithubModel::start().await;
    model.add_issue("already in review", &["status:In Review"]);
    let n = model.add_issue("to review", &["status:Todo"]);
    let t = github(&model);
    // sortie reads the board before it moves a ticket: that is where it learns spellings.
    t.list(&["todo".to_string(), "in review".to_string()])
        .await
        .unwrap();

    // From `todo` (configured) while the issue says `Todo`: not a conflict.
    t.transition(&n.to_string(), "todo", "in review")
        .await
        .unwrap();
    assert_eq!(model.issue(n).labels, ["status:In Review"]);
    let variants: Vec<String> = model
        .repo_labels()
        .into_iter()
        .filter(|l| l.eq_ignore_ascii_case("status:in review"))
        .collect();
    assert_eq!(variants, ["status:In Review"], "no second label");

    // Already there, whatever the case: a no-op, not a conflict.
    model.clear_log();
    t.transition(&n.to_string(), "todo", "IN REVIEW")
        .await
        .unwrap();
    assert_eq!(model.log().len(), 1, "only the re-read: {:#?}", model.log());

    // A status that really differs is still a conflict.
    let err = t
        .transition(&n.to_string(), "todo", "done")
        .await
        .unwrap_err();
    assert!(matches!(err, TrackerError::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn github_check_accepts_a_label_spelled_differently_and_creates_no_second() {
    let model = GithubModel::start().await;
    model.add_repo_label("status:In Review");
    let t = github(&model);
    let report = t.check(&["in review".to_string()], true).await.unwrap();
    let text = format!("{report:?}");
    assert!(text.contains("status:In Review exists"), "{text}");
    assert_eq!(
        model.repo_labels().into_iter().collect::<Vec<_>>(),
        ["status:In Review"]
    );
}

#[test]
fn the_local_board_lists_and_moves_statuses_ignoring_case() {
    let sb = Sandbox::three_stages(1);
    let id = sb.add("t", "In Review", &[]);
    sb.add("other", "todo", &[]);
    let board = LocalBoard::open(&sb.board_path()).unwrap();
    let listing = common::block_on(board.list(&["in review ".to_string()])).unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [id.as_str()]);

    // `board list --status` finds it whatever the case.
    let out = sb.ok(&["board", "list", "--board", "board", "--status", "in review"]);
    assert!(out.contains(&id) && !out.contains("other"), "{out}");

    // A transition from the configured spelling is not a conflict, and one to the
    // status the ticket has already is a no-op that keeps the board's spelling.
    common::block_on(board.transition(&id, "in review", "IN REVIEW")).unwrap();
    assert_eq!(sb.ticket(&id).status, "In Review");
    common::block_on(board.transition(&id, "in review", "done")).unwrap();
    assert_eq!(sb.ticket(&id).status, "done");
    let err = common::block_on(board.transition(&id, "in review", "todo")).unwrap_err();
    assert!(matches!(err, TrackerError::Conflict { .. }), "{err}");
}

const STAGES: &str = r#"
tracker: {kind: local, path: board}
agent: {command: ["true"]}
terminal_states: [done, cancelled]
pipeline_stages:
  - {role: architect, claim_status: todo, success_status: In Review}
  - {role: backend, claim_status: in review, success_status: Done}
"#;

fn load(text: &str) -> Result<sortie::config::Config, String> {
    sortie::config::Config::parse_str(text, None).map_err(|e| e.to_string())
}

#[test]
fn config_rules_treat_statuses_that_differ_by_case_as_one() {
    let two_owners = STAGES
        .replace("claim_status: todo", "claim_status: Review")
        .replace("claim_status: in review", "claim_status: review");
    let err = load(&two_owners).unwrap_err();
    assert!(
        err.contains("two stages cannot own the same status"),
        "{err}"
    );

    let self_loop = STAGES.replace("success_status: In Review", "success_status: TODO");
    let err = load(&self_loop).unwrap_err();
    assert!(err.contains("re-dispatch"), "{err}");

    let terminal = STAGES.replace("claim_status: todo", "claim_status: Cancelled");
    let err = load(&terminal).unwrap_err();
    assert!(err.contains("is a terminal state"), "{err}");

    let caps = STAGES.replace(
        "terminal_states:",
        "concurrency: {per_status_max_in_flight: {IN REVIEW: 2}}\nterminal_states:",
    );
    let config = load(&caps).unwrap();
    assert_eq!(
        config.concurrency.per_status_max_in_flight.get("in review"),
        Some(&2),
        "keyed by the stage's own spelling"
    );
    let twice = STAGES.replace(
        "terminal_states:",
        "concurrency: {per_status_max_in_flight: {In review: 2, in review: 3}}\nterminal_states:",
    );
    let err = load(&twice).unwrap_err();
    assert!(err.contains("written again"), "{err}");
}

#[test]
fn canonical_status_maps_a_tracker_spelling_onto_the_configured_one() {
    let config = load(STAGES).unwrap();
    assert_eq!(config.canonical_status("in review"), Some("In Review"));
    assert_eq!(config.canonical_status(" IN REVIEW "), Some("In Review"));
    assert_eq!(config.canonical_status("done"), Some("Done"));
    assert_eq!(config.canonical_status("TODO"), Some("todo"));
    assert_eq!(config.canonical_status("triage"), None);
    assert!(config.is_terminal("DONE"));
    assert_eq!(config.pipeline_statuses(), ["todo", "in review"]);
}

#[test]
fn validate_warns_when_two_configured_statuses_differ_only_by_case() {
    let sb = Sandbox::with_config(&STAGES.replace(
        "agent:",
        &format!(
            "roles_dir: {}\nagent:",
            common::repo().join("roles").display()
        ),
    ));
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("statuses `In Review` and `in review` differ only by case")
            && stderr.contains("`Done` and `done`"),
        "{stderr}"
    );
    let clean = Sandbox::three_stages(1);
    let out = clean.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("differ only by case"));
}

#[tokio::test]
async fn the_memory_tracker_compares_statuses_the_same_way() {
    use sortie::tracker::memory::MemoryTracker;
    let t = MemoryTracker::new();
    t.insert(MemoryTracker::ticket("1", "t", "In Review"));
    let listing = t.list(&["in review".to_string()]).await.unwrap();
    assert_eq!(listing.tickets.len(), 1);
    t.transition("1", "in review", "IN REVIEW").await.unwrap();
    assert_eq!(t.snapshot("1").unwrap().status, "In Review");
    t.transition("1", " in review", "done").await.unwrap();
    assert_eq!(t.snapshot("1").unwrap().status, "done");
}

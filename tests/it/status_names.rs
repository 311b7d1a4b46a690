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

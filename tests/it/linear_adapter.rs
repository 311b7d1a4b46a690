//! The Linear adapter against the Linear model: listings filtered server-side,
//! statuses in the config's spelling, priorities, blockers, trusted authors, the
//! missing-state error, authentication, `check`, and what a tick costs.

use crate::linear_model;
use crate::model_plumbing::NextCursor;

use std::sync::Arc;
use std::time::Duration;

use linear_model::{LinearModel, ALICE_ID, TOKEN, VIEWER_ID};
use sortie::config::Config;
use sortie::tracker::linear::{LinearOptions, LinearTracker};
use sortie::tracker::{Tracker, TrackerError};

fn config(api_url: &str, extra: &str, stages: &str) -> Config {
    let text = format!(
        r#"
tracker: {{kind: linear, team: ENG, api_url: "{api_url}", token_env: SORTIE_TEST_UNUSED_TOKEN{extra}}}
{stages}
"#
    );
    Config::parse_str(&text, None).expect("valid test config")
}

const STAGES: &str = r#"
agent: {command: ["true"]}
terminal_states: [done, canceled]
trusted_authors: [alice@acme.test]
pipeline_stages:
  - {role: architect, claim_status: ready for design, in_progress_status: designing, success_status: design approved, failure_status: design blocked}
"#;

fn tracker(cfg: &Config, token: &str) -> LinearTracker {
    let options = LinearOptions {
        retry_backoff: Duration::ZERO,
        ..LinearOptions::default()
    };
    LinearTracker::from_config(cfg, token.into(), options).unwrap()
}

fn statuses() -> Vec<String> {
    vec!["ready for design".into(), "designing".into()]
}

#[tokio::test]
async fn a_listing_is_one_issues_query_filtered_by_team_states_labels_and_project() {
    let model = LinearModel::start().await;
    let wanted = model.add_issue("wanted", "Ready for design", &["agent-ok", "backend"]);
    model.edit(wanted, |i| {
        i.project = Some("Checkout revamp".into());
        i.priority = 2;
    });
    let other_project = model.add_issue("other project", "Ready for design", &["agent-ok"]);
    model.edit(other_project, |i| i.project = Some("Growth".into()));
    let unlabelled = model.add_issue("no label", "Designing", &[]);
    model.edit(unlabelled, |i| i.project = Some("Checkout revamp".into()));
    model.add_issue("parked", "Backlog", &["agent-ok"]);

    let text = format!(
        r#"
tracker:
  kind: linear
  team: ENG
  api_url: "{}"
  token_env: SORTIE_TEST_UNUSED_TOKEN
  filter: {{labels: [Agent-OK], project: "checkout revamp"}}
{STAGES}"#,
        model.api_url()
    );
    let cfg = Config::parse_str(&text, None).expect("config");
    let t = tracker(&cfg, TOKEN);
    let listing = t.list(&statuses()).await.unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [format!("ENG-{wanted}")], "{listing:?}");
    let ticket = &listing.tickets[0];
    assert_eq!(ticket.status, "ready for design", "the config's spelling");
    assert_eq!(ticket.priority, Some(2));
    assert_eq!(ticket.labels, ["agent-ok", "backend"]);
    assert!(!ticket.closed);
    assert_eq!(ticket.blocked_by, Some(vec![]));
    assert_eq!(
        model.log(),
        ["SortieTeamStates -> 200", "SortieIssues -> 200"],
        "states once, then one issues query"
    );
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn a_listing_pages_through_the_issues_connection() {
    let model = LinearModel::start().await;
    for i in 0..120 {
        model.add_issue(&format!("i{i}"), "Ready for design", &[]);
    }
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    let listing = t.list(&statuses()).await.unwrap();
    assert_eq!(listing.tickets.len(), 120);
    assert_eq!(listing.tickets[119].id, "ENG-120");
    let pages = model
        .log()
        .iter()
        .filter(|l| l.starts_with("SortieIssues"))
        .count();
    assert_eq!(pages, 5, "25 per page");
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn a_configured_status_missing_from_the_team_is_an_error_naming_the_states() {
    let model = LinearModel::start().await;
    let stages = STAGES.replace("design blocked", "stuck");
    let t = tracker(&config(&model.api_url(), "", &stages), TOKEN);
    let err = t.list(&statuses()).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TrackerError::Invalid(_)), "{text}");
    assert!(text.contains("no workflow state named \"stuck\""), "{text}");
    assert!(text.contains("Backlog, Todo, Ready for design"), "{text}");

    let report = t
        .check(&["ready for design".into(), "stuck".into()], false)
        .await
        .unwrap();
    let lines: Vec<(String, bool)> = report
        .checks
        .iter()
        .map(|c| (c.what.clone(), c.ok))
        .collect();
    assert_eq!(
        lines,
        [
            ("key".to_string(), true),
            ("team".to_string(), true),
            ("state ready for design".to_string(), true),
            ("state stuck".to_string(), false),
            ("rate limit".to_string(), true),
        ],
        "{report:#?}"
    );
    assert!(report.checks[3].detail.contains("its states are: Backlog"));
    assert!(report
        .rate_limit_remaining
        .is_some_and(|n| n > 0 && n < 5000));
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn a_wrong_key_is_unauthorized_and_oauth_tokens_go_as_bearer() {
    let model = LinearModel::start().await;
    let t = tracker(&config(&model.api_url(), "", STAGES), "lin_api_wrong");
    let err = t.identity().await.unwrap_err();
    assert!(matches!(err, TrackerError::Unauthorized(_)), "{err}");
    let report = t.check(&statuses(), false).await.unwrap();
    assert!(
        !report.checks[0].ok && report.checks.len() == 1,
        "{report:#?}"
    );

    let oauth = LinearModel::start_with_auth("Bearer oauth-token").await;
    let cfg = config(&oauth.api_url(), ", token_type: oauth", STAGES);
    let t = tracker(&cfg, "oauth-token");
    assert_eq!(t.identity().await.unwrap(), VIEWER_ID);
    // The same token as a personal key is refused.
    let t = tracker(&config(&oauth.api_url(), "", STAGES), "oauth-token");
    assert!(matches!(
        t.identity().await,
        Err(TrackerError::Unauthorized(_))
    ));
}

#[tokio::test]
async fn comments_name_the_viewer_by_id_and_trusted_people_by_their_entry() {
    let model = LinearModel::start().await;
    let n = model.add_issue("t", "Ready for design", &[]);
    model.add_comment(n, ALICE_ID, "from alice");
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    t.post_comment(&format!("ENG-{n}"), "from sortie", "key-1")
        .await
        .unwrap();
    let comments = t.comments(&format!("ENG-{n}")).await.unwrap();
    let authors: Vec<(&str, &str)> = comments
        .iter()
        .map(|c| (c.author.as_str(), c.body.as_str()))
        .collect();
    assert_eq!(
        authors,
        [
            ("alice@acme.test", "from alice"),
            (VIEWER_ID, "from sortie")
        ]
    );
    // The same key again: Linear refuses the id, the adapter reports success.
    t.post_comment(&format!("ENG-{n}"), "from sortie", "key-1")
        .await
        .unwrap();
    assert_eq!(model.issue(n).comments.len(), 2);
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn blockers_come_from_blocks_relations_with_their_state() {
    let model = LinearModel::start().await;
    let blocker = model.add_issue("blocker", "Designing", &[]);
    let done = model.add_issue("done blocker", "Done", &[]);
    let n = model.add_issue("blocked", "Ready for design", &[]);
    model.edit(n, |i| {
        i.blocked_by = vec![format!("ENG-{blocker}"), format!("ENG-{done}")]
    });
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    let listing = t.list(&statuses()).await.unwrap();
    let ticket = listing
        .tickets
        .iter()
        .find(|t| t.id == format!("ENG-{n}"))
        .unwrap();
    let blockers = ticket.blocked_by.clone().expect("the listing carries them");
    let seen: Vec<(String, Option<String>, bool)> = blockers
        .into_iter()
        .map(|b| (b.id, b.status, b.closed))
        .collect();
    assert_eq!(
        seen,
        [
            (
                format!("ENG-{blocker}"),
                Some("designing".to_string()),
                false
            ),
            (format!("ENG-{done}"), Some("done".to_string()), true),
        ]
    );
    assert_eq!(t.blockers(&format!("ENG-{n}")).await.unwrap().len(), 2);
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

/// Issue #52, item 10: a ticket's comments and blockers are cursor-paged like the
/// listing (which the contract suite covers): a repeated cursor or a page saying more
/// follow without one fails the read, never answers part of it.
#[tokio::test]
async fn comments_and_blockers_fail_on_a_cursor_loop_or_a_missing_cursor() {
    let model = LinearModel::start().await;
    let blocker = model.add_issue("blocker", "Designing", &[]);
    let n = model.add_issue("blocked", "Ready for design", &[]);
    model.edit(n, |i| i.blocked_by = vec![format!("ENG-{blocker}")]);
    model.add_comment(n, ALICE_ID, "from alice");
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    let id = format!("ENG-{n}");
    for (next, says) in [
        (NextCursor::Repeated, "pagination loop"),
        (NextCursor::Missing, "gives no cursor"),
    ] {
        model.set_next_cursor(next);
        match t.comments(&id).await {
            Err(TrackerError::Invalid(m)) => assert!(m.contains(says), "{next:?}: {m}"),
            other => panic!("comments, {next:?}: expected Invalid naming {says:?}, got {other:?}"),
        }
        match t.blockers(&id).await {
            Err(TrackerError::Invalid(m)) => assert!(m.contains(says), "{next:?}: {m}"),
            other => panic!("blockers, {next:?}: expected Invalid naming {says:?}, got {other:?}"),
        }
    }
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn a_transition_re_reads_and_refuses_to_clobber_a_persons_move() {
    let model = LinearModel::start().await;
    let n = model.add_issue("t", "On hold", &[]);
    let t = Arc::new(tracker(&config(&model.api_url(), "", STAGES), TOKEN));
    let id = format!("ENG-{n}");
    let err = t
        .transition(&id, "ready for design", "designing")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TrackerError::Conflict { current, .. } if current == "On hold"),
        "{err}"
    );
    assert_eq!(model.state_of(n), "On hold");
    model.move_to(n, "Ready for design");
    t.transition(&id, "ready for design", "designing")
        .await
        .unwrap();
    assert_eq!(model.state_of(n), "Designing");
    // Already there: no write.
    model.clear_log();
    t.transition(&id, "ready for design", "designing")
        .await
        .unwrap();
    assert_eq!(model.log(), ["SortieIssue -> 200"]);
    assert!(model.refused().is_empty(), "{:?}", model.refused());
}

#[tokio::test]
async fn a_graphql_error_with_http_200_is_an_error_not_an_empty_board() {
    let model = LinearModel::start().await;
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    let err = t.get("ENG-999").await.unwrap_err();
    assert!(matches!(err, TrackerError::NotFound(_)), "{err}");
    // The model answers an unknown team with no nodes: a clear error, not nothing.
    let cfg = Config::parse_str(
        &format!(
            "tracker: {{kind: linear, team: OPS, api_url: \"{}\", token_env: X}}\n{STAGES}",
            model.api_url()
        ),
        None,
    )
    .unwrap();
    let err = tracker(&cfg, TOKEN).list(&statuses()).await.unwrap_err();
    assert!(
        err.to_string().contains("no team with the key \"OPS\""),
        "{err}"
    );
}

#[tokio::test]
async fn the_complexity_linear_reports_is_kept_for_each_query() {
    let model = LinearModel::start().await;
    model.add_issue("t", "Ready for design", &[]);
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    assert_eq!(t.last_complexity(), None);
    t.list(&statuses()).await.unwrap();
    let charged = model.requests().last().unwrap().complexity;
    assert!(charged > 100, "a listing page is not free: {charged}");
    assert_eq!(t.last_complexity(), Some(charged), "from x-complexity");
    assert!(t
        .rate_limit_remaining()
        .is_some_and(|n| n == linear_model::REQUEST_LIMIT - 2));
}

/// Symphony conformance (#39, item 12): Linear's priority 0 is "No priority", so it
/// sorts with the tickets that have none, after 1-4, in the pipeline's own order.
#[tokio::test]
async fn sort_order_linear_priority_zero_sorts_with_no_priority_after_one_to_four() {
    let model = LinearModel::start().await;
    for (title, p) in [("none", 0), ("low", 4), ("urgent", 1), ("medium", 3)] {
        let n = model.add_issue(title, "Ready for design", &[]);
        model.edit(n, |i| i.priority = p);
    }
    let t = tracker(&config(&model.api_url(), "", STAGES), TOKEN);
    let mut tickets = t.list(&statuses()).await.unwrap().tickets;
    tickets.sort_by(sortie::pipeline::eligibility::dispatch_order);
    let order: Vec<(&str, Option<i64>)> = tickets
        .iter()
        .map(|t| (t.title.as_str(), t.priority))
        .collect();
    assert_eq!(
        order,
        [
            ("urgent", Some(1)),
            ("medium", Some(3)),
            ("low", Some(4)),
            ("none", None)
        ]
    );
}

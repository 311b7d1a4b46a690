//! The GitHub adapter against the in-memory GitHub model: what it reads, what it
//! writes, how many requests it makes, and how it behaves when GitHub says no.

use crate::github_model;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use github_model::{GithubModel, LOGIN, REPO, TOKEN};
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::{Tracker, TrackerError};

fn settings(model: &GithubModel) -> GithubSettings {
    GithubSettings {
        repo: REPO.to_string(),
        api_url: model.api_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    }
}

fn options() -> GithubOptions {
    GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    }
}

fn tracker(model: &GithubModel) -> GithubTracker {
    GithubTracker::new(settings(model), TOKEN.into(), options()).unwrap()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn listing_reads_status_priority_and_labels_and_skips_pull_requests_and_ambiguous_issues() {
    let model = GithubModel::start().await;
    let a = model.add_issue(
        "login page",
        &["status:ready-for-design", "priority:2", "ui"],
    );
    model.add_pull_request("a PR", &["status:ready-for-design"]);
    let both = model.add_issue(
        "confused",
        &["status:ready-for-design", "status:design-approved"],
    );
    let c = model.add_issue("api", &["status:design-approved"]);
    model.add_issue("elsewhere", &["status:triage"]);
    let closed = model.add_issue("gone", &["status:ready-for-design"]);
    model.edit(closed, |i| i.open = false);

    let t = tracker(&model);
    let listing = t
        .list(&strings(&["ready-for-design", "design-approved"]))
        .await
        .unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [a.to_string(), c.to_string()]);
    let first = &listing.tickets[0];
    assert_eq!(first.status, "ready-for-design");
    assert_eq!(first.priority, Some(2));
    assert_eq!(first.labels, ["ui"]);
    assert_eq!(first.title, "login page");
    assert_eq!(
        first.url.as_deref(),
        Some(format!("https://github.com/{REPO}/issues/{a}").as_str())
    );
    assert_eq!(
        listing.warnings,
        [format!(
            "issue #{both} has 2 status labels (status:ready-for-design, status:design-approved); \
             skipped until a person removes all but one"
        )]
    );
    // One request per status, with the label filter, open issues, 100 a page.
    assert_eq!(
        model.log(),
        [
            "GET /repos/acme/widgets/issues?labels=status%3Aready-for-design&state=open&per_page=100 -> 200",
            "GET /repos/acme/widgets/issues?labels=status%3Adesign-approved&state=open&per_page=100 -> 200",
        ]
    );
}

#[tokio::test]
async fn listing_follows_pagination_and_an_unchanged_board_answers_304_for_free() {
    let model = GithubModel::start().await;
    model.set_max_per_page(2);
    for n in 0..5 {
        model.add_issue(&format!("t{n}"), &["status:ready"]);
    }
    let t = tracker(&model);
    let statuses = strings(&["ready"]);
    assert_eq!(t.list(&statuses).await.unwrap().tickets.len(), 5);
    assert_eq!(model.requests().len(), 3, "{:#?}", model.log());
    let used = model.units_used();

    model.clear_log();
    assert_eq!(t.list(&statuses).await.unwrap().tickets.len(), 5);
    let log = model.requests();
    assert_eq!(log.len(), 3);
    assert!(
        log.iter().all(|r| r.status == 304 && r.if_none_match),
        "{:#?}",
        model.log()
    );
    assert_eq!(model.units_used(), used, "304s cost no rate limit");

    // A person comments on one issue: its page's ETag changes, the others still 304.
    model.add_comment(3, "alice", "any news?");
    model.clear_log();
    let listing = t.list(&statuses).await.unwrap();
    assert_eq!(listing.tickets.len(), 5);
    let statuses_seen: Vec<u16> = model.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses_seen, [304, 200, 304]);
}

#[tokio::test]
async fn the_etag_cache_survives_a_restart_through_its_file() {
    let model = GithubModel::start().await;
    model.add_issue("t", &["status:ready"]);
    let dir = tempfile::tempdir().unwrap();
    let opts = || GithubOptions {
        etag_file: Some(dir.path().join("github-etags.json")),
        ..options()
    };
    let first = GithubTracker::new(settings(&model), TOKEN.into(), opts()).unwrap();
    assert_eq!(first.identity().await.unwrap(), LOGIN);
    first.list(&strings(&["ready"])).await.unwrap();
    drop(first);

    model.clear_log();
    let second = GithubTracker::new(settings(&model), TOKEN.into(), opts()).unwrap();
    assert_eq!(second.identity().await.unwrap(), LOGIN);
    assert_eq!(
        second
            .list(&strings(&["ready"]))
            .await
            .unwrap()
            .tickets
            .len(),
        1
    );
    assert_eq!(
        model.log(),
        [
            "GET /user -> 304",
            "GET /repos/acme/widgets/issues?labels=status%3Aready&state=open&per_page=100 -> 304",
        ]
    );
}

#[tokio::test]
async fn transition_adds_the_new_label_then_removes_the_old_and_keeps_the_others() {
    let model = GithubModel::start().await;
    let n = model.add_issue("t", &["bug", "status:ready", "priority:1"]);
    let t = tracker(&model);
    t.transition(&n.to_string(), "ready", "doing")
        .await
        .unwrap();
    assert_eq!(model.issue(n).labels, ["bug", "priority:1", "status:doing"]);
    assert_eq!(
        model.log(),
        [
            format!("GET /repos/acme/widgets/issues/{n} -> 200"),
            format!("POST /repos/acme/widgets/issues/{n}/labels -> 200"),
            format!("DELETE /repos/acme/widgets/issues/{n}/labels/status:ready -> 200"),
        ]
    );

    // Already there: a no-op that writes nothing.
    model.clear_log();
    t.transition(&n.to_string(), "ready", "doing")
        .await
        .unwrap();
    assert_eq!(model.requests().len(), 1);
    assert_eq!(t.get(&n.to_string()).await.unwrap().status, "doing");
}

#[tokio::test]
async fn transition_never_clobbers_a_label_a_person_changed() {
    let model = GithubModel::start().await;
    let n = model.add_issue("t", &["status:ready"]);
    model.on_get(n, 0, |i| i.labels = vec!["status:on-hold".into()]);
    let t = tracker(&model);
    let err = t
        .transition(&n.to_string(), "ready", "doing")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TrackerError::Conflict { current, .. } if current == "on-hold"),
        "{err}"
    );
    assert_eq!(model.issue(n).labels, ["status:on-hold"]);
    assert_eq!(
        model.requests().len(),
        1,
        "nothing written: {:#?}",
        model.log()
    );
}

#[tokio::test]
async fn an_interrupted_transition_is_finished_and_a_gone_old_label_is_fine() {
    let model = GithubModel::start().await;
    // sortie added the new label, then died before removing the old one.
    let n = model.add_issue("t", &["status:ready", "status:doing"]);
    let t = tracker(&model);
    assert!(matches!(
        t.get(&n.to_string()).await,
        Err(TrackerError::Invalid(m)) if m.contains("status:ready, status:doing")
    ));
    t.transition(&n.to_string(), "ready", "doing")
        .await
        .unwrap();
    assert_eq!(model.issue(n).labels, ["status:doing"]);
    // Removing a label that is already gone is not an error.
    assert!(!t.api().remove_label(n, "status:ready").await.unwrap());
}

#[tokio::test]
async fn comments_are_paginated_oldest_first_and_posting_returns_ours() {
    let model = GithubModel::start().await;
    model.set_max_per_page(2);
    let n = model.add_issue("t", &["status:ready"]);
    for i in 0..3 {
        model.add_comment(n, "alice", &format!("c{i}"));
    }
    let t = tracker(&model);
    let posted = t
        .post_comment(&n.to_string(), "hello", "key")
        .await
        .unwrap();
    assert_eq!(posted.author, LOGIN);
    let comments = t.comments(&n.to_string()).await.unwrap();
    let bodies: Vec<&str> = comments.iter().map(|c| c.body.as_str()).collect();
    assert_eq!(bodies, ["c0", "c1", "c2", "hello"]);
    assert_eq!(
        model.requests().len(),
        3,
        "1 post + 2 pages: {:#?}",
        model.log()
    );
}

#[tokio::test]
async fn identity_is_the_tokens_login_read_once() {
    let model = GithubModel::start().await;
    let t = tracker(&model);
    assert_eq!(t.identity().await.unwrap(), LOGIN);
    assert_eq!(t.identity().await.unwrap(), LOGIN);
    assert_eq!(model.log(), ["GET /user -> 200"]);
    assert_eq!(t.name(), format!("github:{REPO}"));
    let caps = t.capabilities();
    assert!(!caps.native_statuses && !caps.idempotency_header);
}

#[tokio::test]
async fn errors_map_onto_tracker_errors_and_only_server_errors_are_retried_once() {
    let model = GithubModel::start().await;
    let n = model.add_issue("t", &["status:ready"]);
    let bad = GithubTracker::new(settings(&model), "wrong".into(), options()).unwrap();
    assert!(matches!(
        bad.identity().await,
        Err(TrackerError::Unauthorized(_))
    ));

    let t = tracker(&model);
    assert!(matches!(t.get("999").await, Err(TrackerError::NotFound(_))));
    assert!(matches!(t.get("abc").await, Err(TrackerError::Invalid(_))));

    model.clear_log();
    model.fail("GET", "/issues/1", 502, None, 1);
    assert_eq!(t.get(&n.to_string()).await.unwrap().status, "ready");
    assert_eq!(model.requests().len(), 2, "one retry");

    model.clear_log();
    model.fail("GET", "/issues/1", 503, None, 5);
    assert!(matches!(
        t.get(&n.to_string()).await,
        Err(TrackerError::Unavailable(_))
    ));
    assert_eq!(model.requests().len(), 2, "at most one retry");
    model.clear_faults();

    // A comment is never re-sent after a server error: it may have been created.
    model.clear_log();
    model.fail("POST", "/comments", 500, None, 1);
    assert!(matches!(
        t.post_comment(&n.to_string(), "x", "k").await,
        Err(TrackerError::Unavailable(_))
    ));
    assert_eq!(model.requests().len(), 1);

    model.fail("POST", "/labels", 422, None, 1);
    assert!(matches!(
        t.api().add_labels(n, &["x".into()]).await,
        Err(TrackerError::Invalid(_))
    ));
}

/// A clock the test moves by hand.
fn step_clock() -> (Arc<Mutex<DateTime<Utc>>>, sortie::tracker::github::Clock) {
    let now = Arc::new(Mutex::new(Utc::now()));
    let read = now.clone();
    (now, Arc::new(move || *read.lock().unwrap()))
}

#[tokio::test]
async fn a_secondary_limit_stops_all_requests_until_retry_after_has_passed() {
    let model = GithubModel::start().await;
    let n = model.add_issue("t", &["status:ready"]);
    let (now, clock) = step_clock();
    let t = GithubTracker::new(
        settings(&model),
        TOKEN.into(),
        GithubOptions { clock, ..options() },
    )
    .unwrap();
    model.fail("GET", "/issues", 429, Some(60), 1);
    let err = t.list(&strings(&["ready"])).await.unwrap_err();
    assert!(
        matches!(err, TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 60),
        "{err}"
    );
    for _ in 0..3 {
        assert!(matches!(
            t.get(&n.to_string()).await,
            Err(TrackerError::RateLimited { .. })
        ));
    }
    assert_eq!(model.requests().len(), 1, "nothing sent while waiting");

    *now.lock().unwrap() += chrono::Duration::seconds(61);
    assert_eq!(t.list(&strings(&["ready"])).await.unwrap().tickets.len(), 1);
}

#[tokio::test]
async fn an_exhausted_window_waits_for_its_reset_without_sending() {
    let model = GithubModel::start().await;
    model.add_issue("t", &["status:ready"]);
    let (now, clock) = step_clock();
    let t = GithubTracker::new(
        settings(&model),
        TOKEN.into(),
        GithubOptions { clock, ..options() },
    )
    .unwrap();
    model.set_remaining(1);
    t.list(&strings(&["ready"])).await.unwrap();
    assert_eq!(t.api().rate_limit_remaining(), Some(0));
    let err = t.list(&strings(&["ready"])).await.unwrap_err();
    let TrackerError::RateLimited {
        retry_after: Some(wait),
    } = err
    else {
        panic!("{err}")
    };
    assert!(
        wait > Duration::from_secs(3000),
        "waits for the reset: {wait:?}"
    );
    assert_eq!(model.requests().len(), 1);
    model.set_remaining(5000);
    *now.lock().unwrap() += chrono::Duration::seconds(3601);
    t.list(&strings(&["ready"])).await.unwrap();
}

#[tokio::test]
async fn check_reports_the_token_the_repository_and_creates_missing_status_labels() {
    let model = GithubModel::start().await;
    model.add_repo_label("status:ready");
    let t = tracker(&model);
    let statuses = strings(&["ready", "done"]);

    let report = t.check(&statuses, false).await.unwrap();
    let lines: Vec<(bool, String)> = report
        .checks
        .iter()
        .map(|c| (c.ok, format!("{}: {}", c.what, c.detail)))
        .collect();
    assert_eq!(
        lines,
        [
            (true, format!("token: authenticated as {LOGIN}")),
            (true, "repository access: 1 label(s) on the repository".into()),
            (true, "status ready: label status:ready exists".into()),
            (
                false,
                "status done: label status:done is missing; create it, or run with --create-missing-labels"
                    .into()
            ),
            (
                true,
                "issue dependencies: no issue yet to ask about issue dependencies".into()
            ),
        ]
    );
    assert_eq!(report.rate_limit_remaining, Some(5000 - model.units_used()));

    let report = t.check(&statuses, true).await.unwrap();
    assert!(report.all_ok(), "{report:?}");
    assert!(model.repo_labels().contains("status:done"));

    let bad = GithubTracker::new(settings(&model), "wrong".into(), options()).unwrap();
    let report = bad.check(&statuses, true).await.unwrap();
    assert_eq!(report.checks.len(), 1);
    assert!(!report.checks[0].ok && report.checks[0].detail.contains("rejected the token"));
}

/// Regression (#29, 2): `tracker check` says how the server tells sortie about
/// blockers: the listing's `issue_dependencies_summary`, or, on a server without issue
/// dependencies (their endpoint answers 404), that none are read.
#[tokio::test]
async fn check_says_whether_the_server_has_issue_dependencies() {
    let line = |report: &sortie::tracker::CheckReport| {
        report
            .checks
            .iter()
            .find(|c| c.what == "issue dependencies")
            .map(|c| (c.ok, c.detail.clone()))
    };
    let statuses = strings(&["ready"]);

    let model = GithubModel::start().await;
    model.add_issue("a", &["status:ready"]);
    let report = tracker(&model).check(&statuses, false).await.unwrap();
    assert_eq!(
        line(&report),
        Some((
            true,
            "issues carry issue_dependencies_summary: blockers are read only for issues with open ones"
                .to_string()
        ))
    );

    let model = GithubModel::start().await;
    model.without_dependencies();
    model.add_issue("a", &["status:ready"]);
    let t = tracker(&model);
    let report = t.check(&statuses, false).await.unwrap();
    assert_eq!(
        line(&report),
        Some((
            true,
            "this server has no issue dependencies (GET .../dependencies/blocked_by answers 404): \
             no blockers are read, tickets are dispatched as if tracker.blockers were off"
                .to_string()
        ))
    );
    model.clear_log();
    assert_eq!(t.blockers("1").await.unwrap(), vec![]);
    assert!(
        model.requests().is_empty(),
        "asked once: {:#?}",
        model.log()
    );
}

#[tokio::test]
async fn github_enterprise_server_works_under_its_api_prefix() {
    let model = GithubModel::start_with_prefix("/api/v3").await;
    model.set_max_per_page(1);
    model.add_issue("a", &["status:ready"]);
    model.add_issue("b", &["status:ready"]);
    let t = tracker(&model);
    assert_eq!(t.identity().await.unwrap(), LOGIN);
    assert_eq!(t.list(&strings(&["ready"])).await.unwrap().tickets.len(), 2);
}

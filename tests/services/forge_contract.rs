//! Contract tests against the published descriptions (issue #17): every kind of request
//! the GitLab and Gitea adapters make, sent to Stoplight Prism serving GitLab's OpenAPI
//! 3.0 description (`tests/fixtures/gitlab/`) and Gitea's Swagger 2.0 description
//! (`tests/fixtures/gitea/`). Prism answers a request that fits with 2xx and flags one
//! that does not in `sl-violations` (and a 4xx). Prism keeps no state, so this checks
//! the shape of requests; `tests/it/forge_pipeline.rs` and the contract suite check
//! behaviour against the stateful models.
//!
//! Needs `SORTIE_TEST_PRISM_GITLAB` and `SORTIE_TEST_PRISM_GITEA` (set by
//! `./scripts/test` through `scripts/services/prism.sh`).

use std::sync::{Arc, Mutex};

use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
use sortie::tracker::github::{Exchange, ExchangeObserver};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::labels::LabelScheme;
use sortie::tracker::{Tracker, TrackerError};

fn prism_url(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run ./scripts/test, or start Prism with \
             scripts/services/prism.sh (see scripts/services/README.md)"
        )
    })
}

fn observer() -> (ExchangeObserver, Arc<Mutex<Vec<Exchange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer: ExchangeObserver =
        Arc::new(move |e: &Exchange| sink.lock().unwrap().push(e.clone()));
    (observer, seen)
}

/// Every exchange answered 2xx without `sl-violations`, except those `allowed` names
/// (requests to endpoints the trimmed description leaves out).
fn assert_all_fit(exchanges: &[Exchange], allowed: &[&str]) {
    let mut problems = Vec::new();
    for e in exchanges {
        let path = e
            .url
            .split("://")
            .nth(1)
            .and_then(|r| r.find('/').map(|i| &r[i..]))
            .unwrap_or("");
        if allowed.iter().any(|a| path.starts_with(a)) {
            continue;
        }
        if !(200..300).contains(&e.status) || e.header("sl-violations").is_some() {
            problems.push(format!(
                "{} {path} -> {} {}",
                e.method,
                e.status,
                e.header("sl-violations").unwrap_or("")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "requests outside the description:\n{}",
        problems.join("\n")
    );
}

fn methods(exchanges: &[Exchange]) -> Vec<String> {
    exchanges.iter().map(|e| e.method.clone()).collect()
}

#[tokio::test]
async fn every_request_the_gitlab_adapter_makes_fits_gitlabs_openapi_description() {
    let (observer, seen) = observer();
    let settings = GitlabSettings {
        url: prism_url("SORTIE_TEST_PRISM_GITLAB"),
        project: "acme/tools/widgets".into(),
        bearer: false,
        labels: LabelScheme {
            status_prefix: "status::".into(),
            priority_prefix: "priority::".into(),
        },
        close_on: vec!["done".into()],
    };
    let options = GitlabOptions {
        observer: Some(observer),
        ..GitlabOptions::default()
    };
    let t = GitlabTracker::new(settings, "glpat-contract".into(), options).unwrap();
    let statuses = vec!["ready-for-design".to_string(), "done".to_string()];

    t.identity().await.expect("GET /user");
    t.list(&statuses).await.expect("list");
    let filter = sortie::config::TicketFilter {
        labels: vec!["backend".into()],
        exclude_labels: vec!["wontfix".into(), "duplicate".into()],
        assignee: Some("me".into()),
        project: None,
    };
    t.list_filtered(&statuses, &filter)
        .await
        .expect("list filtered");
    t.get("14").await.expect("GET issue");
    t.comments("14").await.expect("GET notes");
    t.post_comment("14", "```yaml sortie:success\nrole: architect\n```\n", "k")
        .await
        .expect("POST note");
    t.move_labels(
        "14",
        Some("status::done"),
        &["status::code-review".into()],
        true,
    )
    .await
    .expect("PUT issue");
    t.blockers("14").await.expect("GET links");
    let report = t.check(&statuses, false).await.expect("check");
    assert!(
        report
            .checks
            .iter()
            .any(|c| c.what == "project access" && c.ok),
        "{report:?}"
    );

    let exchanges = seen.lock().unwrap().clone();
    assert_all_fit(&exchanges, &[]);
    let sent = methods(&exchanges);
    assert!(
        sent.contains(&"PUT".to_string()) && sent.contains(&"POST".to_string()),
        "{sent:?}"
    );
}

#[tokio::test]
async fn every_request_the_gitea_adapter_makes_fits_giteas_swagger_description() {
    let (observer, seen) = observer();
    let settings = GiteaSettings {
        url: prism_url("SORTIE_TEST_PRISM_GITEA"),
        repo: "acme/widgets".into(),
        labels: LabelScheme {
            status_prefix: "status/".into(),
            priority_prefix: "priority/".into(),
        },
        close_on: vec!["done".into()],
    };
    // Prism serves the description without its `/api/v1` base path.
    let options = GiteaOptions {
        observer: Some(observer),
        api_path: String::new(),
        ..GiteaOptions::default()
    };
    let t = GiteaTracker::new(settings, "gitea-contract".into(), options).unwrap();

    // The description's example label is named "string": a status by that name exists,
    // so the adapter lists with it (it never lists with a label the repository lacks).
    let listing = t
        .list(&["string".to_string(), "missing".to_string()])
        .await
        .expect("list");
    assert!(
        listing
            .warnings
            .iter()
            .any(|w| w.contains("label status/missing does not exist")),
        "{:?}",
        listing.warnings
    );
    // The example issue has a negative number and a pull_request: unreadable as an
    // issue, which is an error, not a crash.
    match t.get("1").await {
        Err(TrackerError::Invalid(_)) | Err(TrackerError::NotFound(_)) => {}
        other => panic!("the example issue should not read as a ticket: {other:?}"),
    }
    t.comments("1").await.expect("GET comments");
    t.post_comment("1", "```yaml sortie:success\nrole: architect\n```\n", "k")
        .await
        .expect("POST comment");
    t.add_label_id("1", 7).await.expect("POST labels by id");
    t.delete_label_id("1", 6).await.expect("DELETE label by id");
    t.close_issue("1").await.expect("PATCH state closed");
    // `GET /user` is not in the trimmed description: the adapter asks it for its login.
    let who = t.identity().await;
    assert!(matches!(who, Err(TrackerError::NotFound(_))), "{who:?}");

    let exchanges = seen.lock().unwrap().clone();
    assert_all_fit(&exchanges, &["/user"]);
    assert!(
        exchanges
            .iter()
            .all(|e| !(e.method == "PUT" && e.url.contains("/labels"))),
        "never replaces the label set"
    );
    assert!(
        exchanges
            .iter()
            .all(|e| !e.url.contains("labels=status%2Fmissing")),
        "never lists with a missing label"
    );
}

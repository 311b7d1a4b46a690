//! Contract tests: every kind of request the GitHub adapter makes, sent to Stoplight
//! Prism serving GitHub's published OpenAPI description
//! (`tests/fixtures/github/github-issues.openapi.json`). Prism answers each request
//! that fits the description with 2xx and flags any that does not in an
//! `sl-violations` header. Prism keeps no state, so this checks the shape of the
//! requests; `github_adapter.rs` and `github_pipeline.rs` check behaviour.
//!
//! Needs `SORTIE_TEST_PRISM_GITHUB` (set by `./scripts/test` through
//! `scripts/services/prism.sh`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sortie::tracker::github::{
    Exchange, GithubOptions, GithubSettings, GithubTracker, LabelScheme,
};
use sortie::tracker::{Tracker, TrackerError};

fn prism_url() -> String {
    std::env::var("SORTIE_TEST_PRISM_GITHUB").unwrap_or_else(|_| {
        panic!(
            "SORTIE_TEST_PRISM_GITHUB is not set: run ./scripts/test, or start Prism with \
             scripts/services/prism.sh (see scripts/services/README.md)"
        )
    })
}

/// An adapter pointed at Prism, and every exchange it has had.
fn tracker() -> (GithubTracker, Arc<Mutex<Vec<Exchange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let settings = GithubSettings {
        repo: "octocat/Hello-World".into(),
        api_url: prism_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        observer: Some(Arc::new(move |e: &Exchange| {
            sink.lock().unwrap().push(e.clone())
        })),
        ..GithubOptions::default()
    };
    let t = GithubTracker::new(settings, "ghp_contracttest".into(), options).unwrap();
    (t, seen)
}

/// `GET /repos/x/y/issues/1347/labels/status:a` -> `DELETE /repos/{o}/{r}/issues/{n}/labels/{name}`.
fn operation(e: &Exchange) -> String {
    let path = e
        .url
        .split("://")
        .nth(1)
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let templated: Vec<String> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| match (segs.first(), i) {
            (Some(&"repos"), 1) => "{o}".to_string(),
            (Some(&"repos"), 2) => "{r}".to_string(),
            (Some(&"repos"), 4) if segs[3] == "issues" => "{n}".to_string(),
            (Some(&"repos"), 6) if segs[5] == "labels" => "{name}".to_string(),
            _ => s.to_string(),
        })
        .collect();
    format!("{} /{}", e.method, templated.join("/"))
}

#[tokio::test]
async fn every_request_the_adapter_makes_fits_githubs_openapi_description() {
    let (t, seen) = tracker();
    let statuses = vec!["ready-for-design".to_string(), "done".to_string()];

    // Reads the pipeline makes.
    t.identity().await.expect("GET /user");
    // Prism's example answers carry a `Link` to api.github.com: never followed, and a
    // paged read fails rather than act on part of the board (#39, item 11).
    fn off_host<T: std::fmt::Debug>(read: Result<T, TrackerError>) {
        match read {
            Err(TrackerError::Invalid(m)) if m.contains("is not under the API base") => {}
            other => panic!("an off-host next link must fail the read: {other:?}"),
        }
    }
    off_host(t.list(&statuses[..1]).await);
    // The description's example issue carries a `pull_request` key: not a ticket.
    match t.get("1347").await {
        Err(TrackerError::NotFound(m)) if m.contains("pull request") => {}
        other => panic!("expected the example to read as a pull request: {other:?}"),
    }
    off_host(t.comments("1347").await);
    // Writes: a comment, and the two halves of a transition.
    let body = "```yaml sortie:success\nrole: architect\nsummary: done\n```\n";
    t.post_comment("1347", body, "0123abcd")
        .await
        .expect("post comment");
    let api = t.api();
    api.add_labels(1347, &["status:design-approved".to_string()])
        .await
        .expect("add label");
    api.remove_label(1347, "status:ready-for-design")
        .await
        .expect("remove label");
    // `sortie tracker check`: the labels (paged, so the example's `Link` fails it), label
    // creation and the rate limit, sent one by one.
    off_host(t.check(&statuses, true).await);
    assert!(api.rate_limit().await.expect("rate limit").is_some());
    api.create_label("status:qa", "ededed", "sortie pipeline status qa")
        .await
        .expect("create label");

    let exchanges = seen.lock().unwrap().clone();
    let mut problems = Vec::new();
    for e in &exchanges {
        if !(200..300).contains(&e.status) || e.header("sl-violations").is_some() {
            problems.push(format!(
                "{} {} -> {} {}",
                e.method,
                e.url,
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

    let covered: BTreeSet<String> = exchanges.iter().map(operation).collect();
    let expected: BTreeSet<String> = [
        "GET /user",
        "GET /repos/{o}/{r}/issues",
        "GET /repos/{o}/{r}/issues/{n}",
        "GET /repos/{o}/{r}/issues/{n}/comments",
        "POST /repos/{o}/{r}/issues/{n}/comments",
        "POST /repos/{o}/{r}/issues/{n}/labels",
        "DELETE /repos/{o}/{r}/issues/{n}/labels/{name}",
        "GET /repos/{o}/{r}/labels",
        "POST /repos/{o}/{r}/labels",
        "GET /rate_limit",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(covered, expected);

    // The list request carries the label filter and the paging parameters.
    let list = exchanges
        .iter()
        .find(|e| operation(e) == "GET /repos/{o}/{r}/issues")
        .unwrap();
    assert!(
        list.url
            .ends_with("/issues?labels=status%3Aready-for-design&state=open&per_page=100"),
        "{}",
        list.url
    );
}

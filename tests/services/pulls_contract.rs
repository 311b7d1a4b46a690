//! Contract tests for the pull-request loop (issue #32): every kind of request a
//! forge adapter makes to open, read and merge a pull request, sent to Stoplight
//! Prism serving the vendor's published description of those operations
//! (`tests/fixtures/github/github-pulls.openapi.json`, and the GitLab and Gitea
//! files beside their issue descriptions). Prism answers each request that fits with
//! 2xx and flags any that does not (an `sl-violations` header, or its own 4xx).
//! Prism keeps no state: this checks the shape of the requests; the forge models and
//! `tests/it/reactions/` check behaviour.
//!
//! Needs `SORTIE_TEST_PRISM_GITHUB_PULLS`, `SORTIE_TEST_PRISM_GITLAB_MRS` and
//! `SORTIE_TEST_PRISM_GITEA_PULLS` (set by `./scripts/test` through
//! `scripts/services/prism.sh`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sortie::config::MergeMethod;
use sortie::tracker::github::{Exchange, GithubOptions, GithubSettings, GithubTracker};
use sortie::tracker::labels::LabelScheme;
use sortie::tracker::{Forge, MergeResult, PullRequestSpec};

fn prism_url(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run ./scripts/test, or start Prism with \
             scripts/services/prism.sh (see scripts/services/README.md)"
        )
    })
}

/// The method and the path with the description's parameters put back in:
/// `GET /repos/{o}/{r}/pulls/{n}/reviews`.
fn operation(method: &str, url: &str, templated: &[(&str, usize)]) -> String {
    let path = url
        .split("://")
        .nth(1)
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let out: Vec<String> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            // A segment is a parameter when the one `back` places before it is `after`.
            let param = templated
                .iter()
                .find(|(after, back)| i >= *back && segs[i - back] == *after);
            match param {
                Some((after, _)) => format!("{{{after}}}"),
                None => s.to_string(),
            }
        })
        .collect();
    format!("{method} /{}", out.join("/"))
}

/// Every exchange that Prism did not accept as described.
fn outside(exchanges: &[(String, String, u16, Option<String>)]) -> Vec<String> {
    exchanges
        .iter()
        .filter(|(_, _, status, violations)| !(200..300).contains(status) || violations.is_some())
        .map(|(method, url, status, violations)| {
            format!(
                "{method} {url} -> {status} {}",
                violations.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// A loopback server forwarding every request to Prism at `upstream`, with `edit`
/// `edits` applied to the JSON answers of some `GET`s. Prism
/// answers with the description's examples, and some say what sortie cannot go on
/// from (the example pull request is merged, so nothing of its head would be read):
/// the edit makes it one sortie reads through, and every request still goes to
/// Prism and is checked there.
async fn edited(upstream: String, edits: &'static [Edit]) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(Forward { upstream, edits })
        .mount(&server)
        .await;
    server
}

/// The JSON answer of a `GET` whose path ends with the text is changed by the function.
type Edit = (&'static str, fn(&mut serde_json::Value));

struct Forward {
    upstream: String,
    edits: &'static [Edit],
}

impl wiremock::Respond for Forward {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let url = format!(
            "{}{}{}",
            self.upstream,
            request.url.path(),
            request
                .url
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default()
        );
        let method = reqwest::Method::from_bytes(request.method.as_str().as_bytes()).unwrap();
        let headers: Vec<(String, String)> = request
            .headers
            .iter()
            .filter(|(name, _)| name.as_str() != "host")
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("").to_string()))
            .collect();
        let body = request.body.clone();
        // The server runs inside a runtime: the blocking client gets its own thread.
        let (status, violations, text) = std::thread::spawn(move || {
            let mut call = reqwest::blocking::Client::new()
                .request(method, url)
                .body(body);
            for (name, value) in headers {
                call = call.header(name, value);
            }
            let answer = call.send().expect("Prism answers");
            let status = answer.status().as_u16();
            let violations = answer
                .headers()
                .get("sl-violations")
                .map(|v| v.to_str().unwrap_or("").to_string());
            (status, violations, answer.text().unwrap_or_default())
        })
        .join()
        .unwrap();
        let mut template = wiremock::ResponseTemplate::new(status);
        if let Some(violations) = violations {
            template = template.insert_header("sl-violations", violations.as_str());
        }
        let edit = self
            .edits
            .iter()
            .find(|(suffix, _)| {
                request.method.as_str() == "GET" && request.url.path().ends_with(suffix)
            })
            .map(|(_, edit)| edit);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(mut json) => {
                if let Some(edit) = edit {
                    edit(&mut json);
                }
                template.set_body_json(json)
            }
            Err(_) => template.set_body_string(text),
        }
    }
}

fn github(api_url: String) -> (GithubTracker, Arc<Mutex<Vec<Exchange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let settings = GithubSettings {
        repo: "octocat/Hello-World".into(),
        api_url,
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

#[tokio::test]
async fn every_pull_request_request_the_github_adapter_makes_fits_githubs_description() {
    // GitHub's example pull request is merged: made open, so its head is read too.
    let proxy = edited(
        prism_url("SORTIE_TEST_PRISM_GITHUB_PULLS"),
        &[("/pulls/1347", |pull| {
            pull["merged"] = false.into();
            pull["merged_at"] = serde_json::Value::Null;
            pull["state"] = "open".into();
        })],
    )
    .await;
    let (t, seen) = github(proxy.uri());
    // The description's example lists an open pull request for any head: reused.
    let spec = PullRequestSpec {
        ticket_id: "7".into(),
        head: "sortie/7".into(),
        base: "main".into(),
        title: "Fix the widget".into(),
        body: "Closes #7".into(),
        draft: false,
    };
    let opened = t.open_pull_request(&spec).await.expect("open");
    assert!(opened.reused, "{opened:?}");
    t.api()
        .create_pull("sortie/7", "main", "Fix the widget", "Closes #7", true)
        .await
        .expect("POST pulls");

    let state = t.pull_request_state(1347).await.expect("pull state");
    assert_eq!(state.number, 1347);
    assert!(!state.head_sha.is_empty(), "{state:?}");
    let run = state
        .checks
        .iter()
        .find(|c| c.id.starts_with("run:"))
        .unwrap_or_else(|| panic!("the example check run is read: {:?}", state.checks))
        .clone();
    t.check_details(&run, 2000).await.expect("annotations");
    let merged = t
        .merge_pull_request(1347, &state.head_sha, MergeMethod::Squash)
        .await
        .expect("merge");
    assert!(matches!(merged, MergeResult::Merged { .. }), "{merged:?}");

    let exchanges: Vec<Exchange> = seen.lock().unwrap().clone();
    let flat: Vec<_> = exchanges
        .iter()
        .map(|e| {
            (
                e.method.clone(),
                e.url.clone(),
                e.status,
                e.header("sl-violations").map(str::to_string),
            )
        })
        .collect();
    let problems = outside(&flat);
    assert!(
        problems.is_empty(),
        "requests outside the description:\n{}",
        problems.join("\n")
    );
    let params = [
        ("repos", 1),
        ("repos", 2),
        ("pulls", 1),
        ("commits", 1),
        ("check-runs", 1),
    ];
    let covered: BTreeSet<String> = exchanges
        .iter()
        .map(|e| operation(&e.method, &e.url, &params))
        .map(|op| op.replace("{repos}/{repos}", "{o}/{r}"))
        .collect();
    let expected: BTreeSet<String> = [
        "GET /repos/{o}/{r}/pulls",
        "POST /repos/{o}/{r}/pulls",
        "GET /repos/{o}/{r}/pulls/{pulls}",
        "GET /repos/{o}/{r}/commits/{commits}/check-runs",
        "GET /repos/{o}/{r}/commits/{commits}/status",
        "GET /repos/{o}/{r}/pulls/{pulls}/reviews",
        "GET /repos/{o}/{r}/pulls/{pulls}/comments",
        "GET /repos/{o}/{r}/check-runs/{check-runs}/annotations",
        "PUT /repos/{o}/{r}/pulls/{pulls}/merge",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(covered, expected);
    let put = exchanges.iter().find(|e| e.method == "PUT").unwrap();
    assert!(
        put.url.ends_with("/pulls/1347/merge"),
        "the merge names the pull request: {}",
        put.url
    );
}

/// Every exchange seen by an adapter's observer, flattened for [`outside`].
fn flatten(exchanges: &[Exchange]) -> Vec<(String, String, u16, Option<String>)> {
    exchanges
        .iter()
        .map(|e| {
            (
                e.method.clone(),
                e.url.clone(),
                e.status,
                e.header("sl-violations").map(str::to_string),
            )
        })
        .collect()
}

fn observer() -> (
    sortie::tracker::github::ExchangeObserver,
    Arc<Mutex<Vec<Exchange>>>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer: sortie::tracker::github::ExchangeObserver =
        Arc::new(move |e: &Exchange| sink.lock().unwrap().push(e.clone()));
    (observer, seen)
}

/// Every operation of `required` was made, and every request fits the description.
fn assert_covered(exchanges: &[Exchange], params: &[(&str, usize)], required: &[&str]) {
    let problems = outside(&flatten(exchanges));
    assert!(
        problems.is_empty(),
        "requests outside the description:\n{}",
        problems.join("\n")
    );
    let covered: BTreeSet<String> = exchanges
        .iter()
        .map(|e| operation(&e.method, &e.url, params))
        .collect();
    let missing: Vec<&&str> = required
        .iter()
        .filter(|op| !covered.contains(**op))
        .collect();
    assert!(
        missing.is_empty(),
        "not made: {missing:?}; made: {covered:?}"
    );
}

#[tokio::test]
async fn every_merge_request_request_the_gitlab_adapter_makes_fits_gitlabs_description() {
    use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
    // GitLab's example merge request is closed and merged: made open, so its head
    // pipeline, discussions and approvals are read too.
    let proxy = edited(
        prism_url("SORTIE_TEST_PRISM_GITLAB_MRS"),
        &[("/merge_requests/14", |mr| {
            mr["state"] = "opened".into();
            mr["merged_at"] = serde_json::Value::Null;
            mr["merged_by"] = serde_json::Value::Null;
            mr["merge_user"] = serde_json::Value::Null;
            mr["closed_at"] = serde_json::Value::Null;
            mr["closed_by"] = serde_json::Value::Null;
            mr["head_pipeline"]["sha"] = mr["sha"].clone();
            mr["head_pipeline"]["status"] = "failed".into();
        })],
    )
    .await;
    let (observer, seen) = observer();
    let settings = GitlabSettings {
        url: proxy.uri(),
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
    let state = t.pull_request_state(14).await.expect("merge request state");
    assert_eq!(state.head_sha, "1234abcd", "{state:?}");
    let job = state
        .checks
        .first()
        .unwrap_or_else(|| panic!("the example pipeline's jobs are read: {state:?}"))
        .clone();
    t.check_details(&job, 2000).await.expect("job trace");
    let merged = t
        .merge_pull_request(14, &state.head_sha, MergeMethod::Squash)
        .await
        .expect("merge");
    assert!(matches!(merged, MergeResult::Merged { .. }), "{merged:?}");

    let exchanges = seen.lock().unwrap().clone();
    let params = [
        ("projects", 1),
        ("merge_requests", 1),
        ("pipelines", 1),
        ("jobs", 1),
    ];
    assert_covered(
        &exchanges,
        &params,
        &[
            "GET /api/v4/projects/{projects}/merge_requests/{merge_requests}",
            "GET /api/v4/projects/{projects}/pipelines/{pipelines}/jobs",
            "GET /api/v4/projects/{projects}/merge_requests/{merge_requests}/discussions",
            "GET /api/v4/projects/{projects}/merge_requests/{merge_requests}/approvals",
            "GET /api/v4/projects/{projects}/jobs/{jobs}/trace",
            "PUT /api/v4/projects/{projects}/merge_requests/{merge_requests}/merge",
        ],
    );
    let put = exchanges.iter().find(|e| e.method == "PUT").unwrap();
    assert!(put.url.ends_with("/merge_requests/14/merge"), "{}", put.url);
}

#[tokio::test]
async fn every_pull_request_request_the_gitea_adapter_makes_fits_giteas_description() {
    use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
    // Gitea's example pull request is merged, and its review has a negative comment
    // count: made open with a reviewed comment, so every read is made.
    let proxy = edited(
        prism_url("SORTIE_TEST_PRISM_GITEA_PULLS"),
        &[
            ("/pulls/1", |pull| {
                pull["merged"] = false.into();
                pull["merged_at"] = serde_json::Value::Null;
                pull["state"] = "open".into();
                pull["number"] = 1.into();
                pull["head"]["sha"] = "0123abcd".into();
            }),
            ("/pulls/1/reviews", |reviews| {
                if let Some(list) = reviews.as_array_mut() {
                    for review in list {
                        review["comments_count"] = 1.into();
                        review["id"] = 3.into();
                    }
                }
            }),
        ],
    )
    .await;
    let (observer, seen) = observer();
    let settings = GiteaSettings {
        url: proxy.uri(),
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
    let state = t.pull_request_state(1).await.expect("pull state");
    assert_eq!(state.head_sha, "0123abcd", "{state:?}");
    for check in &state.checks {
        t.check_details(check, 2000).await.expect("check details");
    }
    let merged = t
        .merge_pull_request(1, &state.head_sha, MergeMethod::Squash)
        .await
        .expect("merge");
    assert!(matches!(merged, MergeResult::Merged { .. }), "{merged:?}");

    let exchanges = seen.lock().unwrap().clone();
    let params = [
        ("repos", 1),
        ("repos", 2),
        ("pulls", 1),
        ("commits", 1),
        ("reviews", 1),
    ];
    let covered: Vec<String> = exchanges
        .iter()
        .map(|e| operation(&e.method, &e.url, &params).replace("{repos}/{repos}", "{o}/{r}"))
        .collect();
    let problems = outside(&flatten(&exchanges));
    assert!(
        problems.is_empty(),
        "requests outside the description:\n{}",
        problems.join("\n")
    );
    for op in [
        "GET /repos/{o}/{r}/pulls/{pulls}",
        "GET /repos/{o}/{r}/commits/{commits}/status",
        "GET /repos/{o}/{r}/pulls/{pulls}/reviews",
        "GET /repos/{o}/{r}/pulls/{pulls}/reviews/{reviews}/comments",
        "POST /repos/{o}/{r}/pulls/{pulls}/merge",
    ] {
        assert!(
            covered.iter().any(|c| c == op),
            "{op} not made: {covered:?}"
        );
    }
}

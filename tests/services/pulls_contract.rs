//! Contract tests for the pull-request loop (issue #32): every kind of request a
//! forge adapter makes to open, read and merge a pull request, sent to Stoplight
//! Prism serving the vendor's published description of those operations
//! (`tests/fixtures/github/github-pulls.openapi.json`, and the GitLab and Gitea
//! files beside their issue descriptions). Prism answers each request that fits with
//! 2xx and flags any that does not (an `sl-violations` header, or its own 4xx).
//! Prism keeps no state: this checks the shape of the requests; the forge models and
//! `tests/it/reactions/` check behaviour.
//!
//! Needs `SORTIE_TEST_PRISM_GITHUB_PULLS` (set by `./scripts/test` through
//! `scripts/services/prism.sh`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sortie::config::MergeMethod;
use sortie::tracker::github::{
    Exchange, GithubOptions, GithubSettings, GithubTracker, LabelScheme,
};
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
/// applied to the JSON answers of `GET`s whose path ends with `path_suffix`. Prism
/// answers with the description's examples, and some say what sortie cannot go on
/// from (the example pull request is merged, so nothing of its head would be read):
/// the edit makes it one sortie reads through, and every request still goes to
/// Prism and is checked there.
async fn edited(
    upstream: String,
    path_suffix: &'static str,
    edit: fn(&mut serde_json::Value),
) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(Forward {
            upstream,
            path_suffix,
            edit,
        })
        .mount(&server)
        .await;
    server
}

struct Forward {
    upstream: String,
    path_suffix: &'static str,
    edit: fn(&mut serde_json::Value),
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
        let edit_this =
            request.method.as_str() == "GET" && request.url.path().ends_with(self.path_suffix);
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(mut json) => {
                if edit_this {
                    (self.edit)(&mut json);
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
        "/pulls/1347",
        |pull| {
            pull["merged"] = false.into();
            pull["merged_at"] = serde_json::Value::Null;
            pull["state"] = "open".into();
        },
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

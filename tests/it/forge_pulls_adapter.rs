//! The GitLab and Gitea adapters read a pull request's state and merge it (issue #32),
//! against a mock server answering as the vendors' published descriptions say: a
//! failed job or status, review comments on a resolved and an unresolved thread, an
//! approval, a conflict, and a merge refused (409) then done (200) with the head SHA
//! as the guard.

use serde_json::{json, Value};
use sortie::config::MergeMethod;
use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::labels::LabelScheme;
use sortie::tracker::pulls::{CheckState, MergeResult, Mergeability, PullLifecycle, ReviewVerdict};
use sortie::tracker::{Forge, TrackerError};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const GL: &str = "/api/v4/projects/77";
const GT: &str = "/api/v1/repos/acme/widgets";

fn gitlab(server: &MockServer) -> GitlabTracker {
    let settings = GitlabSettings {
        url: server.uri(),
        project: "77".into(),
        bearer: false,
        labels: LabelScheme {
            status_prefix: "status::".into(),
            priority_prefix: "priority::".into(),
        },
        close_on: Vec::new(),
    };
    GitlabTracker::new(settings, "glpat-x".into(), GitlabOptions::default()).unwrap()
}

fn gitea(server: &MockServer) -> GiteaTracker {
    let settings = GiteaSettings {
        url: server.uri(),
        repo: "acme/widgets".into(),
        labels: LabelScheme {
            status_prefix: "status/".into(),
            priority_prefix: "priority/".into(),
        },
        close_on: Vec::new(),
    };
    GiteaTracker::new(settings, "gitea-x".into(), GiteaOptions::default()).unwrap()
}

async fn answer(server: &MockServer, verb: &str, at: &str, status: u16, body: Value) {
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(server)
        .await;
}

async fn answer_once(server: &MockServer, verb: &str, at: &str, status: u16, body: Value) {
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .up_to_n_times(1)
        .mount(server)
        .await;
}

/// `METHOD path` of every request the server saw, in order.
async fn seen(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| format!("{} {}", r.method, r.url.path()))
        .collect()
}

fn body_of(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

async fn bodies_of(server: &MockServer, verb: &str, suffix: &str) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path().ends_with(suffix))
        .map(body_of)
        .collect()
}

fn gitlab_mr(extra: Value) -> Value {
    let mut mr = json!({
        "id": 1004, "iid": 4, "project_id": 77, "title": "Add widgets",
        "state": "opened", "draft": false, "sha": "head1",
        "source_branch": "sortie/12", "target_branch": "main",
        "labels": ["backend", "sortie:hold-not"],
        "web_url": "https://gitlab.example/acme/widgets/-/merge_requests/4",
        "detailed_merge_status": "conflict", "has_conflicts": true,
        "head_pipeline": {"id": 900, "sha": "head1", "status": "failed"}
    });
    mr.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    mr
}

async fn gitlab_reads(server: &MockServer) {
    answer(server, "GET", &format!("{GL}/pipelines/900/jobs"), 200, json!([
        {"id": 31, "name": "build", "stage": "build", "status": "success", "allow_failure": false,
         "web_url": "https://gitlab.example/-/jobs/31"},
        {"id": 32, "name": "test", "stage": "test", "status": "failed", "allow_failure": false,
         "failure_reason": "script_failure", "web_url": "https://gitlab.example/-/jobs/32"},
        {"id": 33, "name": "lint", "stage": "test", "status": "failed", "allow_failure": true,
         "web_url": "https://gitlab.example/-/jobs/33"}
    ]))
    .await;
    answer(server, "GET", &format!("{GL}/merge_requests/4/discussions"), 200, json!([
        {"id": "a", "individual_note": false, "resolvable": true, "resolved": true, "notes": [
            {"id": 501, "type": "DiffNote", "body": "rename this", "system": false,
             "author": {"username": "rev"}, "resolvable": true, "resolved": true,
             "position": {"new_path": "src/w.rs", "new_line": 10},
             "created_at": "2026-01-01T10:00:00Z", "updated_at": "2026-01-01T10:00:00Z"}
        ]},
        {"id": "b", "individual_note": false, "resolvable": true, "resolved": false, "notes": [
            {"id": 502, "type": "DiffNote", "body": "this panics on empty input", "system": false,
             "author": {"username": "rev"}, "resolvable": true, "resolved": false,
             "position": {"new_path": "src/w.rs", "new_line": 20},
             "created_at": "2026-01-01T10:01:00Z", "updated_at": "2026-01-01T10:02:00Z"}
        ]},
        {"id": "c", "individual_note": true, "resolvable": false, "notes": [
            {"id": 503, "type": null, "body": "added 1 commit", "system": true,
             "author": {"username": "sortie-bot"}}
        ]}
    ]))
    .await;
    answer(server, "GET", &format!("{GL}/merge_requests/4/approvals"), 200, json!({
        "approved": true,
        "approved_by": [{"user": {"username": "alice", "id": 2}, "approved_at": "2026-01-01T11:00:00Z"}]
    }))
    .await;
}

#[tokio::test]
async fn gitlab_reads_a_merge_request_its_jobs_threads_and_approvals() {
    let server = MockServer::start().await;
    answer(
        &server,
        "GET",
        &format!("{GL}/merge_requests/4"),
        200,
        gitlab_mr(json!({})),
    )
    .await;
    gitlab_reads(&server).await;
    let t = gitlab(&server);

    let state = t.pull_request_state(4).await.unwrap();
    assert_eq!(state.head_sha, "head1");
    assert_eq!(
        (state.head_branch.as_str(), state.base_branch.as_str()),
        ("sortie/12", "main")
    );
    assert_eq!(state.lifecycle, PullLifecycle::Open);
    assert_eq!(state.mergeability, Mergeability::Conflict);
    assert_eq!(state.labels, ["backend", "sortie:hold-not"]);
    let checks: Vec<_> = state
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        checks,
        [
            ("build", CheckState::Success),
            ("test", CheckState::Failure),
            ("lint", CheckState::Neutral),
        ],
        "a job allowed to fail does not fail the merge request"
    );
    let failed = &state.checks[1];
    assert_eq!(
        failed.url.as_deref(),
        Some("https://gitlab.example/-/jobs/32")
    );
    assert!(
        failed.summary.contains("script_failure"),
        "{}",
        failed.summary
    );

    let comments: Vec<_> = state
        .comments
        .iter()
        .map(|c| (c.id.as_str(), c.resolved, c.line))
        .collect();
    assert_eq!(
        comments,
        [("501", true, Some(10)), ("502", false, Some(20))],
        "the system note is not a review comment"
    );
    assert_eq!(state.comments[1].author, "rev");
    assert_eq!(
        state.comments[1].url.as_deref(),
        Some("https://gitlab.example/acme/widgets/-/merge_requests/4#note_502")
    );
    assert_eq!(state.reviews.len(), 1);
    assert_eq!(
        (state.reviews[0].author.as_str(), state.reviews[0].verdict),
        ("alice", ReviewVerdict::Approved)
    );
    assert_eq!(
        seen(&server).await,
        [
            format!("GET {GL}/merge_requests/4"),
            format!("GET {GL}/pipelines/900/jobs"),
            format!("GET {GL}/merge_requests/4/discussions"),
            format!("GET {GL}/merge_requests/4/approvals"),
        ],
        "the head pipeline named by the merge request is read, not looked up"
    );

    Mock::given(method("GET"))
        .and(path(format!("{GL}/jobs/32/trace")))
        .respond_with(ResponseTemplate::new(200).set_body_string(
            "\u{1b}[0Ksection_start:1700000000:step_script\r\u{1b}[0K$ cargo test\n\
             \u{1b}[31;1mthread 'parse' panicked at src/w.rs:20\u{1b}[0m\n\
             \u{1b}[0Ksection_end:1700000001:step_script\r\u{1b}[0K\n",
        ))
        .mount(&server)
        .await;
    let details = t.check_details(failed, 3000).await.unwrap();
    let trace = server.received_requests().await.unwrap_or_default();
    let trace = trace.last().unwrap();
    assert_eq!(trace.url.path(), format!("{GL}/jobs/32/trace"));
    assert_eq!(
        trace.headers.get("accept").and_then(|v| v.to_str().ok()),
        Some("text/plain"),
        "the trace is asked for as the text the description declares"
    );
    assert!(
        details.contains("thread 'parse' panicked at src/w.rs:20"),
        "{details:?}"
    );
    assert!(
        !details.contains('\u{1b}') && !details.contains("section_"),
        "{details:?}"
    );
}

#[tokio::test]
async fn gitlab_finds_the_head_pipeline_among_the_merge_requests_pipelines() {
    let server = MockServer::start().await;
    let mr = gitlab_mr(
        json!({"head_pipeline": null, "detailed_merge_status": "mergeable",
        "has_conflicts": false}),
    );
    answer(&server, "GET", &format!("{GL}/merge_requests/4"), 200, mr).await;
    answer(
        &server,
        "GET",
        &format!("{GL}/merge_requests/4/pipelines"),
        200,
        json!([
            {"id": 899, "sha": "older", "status": "success"},
            {"id": 900, "sha": "head1", "status": "failed"}
        ]),
    )
    .await;
    gitlab_reads(&server).await;
    let state = gitlab(&server).pull_request_state(4).await.unwrap();
    assert_eq!(state.mergeability, Mergeability::Clean);
    assert_eq!(
        state.checks.len(),
        3,
        "the jobs of pipeline 900, on the head"
    );
    assert!(seen(&server)
        .await
        .contains(&format!("GET {GL}/pipelines/900/jobs")));
}

#[tokio::test]
async fn gitlab_merges_with_the_head_sha_and_a_moved_head_is_refused() {
    let server = MockServer::start().await;
    let at = format!("{GL}/merge_requests/4/merge");
    answer_once(
        &server,
        "PUT",
        &at,
        409,
        json!({"message": "SHA does not match HEAD of source branch: head2"}),
    )
    .await;
    answer(
        &server,
        "PUT",
        &at,
        200,
        json!({
            "iid": 4, "state": "merged", "sha": "head1",
            "merge_commit_sha": "merge9", "squash_commit_sha": "squash8"
        }),
    )
    .await;
    let t = gitlab(&server);

    match t
        .merge_pull_request(4, "head1", MergeMethod::Squash)
        .await
        .unwrap()
    {
        MergeResult::Refused { reason } => {
            assert!(
                reason.contains("409") && reason.contains("SHA does not match"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        t.merge_pull_request(4, "head1", MergeMethod::Squash)
            .await
            .unwrap(),
        MergeResult::Merged {
            sha: "merge9".into()
        }
    );
    let bodies = bodies_of(&server, "PUT", "/merge").await;
    assert_eq!(bodies.len(), 2);
    for body in &bodies {
        assert_eq!(body, &json!({"sha": "head1", "squash": true}));
    }
    match t.merge_pull_request(4, "head1", MergeMethod::Rebase).await {
        Err(TrackerError::Unsupported(m)) => assert!(m.contains("merge method"), "{m}"),
        other => panic!("rebase is refused before any request, got {other:?}"),
    }
    assert_eq!(seen(&server).await.len(), 2, "the rebase sent nothing");
}

fn gitea_pull(extra: Value) -> Value {
    let mut pull = json!({
        "id": 105, "number": 5, "title": "Add widgets", "state": "open", "draft": false,
        "head": {"ref": "sortie/12", "sha": "g1"}, "base": {"ref": "main", "sha": "b0"},
        "mergeable": false, "merged": false, "labels": [{"id": 1, "name": "backend"}],
        "html_url": "https://gitea.example/acme/widgets/pulls/5"
    });
    pull.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    pull
}

#[tokio::test]
async fn gitea_reads_a_pull_request_its_statuses_reviews_and_their_comments() {
    let server = MockServer::start().await;
    answer(
        &server,
        "GET",
        &format!("{GT}/pulls/5"),
        200,
        gitea_pull(json!({})),
    )
    .await;
    answer(&server, "GET", &format!("{GT}/commits/g1/status"), 200, json!({
        "sha": "g1", "state": "failure", "total_count": 2, "statuses": [
            {"id": 71, "context": "ci/build", "status": "failure", "description": "2 tests failed",
             "target_url": "https://ci.example/71"},
            {"id": 72, "context": "ci/lint", "status": "success", "description": "ok"}
        ]
    }))
    .await;
    answer(
        &server,
        "GET",
        &format!("{GT}/pulls/5/reviews"),
        200,
        json!([
            {"id": 11, "state": "APPROVED", "user": {"login": "alice"}, "comments_count": 0,
             "body": "", "submitted_at": "2026-01-01T11:00:00Z"},
            {"id": 12, "state": "COMMENT", "user": {"login": "rev"}, "comments_count": 2,
             "body": "two things"},
            {"id": 13, "state": "APPROVED", "user": {"login": "carol"}, "comments_count": 0,
             "stale": true}
        ]),
    )
    .await;
    answer(
        &server,
        "GET",
        &format!("{GT}/pulls/5/reviews/12/comments"),
        200,
        json!([
            {"id": 601, "body": "rename this", "path": "src/w.rs", "position": 10,
             "original_position": 0, "resolver": {"login": "dev"}, "user": {"login": "rev"},
             "html_url": "https://gitea.example/acme/widgets/pulls/5#issuecomment-601",
             "updated_at": "2026-01-01T10:00:00Z"},
            {"id": 602, "body": "this panics", "path": "src/w.rs", "position": 20,
             "original_position": 0, "resolver": null, "user": {"login": "rev"},
             "updated_at": "2026-01-01T10:01:00Z"}
        ]),
    )
    .await;
    let t = gitea(&server);

    let state = t.pull_request_state(5).await.unwrap();
    assert_eq!(state.head_sha, "g1");
    assert_eq!(state.url, "https://gitea.example/acme/widgets/pulls/5");
    assert_eq!(state.mergeability, Mergeability::Conflict);
    assert_eq!(state.labels, ["backend"]);
    let checks: Vec<_> = state
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        checks,
        [
            ("ci/build", CheckState::Failure),
            ("ci/lint", CheckState::Success)
        ]
    );
    let failed = &state.checks[0];
    assert_eq!(failed.url.as_deref(), Some("https://ci.example/71"));
    assert_eq!(
        t.check_details(failed, 3000).await.unwrap(),
        "2 tests failed",
        "a status's details are its description"
    );
    let verdicts: Vec<_> = state
        .reviews
        .iter()
        .map(|r| (r.author.as_str(), r.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("alice", ReviewVerdict::Approved),
            ("rev", ReviewVerdict::Commented),
            ("carol", ReviewVerdict::Other),
        ],
        "a stale approval does not count"
    );
    let comments: Vec<_> = state
        .comments
        .iter()
        .map(|c| (c.id.as_str(), c.resolved, c.line))
        .collect();
    assert_eq!(
        comments,
        [("601", true, Some(10)), ("602", false, Some(20))]
    );
    assert_eq!(
        seen(&server).await,
        [
            format!("GET {GT}/pulls/5"),
            format!("GET {GT}/commits/g1/status"),
            format!("GET {GT}/pulls/5/reviews"),
            format!("GET {GT}/pulls/5/reviews/12/comments"),
        ],
        "only the review with comments has them read"
    );
}

#[tokio::test]
async fn gitea_merges_with_the_head_commit_and_reads_the_merge_commit_back() {
    let server = MockServer::start().await;
    let at = format!("{GT}/pulls/5/merge");
    answer_once(
        &server,
        "POST",
        &at,
        409,
        json!({"message": "head out of date"}),
    )
    .await;
    Mock::given(method("POST"))
        .and(path(at.clone()))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    answer(
        &server,
        "GET",
        &format!("{GT}/pulls/5"),
        200,
        gitea_pull(json!({
            "state": "closed", "merged": true, "merge_commit_sha": "gm9",
            "merged_by": {"login": "sortie-bot"}
        })),
    )
    .await;
    let t = gitea(&server);

    match t
        .merge_pull_request(5, "g1", MergeMethod::Rebase)
        .await
        .unwrap()
    {
        MergeResult::Refused { reason } => {
            assert!(
                reason.contains("409") && reason.contains("head out of date"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        t.merge_pull_request(5, "g1", MergeMethod::Squash)
            .await
            .unwrap(),
        MergeResult::Merged { sha: "gm9".into() }
    );
    assert_eq!(
        bodies_of(&server, "POST", "/merge").await,
        [
            json!({"do": "rebase", "head_commit_id": "g1"}),
            json!({"do": "squash", "head_commit_id": "g1"}),
        ]
    );
    assert_eq!(
        seen(&server).await,
        [
            format!("POST {GT}/pulls/5/merge"),
            format!("POST {GT}/pulls/5/merge"),
            format!("GET {GT}/pulls/5"),
        ],
        "a refused merge reads nothing back"
    );
    let merged = t.pull_request_state(5).await.unwrap();
    assert_eq!(
        merged.lifecycle,
        PullLifecycle::Merged {
            merge_commit: Some("gm9".into()),
            merged_by: Some("sortie-bot".into())
        }
    );
    assert_eq!(
        seen(&server).await.len(),
        4,
        "a merged pull request's checks are not read"
    );
}

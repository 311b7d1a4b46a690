//! The GitLab and Gitea models' pull (merge) requests (issue #32), driven over HTTP
//! as an adapter would: checks as pipeline jobs or commit statuses, job logs,
//! review threads and approvals, and the merge with its refusals; the answers
//! checked against the vendors' descriptions (`spec`, with the loader in
//! `schema`); the models backed by a bare git repository (`remote`).

pub mod remote;
mod schema;
mod spec;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::forge_model::ForgeModel;
use crate::{gitea_model, gitlab_model};

/// A client for one model's project (GitLab) or repository (Gitea) root,
/// authenticated as the adapter is.
pub(super) struct Api {
    http: reqwest::Client,
    root: String,
    auth: (&'static str, String),
}

/// One answer: status, content type, body as text and as JSON (null when not JSON).
pub(super) struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub text: String,
    pub json: Value,
}

impl Api {
    /// GitLab: `/api/v4/projects/{id}` with `PRIVATE-TOKEN`.
    pub(super) fn gitlab(model: &ForgeModel) -> Self {
        Api {
            http: reqwest::Client::new(),
            root: format!(
                "{}/api/v4/projects/{}",
                model.url(),
                gitlab_model::PROJECT_ID
            ),
            auth: ("private-token", gitlab_model::TOKEN.to_string()),
        }
    }

    /// Gitea: `/api/v1/repos/{owner}/{repo}` with `Authorization: token`.
    pub(super) fn gitea(model: &ForgeModel) -> Self {
        Api {
            http: reqwest::Client::new(),
            root: format!("{}/api/v1/repos/{}", model.url(), gitea_model::REPO),
            auth: ("authorization", format!("token {}", gitea_model::TOKEN)),
        }
    }

    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut b = self
            .http
            .request(method, format!("{}/{path}", self.root))
            .header(self.auth.0, &self.auth.1);
        if let Some(body) = body {
            b = b.json(&body);
        }
        let r = b.send().await.expect("the model answers");
        let status = r.status();
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = r.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            content_type,
            text,
            json,
        }
    }

    pub(super) async fn get(&self, path: &str) -> Reply {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub(super) async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    pub(super) async fn put(&self, path: &str, body: Value) -> Reply {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }
}

#[tokio::test]
async fn gitlab_shows_the_head_pipeline_its_jobs_and_traces_review_threads_and_approvals() {
    let model = gitlab_model::start().await;
    let api = Api::gitlab(&model);
    let created = api
        .post(
            "merge_requests",
            json!({"source_branch": "sortie/4", "target_branch": "main", "title": "Fix it"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let n = created.json["iid"].as_u64().unwrap();
    let sha = model.pull(n).unwrap().head_sha;
    assert_eq!(created.json["sha"], sha.as_str());

    let failed = model.add_check(&sha, "test", "failure", "2 failed", "boom at src/a.rs:3\n");
    model.add_check(&sha, "lint", "success", "", "clean");
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(mr["head_pipeline"]["status"], "failed");
    assert_eq!(mr["head_pipeline"]["sha"], sha.as_str());
    assert_eq!(mr["detailed_merge_status"], "ci_must_pass");
    let pipelines = api.get(&format!("merge_requests/{n}/pipelines")).await.json;
    assert_eq!(pipelines.as_array().unwrap().len(), 1);
    let pipeline = mr["head_pipeline"]["id"].as_u64().unwrap();
    assert_eq!(pipelines[0]["id"], pipeline);
    let jobs = api.get(&format!("pipelines/{pipeline}/jobs")).await.json;
    let test = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "test")
        .expect("the failed job is listed");
    assert_eq!(
        (&test["id"], &test["status"]),
        (&json!(failed), &json!("failed"))
    );
    let trace = api.get(&format!("jobs/{failed}/trace")).await;
    assert!(
        trace.content_type.starts_with("text/plain"),
        "{}",
        trace.content_type
    );
    assert_eq!(trace.text, "boom at src/a.rs:3\n");

    // A retry of the job replaces it: green now, and the pipeline with it.
    model.add_check(&sha, "test", "success", "", "ok");
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(mr["head_pipeline"]["status"], "success");
    assert_eq!(mr["detailed_merge_status"], "not_approved");

    let open = model.add_review_comment(n, "alice", "src/a.rs", 3, "rename this");
    let done = model.add_review_comment(n, "bob", "src/b.rs", 9, "typo");
    model.resolve_thread(done);
    let gone = model.add_review_comment(n, "carol", "src/c.rs", 1, "old line");
    model.mark_outdated(gone);
    let threads = api
        .get(&format!("merge_requests/{n}/discussions"))
        .await
        .json;
    let note_of = |id: u64| {
        threads
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["notes"][0]["id"] == id)
            .unwrap_or_else(|| panic!("discussion of {id} in {threads:#}"))
            .clone()
    };
    let (open, done, gone) = (note_of(open), note_of(done), note_of(gone));
    assert_eq!(open["notes"][0]["type"], "DiffNote");
    assert_eq!(open["notes"][0]["position"]["new_path"], "src/a.rs");
    assert_eq!(open["notes"][0]["position"]["new_line"], 3);
    assert_eq!(open["notes"][0]["author"]["username"], "alice");
    assert_eq!(
        (&open["resolved"], &done["resolved"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(done["notes"][0]["resolved_by"]["username"], "bob");
    assert_eq!(open["notes"][0]["position"]["head_sha"], sha.as_str());
    assert_ne!(
        gone["notes"][0]["position"]["head_sha"],
        sha.as_str(),
        "an outdated note stays on its old diff"
    );

    let approvals = api.get(&format!("merge_requests/{n}/approvals")).await.json;
    assert_eq!(approvals["approved"], false);
    model.add_review(n, "dave", "approved", "");
    let approvals = api.get(&format!("merge_requests/{n}/approvals")).await.json;
    assert_eq!(approvals["approved"], true);
    assert_eq!(approvals["approved_by"][0]["user"]["username"], "dave");
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(mr["detailed_merge_status"], "mergeable");
}

#[tokio::test]
async fn gitea_shows_commit_statuses_job_logs_reviews_and_resolved_comments() {
    let model = gitea_model::start().await;
    let api = Api::gitea(&model);
    let created = api
        .post(
            "pulls",
            json!({"head": "sortie/5", "base": "main", "title": "Fix it"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let n = created.json["number"].as_u64().unwrap();
    let sha = model.pull(n).unwrap().head_sha;
    assert_eq!(created.json["head"]["sha"], sha.as_str());
    assert_eq!(created.json["mergeable"], true);

    let failed = model.add_check(&sha, "ci/test", "failure", "2 failed", "boom\n");
    model.add_check(&sha, "ci/lint", "pending", "", "");
    let combined = api.get(&format!("commits/{sha}/status")).await.json;
    assert_eq!(combined["state"], "failure");
    let statuses = combined["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 2);
    let test = statuses.iter().find(|s| s["context"] == "ci/test").unwrap();
    assert_eq!(
        (&test["id"], &test["status"]),
        (&json!(failed), &json!("failure"))
    );
    assert_eq!(test["description"], "2 failed");
    let by_branch = api.get("commits/sortie%2F5/status").await.json;
    assert_eq!(
        by_branch["sha"],
        sha.as_str(),
        "a branch name reads its head"
    );
    let log = api.get(&format!("actions/jobs/{failed}/logs")).await;
    assert_eq!((log.status, log.text.as_str()), (StatusCode::OK, "boom\n"));

    model.add_review(n, "alice", "changes_requested", "not yet");
    let c = model.add_review_comment(n, "bob", "src/a.rs", 3, "rename this");
    let r = model.add_review_comment(n, "bob", "src/b.rs", 4, "typo");
    model.resolve_thread(r);
    let reviews = api.get(&format!("pulls/{n}/reviews")).await.json;
    let reviews = reviews.as_array().unwrap();
    assert_eq!(reviews.len(), 3);
    assert_eq!(
        (
            &reviews[0]["state"],
            &reviews[0]["user"]["login"],
            &reviews[0]["body"]
        ),
        (
            &json!("REQUEST_CHANGES"),
            &json!("alice"),
            &json!("not yet")
        )
    );
    assert_eq!(
        (&reviews[1]["state"], &reviews[1]["comments_count"]),
        (&json!("COMMENT"), &json!(1))
    );
    let comments = |review: &Value| {
        let path = format!("pulls/{n}/reviews/{}/comments", review["id"]);
        let api = &api;
        async move { api.get(&path).await.json }
    };
    let first = comments(&reviews[1]).await;
    assert_eq!(first[0]["id"], c);
    assert_eq!(
        (&first[0]["path"], &first[0]["position"]),
        (&json!("src/a.rs"), &json!(3))
    );
    assert!(first[0].get("resolver").is_none(), "{first:#}");
    let second = comments(&reviews[2]).await;
    assert_eq!(second[0]["resolver"]["login"], "bob");

    let refused = api
        .post(&format!("pulls/{n}/merge"), json!({"Do": "merge"}))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "red CI and no approval"
    );
    assert!(!model.pull(n).unwrap().merged);
}

#[tokio::test]
async fn merges_are_refused_while_draft_closed_or_unapproved_and_every_call_is_logged() {
    let model = gitlab_model::start().await;
    let api = Api::gitlab(&model);
    let n = model.open_pull("sortie/6", "main", "Six");
    model.set_draft(n, true);
    let sha = model.pull(n).unwrap().head_sha;
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(
        (&mr["draft"], &mr["detailed_merge_status"]),
        (&json!(true), &json!("draft_status"))
    );
    let refused = api
        .put(&format!("merge_requests/{n}/merge"), json!({"sha": sha}))
        .await;
    assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);
    model.set_draft(n, false);
    model.set_checking(n, true);
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(mr["detailed_merge_status"], "checking");
    let refused = api
        .put(&format!("merge_requests/{n}/merge"), json!({"sha": sha}))
        .await;
    assert_eq!(
        refused.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "still checking"
    );
    model.set_checking(n, false);
    model.set_pull_labels(n, &["sortie:hold"]);
    model.require_approvals(0);
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert_eq!(mr["labels"], json!(["sortie:hold"]));
    assert_eq!(mr["detailed_merge_status"], "mergeable");
    let merged = api
        .put(
            &format!("merge_requests/{n}/merge"),
            json!({"sha": sha, "squash": true}),
        )
        .await;
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.text);
    assert_eq!(merged.json["state"], "merged");
    assert_eq!(merged.json["merged_by"]["username"], gitlab_model::USER);
    let state = model.pull(n).unwrap();
    assert!(state.merged);
    assert_eq!(
        merged.json["merge_commit_sha"],
        json!(state.merge_commit_sha)
    );
    assert!(merged.json["squash_commit_sha"].is_string());
    let again = api
        .put(&format!("merge_requests/{n}/merge"), json!({}))
        .await;
    assert_eq!(
        again.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "already merged"
    );
    assert_eq!(
        model.merge_calls(),
        vec![
            (n, json!({"sha": sha})),
            (n, json!({"sha": sha})),
            (n, json!({"sha": sha, "squash": true})),
            (n, json!({}))
        ]
    );

    let gitea = gitea_model::start().await;
    let api = Api::gitea(&gitea);
    let m = gitea.open_pull("sortie/7", "main", "Seven");
    gitea.require_approvals(0);
    let no_do = api.post(&format!("pulls/{m}/merge"), json!({})).await;
    assert_eq!(
        no_do.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "`Do` is required"
    );
    gitea.close_pull(m);
    let closed = api
        .post(&format!("pulls/{m}/merge"), json!({"Do": "merge"}))
        .await;
    assert_eq!(closed.status, StatusCode::NOT_FOUND);
    let pull = api.get(&format!("pulls/{m}")).await.json;
    assert_eq!(
        (&pull["state"], &pull["merged"]),
        (&json!("closed"), &json!(false))
    );
    assert_eq!(gitea.merge_calls().len(), 2);
}

#[tokio::test]
async fn the_model_clock_stamps_reviews_and_comments() {
    let model = gitea_model::start().await;
    let api = Api::gitea(&model);
    let n = model.open_pull("sortie/8", "main", "Eight");
    let before = model.now();
    model.advance(120);
    assert!(model.now() >= before + chrono::Duration::seconds(120));
    model.add_review(n, "alice", "commented", "hm");
    let reviews = api.get(&format!("pulls/{n}/reviews")).await.json;
    let at: chrono::DateTime<chrono::Utc> = reviews[0]["submitted_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        at >= before + chrono::Duration::seconds(120),
        "{at} vs {before}"
    );
    assert!(at <= model.now());
}

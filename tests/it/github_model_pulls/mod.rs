//! The GitHub model's pull requests (issue #32), driven over HTTP as the adapter
//! drives them: conditional reads, check runs and statuses by commit, the merge and
//! its refusals, review threads through REST and GraphQL; the answers checked
//! against the vendor's description (`spec`); the real adapter against the model
//! (`adapter`); the model backed by a git repository (`remote`).

mod adapter;
mod remote;
mod spec;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::github_model::{GithubModel, LOGIN, REPO, TOKEN};

pub(super) const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
pub(super) const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// A client for the model's REST root, authenticated as the adapter is.
pub(super) struct Api {
    http: reqwest::Client,
    root: String,
}

impl Api {
    pub(super) fn new(model: &GithubModel) -> Self {
        Api {
            http: reqwest::Client::new(),
            root: format!("{}/repos/{REPO}", model.api_url()),
        }
    }

    fn auth(&self, b: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        b.header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/vnd.github+json")
    }

    /// `GET` below the repository: status, ETag and JSON body (null when none).
    pub(super) async fn get(
        &self,
        path: &str,
        etag: Option<&str>,
    ) -> (StatusCode, Option<String>, Value) {
        let mut b = self.auth(self.http.get(format!("{}/{path}", self.root)));
        if let Some(tag) = etag {
            b = b.header("if-none-match", tag);
        }
        let r = b.send().await.expect("the model answers");
        let status = r.status();
        let tag = r
            .headers()
            .get("etag")
            .map(|v| v.to_str().unwrap().to_string());
        let text = r.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, tag, body)
    }

    pub(super) async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .auth(self.http.put(format!("{}/{path}", self.root)))
            .json(&body)
            .send()
            .await
            .expect("the model answers");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

/// `POST` a GraphQL document to `url`.
pub(super) async fn graphql(url: &str, query: &str, variables: Value) -> Value {
    let r = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await
        .expect("the model answers");
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// The review-threads query, as the adapter writes it.
pub(super) const THREADS: &str = "query($owner: String!, $name: String!, $number: Int!) { \
    repository(owner: $owner, name: $name) { pullRequest(number: $number) { \
    reviewThreads(first: 100) { nodes { isResolved isOutdated \
    comments(first: 100) { nodes { databaseId } } } } } } }";

#[tokio::test]
async fn an_unchanged_pull_request_answers_304_for_free_and_a_push_changes_its_etag() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/7", "main", "Fix the login page");
    let api = Api::new(&model);

    let (status, tag, pull) = api.get(&format!("pulls/{n}"), None).await;
    assert_eq!(status, StatusCode::OK);
    let tag = tag.expect("an ETag");
    assert_eq!(pull["number"], n);
    assert_eq!(pull["state"], "open");
    assert_eq!(pull["merged"], false);
    assert_eq!(pull["mergeable"], true);
    assert_eq!(pull["mergeable_state"], "clean");
    assert_eq!(pull["head"]["ref"], "sortie/7");
    assert_eq!(pull["base"]["ref"], "main");
    assert_eq!(pull["user"]["login"], LOGIN);
    let first_sha = pull["head"]["sha"].as_str().unwrap().to_string();
    assert_eq!(first_sha.len(), 40);
    assert_eq!(first_sha, model.pull(n).unwrap().head_sha);

    let units = model.units_used();
    let (status, again, body) = api.get(&format!("pulls/{n}"), Some(&tag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(again.as_deref(), Some(tag.as_str()));
    assert_eq!(body, Value::Null);
    assert_eq!(model.units_used(), units, "a 304 costs nothing");

    model.push(n, SHA_B);
    let (status, new_tag, pull2) = api.get(&format!("pulls/{n}"), Some(&tag)).await;
    assert_eq!(status, StatusCode::OK, "the push changed the pull request");
    assert_ne!(new_tag.as_deref(), Some(tag.as_str()));
    assert_eq!(pull2["head"]["sha"], SHA_B);
    assert!(pull2["updated_at"].as_str() > pull["updated_at"].as_str());
    assert_eq!(model.units_used(), units + 1);

    model.set_pull_labels(n, &["needs-review"]);
    let (_, _, pull3) = api.get(&format!("pulls/{n}"), None).await;
    assert_eq!(pull3["labels"][0]["name"], "needs-review");

    let (status, _, _) = api.get("pulls/999", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn check_runs_statuses_and_annotations_are_read_by_commit() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/8", "main", "Add the API");
    model.push(n, SHA_A);
    let old = model.add_check_run(SHA_A, "test", "completed", Some("failure"), "2 failed", "");
    let rerun = model.add_check_run(SHA_A, "test", "in_progress", None, "", "");
    let lint = model.add_check_run(
        SHA_A,
        "lint",
        "completed",
        Some("failure"),
        "clippy",
        "1 warning",
    );
    model.add_annotation(lint, "src/lib.rs", 12, "unused variable `x`");
    model.add_check_run(SHA_B, "test", "completed", Some("success"), "", "");
    let api = Api::new(&model);

    let (status, _, runs) = api.get(&format!("commits/{SHA_A}/check-runs"), None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<u64> = runs["check_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![rerun, lint],
        "the re-run hides the old run; B's run is not A's"
    );
    assert_eq!(runs["total_count"], 2);
    let first = &runs["check_runs"][0];
    assert_eq!(first["status"], "in_progress");
    assert_eq!(first["conclusion"], Value::Null);
    assert_eq!(first["completed_at"], Value::Null);
    assert_eq!(first["head_sha"], SHA_A);
    let second = &runs["check_runs"][1];
    assert_eq!(second["conclusion"], "failure");
    assert_eq!(second["output"]["title"], "clippy");
    assert_eq!(second["output"]["text"], "1 warning");
    assert_eq!(second["output"]["annotations_count"], 1);

    let (_, _, all) = api
        .get(&format!("commits/{SHA_A}/check-runs?filter=all"), None)
        .await;
    assert_eq!(all["total_count"], 3, "{all}");
    assert!(all["check_runs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == old));
    let (_, _, by_branch) = api.get("commits/sortie%2F8/check-runs", None).await;
    assert_eq!(
        by_branch["total_count"], 2,
        "a branch names its head commit"
    );

    let (status, _, notes) = api
        .get(&format!("check-runs/{lint}/annotations"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        notes,
        json!([{
            "path": "src/lib.rs",
            "blob_href": format!("https://github.com/{REPO}/blob/{SHA_A}/src/lib.rs"),
            "start_line": 12, "end_line": 12, "start_column": null, "end_column": null,
            "annotation_level": "failure", "title": null,
            "message": "unused variable `x`", "raw_details": null,
        }])
    );

    let combined = |sha: &'static str| {
        let api = &api;
        async move { api.get(&format!("commits/{sha}/status"), None).await.2 }
    };
    assert_eq!(combined(SHA_A).await["state"], "pending", "no status yet");
    assert_eq!(combined(SHA_A).await["total_count"], 0);
    model.set_status(SHA_A, "ci/deploy", "pending", "deploying");
    model.set_status(SHA_A, "ci/docs", "success", "built");
    assert_eq!(combined(SHA_A).await["state"], "pending");
    model.set_status(SHA_A, "ci/deploy", "success", "deployed");
    let ok = combined(SHA_A).await;
    assert_eq!(ok["state"], "success");
    assert_eq!(ok["total_count"], 2, "one status per context, the latest");
    assert_eq!(ok["statuses"][0]["context"], "ci/deploy", "newest first");
    assert_eq!(ok["statuses"][0]["description"], "deployed");
    model.set_status(SHA_A, "ci/docs", "error", "broken link");
    assert_eq!(combined(SHA_A).await["state"], "failure");
    assert_eq!(combined(SHA_B).await["total_count"], 0);
}

#[tokio::test]
async fn merge_refuses_a_stale_head_a_conflict_a_draft_and_a_bad_method_then_merges() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/9", "main", "Ship it");
    model.push(n, SHA_B);
    let api = Api::new(&model);
    let merge = format!("pulls/{n}/merge");

    let (status, _, _) = api.get(&merge, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not merged yet");

    let (status, body) = api
        .put(&merge, json!({"merge_method": "squash", "sha": SHA_A}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["message"],
        "Head branch was modified. Review and try the merge again."
    );

    model.set_mergeable(n, Some(false), "dirty");
    let (status, body) = api
        .put(&merge, json!({"merge_method": "squash", "sha": SHA_B}))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(body["message"], "Pull Request is not mergeable");

    model.set_mergeable(n, Some(true), "clean");
    model.set_draft(n, true);
    assert_eq!(model.pull(n).unwrap().mergeable_state, "draft");
    let (status, _) = api.put(&merge, json!({"sha": SHA_B})).await;
    assert_eq!(
        status,
        StatusCode::METHOD_NOT_ALLOWED,
        "a draft does not merge"
    );
    model.set_draft(n, false);

    let (status, _) = api
        .put(&merge, json!({"merge_method": "octopus", "sha": SHA_B}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!model.pull(n).unwrap().merged, "no refusal merged anything");

    let (status, body) = api
        .put(&merge, json!({"merge_method": "squash", "sha": SHA_B}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["merged"], true);
    assert_eq!(body["message"], "Pull Request successfully merged");
    let sha = body["sha"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 40);
    assert_ne!(sha, SHA_B);

    let (_, _, pull) = api.get(&format!("pulls/{n}"), None).await;
    assert_eq!(pull["merged"], true);
    assert_eq!(pull["state"], "closed");
    assert_eq!(pull["merge_commit_sha"], sha.as_str());
    assert_eq!(pull["merged_by"]["login"], LOGIN);
    assert!(pull["merged_at"].is_string());
    assert_eq!(pull["merged_at"], pull["closed_at"]);
    let (status, _, _) = api.get(&merge, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = api.put(&merge, json!({"sha": SHA_B})).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "merged is closed");

    let calls = model.merge_calls();
    assert_eq!(calls.len(), 6, "{calls:?}");
    assert!(calls.iter().all(|(number, _)| *number == n));
    assert_eq!(calls[4].1, json!({"merge_method": "squash", "sha": SHA_B}));

    // A person merging, and a person closing, as the adapter would find them.
    let m = model.open_pull("sortie/10", "main", "Another");
    let by_hand = model.merge_by_person(m, "alice");
    let pull = model.pull(m).unwrap();
    assert!(pull.merged && !pull.open);
    assert_eq!(pull.merge_commit_sha.as_deref(), Some(by_hand.as_str()));
    assert_eq!(pull.merged_by.as_deref(), Some("alice"));
    let c = model.open_pull("sortie/11", "main", "Abandoned");
    model.close_pull(c);
    let (_, _, closed) = api.get(&format!("pulls/{c}"), None).await;
    assert_eq!(
        (&closed["state"], &closed["merged"]),
        (&json!("closed"), &json!(false))
    );
    assert!(closed["closed_at"].is_string());
    assert_eq!(closed["merged_at"], Value::Null);
}

#[tokio::test]
async fn review_threads_show_resolved_and_outdated_through_graphql_and_rest() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/12", "main", "Refactor");
    let first = model.add_review_comment(n, "alice", "src/a.rs", 10, "rename this");
    let reply = model.reply_to(first, "bob", "agreed");
    let second = model.add_review_comment(n, "renovate[bot]", "src/b.rs", 3, "bump");
    let open = model.add_review_comment(n, "alice", "src/c.rs", 7, "why?");
    model.resolve_thread(reply);
    model.push(n, SHA_A);
    model.mark_outdated(second);

    let url = format!("{}/graphql", model.api_url());
    let answer = graphql(
        &url,
        THREADS,
        json!({"owner": "acme", "name": "widgets", "number": n}),
    )
    .await;
    assert_eq!(
        answer,
        json!({"data": {"repository": {"pullRequest": {"reviewThreads": {"nodes": [
            {"isResolved": true, "isOutdated": false, "comments": {"nodes": [{"databaseId": first}, {"databaseId": reply}]}},
            {"isResolved": false, "isOutdated": true, "comments": {"nodes": [{"databaseId": second}]}},
            {"isResolved": false, "isOutdated": false, "comments": {"nodes": [{"databaseId": open}]}},
        ]}}}}})
    );
    let literal = format!(
        "{{ repository(owner: \"acme\", name: \"widgets\") {{ pullRequest(number: {n}) {{ \
         reviewThreads(first: 100) {{ nodes {{ isResolved isOutdated comments(first: 100) {{ nodes {{ databaseId }} }} }} }} }} }} }}"
    );
    let same = graphql(&url, &literal, Value::Null).await;
    assert_eq!(same, answer, "literal arguments read as variables");
    let missing = graphql(
        &url,
        THREADS,
        json!({"owner": "acme", "name": "widgets", "number": 99}),
    )
    .await;
    assert_eq!(missing["data"]["repository"]["pullRequest"], Value::Null);
    assert_eq!(missing["errors"][0]["type"], "NOT_FOUND");
    assert!(
        model.log().iter().any(|l| l == "POST /graphql -> 200"),
        "{:?}",
        model.log()
    );

    let api = Api::new(&model);
    let (status, _, comments) = api.get(&format!("pulls/{n}/comments"), None).await;
    assert_eq!(status, StatusCode::OK);
    let by_id = |id: u64| {
        comments
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("comment {id} in {comments:#}"))
    };
    let c = by_id(first);
    assert_eq!((&c["line"], &c["position"]), (&json!(10), &json!(10)));
    assert_eq!(c["path"], "src/a.rs");
    assert_eq!(
        c["commit_id"], SHA_A,
        "still on the diff: shown on the head"
    );
    assert!(c.get("in_reply_to_id").is_none(), "{c}");
    assert_eq!(by_id(reply)["in_reply_to_id"], first);
    assert_eq!(by_id(reply)["path"], "src/a.rs");
    let gone = by_id(second);
    assert_eq!(
        (&gone["line"], &gone["position"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(gone["original_line"], 3);
    assert_ne!(
        gone["commit_id"], SHA_A,
        "outdated: still on the old commit"
    );
    assert_eq!(gone["user"]["type"], "Bot");
    assert_eq!(c["user"]["type"], "User");

    // GitHub files each lone comment under a COMMENTED review without a body.
    let (_, _, reviews) = api.get(&format!("pulls/{n}/reviews"), None).await;
    assert_eq!(reviews.as_array().unwrap().len(), 4);
    assert!(reviews
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == c["pull_request_review_id"]
            && r["state"] == "COMMENTED"
            && r["body"] == ""));
}

#[tokio::test]
async fn reviews_list_verdicts_authors_and_hide_others_pending_reviews() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/13", "main", "Docs");
    let approve = model.add_review(n, "alice", "APPROVED", "");
    let changes = model.add_review(n, "coderabbit[bot]", "CHANGES_REQUESTED", "tests?");
    model.add_review(n, "bob", "PENDING", "draft thoughts");
    let mine = model.add_review(n, LOGIN, "PENDING", "");
    model.dismiss_review(approve);
    let api = Api::new(&model);
    let (_, _, reviews) = api.get(&format!("pulls/{n}/reviews"), None).await;
    let seen: Vec<(u64, &str, &str)> = reviews
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_u64().unwrap(),
                r["state"].as_str().unwrap(),
                r["user"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (approve, "DISMISSED", "User"),
            (changes, "CHANGES_REQUESTED", "Bot"),
            (mine, "PENDING", "User"),
        ]
    );
    assert_eq!(reviews[1]["body"], "tests?");
    assert!(reviews[1]["submitted_at"].is_string());
    assert!(
        reviews[2].get("submitted_at").is_none(),
        "pending: not submitted"
    );
    assert_eq!(reviews[1]["commit_id"], model.pull(n).unwrap().head_sha);
}

#[tokio::test]
async fn graphql_is_found_beside_an_enterprise_api_root() {
    let model = GithubModel::start_with_prefix("/api/v3").await;
    let n = model.open_pull("sortie/14", "main", "GHES");
    let c = model.add_review_comment(n, "alice", "a.rs", 1, "hm");
    model.resolve_thread(c);
    let root = model.api_url();
    let url = format!("{}/api/graphql", root.strip_suffix("/api/v3").unwrap());
    let answer = graphql(
        &url,
        THREADS,
        json!({"owner": "acme", "name": "widgets", "number": n}),
    )
    .await;
    let nodes = &answer["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"];
    assert_eq!(nodes[0]["isResolved"], true, "{answer}");
}

//! Every pull-request answer of the GitLab and Gitea models has the fields and types
//! the vendor's description gives the operation
//! (`tests/fixtures/gitlab/gitlab-mergerequests.openapi.json`,
//! `tests/fixtures/gitea/gitea-pulls.swagger.json`).

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::remote::{git, Remote};
use super::schema::VendorSpec;
use super::Api;
use crate::{gitea_model, gitlab_model};

fn ok(result: Result<(), String>, value: &Value) {
    if let Err(e) = result {
        panic!("{e}\n{value:#}");
    }
}

const MR: &str = "/api/v4/projects/{id}/merge_requests";
const ONE: &str = "/api/v4/projects/{id}/merge_requests/{merge_request_iid}";

#[tokio::test]
async fn the_gitlab_model_answers_as_gitlab_s_description_says() {
    let remote = Remote::new();
    remote.branch("sortie/1");
    let sha = remote.commit("sortie/1", "NEW", "new\n");
    let model = gitlab_model::start_with_remote(&remote.bare).await;
    let api = Api::gitlab(&model);
    let mut spec = VendorSpec::load("gitlab/gitlab-mergerequests.openapi.json");

    let body = json!({"source_branch": "sortie/1", "target_branch": "main", "title": "Draft: one", "labels": ["a"]});
    let created = api.post("merge_requests", body).await;
    assert_eq!(created.status, StatusCode::CREATED);
    ok(
        spec.check_answer("post", MR, 201, &created.json),
        &created.json,
    );
    let n = created.json["iid"].as_u64().unwrap();
    let job = model.add_check(&sha, "test", "failure", "1 failed", "log");
    model.add_check(&sha, "lint", "pending", "", "");
    model.add_review(n, "alice", "approved", "fine");
    model.add_review(n, "bob", "changes_requested", "");
    let c = model.add_review_comment(n, "carol", "NEW", 1, "hm");
    model.resolve_thread(c);
    model.add_review_comment(n, "dave", "NEW", 1, "again");

    for (path, query) in [
        (MR, "merge_requests?source_branch=sortie%2F1&state=opened"),
        (MR, "merge_requests"),
    ] {
        let list = api.get(query).await.json;
        assert_eq!(list.as_array().map(Vec::len), Some(1), "{query}");
        ok(spec.check_answer("get", path, 200, &list), &list);
    }
    let mr = api.get(&format!("merge_requests/{n}")).await.json;
    assert!(mr["head_pipeline"].is_object() && mr["diff_refs"].is_object());
    ok(spec.check_answer("get", ONE, 200, &mr), &mr);
    let pipelines = api.get(&format!("merge_requests/{n}/pipelines")).await.json;
    ok(
        spec.check_answer("get", &format!("{ONE}/pipelines"), 200, &pipelines),
        &pipelines,
    );
    let pipeline = pipelines[0]["id"].as_u64().unwrap();
    let jobs = api.get(&format!("pipelines/{pipeline}/jobs")).await.json;
    assert_eq!(jobs.as_array().map(Vec::len), Some(2));
    ok(
        spec.check_answer(
            "get",
            "/api/v4/projects/{id}/pipelines/{pipeline_id}/jobs",
            200,
            &jobs,
        ),
        &jobs,
    );
    let trace = api.get(&format!("jobs/{job}/trace")).await;
    assert!(trace.content_type.starts_with("text/plain"));
    let threads = api
        .get(&format!("merge_requests/{n}/discussions"))
        .await
        .json;
    assert_eq!(threads.as_array().map(Vec::len), Some(5), "{threads:#}");
    ok(
        spec.check_answer(
            "get",
            "/api/v4/projects/{id}/merge_requests/{noteable_id}/discussions",
            200,
            &threads,
        ),
        &threads,
    );
    let approvals = api.get(&format!("merge_requests/{n}/approvals")).await.json;
    assert_eq!(approvals["approved_by"].as_array().map(Vec::len), Some(1));
    ok(
        spec.check_answer("get", &format!("{ONE}/approvals"), 200, &approvals),
        &approvals,
    );
    let updated = api
        .put(
            &format!("merge_requests/{n}"),
            json!({"title": "one", "add_labels": ["b"]}),
        )
        .await;
    assert_eq!(
        (&updated.json["draft"], &updated.json["labels"]),
        (&json!(false), &json!(["a", "b"]))
    );
    ok(
        spec.check_answer("put", ONE, 200, &updated.json),
        &updated.json,
    );
    model.add_check(&sha, "test", "success", "", "");
    model.add_check(&sha, "lint", "success", "", "");
    let main_before = remote.head_of("main");
    let merged = api
        .put(
            &format!("merge_requests/{n}/merge"),
            json!({"sha": sha, "squash": true}),
        )
        .await;
    assert_eq!(merged.status, StatusCode::OK, "{}", merged.text);
    // GitLab's squash under its merge-commit method: a squashed commit on the old
    // base, and a merge of it that main moves to.
    let main = remote.head_of("main");
    let squashed = merged.json["squash_commit_sha"].as_str().unwrap();
    assert_eq!(merged.json["merge_commit_sha"], main.as_str());
    let parents = git(&remote.bare, &["log", "-1", "--format=%P", &main]);
    assert_eq!(parents, format!("{main_before} {squashed}"));
    let parents = git(&remote.bare, &["log", "-1", "--format=%P", squashed]);
    assert_eq!(parents, main_before, "one commit for the whole branch");
    ok(
        spec.check_answer("put", &format!("{ONE}/merge"), 200, &merged.json),
        &merged.json,
    );

    // The check is not a rubber stamp: a wrong type or an invented field fails it.
    let mut wrong = merged.json.clone();
    wrong["has_conflicts"] = json!("no");
    assert!(spec
        .check_answer("put", &format!("{ONE}/merge"), 200, &wrong)
        .is_err());
    let mut invented = threads.clone();
    invented[0]["notes"][0]["outdated"] = json!(true);
    assert!(spec
        .check_answer(
            "get",
            "/api/v4/projects/{id}/merge_requests/{noteable_id}/discussions",
            200,
            &invented
        )
        .is_err());
}

const PULLS: &str = "/repos/{owner}/{repo}/pulls";
const PULL: &str = "/repos/{owner}/{repo}/pulls/{index}";

#[tokio::test]
async fn the_gitea_model_answers_as_gitea_s_description_says() {
    let remote = Remote::new();
    remote.branch("sortie/1");
    let sha = remote.commit("sortie/1", "NEW", "new\n");
    let model = gitea_model::start_with_remote(&remote.bare).await;
    let api = Api::gitea(&model);
    let mut spec = VendorSpec::load("gitea/gitea-pulls.swagger.json");

    let created = api
        .post(
            "pulls",
            json!({"head": "sortie/1", "base": "main", "title": "WIP: one"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.json["draft"], true);
    ok(
        spec.check_answer("post", PULLS, 201, &created.json),
        &created.json,
    );
    let n = created.json["number"].as_u64().unwrap();
    model.set_pull_labels(n, &["sortie:hold"]);
    let job = model.add_check(&sha, "ci/test", "failure", "1 failed", "log");
    model.add_check(&sha, "ci/lint", "success", "", "");
    model.add_review(n, "alice", "approved", "fine");
    let c = model.add_review_comment(n, "carol", "NEW", 1, "hm");
    model.resolve_thread(c);
    let gone = model.add_review_comment(n, "dave", "NEW", 1, "old");
    model.mark_outdated(gone);

    let list = api.get("pulls?state=all").await.json;
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    ok(spec.check_answer("get", PULLS, 200, &list), &list);
    let pull = api.get(&format!("pulls/{n}")).await.json;
    assert_eq!(pull["labels"][0]["name"], "sortie:hold");
    ok(spec.check_answer("get", PULL, 200, &pull), &pull);
    let status = api.get(&format!("commits/{sha}/status")).await.json;
    ok(
        spec.check_answer(
            "get",
            "/repos/{owner}/{repo}/commits/{ref}/status",
            200,
            &status,
        ),
        &status,
    );
    let statuses = api.get(&format!("statuses/{sha}")).await.json;
    ok(
        spec.check_answer(
            "get",
            "/repos/{owner}/{repo}/statuses/{sha}",
            200,
            &statuses,
        ),
        &statuses,
    );
    let failed = status["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["context"] == "ci/test")
        .expect("the failed status");
    let target = failed["target_url"].as_str().unwrap();
    assert!(target.ends_with(&format!("/jobs/{job}")), "{target}");
    let jobs = api
        .get(&format!("actions/runs/{}/jobs", model_run(&status)))
        .await
        .json;
    ok(
        spec.check_answer(
            "get",
            "/repos/{owner}/{repo}/actions/runs/{run}/jobs",
            200,
            &jobs,
        ),
        &jobs,
    );
    let one = api.get(&format!("actions/jobs/{job}")).await.json;
    assert_eq!(one["conclusion"], "failure");
    ok(
        spec.check_answer(
            "get",
            "/repos/{owner}/{repo}/actions/jobs/{job_id}",
            200,
            &one,
        ),
        &one,
    );
    let reviews = api.get(&format!("pulls/{n}/reviews")).await.json;
    assert_eq!(reviews.as_array().map(Vec::len), Some(3));
    ok(
        spec.check_answer("get", &format!("{PULL}/reviews"), 200, &reviews),
        &reviews,
    );
    for review in reviews.as_array().unwrap().iter().skip(1) {
        let comments = api
            .get(&format!("pulls/{n}/reviews/{}/comments", review["id"]))
            .await
            .json;
        assert_eq!(comments.as_array().map(Vec::len), Some(1));
        ok(
            spec.check_answer(
                "get",
                &format!("{PULL}/reviews/{{id}}/comments"),
                200,
                &comments,
            ),
            &comments,
        );
    }
    let edited = api
        .send(
            reqwest::Method::PATCH,
            &format!("pulls/{n}"),
            Some(json!({"title": "one"})),
        )
        .await;
    assert_eq!(
        (edited.status, &edited.json["draft"]),
        (StatusCode::CREATED, &json!(false))
    );
    ok(
        spec.check_answer("patch", PULL, 201, &edited.json),
        &edited.json,
    );

    // The check is not a rubber stamp: a wrong type or an invented field fails it.
    let mut wrong = pull.clone();
    wrong["mergeable"] = json!("yes");
    assert!(spec.check_answer("get", PULL, 200, &wrong).is_err());
    let mut invented = status.clone();
    invented["statuses"][0]["state"] = json!("success");
    assert!(spec
        .check_answer(
            "get",
            "/repos/{owner}/{repo}/commits/{ref}/status",
            200,
            &invented
        )
        .is_err());
}

/// The actions run of a combined status's first status (`.../actions/runs/{run}/jobs/{job}`).
fn model_run(status: &Value) -> u64 {
    let url = status["statuses"][0]["target_url"].as_str().unwrap();
    let after = url.split("/actions/runs/").nth(1).unwrap();
    after.split('/').next().unwrap().parse().unwrap()
}

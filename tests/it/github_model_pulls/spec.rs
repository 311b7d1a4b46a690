//! The model's pull-request answers have the fields and types of the vendor's
//! description.

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{Api, SHA_A};
use crate::github_model::spec::PullsSpec;
use crate::github_model::GithubModel;

/// Every answer the model gives here has the fields and types of the vendor's
/// description (`tests/fixtures/github/github-pulls.openapi.json`).
#[tokio::test]
async fn the_model_answers_with_the_fields_and_types_of_the_vendor_description() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/16", "main", "Spec");
    model.push(n, SHA_A);
    let run = model.add_check_run(SHA_A, "test", "completed", Some("failure"), "1 failed", "x");
    model.add_check_run(SHA_A, "lint", "queued", None, "", "");
    model.add_annotation(run, "src/a.rs", 3, "boom");
    model.set_status(SHA_A, "ci/legacy", "pending", "");
    model.add_review(n, "alice", "APPROVED", "ok");
    let c = model.add_review_comment(n, "alice", "src/a.rs", 3, "hm");
    model.reply_to(c, "dependabot[bot]", "noted");
    let gone = model.add_review_comment(n, "bob", "src/b.rs", 1, "old");
    model.mark_outdated(gone);
    model.set_pull_labels(n, &["sortie"]);
    let api = Api::new(&model);
    let mut spec = PullsSpec::load();
    let mut check = |name: &str, value: &Value| {
        if let Err(e) = spec.check(name, value) {
            panic!("{e}\n{value:#}");
        }
    };

    let each = |list: &Value| list.as_array().expect("a list").clone();
    check(
        "pull-request",
        &api.get(&format!("pulls/{n}"), None).await.2,
    );
    for p in each(&api.get("pulls?state=all", None).await.2) {
        check("pull-request-simple", &p);
    }
    let runs = api
        .get(&format!("commits/{SHA_A}/check-runs"), None)
        .await
        .2;
    assert_eq!(runs["total_count"], 2);
    for r in each(&runs["check_runs"]) {
        check("check-run", &r);
    }
    check(
        "check-run",
        &api.get(&format!("check-runs/{run}"), None).await.2,
    );
    for a in each(
        &api.get(&format!("check-runs/{run}/annotations"), None)
            .await
            .2,
    ) {
        check("check-annotation", &a);
    }
    check(
        "combined-commit-status",
        &api.get(&format!("commits/{SHA_A}/status"), None).await.2,
    );
    for r in each(&api.get(&format!("pulls/{n}/reviews"), None).await.2) {
        check("pull-request-review", &r);
    }
    let comments = each(&api.get(&format!("pulls/{n}/comments"), None).await.2);
    assert_eq!(comments.len(), 3);
    for c in &comments {
        check("pull-request-review-comment", c);
    }
    let (status, merged) = api
        .put(&format!("pulls/{n}/merge"), json!({"sha": SHA_A}))
        .await;
    assert_eq!(status, StatusCode::OK);
    check("pull-request-merge-result", &merged);
    assert_eq!(
        spec.missing_required("pull-request-merge-result", &merged),
        Vec::<String>::new()
    );

    // The check is not a rubber stamp: a wrong type or an invented field fails it.
    let mut wrong = merged.clone();
    wrong["merged"] = json!("yes");
    assert!(spec.check("pull-request-merge-result", &wrong).is_err());
    let mut invented = comments[0].clone();
    invented["resolved"] = json!(true);
    assert!(spec
        .check("pull-request-review-comment", &invented)
        .is_err());
    let mut bad_status = runs["check_runs"][0].clone();
    bad_status["status"] = json!("done");
    assert!(spec.check("check-run", &bad_status).is_err());
}

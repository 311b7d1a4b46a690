//! The real GitHub adapter's pull-request reads and merge against the model.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{SHA_A, SHA_B};
use crate::github_model::{GithubModel, LOGIN, REPO, TOKEN};
use sortie::config::MergeMethod;
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::{
    CheckState, MergeResult, Mergeability, PullLifecycle, ReviewVerdict, Tracker,
};

fn tracker(model: &GithubModel) -> Arc<GithubTracker> {
    let settings = GithubSettings {
        repo: REPO.to_string(),
        api_url: model.api_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    };
    Arc::new(GithubTracker::new(settings, TOKEN.into(), options).unwrap())
}

/// The real adapter reads what the model serves: the state, resolved threads, a
/// failed check's annotations, and the merge with the expected head.
#[tokio::test]
async fn the_github_adapter_reads_and_merges_a_pull_request_against_the_model() {
    let model = GithubModel::start().await;
    let n = model.open_pull("sortie/15", "main", "Feature");
    model.push(n, SHA_A);
    let failed = model.add_check_run(SHA_A, "test", "completed", Some("failure"), "1 failed", "");
    model.add_annotation(failed, "tests/a.rs", 4, "assertion failed");
    model.set_status(SHA_A, "ci/legacy", "success", "ok");
    model.add_review(n, "alice", "CHANGES_REQUESTED", "please add tests");
    let c = model.add_review_comment(n, "alice", "src/x.rs", 2, "typo");
    let old = model.add_review_comment(n, "alice", "src/y.rs", 5, "old");
    model.mark_outdated(old);
    model.resolve_thread(c);
    model.set_pull_labels(n, &["sortie"]);

    let t = tracker(&model);
    let forge = t.clone().forge().expect("GitHub is a forge");
    let state = forge.pull_request_state(n).await.expect("state");
    assert_eq!(state.head_sha, SHA_A);
    assert_eq!(state.head_branch, "sortie/15");
    assert_eq!(state.lifecycle, PullLifecycle::Open);
    assert_eq!(state.mergeability, Mergeability::Clean);
    assert_eq!(state.labels, vec!["sortie".to_string()]);
    let checks: Vec<(&str, CheckState)> = state
        .checks
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        checks,
        vec![
            ("test", CheckState::Failure),
            ("ci/legacy", CheckState::Success)
        ]
    );
    assert!(state
        .reviews
        .iter()
        .any(|r| r.verdict == ReviewVerdict::ChangesRequested && r.body == "please add tests"));
    let outdated: Vec<bool> = state.comments.iter().map(|c| c.outdated).collect();
    assert_eq!(outdated, vec![false, true]);
    let resolved = forge.resolved_comments(n).await.expect("threads");
    assert_eq!(
        resolved.into_iter().collect::<Vec<_>>(),
        vec![c.to_string()]
    );
    let details = forge
        .check_details(&state.checks[0], 1000)
        .await
        .expect("details");
    assert!(
        details.contains("tests/a.rs:4: failure: assertion failed"),
        "{details}"
    );

    model.push(n, SHA_B);
    let refused = forge
        .merge_pull_request(n, SHA_A, MergeMethod::Squash)
        .await
        .expect("an answer");
    assert!(
        matches!(refused, MergeResult::Refused { .. }),
        "{refused:?}"
    );
    let merged = forge
        .merge_pull_request(n, SHA_B, MergeMethod::Squash)
        .await
        .expect("an answer");
    let pull = model.pull(n).unwrap();
    assert_eq!(
        merged,
        MergeResult::Merged {
            sha: pull.merge_commit_sha.clone().unwrap()
        }
    );
    let after = forge.pull_request_state(n).await.expect("state");
    assert!(
        matches!(after.lifecycle, PullLifecycle::Merged { merged_by: Some(ref who), .. } if who == LOGIN)
    );
    assert_eq!(model.merge_calls().len(), 2);
    assert_eq!(
        model.merge_calls()[1].1,
        json!({"sha": SHA_B, "merge_method": "squash"})
    );
}

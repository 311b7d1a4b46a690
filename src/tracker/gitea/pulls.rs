//! The Gitea `Forge`: a pull request opened once per branch, and its state for the
//! reactions (issue #32): the pull request, the head's combined commit status, reviews
//! and the comments of reviews that have any; the merge with the expected head commit.

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{json, Value};

use super::GiteaTracker;
use crate::config::MergeMethod;
use crate::tracker::forge_core::{json_array, json_flag, json_text};
use crate::tracker::http::encode;
use crate::tracker::pulls::{
    id_of, tail_excerpt, Check, CheckState, MergeResult, Mergeability, PullLifecycle, PullState,
    Review, ReviewComment, ReviewVerdict,
};
use crate::tracker::rest::error_message;
use crate::tracker::TrackerError;
use crate::tracker::{Forge, PullRequest, PullRequestSpec};

/// How much of a review's or a comment's body is kept.
const TEXT_CHARS: usize = 4000;
/// The statuses Gitea answers a merge it refuses with: 405 (not mergeable: checks or
/// approvals missing, a merge style the repository does not allow), 409 (`head out
/// of date`: `head_commit_id` is no longer the head; or a conflict), 422.
const REFUSED: [u16; 3] = [405, 409, 422];
/// Title prefixes Gitea reads as work in progress (its default `WORK_IN_PROGRESS_PREFIXES`).
const WIP_PREFIXES: [&str; 2] = ["WIP:", "[WIP]"];

#[async_trait]
impl Forge for GiteaTracker {
    /// Pull requests: the open one from the branch into `base` (`GET /pulls/{base}/{head}`,
    /// Gitea 1.21+) is reused; else one is created (a draft gets Gitea's `WIP: ` title
    /// prefix). A create refused because one exists (409, a race) reads it back.
    async fn open_pull_request(&self, spec: &PullRequestSpec) -> Result<PullRequest, TrackerError> {
        let find = format!(
            "{}/pulls/{}/{}",
            self.core.project,
            encode(&spec.base),
            encode(&spec.head)
        );
        let lookup = || async {
            match self.core.client.get_json::<Value>(&find).await {
                Ok(v) if v.get("state").and_then(Value::as_str) == Some("open") => {
                    self.core.pull(&v, true).map(Some)
                }
                Ok(_) | Err(TrackerError::NotFound(_)) => Ok(None),
                Err(err) => Err(err),
            }
        };
        let title = self.core.pull_title(&spec.title, spec.draft);
        let body =
            json!({ "head": spec.head, "base": spec.base, "title": title, "body": spec.body });
        self.core.find_or_open(lookup, &body).await
    }

    /// Pull request `index`, the head's combined status, reviews and their comments. A
    /// failed status's details are its description (the default `check_details`).
    async fn pull_request_state(&self, index: u64) -> Result<PullState, TrackerError> {
        let pull_path = format!("{}/pulls/{index}", self.core.project);
        let pull: Value = self.core.client.get_json(&pull_path).await?;
        let mut state = pull_request_state(index, &pull);
        if state.lifecycle != PullLifecycle::Open || state.head_sha.is_empty() {
            return Ok(state);
        }
        let status_path = format!(
            "{}/commits/{}/status",
            self.core.project,
            super::encode(&state.head_sha)
        );
        let combined: Value = self.core.client.get_json(&status_path).await?;
        state.checks = json_array(&combined, "statuses")
            .iter()
            .map(status_check)
            .collect();
        let reviews = self.all_pages(&format!("{pull_path}/reviews")).await?;
        state.reviews = reviews.iter().map(review).collect();
        for with_comments in reviews.iter().filter(|r| {
            r.get("comments_count")
                .and_then(Value::as_u64)
                .is_some_and(|n| n > 0)
        }) {
            let Some(id) = with_comments.get("id").and_then(Value::as_u64) else {
                continue;
            };
            let comments: Vec<Value> = self
                .core
                .client
                .get_json(&format!("{pull_path}/reviews/{id}/comments"))
                .await?;
            state.comments.extend(comments.iter().map(review_comment));
        }
        Ok(state)
    }

    /// `POST .../pulls/{index}/merge` with `do` and the expected `head_commit_id`; the
    /// pull request is read again for its merge commit (the merge answers no body).
    async fn merge_pull_request(
        &self,
        index: u64,
        expected_head: &str,
        method: MergeMethod,
    ) -> Result<MergeResult, TrackerError> {
        let pull_path = format!("{}/pulls/{index}", self.core.project);
        let body = json!({ "do": method.as_str(), "head_commit_id": expected_head });
        let reply = self
            .core
            .client
            .send_accepting(
                Method::POST,
                &format!("{pull_path}/merge"),
                Some(&body),
                &REFUSED,
            )
            .await?;
        if REFUSED.contains(&reply.status) {
            return Ok(MergeResult::Refused {
                reason: format!(
                    "Gitea answered {}: {}",
                    reply.status,
                    error_message(&reply.body)
                ),
            });
        }
        let pull: Value = self.core.client.get_json(&pull_path).await?;
        match json_text(&pull, "/merge_commit_sha").filter(|s| !s.is_empty()) {
            Some(sha) => Ok(MergeResult::Merged { sha }),
            None => Err(TrackerError::Invalid(format!(
                "pull request {index} was merged but Gitea names no merge_commit_sha"
            ))),
        }
    }
}

/// The pull request's own fields: head, lifecycle, mergeability, labels.
fn pull_request_state(index: u64, pull: &Value) -> PullState {
    let head_sha = json_text(pull, "/head/sha").unwrap_or_default();
    let url = json_text(pull, "/html_url").unwrap_or_default();
    let mut state = PullState::open(index, &url, &head_sha);
    state.head_branch = json_text(pull, "/head/ref").unwrap_or_default();
    state.base_branch = json_text(pull, "/base/ref").unwrap_or_default();
    state.draft = is_draft(pull);
    state.labels = json_array(pull, "labels")
        .iter()
        .filter_map(|l| json_text(l, "/name"))
        .collect();
    state.lifecycle = if pull.get("merged").and_then(Value::as_bool) == Some(true) {
        PullLifecycle::Merged {
            merge_commit: json_text(pull, "/merge_commit_sha").filter(|s| !s.is_empty()),
            merged_by: json_text(pull, "/merged_by/login"),
        }
    } else if pull.get("state").and_then(Value::as_str) == Some("closed") {
        PullLifecycle::Closed
    } else {
        PullLifecycle::Open
    };
    state.mergeability = match pull.get("mergeable").and_then(Value::as_bool) {
        Some(true) => Mergeability::Clean,
        // Gitea says `false` for a conflict and for anything else that stops a merge.
        Some(false) => Mergeability::Conflict,
        None => Mergeability::Unknown,
    };
    state
}

/// `draft` where Gitea sends it, else a work-in-progress title prefix.
fn is_draft(pull: &Value) -> bool {
    match pull.get("draft").and_then(Value::as_bool) {
        Some(draft) => draft,
        None => {
            let title = json_text(pull, "/title").unwrap_or_default();
            let title = title.trim_start().to_ascii_uppercase();
            WIP_PREFIXES.iter().any(|p| title.starts_with(p))
        }
    }
}

/// One commit status of the combined status as a check.
fn status_check(status: &Value) -> Check {
    // The swagger names the field `status`; GitHub-shaped answers say `state`.
    let said = json_text(status, "/status").or_else(|| json_text(status, "/state"));
    Check {
        id: format!(
            "status:{}",
            status.get("id").and_then(Value::as_u64).unwrap_or(0)
        ),
        name: json_text(status, "/context").unwrap_or_default(),
        state: status_state(said.as_deref()),
        url: json_text(status, "/target_url").filter(|u| !u.is_empty()),
        summary: tail_excerpt(
            &json_text(status, "/description").unwrap_or_default(),
            TEXT_CHARS,
        ),
    }
}

/// A commit status: `error` and `failure` failed, `warning` is neither.
fn status_state(state: Option<&str>) -> CheckState {
    match state {
        Some("success") => CheckState::Success,
        Some("error" | "failure") => CheckState::Failure,
        Some("warning") => CheckState::Neutral,
        _ => CheckState::Pending,
    }
}

fn review(value: &Value) -> Review {
    let gone = json_flag(value, "stale") || json_flag(value, "dismissed");
    let verdict = match value.get("state").and_then(Value::as_str) {
        _ if gone => ReviewVerdict::Other,
        Some("APPROVED") => ReviewVerdict::Approved,
        Some("REQUEST_CHANGES") => ReviewVerdict::ChangesRequested,
        Some("COMMENT") => ReviewVerdict::Commented,
        _ => ReviewVerdict::Other,
    };
    Review {
        id: id_of(value),
        author: login(value),
        bot: is_bot(value),
        verdict,
        body: tail_excerpt(&json_text(value, "/body").unwrap_or_default(), TEXT_CHARS),
        submitted_at: json_text(value, "/submitted_at"),
        url: json_text(value, "/html_url"),
    }
}

/// A review comment. Gitea's `position` is the line on the new side of the diff and
/// `original_position` the line on the old side (a removed line): the API does not say
/// whether a later push outdated the comment, so `outdated` stays false.
fn review_comment(value: &Value) -> ReviewComment {
    let line_at = |key: &str| value.get(key).and_then(Value::as_u64).filter(|n| *n > 0);
    ReviewComment {
        id: id_of(value),
        author: login(value),
        bot: is_bot(value),
        path: json_text(value, "/path").filter(|p| !p.is_empty()),
        line: line_at("position").or_else(|| line_at("original_position")),
        body: tail_excerpt(&json_text(value, "/body").unwrap_or_default(), TEXT_CHARS),
        url: json_text(value, "/html_url"),
        resolved: value.get("resolver").is_some_and(|r| !r.is_null()),
        outdated: false,
        updated_at: json_text(value, "/updated_at").or_else(|| json_text(value, "/created_at")),
    }
}

fn login(value: &Value) -> String {
    json_text(value, "/user/login").unwrap_or_else(|| "ghost".to_string())
}

/// Gitea's users carry no bot flag: a `[bot]` login suffix is the convention.
fn is_bot(value: &Value) -> bool {
    login(value).ends_with("[bot]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_statuses_map_onto_check_states() {
        assert_eq!(status_state(Some("success")), CheckState::Success);
        assert_eq!(status_state(Some("failure")), CheckState::Failure);
        assert_eq!(status_state(Some("error")), CheckState::Failure);
        assert_eq!(status_state(Some("warning")), CheckState::Neutral);
        assert_eq!(status_state(Some("pending")), CheckState::Pending);
        let check = status_check(&json!({
            "id": 8, "context": "ci/build", "status": "failure",
            "description": "3 tests failed", "target_url": "https://ci.example/8"
        }));
        assert_eq!(check.id, "status:8");
        assert_eq!(check.state, CheckState::Failure);
        assert_eq!(check.summary, "3 tests failed");
        assert_eq!(check.url.as_deref(), Some("https://ci.example/8"));
    }

    #[test]
    fn mergeable_false_is_a_conflict_and_a_wip_title_a_draft_without_the_field() {
        let pull = |extra: Value| {
            let mut p = json!({"number": 3, "state": "open", "title": "Add x",
                "head": {"ref": "t-3", "sha": "abc"}, "base": {"ref": "main"}});
            p.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            pull_request_state(3, &p)
        };
        assert_eq!(
            pull(json!({"mergeable": true})).mergeability,
            Mergeability::Clean
        );
        assert_eq!(
            pull(json!({"mergeable": false})).mergeability,
            Mergeability::Conflict
        );
        assert_eq!(pull(json!({})).mergeability, Mergeability::Unknown);
        assert!(pull(json!({"title": "WIP: Add x"})).draft);
        assert!(pull(json!({"title": "[wip] Add x"})).draft);
        assert!(!pull(json!({"title": "WIP: Add x", "draft": false})).draft);
        assert!(!pull(json!({})).draft);
        let merged = pull(json!({"merged": true, "state": "closed",
            "merge_commit_sha": "m1", "merged_by": {"login": "alice"}}));
        assert_eq!(
            merged.lifecycle,
            PullLifecycle::Merged {
                merge_commit: Some("m1".into()),
                merged_by: Some("alice".into())
            }
        );
        assert_eq!(
            pull(json!({"state": "closed"})).lifecycle,
            PullLifecycle::Closed
        );
    }

    #[test]
    fn stale_and_dismissed_reviews_count_for_nothing() {
        let r = |state: &str, extra: Value| {
            let mut v = json!({"id": 1, "state": state, "user": {"login": "rev"}});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            review(&v).verdict
        };
        assert_eq!(r("APPROVED", json!({})), ReviewVerdict::Approved);
        assert_eq!(
            r("REQUEST_CHANGES", json!({})),
            ReviewVerdict::ChangesRequested
        );
        assert_eq!(r("COMMENT", json!({})), ReviewVerdict::Commented);
        assert_eq!(r("PENDING", json!({})), ReviewVerdict::Other);
        assert_eq!(r("APPROVED", json!({"stale": true})), ReviewVerdict::Other);
        assert_eq!(
            r("REQUEST_CHANGES", json!({"dismissed": true})),
            ReviewVerdict::Other
        );
    }

    #[test]
    fn a_comment_is_resolved_by_its_resolver_and_keeps_the_line_of_either_side() {
        let open = review_comment(&json!({
            "id": 40, "body": "typo", "path": "src/lib.rs", "position": 7,
            "original_position": 0, "resolver": null, "user": {"login": "rev"},
            "html_url": "https://gitea/p/4#issuecomment-40"
        }));
        assert!(!open.resolved && !open.outdated);
        assert_eq!(open.line, Some(7));
        let resolved = review_comment(&json!({
            "id": 41, "body": "why removed?", "path": "src/lib.rs", "position": 0,
            "original_position": 9, "resolver": {"login": "dev"},
            "user": {"login": "lint[bot]"}
        }));
        assert!(resolved.resolved && resolved.bot);
        assert_eq!(resolved.line, Some(9), "a comment on a removed line");
    }
}

//! A GitHub pull request's state for the reactions (issue #32): the pull request,
//! the head's check runs and combined status, reviews and review comments, each a
//! conditional `GET` (an unchanged pull request costs no rate-limit units); resolved
//! review threads through GraphQL, read only when comments are about to be handed
//! over; a failed GitHub Actions job's log tail, read only when its failure is handed
//! over; the merge with the expected head SHA.

use std::collections::HashSet;

use reqwest::Method;
use serde_json::{json, Value};

use super::api::GithubApi;
use crate::config::MergeMethod;
use crate::tracker::http::Retry;
use crate::tracker::pulls::{
    id_of, tail_excerpt, Check, CheckState, MergeResult, Mergeability, PullLifecycle, PullState,
    Review, ReviewComment, ReviewVerdict,
};
use crate::tracker::TrackerError;

/// How much of a check's output or a comment's body is kept.
const TEXT_CHARS: usize = 4000;
/// Annotations read for one failed check run at most (one page).
const ANNOTATIONS: &str = "50";

/// Read pull request `number` and what hangs off its head.
pub(super) async fn state(api: &GithubApi, number: u64) -> Result<PullState, TrackerError> {
    let n = number.to_string();
    let pull = api.get_json(&["pulls", &n], &[], "GET pull").await?;
    let head_sha = text(&pull, "/head/sha");
    let mut state = PullState::open(number, &text(&pull, "/html_url"), &head_sha);
    state.head_branch = text(&pull, "/head/ref");
    state.base_branch = text(&pull, "/base/ref");
    state.draft = pull.get("draft").and_then(Value::as_bool).unwrap_or(false);
    state.labels = names(&pull, "labels", "name");
    state.lifecycle = if pull.get("merged").and_then(Value::as_bool) == Some(true)
        || pull.get("merged_at").is_some_and(|m| !m.is_null())
    {
        PullLifecycle::Merged {
            merge_commit: opt_text(&pull, "/merge_commit_sha"),
            merged_by: opt_text(&pull, "/merged_by/login"),
        }
    } else if pull.get("state").and_then(Value::as_str) == Some("closed") {
        PullLifecycle::Closed
    } else {
        PullLifecycle::Open
    };
    state.mergeability = match (
        pull.get("mergeable").and_then(Value::as_bool),
        pull.get("mergeable_state").and_then(Value::as_str),
    ) {
        (_, Some("dirty")) | (Some(false), _) => Mergeability::Conflict,
        (_, Some("clean")) | (_, Some("has_hooks")) => Mergeability::Clean,
        (Some(true), Some("unstable")) => Mergeability::Clean,
        (Some(true), _) => Mergeability::Blocked,
        _ => Mergeability::Unknown,
    };
    if state.lifecycle != PullLifecycle::Open || head_sha.is_empty() {
        api.save_cache();
        return Ok(state);
    }

    let runs = api
        .get_json(
            &["commits", &head_sha, "check-runs"],
            &[("per_page", "100")],
            "GET check-runs",
        )
        .await?;
    for run in array(&runs, "check_runs") {
        state.checks.push(check_run(run));
    }
    let combined = api
        .get_json(&["commits", &head_sha, "status"], &[], "GET status")
        .await?;
    for status in array(&combined, "statuses") {
        state.checks.push(commit_status(status));
    }
    let reviews = api.list(&["pulls", &n, "reviews"]).await?;
    state.reviews = reviews.items.iter().map(review).collect();
    let comments = api.list(&["pulls", &n, "comments"]).await?;
    state.comments = comments.items.iter().map(review_comment).collect();
    api.save_cache();
    Ok(state)
}

/// The ids of review comments whose thread is resolved (GraphQL `reviewThreads`).
pub(super) async fn resolved(
    api: &GithubApi,
    number: u64,
) -> Result<HashSet<String>, TrackerError> {
    let query = "query($owner: String!, $name: String!, $number: Int!) { \
        repository(owner: $owner, name: $name) { pullRequest(number: $number) { \
        reviewThreads(first: 100) { nodes { isResolved isOutdated \
        comments(first: 100) { nodes { databaseId } } } } } } }";
    let answer = api.graphql(query, json!({ "number": number })).await?;
    if let Some(errors) = answer.get("errors").and_then(Value::as_array) {
        let first = errors
            .first()
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("an error");
        return Err(TrackerError::Invalid(format!(
            "GraphQL reviewThreads of pull request {number}: {first}"
        )));
    }
    let threads = answer
        .pointer("/data/repository/pullRequest/reviewThreads/nodes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = HashSet::new();
    for thread in threads {
        if thread.get("isResolved").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let ids = thread
            .pointer("/comments/nodes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        out.extend(
            ids.iter()
                .filter_map(|c| c.get("databaseId").and_then(Value::as_u64))
                .map(|id| id.to_string()),
        );
    }
    Ok(out)
}

/// A failed check run's output and annotations, and the tail of its job's log when it
/// is a GitHub Actions job.
pub(super) async fn check_details(
    api: &GithubApi,
    check: &Check,
    max_chars: usize,
) -> Result<String, TrackerError> {
    let Some(run_id) = check.id.strip_prefix("run:") else {
        return Ok(tail_excerpt(&check.summary, max_chars));
    };
    let annotations = api
        .get_json(
            &["check-runs", run_id, "annotations"],
            &[("per_page", ANNOTATIONS)],
            "GET annotations",
        )
        .await?;
    let lines: Vec<String> = annotations
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            format!(
                "{}:{}: {}: {}",
                text(a, "/path"),
                a.get("start_line").and_then(Value::as_u64).unwrap_or(0),
                text(a, "/annotation_level"),
                text(a, "/message")
            )
        })
        .collect();
    let mut out = check.summary.clone();
    if !lines.is_empty() {
        out = format!("{out}\n{}", lines.join("\n"));
    }
    if let Some(job) = check.url.as_deref().and_then(actions_job) {
        match job_log(api, job).await {
            Ok(log) if !log.trim().is_empty() => {
                // The output and annotations get at most half; the log's tail (where
                // it failed) the rest, with room for the line saying what was cut.
                let head = tail_excerpt(out.trim(), max_chars / 2);
                let room = max_chars.saturating_sub(head.chars().count() + 64);
                out = format!("{head}\nLog tail:\n{}", tail_excerpt(log.trim_end(), room));
            }
            Ok(_) => {}
            // Expired or never kept: the annotations and output are what there is.
            Err(TrackerError::NotFound(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(tail_excerpt(out.trim(), max_chars))
}

/// The GitHub Actions job a check run is, from its page
/// (`https://github.com/o/r/actions/runs/123/job/456` -> `456`): an Actions check run's
/// id is its job's.
fn actions_job(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("/actions/runs/")?;
    let (run, job) = rest.split_once("/job/")?;
    let job = job.split(['?', '#', '/']).next()?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    (digits(run) && digits(job)).then_some(job)
}

/// `GET .../actions/jobs/{job}/logs`: GitHub answers with a redirect to a short-lived
/// download URL on another host, which the client follows without the token (it drops
/// `Authorization` on a redirect to another host).
async fn job_log(api: &GithubApi, job: &str) -> Result<String, TrackerError> {
    let url = api.repo_url(&["actions", "jobs", job, "logs"]);
    let reply = api.send(Method::GET, &url, None, Retry::Safe).await?;
    Ok(reply.body)
}

/// `PUT .../pulls/{n}/merge` with the expected head SHA; a refusal (409 head moved,
/// 405 not mergeable, 422) is [`MergeResult::Refused`].
pub(super) async fn merge(
    api: &GithubApi,
    number: u64,
    expected_head: &str,
    method: MergeMethod,
) -> Result<MergeResult, TrackerError> {
    let body = json!({ "sha": expected_head, "merge_method": method.as_str() });
    match api
        .send_json(Method::PUT, &["pulls", &number.to_string(), "merge"], body)
        .await
    {
        Ok(answer) => match answer.get("sha").and_then(Value::as_str) {
            Some(sha) => Ok(MergeResult::Merged {
                sha: sha.to_string(),
            }),
            None => Err(TrackerError::Invalid(format!(
                "the merge of pull request {number} answered no sha"
            ))),
        },
        Err(TrackerError::Invalid(reason)) => Ok(MergeResult::Refused { reason }),
        Err(err) => Err(err),
    }
}

fn check_run(run: &Value) -> Check {
    let state = match (
        run.get("status").and_then(Value::as_str),
        run.get("conclusion").and_then(Value::as_str),
    ) {
        (Some("completed"), Some("success")) => CheckState::Success,
        (Some("completed"), Some("neutral" | "skipped")) => CheckState::Neutral,
        (Some("completed"), Some(_)) => CheckState::Failure,
        _ => CheckState::Pending,
    };
    let summary = [
        text(run, "/output/title"),
        text(run, "/output/summary"),
        text(run, "/output/text"),
    ]
    .into_iter()
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join("\n");
    Check {
        id: format!("run:{}", run.get("id").and_then(Value::as_u64).unwrap_or(0)),
        name: text(run, "/name"),
        state,
        url: opt_text(run, "/html_url").or_else(|| opt_text(run, "/details_url")),
        summary: tail_excerpt(&summary, TEXT_CHARS),
    }
}

fn commit_status(status: &Value) -> Check {
    let state = match status.get("state").and_then(Value::as_str) {
        Some("success") => CheckState::Success,
        Some("failure" | "error") => CheckState::Failure,
        _ => CheckState::Pending,
    };
    Check {
        id: format!(
            "status:{}",
            status.get("id").and_then(Value::as_u64).unwrap_or(0)
        ),
        name: text(status, "/context"),
        state,
        url: opt_text(status, "/target_url"),
        summary: tail_excerpt(&text(status, "/description"), TEXT_CHARS),
    }
}

fn review(value: &Value) -> Review {
    Review {
        id: id_of(value),
        author: text(value, "/user/login"),
        bot: is_bot(value),
        verdict: match value.get("state").and_then(Value::as_str) {
            Some("APPROVED") => ReviewVerdict::Approved,
            Some("CHANGES_REQUESTED") => ReviewVerdict::ChangesRequested,
            Some("COMMENTED") => ReviewVerdict::Commented,
            _ => ReviewVerdict::Other,
        },
        body: tail_excerpt(&text(value, "/body"), TEXT_CHARS),
        submitted_at: opt_text(value, "/submitted_at"),
        url: opt_text(value, "/html_url"),
    }
}

fn review_comment(value: &Value) -> ReviewComment {
    let line = value.get("line").and_then(Value::as_u64);
    let outdated = value.get("position").is_some_and(Value::is_null) && line.is_none();
    ReviewComment {
        id: id_of(value),
        author: text(value, "/user/login"),
        bot: is_bot(value),
        path: opt_text(value, "/path"),
        line,
        body: tail_excerpt(&text(value, "/body"), TEXT_CHARS),
        url: opt_text(value, "/html_url"),
        resolved: false,
        outdated,
        updated_at: opt_text(value, "/updated_at").or_else(|| opt_text(value, "/created_at")),
    }
}

fn is_bot(value: &Value) -> bool {
    value.pointer("/user/type").and_then(Value::as_str) == Some("Bot")
        || text(value, "/user/login").ends_with("[bot]")
}

fn text(value: &Value, pointer: &str) -> String {
    opt_text(value, pointer).unwrap_or_default()
}

fn opt_text(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn names(value: &Value, list: &str, field: &str) -> Vec<String> {
    array(value, list)
        .iter()
        .filter_map(|v| v.get(field).and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

impl GithubApi {
    /// `GET /repos/{o}/{r}/<segments>?<query>`, conditional (ETag persisted, so the
    /// next cron process gets a free 304 too).
    pub(super) async fn get_json(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
        what: &str,
    ) -> Result<Value, TrackerError> {
        let mut url = self.repo_url(segments);
        for (k, v) in query {
            url.query_pairs_mut().append_pair(k, v);
        }
        let page = self.get_conditional(url.as_str(), true).await?;
        super::api::parse_json(&page.body, what)
    }

    /// Every item of `GET /repos/{o}/{r}/<segments>?per_page=100`, conditional and persisted.
    pub(super) async fn list(&self, segments: &[&str]) -> Result<super::api::Items, TrackerError> {
        let mut url = self.repo_url(segments);
        url.query_pairs_mut().append_pair("per_page", "100");
        self.all_pages(url, true).await
    }

    /// A write to `/repos/{o}/{r}/<segments>`, never retried once it may have arrived.
    pub(super) async fn send_json(
        &self,
        method: Method,
        segments: &[&str],
        body: Value,
    ) -> Result<Value, TrackerError> {
        let url = self.repo_url(segments);
        let reply = self
            .send(method.clone(), &url, Some(body), Retry::ConnectOnly)
            .await?;
        super::api::parse_json(&reply.body, &format!("{method} {}", segments.join("/")))
    }

    /// `POST` a GraphQL query (`/graphql`, or `/api/graphql` on GitHub Enterprise Server)
    /// with `owner` and `name` bound to the repository.
    pub(super) async fn graphql(
        &self,
        query: &str,
        variables: Value,
    ) -> Result<Value, TrackerError> {
        let mut vars = variables;
        if let Value::Object(map) = &mut vars {
            map.insert("owner".into(), Value::String(self.owner().to_string()));
            map.insert("name".into(), Value::String(self.repo_name().to_string()));
        }
        let url = self.graphql_url();
        let reply = self
            .send(
                Method::POST,
                &url,
                Some(json!({ "query": query, "variables": vars })),
                Retry::Safe,
            )
            .await?;
        super::api::parse_json(&reply.body, "POST graphql")
    }
}

#[cfg(test)]
mod tests {
    use super::actions_job;

    #[test]
    fn an_actions_check_runs_job_is_read_from_its_page_and_nothing_else_is() {
        assert_eq!(
            actions_job("https://github.com/a/b/actions/runs/123/job/456"),
            Some("456")
        );
        assert_eq!(
            actions_job("https://github.com/a/b/actions/runs/123/job/456?pr=7"),
            Some("456")
        );
        assert_eq!(actions_job("https://github.com/a/b/runs/456"), None);
        assert_eq!(actions_job("https://ci.example/actions/runs/x/job/1"), None);
        assert_eq!(
            actions_job("https://github.com/a/b/actions/runs/1/job/"),
            None
        );
    }
}

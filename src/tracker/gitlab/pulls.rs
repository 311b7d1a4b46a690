//! The GitLab `Forge`: a merge request opened once per branch, and its state for the
//! reactions (issue #32): the merge request, its head pipeline's jobs, its discussions
//! (diff notes and resolvable threads) and its approvals; a failed job's trace; the
//! merge with the expected head SHA.

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{json, Value};

use super::GitlabTracker;
use crate::config::MergeMethod;
use crate::tracker::forge_core::{json_array, json_flag, json_text};
use crate::tracker::http::encode;
use crate::tracker::pulls::{
    tail_excerpt, Check, CheckState, MergeResult, Mergeability, PullLifecycle, PullState, Review,
    ReviewComment, ReviewVerdict,
};
use crate::tracker::rest::error_message;
use crate::tracker::TrackerError;
use crate::tracker::{Forge, PullRequest, PullRequestSpec};

/// How much of a note's body or a job's summary is kept.
const TEXT_CHARS: usize = 4000;
/// The statuses GitLab answers a merge it refuses with: 405 (not mergeable: draft,
/// closed, pipeline or approvals missing), 406 (branch cannot be merged: conflict),
/// 409 (the `sha` is no longer the head), 422 (a rule of the project refused it).
const REFUSED: [u16; 4] = [405, 406, 409, 422];
/// The prefix of a job's check id, which `check_details` reads the trace of.
const JOB: &str = "job:";

#[async_trait]
impl Forge for GitlabTracker {
    /// Merge requests: an open one with the branch as `source_branch` is reused; else
    /// one is created (a draft gets GitLab's `Draft: ` title prefix). A create refused
    /// because one exists (409, a race) reads it back.
    async fn open_pull_request(&self, spec: &PullRequestSpec) -> Result<PullRequest, TrackerError> {
        let find = format!(
            "{}/merge_requests?state=opened&source_branch={}",
            self.core.project,
            encode(&spec.head)
        );
        let find = || async {
            let items: Vec<Value> = self.core.client.get_json(&find).await?;
            items.first().map(|v| self.core.pull(v, true)).transpose()
        };
        let body = json!({
            "source_branch": spec.head,
            "target_branch": spec.base,
            "title": self.core.pull_title(&spec.title, spec.draft),
            "description": spec.body,
        });
        self.core.find_or_open(find, &body).await
    }

    /// Merge request `iid`, its head pipeline's jobs, discussions and approvals.
    async fn pull_request_state(&self, iid: u64) -> Result<PullState, TrackerError> {
        let mr_path = format!("{}/merge_requests/{iid}", self.core.project);
        let mr: Value = self.core.client.get_json(&mr_path).await?;
        let mut state = merge_request_state(iid, &mr);
        if state.lifecycle != PullLifecycle::Open || state.head_sha.is_empty() {
            return Ok(state);
        }
        if let Some(pipeline) = self.head_pipeline(&mr_path, &mr, &state.head_sha).await? {
            let first = format!(
                "{}/pipelines/{pipeline}/jobs?per_page={}",
                self.core.project,
                super::PER_PAGE
            );
            let jobs = self.all_pages(first).await?;
            state.checks = jobs.iter().map(job_check).collect();
        }
        let first = format!("{mr_path}/discussions?per_page={}", super::PER_PAGE);
        let discussions = self.all_pages(first).await?;
        state.comments = discussions
            .iter()
            .flat_map(|d| discussion_comments(d, &state.url))
            .collect();
        let approvals: Value = self
            .core
            .client
            .get_json(&format!("{mr_path}/approvals"))
            .await?;
        state.reviews = approval_reviews(&approvals);
        Ok(state)
    }

    /// A failed job's trace, its tail kept, without ANSI colours and section markers.
    async fn check_details(&self, check: &Check, max_chars: usize) -> Result<String, TrackerError> {
        let Some(job) = check.id.strip_prefix(JOB) else {
            return Ok(tail_excerpt(&check.summary, max_chars));
        };
        let path = format!("{}/jobs/{job}/trace", self.core.project);
        let reply = self.core.client.get_text(&path).await?;
        let log = clean_trace(&reply.body);
        let log = log.trim();
        if log.is_empty() {
            return Ok(tail_excerpt(&check.summary, max_chars));
        }
        Ok(tail_excerpt(log, max_chars))
    }

    /// `PUT .../merge_requests/{iid}/merge` with the expected head `sha` (and `squash`);
    /// GitLab refuses a head that moved with 409.
    async fn merge_pull_request(
        &self,
        iid: u64,
        expected_head: &str,
        method: MergeMethod,
    ) -> Result<MergeResult, TrackerError> {
        let mut body = json!({ "sha": expected_head });
        match method {
            MergeMethod::Merge => {}
            MergeMethod::Squash => body["squash"] = json!(true),
            MergeMethod::Rebase => {
                return Err(TrackerError::Unsupported(format!(
                    "GitLab merges merge request {iid} with the project's own merge method \
                     (Settings > Merge requests: merge commit, semi-linear or fast-forward); \
                     set reactions.auto_merge.method to `merge` or `squash`, and pick \
                     fast-forward in the project for a linear history"
                )))
            }
        }
        let path = format!("{}/merge_requests/{iid}/merge", self.core.project);
        let reply = self
            .core
            .client
            .send_accepting(Method::PUT, &path, Some(&body), &REFUSED)
            .await?;
        if REFUSED.contains(&reply.status) {
            return Ok(MergeResult::Refused {
                reason: format!(
                    "GitLab answered {}: {}",
                    reply.status,
                    error_message(&reply.body)
                ),
            });
        }
        let merged: Value = reply.json(&format!("PUT merge of !{iid}"))?;
        match merged_sha(&merged) {
            Some(sha) => Ok(MergeResult::Merged { sha }),
            None => Err(TrackerError::Invalid(format!(
                "the merge of merge request !{iid} answered no merge_commit_sha, \
                 squash_commit_sha or sha"
            ))),
        }
    }
}

impl GitlabTracker {
    /// The id of the pipeline that ran on `head`: the merge request's `head_pipeline`,
    /// else the newest of its pipelines whose `sha` is the head.
    async fn head_pipeline(
        &self,
        mr_path: &str,
        mr: &Value,
        head: &str,
    ) -> Result<Option<u64>, TrackerError> {
        let named = mr.pointer("/head_pipeline/id").and_then(Value::as_u64);
        let on_head = json_text(mr, "/head_pipeline/sha").is_none_or(|sha| sha == head);
        if let (Some(id), true) = (named, on_head) {
            return Ok(Some(id));
        }
        let pipelines: Vec<Value> = self
            .core
            .client
            .get_json(&format!("{mr_path}/pipelines"))
            .await?;
        Ok(pipelines
            .iter()
            .find(|p| json_text(p, "/sha").as_deref() == Some(head))
            .and_then(|p| p.get("id").and_then(Value::as_u64)))
    }
}

/// The merge request's own fields: head, lifecycle, mergeability, labels.
fn merge_request_state(iid: u64, mr: &Value) -> PullState {
    let head_sha = json_text(mr, "/sha").unwrap_or_default();
    let url = json_text(mr, "/web_url").unwrap_or_default();
    let mut state = PullState::open(iid, &url, &head_sha);
    state.head_branch = json_text(mr, "/source_branch").unwrap_or_default();
    state.base_branch = json_text(mr, "/target_branch").unwrap_or_default();
    state.draft = json_flag(mr, "draft") || json_flag(mr, "work_in_progress");
    state.labels = json_array(mr, "labels")
        .iter()
        .filter_map(|l| {
            l.as_str()
                .map(str::to_string)
                .or_else(|| json_text(l, "/name"))
        })
        .collect();
    state.lifecycle = match mr.get("state").and_then(Value::as_str) {
        Some("merged") => PullLifecycle::Merged {
            merge_commit: json_text(mr, "/merge_commit_sha")
                .or_else(|| json_text(mr, "/squash_commit_sha")),
            merged_by: json_text(mr, "/merged_by/username")
                .or_else(|| json_text(mr, "/merge_user/username")),
        },
        Some("closed" | "locked") => PullLifecycle::Closed,
        _ => PullLifecycle::Open,
    };
    state.mergeability = mergeability(
        mr.get("detailed_merge_status").and_then(Value::as_str),
        mr.get("merge_status").and_then(Value::as_str),
        mr.get("has_conflicts").and_then(Value::as_bool),
    );
    state
}

/// GitLab's `detailed_merge_status` (or the older `merge_status`) and `has_conflicts`.
fn mergeability(
    detailed: Option<&str>,
    merge_status: Option<&str>,
    conflicts: Option<bool>,
) -> Mergeability {
    if conflicts == Some(true) {
        return Mergeability::Conflict;
    }
    match detailed {
        Some("mergeable") => Mergeability::Clean,
        Some("conflict" | "broken_status") => Mergeability::Conflict,
        Some("checking" | "unchecked" | "preparing" | "approvals_syncing") => Mergeability::Unknown,
        Some(_) => Mergeability::Blocked,
        None => match merge_status {
            Some("can_be_merged") => Mergeability::Clean,
            Some("cannot_be_merged") => Mergeability::Conflict,
            Some("cannot_be_merged_recheck") => Mergeability::Blocked,
            _ => Mergeability::Unknown,
        },
    }
}

/// A pipeline job as a check: a failure allowed to fail is neutral.
fn job_check(job: &Value) -> Check {
    let allowed = json_flag(job, "allow_failure");
    let state = job_state(job.get("status").and_then(Value::as_str), allowed);
    let mut said = Vec::new();
    if let Some(stage) = json_text(job, "/stage") {
        said.push(format!("stage {stage}"));
    }
    if let Some(reason) = json_text(job, "/failure_reason") {
        said.push(format!("failure reason {reason}"));
    }
    if allowed && state == CheckState::Neutral {
        said.push("allowed to fail".to_string());
    }
    Check {
        id: format!(
            "{JOB}{}",
            job.get("id").and_then(Value::as_u64).unwrap_or(0)
        ),
        name: json_text(job, "/name").unwrap_or_default(),
        state,
        url: json_text(job, "/web_url"),
        summary: said.join("; "),
    }
}

/// A job's `status`: `failed` (and `canceled`) is a failure unless the job may fail.
fn job_state(status: Option<&str>, allow_failure: bool) -> CheckState {
    match status {
        Some("success") => CheckState::Success,
        Some("failed" | "canceled" | "canceling") if allow_failure => CheckState::Neutral,
        Some("failed" | "canceled" | "canceling") => CheckState::Failure,
        Some("skipped" | "manual") => CheckState::Neutral,
        // running, pending, created, preparing, scheduled, waiting_for_resource, ...
        _ => CheckState::Pending,
    }
}

/// The review comments of one discussion: its diff notes and, in a resolvable
/// thread, every note; system notes never. `mr_url` links each to its note.
fn discussion_comments(discussion: &Value, mr_url: &str) -> Vec<ReviewComment> {
    let thread_resolvable = json_flag(discussion, "resolvable");
    let thread_resolved = json_flag(discussion, "resolved");
    json_array(discussion, "notes")
        .iter()
        .filter(|note| !json_flag(note, "system"))
        .filter(|note| {
            note.get("position").is_some_and(|p| !p.is_null())
                || note.get("type").and_then(Value::as_str) == Some("DiffNote")
                || thread_resolvable
                || json_flag(note, "resolvable")
        })
        .map(|note| diff_note(note, thread_resolved, mr_url))
        .collect()
}

fn diff_note(note: &Value, thread_resolved: bool, mr_url: &str) -> ReviewComment {
    let id = note.get("id").and_then(Value::as_u64).unwrap_or(0);
    let position = note.get("position").filter(|p| !p.is_null());
    let line = position.and_then(|p| {
        p.get("new_line")
            .and_then(Value::as_u64)
            .or_else(|| p.get("old_line").and_then(Value::as_u64))
    });
    let diff_note = note.get("type").and_then(Value::as_str) == Some("DiffNote");
    // A diff note whose position is gone, or names no line any more, is on code a
    // later push changed.
    let outdated = diff_note && line.is_none();
    ReviewComment {
        id: id.to_string(),
        author: json_text(note, "/author/username").unwrap_or_else(|| "ghost".to_string()),
        bot: note.pointer("/author/bot").and_then(Value::as_bool) == Some(true),
        path: position
            .and_then(|p| json_text(p, "/new_path").or_else(|| json_text(p, "/old_path"))),
        line,
        body: tail_excerpt(&json_text(note, "/body").unwrap_or_default(), TEXT_CHARS),
        url: (!mr_url.is_empty()).then(|| format!("{mr_url}#note_{id}")),
        resolved: thread_resolved || json_flag(note, "resolved"),
        outdated,
        updated_at: json_text(note, "/updated_at").or_else(|| json_text(note, "/created_at")),
    }
}

/// One approving review per user in `approved_by`.
fn approval_reviews(approvals: &Value) -> Vec<Review> {
    json_array(approvals, "approved_by")
        .iter()
        .filter_map(|a| {
            let user = a.get("user")?;
            let login = json_text(user, "/username")?;
            Some(Review {
                id: format!("approval:{login}"),
                bot: user.get("bot").and_then(Value::as_bool) == Some(true),
                author: login,
                verdict: ReviewVerdict::Approved,
                body: String::new(),
                submitted_at: json_text(a, "/approved_at"),
                url: None,
            })
        })
        .collect()
}

/// The commit a merge made: the merge commit, else the squash commit, else the head
/// (a fast-forward makes neither).
fn merged_sha(merged: &Value) -> Option<String> {
    json_text(merged, "/merge_commit_sha")
        .or_else(|| json_text(merged, "/squash_commit_sha"))
        .or_else(|| json_text(merged, "/sha"))
        .filter(|s| !s.is_empty())
}

/// A job trace as a person reads it: ANSI escape sequences and GitLab's collapsible
/// `section_start:<time>:<name>` / `section_end:<time>:<name>` markers removed, and
/// of a line rewritten with carriage returns (progress bars) only what was left.
fn clean_trace(raw: &str) -> String {
    let plain = strip_ansi(raw);
    let mut out = String::with_capacity(plain.len());
    for line in plain.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = strip_sections(line);
        // What a terminal shows after `\r` rewrites: the last non-empty piece.
        let shown = line
            .rsplit('\r')
            .find(|piece| !piece.trim().is_empty())
            .unwrap_or("");
        out.push_str(shown);
        out.push('\n');
    }
    out
}

/// `text` without `ESC [ ... final` (CSI) and `ESC x` escape sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // `ESC [` starts a CSI: parameters and intermediates, then one final byte in
        // `@`..=`~`; any other escape is two characters.
        if let Some('[') = chars.next() {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// `line` without GitLab's section markers: each runs from `section_start:` or
/// `section_end:` to the carriage return that ends it (or the line's end).
fn strip_sections(line: &str) -> String {
    let mut rest = line;
    let mut out = String::with_capacity(line.len());
    loop {
        let at = ["section_start:", "section_end:"]
            .iter()
            .filter_map(|m| rest.find(m))
            .min();
        let Some(at) = at else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..at]);
        rest = match rest[at..].find('\r') {
            Some(end) => &rest[at + end + 1..],
            None => "",
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detailed_merge_status_maps_onto_mergeability() {
        let m = |d| mergeability(Some(d), None, Some(false));
        assert_eq!(m("mergeable"), Mergeability::Clean);
        assert_eq!(m("conflict"), Mergeability::Conflict);
        for waiting in ["checking", "unchecked", "preparing"] {
            assert_eq!(m(waiting), Mergeability::Unknown, "{waiting}");
        }
        for blocked in [
            "not_approved",
            "ci_must_pass",
            "draft_status",
            "discussions_not_resolved",
            "need_rebase",
        ] {
            assert_eq!(m(blocked), Mergeability::Blocked, "{blocked}");
        }
        assert_eq!(
            mergeability(Some("ci_must_pass"), None, Some(true)),
            Mergeability::Conflict,
            "has_conflicts wins"
        );
        assert_eq!(
            mergeability(None, Some("cannot_be_merged"), None),
            Mergeability::Conflict,
            "an older GitLab's merge_status"
        );
        assert_eq!(mergeability(None, None, None), Mergeability::Unknown);
    }

    #[test]
    fn job_statuses_map_onto_check_states_and_allowed_failures_are_neutral() {
        assert_eq!(job_state(Some("success"), false), CheckState::Success);
        assert_eq!(job_state(Some("failed"), false), CheckState::Failure);
        assert_eq!(job_state(Some("failed"), true), CheckState::Neutral);
        for pending in ["running", "pending", "created"] {
            assert_eq!(job_state(Some(pending), false), CheckState::Pending);
        }
        assert_eq!(job_state(Some("skipped"), false), CheckState::Neutral);
        assert_eq!(job_state(Some("manual"), false), CheckState::Neutral);
        let check = job_check(&json!({
            "id": 31, "name": "test", "stage": "verify", "status": "failed",
            "failure_reason": "script_failure", "allow_failure": false,
            "web_url": "https://gitlab.example/-/jobs/31"
        }));
        assert_eq!(check.id, "job:31");
        assert_eq!(check.state, CheckState::Failure);
        assert_eq!(
            check.url.as_deref(),
            Some("https://gitlab.example/-/jobs/31")
        );
        assert_eq!(check.summary, "stage verify; failure reason script_failure");
    }

    #[test]
    fn a_trace_loses_its_colours_and_section_markers() {
        let raw = "\u{1b}[0Ksection_start:1700000000:step_script[collapsed=true]\r\u{1b}[0K\
                   \u{1b}[32;1mExecuting \"step_script\"\u{1b}[0;m\n\
                   $ cargo test\n\
                   downloading 10%\rdownloading 100%\r\n\
                   \u{1b}[31;1mtest parse ... FAILED\u{1b}[0m\n\
                   \u{1b}[0Ksection_end:1700000001:step_script\r\u{1b}[0K\n";
        let clean = clean_trace(raw);
        assert!(!clean.contains('\u{1b}'), "{clean:?}");
        assert!(!clean.contains("section_"), "{clean:?}");
        assert!(clean.contains("Executing \"step_script\"\n"), "{clean:?}");
        assert!(clean.contains("downloading 100%\n"), "{clean:?}");
        assert!(!clean.contains("10%"), "{clean:?}");
        assert!(clean.contains("test parse ... FAILED"), "{clean:?}");
    }

    #[test]
    fn diff_notes_are_resolved_from_their_thread_and_outdated_without_a_line() {
        let discussion = json!({
            "id": "d1", "resolvable": true, "resolved": true,
            "notes": [
                {"id": 1, "type": "DiffNote", "body": "rename this", "system": false,
                 "author": {"username": "rev"}, "resolvable": true, "resolved": true,
                 "position": {"new_path": "src/a.rs", "new_line": 12, "old_line": null},
                 "created_at": "2026-01-01T00:00:00Z"},
                {"id": 2, "type": null, "body": "changed the line", "system": true,
                 "author": {"username": "rev"}}
            ]
        });
        let comments = discussion_comments(&discussion, "https://gl/-/merge_requests/4");
        assert_eq!(comments.len(), 1, "the system note is skipped");
        let c = &comments[0];
        assert!(c.resolved && !c.outdated);
        assert_eq!((c.path.as_deref(), c.line), (Some("src/a.rs"), Some(12)));
        assert_eq!(
            c.url.as_deref(),
            Some("https://gl/-/merge_requests/4#note_1")
        );

        let gone = json!({
            "resolvable": true, "resolved": false,
            "notes": [{"id": 3, "type": "DiffNote", "body": "x", "system": false,
                       "author": {"username": "bot", "bot": true},
                       "position": {"new_path": "src/a.rs", "new_line": null, "old_line": null}}]
        });
        let c = &discussion_comments(&gone, "")[0];
        assert!(c.outdated && !c.resolved && c.bot);

        let chat = json!({"individual_note": true, "resolvable": false,
            "notes": [{"id": 4, "body": "lgtm", "system": false, "author": {"username": "a"}}]});
        assert!(
            discussion_comments(&chat, "").is_empty(),
            "a comment outside a thread and off the diff is not a review comment"
        );
    }

    #[test]
    fn each_approver_is_an_approving_review() {
        let reviews = approval_reviews(&json!({"approved": true, "approved_by": [
            {"user": {"username": "alice"}, "approved_at": "2026-01-02T00:00:00Z"},
            {"user": {"username": "bob"}}
        ]}));
        let who: Vec<_> = reviews
            .iter()
            .map(|r| (r.author.as_str(), r.verdict))
            .collect();
        assert_eq!(
            who,
            [
                ("alice", ReviewVerdict::Approved),
                ("bob", ReviewVerdict::Approved)
            ]
        );
    }

    #[test]
    fn a_merge_names_the_merge_commit_else_the_squash_commit() {
        let both = json!({"merge_commit_sha": "m", "squash_commit_sha": "s", "sha": "h"});
        assert_eq!(merged_sha(&both).as_deref(), Some("m"));
        let squash = json!({"merge_commit_sha": null, "squash_commit_sha": "s", "sha": "h"});
        assert_eq!(merged_sha(&squash).as_deref(), Some("s"));
        assert_eq!(merged_sha(&json!({})), None);
    }
}

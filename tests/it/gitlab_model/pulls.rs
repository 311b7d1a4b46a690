//! GitLab's merge requests over the shared pull-request state (issue #32), as REST v4
//! shows them (`tests/fixtures/gitlab/gitlab-mergerequests.openapi.json`): merge
//! requests by `iid` with `sha`, `detailed_merge_status`, `has_conflicts` and the head
//! pipeline; a commit's checks as the jobs of its pipeline, their logs as job traces;
//! review comments as `DiffNote` discussions; approvals; and `PUT .../merge` with
//! its refusals (405, 422, the 409 of a stale `sha`). GitLab's description types no
//! field nullable, so a field GitLab would send as null is left out.

use std::path::Path;

use serde_json::{json, Value};

use super::{label_list, not_found, Gitlab, PROJECT, PROJECT_ID, USER};
use crate::forge_model::pulls::{text, user_id, without_nulls, Blocker, Check, Pull};
use crate::forge_model::{answer, message_body, time, Answer, Board, ForgeModel, Req};

/// Start a GitLab model whose merge requests live in the bare repository `bare`.
pub async fn start_with_remote(bare: &Path) -> ForgeModel {
    let model = ForgeModel::start(Gitlab).await;
    model.use_remote(bare);
    model
}

/// `APIEntitiesUserBasic`.
pub(super) fn user(name: &str) -> Value {
    json!({
        "id": user_id(name), "username": name, "name": name, "state": "active",
        "web_url": format!("https://gitlab.example.com/{name}"),
    })
}

/// A pipeline's (or a check's) status as GitLab words it.
fn status_word(state: &str) -> &'static str {
    match state {
        "success" => "success",
        "failure" => "failed",
        _ => "running",
    }
}

fn pipeline_json(b: &Board, id: u64) -> Value {
    let p = b
        .book
        .pipelines
        .iter()
        .find(|p| p.id == id)
        .expect("pipeline");
    let branch = b.pulls.iter().find(|r| r.heads.contains(&p.sha));
    let status = b.combined_state(&p.sha).unwrap_or("pending");
    without_nulls(json!({
        "id": p.id, "iid": p.id - 1000, "project_id": PROJECT_ID, "sha": p.sha,
        "ref": branch.map(|r| r.head.clone()), "status": status_word(status),
        "source": "merge_request_event",
        "created_at": time(p.created), "updated_at": time(b.clock),
        "web_url": format!("https://gitlab.example.com/{PROJECT}/-/pipelines/{}", p.id),
    }))
}

/// `detailed_merge_status`, in GitLab's words.
fn detailed_status(b: &Board, p: &Pull, blocker: Option<Blocker>) -> &'static str {
    match blocker {
        None => "mergeable",
        Some(Blocker::NotOpen) => "not_open",
        Some(Blocker::Draft) => "draft_status",
        Some(Blocker::Checking) => "checking",
        Some(Blocker::Conflict) => "conflict",
        Some(Blocker::CiMustPass) if b.combined_state(&p.head_sha) == Some("pending") => {
            "ci_still_running"
        }
        Some(Blocker::CiMustPass) => "ci_must_pass",
        Some(Blocker::NotApproved) => "not_approved",
    }
}

/// `APIEntitiesMergeRequestBasic` (`full`: `APIEntitiesMergeRequest`, with the head
/// pipeline and the diff refs).
fn merge_request_json(b: &mut Board, number: u64, full: bool) -> Value {
    let blocker = b.blocker(number);
    let p = b.pull(number).expect("merge request").clone();
    let state = match (p.open, p.merged) {
        (true, _) => "opened",
        (false, true) => "merged",
        (false, false) => "closed",
    };
    let merge_status = match (p.checking, p.conflicts.is_empty()) {
        (true, _) => "checking",
        (false, true) => "can_be_merged",
        (false, false) => "cannot_be_merged",
    };
    let mut v = json!({
        "id": 7000 + p.number, "iid": p.number, "project_id": PROJECT_ID,
        "title": p.title, "description": p.body, "state": state,
        "created_at": time(p.created), "updated_at": time(p.updated),
        "merged_by": p.merged_by.as_deref().map(user),
        "merge_user": p.merged_by.as_deref().map(user),
        "merged_at": p.merged_at.map(time), "closed_at": p.closed_at.map(time),
        "source_branch": p.head, "target_branch": p.base,
        "source_project_id": PROJECT_ID, "target_project_id": PROJECT_ID,
        "author": {"id": user_id(USER), "username": USER, "name": "Sortie", "bot": false},
        "labels": p.labels, "draft": p.draft, "work_in_progress": p.draft,
        "merge_status": merge_status,
        "detailed_merge_status": detailed_status(b, &p, blocker),
        "sha": p.head_sha, "merge_commit_sha": p.merge_commit_sha,
        "squash_commit_sha": p.squash_commit_sha,
        "has_conflicts": !p.conflicts.is_empty(),
        "blocking_discussions_resolved": true,
        "user_notes_count": b.book.comments.iter().filter(|c| c.pull == number).count(),
        "reference": format!("!{}", p.number),
        "references": {"full": format!("{PROJECT}!{}", p.number)},
        "web_url": format!("https://gitlab.example.com/{PROJECT}/-/merge_requests/{}", p.number),
    });
    if full {
        let head_pipeline = b
            .book
            .pipelines
            .iter()
            .find(|pl| pl.sha == p.head_sha)
            .map(|pl| pl.id);
        v["head_pipeline"] = head_pipeline.map_or(Value::Null, |id| pipeline_json(b, id));
        v["diff_refs"] =
            json!({"base_sha": p.base_sha, "head_sha": p.head_sha, "start_sha": p.base_sha});
    }
    without_nulls(v)
}

fn job_json(b: &Board, c: &Check) -> Value {
    let pipeline = pipeline_json(b, c.pipeline);
    without_nulls(json!({
        "id": c.id, "status": status_word(&c.state), "stage": "test", "name": c.name,
        "ref": pipeline["ref"], "tag": false, "allow_failure": false,
        "created_at": time(c.created), "started_at": time(c.created),
        "finished_at": (c.state != "pending").then(|| time(c.created)),
        "failure_reason": (c.state == "failure").then_some("script_failure"),
        "commit": {"id": c.sha, "short_id": &c.sha[..8.min(c.sha.len())], "title": c.description},
        "pipeline": pipeline,
        "web_url": format!("https://gitlab.example.com/{PROJECT}/-/jobs/{}", c.id),
    }))
}

/// Every routes below `projects/{id}/` this module answers; `None` for the others.
pub(super) fn route(b: &mut Board, req: &Req, rest: &[&str]) -> Option<Answer> {
    let ans = match (req.method.as_str(), rest) {
        ("GET", ["merge_requests"]) => list(b, req),
        ("POST", ["merge_requests"]) => create(b, req),
        (_, ["merge_requests", n, tail @ ..]) => {
            let Some(number) = n
                .parse::<u64>()
                .ok()
                .filter(|n| b.pulls.iter().any(|p| p.number == *n))
            else {
                return Some(not_found("Merge Request"));
            };
            merge_request(b, req, number, tail)
        }
        ("GET", ["pipelines", id, "jobs"]) => {
            let Some(id) = id.parse::<u64>().ok() else {
                return Some(not_found("Pipeline"));
            };
            let Some(sha) = b
                .book
                .pipelines
                .iter()
                .find(|p| p.id == id)
                .map(|p| p.sha.clone())
            else {
                return Some(not_found("Pipeline"));
            };
            let jobs = b.checks_on(&sha).iter().map(|c| job_json(b, c)).collect();
            answer(200, Value::Array(jobs))
        }
        ("GET", ["jobs", id, "trace"]) => {
            match b.book.checks.iter().find(|c| id.parse() == Ok(c.id)) {
                Some(c) => text(200, &c.log),
                None => not_found("Job"),
            }
        }
        _ => return None,
    };
    Some(ans)
}

fn list(b: &mut Board, req: &Req) -> Answer {
    let source = req.query.get("source_branch").cloned();
    let target = req.query.get("target_branch").cloned();
    let state = req.query.get("state").cloned().unwrap_or("all".into());
    b.sync_remote();
    let numbers: Vec<u64> = b
        .pulls
        .iter()
        .rev()
        .filter(|p| source.as_ref().is_none_or(|s| *s == p.head))
        .filter(|p| target.as_ref().is_none_or(|t| *t == p.base))
        .filter(|p| match state.as_str() {
            "opened" => p.open,
            "merged" => p.merged,
            "closed" => !p.open && !p.merged,
            _ => true,
        })
        .map(|p| p.number)
        .collect();
    let items = numbers
        .into_iter()
        .map(|n| merge_request_json(b, n, false))
        .collect();
    answer(200, Value::Array(items))
}

fn create(b: &mut Board, req: &Req) -> Answer {
    let field = |n: &str| req.body.get(n).and_then(Value::as_str).map(str::to_string);
    let (Some(head), Some(base), Some(title)) = (
        field("source_branch"),
        field("target_branch"),
        field("title"),
    ) else {
        return answer(400, message_body("400 Bad request"));
    };
    if let Some(other) = b.pulls.iter().find(|p| p.open && p.head == head) {
        return answer(
            409,
            json!({"message": [format!("Another open merge request already exists for this source branch: !{}", other.number)]}),
        );
    }
    let draft = title.starts_with("Draft:") || title.starts_with("[Draft]");
    let body = field("description").unwrap_or_default();
    let number = b.open_pull(&head, &base, &title, &body, draft);
    let labels = label_list(req.body.get("labels").unwrap_or(&Value::Null));
    for l in &labels {
        b.ensure_label(l);
    }
    b.pull_mut(number).labels = labels;
    answer(201, merge_request_json(b, number, true))
}

fn merge_request(b: &mut Board, req: &Req, number: u64, tail: &[&str]) -> Answer {
    match (req.method.as_str(), tail) {
        ("GET", []) => answer(200, merge_request_json(b, number, true)),
        ("PUT", []) => update(b, req, number),
        ("PUT", ["merge"]) => merge(b, req, number),
        ("GET", ["pipelines"]) => {
            let heads = b.pull(number).map(|p| p.heads.clone()).unwrap_or_default();
            let ids: Vec<u64> = b
                .book
                .pipelines
                .iter()
                .rev()
                .filter(|p| heads.contains(&p.sha))
                .map(|p| p.id)
                .collect();
            let items = ids.into_iter().map(|id| pipeline_json(b, id)).collect();
            answer(200, Value::Array(items))
        }
        ("GET", ["discussions"]) => {
            b.sync_remote();
            answer(200, super::reviews::discussions(b, number))
        }
        ("GET", ["approvals"]) => answer(200, super::reviews::approvals(b, number)),
        _ => answer(405, message_body("405 Method Not Allowed")),
    }
}

fn update(b: &mut Board, req: &Req, number: u64) -> Answer {
    let add = label_list(req.body.get("add_labels").unwrap_or(&Value::Null));
    let remove = label_list(req.body.get("remove_labels").unwrap_or(&Value::Null));
    let replace = req.body.get("labels").map(label_list);
    let title = req
        .body
        .get("title")
        .and_then(Value::as_str)
        .map(str::to_string);
    let event = req
        .body
        .get("state_event")
        .and_then(Value::as_str)
        .map(str::to_string);
    for l in add.iter().chain(replace.iter().flatten()) {
        b.ensure_label(l);
    }
    b.touch_pull(number, |p| {
        if let Some(all) = replace {
            p.labels = all;
        }
        for l in add {
            if !p.labels.contains(&l) {
                p.labels.push(l);
            }
        }
        p.labels.retain(|l| !remove.contains(l));
        if let Some(t) = title {
            p.draft = t.starts_with("Draft:") || t.starts_with("[Draft]");
            p.title = t;
        }
        match (event.as_deref(), p.merged) {
            (Some("close"), false) => {
                p.open = false;
                p.closed_at = Some(p.updated);
            }
            (Some("reopen"), false) => {
                p.open = true;
                p.closed_at = None;
            }
            _ => {}
        }
    });
    answer(200, merge_request_json(b, number, true))
}

/// `PUT .../merge`: GitLab refuses what cannot merge now with 405 (422 for a
/// conflict when asked to merge once the pipeline succeeds), then a `sha` other
/// than the head with 409; else it merges (a squash and a merge commit with
/// `squash: true`).
fn merge(b: &mut Board, req: &Req, number: u64) -> Answer {
    b.book.merges.push((number, req.body.clone()));
    b.run_before_merge();
    let flag = |k: &str| req.body.get(k).and_then(Value::as_bool).unwrap_or(false);
    let later = flag("merge_when_pipeline_succeeds") || flag("auto_merge");
    match b.blocker(number) {
        Some(Blocker::Conflict) if later => {
            return answer(422, message_body("Branch cannot be merged"))
        }
        Some(_) => return answer(405, message_body("405 Method Not Allowed")),
        None => {}
    }
    let p = b.pull_mut(number).clone();
    if let Some(sha) = req.body.get("sha").and_then(Value::as_str) {
        if sha != p.head_sha {
            return answer(
                409,
                message_body(&format!(
                    "SHA does not match HEAD of source branch: {}",
                    p.head_sha
                )),
            );
        }
    }
    let method = if flag("squash") {
        "squash_then_merge"
    } else {
        "merge"
    };
    let title = format!("Merge branch '{}' into '{}'", p.head, p.base);
    b.merge_pull(number, USER, method, &title);
    answer(200, merge_request_json(b, number, true))
}

//! Gitea's pull requests over the shared pull-request state (issue #32), as API v1
//! shows them (`tests/fixtures/gitea/gitea-pulls.swagger.json`): pulls with head and
//! base commits, `mergeable`, merges; a commit's checks as commit statuses (each
//! also an actions job of the commit's run, with its log); reviews and their
//! comments (`resolver` set on a resolved one); and `POST .../merge` with its
//! refusals (405, the 409 of a stale `head_commit_id`). The description types no
//! field nullable, so a field Gitea would send as null is left out.

use std::path::Path;

use serde_json::{json, Value};

use super::{labels_json, Gitea, LOGIN, REPO};
use crate::forge_model::pulls::{text, user_id, without_nulls, Blocker, Check, Pull};
use crate::forge_model::{answer, empty, message_body, time, Answer, Board, ForgeModel, Req};

/// Start a Gitea model whose pull requests live in the bare repository `bare`.
pub async fn start_with_remote(bare: &Path) -> ForgeModel {
    let model = ForgeModel::start(Gitea).await;
    model.use_remote(bare);
    model
}

/// `User`.
fn user(login: &str) -> Value {
    json!({"id": user_id(login), "login": login, "full_name": login, "login_name": ""})
}

fn web(path: &str) -> String {
    format!("https://gitea.example.com/{REPO}/{path}")
}

/// `PullRequest`: `mergeable` is Gitea's (no conflict, not still checking).
pub(super) fn pull_json(b: &Board, p: &Pull) -> Value {
    let branch =
        |name: &str, sha: &str| json!({"ref": name, "label": name, "sha": sha, "repo_id": 1});
    without_nulls(json!({
        "id": 7000 + p.number, "number": p.number, "title": p.title, "body": p.body,
        "state": if p.open { "open" } else { "closed" },
        "draft": p.draft, "is_locked": false,
        "user": user(LOGIN), "labels": labels_json(b, &p.labels),
        "head": branch(&p.head, &p.head_sha), "base": branch(&p.base, &p.base_sha),
        "merge_base": p.base_sha,
        "mergeable": p.open && !p.checking && p.conflicts.is_empty(),
        "merged": p.merged, "merged_at": p.merged_at.map(time),
        "merged_by": p.merged_by.as_deref().map(user),
        "merge_commit_sha": p.merge_commit_sha,
        "comments": 0,
        "review_comments": b.book.comments.iter().filter(|c| c.pull == p.number).count(),
        "created_at": time(p.created), "updated_at": time(p.updated),
        "closed_at": p.closed_at.map(time),
        "html_url": web(&format!("pulls/{}", p.number)),
        "url": web(&format!("pulls/{}", p.number)),
        "diff_url": web(&format!("pulls/{}.diff", p.number)),
        "patch_url": web(&format!("pulls/{}.patch", p.number)),
    }))
}

/// A check's state as a commit status words it.
fn status_json(c: &Check) -> Value {
    json!({
        "id": c.id, "status": c.state, "context": c.name, "description": c.description,
        "target_url": web(&format!("actions/runs/{}/jobs/{}", c.pipeline, c.id)),
        "url": format!("https://gitea.example.com/api/v1/repos/{REPO}/statuses/{}", c.sha),
        "creator": user("gitea-actions"),
        "created_at": time(c.created), "updated_at": time(c.created),
    })
}

/// `ActionWorkflowJob`: the check as the job that reported it.
fn job_json(b: &Board, c: &Check) -> Value {
    let done = c.state != "pending";
    let branch = b.pulls.iter().find(|p| p.heads.contains(&c.sha));
    without_nulls(json!({
        "id": c.id, "run_id": c.pipeline, "name": c.name, "head_sha": c.sha,
        "head_branch": branch.map(|p| p.head.clone()),
        "status": if done { "completed" } else { "in_progress" },
        "conclusion": done.then(|| c.state.clone()),
        "created_at": time(c.created), "started_at": time(c.created),
        "completed_at": done.then(|| time(c.created)),
        "html_url": web(&format!("actions/runs/{}/jobs/{}", c.pipeline, c.id)),
        "run_url": format!("https://gitea.example.com/api/v1/repos/{REPO}/actions/runs/{}", c.pipeline),
    }))
}

fn not_found(what: &str) -> Answer {
    answer(404, message_body(&format!("{what} does not exist")))
}

/// Every route below `repos/{owner}/{repo}/` this module answers; `None` for the others.
pub(super) fn route(b: &mut Board, req: &Req, rest: &[&str]) -> Option<Answer> {
    let known = |n: &str| {
        n.parse::<u64>()
            .ok()
            .filter(|n| b.pulls.iter().any(|p| p.number == *n))
    };
    let ans = match (req.method.as_str(), rest) {
        ("GET", ["pulls"]) => {
            b.sync_remote();
            let state = req.query.get("state").map(String::as_str).unwrap_or("open");
            let items = b
                .pulls
                .iter()
                .rev()
                .filter(|p| match state {
                    "open" => p.open,
                    "closed" => !p.open,
                    _ => true,
                })
                .map(|p| pull_json(b, p))
                .collect();
            answer(200, Value::Array(items))
        }
        ("POST", ["pulls"]) => create(b, req),
        // Gitea 1.21+: the open pull request from `head` into `base`, or 404.
        ("GET", ["pulls", base, head]) if !matches!(*head, "merge" | "reviews") => {
            b.sync_remote();
            match b
                .pulls
                .iter()
                .find(|p| p.open && p.base == *base && p.head == *head)
            {
                Some(p) => answer(200, pull_json(b, p)),
                None => not_found("pull request"),
            }
        }
        (_, ["pulls", n, tail @ ..]) => match known(n) {
            Some(number) => pull(b, req, number, tail),
            None => not_found("pull request"),
        },
        ("GET", ["commits", reference, "status"]) => {
            b.sync_remote();
            let sha = b
                .pulls
                .iter()
                .find(|p| p.head == *reference)
                .map_or(reference.to_string(), |p| p.head_sha.clone());
            let statuses: Vec<Value> = b.checks_on(&sha).iter().map(status_json).collect();
            answer(
                200,
                json!({
                    "state": b.combined_state(&sha).unwrap_or("pending"), "sha": sha,
                    "total_count": statuses.len(), "statuses": statuses,
                    "commit_url": format!("https://gitea.example.com/api/v1/repos/{REPO}/commits/{sha}"),
                    "url": format!("https://gitea.example.com/api/v1/repos/{REPO}/commits/{sha}/status"),
                }),
            )
        }
        ("GET", ["statuses", sha]) => {
            let mut all: Vec<&Check> = b.book.checks.iter().filter(|c| c.sha == *sha).collect();
            all.reverse();
            answer(
                200,
                Value::Array(all.into_iter().map(status_json).collect()),
            )
        }
        ("GET", ["actions", "runs", run, "jobs"]) => {
            let jobs: Vec<Value> = b
                .book
                .checks
                .iter()
                .filter(|c| run.parse() == Ok(c.pipeline) && !c.retried)
                .map(|c| job_json(b, c))
                .collect();
            if jobs.is_empty() {
                return Some(not_found("run"));
            }
            answer(200, json!({"total_count": jobs.len(), "jobs": jobs}))
        }
        ("GET", ["actions", "jobs", id, tail @ ..]) => {
            let Some(c) = b.book.checks.iter().find(|c| id.parse() == Ok(c.id)) else {
                return Some(not_found("job"));
            };
            match tail {
                [] => answer(200, job_json(b, c)),
                ["logs"] => text(200, &c.log),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(ans)
}

fn create(b: &mut Board, req: &Req) -> Answer {
    let field = |n: &str| req.body.get(n).and_then(Value::as_str).map(str::to_string);
    let (Some(head), Some(base), Some(title)) = (field("head"), field("base"), field("title"))
    else {
        return answer(422, message_body("head, base and title are required"));
    };
    if b.pulls
        .iter()
        .any(|p| p.open && p.head == head && p.base == base)
    {
        return answer(
            409,
            message_body("pull request already exists for these targets"),
        );
    }
    let draft = title.starts_with("WIP:") || title.starts_with("[WIP]");
    let body = field("body").unwrap_or_default();
    let number = b.open_pull(&head, &base, &title, &body, draft);
    let p = b.pull_mut(number).clone();
    answer(201, pull_json(b, &p))
}

fn pull(b: &mut Board, req: &Req, number: u64, tail: &[&str]) -> Answer {
    b.sync_remote();
    let p = b.pull_mut(number).clone();
    match (req.method.as_str(), tail) {
        ("GET", []) => answer(200, pull_json(b, &p)),
        ("PATCH", []) => {
            let state = req
                .body
                .get("state")
                .and_then(Value::as_str)
                .map(str::to_string);
            let title = req
                .body
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_string);
            b.touch_pull(number, |p| {
                if let Some(t) = title {
                    p.draft = t.starts_with("WIP:") || t.starts_with("[WIP]");
                    p.title = t;
                }
                match (state.as_deref(), p.merged) {
                    (Some("closed"), false) => {
                        p.open = false;
                        p.closed_at = Some(p.updated);
                    }
                    (Some("open"), false) => {
                        p.open = true;
                        p.closed_at = None;
                    }
                    _ => {}
                }
            });
            let p = b.pull_mut(number).clone();
            answer(201, pull_json(b, &p))
        }
        ("GET", ["merge"]) if p.merged => empty(204),
        ("GET", ["merge"]) => answer(404, message_body("not merged")),
        ("POST", ["merge"]) => merge(b, req, number),
        ("GET", ["reviews"]) => {
            let items = b
                .book
                .reviews
                .iter()
                .filter(|r| r.pull == number)
                .map(|r| {
                    let count = b
                        .book
                        .comments
                        .iter()
                        .filter(|c| c.review_id == r.id)
                        .count();
                    let state = match r.verdict.as_str() {
                        "approved" => "APPROVED",
                        "changes_requested" => "REQUEST_CHANGES",
                        _ => "COMMENT",
                    };
                    json!({
                        "id": r.id, "user": user(&r.author), "body": r.body, "state": state,
                        "commit_id": r.commit_id, "stale": r.commit_id != p.head_sha,
                        "official": state != "COMMENT", "dismissed": false,
                        "comments_count": count,
                        "submitted_at": time(r.submitted), "updated_at": time(r.submitted),
                        "html_url": web(&format!("pulls/{number}#issuecomment-{}", r.id)),
                        "pull_request_url": web(&format!("pulls/{number}")),
                    })
                })
                .collect();
            answer(200, Value::Array(items))
        }
        ("GET", ["reviews", id, "comments"]) => {
            let Some(review) = b
                .book
                .reviews
                .iter()
                .find(|r| r.pull == number && id.parse() == Ok(r.id))
            else {
                return not_found("review");
            };
            let items = b
                .book
                .comments
                .iter()
                .filter(|c| c.review_id == review.id)
                .map(|c| {
                    without_nulls(json!({
                        "id": c.id, "body": c.body, "user": user(&c.author),
                        "resolver": c.resolved_by.as_deref().map(user),
                        "path": c.path,
                        // An outdated comment keeps only its original position.
                        "position": if c.outdated { 0 } else { c.line },
                        "original_position": c.line,
                        "commit_id": if c.outdated { c.commit_id.clone() } else { p.head_sha.clone() },
                        "original_commit_id": c.commit_id, "diff_hunk": "",
                        "pull_request_review_id": c.review_id,
                        "created_at": time(c.created), "updated_at": time(c.updated),
                        "html_url": web(&format!("pulls/{number}/files#issuecomment-{}", c.id)),
                        "pull_request_url": web(&format!("pulls/{number}")),
                    }))
                })
                .collect();
            answer(200, Value::Array(items))
        }
        _ => answer(405, message_body("method not allowed")),
    }
}

/// `POST .../merge`: `Do` (any case of the key, as Go reads JSON) is required;
/// Gitea refuses a closed pull request with 404, one that cannot merge now with
/// 405, then a `head_commit_id` other than the head with 409; else it merges and
/// answers 200 with no body.
fn merge(b: &mut Board, req: &Req, number: u64) -> Answer {
    b.book.merges.push((number, req.body.clone()));
    b.run_before_merge();
    let field = |name: &str| {
        req.body
            .as_object()
            .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)))
            .and_then(|(_, v)| v.as_str())
            .map(str::to_string)
    };
    let method = match field("do").as_deref() {
        Some("merge") => "merge",
        Some("squash") => "squash",
        Some("rebase" | "rebase-merge" | "fast-forward-only") => "rebase",
        Some(other) => return answer(422, message_body(&format!("[Do]: In {other}"))),
        None => return answer(422, message_body("[Do]: Required")),
    };
    let merged = b.pull_mut(number).merged;
    let refusal = match b.blocker(number) {
        None => None,
        Some(Blocker::NotOpen) if merged => Some("PR already merged"),
        Some(Blocker::NotOpen) => return not_found("pull request"),
        Some(Blocker::Draft) => Some("Work in progress PRs cannot be merged"),
        Some(Blocker::Checking | Blocker::Conflict) => Some("Please try again later"),
        Some(Blocker::CiMustPass | Blocker::NotApproved) => Some("PR is not ready to be merged"),
    };
    if let Some(why) = refusal {
        return answer(405, message_body(why));
    }
    let p = b.pull_mut(number).clone();
    if let Some(sha) = field("head_commit_id").filter(|s| !s.is_empty()) {
        if sha != p.head_sha {
            return answer(409, message_body("head out of date"));
        }
    }
    let title = format!(
        "Merge pull request '{}' (#{number}) from {} into {}",
        p.title, p.head, p.base
    );
    b.merge_pull(number, LOGIN, method, &title);
    empty(200)
}

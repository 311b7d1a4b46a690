//! The model's pull requests as GitHub's REST API shows them: the pull request
//! (listing and full), check runs, annotations, commit statuses, reviews and
//! review comments, in the fields of the vendor's description.

use serde_json::{json, Value};

use super::pulls::{
    fake_sha, ModelAnnotation, ModelCheckRun, ModelPull, ModelReview, ModelReviewComment,
    ModelStatus,
};
use super::{time, State, REPO};

/// A user as GitHub shows one: logins ending in `[bot]` are `Bot`s.
pub(super) fn user_json(login: &str) -> Value {
    let id = u64::from_str_radix(&fake_sha(login)[..8], 16).unwrap_or(1);
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_{id}"),
        "type": if login.ends_with("[bot]") { "Bot" } else { "User" },
        "site_admin": false,
        "html_url": format!("https://github.com/{login}"),
        "url": format!("https://api.github.com/users/{login}"),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}"),
    })
}

fn opt_time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, |t| Value::String(time(t)))
}

/// A pull request as a listing shows it (`pull-request-simple`).
pub(super) fn pull_json(p: &ModelPull) -> Value {
    let n = p.number;
    let api = format!("https://api.github.com/repos/{REPO}");
    let html = format!("https://github.com/{REPO}/pull/{n}");
    let owner = REPO.split('/').next().unwrap_or_default();
    json!({
        "id": 80000 + n,
        "node_id": format!("PR_{n}"),
        "number": n,
        "title": p.title,
        "body": p.body,
        "state": if p.open { "open" } else { "closed" },
        "locked": false,
        "draft": p.draft,
        "user": user_json(&p.author),
        "labels": p.labels.iter().map(|l| json!({
            "id": u64::from_str_radix(&fake_sha(l)[..8], 16).unwrap_or(1),
            "node_id": format!("LA_{l}"),
            "url": format!("{api}/labels/{l}"),
            "name": l,
            // Both schemas take a string; only `pull-request`'s takes null.
            "description": "",
            "color": "ededed",
            "default": false,
        })).collect::<Vec<_>>(),
        "head": {"ref": p.head, "sha": p.head_sha, "label": format!("{owner}:{}", p.head)},
        "base": {"ref": p.base, "sha": p.base_sha, "label": format!("{owner}:{}", p.base)},
        "html_url": html,
        "url": format!("{api}/pulls/{n}"),
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": format!("{api}/issues/{n}"),
        "commits_url": format!("{api}/pulls/{n}/commits"),
        "review_comments_url": format!("{api}/pulls/{n}/comments"),
        "review_comment_url": format!("{api}/pulls/comments{{/number}}"),
        "comments_url": format!("{api}/issues/{n}/comments"),
        "statuses_url": format!("{api}/statuses/{}", p.head_sha),
        "created_at": time(p.created),
        "updated_at": time(p.updated),
        "closed_at": opt_time(p.closed),
        "merged_at": opt_time(p.merged_at),
        "merge_commit_sha": p.merge_commit_sha,
        "assignee": null,
        "milestone": null,
        "author_association": "CONTRIBUTOR",
        "auto_merge": null,
    })
}

/// A pull request as `GET .../pulls/{n}` shows it (`pull-request`).
pub(super) fn pull_full_json(s: &State, p: &ModelPull) -> Value {
    let mut v = pull_json(p);
    let review_comments = s
        .activity
        .comments
        .iter()
        .filter(|c| c.pull == p.number)
        .count();
    v["merged"] = json!(p.merged);
    v["mergeable"] = json!(p.mergeable);
    v["mergeable_state"] = json!(p.mergeable_state);
    v["merged_by"] = p.merged_by.as_deref().map_or(Value::Null, user_json);
    v["comments"] = json!(0);
    v["review_comments"] = json!(review_comments);
    v["commits"] = json!(1);
    v["additions"] = json!(1);
    v["deletions"] = json!(0);
    v["changed_files"] = json!(1);
    v["maintainer_can_modify"] = json!(false);
    v
}

/// A check run as `GET .../commits/{ref}/check-runs` shows it.
pub(super) fn check_run_json(s: &State, r: &ModelCheckRun) -> Value {
    let api = format!("{}{}/repos/{REPO}", s.origin, s.prefix);
    let html = match r.log {
        Some(_) => format!("https://github.com/{REPO}/actions/runs/7000/job/{}", r.id),
        None => format!("https://github.com/{REPO}/runs/{}", r.id),
    };
    json!({
        "id": r.id,
        "node_id": format!("CR_{}", r.id),
        "head_sha": r.head_sha,
        "external_id": "",
        "name": r.name,
        "url": format!("{api}/check-runs/{}", r.id),
        "html_url": html,
        "details_url": html,
        "status": r.status,
        "conclusion": r.conclusion,
        "started_at": time(r.started),
        "completed_at": opt_time(r.completed),
        "output": {
            "title": r.title,
            "summary": r.summary,
            "text": r.text,
            "annotations_count": r.annotations.len(),
            "annotations_url": format!("{api}/check-runs/{}/annotations", r.id),
        },
        "check_suite": {"id": 7000},
        "app": null,
        "pull_requests": [],
    })
}

/// An annotation as `GET .../check-runs/{id}/annotations` shows it.
pub(super) fn annotation_json(r: &ModelCheckRun, a: &ModelAnnotation) -> Value {
    json!({
        "path": a.path,
        "blob_href": format!("https://github.com/{REPO}/blob/{}/{}", r.head_sha, a.path),
        "start_line": a.line,
        "end_line": a.line,
        "start_column": null,
        "end_column": null,
        "annotation_level": a.level,
        "title": null,
        "message": a.message,
        "raw_details": null,
    })
}

/// A commit status as the combined status lists it.
pub(super) fn status_json(st: &ModelStatus) -> Value {
    json!({
        "id": st.id,
        "node_id": format!("SC_{}", st.id),
        "url": format!("https://api.github.com/repos/{REPO}/statuses/{}", st.sha),
        "avatar_url": null,
        "state": st.state,
        "context": st.context,
        "description": st.description,
        "target_url": format!("https://ci.example/{}/{}", st.context, st.id),
        "created_at": time(st.created),
        "updated_at": time(st.updated),
    })
}

fn review_links(n: u64, html: &str) -> Value {
    json!({
        "html": {"href": html},
        "pull_request": {"href": format!("https://api.github.com/repos/{REPO}/pulls/{n}")},
    })
}

/// A review as `GET .../pulls/{n}/reviews` shows it (a pending one has no
/// `submitted_at`).
pub(super) fn review_json(r: &ModelReview) -> Value {
    let html = format!(
        "https://github.com/{REPO}/pull/{}#pullrequestreview-{}",
        r.pull, r.id
    );
    let mut v = json!({
        "id": r.id,
        "node_id": format!("PRR_{}", r.id),
        "user": user_json(&r.author),
        "body": r.body,
        "state": r.state,
        "commit_id": r.commit_id,
        "html_url": html,
        "pull_request_url": format!("https://api.github.com/repos/{REPO}/pulls/{}", r.pull),
        "_links": review_links(r.pull, &html),
        "author_association": "CONTRIBUTOR",
    });
    if r.state != "PENDING" {
        v["submitted_at"] = json!(time(r.submitted));
    }
    v
}

/// A review comment as `GET .../pulls/{n}/comments` shows it: an outdated one has
/// `line` and `position` null; `in_reply_to_id` only on replies.
pub(super) fn review_comment_json(s: &State, c: &ModelReviewComment) -> Value {
    let outdated = s.activity.thread_root(c.id).is_some_and(|r| r.outdated);
    let (line, position) = if outdated {
        (Value::Null, Value::Null)
    } else {
        (json!(c.original_line), json!(c.original_line))
    };
    let head = s
        .pulls
        .iter()
        .find(|p| p.number == c.pull)
        .map(|p| p.head_sha.clone())
        .unwrap_or_default();
    let html = format!(
        "https://github.com/{REPO}/pull/{}#discussion_r{}",
        c.pull, c.id
    );
    let api = format!("https://api.github.com/repos/{REPO}/pulls");
    let mut v = json!({
        "id": c.id,
        "node_id": format!("PRRC_{}", c.id),
        "url": format!("{api}/comments/{}", c.id),
        "pull_request_review_id": c.review_id,
        "user": user_json(&c.author),
        "body": c.body,
        "path": c.path,
        "line": line,
        "original_line": c.original_line,
        "position": position,
        "original_position": c.original_line,
        "side": "RIGHT",
        "subject_type": "line",
        "start_line": null,
        "original_start_line": null,
        "start_side": null,
        // A comment still on the diff is shown on the head commit.
        "commit_id": if outdated { c.commit_id.clone() } else { head },
        "original_commit_id": c.commit_id,
        "diff_hunk": format!("@@ -{0},1 +{0},1 @@", c.original_line),
        "html_url": html,
        "pull_request_url": format!("{api}/{}", c.pull),
        "author_association": "CONTRIBUTOR",
        "_links": {
            "self": {"href": format!("{api}/comments/{}", c.id)},
            "html": {"href": html},
            "pull_request": {"href": format!("{api}/{}", c.pull)},
        },
        "created_at": time(c.created),
        "updated_at": time(c.created),
    });
    if let Some(parent) = c.in_reply_to {
        v["in_reply_to_id"] = json!(parent);
    }
    v
}

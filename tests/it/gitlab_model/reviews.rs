//! Reviews as GitLab shows them: discussions (an approval or a request for changes
//! as a system note, a review body as a note, a review comment as a resolvable
//! `DiffNote` thread) and the approvals of a merge request.

use serde_json::{json, Value};

use super::pulls::user;
use super::{PROJECT_ID, USER};
use crate::forge_model::pulls::fake_sha;
use crate::forge_model::{time, Board};

/// `APIEntitiesMergeRequestApprovals`: approved once enough reviewers approve.
pub(super) fn approvals(b: &Board, number: u64) -> Value {
    let approvers = b.approvers(number);
    let approved = approvers.len() >= b.book.approvals_required;
    let by: Vec<Value> = approvers
        .iter()
        .map(|r| json!({"user": user(&r.author), "approved_at": time(r.submitted)}))
        .collect();
    json!({"approved": approved, "approved_by": by,
               "user_has_approved": approvers.iter().any(|r| r.author == USER),
               "user_can_approve": false})
}

/// Reviews and review comments as GitLab's discussions, oldest first: an approval or
/// a request for changes is a system note, a review body an individual note, a
/// review comment a resolvable `DiffNote` thread whose position stays on its old
/// commit once its line is gone.
pub(super) fn discussions(b: &Board, number: u64) -> Value {
    let p = b.pulls.iter().find(|p| p.number == number).expect("pull");
    let note = |id: u64, author: &str, body: &str, at: i64, system: bool| {
        json!({
            "id": id, "body": body, "author": user(author),
            "created_at": time(at), "updated_at": time(at), "system": system,
            "noteable_id": 7000 + number, "noteable_iid": number,
            "noteable_type": "MergeRequest", "project_id": PROJECT_ID,
            "resolvable": false,
        })
    };
    let single = |id: u64, n: Value| json!({"id": format!("{:040x}", id), "individual_note": true, "resolvable": false, "notes": [n]});
    let mut all: Vec<(u64, Value)> = Vec::new();
    for r in b.book.reviews.iter().filter(|r| r.pull == number) {
        let verdict = match r.verdict.as_str() {
            "approved" => Some("approved this merge request"),
            "changes_requested" => Some("requested changes"),
            _ => None,
        };
        if let Some(words) = verdict {
            all.push((
                r.id,
                single(r.id, note(r.id, &r.author, words, r.submitted, true)),
            ));
        }
        if !r.body.is_empty() {
            let id = r.id + 500_000;
            all.push((
                id,
                single(id, note(id, &r.author, &r.body, r.submitted, false)),
            ));
        }
    }
    for c in b.book.comments.iter().filter(|c| c.pull == number) {
        let head = match (c.outdated, c.commit_id == p.head_sha) {
            (false, _) => p.head_sha.clone(),
            (true, false) => c.commit_id.clone(),
            (true, true) => fake_sha(&format!("before {}", c.id)),
        };
        let mut n = note(c.id, &c.author, &c.body, c.created, false);
        n["type"] = json!("DiffNote");
        n["updated_at"] = json!(time(c.updated));
        n["commit_id"] = json!(c.commit_id);
        n["resolvable"] = json!(true);
        n["resolved"] = json!(c.resolved_by.is_some());
        if let Some(who) = &c.resolved_by {
            n["resolved_by"] = user(who);
            n["resolved_at"] = json!(c.resolved_at.map(time));
        }
        n["position"] = json!({
            "base_sha": p.base_sha, "start_sha": p.base_sha, "head_sha": head,
            "position_type": "text", "old_path": c.path, "new_path": c.path,
            "new_line": c.line,
        });
        all.push((
            c.id,
            json!({"id": format!("{:040x}", c.id), "individual_note": false,
                   "resolvable": true, "resolved": c.resolved_by.is_some(), "notes": [n]}),
        ));
    }
    all.sort_by_key(|(id, _)| *id);
    Value::Array(all.into_iter().map(|(_, v)| v).collect())
}

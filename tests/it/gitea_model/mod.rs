//! Gitea's REST dialect over the shared forge state: `/api/v1`, `Authorization: token`,
//! issues and pull requests sharing numbers, `labels=` by name where names Gitea does
//! not know are dropped (so a filter of only unknown names matches every issue, as on
//! real Gitea), `page`/`limit` pagination with `X-Total-Count` and `Link`, labels added
//! by id and deleted by id, a replace-all `PUT` (which the adapter must never use), and
//! `PATCH` answering 201. Pull requests, commit statuses, actions jobs and reviews
//! are `pulls`.
#![allow(dead_code)]

use serde_json::{json, Value};

use crate::forge_model::{
    answer, empty, message_body, page_of, time, Answer, Board, Dialect, ForgeModel, Issue, Note,
    Req,
};

mod pulls;
pub use pulls::start_with_remote;

/// The token the model accepts.
pub const TOKEN: &str = "gitea-test-token";
/// The login that token belongs to.
pub const LOGIN: &str = "sortie-bot";
/// The repository the model serves.
pub const REPO: &str = "acme/widgets";

/// Start a Gitea model.
pub async fn start() -> ForgeModel {
    ForgeModel::start(Gitea).await
}

struct Gitea;

fn labels_json(b: &Board, names: &[String]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| json!({"id": b.labels.get(n).copied().unwrap_or(0), "name": n, "color": "ededed", "exclusive": false}))
            .collect(),
    )
}

fn issue_json(b: &Board, i: &Issue) -> Value {
    json!({
        "id": 7000 + i.number, "number": i.number, "title": i.title, "body": i.body,
        "state": if i.open { "open" } else { "closed" },
        "labels": labels_json(b, &i.labels),
        "assignees": if i.assignees.is_empty() { Value::Null } else {
            Value::Array(i.assignees.iter().map(|a| json!({"login": a, "id": 3})).collect()) },
        "user": {"login": "alice", "id": 2},
        "html_url": format!("https://gitea.example.com/{REPO}/issues/{}", i.number),
        "pull_request": if i.pull_request { json!({"merged": false}) } else { Value::Null },
        "comments": i.comments.len(),
        "created_at": if i.broken { "yesterday".to_string() } else { time(i.created) },
        "updated_at": time(i.updated),
    })
}

fn comment_json(n: &Note) -> Value {
    json!({
        "id": n.id, "body": n.body, "user": {"login": n.author, "id": 9},
        "created_at": time(n.created), "updated_at": time(n.created),
    })
}

fn paginate(b: &Board, req: &Req, items: Vec<Value>) -> Answer {
    let limit = req
        .query_num("limit")
        .unwrap_or(30)
        .clamp(1, b.max_per_page);
    let page = req.query_num("page").unwrap_or(1).max(1);
    let total = items.len();
    let (chunk, more) = page_of(items, page, limit);
    let mut a = answer(200, Value::Array(chunk));
    a.headers
        .push(("x-total-count".to_string(), total.to_string()));
    if more {
        let mut next = reqwest::Url::parse(&format!("{}{}", b.origin, req.raw.url.path())).unwrap();
        let kept: Vec<(String, String)> = req
            .query
            .iter()
            .filter(|(k, _)| k.as_str() != "page")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        next.query_pairs_mut()
            .extend_pairs(kept)
            .append_pair("page", &(page + 1).to_string());
        a.headers
            .push(("link".to_string(), format!("<{next}>; rel=\"next\"")));
    }
    a
}

impl Dialect for Gitea {
    fn prefix(&self) -> &'static str {
        "/api/v1"
    }

    fn authenticated(&self, req: &Req) -> bool {
        req.header("authorization") == Some(&format!("token {TOKEN}"))
    }

    fn error(&self, status: u16, message: &str) -> Answer {
        answer(
            status,
            json!({"message": message, "url": "https://gitea.example.com/api/swagger"}),
        )
    }

    fn rate_headers(&self, _b: &Board) -> Vec<(String, String)> {
        Vec::new()
    }

    fn route(&self, b: &mut Board, req: &Req) -> Answer {
        let segs: Vec<&str> = req.segs.iter().map(String::as_str).collect();
        let (owner, name) = REPO.split_once('/').unwrap();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["user"]) => {
                answer(200, json!({"id": 9, "login": LOGIN, "full_name": "Sortie"}))
            }
            (_, ["repos", o, r, rest @ ..]) if *o == owner && *r == name => repo(b, req, rest),
            _ => answer(404, message_body("not found")),
        }
    }
}

fn repo(b: &mut Board, req: &Req, rest: &[&str]) -> Answer {
    if let Some(ans) = pulls::route(b, req, rest) {
        return ans;
    }
    match (req.method.as_str(), rest) {
        ("GET", ["issues"]) => {
            // Gitea looks each name up and silently drops those it does not know.
            let wanted: Vec<String> = req
                .query
                .get("labels")
                .map(|l| {
                    l.split(',')
                        .map(str::trim)
                        .filter(|n| b.labels.contains_key(*n))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let state = req.query.get("state").map(String::as_str).unwrap_or("open");
            let kind = req.query.get("type").map(String::as_str).unwrap_or("");
            let items = b
                .issues
                .values()
                .rev()
                .filter(|i| match kind {
                    "issues" => !i.pull_request,
                    "pulls" => i.pull_request,
                    _ => true,
                })
                .filter(|i| wanted.iter().all(|w| i.labels.iter().any(|l| l == w)))
                .filter(|i| match state {
                    "open" => i.open,
                    "closed" => !i.open,
                    _ => true,
                })
                .map(|i| issue_json(b, i))
                .collect();
            paginate(b, req, items)
        }
        ("GET", ["labels"]) => {
            let items = b
                .labels
                .iter()
                .map(|(n, id)| json!({"id": id, "name": n, "color": "ededed", "exclusive": false}))
                .collect();
            paginate(b, req, items)
        }
        ("POST", ["labels"]) => {
            let Some(name) = req.body.get("name").and_then(Value::as_str) else {
                return answer(422, message_body("name is required"));
            };
            let id = b.ensure_label(name);
            answer(201, json!({"id": id, "name": name, "color": "ededed"}))
        }
        (_, ["issues", n, tail @ ..]) => {
            let Some(number) = n.parse::<u64>().ok().filter(|n| b.issues.contains_key(n)) else {
                return answer(404, message_body("issue does not exist"));
            };
            issue(b, req, number, tail)
        }
        _ => answer(404, message_body("not found")),
    }
}

fn issue(b: &mut Board, req: &Req, number: u64, tail: &[&str]) -> Answer {
    match (req.method.as_str(), tail) {
        ("GET", []) => {
            b.before_get(number);
            answer(200, issue_json(b, &b.issues[&number]))
        }
        ("PATCH", []) => {
            let now = b.tick();
            let issue = b.issues.get_mut(&number).unwrap();
            match req.body.get("state").and_then(Value::as_str) {
                Some("closed") => issue.open = false,
                Some("open") => issue.open = true,
                _ => {}
            }
            issue.updated = now;
            answer(201, issue_json(b, &b.issues[&number]))
        }
        ("GET", ["comments"]) => {
            let items = b.issues[&number]
                .comments
                .iter()
                .filter(|n| !n.system)
                .map(comment_json)
                .collect();
            answer(200, Value::Array(items))
        }
        ("POST", ["comments"]) => {
            let Some(text) = req.body.get("body").and_then(Value::as_str) else {
                return answer(422, message_body("body is required"));
            };
            let note = b.add_note(number, LOGIN, text, false);
            answer(201, comment_json(&note))
        }
        ("POST", ["labels"]) | ("PUT", ["labels"]) => {
            let Some(list) = req.body.get("labels").and_then(Value::as_array) else {
                return answer(422, message_body("labels is required"));
            };
            let mut names = Vec::new();
            for l in list {
                let name = match l {
                    Value::Number(n) => n.as_i64().and_then(|id| b.label_name(id)),
                    Value::String(s) => b.labels.contains_key(s).then(|| s.clone()),
                    _ => None,
                };
                match name {
                    Some(n) => names.push(n),
                    None => return answer(422, message_body(&format!("label {l} does not exist"))),
                }
            }
            let now = b.tick();
            let issue = b.issues.get_mut(&number).unwrap();
            if req.method == "PUT" {
                issue.labels.clear();
            }
            for n in names {
                if !issue.labels.contains(&n) {
                    issue.labels.push(n);
                }
            }
            issue.updated = now;
            let labels = issue.labels.clone();
            answer(200, labels_json(b, &labels))
        }
        ("DELETE", ["labels", id]) => {
            let Some(name) = id.parse::<i64>().ok().and_then(|id| b.label_name(id)) else {
                return answer(422, message_body("label does not exist"));
            };
            let now = b.tick();
            let issue = b.issues.get_mut(&number).unwrap();
            issue.labels.retain(|l| *l != name);
            issue.updated = now;
            empty(204)
        }
        _ => empty(405),
    }
}

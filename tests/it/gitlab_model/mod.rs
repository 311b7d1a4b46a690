//! GitLab's REST dialect over the shared forge state: `/api/v4`, `PRIVATE-TOKEN` or
//! bearer auth, projects by URL-encoded path, issues by `iid` with `labels=` ANDed,
//! `x-next-page`/`Link` pagination, one `PUT` applying `add_labels`, `remove_labels`
//! and `state_event` together (and writing system notes, as GitLab does), notes,
//! issue links (403 on a tier without them), and `RateLimit-*` headers. Merge
//! requests, pipelines and jobs are `pulls`; discussions and approvals `reviews`.
#![allow(dead_code)]

use serde_json::{json, Value};

use crate::forge_model::{
    answer, empty, message_body, page_of, time, Answer, Board, Dialect, ForgeModel, Issue,
    NextLink, Note, Req,
};

mod pulls;
mod reviews;
pub use pulls::start_with_remote;

/// The token the model accepts.
pub const TOKEN: &str = "glpat-test-token";
/// The username that token belongs to.
pub const USER: &str = "sortie-bot";
/// The project the model serves.
pub const PROJECT: &str = "acme/tools/widgets";
/// The project's numeric id.
pub const PROJECT_ID: u64 = 77;

/// Start a GitLab model.
pub async fn start() -> ForgeModel {
    ForgeModel::start(Gitlab).await
}

struct Gitlab;

fn issue_json(i: &Issue) -> Value {
    json!({
        "id": 5000 + i.number, "iid": i.number, "project_id": PROJECT_ID,
        "title": i.title, "description": i.body,
        "state": if i.open { "opened" } else { "closed" },
        "labels": i.labels,
        "assignees": i.assignees.iter().map(|a| json!({"username": a, "id": 3})).collect::<Vec<_>>(),
        "author": {"username": "alice", "id": 2},
        "web_url": format!("https://gitlab.example.com/{PROJECT}/-/issues/{}", i.number),
        "references": {"full": format!("{PROJECT}#{}", i.number)},
        "created_at": if i.broken { "yesterday".to_string() } else { time(i.created) },
        "updated_at": time(i.updated),
    })
}

fn note_json(n: &Note) -> Value {
    json!({
        "id": n.id, "body": n.body, "system": n.system, "noteable_type": "Issue",
        "author": {"username": n.author, "id": 9},
        "created_at": time(n.created), "updated_at": time(n.created),
    })
}

/// Label lists come as JSON arrays or comma-separated strings.
fn label_list(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// A page of `items` with GitLab's offset-pagination headers.
fn paginate(b: &Board, req: &Req, items: Vec<Value>) -> Answer {
    let per_page = req
        .query_num("per_page")
        .unwrap_or(20)
        .clamp(1, b.max_per_page);
    let page = req.query_num("page").unwrap_or(1).max(1);
    let total = items.len();
    let (chunk, more) = page_of(items, page, per_page);
    let mut a = answer(200, Value::Array(chunk));
    let next = if more {
        (page + 1).to_string()
    } else {
        String::new()
    };
    if more && b.next_link != NextLink::Honest {
        // The next page named only by a `Link` header, as the model was told to serve it.
        let url = &req.raw.url;
        let this = format!("{}{}?{}", b.origin, url.path(), url.query().unwrap_or(""));
        let kept: Vec<String> = url
            .query_pairs()
            .filter(|(k, _)| k != "page")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let honest = format!("{}{}?{}&page={next}", b.origin, url.path(), kept.join("&"));
        let link = b.next_link.serve(&b.origin, &this, honest);
        a.headers
            .push(("link".to_string(), format!("<{link}>; rel=\"next\"")));
        a.headers.push(("x-next-page".to_string(), String::new()));
        return a;
    }
    a.headers.extend([
        ("x-page".to_string(), page.to_string()),
        ("x-per-page".to_string(), per_page.to_string()),
        ("x-next-page".to_string(), next),
        ("x-total".to_string(), total.to_string()),
    ]);
    a
}

impl Dialect for Gitlab {
    fn prefix(&self) -> &'static str {
        "/api/v4"
    }

    fn authenticated(&self, req: &Req) -> bool {
        req.header("private-token") == Some(TOKEN)
            || req.header("authorization") == Some(&format!("Bearer {TOKEN}"))
    }

    fn error(&self, status: u16, message: &str) -> Answer {
        answer(status, message_body(message))
    }

    fn rate_headers(&self, b: &Board) -> Vec<(String, String)> {
        vec![
            ("ratelimit-limit".into(), "2000".into()),
            ("ratelimit-remaining".into(), b.remaining.to_string()),
            ("ratelimit-reset".into(), "1900000000".into()),
        ]
    }

    fn route(&self, b: &mut Board, req: &Req) -> Answer {
        let segs: Vec<&str> = req.segs.iter().map(String::as_str).collect();
        let project_ok = |p: &str| p == PROJECT || p == PROJECT_ID.to_string();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", ["user"]) => answer(200, json!({"id": 9, "username": USER, "name": "Sortie"})),
            (_, ["projects", p, rest @ ..]) if project_ok(p) => project(b, req, rest),
            _ => self.error(404, "404 Project Not Found"),
        }
    }
}

fn not_found(what: &str) -> Answer {
    answer(404, message_body(&format!("404 {what} Not Found")))
}

fn project(b: &mut Board, req: &Req, rest: &[&str]) -> Answer {
    if let Some(ans) = pulls::route(b, req, rest) {
        return ans;
    }
    match (req.method.as_str(), rest) {
        ("GET", ["issues"]) => {
            let wanted: Vec<String> = req
                .query
                .get("labels")
                .map(|l| label_list(&Value::String(l.clone())))
                .unwrap_or_default();
            let state = req.query.get("state").map(String::as_str).unwrap_or("all");
            let excluded: Vec<String> = req
                .query
                .get("not[labels]")
                .map(|l| label_list(&Value::String(l.clone())))
                .unwrap_or_default();
            let assignee = req.query.get("assignee_username").cloned();
            let items = b
                .issues
                .values()
                .rev()
                .filter(|i| !i.pull_request)
                // GitLab matches label names case-insensitively and ANDs them.
                .filter(|i| {
                    wanted
                        .iter()
                        .all(|w| i.labels.iter().any(|l| l.eq_ignore_ascii_case(w)))
                })
                .filter(|i| {
                    !excluded
                        .iter()
                        .any(|x| i.labels.iter().any(|l| l.eq_ignore_ascii_case(x)))
                })
                .filter(|i| assignee.as_ref().is_none_or(|a| i.assignees.contains(a)))
                .filter(|i| match state {
                    "opened" => i.open,
                    "closed" => !i.open,
                    _ => true,
                })
                .map(issue_json)
                .collect();
            paginate(b, req, items)
        }
        ("GET", ["labels"]) => {
            let items = b
                .labels
                .iter()
                .map(|(n, id)| json!({"id": id, "name": n, "color": "#ededed"}))
                .collect();
            paginate(b, req, items)
        }
        ("POST", ["labels"]) => {
            let Some(name) = req.body.get("name").and_then(Value::as_str) else {
                return answer(400, json!({"error": "name is missing"}));
            };
            if b.labels.contains_key(name) {
                return answer(409, message_body("Label already exists"));
            }
            let id = b.ensure_label(name);
            answer(201, json!({"id": id, "name": name, "color": "#ededed"}))
        }
        (_, ["issues", n, tail @ ..]) => {
            let Some(number) = n
                .parse::<u64>()
                .ok()
                .filter(|n| b.issues.get(n).is_some_and(|i| !i.pull_request))
            else {
                return not_found("Issue");
            };
            issue(b, req, number, tail)
        }
        _ => not_found("Route"),
    }
}

fn issue(b: &mut Board, req: &Req, number: u64, tail: &[&str]) -> Answer {
    match (req.method.as_str(), tail) {
        ("GET", []) => {
            b.before_get(number);
            answer(200, issue_json(&b.issues[&number]))
        }
        ("PUT", []) => {
            let add = label_list(req.body.get("add_labels").unwrap_or(&Value::Null));
            let remove = label_list(req.body.get("remove_labels").unwrap_or(&Value::Null));
            let event = req.body.get("state_event").and_then(Value::as_str);
            if add.is_empty() && remove.is_empty() && event.is_none() {
                return answer(
                    400,
                    json!({"error": "at least one parameter must be provided"}),
                );
            }
            let now = b.tick();
            for l in &add {
                b.ensure_label(l);
            }
            let issue = b.issues.get_mut(&number).unwrap();
            let mut added = Vec::new();
            for l in &add {
                if !issue.labels.iter().any(|x| x == l) {
                    issue.labels.push(l.clone());
                    added.push(format!("~\"{l}\""));
                }
            }
            let before = issue.labels.clone();
            issue.labels.retain(|x| !remove.iter().any(|r| r == x));
            let removed: Vec<String> = before
                .iter()
                .filter(|l| !issue.labels.contains(l))
                .map(|l| format!("~\"{l}\""))
                .collect();
            match event {
                Some("close") => issue.open = false,
                Some("reopen") => issue.open = true,
                _ => {}
            }
            issue.updated = now;
            if !added.is_empty() || !removed.is_empty() {
                let text = format!("added {} removed {}", added.join(" "), removed.join(" "));
                b.add_note(number, USER, &text, true);
            }
            if event == Some("close") {
                b.add_note(number, USER, "closed", true);
            }
            answer(200, issue_json(&b.issues[&number]))
        }
        ("GET", ["notes"]) => {
            let mut items: Vec<&Note> = b.issues[&number].comments.iter().collect();
            // GitLab's default is newest first; the adapter asks for `sort=asc`.
            if req.query.get("sort").map(String::as_str) != Some("asc") {
                items.reverse();
            }
            let items = items.into_iter().map(note_json).collect();
            paginate(b, req, items)
        }
        ("POST", ["notes"]) => {
            let Some(text) = req.body.get("body").and_then(Value::as_str) else {
                return answer(400, json!({"error": "body is missing"}));
            };
            let note = b.add_note(number, USER, text, false);
            answer(201, note_json(&note))
        }
        ("GET", ["links"]) => {
            if b.links_forbidden {
                return answer(403, message_body("403 Forbidden"));
            }
            let items = b
                .links
                .iter()
                .filter_map(
                    |(blocked, blocker)| match (*blocked == number, *blocker == number) {
                        (true, _) => Some((*blocker, "is_blocked_by")),
                        (_, true) => Some((*blocked, "blocks")),
                        _ => None,
                    },
                )
                .map(|(other, kind)| {
                    let mut v = issue_json(&b.issues[&other]);
                    v["link_type"] = json!(kind);
                    v["issue_link_id"] = json!(other * 10);
                    v
                })
                .collect();
            answer(200, Value::Array(items))
        }
        _ => empty(405),
    }
}

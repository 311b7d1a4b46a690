//! Routing of the model's REST endpoints: what GitHub answers to each request.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use wiremock::Request;

use super::pull_json::{pull_full_json, pull_json};
use super::pull_routes::{ci_route, graphql, pull_route};
use super::{
    add_comment, answer, comment_json, issue_json_in, message, percent_decode, Answer, ModelPull,
    State, LOGIN, REPO,
};

/// One page of `items`, with a `Link` to the next when there is one.
pub(super) fn paginate(s: &State, req: &Request, items: Vec<Value>) -> Answer {
    let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
    let per_page = query
        .get("per_page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(30usize)
        .clamp(1, s.max_per_page);
    let page = query
        .get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1usize)
        .max(1);
    let total = items.len();
    let chunk: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let mut ans = answer(200, Value::Array(chunk));
    if page * per_page < total {
        let mut next = reqwest::Url::parse(&format!("{}{}", s.origin, req.url.path())).unwrap();
        let kept: Vec<(String, String)> = query.into_iter().filter(|(k, _)| k != "page").collect();
        next.query_pairs_mut()
            .extend_pairs(kept)
            .append_pair("page", &(page + 1).to_string());
        let this = match req.url.query() {
            Some(q) => format!("{}{}?{q}", s.origin, req.url.path()),
            None => format!("{}{}", s.origin, req.url.path()),
        };
        let next = s.next_link.serve(&s.origin, &this, next.to_string());
        ans.link = Some(format!("<{next}>; rel=\"next\""));
    }
    ans
}

pub(super) fn route(s: &mut State, method: &str, path: &str, req: &Request) -> Answer {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let repo: Vec<&str> = REPO.split('/').collect();
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => answer(200, json!({"login": LOGIN, "id": 7, "type": "User"})),
        ("GET", ["rate_limit"]) => {
            let core = json!({"limit": s.limit, "remaining": s.remaining, "reset": s.reset, "used": s.limit - s.remaining});
            let mut a = answer(
                200,
                json!({"resources": {"core": core.clone()}, "rate": core}),
            );
            a.free = true;
            a
        }
        // `/graphql` beside the REST root, `/api/graphql` beside Enterprise's `/api/v3`.
        ("POST", ["graphql"] | ["api", "graphql"]) => graphql(s, &body),
        (_, ["repos", o, r, rest @ ..]) if *o == repo[0] && *r == repo[1] => {
            repo_route(s, method, rest, &body, req)
        }
        _ => message(404, "Not Found"),
    }
}

fn repo_route(s: &mut State, method: &str, rest: &[&str], body: &Value, req: &Request) -> Answer {
    match (method, rest) {
        ("GET", ["issues"]) => {
            let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
            let wanted: Vec<&str> = query
                .get("labels")
                .map(|l| l.split(',').collect())
                .unwrap_or_default();
            let state = query.get("state").map(String::as_str).unwrap_or("open");
            let items = s
                .issues
                .values()
                .rev()
                // GitHub label names are unique ignoring case, and the filter finds a
                // label whichever way the query spells it.
                .filter(|i| {
                    wanted.iter().all(|w| {
                        i.labels
                            .iter()
                            .any(|l| l.to_lowercase() == w.to_lowercase())
                    })
                })
                .filter(|i| match state {
                    "open" => i.open,
                    "closed" => !i.open,
                    _ => true,
                })
                .map(|i| issue_json_in(s, i))
                .collect();
            paginate(s, req, items)
        }
        ("GET", ["pulls"]) => {
            let query: BTreeMap<String, String> = req.url.query_pairs().into_owned().collect();
            let owner = REPO.split('/').next().unwrap();
            let head = query.get("head").cloned();
            let state = query.get("state").map(String::as_str).unwrap_or("open");
            let items = s
                .pulls
                .iter()
                .filter(|p| {
                    head.as_ref()
                        .is_none_or(|h| *h == format!("{owner}:{}", p.head))
                })
                .filter(|p| match state {
                    "open" => p.open,
                    "closed" => !p.open,
                    _ => true,
                })
                .map(pull_json)
                .collect();
            paginate(s, req, items)
        }
        ("POST", ["pulls"]) => {
            let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_string);
            let (Some(head), Some(base), Some(title)) =
                (field("head"), field("base"), field("title"))
            else {
                return message(422, "Validation Failed");
            };
            if s.pulls.iter().any(|p| p.open && p.head == head) {
                return answer(
                    422,
                    json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for acme:{head}.")}]}),
                );
            }
            let number = (s.issues.len() + s.pulls.len()) as u64 + 1;
            s.clock += 1;
            let pull = ModelPull::opened(
                number,
                head,
                base,
                title,
                field("body").unwrap_or_default(),
                body.get("draft").and_then(Value::as_bool).unwrap_or(false),
                s.clock,
            );
            s.pulls.push(pull);
            s.sync_remote();
            let pull = s.pull_mut(number).clone();
            answer(201, pull_full_json(s, &pull))
        }
        (_, ["pulls", n, tail @ ..]) => {
            let Some(number) = n
                .parse::<u64>()
                .ok()
                .filter(|n| s.pulls.iter().any(|p| p.number == *n))
            else {
                return message(404, "Not Found");
            };
            pull_route(s, method, number, tail, body, req)
        }
        ("GET", ["commits", _, "check-runs" | "status"] | ["check-runs", ..] | ["actions", ..]) => {
            ci_route(s, rest, req)
        }
        ("GET", ["labels"]) => {
            let items = s
                .repo_labels
                .iter()
                .map(|l| json!({"name": l, "color": "ededed"}))
                .collect();
            paginate(s, req, items)
        }
        ("POST", ["labels"]) => {
            let Some(name) = body.get("name").and_then(Value::as_str) else {
                return message(422, "Validation Failed");
            };
            let taken = s
                .repo_labels
                .iter()
                .any(|l| l.to_lowercase() == name.to_lowercase());
            if taken || !s.repo_labels.insert(name.to_string()) {
                return answer(
                    422,
                    json!({"message": "Validation Failed", "errors": [{"resource": "Label", "code": "already_exists", "field": "name"}]}),
                );
            }
            answer(
                201,
                json!({"name": name, "color": body.get("color").cloned().unwrap_or(json!("ededed"))}),
            )
        }
        (_, ["issues", n, tail @ ..]) => {
            let Some(number) = n.parse::<u64>().ok().filter(|n| s.issues.contains_key(n)) else {
                return message(404, "Not Found");
            };
            issue_route(s, method, number, tail, body, req)
        }
        _ => message(404, "Not Found"),
    }
}

fn issue_route(
    s: &mut State,
    method: &str,
    number: u64,
    tail: &[&str],
    body: &Value,
    req: &Request,
) -> Answer {
    match (method, tail) {
        ("GET", ["dependencies", "blocked_by"]) if s.dependencies => {
            let items = s.issues[&number]
                .blocked_by
                .iter()
                .filter_map(|n| s.issues.get(n))
                .map(|i| issue_json_in(s, i))
                .collect();
            paginate(s, req, items)
        }
        ("GET", []) => {
            for hook in s.get_hooks.due(&number) {
                s.clock += 1;
                let now = s.clock;
                let issue = s.issues.get_mut(&number).unwrap();
                hook(issue);
                issue.updated = now;
            }
            answer(200, issue_json_in(s, &s.issues[&number]))
        }
        ("GET", ["comments"]) => {
            let items = s.issues[&number]
                .comments
                .iter()
                .map(comment_json)
                .collect();
            paginate(s, req, items)
        }
        ("POST", ["comments"]) => {
            let Some(text) = body.get("body").and_then(Value::as_str) else {
                return message(422, "Validation Failed");
            };
            answer(201, add_comment(s, number, LOGIN, text))
        }
        ("POST", ["labels"]) => {
            let Some(labels) = body.get("labels").and_then(Value::as_array) else {
                return message(422, "Validation Failed");
            };
            s.clock += 1;
            let now = s.clock;
            for l in labels.iter().filter_map(Value::as_str) {
                s.repo_labels.insert(l.to_string());
                let issue = s.issues.get_mut(&number).unwrap();
                if !issue.labels.iter().any(|x| x == l) {
                    issue.labels.push(l.to_string());
                    issue.updated = now;
                }
            }
            let names = s.issues[&number]
                .labels
                .iter()
                .map(|l| json!({"name": l}))
                .collect();
            answer(200, Value::Array(names))
        }
        ("DELETE", ["labels", name]) => {
            s.clock += 1;
            let now = s.clock;
            let issue = s.issues.get_mut(&number).unwrap();
            let before = issue.labels.len();
            issue.labels.retain(|l| l != name);
            if issue.labels.len() == before {
                return message(404, "Label does not exist");
            }
            issue.updated = now;
            let names = issue.labels.iter().map(|l| json!({"name": l})).collect();
            answer(200, Value::Array(names))
        }
        _ => message(404, "Not Found"),
    }
}

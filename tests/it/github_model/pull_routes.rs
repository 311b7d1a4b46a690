//! What GitHub answers about one pull request (the pull request, its reviews and
//! review comments, its merge), about a commit's checks (check runs, annotations,
//! combined status), and the one GraphQL query the adapter sends (review threads).

use serde_json::{json, Value};
use wiremock::Request;

use super::pull_json::{
    annotation_json, check_run_json, pull_full_json, review_comment_json, review_json, status_json,
};
use super::routes::paginate;
use super::{answer, message, Answer, State, LOGIN, REPO};

pub(super) fn pull_route(
    s: &mut State,
    method: &str,
    number: u64,
    tail: &[&str],
    body: &Value,
    req: &Request,
) -> Answer {
    match (method, tail) {
        ("GET", []) => {
            let pull = s.pull_mut(number).clone();
            answer(200, pull_full_json(s, &pull))
        }
        ("PATCH", []) => edit(s, number, body),
        ("GET", ["reviews"]) => {
            // A pending review is seen by its author only.
            let items = s
                .activity
                .reviews
                .iter()
                .filter(|r| r.pull == number && (r.state != "PENDING" || r.author == LOGIN))
                .map(review_json)
                .collect();
            paginate(s, req, items)
        }
        ("GET", ["comments"]) => {
            let items = s
                .activity
                .comments
                .iter()
                .filter(|c| c.pull == number)
                .map(|c| review_comment_json(s, c))
                .collect();
            paginate(s, req, items)
        }
        ("GET", ["merge"]) if s.pull_mut(number).merged => Answer {
            status: 204,
            body: None,
            link: None,
            free: false,
            location: None,
        },
        ("GET", ["merge"]) => message(404, "Not Found"),
        ("PUT", ["merge"]) => merge(s, number, body),
        _ => message(404, "Not Found"),
    }
}

/// `PATCH .../pulls/{n}`: title, body, base, state.
fn edit(s: &mut State, number: u64, body: &Value) -> Answer {
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_string);
    let state = field("state");
    if state
        .as_deref()
        .is_some_and(|st| st != "open" && st != "closed")
    {
        return message(422, "Validation Failed");
    }
    if state.as_deref() == Some("open") && s.pull_mut(number).merged {
        return message(422, "Validation Failed");
    }
    s.touch_pull(number, |p| {
        if let Some(t) = field("title") {
            p.title = t;
        }
        if let Some(b) = field("body") {
            p.body = b;
        }
        if let Some(b) = field("base") {
            p.base = b;
        }
        match state.as_deref() {
            Some("closed") if p.open => {
                p.open = false;
                p.closed = Some(p.updated);
            }
            Some("open") => {
                p.open = true;
                p.closed = None;
            }
            _ => {}
        }
    });
    let pull = s.pull_mut(number).clone();
    answer(200, pull_full_json(s, &pull))
}

/// `PUT .../pulls/{n}/merge`: 422 for an unknown method, 405 when the pull request
/// cannot merge (closed, draft, conflicting, blocked), 409 when `sha` is not the
/// head any more; else merged by the token's user.
fn merge(s: &mut State, number: u64, body: &Value) -> Answer {
    let method = body
        .get("merge_method")
        .and_then(Value::as_str)
        .unwrap_or("merge");
    if !matches!(method, "merge" | "squash" | "rebase") {
        return answer(
            422,
            json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": "merge_method", "code": "invalid"}]}),
        );
    }
    let pull = s.pull_mut(number).clone();
    if !pull.open
        || pull.draft
        || pull.mergeable == Some(false)
        || matches!(pull.mergeable_state.as_str(), "dirty" | "blocked" | "draft")
    {
        return message(405, "Pull Request is not mergeable");
    }
    if let Some(sha) = body.get("sha").and_then(Value::as_str) {
        if sha != pull.head_sha {
            return message(
                409,
                "Head branch was modified. Review and try the merge again.",
            );
        }
    }
    let sha = s.merge_pull(number, LOGIN, method);
    answer(
        200,
        json!({"sha": sha, "merged": true, "message": "Pull Request successfully merged"}),
    )
}

/// The commit a ref names: a SHA as it is, a branch by the pull requests that
/// have it as head (the newest) or base.
fn commit_of(s: &State, r: &str) -> Option<String> {
    if r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(r.to_lowercase());
    }
    let r = r.strip_prefix("heads/").unwrap_or(r);
    s.pulls
        .iter()
        .rev()
        .find_map(|p| (p.head == r).then(|| p.head_sha.clone()))
        .or_else(|| {
            s.pulls
                .iter()
                .rev()
                .find_map(|p| (p.base == r).then(|| p.base_sha.clone()))
        })
}

/// A page of `items` as an object: `{total_count, <key>: [...]}`.
fn paged_object(s: &State, req: &Request, key: &str, items: Vec<Value>, extra: Value) -> Answer {
    let total = items.len();
    let mut ans = paginate(s, req, items);
    let page = ans.body.take().unwrap_or(Value::Array(Vec::new()));
    let mut object = extra;
    object["total_count"] = json!(total);
    object[key] = page;
    ans.body = Some(object);
    ans
}

pub(super) fn ci_route(s: &mut State, rest: &[&str], req: &Request) -> Answer {
    let query: std::collections::BTreeMap<String, String> =
        req.url.query_pairs().into_owned().collect();
    match rest {
        ["commits", r, "check-runs"] => {
            let Some(sha) = commit_of(s, r) else {
                return message(422, &format!("No commit found for SHA: {r}"));
            };
            let all = query.get("filter").map(String::as_str) == Some("all");
            let runs: Vec<&super::ModelCheckRun> = s
                .activity
                .runs
                .iter()
                .filter(|run| run.head_sha == sha)
                // By default only the latest run of each name (a re-run hides the old one).
                .filter(|run| {
                    all || !s
                        .activity
                        .runs
                        .iter()
                        .any(|o| o.head_sha == sha && o.name == run.name && o.id > run.id)
                })
                .filter(|run| query.get("check_name").is_none_or(|n| *n == run.name))
                .filter(|run| query.get("status").is_none_or(|st| *st == run.status))
                .collect();
            let items = runs.iter().map(|run| check_run_json(s, run)).collect();
            paged_object(s, req, "check_runs", items, json!({}))
        }
        ["commits", r, "status"] => {
            let Some(sha) = commit_of(s, r) else {
                return message(422, &format!("No commit found for SHA: {r}"));
            };
            let mut statuses: Vec<&super::ModelStatus> = s
                .activity
                .statuses
                .iter()
                .filter(|st| st.sha == sha)
                .collect();
            // Newest first, as GitHub lists them.
            statuses.sort_by_key(|st| std::cmp::Reverse((st.updated, st.id)));
            let states: Vec<&str> = statuses.iter().map(|st| st.state.as_str()).collect();
            let state = if states.iter().any(|st| matches!(*st, "failure" | "error")) {
                "failure"
            } else if states.is_empty() || states.contains(&"pending") {
                "pending"
            } else {
                "success"
            };
            let api = format!("https://api.github.com/repos/{REPO}");
            let extra = json!({
                "state": state,
                "sha": sha,
                "commit_url": format!("{api}/commits/{sha}"),
                "url": format!("{api}/commits/{sha}/status"),
                "repository": {"id": 4242, "node_id": "R_4242", "name": REPO.split('/').nth(1), "full_name": REPO},
            });
            let items = statuses.iter().map(|st| status_json(st)).collect();
            paged_object(s, req, "statuses", items, extra)
        }
        ["check-runs", id, tail @ ..] => {
            let Some(run) = id
                .parse::<u64>()
                .ok()
                .and_then(|id| s.activity.runs.iter().find(|r| r.id == id))
            else {
                return message(404, "Not Found");
            };
            match tail {
                [] => answer(200, check_run_json(s, run)),
                ["annotations"] => {
                    let items = run
                        .annotations
                        .iter()
                        .map(|a| annotation_json(run, a))
                        .collect();
                    paginate(s, req, items)
                }
                _ => message(404, "Not Found"),
            }
        }
        ["actions", "jobs", id, "logs"] => {
            let job = id.parse::<u64>().ok().and_then(|id| {
                s.activity
                    .runs
                    .iter()
                    .find(|r| r.id == id && r.log.is_some())
            });
            match job {
                // Another host than the API's, as GitHub's download URLs are.
                Some(job) => Answer {
                    status: 302,
                    body: None,
                    link: None,
                    free: false,
                    location: Some(format!(
                        "{}/_downloads/job-logs/{}",
                        s.origin.replace("127.0.0.1", "localhost"),
                        job.id
                    )),
                },
                None => message(404, "Not Found"),
            }
        }
        _ => message(404, "Not Found"),
    }
}

/// The value of argument `arg` of `field(...)` in a GraphQL document: a literal or
/// a `$variable` looked up in `variables`.
fn argument(query: &str, field: &str, arg: &str, variables: &Value) -> Option<Value> {
    let start = query.find(&format!("{field}("))? + field.len() + 1;
    let end = start + query[start..].find(')')?;
    query[start..end].split(',').find_map(|pair| {
        let (key, value) = pair.split_once(':')?;
        if key.trim() != arg {
            return None;
        }
        let value = value.trim();
        if let Some(var) = value.strip_prefix('$') {
            variables.get(var).cloned()
        } else if let Some(text) = value.strip_prefix('"') {
            Some(json!(text.trim_end_matches('"')))
        } else {
            value.parse::<u64>().ok().map(|n| json!(n))
        }
    })
}

fn graphql_error(data: Value, kind: &str, text: String) -> Answer {
    answer(
        200,
        json!({"data": data, "errors": [{"type": kind, "message": text}]}),
    )
}

/// `POST /graphql` for the one query shape the adapter sends:
/// `repository(owner:, name:) { pullRequest(number:) { reviewThreads(first: 100)
/// { nodes { isResolved isOutdated comments(first: 100) { nodes { databaseId } } } } } }`.
pub(super) fn graphql(s: &mut State, body: &Value) -> Answer {
    let query = body
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let variables = body.get("variables").cloned().unwrap_or(Value::Null);
    if !query.contains("reviewThreads") {
        return answer(
            200,
            json!({"errors": [{"message": "the model answers pullRequest.reviewThreads only"}]}),
        );
    }
    let text = |arg: &str| {
        argument(query, "repository", arg, &variables)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let full = format!("{}/{}", text("owner"), text("name"));
    if full != REPO {
        return graphql_error(
            json!({"repository": null}),
            "NOT_FOUND",
            format!("Could not resolve to a Repository with the name '{full}'."),
        );
    }
    let number = argument(query, "pullRequest", "number", &variables).and_then(|v| v.as_u64());
    let Some(number) = number.filter(|n| s.pulls.iter().any(|p| p.number == *n)) else {
        return graphql_error(
            json!({"repository": {"pullRequest": null}}),
            "NOT_FOUND",
            format!(
                "Could not resolve to a PullRequest with the number of {}.",
                number.unwrap_or(0)
            ),
        );
    };
    let activity = &s.activity;
    let threads: Vec<Value> = activity
        .comments
        .iter()
        .filter(|c| c.pull == number && c.in_reply_to.is_none())
        .map(|root| {
            let ids: Vec<Value> = activity
                .comments
                .iter()
                .filter(|c| activity.thread_root(c.id).is_some_and(|r| r.id == root.id))
                .map(|c| json!({"databaseId": c.id}))
                .collect();
            json!({
                "isResolved": root.resolved,
                "isOutdated": root.outdated,
                "comments": {"nodes": ids},
            })
        })
        .collect();
    answer(
        200,
        json!({"data": {"repository": {"pullRequest": {"reviewThreads": {"nodes": threads}}}}}),
    )
}

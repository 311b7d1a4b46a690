//! What the model's Jira answers to each request.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use wiremock::Request;

use super::{
    answer, errors, no_content, Answer, Issue, Mode, State, BOT_ACCOUNT, BOT_DISPLAY, BOT_NAME,
    EMAIL, PROJECT,
};

fn time(t: i64) -> String {
    // Jira's own format: milliseconds and an offset without a colon.
    let base = chrono::DateTime::parse_from_rfc3339("2026-11-30T09:00:00Z").unwrap();
    (base + chrono::Duration::minutes(t))
        .format("%Y-%m-%dT%H:%M:%S%.3f%z")
        .to_string()
}

fn category(s: &State, status: &str) -> String {
    s.statuses
        .iter()
        .find(|(n, _)| n == status)
        .map(|(_, c)| c.clone())
        .unwrap_or_else(|| "indeterminate".into())
}

fn status_json(s: &State, name: &str) -> Value {
    let id = s.statuses.iter().position(|(n, _)| n == name).unwrap_or(99) + 10000;
    json!({"name": name, "id": id.to_string(), "statusCategory": {"key": category(s, name)}})
}

fn user_json(mode: Mode, id: &str, display: &str) -> Value {
    match mode {
        Mode::Cloud => json!({"accountId": id, "displayName": display, "active": true}),
        Mode::DataCenter => {
            json!({"name": id, "key": format!("JIRAUSER{}", id.len()), "displayName": display})
        }
    }
}

fn text_field(mode: Mode, text: &str) -> Value {
    match mode {
        Mode::Cloud => json!({"type": "doc", "version": 1, "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": text}]}
        ]}),
        Mode::DataCenter => json!(text),
    }
}

/// The types the model knows: name, inward and outward descriptions.
const LINK_TYPES: &[(&str, &str, &str)] = &[
    ("Blocks", "is blocked by", "blocks"),
    ("Relates", "relates to", "relates to"),
    ("Depends", "is depended on by", "depends on"),
];

/// An issue as the other end of a link: key, and the few fields Jira sends.
fn linked_json(s: &State, key: &str) -> Value {
    let status = s
        .issues
        .get(key)
        .map(|i| i.status.clone())
        .unwrap_or_default();
    json!({
        "id": key.trim_start_matches(&format!("{PROJECT}-")),
        "key": key,
        "self": format!("{}/rest/api/{}/issue/{key}", s.origin, s.mode.version()),
        "fields": {
            "summary": s.issues.get(key).map(|i| i.summary.clone()),
            "status": status_json(s, &status),
            "priority": {"name": "Medium"},
            "issuetype": {"name": "Task"},
        }
    })
}

/// `fields.issuelinks` of issue `key`: a link it is the destination of shows its source
/// as `inwardIssue` ("is blocked by"), one it is the source of shows `outwardIssue`.
fn links_json(s: &State, key: &str) -> Value {
    let mut out = Vec::new();
    for (n, l) in s.links.iter().enumerate() {
        let (inward, outward, _) = LINK_TYPES
            .iter()
            .find(|(name, _, _)| *name == l.kind)
            .map(|(n, i, o)| (*i, *o, *n))
            .unwrap_or(("relates to", "relates to", ""));
        let kind = json!({"id": (10000 + n).to_string(), "name": l.kind, "inward": inward, "outward": outward});
        if l.to == key {
            out.push(json!({"id": (20000 + n).to_string(), "type": kind, "inwardIssue": linked_json(s, &l.from)}));
        } else if l.from == key {
            out.push(json!({"id": (20000 + n).to_string(), "type": kind, "outwardIssue": linked_json(s, &l.to)}));
        }
    }
    Value::Array(out)
}

/// An issue with only the `fields` a request asks for (all of them when it names none),
/// as Jira answers.
fn issue_fields(s: &State, i: &Issue, fields: Option<&[String]>) -> Value {
    let mut out = issue_json(s, i);
    if !s.linking_off {
        out["fields"]["issuelinks"] = links_json(s, &i.key);
    }
    if let (Some(asked), Some(map)) = (fields, out["fields"].as_object_mut()) {
        map.retain(|k, _| asked.iter().any(|a| a == k || a == "*all"));
    }
    out
}

/// `fields=a,b` of a query.
fn asked_fields(req: &Request) -> Option<Vec<String>> {
    query(req)
        .get("fields")
        .map(|f| f.split(',').map(str::to_string).collect())
}

fn issue_json(s: &State, i: &Issue) -> Value {
    json!({
        "id": i.key.trim_start_matches(&format!("{PROJECT}-")),
        "key": i.key,
        "self": format!("{}/rest/api/{}/issue/{}", s.origin, s.mode.version(), i.key),
        "fields": {
            "summary": i.summary,
            "description": text_field(s.mode, &i.description),
            "status": status_json(s, &i.status),
            "labels": i.labels,
            "priority": {"name": i.priority},
            "created": if i.broken { "yesterday".to_string() } else { time(i.created) },
            "updated": time(i.updated),
            "assignee": Value::Null,
        }
    })
}

/// The statuses and labels a search's JQL asks for; `Err` with Jira's message for
/// anything the model does not understand.
fn parse_jql(jql: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let (query, _order) = jql.split_once(" ORDER BY ").unwrap_or((jql, ""));
    let project = format!("project = \"{PROJECT}\" AND ");
    let rest = query
        .strip_prefix(&project)
        .ok_or_else(|| format!("Error in the JQL Query: expected the project first in {jql:?}"))?;
    let rest = rest
        .strip_prefix("status in (")
        .ok_or("Error in the JQL Query: expected `status in (...)`")?;
    let (list, mut rest) = rest.split_once(')').ok_or("unclosed status list")?;
    let statuses: Vec<String> = list
        .split(", ")
        .map(|s| s.trim_matches('"').to_string())
        .collect();
    let mut labels = Vec::new();
    while !rest.is_empty() {
        let term = rest.strip_prefix(" AND ").ok_or("expected AND")?;
        let (clause, after) = if let Some(inner) = term.strip_prefix('(') {
            let end = inner.find(')').ok_or("unclosed parenthesis")?;
            (&inner[..end], &inner[end + 1..])
        } else {
            let end = term.find(" AND ").unwrap_or(term.len());
            (&term[..end], &term[end..])
        };
        match clause.strip_prefix("labels = ") {
            Some(label) => labels.push(label.trim_matches('"').to_string()),
            None => {
                return Err(format!(
                    "Error in the JQL Query: the model does not understand {clause:?}."
                ))
            }
        }
        rest = after;
    }
    Ok((statuses, labels))
}

fn search(s: &State, jql: &str, fields: Option<&[String]>) -> Result<Vec<Value>, Answer> {
    let (statuses, labels) = parse_jql(jql).map_err(|m| errors(400, &[m.as_str()], &[]))?;
    Ok(s.issues
        .values()
        // JQL compares status names ignoring case, as Jira does.
        .filter(|i| statuses.iter().any(|st| st.eq_ignore_ascii_case(&i.status)))
        .filter(|i| labels.iter().all(|l| i.labels.contains(l)))
        .map(|i| issue_fields(s, i, fields))
        .collect())
}

fn query(req: &Request) -> BTreeMap<String, String> {
    req.url.query_pairs().into_owned().collect()
}

fn offered<'a>(s: &'a State, issue: &Issue) -> Vec<&'a super::Transition> {
    s.workflow
        .iter()
        .filter(|t| (t.from.is_empty() || t.from.contains(&issue.status)) && t.to != issue.status)
        .collect()
}

fn transitions_json(s: &State, issue: &Issue) -> Value {
    offered(s, issue)
        .iter()
        .map(|t| {
            let mut fields = json!({});
            if let Some(f) = &t.requires {
                fields[f] = json!({"required": true, "name": f});
            }
            json!({"id": t.id, "name": t.name, "to": status_json(s, &t.to),
                   "hasScreen": t.requires.is_some(), "fields": fields})
        })
        .collect()
}

pub(super) fn route(s: &mut State, method: &str, path: &str, req: &Request) -> Answer {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    // Issue reads run their hooks first (a person acting right before the read).
    if let ("GET", ["issue", key]) = (method, segs.as_slice()) {
        let key = key.to_string();
        for hook in s.get_hooks.due(&key) {
            hook(s, &key);
        }
    }
    let mode = s.mode;
    match (method, segs.as_slice()) {
        ("GET", ["myself"]) => {
            let mut me = user_json(
                mode,
                if mode == Mode::Cloud {
                    BOT_ACCOUNT
                } else {
                    BOT_NAME
                },
                BOT_DISPLAY,
            );
            me["emailAddress"] = json!(EMAIL);
            answer(200, me)
        }
        ("POST", ["search", "jql"]) if mode == Mode::Cloud => {
            let jql = body["jql"].as_str().unwrap_or("");
            let fields: Option<Vec<String>> = body["fields"].as_array().map(|a| {
                a.iter()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect()
            });
            let all = match search(s, jql, fields.as_deref()) {
                Ok(all) => all,
                Err(e) => return e,
            };
            let asked = body["maxResults"].as_u64().unwrap_or(50) as usize;
            let size = asked.clamp(1, s.max_results);
            let start: usize = body["nextPageToken"]
                .as_str()
                .and_then(|t| t.strip_prefix("page-after-"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let page: Vec<Value> = all.iter().skip(start).take(size).cloned().collect();
            let more = start + size < all.len();
            let honest = (more, more.then(|| format!("page-after-{}", start + size)));
            let (more, token) = s.next_cursor.serve(format!("page-after-{start}"), honest);
            let mut out = json!({"issues": page, "isLast": !more});
            if let Some(token) = token {
                out["nextPageToken"] = json!(token);
            }
            answer(200, out)
        }
        ("GET", ["search"]) if mode == Mode::DataCenter => {
            let q = query(req);
            let fields = asked_fields(req);
            let jql = q.get("jql").map(String::as_str).unwrap_or("");
            let all = match search(s, jql, fields.as_deref()) {
                Ok(all) => all,
                Err(e) => return e,
            };
            let start: usize = q.get("startAt").and_then(|v| v.parse().ok()).unwrap_or(0);
            let size = q
                .get("maxResults")
                .and_then(|v| v.parse().ok())
                .unwrap_or(50usize)
                .clamp(1, s.max_results);
            let page: Vec<Value> = all.iter().skip(start).take(size).cloned().collect();
            answer(
                200,
                json!({"startAt": start, "maxResults": size, "total": all.len(), "issues": page}),
            )
        }
        ("GET", ["issue", key]) => {
            if let Some(new) = s.moved.get(*key).cloned() {
                let issue = s.issues.get(&new).cloned();
                return match issue {
                    Some(i) => {
                        let mut out = issue_fields(s, &i, asked_fields(req).as_deref());
                        if query(req)
                            .get("expand")
                            .is_some_and(|e| e.contains("transitions"))
                        {
                            out["transitions"] = transitions_json(s, &i);
                        }
                        answer(200, out)
                    }
                    None => errors(
                        404,
                        &["Issue does not exist or you do not have permission to see it."],
                        &[],
                    ),
                };
            }
            match s.issues.get(*key).cloned() {
                Some(i) => {
                    let mut out = issue_fields(s, &i, asked_fields(req).as_deref());
                    if query(req)
                        .get("expand")
                        .is_some_and(|e| e.split(',').any(|x| x == "transitions"))
                    {
                        out["transitions"] = transitions_json(s, &i);
                    }
                    answer(200, out)
                }
                None => errors(
                    404,
                    &["Issue does not exist or you do not have permission to see it."],
                    &[],
                ),
            }
        }
        ("GET", ["issue", key, "comment"]) => {
            let Some(issue) = s.issues.get(*key) else {
                return errors(
                    404,
                    &["Issue does not exist or you do not have permission to see it."],
                    &[],
                );
            };
            let q = query(req);
            let start: usize = q.get("startAt").and_then(|v| v.parse().ok()).unwrap_or(0);
            let size: usize = q
                .get("maxResults")
                .and_then(|v| v.parse().ok())
                .unwrap_or(50usize)
                .clamp(1, 100);
            let comments: Vec<Value> = issue
                .comments
                .iter()
                .skip(start)
                .take(size)
                .map(|c| {
                    json!({
                        "id": c.id.to_string(),
                        "author": user_json(mode, &c.author, &c.display_name),
                        "body": c.body,
                        "created": time(c.created),
                        "updated": time(c.created),
                    })
                })
                .collect();
            answer(
                200,
                json!({"startAt": start, "maxResults": size, "total": issue.comments.len(), "comments": comments}),
            )
        }
        ("POST", ["issue", key, "comment"]) => {
            if !s.issues.contains_key(*key) {
                return errors(
                    404,
                    &["Issue does not exist or you do not have permission to see it."],
                    &[],
                );
            }
            let posted = body["body"].clone();
            let valid = match mode {
                Mode::Cloud => s
                    .adf
                    .0
                    .validate(&posted, s.adf.1)
                    .map_err(|e| format!("{e}")),
                Mode::DataCenter if posted.is_string() => Ok(()),
                Mode::DataCenter => Err("a Data Center comment body is a string".to_string()),
            };
            if let Err(e) = valid {
                return errors(
                    400,
                    &[],
                    &[("comment", &format!("Comment body is not valid: {e}"))],
                );
            }
            s.clock += 1;
            let (id, now) = (s.next_comment, s.clock);
            s.next_comment += 1;
            let author = if mode == Mode::Cloud {
                BOT_ACCOUNT
            } else {
                BOT_NAME
            };
            let issue = s.issues.get_mut(*key).expect("checked");
            issue.comments.push(super::ModelComment {
                id,
                author: author.to_string(),
                display_name: BOT_DISPLAY.to_string(),
                body: posted.clone(),
                created: now,
            });
            issue.updated = now;
            answer(
                201,
                json!({
                    "id": id.to_string(),
                    "author": user_json(mode, author, BOT_DISPLAY),
                    "body": posted,
                    "created": time(now),
                    "updated": time(now),
                }),
            )
        }
        ("GET", ["issue", key, "transitions"]) => {
            let Some(issue) = s.issues.get(*key).cloned() else {
                return errors(
                    404,
                    &["Issue does not exist or you do not have permission to see it."],
                    &[],
                );
            };
            answer(200, json!({"transitions": transitions_json(s, &issue)}))
        }
        ("POST", ["issue", key, "transitions"]) => {
            let Some(issue) = s.issues.get(*key).cloned() else {
                return errors(
                    404,
                    &["Issue does not exist or you do not have permission to see it."],
                    &[],
                );
            };
            let id = body["transition"]["id"].as_str().unwrap_or("");
            let Some(t) = offered(s, &issue).into_iter().find(|t| t.id == id).cloned() else {
                let m = format!("Transition id '{id}' is not valid for this issue.");
                return errors(400, &[m.as_str()], &[]);
            };
            if let Some(field) = &t.requires {
                if body["fields"][field].is_null() {
                    let m = format!("{field} is required.");
                    return errors(400, &[], &[(field.as_str(), m.as_str())]);
                }
            }
            s.clock += 1;
            let now = s.clock;
            let issue = s.issues.get_mut(*key).expect("checked");
            issue.status = t.to.clone();
            issue.updated = now;
            no_content()
        }
        ("GET", ["project", key, "statuses"]) => {
            if *key != PROJECT {
                let m = format!("No project could be found with key '{key}'.");
                return errors(404, &[m.as_str()], &[]);
            }
            let statuses: Vec<Value> = s.statuses.iter().map(|(n, _)| status_json(s, n)).collect();
            answer(
                200,
                json!([{"id": "10001", "name": "Task", "subtask": false, "statuses": statuses}]),
            )
        }
        _ => errors(404, &["No such endpoint in the model."], &[]),
    }
}

//! Executing a validated request against the model's state: one resolver per root
//! field the adapter uses; anything else is an error, so an unmodelled query fails
//! loudly instead of answering nothing.

use apollo_compiler::executable::Field;
use serde_json::{json, Value};

use super::graphql::{argument, fields, shape, Checked};
use super::{Issue, Model, ModelComment, TEAM};
use crate::model_plumbing::NextCursor;

/// Run the operation; the whole response body (`data` or `errors`).
pub fn execute(model: &mut Model, checked: &Checked) -> Value {
    let op = checked.operation();
    let vars = &checked.variables;
    let mut data = serde_json::Map::new();
    for field in fields(&checked.doc, &op.selection_set) {
        let full = match resolve(model, field, vars, checked) {
            Ok(v) => v,
            Err(message) => {
                let code = if message.contains("not found") || message.contains("already exists") {
                    "INVALID_INPUT"
                } else {
                    "MODEL_UNSUPPORTED"
                };
                return json!({"data": null, "errors": [{"message": message,
                    "path": [field.response_key().as_str()],
                    "extensions": {"code": code, "type": "invalid input"}}]});
            }
        };
        let shaped = if field.selection_set.selections.is_empty() {
            full
        } else {
            shape(&checked.doc, &field.selection_set, &full, vars)
        };
        data.insert(field.response_key().to_string(), shaped);
    }
    json!({ "data": data })
}

fn resolve(
    model: &mut Model,
    field: &Field,
    vars: &Value,
    checked: &Checked,
) -> Result<Value, String> {
    let arg = |name: &str| argument(field, name, vars).unwrap_or(Value::Null);
    match field.name.as_str() {
        "viewer" => Ok(model.user_json(super::VIEWER_ID)),
        "teams" => {
            let key = arg("filter")
                .pointer("/key/eq")
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or("the model answers `teams` only with filter {key: {eq: KEY}}")?;
            let nodes = if key == TEAM {
                vec![model.team_json()]
            } else {
                Vec::new()
            };
            Ok(json!({"nodes": nodes, "pageInfo": {"hasNextPage": false, "endCursor": null}}))
        }
        "issues" => {
            let filter = arg("filter");
            let mut matching = Vec::new();
            for issue in model.issues.values() {
                if matches(model, issue, &filter)? {
                    matching.push(issue.clone());
                }
            }
            matching.sort_by_key(|i| i.created);
            let (page, info) = paginate(
                matching.len(),
                &arg("first"),
                &arg("after"),
                model.next_cursor,
            )?;
            let sub = Some(field);
            let nodes: Vec<Value> = matching[page]
                .iter()
                .map(|i| model.issue_json(i, sub, vars, checked))
                .collect();
            Ok(json!({"nodes": nodes, "pageInfo": info}))
        }
        "issue" => {
            let id = arg("id");
            let id = id.as_str().unwrap_or_default();
            let n = model
                .find(id)
                .ok_or_else(|| format!("Entity not found: Issue {id}"))?;
            // Re-reads of the issue itself count; reads of its comments or relations do not.
            let whole = fields(&checked.doc, &field.selection_set)
                .iter()
                .any(|f| f.name == "state");
            if whole {
                model.reads.entry(n).and_modify(|c| *c += 1).or_insert(0);
                for hook in model.get_hooks.due(&n) {
                    model.clock += 1;
                    let clock = model.clock;
                    let issue = model.issues.get_mut(&n).unwrap();
                    hook(issue);
                    issue.updated = clock;
                }
            }
            let issue = model.issues[&n].clone();
            Ok(model.issue_json(&issue, Some(field), vars, checked))
        }
        "comment" => {
            let id = arg("id");
            let id = id.as_str().unwrap_or_default();
            for issue in model.issues.values() {
                if let Some(c) = issue.comments.iter().find(|c| c.id == id) {
                    let mut value = model.comment_json(c);
                    value["issue"] = json!({"identifier": issue.identifier});
                    return Ok(value);
                }
            }
            Err(format!("Entity not found: Comment {id}"))
        }
        "commentCreate" => {
            let input = arg("input");
            let id = input["id"].as_str().map(str::to_string);
            if let Some(id) = &id {
                uuid::Uuid::parse_str(id)
                    .map_err(|_| format!("Argument Validation Error: id {id:?} must be a UUID"))?;
                if model
                    .issues
                    .values()
                    .any(|i| i.comments.iter().any(|c| &c.id == id))
                {
                    return Err(format!("Comment with id {id} already exists"));
                }
            }
            let issue_id = input["issueId"].as_str().unwrap_or_default();
            let n = model
                .issues
                .values()
                .find(|i| i.uuid == issue_id)
                .map(|i| i.identifier.clone())
                .and_then(|ident| model.find(&ident))
                .ok_or_else(|| {
                    format!("Entity not found: Issue {issue_id} (issueId takes the issue's id)")
                })?;
            let body = input["body"]
                .as_str()
                .ok_or("commentCreate without a body")?;
            model.clock += 1;
            let comment = ModelComment {
                id: id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                user_id: super::VIEWER_ID.to_string(),
                body: body.to_string(),
                created: model.clock,
            };
            let value = model.comment_json(&comment);
            model.issues.get_mut(&n).unwrap().comments.push(comment);
            Ok(json!({"success": true, "lastSyncId": 1.0, "comment": value}))
        }
        "issueUpdate" => {
            let id = arg("id");
            let id = id.as_str().unwrap_or_default();
            let n = model
                .find(id)
                .ok_or_else(|| format!("Entity not found: Issue {id}"))?;
            let input = arg("input");
            let state_id = input["stateId"]
                .as_str()
                .ok_or("the model updates only stateId")?;
            if !model.states.iter().any(|s| s.id == state_id) {
                return Err(format!("Entity not found: WorkflowState {state_id}"));
            }
            model.clock += 1;
            let clock = model.clock;
            let issue = model.issues.get_mut(&n).unwrap();
            issue.state_id = state_id.to_string();
            issue.updated = clock;
            let issue = issue.clone();
            Ok(json!({"success": true, "lastSyncId": 1.0,
                "issue": model.issue_json(&issue, None, vars, checked)}))
        }
        "rateLimitStatus" => Ok(json!({"identifier": null, "kind": "api key", "limits": [
            {"type": "requestLimit", "remainingAmount": model.requests_remaining,
             "allowedAmount": super::REQUEST_LIMIT, "requestedAmount": 1, "period": 3600000,
             "reset": model.reset_ms},
            {"type": "complexityLimit", "remainingAmount": model.complexity_remaining,
             "allowedAmount": super::COMPLEXITY_LIMIT, "requestedAmount": 1, "period": 3600000,
             "reset": model.reset_ms},
        ]})),
        other => Err(format!(
            "the model does not implement Query/Mutation.{other}"
        )),
    }
}

/// Indices of one page and its `pageInfo`; cursors are offsets.
fn paginate(
    len: usize,
    first: &Value,
    after: &Value,
    next: NextCursor,
) -> Result<(std::ops::Range<usize>, Value), String> {
    let first = first.as_u64().unwrap_or(50) as usize;
    if first > 250 {
        return Err(format!("first: {first} is over Linear's maximum of 250"));
    }
    let start = match after {
        Value::Null => 0,
        Value::String(s) => s
            .parse::<usize>()
            .map_err(|_| format!("bad cursor {s:?}"))?,
        other => return Err(format!("bad cursor {other}")),
    };
    let start = start.min(len);
    let end = (start + first).min(len);
    let honest = (end < len, (end > start).then(|| end.to_string()));
    let (more, cursor) = next.serve(start.to_string(), honest);
    let info = json!({"hasNextPage": more, "endCursor": cursor});
    Ok((start..end, info))
}

/// Whether `issue` passes an `IssueFilter`; parts the model does not know are an error.
fn matches(model: &Model, issue: &Issue, filter: &Value) -> Result<bool, String> {
    let Value::Object(parts) = filter else {
        return Ok(true);
    };
    for (key, cond) in parts {
        let ok = match key.as_str() {
            "and" => {
                let mut all = true;
                for f in cond.as_array().into_iter().flatten() {
                    all &= matches(model, issue, f)?;
                }
                all
            }
            "team" => compare(TEAM, cond.get("key").ok_or("team filter without key")?)?,
            "state" => {
                let state = model
                    .states
                    .iter()
                    .find(|s| s.id == issue.state_id)
                    .unwrap();
                let mut ok = true;
                for (k, c) in cond.as_object().into_iter().flatten() {
                    ok &= match k.as_str() {
                        "id" => compare(&state.id, c)?,
                        "name" => compare(&state.name, c)?,
                        "type" => compare(&state.kind, c)?,
                        other => return Err(format!("the model has no state filter {other}")),
                    };
                }
                ok
            }
            "labels" => {
                let some = cond
                    .get("some")
                    .and_then(|s| s.get("name"))
                    .ok_or("labels filter: the model knows only {some: {name: ...}}")?;
                let mut any = false;
                for l in &issue.labels {
                    any |= compare(l, some)?;
                }
                any
            }
            "project" => match &issue.project {
                Some(p) => compare(p, cond.get("name").ok_or("project filter without name")?)?,
                None => false,
            },
            other => return Err(format!("the model has no issue filter {other}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn compare(value: &str, comparator: &Value) -> Result<bool, String> {
    let mut ok = true;
    for (op, operand) in comparator
        .as_object()
        .ok_or("a comparator must be an object")?
    {
        ok &= match op.as_str() {
            "eq" => operand.as_str() == Some(value),
            "eqIgnoreCase" => operand
                .as_str()
                .is_some_and(|o| o.to_lowercase() == value.to_lowercase()),
            "in" => operand
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o.as_str() == Some(value)),
            other => return Err(format!("the model has no comparator {other}")),
        };
    }
    Ok(ok)
}

fn time(secs: i64) -> String {
    let base = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap();
    (base + chrono::Duration::seconds(secs))
        .to_utc()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// The arguments of the nested field `name` under `parent`'s selection.
fn nested<'a>(parent: Option<&'a Field>, name: &str, checked: &'a Checked) -> Option<&'a Field> {
    let parent = parent?;
    let mut stack = vec![parent];
    while let Some(f) = stack.pop() {
        for child in fields(&checked.doc, &f.selection_set) {
            if child.name == name {
                return Some(child);
            }
            if child.name == "nodes" {
                stack.push(child);
            }
        }
    }
    None
}

impl Model {
    pub fn find(&self, id: &str) -> Option<u64> {
        self.issues
            .iter()
            .find(|(_, i)| i.uuid == id || i.identifier.eq_ignore_ascii_case(id))
            .map(|(n, _)| *n)
    }

    pub fn user_json(&self, id: &str) -> Value {
        let (id, name, email) = self.users.iter().find(|u| u.0 == id).expect("known user");
        json!({"id": id, "name": name, "displayName": name, "email": email, "isMe": id == super::VIEWER_ID})
    }

    fn state_json(&self, id: &str) -> Value {
        let s = self.states.iter().find(|s| s.id == id).unwrap();
        json!({"id": s.id, "name": s.name, "type": s.kind})
    }

    fn team_json(&self) -> Value {
        let states: Vec<Value> = self.states.iter().map(|s| self.state_json(&s.id)).collect();
        json!({"id": self.team_uuid, "key": TEAM, "name": "Engineering",
            "states": {"nodes": states, "pageInfo": {"hasNextPage": false, "endCursor": null}}})
    }

    fn comment_json(&self, c: &ModelComment) -> Value {
        json!({"id": c.id, "body": c.body, "createdAt": time(c.created), "updatedAt": time(c.created),
            "user": self.user_json(&c.user_id)})
    }

    /// The whole issue; nested `comments` and `inverseRelations` are paged by the
    /// arguments the request gave them under `field`.
    fn issue_json(
        &mut self,
        issue: &Issue,
        field: Option<&Field>,
        vars: &Value,
        checked: &Checked,
    ) -> Value {
        let page_args = |name: &str| {
            nested(field, name, checked)
                .map(|f| {
                    (
                        argument(f, "first", vars).unwrap_or(Value::Null),
                        argument(f, "after", vars).unwrap_or(Value::Null),
                    )
                })
                .unwrap_or((Value::Null, Value::Null))
        };
        let mut comments: Vec<ModelComment> = issue.comments.clone();
        comments.sort_by_key(|c| c.created);
        if let Some(n) = self.find(&issue.identifier) {
            if let Some(left) = self.stale_comment_reads.get_mut(&n) {
                if *left > 0 && nested(field, "comments", checked).is_some() {
                    *left -= 1;
                    comments.pop();
                }
            }
        }
        let (first, after) = page_args("comments");
        let comments_conn = match paginate(comments.len(), &first, &after, self.next_cursor) {
            Ok((range, info)) => {
                json!({"nodes": comments[range].iter().map(|c| self.comment_json(c)).collect::<Vec<_>>(), "pageInfo": info})
            }
            Err(_) => json!({"nodes": [], "pageInfo": {"hasNextPage": false}}),
        };
        let relations: Vec<Value> = issue
            .blocked_by
            .iter()
            .filter_map(|b| self.find(b))
            .map(|n| {
                let blocker = &self.issues[&n];
                json!({"type": "blocks", "issue": {"identifier": blocker.identifier,
                    "state": self.state_json(&blocker.state_id)}})
            })
            .collect();
        let (first, after) = page_args("inverseRelations");
        let relations_conn = match paginate(relations.len(), &first, &after, self.next_cursor) {
            Ok((range, info)) => json!({"nodes": relations[range].to_vec(), "pageInfo": info}),
            Err(_) => json!({"nodes": [], "pageInfo": {"hasNextPage": false}}),
        };
        json!({
            "id": issue.uuid,
            "identifier": issue.identifier,
            "title": issue.title,
            "description": issue.description,
            "priority": issue.priority as f64,
            "url": format!("https://linear.app/acme/issue/{}", issue.identifier),
            "createdAt": if issue.broken { "yesterday".to_string() } else { time(issue.created) },
            "updatedAt": time(issue.updated),
            "state": self.state_json(&issue.state_id),
            "labels": {"nodes": issue.labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
                "pageInfo": {"hasNextPage": false, "endCursor": null}},
            "assignee": issue.assignee.as_deref().map(|a| self.user_json(a)),
            "project": issue.project.as_ref().map(|p| json!({"name": p})),
            "inverseRelations": relations_conn,
            "comments": comments_conn,
        })
    }
}

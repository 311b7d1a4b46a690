//! Executing a validated request against the project: the root fields the adapter uses,
//! and the fields whose value depends on their arguments (`projectV2(number:)`,
//! `items(first:, after:)`, `field(name:)`, `fieldValueByName(name:)`, `issue(number:)`,
//! `projectItems`), computed while the answer is shaped to the request. A root field the
//! model does not know is an error, so an unmodelled query fails loudly.

use std::cell::RefCell;

use apollo_compiler::executable::{Field, OperationType};
use serde_json::{json, Map, Value};

use super::{Content, Item, Project, LOGIN, NUMBER, OTHER_REPO, OWNER, REPO};
use crate::common::graphql::{argument, fields, shape_with, Checked};
use crate::github_model::time;

/// Run the operation; the whole response body (`data`, and `errors` when any).
pub fn execute(p: &mut Project, checked: &Checked) -> Value {
    let op = checked.operation();
    let vars = &checked.variables;
    let errors = RefCell::new(Vec::<Value>::new());
    let root = if op.operation_type == OperationType::Mutation {
        let mut root = json!({"__typename": "Mutation"});
        for field in fields(&checked.doc, &op.selection_set) {
            match field.name.as_str() {
                "updateProjectV2ItemFieldValue" => {
                    let input = argument(field, "input", vars).unwrap_or(Value::Null);
                    match update_field_value(p, &input) {
                        Ok(item) => {
                            root["updateProjectV2ItemFieldValue"] = json!({
                                "__typename": "UpdateProjectV2ItemFieldValuePayload",
                                "projectV2Item": item_json(p, &item),
                            })
                        }
                        Err(message) => {
                            return json!({"data": {"updateProjectV2ItemFieldValue": null},
                                "errors": [{"type": "UNPROCESSABLE", "message": message,
                                    "path": ["updateProjectV2ItemFieldValue"]}]})
                        }
                    }
                }
                other => return unsupported(other),
            }
        }
        root
    } else {
        for field in fields(&checked.doc, &op.selection_set) {
            if !matches!(
                field.name.as_str(),
                "rateLimit" | "viewer" | "repositoryOwner" | "repository" | "__typename"
            ) {
                return unsupported(field.name.as_str());
            }
        }
        json!({
            "__typename": "Query",
            "rateLimit": {"cost": 1, "remaining": p.remaining, "limit": 5000,
                "used": 5000 - p.remaining.min(5000), "nodeCount": 0,
                "resetAt": p.reset_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)},
            "viewer": {"__typename": "User", "login": LOGIN},
        })
    };
    let project: &Project = p;
    let data = shape_with(
        &checked.doc,
        &op.selection_set,
        &root,
        vars,
        &|field, object| compute(project, field, object, vars, &errors),
    );
    let errors = errors.into_inner();
    if errors.is_empty() {
        json!({ "data": data })
    } else {
        json!({ "data": data, "errors": errors })
    }
}

fn unsupported(field: &str) -> Value {
    json!({"errors": [{"type": "MODEL_UNSUPPORTED",
        "message": format!("the model does not answer the root field `{field}`")}]})
}

fn not_found(errors: &RefCell<Vec<Value>>, field: &Field, message: String) -> Option<Value> {
    errors
        .borrow_mut()
        .push(json!({"type": "NOT_FOUND", "message": message,
        "path": [field.response_key().as_str()]}));
    Some(Value::Null)
}

/// The value of `field` on `object` when it depends on arguments or on the model's state.
fn compute(
    p: &Project,
    field: &Field,
    object: &Map<String, Value>,
    vars: &Value,
    errors: &RefCell<Vec<Value>>,
) -> Option<Value> {
    let arg = |name: &str| argument(field, name, vars).unwrap_or(Value::Null);
    let typename = object
        .get("__typename")
        .and_then(Value::as_str)
        .unwrap_or("");
    match (typename, field.name.as_str()) {
        ("Query", "repositoryOwner") => {
            let login = arg("login");
            if login
                .as_str()
                .is_some_and(|l| l.eq_ignore_ascii_case(OWNER))
            {
                Some(json!({"__typename": "Organization",
                    "__types": ["Organization", "ProjectV2Owner", "RepositoryOwner", "Actor", "Node"],
                    "login": OWNER}))
            } else {
                Some(Value::Null)
            }
        }
        ("Organization", "projectV2") => {
            if arg("number").as_u64() == Some(NUMBER) {
                Some(
                    json!({"__typename": "ProjectV2", "id": p.id, "title": p.title, "number": NUMBER}),
                )
            } else {
                not_found(
                    errors,
                    field,
                    format!(
                        "Could not resolve to a ProjectV2 with the number {}.",
                        arg("number")
                    ),
                )
            }
        }
        ("ProjectV2", "items") => {
            let Some(first) = arg("first").as_u64() else {
                return not_found(errors, field, "You must provide a `first` or `last` value to properly paginate the `items` connection.".into());
            };
            if first > 100 {
                errors.borrow_mut().push(json!({"type": "EXCESSIVE_PAGINATION",
                    "message": format!("Requesting {first} records on the `items` connection exceeds the `first` limit of 100 records.")}));
                return Some(Value::Null);
            }
            let start = match arg("after").as_str() {
                None => 0,
                Some(cursor) => match cursor
                    .strip_prefix("cursor:")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    Some(n) => n,
                    None => {
                        return not_found(
                            errors,
                            field,
                            format!("`{cursor}` does not appear to be a valid cursor."),
                        )
                    }
                },
            };
            let end = (start + first as usize).min(p.items.len());
            let nodes: Vec<Value> = p.items[start.min(end)..end]
                .iter()
                .map(|i| item_json(p, i))
                .collect();
            let honest = (
                end < p.items.len(),
                (end > start).then(|| format!("cursor:{end}")),
            );
            let (more, cursor) = p.next_cursor.serve(format!("cursor:{start}"), honest);
            Some(
                json!({"nodes": nodes, "totalCount": p.items.len(), "pageInfo": {
                    "hasNextPage": more,
                    "endCursor": cursor,
                }}),
            )
        }
        ("ProjectV2", "field") => {
            if arg("name").as_str() == Some(p.field_name.as_str()) {
                let options: Vec<Value> = p
                    .options
                    .iter()
                    .map(|(id, name)| json!({"id": id, "name": name}))
                    .collect();
                Some(json!({"__typename": "ProjectV2SingleSelectField",
                    "__types": ["ProjectV2SingleSelectField", "ProjectV2FieldConfiguration", "ProjectV2FieldCommon", "Node"],
                    "id": p.field_id, "name": p.field_name, "options": options}))
            } else if arg("name").as_str() == Some("Title") {
                Some(json!({"__typename": "ProjectV2Field",
                    "__types": ["ProjectV2Field", "ProjectV2FieldConfiguration", "ProjectV2FieldCommon", "Node"],
                    "id": "PVTF_title", "name": "Title"}))
            } else {
                Some(Value::Null)
            }
        }
        ("ProjectV2Item", "fieldValueByName") => {
            let item = p
                .items
                .iter()
                .find(|i| Some(i.id.as_str()) == object.get("id").and_then(Value::as_str))?;
            let wanted = arg("name");
            if wanted.as_str() != Some(p.field_name.as_str()) {
                return Some(Value::Null);
            }
            let option = item.status.as_deref()?;
            Some(json!({"__typename": "ProjectV2ItemFieldSingleSelectValue",
                "__types": ["ProjectV2ItemFieldSingleSelectValue", "ProjectV2ItemFieldValue", "Node"],
                "name": p.option_name(option), "optionId": option}))
        }
        ("Query", "repository") => {
            let repo = format!(
                "{}/{}",
                arg("owner").as_str().unwrap_or(""),
                arg("name").as_str().unwrap_or("")
            );
            if repo.eq_ignore_ascii_case(REPO) || repo.eq_ignore_ascii_case(OTHER_REPO) {
                Some(json!({"__typename": "Repository", "nameWithOwner": repo}))
            } else {
                not_found(
                    errors,
                    field,
                    format!("Could not resolve to a Repository with the name '{repo}'."),
                )
            }
        }
        ("Repository", "issue") => {
            let repo = object
                .get("nameWithOwner")
                .and_then(Value::as_str)
                .unwrap_or("");
            let number = arg("number").as_u64().unwrap_or(0);
            match issue_json(p, repo, number) {
                Some(issue) => Some(issue),
                None => not_found(
                    errors,
                    field,
                    format!("Could not resolve to an Issue with the number of {number}."),
                ),
            }
        }
        ("Issue", "projectItems") => {
            let repo = object.get("__repo").and_then(Value::as_str).unwrap_or("");
            let number = object.get("number").and_then(Value::as_u64).unwrap_or(0);
            let archived_too = arg("includeArchived").as_bool().unwrap_or(true);
            let nodes: Vec<Value> = p
                .items
                .iter()
                .filter(|i| content_of(&i.content) == Some((repo, number)))
                .filter(|i| archived_too || !i.archived)
                .map(|i| item_json(p, i))
                .collect();
            Some(json!({"nodes": nodes, "totalCount": nodes.len(),
                "pageInfo": {"hasNextPage": false, "endCursor": null}}))
        }
        _ => None,
    }
}

/// The issue a card shows: its repository and number (issues only).
fn content_of(content: &Content) -> Option<(&'static str, u64)> {
    match content {
        Content::Issue(n) => Some((REPO, *n)),
        Content::Other(n) => Some((OTHER_REPO, *n)),
        _ => None,
    }
}

fn item_json(p: &Project, item: &Item) -> Value {
    let (kind, content) = match &item.content {
        Content::Issue(n) => ("ISSUE", issue_json(p, REPO, *n)),
        Content::Other(n) => ("ISSUE", issue_json(p, OTHER_REPO, *n)),
        Content::Pull(n) => (
            "PULL_REQUEST",
            Some(
                json!({"__typename": "PullRequest", "number": n, "title": p.issues.get(*n).map(|i| i.title)}),
            ),
        ),
        Content::Draft(title) => (
            "DRAFT_ISSUE",
            Some(json!({"__typename": "DraftIssue", "title": title})),
        ),
    };
    json!({"__typename": "ProjectV2Item", "id": item.id, "type": kind, "isArchived": item.archived,
        "content": content, "project": {"__typename": "ProjectV2", "id": p.id, "number": NUMBER}})
}

fn issue_json(p: &Project, repo: &str, number: u64) -> Option<Value> {
    let (title, body, open, labels, created, updated, broken) = if repo.eq_ignore_ascii_case(REPO) {
        let issue = p.issues.get(number).filter(|i| !i.pull_request)?;
        (
            issue.title,
            issue.body,
            issue.open,
            issue.labels,
            issue.created,
            issue.updated,
            issue.broken,
        )
    } else if repo.eq_ignore_ascii_case(OTHER_REPO) {
        let issue = p.other.get(&number)?;
        (
            issue.title.clone(),
            String::new(),
            issue.open,
            Vec::new(),
            0,
            0,
            false,
        )
    } else {
        return None;
    };
    let labels: Vec<Value> = labels.iter().map(|l| json!({"name": l})).collect();
    Some(json!({
        "__typename": "Issue", "__repo": repo, "number": number, "title": title, "body": body,
        "url": format!("https://github.com/{repo}/issues/{number}"),
        "state": if open { "OPEN" } else { "CLOSED" },
        "createdAt": if broken { "yesterday".to_string() } else { time(created) },
        "updatedAt": time(updated),
        "repository": {"__typename": "Repository", "nameWithOwner": repo},
        "labels": {"nodes": labels, "pageInfo": {"hasNextPage": false, "endCursor": null}},
        "assignees": {"nodes": [], "pageInfo": {"hasNextPage": false, "endCursor": null}},
    }))
}

/// `updateProjectV2ItemFieldValue`: refused as GitHub refuses it (a wrong project, field
/// or item, an option the field does not have).
fn update_field_value(p: &mut Project, input: &Value) -> Result<Item, String> {
    let text = |key: &str| input[key].as_str().unwrap_or("").to_string();
    if text("projectId") != p.id {
        return Err(format!(
            "Could not resolve to a node with the global id of '{}'",
            text("projectId")
        ));
    }
    if text("fieldId") != p.field_id {
        return Err(format!(
            "Could not resolve to a node with the global id of '{}'",
            text("fieldId")
        ));
    }
    let option = input["value"]["singleSelectOptionId"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if p.option_name(&option).is_none() {
        return Err("The single select option Id does not belong to the field".to_string());
    }
    let item_id = text("itemId");
    let item = p
        .items
        .iter_mut()
        .find(|i| i.id == item_id)
        .ok_or_else(|| format!("Could not resolve to a node with the global id of '{item_id}'"))?;
    item.status = Some(option);
    Ok(item.clone())
}

//! A stateful in-memory model of Linear's GraphQL API behind a local HTTP server
//! (wiremock on 127.0.0.1): one team with its workflow states, issues with labels,
//! a project, an assignee, `blocks` relations and comments (with client-chosen ids,
//! refusing a duplicate id), the viewer, cursor pagination, rate-limit and complexity
//! headers (resets in epoch milliseconds), injected `RATELIMITED` errors and a log of
//! every request. Every request is validated against Linear's published schema
//! (document and variables) and refused as Linear would refuse it when it does not
//! validate; the refusals are kept so a test can assert there were none.
#![allow(dead_code)]

mod graphql;
mod resolve;

pub use graphql::schema;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::model_plumbing::{Faults, Hooks, NextCursor, RequestLog};

/// The API key the model accepts.
pub const TOKEN: &str = "lin_api_test";
/// The team's key.
pub const TEAM: &str = "ENG";
/// The viewer (the key's own user).
pub const VIEWER_ID: &str = "8f0c3a51-0000-4000-8000-000000000001";
/// Another person on the team.
pub const ALICE_ID: &str = "8f0c3a51-0000-4000-8000-000000000002";
/// A third person, whom no test trusts.
pub const MALLORY_ID: &str = "8f0c3a51-0000-4000-8000-000000000003";
/// Requests per window the model grants.
pub const REQUEST_LIMIT: u64 = 5000;
/// Complexity points per window.
pub const COMPLEXITY_LIMIT: u64 = 250_000;

/// One workflow state.
#[derive(Debug, Clone)]
pub struct State {
    pub id: String,
    pub name: String,
    pub kind: String,
}

/// One issue.
#[derive(Debug, Clone)]
pub struct Issue {
    pub uuid: String,
    pub identifier: String,
    pub title: String,
    pub description: Option<String>,
    pub priority: u8,
    pub state_id: String,
    pub labels: Vec<String>,
    pub project: Option<String>,
    pub assignee: Option<String>,
    /// Identifiers of the issues blocking this one.
    pub blocked_by: Vec<String>,
    pub created: i64,
    pub updated: i64,
    pub comments: Vec<ModelComment>,
    /// Answer `createdAt` with something that is not a date (a corrupted record).
    pub broken: bool,
}

/// One comment.
#[derive(Debug, Clone)]
pub struct ModelComment {
    pub id: String,
    pub user_id: String,
    pub body: String,
    pub created: i64,
}

/// A request as the model saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// The operation name, or `?` when the request had none.
    pub operation: String,
    pub status: u16,
    /// The complexity charged (0 for refused requests).
    pub complexity: u64,
    /// Why the model refused it, when it did.
    pub refused: Option<String>,
    /// Whether it was a mutation (a write), as its validated document says.
    pub mutation: bool,
}

impl std::fmt::Display for Logged {
    /// `operation -> status`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.operation, self.status)
    }
}

type Hook = Box<dyn FnOnce(&mut Issue) + Send>;

pub(crate) struct Model {
    pub team_uuid: String,
    pub states: Vec<State>,
    pub issues: BTreeMap<u64, Issue>,
    pub users: Vec<(String, String, String)>,
    pub next_number: u64,
    pub clock: i64,
    pub log: RequestLog<Logged>,
    pub requests_remaining: u64,
    pub complexity_remaining: u64,
    /// Epoch ms when the window resets.
    pub reset_ms: i64,
    /// Requests answered normally before `rate_limited` starts counting.
    pub pass_before_limit: usize,
    /// Then this many requests are answered RATELIMITED.
    pub rate_limited: usize,
    /// Operations whose next answers are lost after the request took effect
    /// (operation, how many): the client sees a 502.
    pub lost_answers: Vec<(String, usize)>,
    /// Re-read hooks, by issue number, counted in whole `issue(id:)` reads.
    pub get_hooks: Hooks<u64, Hook>,
    /// Whole `issue(id:)` reads so far, by issue number (the last one's index).
    pub reads: BTreeMap<u64, usize>,
    /// The next this many comment listings of an issue miss its newest comment
    /// (a read that raced the write).
    pub stale_comment_reads: BTreeMap<u64, usize>,
    /// Requests answered with an HTTP status before anything is done (Linear's edge
    /// down: 503).
    pub faults: Faults,
    pub accept: String,
    /// The `pageInfo` every connection serves.
    pub next_cursor: NextCursor,
}

/// The model and the server answering for it.
pub struct LinearModel {
    state: Arc<Mutex<Model>>,
    server: MockServer,
}

impl LinearModel {
    /// A team `ENG` with Linear's default workflow plus the three-stage pipeline's
    /// states, accepting [`TOKEN`] as a personal API key.
    pub async fn start() -> Self {
        Self::start_with_auth(TOKEN).await
    }

    /// Like [`LinearModel::start`], accepting exactly this `Authorization` value.
    pub async fn start_with_auth(authorization: &str) -> Self {
        let server = MockServer::start().await;
        let states = [
            ("Backlog", "backlog"),
            ("Todo", "unstarted"),
            ("Ready for design", "unstarted"),
            ("Designing", "started"),
            ("Design approved", "unstarted"),
            ("Design blocked", "started"),
            ("Code review", "started"),
            ("Blocked", "started"),
            ("QA failed", "started"),
            ("On hold", "backlog"),
            ("Done", "completed"),
            ("Canceled", "canceled"),
        ]
        .iter()
        .enumerate()
        .map(|(i, (name, kind))| State {
            id: format!("5e5e0000-0000-4000-8000-{:012}", i + 1),
            name: name.to_string(),
            kind: kind.to_string(),
        })
        .collect();
        let state = Arc::new(Mutex::new(Model {
            team_uuid: "7ea70000-0000-4000-8000-000000000001".into(),
            states,
            issues: BTreeMap::new(),
            users: vec![
                (
                    VIEWER_ID.into(),
                    "sortie bot".into(),
                    "sortie@acme.test".into(),
                ),
                (ALICE_ID.into(), "Alice".into(), "alice@acme.test".into()),
                (
                    MALLORY_ID.into(),
                    "Mallory".into(),
                    "mallory@acme.test".into(),
                ),
            ],
            next_number: 1,
            clock: 0,
            log: RequestLog::default(),
            requests_remaining: REQUEST_LIMIT,
            complexity_remaining: COMPLEXITY_LIMIT,
            reset_ms: chrono::Utc::now().timestamp_millis() + 3_600_000,
            pass_before_limit: 0,
            rate_limited: 0,
            lost_answers: Vec::new(),
            get_hooks: Hooks::default(),
            reads: BTreeMap::new(),
            stale_comment_reads: BTreeMap::new(),
            faults: Faults::default(),
            accept: authorization.to_string(),
            next_cursor: NextCursor::Honest,
        }));
        Mock::given(any())
            .respond_with(Responder(state.clone()))
            .mount(&server)
            .await;
        LinearModel { state, server }
    }

    /// The GraphQL endpoint (`tracker.api_url`).
    pub fn api_url(&self) -> String {
        format!("{}/graphql", self.server.uri())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Add an issue in the state named `state`; returns its number (`ENG-<n>`).
    pub fn add_issue(&self, title: &str, state: &str, labels: &[&str]) -> u64 {
        self.with(|m| {
            let n = m.next_number;
            m.next_number += 1;
            m.clock += 1;
            let state_id = m.state_id(state);
            m.issues.insert(
                n,
                Issue {
                    uuid: format!("15500000-0000-4000-8000-{n:012}"),
                    identifier: format!("{TEAM}-{n}"),
                    title: title.to_string(),
                    description: Some(format!("Body of {title}.")),
                    priority: 0,
                    state_id,
                    labels: labels.iter().map(|l| l.to_string()).collect(),
                    project: None,
                    assignee: None,
                    blocked_by: Vec::new(),
                    created: m.clock,
                    updated: m.clock,
                    comments: Vec::new(),
                    broken: false,
                },
            );
            n
        })
    }

    /// Change an issue directly (a person in Linear's UI).
    pub fn edit(&self, n: u64, f: impl FnOnce(&mut Issue)) {
        self.with(|m| {
            m.clock += 1;
            let clock = m.clock;
            let issue = m.issues.get_mut(&n).expect("issue");
            f(issue);
            issue.updated = clock;
        })
    }

    /// Move an issue to the state named `state` (a person dragging the card).
    pub fn move_to(&self, n: u64, state: &str) {
        let id = self.with(|m| m.state_id(state));
        self.edit(n, |i| i.state_id = id);
    }

    /// A comment by `user_id`.
    pub fn add_comment(&self, n: u64, user_id: &str, body: &str) {
        self.with(|m| {
            m.clock += 1;
            let id = format!("c0000000-0000-4000-8000-{:012}", m.clock);
            let created = m.clock;
            m.issues
                .get_mut(&n)
                .expect("issue")
                .comments
                .push(ModelComment {
                    id,
                    user_id: user_id.to_string(),
                    body: body.to_string(),
                    created,
                });
        })
    }

    /// A snapshot of an issue.
    pub fn issue(&self, n: u64) -> Issue {
        self.with(|m| m.issues[&n].clone())
    }

    /// The name of an issue's state.
    pub fn state_of(&self, n: u64) -> String {
        self.with(|m| {
            let id = m.issues[&n].state_id.clone();
            m.states.iter().find(|s| s.id == id).unwrap().name.clone()
        })
    }

    /// Run `f` on issue `n` right before the model answers its `nth` (0-based)
    /// `issue(id:)` read.
    pub fn on_get(&self, n: u64, nth: usize, f: impl FnOnce(&mut Issue) + Send + 'static) {
        self.with(|m| {
            let next = m.reads.get(&n).map_or(0, |last| last + 1);
            if nth >= next {
                m.get_hooks.add(n, nth - next, Box::new(f));
            }
        });
    }

    /// The state id of the state named `name`.
    pub fn state_id(&self, name: &str) -> String {
        self.with(|m| m.state_id(name))
    }

    /// Answer the next `count` requests with a `RATELIMITED` error (HTTP 400, as
    /// Linear does), the window resetting at `reset_ms` (epoch milliseconds).
    pub fn rate_limit(&self, count: usize, reset_ms: i64) {
        self.rate_limit_after(0, count, reset_ms)
    }

    /// Like [`LinearModel::rate_limit`], after `pass` more requests answered normally.
    pub fn rate_limit_after(&self, pass: usize, count: usize, reset_ms: i64) {
        self.with(|m| {
            m.pass_before_limit = pass;
            m.rate_limited = count;
            m.reset_ms = reset_ms;
        })
    }

    /// The next `count` requests of `operation` take effect, but their answers are
    /// lost (the client sees a 502, as from a proxy timing out).
    pub fn lose_answers(&self, operation: &str, count: usize) {
        self.with(|m| m.lost_answers.push((operation.to_string(), count)))
    }

    /// Answer the next `count` requests with HTTP `status` and do nothing (Linear or
    /// its edge failing before the request reaches the API).
    pub fn fail(&self, status: u16, count: usize) {
        self.with(|m| {
            m.faults.clear();
            m.faults.arm("POST", "/graphql", status, None, 0, count);
        })
    }

    /// Serve every connection's `pageInfo` (issues, comments, blockers) as `next`
    /// says from now on.
    pub fn set_next_cursor(&self, next: NextCursor) {
        self.with(|m| m.next_cursor = next)
    }

    /// The next `count` comment listings of issue `n` miss its newest comment.
    pub fn stale_comment_reads(&self, n: u64, count: usize) {
        self.with(|m| {
            m.stale_comment_reads.insert(n, count);
        })
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.with(|m| m.log.entries())
    }

    /// `operation -> status` for every request, for assertions and failure output.
    pub fn log(&self) -> Vec<String> {
        self.with(|m| m.log.lines())
    }

    /// Requests the model refused because they did not validate against the schema.
    pub fn refused(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter_map(|l| l.refused.map(|r| format!("{}: {r}", l.operation)))
            .collect()
    }

    /// Forget the request log.
    pub fn clear_log(&self) {
        self.with(|m| m.log.clear())
    }
}

impl Model {
    pub fn state_id(&self, name: &str) -> String {
        self.states
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("the model has no state {name:?}"))
            .id
            .clone()
    }
}

struct Responder(Arc<Mutex<Model>>);

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut model = self.0.lock().unwrap();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let operation = body
            .get("operationName")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let authorization = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let mut mutation = false;
        let (status, answer, complexity, refused) = if request.url.path() != "/graphql"
            || request.method.as_str() != "POST"
        {
            (
                404,
                json!({"error": "not found"}),
                0,
                Some("not POST /graphql".into()),
            )
        } else if let Some(fault) = model.faults.hit("POST", "/graphql") {
            (
                fault.status,
                json!({"error": "service unavailable"}),
                0,
                None,
            )
        } else if authorization != model.accept {
            let err = json!({"errors": [{"message": "Authentication required, not authenticated",
                "extensions": {"code": "AUTHENTICATION_ERROR", "type": "authentication error"}}]});
            (401, err, 0, None)
        } else if model.pass_before_limit == 0 && model.rate_limited > 0 {
            model.rate_limited -= 1;
            model.requests_remaining = 0;
            let err = json!({"errors": [{"message": "Rate limit exceeded",
                "extensions": {"code": "RATELIMITED", "type": "Ratelimited",
                "userPresentableMessage": "Too many requests. Please try again later."}}]});
            (400, err, 0, None)
        } else {
            model.pass_before_limit = model.pass_before_limit.saturating_sub(1);
            match graphql::check(&body) {
                Err(reason) => {
                    let err = json!({"errors": [{"message": reason,
                        "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}]});
                    (400, err, 0, Some(reason))
                }
                Ok(checked) => {
                    mutation = checked.operation().operation_type
                        == apollo_compiler::ast::OperationType::Mutation;
                    let complexity = graphql::complexity(&checked);
                    model.requests_remaining = model.requests_remaining.saturating_sub(1);
                    model.complexity_remaining =
                        model.complexity_remaining.saturating_sub(complexity);
                    let answer = resolve::execute(&mut model, &checked);
                    let lost = model
                        .lost_answers
                        .iter_mut()
                        .find(|(op, left)| *op == operation && *left > 0);
                    match lost {
                        Some((_, left)) => {
                            *left -= 1;
                            (
                                502,
                                json!({"error": "upstream timed out"}),
                                complexity,
                                None,
                            )
                        }
                        None => (200, answer, complexity, None),
                    }
                }
            }
        };
        model.log.push(Logged {
            operation,
            status,
            complexity,
            refused,
            mutation,
        });
        ResponseTemplate::new(status)
            .insert_header("content-type", "application/json")
            .insert_header("x-complexity", complexity.to_string().as_str())
            .insert_header(
                "x-ratelimit-requests-limit",
                REQUEST_LIMIT.to_string().as_str(),
            )
            .insert_header(
                "x-ratelimit-requests-remaining",
                model.requests_remaining.to_string().as_str(),
            )
            .insert_header(
                "x-ratelimit-requests-reset",
                model.reset_ms.to_string().as_str(),
            )
            .insert_header(
                "x-ratelimit-complexity-limit",
                COMPLEXITY_LIMIT.to_string().as_str(),
            )
            .insert_header(
                "x-ratelimit-complexity-remaining",
                model.complexity_remaining.to_string().as_str(),
            )
            .insert_header(
                "x-ratelimit-complexity-reset",
                model.reset_ms.to_string().as_str(),
            )
            .set_body_json(answer)
    }
}

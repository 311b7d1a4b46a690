//! An in-memory model of one Jira project behind a local HTTP server (wiremock on
//! 127.0.0.1), in Cloud (REST v3, ADF bodies, `nextPageToken`) or Data Center
//! (REST v2, wiki strings, `startAt`) mode: issues with statuses and categories, a
//! workflow of named transitions (some demanding a field), comments stored exactly
//! as posted, issue links (`Blocks` and others, served in `fields.issuelinks` as Jira
//! does, only when the request's `fields` ask for them), credentials checked, injected
//! failures, and a log of every request.
//! State, not canned replies: the real adapter is driven against it. Every ADF
//! document posted is checked against `tests/fixtures/jira/adf-subset.schema.json`
//! and refused with a 400 when it breaks it, as Jira refuses a malformed document.
#![allow(dead_code)]

mod routes;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A request as the model saw it (its path below `/rest/api/N`, with its query).
pub use crate::model_plumbing::Logged;
use crate::model_plumbing::{header, Faults, Hooks, Line, NextCursor, RequestLog};

/// The project the model serves.
pub const PROJECT: &str = "PROJ";
/// Cloud credentials the model accepts.
pub const EMAIL: &str = "bot@acme.test";
pub const CLOUD_TOKEN: &str = "cloud-token";
/// `Basic base64("bot@acme.test:cloud-token")`.
const BASIC: &str = "Basic Ym90QGFjbWUudGVzdDpjbG91ZC10b2tlbg==";
/// The Data Center personal access token the model accepts.
pub const DC_TOKEN: &str = "dc-pat";
/// sortie's account: its Cloud account id and its Data Center user name.
pub const BOT_ACCOUNT: &str = "5b10ac8d82e05b22cc7d4ef5";
pub const BOT_NAME: &str = "sortie-bot";
/// What people see as sortie's name (anyone can choose it).
pub const BOT_DISPLAY: &str = "Sortie Bot";

/// Cloud (REST v3) or Data Center (REST v2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Cloud,
    DataCenter,
}

impl Mode {
    pub fn version(self) -> u8 {
        match self {
            Mode::Cloud => 3,
            Mode::DataCenter => 2,
        }
    }
}

/// One issue.
#[derive(Debug, Clone)]
pub struct Issue {
    pub key: String,
    pub summary: String,
    pub description: String,
    pub status: String,
    pub labels: Vec<String>,
    pub priority: String,
    pub created: i64,
    pub updated: i64,
    pub comments: Vec<ModelComment>,
    /// Set fields (a transition's required field ends up here).
    pub fields: BTreeMap<String, String>,
    /// Answer `created` with something that is not a date (a corrupted record).
    pub broken: bool,
}

/// One comment, its body exactly as posted (ADF JSON on Cloud, a wiki string on DC).
#[derive(Debug, Clone)]
pub struct ModelComment {
    pub id: u64,
    /// Account id (Cloud) or user name (DC).
    pub author: String,
    pub display_name: String,
    pub body: Value,
    pub created: i64,
}

/// A workflow transition.
#[derive(Debug, Clone)]
pub struct Transition {
    pub id: String,
    pub name: String,
    /// Statuses it is offered from (empty: a global transition, offered everywhere).
    pub from: Vec<String>,
    pub to: String,
    /// A field its screen requires.
    pub requires: Option<String>,
}

/// An issue link: `from` is its source (it "blocks" `to`, for the `Blocks` type) and
/// `to` its destination (it "is blocked by" `from`).
#[derive(Debug, Clone)]
pub struct Link {
    /// The link type's name (`Blocks`, `Relates`).
    pub kind: String,
    pub from: String,
    pub to: String,
}

type Hook = Box<dyn FnOnce(&mut State, &str) + Send>;

pub(crate) struct State {
    mode: Mode,
    origin: String,
    issues: BTreeMap<String, Issue>,
    /// Status name -> category key (`new`, `indeterminate`, `done`).
    statuses: Vec<(String, String)>,
    workflow: Vec<Transition>,
    clock: i64,
    next_issue: u64,
    next_comment: u64,
    max_results: usize,
    /// The `nextPageToken` Cloud searches serve.
    next_cursor: NextCursor,
    log: RequestLog<Logged>,
    faults: Faults,
    get_hooks: Hooks<String, Hook>,
    adf: (boon::Schemas, boon::SchemaIndex),
    /// Issue keys that moved: old key -> new key.
    moved: BTreeMap<String, String>,
    /// `X-RateLimit-Remaining` and `X-RateLimit-Reset` sent with every answer.
    rate_limit: Option<(u64, String)>,
    /// Issue links between issues of the project.
    links: Vec<Link>,
    /// Issue linking turned off on the site: no answer carries `issuelinks`.
    linking_off: bool,
}

/// The model and the server answering for it.
pub struct JiraModel {
    state: Arc<Mutex<State>>,
    server: MockServer,
    pub mode: Mode,
}

/// The ADF rules every posted document must follow.
fn adf_schema() -> (boon::Schemas, boon::SchemaIndex) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jira/adf-subset.schema.json"
    );
    let mut schemas = boon::Schemas::new();
    let index = boon::Compiler::new()
        .compile(path, &mut schemas)
        .unwrap_or_else(|e| panic!("{path}: {e:#}"));
    (schemas, index)
}

/// Check an ADF document against the fixture schema; the error says where it breaks.
pub fn check_adf(doc: &Value) -> Result<(), String> {
    let (schemas, index) = adf_schema();
    schemas.validate(doc, index).map_err(|e| format!("{e:#}"))
}

impl JiraModel {
    /// An empty project with the three-stage workflow (see [`JiraModel::workflow`]).
    pub async fn start(mode: Mode) -> Self {
        let server = MockServer::start().await;
        let statuses = [
            ("Ready for Design", "new"),
            ("In Design", "indeterminate"),
            ("Design Approved", "indeterminate"),
            ("Design Blocked", "indeterminate"),
            ("Code Review", "indeterminate"),
            ("Blocked", "indeterminate"),
            ("QA Failed", "indeterminate"),
            ("On Hold", "indeterminate"),
            ("Done", "done"),
            ("Won't Do", "done"),
        ];
        let t = |id: &str, name: &str, from: &[&str], to: &str| Transition {
            id: id.into(),
            name: name.into(),
            from: from.iter().map(|s| s.to_string()).collect(),
            to: to.into(),
            requires: None,
        };
        let workflow = vec![
            t("11", "Start design", &["Ready for Design"], "In Design"),
            t("21", "Approve design", &["In Design"], "Design Approved"),
            t("31", "Reject design", &["In Design"], "Design Blocked"),
            t(
                "41",
                "Submit for review",
                &["Design Approved"],
                "Code Review",
            ),
            t(
                "51",
                "Block",
                &["Design Approved", "Code Review"],
                "Blocked",
            ),
            t("61", "Pass QA", &["Code Review"], "Done"),
            t("71", "Fail QA", &["Code Review"], "QA Failed"),
            t("81", "Put on hold", &[], "On Hold"),
            t("91", "Won't do", &[], "Won't Do"),
        ];
        let state = Arc::new(Mutex::new(State {
            mode,
            origin: server.uri(),
            issues: BTreeMap::new(),
            statuses: statuses
                .iter()
                .map(|(n, c)| (n.to_string(), c.to_string()))
                .collect(),
            workflow,
            clock: 0,
            next_issue: 1,
            next_comment: 10000,
            max_results: 100,
            next_cursor: NextCursor::Honest,
            log: RequestLog::default(),
            faults: Faults::default(),
            get_hooks: Hooks::default(),
            adf: adf_schema(),
            moved: BTreeMap::new(),
            rate_limit: None,
            links: Vec::new(),
            linking_off: false,
        }));
        Mock::given(any())
            .respond_with(Responder(state.clone()))
            .mount(&server)
            .await;
        JiraModel {
            state,
            server,
            mode,
        }
    }

    /// The site URL to configure.
    pub fn url(&self) -> String {
        self.server.uri()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// A person creates an issue in `status`; returns its key.
    pub fn add_issue(&self, summary: &str, status: &str, labels: &[&str]) -> String {
        let mut s = self.state();
        s.clock += 1;
        let key = format!("{PROJECT}-{}", s.next_issue);
        s.next_issue += 1;
        let now = s.clock;
        s.issues.insert(
            key.clone(),
            Issue {
                key: key.clone(),
                summary: summary.to_string(),
                description: format!("What {summary} should do."),
                status: status.to_string(),
                labels: labels.iter().map(|l| l.to_string()).collect(),
                priority: "Medium".to_string(),
                created: now,
                updated: now,
                comments: Vec::new(),
                fields: BTreeMap::new(),
                broken: false,
            },
        );
        key
    }

    /// The issue as the model holds it.
    pub fn issue(&self, key: &str) -> Issue {
        self.state().issues.get(key).cloned().expect("issue exists")
    }

    /// A person edits an issue.
    pub fn edit(&self, key: &str, f: impl FnOnce(&mut Issue)) {
        let mut s = self.state();
        s.clock += 1;
        let now = s.clock;
        let issue = s.issues.get_mut(key).expect("issue exists");
        f(issue);
        issue.updated = now;
    }

    /// Change the workflow (an administrator edits it).
    pub fn workflow(&self, f: impl FnOnce(&mut Vec<Transition>)) {
        f(&mut self.state().workflow);
    }

    /// A person comments (`body` is stored as given: ADF JSON on Cloud, a string on DC).
    pub fn add_comment(&self, key: &str, author: &str, display: &str, body: Value) {
        let mut s = self.state();
        s.clock += 1;
        let (id, now) = (s.next_comment, s.clock);
        s.next_comment += 1;
        s.issues
            .get_mut(key)
            .expect("issue exists")
            .comments
            .push(ModelComment {
                id,
                author: author.to_string(),
                display_name: display.to_string(),
                body,
                created: now,
            });
    }

    /// Run `f` when the adapter reads `GET /issue/{key}` for the `skip + 1`-th time
    /// from now, before answering (a person acting right before sortie re-reads).
    pub fn on_get(&self, key: &str, skip: usize, f: impl FnOnce(&mut Issue) + Send + 'static) {
        let key_owned = key.to_string();
        self.state().get_hooks.add(
            key.to_string(),
            skip,
            Box::new(move |s: &mut State, _| {
                if let Some(issue) = s.issues.get_mut(&key_owned) {
                    f(issue);
                }
            }),
        );
    }

    /// A person moves an issue to another project: it gets `new_key`, and reads of the
    /// old key answer with the issue under its new key (as Jira redirects them).
    pub fn move_issue(&self, key: &str, new_key: &str) {
        let mut s = self.state();
        let mut issue = s.issues.remove(key).expect("issue exists");
        issue.key = new_key.to_string();
        s.issues.insert(new_key.to_string(), issue);
        s.moved.insert(key.to_string(), new_key.to_string());
    }

    /// Delete an issue when it is read for the `skip + 1`-th time from now.
    pub fn delete_on_get(&self, key: &str, skip: usize) {
        let key_owned = key.to_string();
        self.state().get_hooks.add(
            key.to_string(),
            skip,
            Box::new(move |s: &mut State, _| {
                s.issues.remove(&key_owned);
            }),
        );
    }

    /// Answer the next `times` requests matching method and path fragment with `status`.
    pub fn fail(
        &self,
        method: &str,
        path_contains: &str,
        status: u16,
        retry_after: Option<u64>,
        times: usize,
    ) {
        self.state()
            .faults
            .arm(method, path_contains, status, retry_after, 0, times);
    }

    /// Like [`JiraModel::fail`], after letting `skip` matching requests through.
    pub fn fail_after(
        &self,
        method: &str,
        path_contains: &str,
        status: u16,
        skip: usize,
        times: usize,
    ) {
        self.state()
            .faults
            .arm(method, path_contains, status, None, skip, times);
    }

    /// Answer searches with at most `n` issues per page whatever is asked.
    pub fn set_max_results(&self, n: usize) {
        self.state().max_results = n;
    }

    /// Serve Cloud searches' `isLast` and `nextPageToken` as `next` says from now on.
    pub fn set_next_cursor(&self, next: NextCursor) {
        self.state().next_cursor = next;
    }

    /// Send `X-RateLimit-Remaining: remaining` and `X-RateLimit-Reset: reset` with
    /// every answer from now on.
    pub fn rate_limit_headers(&self, remaining: u64, reset: &str) {
        self.state().rate_limit = Some((remaining, reset.to_string()));
    }

    /// A person links `blocked` as "is blocked by" `by` (the built-in `Blocks` type).
    pub fn block(&self, blocked: &str, by: &str) {
        self.link("Blocks", by, blocked);
    }

    /// A person links `from` to `to` with the link type `kind` (from's outward
    /// description, to's inward one: `from` blocks `to`).
    pub fn link(&self, kind: &str, from: &str, to: &str) {
        self.state().links.push(Link {
            kind: kind.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        });
    }

    /// An administrator turns issue linking off (or on again): answers carry no
    /// `issuelinks` field while it is off.
    pub fn set_linking_off(&self, off: bool) {
        self.state().linking_off = off;
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        self.state().log.entries()
    }

    /// Forget the log.
    pub fn clear_log(&self) {
        self.state().log.clear();
    }
}

struct Responder(Arc<Mutex<State>>);

/// An answer before headers.
pub(crate) struct Answer {
    pub status: u16,
    pub body: Option<Value>,
}

pub(crate) fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        body: Some(body),
    }
}

pub(crate) fn no_content() -> Answer {
    Answer {
        status: 204,
        body: None,
    }
}

/// Jira's error body.
pub(crate) fn errors(status: u16, messages: &[&str], fields: &[(&str, &str)]) -> Answer {
    let fields: serde_json::Map<String, Value> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    answer(status, json!({"errorMessages": messages, "errors": fields}))
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        let line = Line::of(req, &format!("/rest/api/{}", s.mode.version()));
        let (method, path, shown) = (line.method, line.path, line.shown);
        let auth = header(req, "authorization").unwrap_or("");
        let auth_ok = match s.mode {
            Mode::Cloud => auth == BASIC,
            Mode::DataCenter => auth == format!("Bearer {DC_TOKEN}"),
        };
        let mut extra: Vec<(String, String)> = Vec::new();
        let ans = if let Some(fault) = s.faults.hit(&method, &shown) {
            if let Some(secs) = fault.retry_after {
                extra.push(("retry-after".into(), secs.to_string()));
            }
            errors(fault.status, &["Rate limit exceeded."], &[])
        } else if path.is_none() {
            errors(404, &["No such API version here."], &[])
        } else if !auth_ok {
            errors(401, &["You are not authenticated."], &[])
        } else {
            routes::route(&mut s, &method, path.as_deref().unwrap_or(""), req)
        };
        s.log.push(Logged {
            method,
            path: shown,
            status: ans.status,
            body: serde_json::from_slice(&req.body).unwrap_or(Value::Null),
            if_none_match: header(req, "if-none-match").is_some(),
        });
        let mut t = ResponseTemplate::new(ans.status);
        if let Some((remaining, reset)) = &s.rate_limit {
            t = t
                .insert_header("x-ratelimit-remaining", remaining.to_string().as_str())
                .insert_header("x-ratelimit-reset", reset.as_str());
        }
        for (k, v) in extra {
            t = t.insert_header(k.as_str(), v.as_str());
        }
        if let Some(body) = ans.body {
            t = t.set_body_raw(
                body.to_string().into_bytes(),
                "application/json;charset=UTF-8",
            );
        }
        t
    }
}

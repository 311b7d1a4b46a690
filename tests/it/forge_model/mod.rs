//! The state a label-status forge keeps (GitLab, Gitea): issues with labels and
//! comments, the project's labels with ids, issue links, a clock, injected failures,
//! hooks that let a person act right before sortie re-reads, and a log of every
//! request, behind a local HTTP server (wiremock on 127.0.0.1). Each forge's wire
//! dialect (paths, JSON, pagination headers, auth) lives in its own model module
//! (`gitlab_model`, `gitea_model`) and answers from this state; pull requests and
//! what hangs off them are `pulls` (issue #32).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub use crate::model_plumbing::NextLink;
use crate::model_plumbing::{header, Faults, Hooks, Line, RequestLog};
pub use crate::model_plumbing::{percent_decode, Logged};

/// One issue (or pull request).
#[derive(Debug, Clone)]
pub struct Issue {
    pub number: u64,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    pub open: bool,
    pub pull_request: bool,
    pub created: i64,
    pub updated: i64,
    pub comments: Vec<Note>,
    pub assignees: Vec<String>,
    /// Answer `created_at` with something that is not a date (a corrupted record).
    pub broken: bool,
}

/// One comment, or a note the forge wrote itself (`system`).
#[derive(Debug, Clone)]
pub struct Note {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub created: i64,
    pub system: bool,
}

type Hook = Box<dyn FnOnce(&mut Issue) + Send>;

mod pull_changes;
pub mod pulls;
mod remote;
// The snapshot type `pull` returns, for tests that name it.
#[allow(unused_imports)]
pub use pull_changes::ModelPullState;
pub use pulls::Pull;

/// What the forge holds.
pub struct Board {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// Pull (merge) requests, numbered on their own.
    pub pulls: Vec<Pull>,
    pub issues: BTreeMap<u64, Issue>,
    /// Project labels by name, with their ids.
    pub labels: BTreeMap<String, i64>,
    /// `(blocked, blocker)` issue links.
    pub links: Vec<(u64, u64)>,
    /// The instance's tier lacks issue links (GitLab free tier: 403).
    pub links_forbidden: bool,
    pub clock: i64,
    pub next_id: u64,
    pub max_per_page: usize,
    /// What listings serve as their next page's link (GitLab: a `Link` header instead
    /// of `x-next-page` when not [`NextLink::Honest`]).
    pub next_link: NextLink,
    pub remaining: u64,
    log: RequestLog<Logged>,
    faults: Faults,
    get_hooks: Hooks<u64, Hook>,
    /// Checks, reviews, merges: what hangs off `pulls` (issue #32).
    pub book: pulls::PullBook,
}

impl Board {
    /// Advance the clock and return it.
    pub fn tick(&mut self) -> i64 {
        self.clock += 1;
        self.clock
    }

    /// Make sure a project label exists; its id.
    pub fn ensure_label(&mut self, name: &str) -> i64 {
        if let Some(id) = self.labels.get(name) {
            return *id;
        }
        let id = 100 + self.labels.len() as i64;
        self.labels.insert(name.to_string(), id);
        id
    }

    /// The label named by id.
    pub fn label_name(&self, id: i64) -> Option<String> {
        self.labels
            .iter()
            .find(|(_, i)| **i == id)
            .map(|(n, _)| n.clone())
    }

    /// Add a note to an issue; its JSON is built by the caller from the returned note.
    pub fn add_note(&mut self, number: u64, author: &str, body: &str, system: bool) -> Note {
        let now = self.tick();
        self.next_id += 1;
        let note = Note {
            id: self.next_id,
            author: author.to_string(),
            body: body.to_string(),
            created: now,
            system,
        };
        let issue = self.issues.get_mut(&number).expect("issue exists");
        issue.updated = now;
        issue.comments.push(note.clone());
        note
    }

    /// Run the hooks due on this read of issue `number`.
    pub fn before_get(&mut self, number: u64) {
        for hook in self.get_hooks.due(&number) {
            let now = self.tick();
            let issue = self.issues.get_mut(&number).unwrap();
            hook(issue);
            issue.updated = now;
        }
    }
}

/// A forge's answer to one request.
pub struct Answer {
    pub status: u16,
    pub body: Option<Value>,
    pub headers: Vec<(String, String)>,
    /// A `text/plain` body instead of JSON.
    pub text: Option<String>,
}

/// A JSON answer.
pub fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        body: Some(body),
        headers: Vec::new(),
        text: None,
    }
}

/// An answer without a body.
pub fn empty(status: u16) -> Answer {
    Answer {
        status,
        body: None,
        headers: Vec::new(),
        text: None,
    }
}

/// One request, decoded for a dialect.
pub struct Req<'a> {
    pub method: String,
    /// Path segments after the API prefix, percent-decoded.
    pub segs: Vec<String>,
    pub query: HashMap<String, String>,
    pub body: Value,
    pub raw: &'a Request,
}

impl Req<'_> {
    /// A request header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.raw.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A numeric query parameter.
    pub fn query_num(&self, name: &str) -> Option<usize> {
        self.query.get(name).and_then(|v| v.parse().ok())
    }
}

/// A forge's wire dialect: its API prefix, whether a request is authenticated, how it
/// answers, and how it words an error.
pub trait Dialect: Send + Sync + 'static {
    /// `/api/v4`, `/api/v1`.
    fn prefix(&self) -> &'static str;
    /// Whether the request carries the model's token the forge's way.
    fn authenticated(&self, req: &Req) -> bool;
    /// Answer a request from the board.
    fn route(&self, board: &mut Board, req: &Req) -> Answer;
    /// An error answer.
    fn error(&self, status: u16, message: &str) -> Answer;
    /// Rate-limit headers sent with every answer.
    fn rate_headers(&self, board: &Board) -> Vec<(String, String)>;
}

/// A forge model and the server answering for it.
pub struct ForgeModel {
    board: Arc<Mutex<Board>>,
    server: MockServer,
}

impl ForgeModel {
    /// Start a server answering in `dialect`.
    pub async fn start(dialect: impl Dialect) -> Self {
        let server = MockServer::start().await;
        let board = Arc::new(Mutex::new(Board {
            origin: server.uri(),
            pulls: Vec::new(),
            issues: BTreeMap::new(),
            labels: BTreeMap::new(),
            links: Vec::new(),
            links_forbidden: false,
            clock: 0,
            next_id: 1000,
            max_per_page: 100,
            next_link: NextLink::Honest,
            remaining: 2000,
            log: RequestLog::default(),
            faults: Faults::default(),
            get_hooks: Hooks::default(),
            book: pulls::PullBook {
                approvals_required: 1,
                ..Default::default()
            },
        }));
        Mock::given(any())
            .respond_with(Responder {
                board: board.clone(),
                dialect: Box::new(dialect),
            })
            .mount(&server)
            .await;
        ForgeModel { board, server }
    }

    /// The instance URL to configure (`url:`).
    pub fn url(&self) -> String {
        self.server.uri()
    }

    /// The board, to act on it directly.
    pub fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap()
    }

    /// A person opens an issue with these labels; returns its number.
    pub fn add_issue(&self, title: &str, labels: &[&str]) -> u64 {
        self.add(title, labels, false)
    }

    /// Someone opens a pull request with these labels.
    pub fn add_pull_request(&self, title: &str, labels: &[&str]) -> u64 {
        self.add(title, labels, true)
    }

    fn add(&self, title: &str, labels: &[&str], pull_request: bool) -> u64 {
        let mut b = self.board();
        let now = b.tick();
        let number = b.issues.len() as u64 + 1;
        for l in labels {
            b.ensure_label(l);
        }
        b.issues.insert(
            number,
            Issue {
                number,
                title: title.to_string(),
                body: format!("Body of {title}"),
                labels: labels.iter().map(|l| l.to_string()).collect(),
                open: true,
                pull_request,
                created: now,
                updated: now,
                comments: Vec::new(),
                assignees: Vec::new(),
                broken: false,
            },
        );
        number
    }

    /// A person edits an issue.
    pub fn edit(&self, number: u64, f: impl FnOnce(&mut Issue)) {
        let mut b = self.board();
        let now = b.tick();
        let issue = b.issues.get_mut(&number).expect("issue exists");
        f(issue);
        issue.updated = now;
    }

    /// A person comments.
    pub fn add_comment(&self, number: u64, author: &str, body: &str) {
        self.board().add_note(number, author, body, false);
    }

    /// Run `f` on the issue when the adapter reads it for the `skip + 1`-th time from now.
    pub fn on_get(&self, number: u64, skip: usize, f: impl FnOnce(&mut Issue) + Send + 'static) {
        self.board().get_hooks.add(number, skip, Box::new(f));
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
        self.board()
            .faults
            .arm(method, path_contains, status, retry_after, 0, times);
    }

    /// Stop answering with injected failures.
    pub fn clear_faults(&self) {
        self.board().faults.clear();
    }

    /// Serve at most this many items per page.
    pub fn set_max_per_page(&self, n: usize) {
        self.board().max_per_page = n;
    }

    /// A snapshot of an issue.
    pub fn issue(&self, number: u64) -> Issue {
        self.board().issues[&number].clone()
    }

    /// Every pull (merge) request opened through the API.
    pub fn pulls(&self) -> Vec<Pull> {
        self.board().pulls.clone()
    }

    /// The project's label names.
    pub fn labels(&self) -> Vec<String> {
        self.board().labels.keys().cloned().collect()
    }

    /// Every request so far, as `METHOD /path?query -> status`.
    pub fn log(&self) -> Vec<String> {
        self.board().log.lines()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.board().log.entries()
    }

    /// Forget the request log.
    pub fn clear_log(&self) {
        self.board().log.clear();
    }
}

/// Seconds since the model's epoch as RFC 3339.
pub fn time(t: i64) -> String {
    (chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap()
        + chrono::Duration::seconds(t))
    .to_utc()
    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// One page of `items` by `page` and a per-page size; returns the chunk and whether
/// more follow.
pub fn page_of(items: Vec<Value>, page: usize, per_page: usize) -> (Vec<Value>, bool) {
    let total = items.len();
    let chunk = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    (chunk, page * per_page < total)
}

struct Responder {
    board: Arc<Mutex<Board>>,
    dialect: Box<dyn Dialect>,
}

impl Respond for Responder {
    fn respond(&self, raw: &Request) -> ResponseTemplate {
        let mut b = self.board.lock().unwrap();
        let line = Line::of(raw, self.dialect.prefix());
        let (method, path, shown) = (line.method.clone(), line.path_or_full(), line.shown);
        let req = Req {
            method: method.clone(),
            segs: path
                .trim_matches('/')
                .split('/')
                .map(percent_decode)
                .collect(),
            query: raw.url.query_pairs().into_owned().collect(),
            body: serde_json::from_slice(&raw.body).unwrap_or(Value::Null),
            raw,
        };
        let ans = if !self.dialect.authenticated(&req) {
            self.dialect.error(401, "401 Unauthorized")
        } else if let Some(fault) = b.faults.hit(&method, &shown) {
            let mut a = self.dialect.error(fault.status, "Retry later");
            if let Some(secs) = fault.retry_after {
                a.headers.push(("retry-after".into(), secs.to_string()));
            }
            a
        } else {
            self.dialect.route(&mut b, &req)
        };
        b.remaining = b.remaining.saturating_sub(1);
        b.log.push(Logged {
            method,
            path: shown,
            status: ans.status,
            body: req.body.clone(),
            if_none_match: header(raw, "if-none-match").is_some(),
        });
        let mut t = ResponseTemplate::new(ans.status);
        for (k, v) in self.dialect.rate_headers(&b).into_iter().chain(ans.headers) {
            t = t.insert_header(k.as_str(), v.as_str());
        }
        if let Some(body) = ans.body {
            t = t.set_body_raw(body.to_string().into_bytes(), "application/json");
        }
        if let Some(text) = ans.text {
            t = t.set_body_raw(text.into_bytes(), "text/plain; charset=utf-8");
        }
        t
    }
}

/// `{"message": text}`.
pub fn message_body(text: &str) -> Value {
    json!({ "message": text })
}

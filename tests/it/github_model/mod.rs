//! An in-memory model of GitHub Issues behind a local HTTP server (wiremock on
//! 127.0.0.1): issues with labels and comments, repository labels, ETags computed
//! from each answer (so they change when anything in it changes), `Link`
//! pagination, rate-limit headers that count down (304s are free), injected
//! failures, and a log of every request. State, not canned replies: the real
//! adapter is driven against it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

mod pull_changes;
mod pull_json;
mod pull_routes;
mod pulls;
mod remote;
mod routes;
pub mod spec;
use pulls::PullActivity;
// The types of the snapshots the helpers return, for tests that name them.
#[allow(unused_imports)]
pub use pulls::{
    ModelAnnotation, ModelCheckRun, ModelPull, ModelReview, ModelReviewComment, ModelStatus,
};
use routes::route;

pub use crate::model_plumbing::Logged;
pub use crate::model_plumbing::NextLink;
use crate::model_plumbing::{header, percent_decode, Faults, Hooks, Line, RequestLog};

/// The token the model accepts.
pub const TOKEN: &str = "test-token";
/// The login that token belongs to.
pub const LOGIN: &str = "sortie-bot";
/// The repository the model serves.
pub const REPO: &str = "acme/widgets";

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
    pub comments: Vec<ModelComment>,
    /// Numbers of the issues blocking this one (issue dependencies).
    pub blocked_by: Vec<u64>,
    /// Answer `created_at` with something that is not a date (a corrupted record).
    pub broken: bool,
}

/// One comment.
#[derive(Debug, Clone)]
pub struct ModelComment {
    pub id: u64,
    pub author: String,
    pub body: String,
    pub created: i64,
}

type Hook = Box<dyn FnOnce(&mut Issue) + Send>;

struct State {
    /// `http://127.0.0.1:PORT` (wiremock's request URLs name `localhost`).
    origin: String,
    prefix: String,
    issues: BTreeMap<u64, Issue>,
    repo_labels: BTreeSet<String>,
    clock: i64,
    next_comment_id: u64,
    max_per_page: usize,
    /// The `rel="next"` link listings serve.
    next_link: NextLink,
    log: RequestLog<Logged>,
    limit: u64,
    remaining: u64,
    reset: i64,
    faults: Faults,
    get_hooks: Hooks<u64, Hook>,
    pulls: Vec<ModelPull>,
    /// Check runs, statuses, reviews and review comments of the pull requests.
    activity: PullActivity,
    /// The bare repository the pull requests' branches live in, if any.
    remote: Option<std::path::PathBuf>,
    /// Run once when the next `PUT .../merge` arrives, before it is answered.
    before_merge: Option<Box<dyn FnOnce() + Send>>,
    /// The server has issue dependencies (github.com): issues carry
    /// `issue_dependencies_summary` and `.../dependencies/blocked_by` answers.
    dependencies: bool,
}

/// The model and the server answering for it.
pub struct GithubModel {
    state: Arc<Mutex<State>>,
    server: MockServer,
}

impl GithubModel {
    /// A model at the server root (`api_url` = the server's URI).
    pub async fn start() -> Self {
        Self::start_with_prefix("").await
    }

    /// A model under a path prefix, as GitHub Enterprise Server's `/api/v3`.
    pub async fn start_with_prefix(prefix: &str) -> Self {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State {
            origin: server.uri(),
            prefix: prefix.to_string(),
            issues: BTreeMap::new(),
            repo_labels: BTreeSet::new(),
            clock: 0,
            next_comment_id: 1000,
            max_per_page: 100,
            next_link: NextLink::Honest,
            log: RequestLog::default(),
            limit: 5000,
            remaining: 5000,
            reset: chrono::Utc::now().timestamp() + 3600,
            faults: Faults::default(),
            get_hooks: Hooks::default(),
            pulls: Vec::new(),
            activity: PullActivity::default(),
            remote: None,
            before_merge: None,
            dependencies: true,
        }));
        Mock::given(any())
            .respond_with(Responder(state.clone()))
            .mount(&server)
            .await;
        GithubModel { state, server }
    }

    /// Behave as a GitHub Enterprise Server release from before issue dependencies:
    /// issues carry no `issue_dependencies_summary` and the endpoint answers 404.
    pub fn without_dependencies(&self) {
        self.state().dependencies = false;
    }

    /// The server answering for the model: another model (the GitHub Project one) mounts
    /// its GraphQL endpoint here, so one GitHub serves both APIs.
    pub fn server(&self) -> &MockServer {
        &self.server
    }

    /// The issues, shared: the GitHub Project model reads the same issues over GraphQL
    /// that this model serves over REST.
    pub fn shared_issues(&self) -> SharedIssues {
        SharedIssues(self.state.clone())
    }

    /// The `api_url` to configure.
    pub fn api_url(&self) -> String {
        format!("{}{}", self.server.uri(), self.state().prefix)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// A person opens an issue with these labels; returns its number.
    pub fn add_issue(&self, title: &str, labels: &[&str]) -> u64 {
        self.add(title, labels, false)
    }

    /// Someone opens a pull request with these labels; returns its number.
    pub fn add_pull_request(&self, title: &str, labels: &[&str]) -> u64 {
        self.add(title, labels, true)
    }

    fn add(&self, title: &str, labels: &[&str], pull_request: bool) -> u64 {
        let mut s = self.state();
        s.clock += 1;
        let number = (s.issues.len() + s.pulls.len()) as u64 + 1;
        let now = s.clock;
        for l in labels {
            s.repo_labels.insert(l.to_string());
        }
        s.issues.insert(
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
                blocked_by: Vec::new(),
                broken: false,
            },
        );
        number
    }

    /// A person edits an issue.
    pub fn edit(&self, number: u64, f: impl FnOnce(&mut Issue)) {
        let mut s = self.state();
        s.clock += 1;
        let now = s.clock;
        let issue = s.issues.get_mut(&number).expect("issue exists");
        f(issue);
        issue.updated = now;
    }

    /// A person comments.
    /// A person marks `number` as blocked by `by` (an issue dependency).
    pub fn block(&self, number: u64, by: u64) {
        self.edit(number, |i| i.blocked_by.push(by));
    }

    pub fn add_comment(&self, number: u64, author: &str, body: &str) {
        let mut s = self.state();
        add_comment(&mut s, number, author, body);
    }

    /// Run `f` on the issue when the adapter reads `GET /issues/{number}` for the
    /// `skip + 1`-th time from now (a person acting right before sortie re-reads).
    pub fn on_get(&self, number: u64, skip: usize, f: impl FnOnce(&mut Issue) + Send + 'static) {
        self.state().get_hooks.add(number, skip, Box::new(f));
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

    /// Stop answering with injected failures.
    /// The model's "now": its clock (seconds) after 2026-01-01T00:00:00Z, the time it
    /// stamps on everything.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(&time(self.state().clock))
            .unwrap()
            .to_utc()
    }

    /// Let `secs` seconds pass on the model's clock.
    pub fn advance(&self, secs: i64) {
        self.state().clock += secs;
    }

    /// Run `f` once when the next `PUT .../merge` arrives, before it is answered (a
    /// push racing the merge).
    pub fn before_merge(&self, f: impl FnOnce() + Send + 'static) {
        self.state().before_merge = Some(Box::new(f));
    }

    /// Serve `link` as the `rel="next"` link of listings.
    pub fn set_next_link(&self, link: NextLink) {
        self.state().next_link = link;
    }

    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// Serve at most this many items per page (to exercise pagination).
    pub fn set_max_per_page(&self, n: usize) {
        self.state().max_per_page = n;
    }

    /// Set the requests left in the rate-limit window.
    pub fn set_remaining(&self, n: u64) {
        self.state().remaining = n;
    }

    /// A snapshot of an issue.
    pub fn issue(&self, number: u64) -> Issue {
        self.state().issues[&number].clone()
    }

    /// Every pull request opened through the API.
    pub fn pulls(&self) -> Vec<ModelPull> {
        self.state().pulls.clone()
    }

    /// Labels of the repository.
    pub fn repo_labels(&self) -> BTreeSet<String> {
        self.state().repo_labels.clone()
    }

    /// Add a repository label.
    pub fn add_repo_label(&self, name: &str) {
        self.state().repo_labels.insert(name.to_string());
    }

    /// Every request so far, as `METHOD /path?query -> status`.
    pub fn log(&self) -> Vec<String> {
        self.state().log.lines()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state().log.entries()
    }

    /// Forget the request log.
    pub fn clear_log(&self) {
        self.state().log.clear();
    }

    /// Rate-limit units spent so far (every answer but a 304 and `/rate_limit`).
    pub fn units_used(&self) -> u64 {
        let s = self.state();
        s.limit - s.remaining
    }
}

fn add_comment(s: &mut State, number: u64, author: &str, body: &str) -> Value {
    s.clock += 1;
    s.next_comment_id += 1;
    let (id, now) = (s.next_comment_id, s.clock);
    let issue = s.issues.get_mut(&number).expect("issue exists");
    let comment = ModelComment {
        id,
        author: author.to_string(),
        body: body.to_string(),
        created: now,
    };
    issue.updated = now;
    let json = comment_json(&comment);
    issue.comments.push(comment);
    json
}

/// The issues of a [`GithubModel`], for another model to read.
#[derive(Clone)]
pub struct SharedIssues(Arc<Mutex<State>>);

impl SharedIssues {
    /// Issue (or pull request) `number`, as it is now.
    pub fn get(&self, number: u64) -> Option<Issue> {
        self.0.lock().unwrap().issues.get(&number).cloned()
    }

    /// A person edits issue `number` (from another model's hook).
    pub fn edit(&self, number: u64, f: impl FnOnce(&mut Issue)) {
        let mut s = self.0.lock().unwrap();
        s.clock += 1;
        let now = s.clock;
        let issue = s.issues.get_mut(&number).expect("issue exists");
        f(issue);
        issue.updated = now;
    }
}

/// A model time (seconds since 2026-01-01) as GitHub writes times.
pub fn time(t: i64) -> String {
    (chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap()
        + chrono::Duration::seconds(t))
    .to_utc()
    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// An issue as this server shows it: with its `issue_dependencies_summary` when the
/// server has issue dependencies (open and all issues blocking it, open and all
/// issues it blocks), as the REST description's `issue` schema has it.
fn issue_json_in(s: &State, i: &Issue) -> Value {
    let mut v = issue_json(i);
    if s.dependencies {
        let blockers: Vec<&Issue> = i
            .blocked_by
            .iter()
            .filter_map(|n| s.issues.get(n))
            .collect();
        let blocked: Vec<&Issue> = s
            .issues
            .values()
            .filter(|o| o.blocked_by.contains(&i.number))
            .collect();
        let open = |list: &[&Issue]| list.iter().filter(|o| o.open).count();
        v["issue_dependencies_summary"] = json!({
            "blocked_by": open(&blockers),
            "blocking": open(&blocked),
            "total_blocked_by": blockers.len(),
            "total_blocking": blocked.len(),
        });
    }
    v
}

fn issue_json(i: &Issue) -> Value {
    let mut v = json!({
        "id": 90000 + i.number,
        "number": i.number,
        "title": i.title,
        "body": i.body,
        "state": if i.open { "open" } else { "closed" },
        "labels": i.labels.iter().map(|l| json!({"name": l, "color": "ededed"})).collect::<Vec<_>>(),
        "user": {"login": "alice"},
        "comments": i.comments.len(),
        "html_url": format!("https://github.com/{REPO}/issues/{}", i.number),
        "created_at": if i.broken { "yesterday".to_string() } else { time(i.created) },
        "updated_at": time(i.updated),
    });
    if i.pull_request {
        v["pull_request"] =
            json!({"url": format!("https://api.github.com/repos/{REPO}/pulls/{}", i.number)});
    }
    v
}

fn comment_json(c: &ModelComment) -> Value {
    json!({"id": c.id, "user": {"login": c.author}, "body": c.body, "created_at": time(c.created), "updated_at": time(c.created)})
}

struct Responder(Arc<Mutex<State>>);

/// An answer before headers: status and optional JSON body.
struct Answer {
    status: u16,
    body: Option<Value>,
    link: Option<String>,
    free: bool,
    /// A redirect's target.
    location: Option<String>,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        body: Some(body),
        link: None,
        free: false,
        location: None,
    }
}

fn message(status: u16, text: &str) -> Answer {
    answer(
        status,
        json!({"message": text, "documentation_url": "https://docs.github.com/rest"}),
    )
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        let line = Line::of(req, &s.prefix);
        let (method, path, shown) = (line.method.clone(), line.path_or_full(), line.shown);
        let if_none_match = header(req, "if-none-match").map(str::to_string);
        let auth_ok = header(req, "authorization") == Some(&format!("Bearer {TOKEN}"));

        if let Some(id) = path.strip_prefix("/_downloads/job-logs/") {
            // The download host: no token wanted, and none should come.
            let log = id
                .parse::<u64>()
                .ok()
                .and_then(|id| s.activity.runs.iter().find(|r| r.id == id))
                .and_then(|r| r.log.clone());
            s.activity.log_downloads += 1;
            s.activity.log_download_had_token |= header(req, "authorization").is_some();
            return match log {
                Some(log) => {
                    ResponseTemplate::new(200).set_body_raw(log.into_bytes(), "text/plain")
                }
                None => ResponseTemplate::new(404),
            };
        }
        let mut extra: Vec<(String, String)> = Vec::new();
        let ans = if !auth_ok {
            message(401, "Bad credentials")
        } else if let Some(fault) = s.faults.hit(&method, &shown) {
            if let Some(secs) = fault.retry_after {
                extra.push(("retry-after".into(), secs.to_string()));
            }
            message(fault.status, "You have exceeded a secondary rate limit.")
        } else if s.remaining == 0 && path != "/rate_limit" {
            message(403, "API rate limit exceeded for user.")
        } else {
            if method == "PUT" && path.ends_with("/merge") {
                if let Some(hook) = s.before_merge.take() {
                    hook();
                }
            }
            s.sync_remote();
            route(&mut s, &method, &path, req)
        };

        let mut status = ans.status;
        let mut body = ans.body.map(|b| b.to_string());
        let mut etag = None;
        if method == "GET" && status == 200 {
            let text = body.clone().unwrap_or_default();
            let tag = format!(
                "W/\"{}\"",
                &hex::encode(Sha256::digest(format!(
                    "{}{text}",
                    ans.link.clone().unwrap_or_default()
                )))[..16]
            );
            if if_none_match.as_deref() == Some(tag.as_str()) {
                status = 304;
                body = None;
            }
            etag = Some(tag);
        }
        if status != 304 && !ans.free && s.remaining > 0 {
            s.remaining -= 1;
        }
        s.log.push(Logged {
            method,
            path: shown,
            status,
            body: serde_json::from_slice(&req.body).unwrap_or(Value::Null),
            if_none_match: if_none_match.is_some(),
        });

        let mut t = ResponseTemplate::new(status)
            .insert_header("x-ratelimit-limit", s.limit.to_string().as_str())
            .insert_header("x-ratelimit-remaining", s.remaining.to_string().as_str())
            .insert_header("x-ratelimit-reset", s.reset.to_string().as_str())
            .insert_header(
                "x-ratelimit-used",
                (s.limit - s.remaining).to_string().as_str(),
            )
            .insert_header("x-ratelimit-resource", "core");
        for (k, v) in extra {
            t = t.insert_header(k.as_str(), v.as_str());
        }
        if let Some(tag) = etag {
            t = t.insert_header("etag", tag.as_str());
        }
        if status != 304 {
            if let Some(link) = ans.link {
                t = t.insert_header("link", link.as_str());
            }
        }
        if let Some(location) = ans.location {
            t = t.insert_header("location", location.as_str());
        }
        if let Some(body) = body {
            t = t.set_body_raw(body.into_bytes(), "application/json; charset=utf-8");
        }
        t
    }
}

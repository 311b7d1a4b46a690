//! The plumbing every HTTP test model shares (GitHub, GitLab, Gitea, Jira, Linear):
//! the log of every request, injected faults, hooks that let a person act right before
//! sortie re-reads, and the request line as the models show it. Each vendor's model
//! keeps only its own state and routes.
#![allow(dead_code)]

pub mod bare_repo;

use serde_json::Value;
use wiremock::Request;

/// A REST request as a model saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    /// Path (without the API prefix) and query, as sent.
    pub path: String,
    pub status: u16,
    /// The JSON body sent, if any.
    pub body: Value,
    /// Whether it was conditional (`If-None-Match`).
    pub if_none_match: bool,
}

impl std::fmt::Display for Logged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {}", self.method, self.path, self.status)
    }
}

/// Every request a model answered, oldest first.
#[derive(Debug, Clone)]
pub struct RequestLog<T>(Vec<T>);

impl<T> Default for RequestLog<T> {
    fn default() -> Self {
        RequestLog(Vec::new())
    }
}

impl<T: Clone> RequestLog<T> {
    pub fn push(&mut self, entry: T) {
        self.0.push(entry);
    }

    /// Every request so far.
    pub fn entries(&self) -> Vec<T> {
        self.0.clone()
    }

    /// Forget every request.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl<T: std::fmt::Display> RequestLog<T> {
    /// Every request so far as a line (`METHOD /path?query -> status` for REST).
    pub fn lines(&self) -> Vec<String> {
        self.0.iter().map(|l| l.to_string()).collect()
    }
}

/// What a model serves as the link to a listing's next page (issue #39, pagination
/// integrity): the honest one, one on another host, or one back to the page itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NextLink {
    #[default]
    Honest,
    /// The next page's link, on `127.0.0.2` (never contacted: the adapter must refuse it).
    OffHost,
    /// A link to the very page being answered: a loop.
    Loop,
}

impl NextLink {
    /// The link to serve on a page that has a next one: `honest` is its URL on `origin`,
    /// `this` is the URL of the page being answered.
    pub fn serve(self, origin: &str, this: &str, honest: String) -> String {
        match self {
            NextLink::Honest => honest,
            NextLink::OffHost => honest.replacen(origin, "http://127.0.0.2:9", 1),
            NextLink::Loop => this.to_string(),
        }
    }
}

/// What a cursor-paged model serves as a page's next cursor (issue #52, pagination
/// integrity): the honest one, or a page saying more follow with a broken cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NextCursor {
    #[default]
    Honest,
    /// The page's own cursor as the next one: a server repeating its page token.
    Repeated,
    /// No cursor at all.
    Missing,
}

impl NextCursor {
    /// Whether more pages follow and the next page's cursor, as served: `honest` is
    /// the truth, `this` the cursor that asks for the page being answered.
    pub fn serve(self, this: String, honest: (bool, Option<String>)) -> (bool, Option<String>) {
        match self {
            NextCursor::Honest => honest,
            NextCursor::Repeated => (true, Some(this)),
            NextCursor::Missing => (true, None),
        }
    }
}

/// What an injected fault answers.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    pub status: u16,
    pub retry_after: Option<u64>,
}

struct Armed {
    method: String,
    path_contains: String,
    fault: Fault,
    /// Matching requests to let through first.
    skip: usize,
    hits_left: usize,
}

/// Injected failures: requests matching a method and a path fragment answered with a
/// status (and `Retry-After`) instead of the model's answer.
#[derive(Default)]
pub struct Faults(Vec<Armed>);

impl Faults {
    /// Answer `times` matching requests with `status`, after letting `skip` through.
    pub fn arm(
        &mut self,
        method: &str,
        path_contains: &str,
        status: u16,
        retry_after: Option<u64>,
        skip: usize,
        times: usize,
    ) {
        self.0.push(Armed {
            method: method.to_string(),
            path_contains: path_contains.to_string(),
            fault: Fault {
                status,
                retry_after,
            },
            skip,
            hits_left: times,
        });
    }

    /// Stop answering with injected failures.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The fault this request meets, if any (the first armed one that matches; one
    /// still letting requests through lets this one through and counts it).
    pub fn hit(&mut self, method: &str, shown: &str) -> Option<Fault> {
        let armed = self
            .0
            .iter_mut()
            .find(|f| f.hits_left > 0 && f.method == method && shown.contains(&f.path_contains))?;
        if armed.skip > 0 {
            armed.skip -= 1;
            return None;
        }
        armed.hits_left -= 1;
        Some(armed.fault)
    }
}

/// Changes a person makes right before the model answers a read of one ticket: each
/// runs on the `skip + 1`-th read of its ticket from when it was added.
pub struct Hooks<K, F>(Vec<(K, usize, F)>);

impl<K, F> Default for Hooks<K, F> {
    fn default() -> Self {
        Hooks(Vec::new())
    }
}

impl<K: PartialEq, F> Hooks<K, F> {
    pub fn add(&mut self, key: K, skip: usize, hook: F) {
        self.0.push((key, skip, hook));
    }

    /// Count one read of `key`: the hooks due on it, oldest first (the others on it
    /// count down).
    pub fn due(&mut self, key: &K) -> Vec<F> {
        let mut fire = Vec::new();
        for (k, skip, hook) in std::mem::take(&mut self.0) {
            if k != *key {
                self.0.push((k, skip, hook));
            } else if skip == 0 {
                fire.push(hook);
            } else {
                self.0.push((k, skip - 1, hook));
            }
        }
        fire
    }
}

/// A request's line as the models show it.
pub struct Line {
    pub method: String,
    /// The path below the API prefix (`None` when it is not under it).
    pub path: Option<String>,
    /// The whole path.
    pub full: String,
    /// The path below the prefix (or the whole one) with its query, as logged.
    pub shown: String,
}

impl Line {
    pub fn of(raw: &Request, prefix: &str) -> Self {
        let full = raw.url.path().to_string();
        let path = full.strip_prefix(prefix).map(str::to_string);
        let p = path.clone().unwrap_or(full.clone());
        let shown = match raw.url.query() {
            Some(q) => format!("{p}?{q}"),
            None => p,
        };
        Line {
            method: raw.method.to_string(),
            path,
            full,
            shown,
        }
    }

    /// The path below the prefix, or the whole path when it is not under it.
    pub fn path_or_full(&self) -> String {
        self.path.clone().unwrap_or_else(|| self.full.clone())
    }
}

/// A request header's value.
pub fn header<'a>(raw: &'a Request, name: &str) -> Option<&'a str> {
    raw.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Decode `%XX` escapes.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

//! What the GitLab and Gitea adapters share: statuses are labels on issues of one
//! project, read and written over one [`ForgeClient`]. Each adapter keeps only what
//! its forge does differently (paging, how a label moves, how a pull request is found)
//! and describes the rest in a [`Dialect`]: the JSON field names and paths that differ.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use super::http::{Clock, ExchangeObserver};
use super::labels::{ambiguous_error, ambiguous_warning, is_listed, LabelScheme};
use super::rest::{forge_pull, ForgeClient, Vendor};
use super::{
    read_token, same_name, CheckReport, Comment, Listing, PullRequest, Ticket, TrackerError,
};
use crate::config::{Config, TrackerConfig};

/// Colour of the status labels `check --create-missing-labels` creates.
const LABEL_COLOR: &str = "#ededed";

/// The names one forge gives to what the other calls differently.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// The forge's name in messages (`GitLab`, `Gitea`).
    pub vendor: &'static str,
    /// What a refused token needs, said after a 401/403.
    pub token_hint: &'static str,
    /// What an issue id is, in "`"x"` is not {ticket_id}" (`a GitLab issue iid`).
    pub ticket_id: &'static str,
    /// The field of an issue or pull request holding its number (`iid`, `number`).
    pub number_key: &'static str,
    /// The field of a pull request holding its link (`web_url`, `html_url`).
    pub url_key: &'static str,
    /// The path under the project of its pull requests (`merge_requests`, `pulls`).
    pub pulls: &'static str,
    /// The title prefix that marks a draft pull request (`Draft: `, `WIP: `).
    pub draft_prefix: &'static str,
    /// The path under an issue of its comments (`notes`, `comments`).
    pub comments: &'static str,
    /// One comment, in log lines (`note`, `comment`).
    pub comment_noun: &'static str,
    /// What creating a label needs, after a refused create (`(needs the ... role)`).
    pub label_hint: &'static str,
}

/// What one issue is to sortie.
pub(crate) enum Classified {
    /// A ticket (empty status when it has no status label).
    Ticket(Box<Ticket>),
    /// A pull request: not a ticket (Gitea lists them with the issues).
    PullRequest,
    /// Two or more status labels: skipped, named.
    Ambiguous(Vec<String>),
}

impl Classified {
    /// The ticket `GET` asked for as issue `id` (the forge's `number`).
    pub fn into_ticket(self, id: &str, number: u64) -> Result<Ticket, TrackerError> {
        match self {
            Classified::Ticket(t) => Ok(*t),
            Classified::PullRequest => Err(TrackerError::NotFound(format!(
                "#{id} is a pull request, not an issue"
            ))),
            Classified::Ambiguous(labels) => {
                Err(ambiguous_error(&format!("issue #{number}"), &labels))
            }
        }
    }

    /// Add this issue (the forge's `number`) to `listing` when its status is listed.
    pub fn list_into(self, listing: &mut Listing, statuses: &[String], number: u64) {
        match self {
            Classified::Ticket(t) if is_listed(statuses, &t.status) => listing.tickets.push(*t),
            Classified::Ticket(_) | Classified::PullRequest => {}
            Classified::Ambiguous(labels) => listing
                .warnings
                .push(ambiguous_warning(&format!("issue #{number}"), &labels)),
        }
    }
}

/// The client, the token's user, and the dialect of one GitLab project or Gitea
/// repository.
pub(crate) struct ForgeCore {
    /// The board's name (`gitlab:group/repo`, `gitea:owner/name`).
    pub name: String,
    /// The authenticated client.
    pub client: ForgeClient,
    /// The forge's names.
    pub dialect: &'static Dialect,
    /// The project's path under the API (`/projects/group%2Frepo`, `/repos/owner/name`).
    pub project: String,
    identity: OnceCell<String>,
}

impl ForgeCore {
    /// A core speaking `dialect` to the API at `base`, authenticating with `auth` (header
    /// and value), for the board `name` whose issues live under `project`; `timing` is
    /// the adapter options' timeout, clock and observer.
    pub fn connect(
        dialect: &'static Dialect,
        name: String,
        base: &str,
        auth: (&'static str, String),
        project: String,
        timing: (Duration, Clock, Option<ExchangeObserver>),
    ) -> Result<Self, TrackerError> {
        let vendor = Vendor {
            name: dialect.vendor,
            token_hint: dialect.token_hint.to_string(),
        };
        let (timeout, clock, observer) = timing;
        let client = ForgeClient::new(base, auth, vendor, timeout, clock)?.with_observer(observer);
        Ok(ForgeCore {
            name,
            client,
            dialect,
            project,
            identity: OnceCell::new(),
        })
    }

    /// The number an issue id names: digits, above zero.
    pub fn number(&self, id: &str) -> Result<u64, TrackerError> {
        Some(id)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                TrackerError::Invalid(format!("{id:?} is not {}", self.dialect.ticket_id))
            })
    }

    /// The path of the issue an id names.
    pub fn issue_path(&self, id: &str) -> Result<String, TrackerError> {
        Ok(format!("{}/issues/{}", self.project, self.number(id)?))
    }

    /// The token's user (`GET /user`), read once; `name` picks it out of the answer.
    pub async fn identity<U: DeserializeOwned>(
        &self,
        name: fn(U) -> String,
    ) -> Result<String, TrackerError> {
        let name = self
            .identity
            .get_or_try_init(|| async {
                let user: U = self.client.get_json("/user").await?;
                Ok::<_, TrackerError>(name(user))
            })
            .await?;
        Ok(name.clone())
    }

    /// Read the issues of one listing into `issues` by number (an issue with two
    /// status labels shows up in two listings); an unreadable one is a warning.
    pub fn collect<W: DeserializeOwned>(
        &self,
        items: Vec<Value>,
        number: fn(&W) -> u64,
        issues: &mut BTreeMap<u64, W>,
        warnings: &mut Vec<String>,
    ) {
        for value in items {
            let n = value.get(self.dialect.number_key).and_then(Value::as_u64);
            match serde_json::from_value::<W>(value) {
                Ok(issue) => {
                    issues.insert(number(&issue), issue);
                }
                Err(err) => warnings.push(format!(
                    "issue #{} is unreadable, skipped: {err}",
                    n.map_or_else(|| "?".to_string(), |n| n.to_string())
                )),
            }
        }
    }

    /// The comments of issue `id` among `items`, oldest first; `keep` drops the ones
    /// that are not a person's (GitLab's system notes).
    pub fn comments<W: DeserializeOwned + Into<Comment>>(
        &self,
        id: &str,
        items: Vec<Value>,
        keep: fn(&W) -> bool,
    ) -> Vec<Comment> {
        let mut comments = Vec::with_capacity(items.len());
        for value in items {
            match serde_json::from_value::<W>(value) {
                Ok(c) if keep(&c) => comments.push(c.into()),
                Ok(_) => {}
                Err(err) => tracing::warn!(
                    issue = id,
                    %err,
                    "skipping an unreadable {}",
                    self.dialect.comment_noun
                ),
            }
        }
        comments.sort_by(|a, b| {
            (a.created_at, a.id.parse::<u64>().ok()).cmp(&(b.created_at, b.id.parse::<u64>().ok()))
        });
        comments
    }

    /// Post `body` as a comment on issue `id`, whose path is `issue_path`.
    pub async fn post_comment<W: DeserializeOwned + Into<Comment>>(
        &self,
        issue_path: &str,
        id: &str,
        body: &str,
    ) -> Result<Comment, TrackerError> {
        let comments = self.dialect.comments;
        let path = format!("{issue_path}/{comments}");
        let reply = self
            .client
            .send(Method::POST, &path, Some(&json!({ "body": body })))
            .await?;
        let c: W = reply.json(&format!("POST {comments} of #{id}"))?;
        Ok(c.into())
    }

    /// `report` with each status's label: there (the project `has` it), created when
    /// `create_missing`, or missing; then the rate limit left.
    pub async fn check_labels(
        &self,
        mut report: CheckReport,
        scheme: &LabelScheme,
        statuses: &[String],
        create_missing: bool,
        has: impl Fn(&str) -> bool,
    ) -> Result<CheckReport, TrackerError> {
        let labels_path = format!("{}/labels", self.project);
        for status in statuses {
            let label = scheme.status_label(status);
            let what = format!("status {status}");
            if has(&label) {
                report.push(what, true, format!("label {label} exists"));
            } else if create_missing {
                let body = json!({"name": label, "color": LABEL_COLOR,
                    "description": format!("sortie pipeline status {status}")});
                match self
                    .client
                    .send(Method::POST, &labels_path, Some(&body))
                    .await
                {
                    Ok(_) => report.push(what, true, format!("label {label} created")),
                    Err(
                        err @ (TrackerError::RateLimited { .. } | TrackerError::Unavailable(_)),
                    ) => return Err(err),
                    Err(err) => report.push(
                        what,
                        false,
                        format!(
                            "could not create label {label}: {err} {}",
                            self.dialect.label_hint
                        ),
                    ),
                }
            } else {
                report.push(
                    what,
                    false,
                    format!(
                        "label {label} is missing; create it, or run with --create-missing-labels"
                    ),
                );
            }
        }
        report.rate_limit_remaining = self.client.rate_limit_remaining();
        Ok(report)
    }

    /// `title`, marked a draft when `draft`.
    pub fn pull_title(&self, title: &str, draft: bool) -> String {
        if draft {
            format!("{}{title}", self.dialect.draft_prefix)
        } else {
            title.to_string()
        }
    }

    /// A pull request from its JSON (`reused` when found rather than opened).
    pub fn pull(&self, value: &Value, reused: bool) -> Result<PullRequest, TrackerError> {
        forge_pull(value, self.dialect.number_key, self.dialect.url_key, reused)
    }

    /// The pull request `find` finds, else the one `POST {project}/{pulls}` with
    /// `body` opens; a create refused for any reason but a passing one (a 409 when one
    /// exists, a race) finds again.
    pub async fn find_or_open<Found>(
        &self,
        find: impl Fn() -> Found,
        body: &Value,
    ) -> Result<PullRequest, TrackerError>
    where
        Found: Future<Output = Result<Option<PullRequest>, TrackerError>>,
    {
        let pulls = self.dialect.pulls;
        let path = format!("{}/{pulls}", self.project);
        super::forge::find_or_open(
            find,
            self.client.send(Method::POST, &path, Some(body)),
            |reply| self.pull(&reply.json::<Value>(&format!("POST {pulls}"))?, false),
            |err| !err.is_retryable(),
        )
        .await
    }
}

/// The token check of `sortie tracker check`: `false` when the report is complete (the
/// token was refused).
pub(crate) fn check_token(
    report: &mut CheckReport,
    identity: Result<String, TrackerError>,
) -> Result<bool, TrackerError> {
    match identity {
        Ok(user) => report.push("token", true, format!("authenticated as {user}")),
        Err(err @ (TrackerError::Unauthorized(_) | TrackerError::Invalid(_))) => {
            report.push("token", false, err.to_string());
            return Ok(false);
        }
        Err(err) => return Err(err),
    }
    Ok(true)
}

/// The access check of `sortie tracker check` (`what`: `project access`): `said` tells
/// what the read found; a refusal or a 404 adds `hint` and completes the report (`None`).
pub(crate) fn check_access<T>(
    report: &mut CheckReport,
    what: &str,
    read: Result<T, TrackerError>,
    said: impl FnOnce(&T) -> String,
    hint: &str,
) -> Result<Option<T>, TrackerError> {
    match read {
        Ok(found) => {
            report.push(what, true, said(&found));
            Ok(Some(found))
        }
        Err(err @ (TrackerError::NotFound(_) | TrackerError::Unauthorized(_))) => {
            report.push(what, false, format!("{err}; {hint}"));
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// Whether moving to `status` also closes the issue.
pub(crate) fn closes(close_on: &[String], status: &str) -> bool {
    close_on.iter().any(|c| same_name(c, status))
}

/// The error for opening a `vendor` tracker from a config of another kind.
pub(crate) fn not_a(config: &Config, vendor: &str) -> TrackerError {
    TrackerError::Invalid(format!(
        "tracker {} is not a {vendor} tracker",
        config.tracker.name()
    ))
}

/// Open a forge adapter from a config of its kind with default options: `settings`
/// reads the kind's settings (`None` for another kind, then so is the answer), the
/// token comes from the variable the config names (a missing one points at `doc`), and
/// `new` builds the adapter. The tracker and the `forge:` open through here.
pub(crate) fn open_adapter<S, T>(
    tracker: &TrackerConfig,
    vendor: &str,
    doc: &str,
    settings: impl FnOnce(&TrackerConfig) -> Option<S>,
    new: impl FnOnce(S, String) -> Result<T, TrackerError>,
) -> Option<Result<T, TrackerError>> {
    let token_env = match tracker {
        TrackerConfig::Github { token_env, .. }
        | TrackerConfig::Gitlab { token_env, .. }
        | TrackerConfig::Gitea { token_env, .. } => token_env,
        _ => return None,
    };
    let settings = settings(tracker)?;
    Some(read_token(token_env, vendor, doc).and_then(|token| new(settings, token)))
}

/// The text at `pointer` in `value`, when it is a string.
pub(crate) fn json_text(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Whether `key` of `value` is `true` (absent or not a boolean: no).
pub(crate) fn json_flag(value: &Value, key: &str) -> bool {
    value.get(key).and_then(Value::as_bool) == Some(true)
}

/// The array under `key` of `value`, empty when it is absent or not an array.
pub(crate) fn json_array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// An adapter's `Debug`: its type and board name, never its token or caches.
pub(crate) fn fmt_adapter(
    f: &mut std::fmt::Formatter<'_>,
    adapter: &str,
    name: &str,
) -> std::fmt::Result {
    f.debug_struct(adapter)
        .field("name", &name)
        .finish_non_exhaustive()
}

/// The `Tracker` methods an adapter built on [`ForgeCore`] answers from the core alone:
/// it is its own forge, its name, statuses as labels (blocking links read only with
/// `tracker.blockers.enabled: true`: GitLab's need Premium, and on a Free instance every
/// read is refused, which would hold every ticket), and the rate limit its client last
/// read. Expands inside `impl Tracker for X`, where `X` has a `core: ForgeCore` field.
macro_rules! core_tracker_methods {
    () => {
        fn forge(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn $crate::tracker::Forge>> {
            Some(self)
        }

        fn name(&self) -> &str {
            &self.core.name
        }

        fn capabilities(&self) -> $crate::tracker::Capabilities {
            $crate::tracker::Capabilities::status_labels(false)
        }

        fn rate_limit_remaining(&self) -> Option<u64> {
            self.core.client.rate_limit_remaining()
        }
    };
}
pub(crate) use core_tracker_methods;

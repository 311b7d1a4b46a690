//! The GitHub Issues adapter: statuses are labels (`status:ready-for-design`), a closed
//! issue is terminal, and the board is read with conditional requests so an idle
//! tick costs no rate limit. See `docs/trackers/github.md`.

mod api;
mod check;
mod issue;
mod pulls;
mod transport;
pub mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

pub use self::api::{GithubApi, Items};
pub use self::issue::LabelScheme;
pub use crate::tracker::http::{Clock, Exchange, ExchangeObserver};

use self::issue::{issue_number, Classified, WireComment, WireIssue};
use self::transport::GithubClient;
use super::labels::{ambiguous_error, ambiguous_warning, is_listed, LabelMove};
use super::{
    same_name, Capabilities, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError,
};
use crate::config::{Config, TrackerConfig};
use crate::tracker::http::{adapter_options, fmt_options, ResponseCache, DEFAULT_RETRY_BACKOFF};

/// The file under the state root holding the persisted ETag cache.
pub const ETAG_FILE: &str = "github-etags.json";
/// The ETag cache of a `forge: {kind: github}` (pull request reads), under the state root.
pub const FORGE_ETAG_FILE: &str = "github-forge-etags.json";

/// Which repository, where, and how statuses and priorities are labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubSettings {
    /// `owner/name`.
    pub repo: String,
    /// REST API base URL (`https://api.github.com`, or `https://HOST/api/v3` for
    /// GitHub Enterprise Server).
    pub api_url: String,
    /// Status and priority label prefixes.
    pub labels: LabelScheme,
}

impl GithubSettings {
    /// The settings of a `kind: github` tracker config, `None` for other kinds.
    pub fn from_config(tracker: &TrackerConfig) -> Option<Self> {
        match tracker {
            TrackerConfig::Github {
                repo,
                api_url,
                status_label_prefix,
                priority_label_prefix,
                ..
            } => Some(GithubSettings {
                repo: repo.clone(),
                api_url: api_url.clone(),
                labels: LabelScheme::new(status_label_prefix, priority_label_prefix),
            }),
            _ => None,
        }
    }
}

adapter_options! {
    /// How the adapter talks to GitHub; the defaults suit production.
    pub struct GithubOptions {
        /// Wait before the one retry after a server or connection error. Default 1 s.
        pub retry_backoff: Duration = DEFAULT_RETRY_BACKOFF,
        /// Where the ETag cache is persisted; `None` keeps it in memory. Default none
        /// ([`GithubTracker::open`] uses `state_root/github-etags.json`).
        pub etag_file: Option<PathBuf> = None,
        /// Sees every response (tests, diagnostics). Default none.
        pub observer: Option<ExchangeObserver> = None,
    }
}

impl std::fmt::Debug for GithubOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let timeouts = (self.timeout, self.retry_backoff);
        fmt_options(f, "GithubOptions", timeouts, ("etag_file", &self.etag_file))
    }
}

/// A GitHub repository's issues as a sortie board.
pub struct GithubTracker {
    name: String,
    labels: LabelScheme,
    api: GithubApi,
    identity: OnceCell<String>,
    /// Status labels as spelled on the repository, learned from every issue and label
    /// list read, so a transition adds `status:In Review` rather than a second label
    /// `status:in review` (GitHub label names are unique ignoring case).
    seen_labels: Mutex<BTreeSet<String>>,
    /// An issue read from this server carried `issue_dependencies_summary`: the server
    /// has issue dependencies, so a 404 from their endpoint means the issue is gone.
    summaries_seen: AtomicBool,
    /// The server has no issue dependencies endpoint (it answered 404 for an issue
    /// that exists): no blocker is read, every ticket is free of them.
    dependencies_missing: AtomicBool,
}

impl GithubTracker {
    /// The tracker a `kind: github` config names, with the token read from the
    /// environment variable `token_env` and the ETag cache under the state root.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let TrackerConfig::Github { token_env, .. } = &config.tracker else {
            return Err(TrackerError::Invalid(format!(
                "tracker {} is not a GitHub tracker",
                config.tracker.name()
            )));
        };
        let token = super::read_token(token_env, "GitHub", "docs/trackers/github.md")?;
        let options = GithubOptions {
            etag_file: Some(config.state_root.join(ETAG_FILE)),
            ..GithubOptions::default()
        };
        Self::from_config(config, token, options)
    }

    /// The tracker a `kind: github` config names, with an explicit token and options.
    pub fn from_config(
        config: &Config,
        token: String,
        options: GithubOptions,
    ) -> Result<Self, TrackerError> {
        let settings = GithubSettings::from_config(&config.tracker).ok_or_else(|| {
            TrackerError::Invalid(format!(
                "tracker {} is not a GitHub tracker",
                config.tracker.name()
            ))
        })?;
        Self::new(settings, token, options)
    }

    /// A tracker for `settings`, authenticating with `token`.
    pub fn new(
        settings: GithubSettings,
        token: String,
        options: GithubOptions,
    ) -> Result<Self, TrackerError> {
        let cache = Arc::new(ResponseCache::open(options.etag_file.clone(), "GitHub"));
        let client = GithubClient::new(
            token,
            options.timeout,
            options.retry_backoff,
            options.clock.clone(),
            cache.clone(),
            options.observer.clone(),
        )?;
        let api = GithubApi::new(&settings.api_url, &settings.repo, client, cache)?;
        Ok(GithubTracker {
            name: format!("github:{}", settings.repo),
            labels: settings.labels,
            api,
            identity: OnceCell::new(),
            seen_labels: Mutex::new(BTreeSet::new()),
            summaries_seen: AtomicBool::new(false),
            dependencies_missing: AtomicBool::new(false),
        })
    }

    /// The REST calls underneath, one method per endpoint.
    pub fn api(&self) -> &GithubApi {
        &self.api
    }

    async fn wire_issue(&self, id: &str) -> Result<WireIssue, TrackerError> {
        let number = number(id)?;
        let value = self.api.issue(number).await?;
        let issue: WireIssue = serde_json::from_value(value)
            .map_err(|e| TrackerError::Invalid(format!("issue #{number} is unreadable: {e}")))?;
        self.learn_labels(issue.labels.iter().map(|l| l.name()));
        self.learn_dependencies(&issue);
        Ok(issue)
    }

    /// Remember that the server sends dependency summaries, when `issue` carries one.
    fn learn_dependencies(&self, issue: &WireIssue) {
        if issue.issue_dependencies_summary.is_some() {
            self.summaries_seen.store(true, Ordering::Relaxed);
        }
    }

    /// Whether this server was found to have no issue dependencies endpoint.
    pub fn dependencies_missing(&self) -> bool {
        self.dependencies_missing.load(Ordering::Relaxed)
    }

    /// The blockers of issue `number`; a 404 from a server that sends no dependency
    /// summaries, for an issue that exists, means the server has no issue dependencies
    /// (GitHub Enterprise Server before they shipped): then no blocker is read again
    /// by this process, and a warning says so once.
    async fn blocked_by(&self, number: u64) -> Result<Items, TrackerError> {
        if self.dependencies_missing() {
            return Ok(Items::default());
        }
        let why = match self.api.blocked_by(number).await {
            Err(TrackerError::NotFound(why)) if !self.summaries_seen.load(Ordering::Relaxed) => why,
            other => return other,
        };
        // The issue itself may be gone (deleted, transferred): that 404 says nothing
        // about the server. A re-read tells them apart (conditional: usually free).
        self.wire_issue(&number.to_string()).await?;
        if self.summaries_seen.load(Ordering::Relaxed) {
            return Err(TrackerError::NotFound(why));
        }
        if !self.dependencies_missing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                tracker = %self.name,
                "this GitHub server has no issue dependencies (GET .../dependencies/blocked_by \
                 answers 404 for an existing issue): no blockers are read, tickets are \
                 dispatched as if tracker.blockers were off"
            );
        }
        Ok(Items::default())
    }

    /// Remember how the repository spells the status labels among `names`.
    fn learn_labels<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let mut seen = self.seen_labels.lock().unwrap_or_else(|e| e.into_inner());
        for name in names.filter(|n| self.labels.status_of(n).is_some()) {
            seen.retain(|s| !same_name(s, name));
            seen.insert(name.to_string());
        }
    }

    /// The label that puts a ticket in `status`, spelled as the repository already
    /// spells it when sortie has seen it (`status:In Review` for `in review`).
    fn status_label(&self, status: &str) -> String {
        let wanted = self.labels.status_label(status.trim());
        let seen = self.seen_labels.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter()
            .find(|s| same_name(s, &wanted))
            .cloned()
            .unwrap_or(wanted)
    }

    /// Open issues on each of `statuses` that also carry every label of `extra`.
    async fn list_with_labels(
        &self,
        statuses: &[String],
        extra: &[&str],
    ) -> Result<Listing, TrackerError> {
        let mut listing = Listing::default();
        // An issue with two status labels shows up in two listings: collect by number.
        let mut issues: BTreeMap<u64, WireIssue> = BTreeMap::new();
        let mut result = Ok(());
        for status in statuses {
            if status.contains(',') {
                // The `labels` filter is comma-separated: such a label cannot be queried.
                listing.warnings.push(format!(
                    "status {status:?} contains a comma and cannot be listed on GitHub"
                ));
                continue;
            }
            // As the repository spells it, when sortie has seen it.
            let label = self.status_label(status);
            let mut query = vec![label.as_str()];
            query.extend(extra.iter().copied());
            let page = match self.api.open_issues_with_labels(&query).await {
                Ok(page) => page,
                Err(err) => {
                    result = Err(err);
                    break;
                }
            };
            for value in page.items {
                let number = value.get("number").and_then(|n| n.as_u64());
                match serde_json::from_value::<WireIssue>(value) {
                    Ok(issue) => {
                        self.learn_labels(issue.labels.iter().map(|l| l.name()));
                        self.learn_dependencies(&issue);
                        issues.insert(issue.head.number, issue);
                    }
                    Err(err) => listing.warnings.push(format!(
                        "issue #{} is unreadable, skipped: {err}",
                        number.map_or_else(|| "?".to_string(), |n| n.to_string())
                    )),
                }
            }
        }
        // Keep the ETags of the pages that did answer, even when a later one failed.
        self.api.save_cache();
        result?;
        let no_dependencies = self.dependencies_missing();
        for issue in issues.values() {
            match issue.classify(&self.labels) {
                Classified::Ticket(mut ticket) if is_listed(statuses, &ticket.status) => {
                    if no_dependencies {
                        // Nothing to read on this server: as if blockers were off.
                        ticket.blocked_by.get_or_insert_with(Vec::new);
                    }
                    listing.tickets.push(*ticket)
                }
                Classified::Ticket(_) | Classified::PullRequest => {}
                Classified::Ambiguous { number, labels } => listing
                    .warnings
                    .push(ambiguous_warning(&format!("issue #{number}"), &labels)),
            }
        }
        Ok(listing)
    }
}

fn number(id: &str) -> Result<u64, TrackerError> {
    issue_number(id)
        .ok_or_else(|| TrackerError::Invalid(format!("{id:?} is not a GitHub issue number")))
}

#[async_trait]
impl Tracker for GithubTracker {
    fn forge(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn super::Forge>> {
        Some(self)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn rate_limit_remaining(&self) -> Option<u64> {
        self.api().rate_limit_remaining()
    }

    fn capabilities(&self) -> Capabilities {
        // Issue dependencies: none to read for an issue whose listing says it has
        // no open blocker, else one request per candidate, bounded per tick; none
        // at all once the server turned out to have no dependencies endpoint.
        Capabilities::status_labels(!self.dependencies_missing())
    }

    async fn identity(&self) -> Result<String, TrackerError> {
        let login = self
            .identity
            .get_or_try_init(|| async {
                let login = self.api.user().await;
                self.api.save_cache();
                login
            })
            .await?;
        Ok(login.clone())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        self.list_with_labels(statuses, &[]).await
    }

    /// Server-side: the filter's labels join the status label in the `labels=` query
    /// (GitHub returns issues carrying all of them). Excluded labels and the assignee
    /// are applied by the pipeline after listing.
    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &crate::config::TicketFilter,
    ) -> Result<Listing, TrackerError> {
        // A label with a comma cannot be queried; the pipeline filters on it anyway.
        let labels: Vec<&str> = filter
            .labels
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.contains(','))
            .collect();
        self.list_with_labels(statuses, &labels).await
    }

    /// Issue dependencies: `GET .../issues/{n}/dependencies/blocked_by`, one request
    /// (per page) per ticket. A blocker is closed when its issue is; its status is its
    /// status label when it has exactly one. A server without issue dependencies
    /// answers none (see [`GithubTracker::dependencies_missing`]).
    async fn blockers(&self, id: &str) -> Result<Vec<crate::tracker::Blocker>, TrackerError> {
        let page = self.blocked_by(number(id)?).await?;
        let mut out = Vec::new();
        for value in page.items {
            let Some(n) = value.get("number").and_then(|n| n.as_u64()) else {
                return Err(TrackerError::Invalid(format!(
                    "a blocker of #{id} has no issue number"
                )));
            };
            let closed = value.get("state").and_then(|s| s.as_str()) == Some("closed");
            let status = match serde_json::from_value::<WireIssue>(value) {
                Ok(issue) => match issue.classify(&self.labels) {
                    Classified::Ticket(t) if !t.status.is_empty() => Some(t.status),
                    _ => None,
                },
                Err(_) => None,
            };
            out.push(crate::tracker::Blocker {
                id: n.to_string(),
                status,
                closed,
            });
        }
        Ok(out)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let issue = self.wire_issue(id).await?;
        match issue.classify(&self.labels) {
            Classified::Ticket(ticket) => Ok(*ticket),
            Classified::PullRequest => Err(TrackerError::NotFound(format!(
                "#{id} is a pull request, not an issue"
            ))),
            Classified::Ambiguous { number, labels } => {
                Err(ambiguous_error(&format!("issue #{number}"), &labels))
            }
        }
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let number = number(id)?;
        let page = self.api.comments(number).await?;
        let mut comments = Vec::with_capacity(page.items.len());
        for value in page.items {
            match serde_json::from_value::<WireComment>(value) {
                Ok(c) => comments.push(Comment::from(c)),
                Err(err) => {
                    tracing::warn!(issue = number, %err, "skipping an unreadable comment")
                }
            }
        }
        comments.sort_by(|a, b| {
            (a.created_at, a.id.parse::<u64>().ok()).cmp(&(b.created_at, b.id.parse::<u64>().ok()))
        });
        Ok(comments)
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        let number = number(id)?;
        let value = self.api.post_comment(number, body).await?;
        serde_json::from_value::<WireComment>(value)
            .map(Comment::from)
            .map_err(|e| {
                TrackerError::Invalid(format!(
                    "issue #{number}: the created comment is unreadable: {e}"
                ))
            })
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        // Re-read first: a label a person changed meanwhile must not be clobbered.
        // Statuses compare ignoring case and surrounding whitespace; labels are added and
        // removed as the repository spells them.
        let issue = self.wire_issue(id).await?;
        let names = issue.labels.iter().map(issue::WireLabel::name);
        match self.labels.plan_move(id, names, from, to)? {
            LabelMove::AlreadyThere => Ok(()),
            LabelMove::Write { add, remove } => {
                if let Some(add) = add {
                    // As the repository spells it, when sortie has seen it: no case variant.
                    let add = self.status_label(self.labels.status_of(&add).unwrap_or(&add));
                    self.api.add_labels(issue.head.number, &[add]).await?;
                }
                // A 404 here means the old label is already gone: the goal is reached.
                for label in remove {
                    self.api.remove_label(issue.head.number, &label).await?;
                }
                Ok(())
            }
        }
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        check::run(self, statuses, create).await
    }
}

#[async_trait]
impl super::Forge for GithubTracker {
    /// Look for an open pull request with the branch as head first; open one only when
    /// there is none. A create refused because one exists (a race) reads it back.
    async fn open_pull_request(
        &self,
        spec: &super::PullRequestSpec,
    ) -> Result<super::PullRequest, TrackerError> {
        // Only a 422 (`Invalid`: "a pull request already exists") finds again.
        super::forge::find_or_open(
            || self.find_pull(&spec.head),
            self.api
                .create_pull(&spec.head, &spec.base, &spec.title, &spec.body, spec.draft),
            |value| wire_pull(&value, false),
            |err| matches!(err, TrackerError::Invalid(_)),
        )
        .await
    }

    async fn pull_request_state(&self, number: u64) -> Result<super::PullState, TrackerError> {
        pulls::state(&self.api, number).await
    }

    async fn resolved_comments(
        &self,
        number: u64,
    ) -> Result<std::collections::HashSet<String>, TrackerError> {
        pulls::resolved(&self.api, number).await
    }

    async fn check_details(
        &self,
        check: &super::Check,
        max_chars: usize,
    ) -> Result<String, TrackerError> {
        pulls::check_details(&self.api, check, max_chars).await
    }

    async fn merge_pull_request(
        &self,
        number: u64,
        expected_head: &str,
        method: crate::config::MergeMethod,
    ) -> Result<super::MergeResult, TrackerError> {
        pulls::merge(&self.api, number, expected_head, method).await
    }
}

impl GithubTracker {
    async fn find_pull(&self, head: &str) -> Result<Option<super::PullRequest>, TrackerError> {
        let page = self.api.open_pulls_for_head(head).await?;
        page.items
            .first()
            .map(|value| wire_pull(value, true))
            .transpose()
    }
}

/// A pull request from its JSON (`number`, `html_url`).
fn wire_pull(value: &serde_json::Value, reused: bool) -> Result<super::PullRequest, TrackerError> {
    let number = value.get("number").and_then(|n| n.as_u64());
    let url = value.get("html_url").and_then(|u| u.as_str());
    match (number, url) {
        (Some(number), Some(url)) => Ok(super::PullRequest {
            url: url.to_string(),
            number,
            reused,
        }),
        _ => Err(TrackerError::Invalid(
            "the pull request GitHub returned has no number or html_url".to_string(),
        )),
    }
}

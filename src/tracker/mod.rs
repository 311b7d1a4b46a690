//! The `Tracker` trait, the ticket model shared by every adapter, and the adapters themselves;
//! the [`Forge`] trait (where pull requests open) beside it.
//!
//! A tracker is where tickets live. sortie reads the board through this trait and
//! writes only two things back: comments (carrying outcome blocks) and status
//! transitions. Keep it small: every adapter implements all of it.

pub mod counting;
pub mod forge;
mod forge_core;
mod forge_issue;
pub mod gitea;
pub mod github;
pub mod github_project;
pub mod gitlab;
pub mod http;
pub mod jira;
pub mod labels;
pub mod linear;
pub mod local;
pub mod memory;
pub mod pulls;
pub mod redmine;
pub mod rest;
pub mod webhook;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use crate::names::same_name;
pub use forge::{Forge, PullRequest, PullRequestSpec};
pub use pulls::{
    Check, CheckState, MergeResult, Mergeability, PullLifecycle, PullState, Review, ReviewComment,
    ReviewVerdict,
};

/// One ticket as the pipeline sees it, whatever tracker it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// Tracker-native identifier (`42`, `PROJ-7`, ...).
    pub id: String,
    /// One-line title.
    pub title: String,
    /// Markdown body.
    pub body: String,
    /// Workflow status as configured in the pipeline (native status or label suffix).
    pub status: String,
    /// Labels other than the one modelling the status.
    pub labels: Vec<String>,
    /// Priority: lower numbers are more urgent; `None` sorts after every number.
    pub priority: Option<i64>,
    /// When the ticket was created.
    pub created_at: DateTime<Utc>,
    /// When the ticket last changed, as the tracker reports it.
    pub updated_at: DateTime<Utc>,
    /// Link a person can open, when the tracker has one.
    pub url: Option<String>,
    /// The tracker itself says the ticket is closed (e.g. a closed GitHub issue),
    /// independently of the configured `terminal_states`.
    pub closed: bool,
    /// Who the ticket is assigned to (logins, user names or ids, as the tracker names
    /// people). Default empty.
    #[serde(default)]
    pub assignees: Vec<String>,
    /// The tickets blocking this one, when the listing carried them (the local board,
    /// trackers whose search returns links); `None` when they need a read of their own
    /// ([`Tracker::blockers`]).
    #[serde(default)]
    pub blocked_by: Option<Vec<Blocker>>,
}

/// A ticket that blocks another through a tracker-native link (a dependency, a
/// relation, an issue link, `blocked_by` on the local board).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    /// The blocking ticket's id.
    pub id: String,
    /// Its status, when the tracker said.
    pub status: Option<String>,
    /// The tracker itself says it is closed or done.
    pub closed: bool,
}

/// One comment on a ticket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// Tracker-native comment id (the local board uses the file number, `0001`).
    pub id: String,
    /// Login / name of whoever wrote it.
    pub author: String,
    /// When it was written.
    pub created_at: DateTime<Utc>,
    /// Markdown body.
    pub body: String,
}

/// The result of listing the board: the tickets that parsed, and why others did not.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Tickets whose status is one of the requested statuses.
    pub tickets: Vec<Ticket>,
    /// Human-readable reasons for entries that were skipped (broken files, hostile names, ...).
    pub warnings: Vec<String>,
    /// Tickets seen on statuses that were not asked for, counted by status, where the
    /// adapter sees them at no extra cost (the local board); empty otherwise.
    pub other_statuses: std::collections::BTreeMap<String, usize>,
}

/// What an adapter can do natively; the pipeline adapts to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Statuses are native workflow states (Redmine, Jira) rather than labels (GitHub).
    pub native_statuses: bool,
    /// The adapter sends an `Idempotency-Key` header with writes.
    pub idempotency_header: bool,
    /// Blockers are read unless the config says otherwise (`tracker.blockers.enabled`):
    /// true where the tracker has them (the local board, Linear and Jira with the
    /// listing, GitHub and Redmine with a request per candidate); false on GitLab
    /// (blocking links need a paid tier: opt in) and where the adapter cannot read them
    /// (Gitea; turning them on there is a config error). Agrees with
    /// [`crate::config::TrackerConfig::blockers_by_default`].
    pub blockers: bool,
}

impl Capabilities {
    /// Statuses are the tracker's own workflow states; `blockers` as the field says.
    /// No adapter sends an idempotency header yet.
    pub const fn workflow_states(blockers: bool) -> Self {
        Capabilities {
            native_statuses: true,
            idempotency_header: false,
            blockers,
        }
    }

    /// Statuses are labels on issues (the forges); `blockers` as the field says.
    pub const fn status_labels(blockers: bool) -> Self {
        Capabilities {
            native_statuses: false,
            ..Capabilities::workflow_states(blockers)
        }
    }
}

/// What `sortie tracker check` found: one line per check, and the rate limit left.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// Each check with its result, in the order they ran.
    pub checks: Vec<CheckLine>,
    /// Requests left in the tracker's rate-limit window, when it has one.
    pub rate_limit_remaining: Option<u64>,
}

/// One check of `sortie tracker check`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckLine {
    /// What was checked (`token`, `repository access`, `status ready-for-design`, ...).
    pub what: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, or what to do about it.
    pub detail: String,
}

impl CheckReport {
    /// Record one check.
    pub fn push(&mut self, what: impl Into<String>, ok: bool, detail: impl Into<String>) {
        self.checks.push(CheckLine {
            what: what.into(),
            ok,
            detail: detail.into(),
        });
    }

    /// Whether every check passed.
    pub fn all_ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// Errors every adapter maps its failures onto; the pipeline branches on these.
#[derive(Debug, thiserror::Error)]
pub enum TrackerError {
    /// The ticket (or the board itself) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Credentials missing or rejected.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The tracker asked us to slow down.
    #[error("rate limited{}", .retry_after.map(|d| format!(" (retry after {}s)", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// How long the tracker asked us to wait, when it said.
        retry_after: Option<Duration>,
    },
    /// The tracker could not be reached or answered with a server error; try again later.
    #[error("tracker unavailable: {0}")]
    Unavailable(String),
    /// The request was refused as invalid (bad status name, malformed data, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The adapter cannot do this (e.g. read blockers on a tracker without links).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A transition was asked from a status the ticket is no longer in
    /// (a person moved it meanwhile); nothing was written.
    #[error("ticket {id} is in status {current:?}, not {expected:?}")]
    Conflict {
        /// The ticket.
        id: String,
        /// The status the caller expected.
        expected: String,
        /// The status the ticket actually has.
        current: String,
    },
    /// The tracker accepted the write but its workflow kept the ticket where it was
    /// (Redmine answers 204 and silently ignores a forbidden status change). Retrying
    /// will not help: a person must allow the transition or move the ticket.
    #[error(
        "transition refused by the {workflow} workflow: ticket {id} stays in {current:?}; \
         {from:?} -> {to:?} is not allowed for this user, role and tracker"
    )]
    TransitionRefused {
        /// Whose workflow refused it (`Redmine`).
        workflow: String,
        /// The ticket.
        id: String,
        /// The status the transition started from.
        from: String,
        /// The status that was asked for.
        to: String,
        /// The status the ticket has after the refused write.
        current: String,
    },
}

impl TrackerError {
    /// Whether the same call may succeed later without anyone changing anything.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TrackerError::RateLimited { .. } | TrackerError::Unavailable(_)
        )
    }
}

/// A board sortie can read and write back to.
///
/// Implementations must be safe to call from several tasks at once.
#[async_trait]
pub trait Tracker: Send + Sync {
    /// Stable identity used in ledger keys and idempotency keys (`local`, `github:owner/repo`).
    fn name(&self) -> &str;

    /// What this adapter supports natively.
    fn capabilities(&self) -> Capabilities;

    /// Requests left in the tracker's rate-limit window as last seen, for trackers that
    /// have one (GitHub). Default: none.
    fn rate_limit_remaining(&self) -> Option<u64> {
        None
    }

    /// What [`Tracker::rate_limit_remaining`] counts, for people: `requests` (the
    /// default), or `GraphQL points` (a GitHub Project).
    fn rate_limit_unit(&self) -> &'static str {
        "requests"
    }

    /// The author name sortie's own comments carry on this tracker.
    async fn identity(&self) -> Result<String, TrackerError>;

    /// Every ticket whose status is one of `statuses`, plus closed tickets the
    /// adapter can cheaply report (with `closed: true`). Unparseable entries are
    /// skipped and reported in [`Listing::warnings`], never fatal.
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError>;

    /// [`Tracker::list`] narrowed by `filter` where the tracker can filter server-side
    /// (labels, assignee, a query clause). The pipeline applies the filter to what comes
    /// back anyway, so an adapter may return more than the filter allows, never less.
    /// The default lists unfiltered.
    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &crate::config::TicketFilter,
    ) -> Result<Listing, TrackerError> {
        let _ = filter;
        self.list(statuses).await
    }

    /// Re-read one ticket, bypassing any cache.
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError>;

    /// The tickets blocking `id` through tracker-native links, each with its status, in
    /// one or a few requests. The default: [`TrackerError::Unsupported`].
    async fn blockers(&self, id: &str) -> Result<Vec<Blocker>, TrackerError> {
        Err(TrackerError::Unsupported(format!(
            "{} has no blockers to read for {id}",
            self.name()
        )))
    }

    /// All comments on a ticket, oldest first.
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError>;

    /// The comments of each of `ids`, in order: [`Tracker::comments`] one ticket after
    /// the other, unless the adapter reads several at once more cheaply.
    async fn comments_of(&self, ids: &[String]) -> Vec<Result<Vec<Comment>, TrackerError>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.comments(id).await);
        }
        out
    }

    /// How many histories beyond those a tick's plan needs it may read in the same
    /// round, for candidates likely to need them next: reads that cost no request
    /// (the local board). Default 0: a remote tracker reads exactly what the plan
    /// needs.
    fn read_ahead(&self) -> usize {
        0
    }

    /// Post a comment. `idempotency_key` is sent where the tracker supports it;
    /// callers check for an existing comment with the key themselves.
    async fn post_comment(
        &self,
        id: &str,
        body: &str,
        idempotency_key: &str,
    ) -> Result<Comment, TrackerError>;

    /// Move a ticket from `from` to `to`. A ticket already in `to` is a no-op;
    /// a ticket in neither is [`TrackerError::Conflict`] and nothing is written.
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError>;

    /// The tracker as a forge (where pull requests open), when it is one: GitHub, GitLab
    /// and Gitea answer `Some(self)`. The default: `None` (a board, not a code host).
    fn forge(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<dyn Forge>> {
        None
    }

    /// Check that sortie can work with this tracker: credentials, access, and that every
    /// status in `statuses` exists (creating missing ones when `create` and the
    /// tracker allows it). The default lists the board once.
    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        let _ = create;
        let mut report = CheckReport::default();
        let listing = self.list(statuses).await?;
        report.push(
            "board",
            true,
            format!(
                "{} ticket(s) on the statuses checked (every stage's claim, in-progress, success and failure status), {} unreadable entries",
                listing.tickets.len(),
                listing.warnings.len()
            ),
        );
        for warning in listing.warnings {
            report.push("board entry", false, warning);
        }
        Ok(report)
    }
}

/// The value behind `mutex`, even after a panic while it was held: the adapters' caches
/// hold plain values a panic cannot leave half-written.
pub(crate) fn unpoisoned<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The token in environment variable `env` for `vendor`, trimmed; unset or empty is
/// [`TrackerError::Unauthorized`] pointing at `doc`.
pub fn read_token(env: &str, vendor: &str, doc: &str) -> Result<String, TrackerError> {
    read_secret(env, || {
        format!("environment variable {env} is not set; put a {vendor} token in it (see {doc})")
    })
}

/// The secret in environment variable `env`, trimmed; unset or empty is
/// [`TrackerError::Unauthorized`] with the message `missing` writes (each vendor says
/// where its secret comes from).
pub(crate) fn read_secret(
    env: &str,
    missing: impl FnOnce() -> String,
) -> Result<String, TrackerError> {
    std::env::var(env)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| TrackerError::Unauthorized(missing()))
}

/// Open the tracker a config names. Secrets are read from the environment variables
/// the config names, here and nowhere else.
pub fn open(config: &crate::config::Config) -> Result<std::sync::Arc<dyn Tracker>, TrackerError> {
    use crate::config::TrackerConfig;
    match &config.tracker {
        TrackerConfig::Local { path } => Ok(std::sync::Arc::new(local::LocalBoard::open(path)?)),
        TrackerConfig::Redmine {
            url,
            project,
            api_key_env,
        } => Ok(std::sync::Arc::new(redmine::RedmineTracker::from_env(
            url,
            project,
            api_key_env,
        )?)),
        TrackerConfig::Github { .. } => {
            Ok(std::sync::Arc::new(github::GithubTracker::open(config)?))
        }
        TrackerConfig::Gitlab { .. } => {
            Ok(std::sync::Arc::new(gitlab::GitlabTracker::open(config)?))
        }
        TrackerConfig::Gitea { .. } => Ok(std::sync::Arc::new(gitea::GiteaTracker::open(config)?)),
        TrackerConfig::Linear { .. } => {
            Ok(std::sync::Arc::new(linear::LinearTracker::open(config)?))
        }
        TrackerConfig::Jira { .. } => Ok(std::sync::Arc::new(jira::JiraTracker::open(config)?)),
        TrackerConfig::GithubProject { .. } => Ok(std::sync::Arc::new(
            github_project::GithubProjectTracker::open(config)?,
        )),
    }
}

/// Open the forge a config's `forge:` names (where pull requests open), `None` without
/// one. Its token is read from `forge.token_env` here, once, like the tracker's.
pub fn open_forge(
    config: &crate::config::Config,
) -> Result<Option<std::sync::Arc<dyn Forge>>, TrackerError> {
    const DOC: &str = "docs/workspaces.md#pull-requests";
    let Some(forge) = &config.forge else {
        return Ok(None);
    };
    fn shared<T: Forge + 'static>(
        adapter: Result<T, TrackerError>,
    ) -> Result<std::sync::Arc<dyn Forge>, TrackerError> {
        adapter.map(|a| std::sync::Arc::new(a) as _)
    }
    use forge_core::open_adapter as open;
    use {gitea::GiteaSettings, github::GithubSettings, gitlab::GitlabSettings};
    // A GitHub forge has its own ETag file (the tracker's belongs to a GitHub tracker):
    // watched pull requests are read every tick, and an unchanged one must answer 304
    // for free in the next cron process too.
    let etags = config.state_root.join(github::FORGE_ETAG_FILE);
    let on_github = |s, t| {
        let options = github::GithubOptions {
            etag_file: Some(etags.clone()),
            ..Default::default()
        };
        shared(github::GithubTracker::new(s, t, options))
    };
    let on_gitlab = |s, t| shared(gitlab::GitlabTracker::new(s, t, Default::default()));
    let on_gitea = |s, t| shared(gitea::GiteaTracker::new(s, t, Default::default()));
    let opened = open(forge, "GitHub", DOC, GithubSettings::from_config, on_github)
        .or_else(|| open(forge, "GitLab", DOC, GitlabSettings::from_config, on_gitlab))
        .or_else(|| open(forge, "Gitea", DOC, GiteaSettings::from_config, on_gitea))
        .ok_or_else(|| not_a_forge(forge))??;
    Ok(Some(opened))
}

/// What opening a pull request on `tracker` (a board, not a code host) answers, for
/// `head`: the pipeline's error when neither the tracker nor a `forge:` is a forge.
pub fn not_a_code_host(tracker: &str, head: &str) -> TrackerError {
    TrackerError::Unsupported(format!(
        "{tracker} cannot open pull requests (for branch {head})"
    ))
}

/// A `forge:` of a kind that opens no pull requests (the config loader refuses it).
fn not_a_forge(forge: &crate::config::TrackerConfig) -> TrackerError {
    TrackerError::Invalid(format!(
        "forge {} is not a GitHub, GitLab or Gitea repository",
        forge.name()
    ))
}

//! A tracker wrapper that counts requests by kind and result, for the daemon's metrics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Capabilities, Check, CheckReport, Comment, Forge, Listing, MergeResult, PullRequest,
    PullRequestSpec, PullState, Ticket, Tracker, TrackerError,
};

/// Requests made through every [`CountingTracker`] of this process, by
/// `(kind, result)`: kind `list`, `get`, `comments`, `post_comment`, `transition`,
/// `identity`, `check`, `blockers`; result `ok` or the error kind.
static REQUESTS: Mutex<BTreeMap<(&'static str, &'static str), u64>> = Mutex::new(BTreeMap::new());

/// A snapshot of the request counts of this process.
pub fn request_counts() -> BTreeMap<(&'static str, &'static str), u64> {
    REQUESTS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn count<T>(kind: &'static str, result: &Result<T, TrackerError>) {
    let outcome = match result {
        Ok(_) => "ok",
        Err(TrackerError::NotFound(_)) => "not_found",
        Err(TrackerError::Unauthorized(_)) => "unauthorized",
        Err(TrackerError::RateLimited { .. }) => "rate_limited",
        Err(TrackerError::Unavailable(_)) => "unavailable",
        Err(TrackerError::Invalid(_)) => "invalid",
        Err(TrackerError::Conflict { .. }) => "conflict",
        Err(TrackerError::TransitionRefused { .. }) => "transition_refused",
        Err(TrackerError::Unsupported(_)) => "unsupported",
    };
    *REQUESTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((kind, outcome))
        .or_default() += 1;
}

/// Wraps a tracker and counts every call (see [`request_counts`]), its calls as a forge
/// too when it is one.
pub struct CountingTracker {
    inner: Arc<dyn Tracker>,
    forge: Option<Arc<dyn Forge>>,
}

impl CountingTracker {
    /// Count the calls made to `inner`.
    pub fn new(inner: Arc<dyn Tracker>) -> Self {
        let forge = inner.clone().forge();
        CountingTracker { inner, forge }
    }
}

#[async_trait]
impl Tracker for CountingTracker {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn rate_limit_remaining(&self) -> Option<u64> {
        self.inner.rate_limit_remaining()
    }
    fn rate_limit_unit(&self) -> &'static str {
        self.inner.rate_limit_unit()
    }
    async fn identity(&self) -> Result<String, TrackerError> {
        let r = self.inner.identity().await;
        count("identity", &r);
        r
    }
    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let r = self.inner.list(statuses).await;
        count("list", &r);
        r
    }
    async fn list_filtered(
        &self,
        statuses: &[String],
        filter: &crate::config::TicketFilter,
    ) -> Result<Listing, TrackerError> {
        let r = self.inner.list_filtered(statuses, filter).await;
        count("list", &r);
        r
    }
    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let r = self.inner.get(id).await;
        count("get", &r);
        r
    }
    async fn blockers(&self, id: &str) -> Result<Vec<super::Blocker>, TrackerError> {
        let r = self.inner.blockers(id).await;
        count("blockers", &r);
        r
    }
    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let r = self.inner.comments(id).await;
        count("comments", &r);
        r
    }
    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        let r = self.inner.post_comment(id, body, key).await;
        count("post_comment", &r);
        r
    }
    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let r = self.inner.transition(id, from, to).await;
        count("transition", &r);
        r
    }
    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        let r = self.inner.check(statuses, create).await;
        count("check", &r);
        r
    }
    fn forge(self: Arc<Self>) -> Option<Arc<dyn Forge>> {
        self.forge.is_some().then_some(self as Arc<dyn Forge>)
    }
}

/// Only built when the tracker is a forge ([`CountingTracker::forge`]).
#[async_trait]
impl Forge for CountingTracker {
    async fn open_pull_request(&self, spec: &PullRequestSpec) -> Result<PullRequest, TrackerError> {
        let r = match &self.forge {
            Some(forge) => forge.open_pull_request(spec).await,
            None => Err(super::not_a_code_host(self.inner.name(), &spec.head)),
        };
        count("open_pull_request", &r);
        r
    }

    async fn pull_request_state(&self, number: u64) -> Result<PullState, TrackerError> {
        let r = match &self.forge {
            Some(forge) => forge.pull_request_state(number).await,
            None => Err(TrackerError::Unsupported(format!(
                "{} is not a code host: it has no pull request {number}",
                self.inner.name()
            ))),
        };
        count("pull_request_state", &r);
        r
    }

    async fn resolved_comments(
        &self,
        number: u64,
    ) -> Result<std::collections::HashSet<String>, TrackerError> {
        let r = match &self.forge {
            Some(forge) => forge.resolved_comments(number).await,
            None => Ok(Default::default()),
        };
        count("resolved_comments", &r);
        r
    }

    async fn check_details(&self, check: &Check, max_chars: usize) -> Result<String, TrackerError> {
        let r = match &self.forge {
            Some(forge) => forge.check_details(check, max_chars).await,
            None => Ok(super::pulls::tail_excerpt(&check.summary, max_chars)),
        };
        count("check_details", &r);
        r
    }

    async fn merge_pull_request(
        &self,
        number: u64,
        expected_head: &str,
        method: crate::config::MergeMethod,
    ) -> Result<MergeResult, TrackerError> {
        let r = match &self.forge {
            Some(forge) => {
                forge
                    .merge_pull_request(number, expected_head, method)
                    .await
            }
            None => Err(TrackerError::Unsupported(format!(
                "{} is not a code host: it has no pull request {number}",
                self.inner.name()
            ))),
        };
        count("merge_pull_request", &r);
        r
    }
}

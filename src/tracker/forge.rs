//! The `Forge` trait: the code host where a ticket's pull request opens (GitHub, GitLab,
//! Gitea), beside the [`Tracker`](super::Tracker) that holds the tickets.
//!
//! A tracker that is also a forge (a GitHub repository's issues) answers
//! [`Tracker::forge`](super::Tracker::forge) with itself; a board that is not (the local
//! board, Jira, Linear, Redmine) gets one from the config's `forge:` ([`super::open_forge`]).
//! The pipeline holds the forge as its own handle and never asks the tracker for pull
//! requests.

use std::future::Future;

use async_trait::async_trait;
use serde::Serialize;

use super::pulls::{Check, MergeResult, PullState};
use super::{Tracker, TrackerError};
use crate::config::MergeMethod;

/// A pull request (merge request) to open for a ticket's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestSpec {
    /// The ticket it is for.
    pub ticket_id: String,
    /// The branch with the work (already pushed).
    pub head: String,
    /// The branch it merges into.
    pub base: String,
    /// Its title.
    pub title: String,
    /// Its description.
    pub body: String,
    /// Open it as a draft.
    pub draft: bool,
}

/// A pull request on the forge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequest {
    /// The link a person opens.
    pub url: String,
    /// The forge's number for it.
    pub number: u64,
    /// It was open already (found by its branch) and reused, not opened now.
    pub reused: bool,
}

/// A code host sortie opens pull requests on. Every forge is also a tracker (GitHub,
/// GitLab, Gitea): its name, and its checks (`Tracker::check` with no statuses: the
/// token and access to the repository), are the tracker's.
///
/// Implementations must be safe to call from several tasks at once.
#[async_trait]
pub trait Forge: Tracker {
    /// Open a pull request for `spec.head` into `spec.base`, once: an open pull
    /// request for the same branch is found and returned (`reused`) instead of opening
    /// a second.
    async fn open_pull_request(&self, spec: &PullRequestSpec) -> Result<PullRequest, TrackerError>;

    /// The pull request `number` as it is now: head, mergeability, the head's checks,
    /// reviews and review comments (resolved and outdated marked), merged or closed.
    /// Reads are conditional where the forge allows, so an unchanged pull request costs
    /// no rate-limit units. Default: [`TrackerError::Unsupported`].
    async fn pull_request_state(&self, number: u64) -> Result<PullState, TrackerError> {
        Err(TrackerError::Unsupported(format!(
            "{} cannot read pull request {number}'s checks and reviews yet",
            self.name()
        )))
    }

    /// The ids of pull request `number`'s review comments whose thread is resolved,
    /// for forges whose [`Forge::pull_request_state`] cannot tell (GitHub's REST API);
    /// read only when comments are about to be handed over. Default: none beyond what
    /// the state marks.
    async fn resolved_comments(
        &self,
        number: u64,
    ) -> Result<std::collections::HashSet<String>, TrackerError> {
        let _ = number;
        Ok(std::collections::HashSet::new())
    }

    /// What a failed check says: its annotations or its log's tail, at most `max_chars`
    /// characters; read only when a reaction hands the failure over. Default: the
    /// summary the state already holds.
    async fn check_details(&self, check: &Check, max_chars: usize) -> Result<String, TrackerError> {
        Ok(super::pulls::tail_excerpt(&check.summary, max_chars))
    }

    /// Merge pull request `number` with `method`, only if its head is still
    /// `expected_head` (a push in between makes the forge refuse). Default:
    /// [`TrackerError::Unsupported`].
    async fn merge_pull_request(
        &self,
        number: u64,
        expected_head: &str,
        method: MergeMethod,
    ) -> Result<MergeResult, TrackerError> {
        let _ = (expected_head, method);
        Err(TrackerError::Unsupported(format!(
            "{} cannot merge pull request {number} yet",
            self.name()
        )))
    }
}

/// Open a pull request once: the one `find` finds, else the one `create` opens (`made`
/// reads its answer). A create that fails with an error `find_again_on` accepts (one is
/// open already: a race) finds again, and fails with that error when there is none.
pub async fn find_or_open<Found, Made>(
    find: impl Fn() -> Found,
    create: impl Future<Output = Result<Made, TrackerError>>,
    made: impl FnOnce(Made) -> Result<PullRequest, TrackerError>,
    find_again_on: impl FnOnce(&TrackerError) -> bool,
) -> Result<PullRequest, TrackerError>
where
    Found: Future<Output = Result<Option<PullRequest>, TrackerError>>,
{
    if let Some(found) = find().await? {
        return Ok(found);
    }
    match create.await {
        Ok(answer) => made(answer),
        Err(err) if find_again_on(&err) => match find().await? {
            Some(found) => Ok(found),
            None => Err(err),
        },
        Err(err) => Err(err),
    }
}

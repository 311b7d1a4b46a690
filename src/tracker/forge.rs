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

use super::{Tracker, TrackerError};

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

//! Issue #39, item 11 (pagination integrity): a listing is the whole board or an
//! error. A later page failing, a next link off the API host, a link loop and the page
//! cap fail the listing: the tick never acts on part of the board. Against the GitHub
//! model (`Link` headers) and the GitLab model (`Link` when it serves no `x-next-page`);
//! the cap is proven on the shared walk (`tracker::http::paging`), with the loop and the
//! off-host link.

use std::time::Duration;

use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
use sortie::tracker::{Tracker, TrackerError};

use crate::forge_model::{ForgeModel, NextLink};
use crate::github_model::{GithubModel, REPO, TOKEN};
use crate::gitlab_model;

async fn github(link: NextLink) -> (GithubModel, GithubTracker) {
    let model = GithubModel::start().await;
    model.set_max_per_page(1);
    for title in ["a", "b", "c"] {
        model.add_issue(title, &["status:ready"]);
    }
    model.set_next_link(link);
    let settings = GithubSettings {
        repo: REPO.into(),
        api_url: model.api_url(),
        labels: LabelScheme::new("status:", "priority:"),
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    };
    let tracker = GithubTracker::new(settings, TOKEN.into(), options).unwrap();
    (model, tracker)
}

async fn gitlab(link: NextLink) -> (ForgeModel, GitlabTracker) {
    let model = gitlab_model::start().await;
    model.board().max_per_page = 1;
    for title in ["a", "b", "c"] {
        model.add_issue(title, &["status::ready"]);
    }
    model.board().next_link = link;
    let settings = GitlabSettings {
        url: model.url(),
        project: gitlab_model::PROJECT.into(),
        bearer: false,
        labels: LabelScheme::new("status::", "priority::"),
        close_on: Vec::new(),
    };
    let tracker = GitlabTracker::new(
        settings,
        gitlab_model::TOKEN.into(),
        GitlabOptions::default(),
    );
    (model, tracker.unwrap())
}

fn ready() -> Vec<String> {
    vec!["ready".to_string()]
}

/// The listing's error, which must name `says`.
fn refused(listing: Result<sortie::tracker::Listing, TrackerError>, says: &str) {
    match listing {
        Err(TrackerError::Invalid(m)) => assert!(m.contains(says), "{m}"),
        Err(other) => panic!("expected an invalid-answer error naming {says:?}, got {other}"),
        Ok(l) => panic!(
            "expected an error, got a listing of {} ticket(s), warnings {:?}",
            l.tickets.len(),
            l.warnings
        ),
    }
}

#[tokio::test]
async fn pagination_integrity_an_honest_listing_reads_every_page() {
    let (_m, t) = github(NextLink::Honest).await;
    assert_eq!(t.list(&ready()).await.unwrap().tickets.len(), 3);
    let (_m, t) = gitlab(NextLink::Honest).await;
    assert_eq!(t.list(&ready()).await.unwrap().tickets.len(), 3);
}

#[tokio::test]
async fn pagination_integrity_a_failing_later_page_fails_the_listing() {
    let (model, t) = github(NextLink::Honest).await;
    // Page 1 answers; page 2 fails twice (the adapter retries a 5xx once).
    model.fail("GET", "page=2", 503, None, 2);
    match t.list(&ready()).await {
        Err(TrackerError::Unavailable(_)) => {}
        other => panic!("GitHub: expected Unavailable, got {other:?}"),
    }
    let (model, t) = gitlab(NextLink::Honest).await;
    model.fail("GET", "page=2", 503, None, 1);
    match t.list(&ready()).await {
        Err(TrackerError::Unavailable(_)) => {}
        other => panic!("GitLab: expected Unavailable, got {other:?}"),
    }
}

/// Both adapters, their model serving `link`, refuse the listing with an error naming
/// `says`, after reading one page (GitHub's requests are counted).
async fn both_refuse(link: NextLink, says: &str) {
    let (model, t) = github(link).await;
    refused(t.list(&ready()).await, says);
    assert_eq!(model.requests().len(), 1, "{:#?}", model.log());
    let (_model, t) = gitlab(link).await;
    refused(t.list(&ready()).await, says);
}

#[tokio::test]
async fn pagination_integrity_an_off_host_next_link_is_an_error() {
    both_refuse(NextLink::OffHost, "is not under the API base").await;
}

#[tokio::test]
async fn pagination_integrity_a_next_link_loop_is_an_error() {
    both_refuse(NextLink::Loop, "pagination loop").await;
}

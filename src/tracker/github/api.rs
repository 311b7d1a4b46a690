//! The GitHub REST endpoints sortie uses, one method each: URLs built from
//! `api_url`, `Link` pagination, and conditional `GET`s through the ETag cache.
//!
//! [`GithubApi`] is public so contract tests (and people debugging a setup) can make
//! every request the adapter makes, exactly as it makes them.

use std::sync::Arc;

use reqwest::{Method, Url};
use serde_json::{json, Value};

use super::transport::GithubClient;
use crate::tracker::http::{strip_query, CachedPage, PageWalk, Reply, ResponseCache, Retry};
use crate::tracker::TrackerError;

/// Items per page GitHub allows at most.
const PER_PAGE: &str = "100";
/// Pages read at most for one listing (100 000 items); more is an error.
const MAX_PAGES: usize = 1000;

/// The GitHub REST calls sortie makes, for one repository.
pub struct GithubApi {
    base: Url,
    owner: String,
    repo: String,
    client: GithubClient,
    cache: Arc<ResponseCache>,
}

/// Items of a paginated listing: every page of it.
#[derive(Debug, Clone, Default)]
pub struct Items {
    /// Every item of every page.
    pub items: Vec<Value>,
}

impl GithubApi {
    pub(crate) fn new(
        api_url: &str,
        repo: &str,
        client: GithubClient,
        cache: Arc<ResponseCache>,
    ) -> Result<Self, TrackerError> {
        let mut base = Url::parse(api_url.trim_end_matches('/'))
            .map_err(|e| TrackerError::Invalid(format!("api_url {api_url:?}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(TrackerError::Invalid(format!(
                "api_url {api_url:?} must be an http(s) URL"
            )));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let (owner, name) = repo
            .split_once('/')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| TrackerError::Invalid(format!("repo {repo:?} is not owner/name")))?;
        Ok(GithubApi {
            base,
            owner: owner.to_string(),
            repo: name.to_string(),
            client,
            cache,
        })
    }

    /// `base/<segments...>`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new: api_url can be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    /// `base/repos/<owner>/<repo>/<segments...>`.
    pub(super) fn repo_url(&self, segments: &[&str]) -> Url {
        let mut all = vec!["repos", self.owner.as_str(), self.repo.as_str()];
        all.extend_from_slice(segments);
        self.url(&all)
    }

    /// The repository's owner.
    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// The repository's name.
    pub(super) fn repo_name(&self) -> &str {
        &self.repo
    }

    /// The GraphQL endpoint: `/graphql` beside the REST root, or `/api/graphql` when the
    /// REST root is GitHub Enterprise Server's `/api/v3`.
    pub(super) fn graphql_url(&self) -> Url {
        let mut url = self.base.clone();
        let path = url.path().trim_end_matches('/');
        let graphql = match path.strip_suffix("/v3") {
            Some(api) if api.ends_with("/api") => format!("{api}/graphql"),
            _ => format!("{path}/graphql"),
        };
        url.set_path(&graphql);
        url
    }

    /// Requests left in the rate-limit window, from the last response.
    pub fn rate_limit_remaining(&self) -> Option<u64> {
        self.client.rate_limit_remaining()
    }

    /// Write the persisted part of the ETag cache (board listings, the user).
    pub fn save_cache(&self) {
        self.cache.save();
    }

    /// `GET /user`: the token's own login.
    pub async fn user(&self) -> Result<String, TrackerError> {
        let page = self
            .get_conditional(self.url(&["user"]).as_str(), true)
            .await?;
        let value = parse_json(&page.body, "GET /user")?;
        value
            .get("login")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| TrackerError::Invalid("GET /user: the answer has no login".into()))
    }

    /// `GET /repos/{o}/{r}/issues?labels=<label>&state=open&per_page=100`, every page.
    pub async fn open_issues_with_label(&self, label: &str) -> Result<Items, TrackerError> {
        self.open_issues_with_labels(&[label]).await
    }

    /// `GET /repos/{o}/{r}/issues?labels=a,b&state=open&per_page=100`: open issues
    /// carrying every one of `labels` (none may contain a comma), every page.
    pub async fn open_issues_with_labels(&self, labels: &[&str]) -> Result<Items, TrackerError> {
        let mut url = self.repo_url(&["issues"]);
        url.query_pairs_mut()
            .append_pair("labels", &labels.join(","))
            .append_pair("state", "open")
            .append_pair("per_page", PER_PAGE);
        self.all_pages(url, true).await
    }

    /// `GET /repos/{o}/{r}/issues?state=all&per_page=100`, the first page only: the
    /// repository's most recent issues and pull requests (`tracker check` asks one of
    /// them about issue dependencies).
    pub async fn recent_issues(&self) -> Result<Vec<Value>, TrackerError> {
        let mut url = self.repo_url(&["issues"]);
        url.query_pairs_mut()
            .append_pair("state", "all")
            .append_pair("per_page", PER_PAGE);
        let page = self.get_conditional(url.as_str(), false).await?;
        match parse_json(&page.body, "GET issues")? {
            Value::Array(items) => Ok(items),
            _ => Err(TrackerError::Invalid(format!(
                "{}: expected a JSON list",
                strip_query(url.as_str())
            ))),
        }
    }

    /// `GET /repos/{o}/{r}/issues/{n}/dependencies/blocked_by?per_page=100`: the issues
    /// blocking issue `number`, every page.
    pub async fn blocked_by(&self, number: u64) -> Result<Items, TrackerError> {
        let mut url = self.repo_url(&["issues", &number.to_string(), "dependencies", "blocked_by"]);
        url.query_pairs_mut().append_pair("per_page", PER_PAGE);
        self.all_pages(url, false).await
    }

    /// `GET /repos/{o}/{r}/issues/{n}`, its ETag persisted: the workspace prune of
    /// every cron tick re-reads the tickets of live workspaces, and an unchanged one
    /// must answer `304` for free in the next process too.
    pub async fn issue(&self, number: u64) -> Result<Value, TrackerError> {
        let url = self.repo_url(&["issues", &number.to_string()]);
        let page = self.get_conditional(url.as_str(), true).await?;
        parse_json(&page.body, "GET issue")
    }

    /// `GET /repos/{o}/{r}/issues/{n}/comments?per_page=100`, every page, oldest first,
    /// their ETags persisted: a watched ticket's comments (its blocks) are read every
    /// tick, and unchanged ones must answer `304` for free in the next cron process
    /// too (issue #52).
    pub async fn comments(&self, number: u64) -> Result<Items, TrackerError> {
        let mut url = self.repo_url(&["issues", &number.to_string(), "comments"]);
        url.query_pairs_mut().append_pair("per_page", PER_PAGE);
        self.all_pages(url, true).await
    }

    /// `POST /repos/{o}/{r}/issues/{n}/comments` with `body`; the created comment.
    pub async fn post_comment(&self, number: u64, body: &str) -> Result<Value, TrackerError> {
        let url = self.repo_url(&["issues", &number.to_string(), "comments"]);
        // Posting is not idempotent and GitHub has no idempotency header: never
        // retried after the request may have arrived (the pipeline's outbox re-checks
        // the comments before posting again).
        let reply = self
            .send(
                Method::POST,
                &url,
                Some(json!({ "body": body })),
                Retry::ConnectOnly,
            )
            .await?;
        parse_json(&reply.body, "POST comment")
    }

    /// `POST /repos/{o}/{r}/issues/{n}/labels`: add labels (others are kept).
    pub async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), TrackerError> {
        let url = self.repo_url(&["issues", &number.to_string(), "labels"]);
        self.send(
            Method::POST,
            &url,
            Some(json!({ "labels": labels })),
            Retry::Safe,
        )
        .await
        .map(drop)
    }

    /// `DELETE /repos/{o}/{r}/issues/{n}/labels/{name}`; `false` when it was already gone.
    pub async fn remove_label(&self, number: u64, label: &str) -> Result<bool, TrackerError> {
        let url = self.repo_url(&["issues", &number.to_string(), "labels", label]);
        match self.send(Method::DELETE, &url, None, Retry::Safe).await {
            Ok(_) => Ok(true),
            Err(TrackerError::NotFound(_)) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// `GET /repos/{o}/{r}/labels?per_page=100`: every label name of the repository.
    pub async fn labels(&self) -> Result<Items, TrackerError> {
        let mut url = self.repo_url(&["labels"]);
        url.query_pairs_mut().append_pair("per_page", PER_PAGE);
        self.all_pages(url, false).await
    }

    /// `POST /repos/{o}/{r}/labels`: create a label.
    pub async fn create_label(
        &self,
        name: &str,
        color: &str,
        description: &str,
    ) -> Result<(), TrackerError> {
        let url = self.repo_url(&["labels"]);
        let body = json!({ "name": name, "color": color, "description": description });
        self.send(Method::POST, &url, Some(body), Retry::Safe)
            .await
            .map(drop)
    }

    /// `GET /repos/{o}/{r}/pulls?head=<owner>:<branch>&state=open`: the open pull
    /// requests whose head is `branch` of this repository.
    pub async fn open_pulls_for_head(&self, branch: &str) -> Result<Items, TrackerError> {
        let mut url = self.repo_url(&["pulls"]);
        url.query_pairs_mut()
            .append_pair("head", &format!("{}:{branch}", self.owner))
            .append_pair("state", "open")
            .append_pair("per_page", PER_PAGE);
        self.all_pages(url, false).await
    }

    /// `POST /repos/{o}/{r}/pulls`: open a pull request; the created pull request.
    /// Never retried once it may have arrived (the caller looks for it by branch).
    pub async fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
        draft: bool,
    ) -> Result<Value, TrackerError> {
        let url = self.repo_url(&["pulls"]);
        let payload =
            json!({ "head": head, "base": base, "title": title, "body": body, "draft": draft });
        let reply = self
            .send(Method::POST, &url, Some(payload), Retry::ConnectOnly)
            .await?;
        parse_json(&reply.body, "POST pulls")
    }

    /// `GET /rate_limit`: requests left in the core window (this call is free).
    pub async fn rate_limit(&self) -> Result<Option<u64>, TrackerError> {
        let url = self.url(&["rate_limit"]);
        let reply = self.send(Method::GET, &url, None, Retry::Safe).await?;
        let value = parse_json(&reply.body, "GET /rate_limit")?;
        Ok(value
            .pointer("/resources/core/remaining")
            .or_else(|| value.pointer("/rate/remaining"))
            .and_then(Value::as_u64))
    }

    pub(super) async fn send(
        &self,
        method: Method,
        url: &Url,
        body: Option<Value>,
        retry: Retry,
    ) -> Result<Reply, TrackerError> {
        self.client
            .send(method, url.as_str(), body.as_ref(), None, retry)
            .await
    }

    /// `GET url`, sending the cached ETag; a 304 answers from the cache.
    pub(super) async fn get_conditional(
        &self,
        url: &str,
        persist: bool,
    ) -> Result<CachedPage, TrackerError> {
        let cached = self.cache.lookup(url);
        let reply = self
            .client
            .send(
                Method::GET,
                url,
                None,
                cached.as_ref().map(|c| c.etag.as_str()),
                Retry::Safe,
            )
            .await?;
        self.cache.answered(url, cached, reply, persist)
    }

    /// Every item of a paginated listing, following `rel="next"` links under `api_url`.
    /// A link off `api_url`, a link loop, the page cap or a failing page fails the
    /// whole listing ([`PageWalk`]).
    pub(super) async fn all_pages(&self, first: Url, persist: bool) -> Result<Items, TrackerError> {
        let mut out = Items::default();
        let mut walk = PageWalk::new(
            format!("GitHub listing {}", strip_query(first.path())),
            MAX_PAGES,
        );
        let mut url = first.to_string();
        loop {
            walk.visit(&url)?;
            let page = self.get_conditional(&url, persist).await?;
            match parse_json(&page.body, "listing")? {
                Value::Array(items) => out.items.extend(items),
                _ => {
                    return Err(TrackerError::Invalid(format!(
                        "{}: expected a JSON list",
                        strip_query(&url)
                    )))
                }
            }
            let Some(next) = page.next else {
                return Ok(out);
            };
            // Never send the token to another host.
            url = walk.follow(next, self.base.as_str())?;
        }
    }
}

pub(super) fn parse_json(body: &str, what: &str) -> Result<Value, TrackerError> {
    serde_json::from_str(body).map_err(|e| {
        // A 2xx that is not JSON comes from something between us and GitHub (a proxy
        // page): try again later rather than read it as an empty board.
        TrackerError::Unavailable(format!("{what}: the answer is not JSON ({e})"))
    })
}

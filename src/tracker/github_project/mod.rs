//! The GitHub Project adapter ("Projects v2"): the board is a project whose cards are
//! issues in one or more repositories, and a card's column is the value of a
//! single-select field (`Status` by default). The board is read and cards are moved
//! over GraphQL; comments and blockers go through the GitHub REST adapter of each
//! issue's repository, with its idempotency and identity rules. See
//! `docs/trackers/github-project.md`.
//!
//! A ticket's id is its issue's `owner/name#number`: a project spans repositories.

mod check;
pub mod queries;
mod transport;
mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use self::transport::ProjectClient;
pub use self::transport::{Points, RESERVE};
use self::wire::{StatusField, WireItem};
use super::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use super::{
    same_name, Blocker, Capabilities, CheckReport, Comment, Listing, Ticket, Tracker, TrackerError,
};
use crate::config::{Config, TrackerConfig};
use crate::tracker::http::{adapter_options, fmt_options, PageWalk, DEFAULT_RETRY_BACKOFF};

/// The file under the state root holding a rate-limit wait GitHub asked for.
pub const WAIT_FILE: &str = "github-project-ratelimit.json";

/// Pages of items read per listing at most: 200 pages of 50 items is a 10,000-card
/// board; a longer one is an error, never a listing that silently stops.
pub const MAX_PAGES: usize = 200;

adapter_options! {
    /// How the adapter talks to GitHub; the defaults suit production.
    pub struct GithubProjectOptions {
        /// Wait before the one retry after a server or connection error. Default 1 s.
        pub retry_backoff: Duration = DEFAULT_RETRY_BACKOFF,
        /// Where a rate-limit wait is persisted for the next process; `None` keeps it in
        /// memory. Default none ([`GithubProjectTracker::open`] uses
        /// `state_root/github-project-ratelimit.json`).
        pub wait_file: Option<PathBuf> = None,
        /// Where the REST adapters of the issues' repositories keep their ETag caches and
        /// rate-limit waits, one file per repository (`github-etags-OWNER--NAME.json`);
        /// `None` keeps them in memory. Default none ([`GithubProjectTracker::open`] uses
        /// the state root).
        pub etag_dir: Option<PathBuf> = None,
    }
}

impl std::fmt::Debug for GithubProjectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let timeouts = (self.timeout, self.retry_backoff);
        fmt_options(
            f,
            "GithubProjectOptions",
            timeouts,
            ("wait_file", &self.wait_file),
        )
    }
}

/// A GitHub Project's issue cards as a sortie board.
pub struct GithubProjectTracker {
    name: String,
    owner: String,
    number: u64,
    field_name: String,
    client: ProjectClient,
    /// For the REST adapters of the issues' repositories.
    rest_url: String,
    token: String,
    options: GithubProjectOptions,
    /// The pipeline's statuses, as the config spells them.
    known: Vec<String>,
    /// Statuses the stages move tickets to or through: each must be an option.
    required: Vec<String>,
    viewer: OnceCell<String>,
    /// The status field as last read (once per tick, by the listing).
    field: Mutex<Option<StatusField>>,
    /// Ticket id to the id of its item on this project, from every read.
    items: Mutex<HashMap<String, String>>,
    /// Ticket id to its status, from the last listing (a blocker's status).
    seen: Mutex<HashMap<String, String>>,
    /// One REST adapter per repository, for comments and dependencies.
    repos: Mutex<HashMap<String, Arc<GithubTracker>>>,
}

impl GithubProjectTracker {
    /// The tracker a `kind: github_project` config names, with the token read from the
    /// environment variable `token_env`.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let TrackerConfig::GithubProject { token_env, .. } = &config.tracker else {
            return Err(not_a_project(config));
        };
        let token = super::read_token(token_env, "GitHub", "docs/trackers/github-project.md")?;
        let options = GithubProjectOptions {
            wait_file: Some(config.state_root.join(WAIT_FILE)),
            etag_dir: Some(config.state_root.clone()),
            ..GithubProjectOptions::default()
        };
        Self::from_config(config, token, options)
    }

    /// The tracker a `kind: github_project` config names, with an explicit token and
    /// options.
    pub fn from_config(
        config: &Config,
        token: String,
        options: GithubProjectOptions,
    ) -> Result<Self, TrackerError> {
        let TrackerConfig::GithubProject {
            owner,
            project,
            status_field,
            api_url,
            rest_url,
            ..
        } = &config.tracker
        else {
            return Err(not_a_project(config));
        };
        let client = ProjectClient::new(
            api_url.clone(),
            &token,
            options.timeout,
            options.retry_backoff,
            options.clock.clone(),
            options.wait_file.clone(),
        )?;
        let required = config.stage_statuses();
        let mut known = required.clone();
        known.extend(config.pipeline_statuses());
        known.extend(config.terminal_states.iter().cloned());
        Ok(GithubProjectTracker {
            name: config.tracker.name(),
            owner: owner.clone(),
            number: *project,
            field_name: status_field.clone(),
            client,
            rest_url: rest_url.clone(),
            token,
            options,
            known,
            required,
            viewer: OnceCell::new(),
            field: Mutex::new(None),
            items: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            repos: Mutex::new(HashMap::new()),
        })
    }

    /// The points GitHub reported last: left in the hour, the last query's cost, and
    /// what this process spent.
    pub fn points(&self) -> Points {
        self.client.points()
    }

    /// `owner/7`, for messages.
    fn project_name(&self) -> String {
        format!("{}/{}", self.owner, self.number)
    }

    /// A status as the pipeline spells it (option names compare ignoring case).
    fn status_name(&self, option: &str) -> String {
        self.known
            .iter()
            .find(|k| same_name(k, option))
            .cloned()
            .unwrap_or_else(|| option.to_string())
    }

    async fn viewer(&self) -> Result<&String, TrackerError> {
        self.viewer
            .get_or_try_init(|| async {
                let data = self
                    .client
                    .send("SortieViewer", queries::VIEWER, json!({}))
                    .await?;
                data["viewer"]["login"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| {
                        TrackerError::Invalid("GitHub viewer: no login in the answer".into())
                    })
            })
            .await
    }

    /// Read the project's status field and its options (once per tick: the listing
    /// calls this; a transition to an option not seen reads it once more).
    async fn refresh_field(&self) -> Result<StatusField, TrackerError> {
        let data = self
            .client
            .send(
                "SortieProjectField",
                queries::FIELD,
                json!({ "owner": self.owner, "number": self.number, "field": self.field_name }),
            )
            .await?;
        let field = StatusField::read(&data, &self.project_name(), &self.field_name)?;
        *super::unpoisoned(&self.field) = Some(field.clone());
        Ok(field)
    }

    async fn field(&self) -> Result<StatusField, TrackerError> {
        let known = super::unpoisoned(&self.field).clone();
        match known {
            Some(field) => Ok(field),
            None => self.refresh_field().await,
        }
    }

    /// The error when a status the stages need is not an option of the field: nothing
    /// is listed or moved until a person fixes the board or the pipeline.
    fn missing_options(&self, field: &StatusField) -> Option<TrackerError> {
        let missing: Vec<&String> = self
            .required
            .iter()
            .filter(|s| field.option(s).is_none())
            .collect();
        if missing.is_empty() {
            return None;
        }
        Some(TrackerError::Invalid(format!(
            "GitHub Project {}: field {:?} has no option named {}; its options are: {} \
             (an option renamed or deleted on the board? rename it back or change the \
             pipeline; `sortie tracker check` lists them)",
            self.project_name(),
            field.name,
            missing
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            field.option_names()
        )))
    }

    /// The REST adapter of repository `repo` (`owner/name`), made once.
    fn repo(&self, repo: &str) -> Result<Arc<GithubTracker>, TrackerError> {
        let mut repos = super::unpoisoned(&self.repos);
        if let Some(found) = repos.get(repo) {
            return Ok(found.clone());
        }
        let settings = GithubSettings {
            repo: repo.to_string(),
            api_url: self.rest_url.clone(),
            labels: LabelScheme::new("status:", "priority:"),
        };
        let etag_file = self
            .options
            .etag_dir
            .as_ref()
            .map(|dir| dir.join(format!("github-etags-{}.json", repo.replacen('/', "--", 1))));
        let options = GithubOptions {
            etag_file,
            timeout: self.options.timeout,
            retry_backoff: self.options.retry_backoff,
            clock: self.options.clock.clone(),
            ..GithubOptions::default()
        };
        let adapter = Arc::new(GithubTracker::new(settings, self.token.clone(), options)?);
        repos.insert(repo.to_string(), adapter.clone());
        Ok(adapter)
    }

    /// Re-read one issue and its item on this project.
    async fn read(&self, id: &str) -> Result<(Ticket, String), TrackerError> {
        let (repo, number) = split_id(id)?;
        let (owner, name) = repo.split_once('/').unwrap_or((repo, ""));
        let field = self.field().await?;
        let data = self
            .client
            .send(
                "SortieProjectIssue",
                &queries::issue(),
                json!({ "owner": owner, "name": name, "number": number, "field": self.field_name }),
            )
            .await?;
        let issue = &data["repository"]["issue"];
        if issue.is_null() {
            return Err(TrackerError::NotFound(format!("issue {id} does not exist")));
        }
        let item = issue["projectItems"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|node| node["project"]["id"].as_str() == Some(field.project_id.as_str()))
            .ok_or_else(|| {
                TrackerError::NotFound(format!(
                    "issue {id} is not on GitHub Project {}",
                    self.project_name()
                ))
            })?;
        let item_id = item["id"].as_str().unwrap_or_default().to_string();
        let status = wire::status_of(&item["fieldValueByName"])
            .map(|s| self.status_name(&s))
            .unwrap_or_default();
        let ticket = wire::ticket(issue, status)
            .map_err(|e| TrackerError::Invalid(format!("issue {id} is unreadable: {e}")))?;
        super::unpoisoned(&self.items).insert(id.to_string(), item_id.clone());
        Ok((ticket, item_id))
    }
}

fn not_a_project(config: &Config) -> TrackerError {
    TrackerError::Invalid(format!(
        "tracker {} is not a GitHub Project",
        config.tracker.name()
    ))
}

/// `owner/name#12` into `("owner/name", 12)`.
pub fn split_id(id: &str) -> Result<(&str, u64), TrackerError> {
    let parsed = id.rsplit_once('#').and_then(|(repo, n)| {
        let number = n.parse::<u64>().ok().filter(|n| *n > 0)?;
        let (owner, name) = repo.split_once('/')?;
        let fine = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (fine(owner) && fine(name)).then_some((repo, number))
    });
    parsed.ok_or_else(|| {
        TrackerError::NotFound(format!(
            "{id:?} is not a GitHub Project ticket id (expected `owner/repo#number`)"
        ))
    })
}

#[async_trait]
impl Tracker for GithubProjectTracker {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::workflow_states(true)
    }

    fn rate_limit_remaining(&self) -> Option<u64> {
        self.client.points().remaining
    }

    fn rate_limit_unit(&self) -> &'static str {
        "GraphQL points"
    }

    async fn identity(&self) -> Result<String, TrackerError> {
        Ok(self.viewer().await?.clone())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        if statuses.is_empty() {
            return Ok(Listing::default());
        }
        let mut listing = Listing::default();
        let (mut pulls, mut drafts) = (0usize, 0usize);
        let mut seen = HashMap::new();
        let query = queries::items();
        let mut after: Option<String> = None;
        // A cursor read twice, a page saying more follow without one, or more pages
        // than the cap fail the listing: never act on part of the board.
        let mut walk = PageWalk::new(format!("GitHub Project {}", self.project_name()), MAX_PAGES);
        for page_number in 1.. {
            walk.visit(after.as_deref().unwrap_or(""))?;
            let data = self
                .client
                .send(
                    "SortieProjectItems",
                    &query,
                    json!({
                        "owner": self.owner,
                        "number": self.number,
                        "field": self.field_name,
                        "after": after,
                    }),
                )
                .await?;
            let project = &data["repositoryOwner"]["projectV2"];
            if project.is_null() {
                return Err(TrackerError::NotFound(format!(
                    "GitHub Project {} does not exist, or the token cannot see it",
                    self.project_name()
                )));
            }
            if page_number == 1 {
                // The field and its options, once per tick, before any card is read.
                let field = StatusField::read(&data, &self.project_name(), &self.field_name)?;
                *super::unpoisoned(&self.field) = Some(field.clone());
                if let Some(err) = self.missing_options(&field) {
                    return Err(err);
                }
            }
            let page = &project["items"];
            for node in page["nodes"].as_array().into_iter().flatten() {
                let item = match WireItem::read(node) {
                    Ok(item) => item,
                    Err(err) => {
                        listing
                            .warnings
                            .push(format!("a project item is unreadable, skipped: {err}"));
                        continue;
                    }
                };
                if item.archived {
                    continue;
                }
                let Some(option) = item.status.as_deref() else {
                    continue;
                };
                let status = self.status_name(option);
                let wanted = statuses.iter().any(|s| same_name(s, &status));
                match item.content.as_str() {
                    "Issue" => {}
                    "PullRequest" if wanted => {
                        pulls += 1;
                        continue;
                    }
                    "DraftIssue" if wanted => {
                        drafts += 1;
                        continue;
                    }
                    _ => continue,
                }
                let ticket = match wire::ticket(&node["content"], status.clone()) {
                    Ok(ticket) => ticket,
                    Err(err) => {
                        listing
                            .warnings
                            .push(format!("item {} is unreadable, skipped: {err}", item.id));
                        continue;
                    }
                };
                super::unpoisoned(&self.items).insert(ticket.id.clone(), item.id.clone());
                seen.insert(ticket.id.clone(), status.clone());
                // A closed issue keeps its card (and its column) on the board: it is
                // terminal, so it is not listed, as the GitHub adapter lists open issues
                // only; a claim on it is settled by the re-read (`get` says closed).
                if ticket.closed {
                    continue;
                }
                if wanted {
                    listing.tickets.push(ticket);
                } else {
                    *listing.other_statuses.entry(status).or_default() += 1;
                }
            }
            let info = &page["pageInfo"];
            let more = info["hasNextPage"].as_bool().unwrap_or(false);
            let cursor = info["endCursor"].as_str().map(str::to_string);
            match walk.next_cursor(more, cursor)? {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        if pulls + drafts > 0 {
            listing.warnings.push(format!(
                "GitHub Project {}: {pulls} pull request(s) and {drafts} draft item(s) in pipeline statuses are not tickets (only issues are)",
                self.project_name()
            ));
        }
        *super::unpoisoned(&self.seen) = seen;
        Ok(listing)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        Ok(self.read(id).await?.0)
    }

    async fn blockers(&self, id: &str) -> Result<Vec<Blocker>, TrackerError> {
        let (repo, number) = split_id(id)?;
        let found = self.repo(repo)?.blockers(&number.to_string()).await?;
        let seen = super::unpoisoned(&self.seen).clone();
        Ok(found
            .into_iter()
            .map(|b| {
                let id = format!("{repo}#{}", b.id);
                Blocker {
                    status: seen.get(&id).cloned(),
                    id,
                    closed: b.closed,
                }
            })
            .collect())
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let (repo, number) = split_id(id)?;
        self.repo(repo)?.comments(&number.to_string()).await
    }

    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        let (repo, number) = split_id(id)?;
        self.repo(repo)?
            .post_comment(&number.to_string(), body, key)
            .await
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        // Re-read first: a card a person moved meanwhile must not be moved back.
        let (ticket, item_id) = self.read(id).await?;
        if same_name(&ticket.status, to) {
            return Ok(());
        }
        if !same_name(&ticket.status, from) {
            return Err(TrackerError::Conflict {
                id: id.to_string(),
                expected: from.to_string(),
                current: ticket.status,
            });
        }
        let mut field = self.field().await?;
        if field.option(to).is_none() {
            // Options are read once per tick; one added since is worth one re-read.
            field = self.refresh_field().await?;
        }
        let Some(option) = field.option(to) else {
            return Err(TrackerError::Invalid(format!(
                "GitHub Project {}: field {:?} has no option named {to:?}; its options are: {}",
                self.project_name(),
                field.name,
                field.option_names()
            )));
        };
        let input = json!({
            "projectId": field.project_id,
            "itemId": item_id,
            "fieldId": field.field_id,
            "value": { "singleSelectOptionId": option.id },
        });
        let data = self
            .client
            .send(
                "SortieProjectMove",
                queries::MOVE,
                json!({ "input": input, "field": self.field_name }),
            )
            .await?;
        let now_in = wire::status_of(
            &data["updateProjectV2ItemFieldValue"]["projectV2Item"]["fieldValueByName"],
        )
        .unwrap_or_default();
        if !same_name(&now_in, to) {
            return Err(TrackerError::TransitionRefused {
                workflow: format!("GitHub Project {}", self.project_name()),
                id: id.to_string(),
                from: from.to_string(),
                to: to.to_string(),
                current: self.status_name(&now_in),
            });
        }
        Ok(())
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        check::run(self, statuses, create).await
    }
}

/// The `Value` of a JSON answer at `key`, or an error naming what is missing.
fn text<'a>(value: &'a Value, key: &str) -> Result<&'a str, String> {
    value[key].as_str().ok_or_else(|| format!("no `{key}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_ids_name_the_repository_and_the_issue_number() {
        assert_eq!(split_id("acme/web#12").unwrap(), ("acme/web", 12));
        assert_eq!(split_id("acme/web.js#3").unwrap(), ("acme/web.js", 3));
        for bad in [
            "12",
            "acme#12",
            "acme/web#0",
            "acme/web#x",
            "/web#1",
            "a/b/c#1",
            "acme/we b#1",
        ] {
            assert!(split_id(bad).is_err(), "{bad} was accepted");
        }
    }
}

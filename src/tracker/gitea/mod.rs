//! The Gitea (and Forgejo) adapter: statuses are labels (`status/ready` by default), a
//! closed issue is terminal, and a transition adds the new label by id, then deletes the
//! old one by id (never replacing the issue's whole label set). Label ids are read once
//! per listing. See `docs/trackers/gitea.md`.

mod pulls;
pub mod webhook;
mod wire;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{json, Value};

use self::wire::{more_pages, LabelIds, WireComment, WireIssue, WireLabel, WireUser};
use super::forge_core::{
    check_access, check_token, closes, core_tracker_methods, fmt_adapter, not_a, open_adapter,
    Dialect, ForgeCore,
};
use super::http::{adapter_options, encode, strip_query, ExchangeObserver, PageWalk};
use super::labels::{LabelMove, LabelScheme};
use super::{CheckReport, Comment, Listing, Ticket, Tracker, TrackerError};
use crate::config::{Config, TrackerConfig};

/// Items asked per page (Gitea's default `MAX_RESPONSE_ITEMS`).
const LIMIT: usize = 50;
/// Pages read per listing at most; more fails the listing.
const MAX_PAGES: usize = 200;

/// Gitea's names: issues and pulls by `number`, comments.
static GITEA: Dialect = Dialect {
    vendor: "Gitea",
    token_hint: "the token needs the `write:issue` and `read:repository` scopes \
                 (and `read:user` for its own login)",
    ticket_id: "a Gitea issue number",
    number_key: "number",
    url_key: "html_url",
    pulls: "pulls",
    draft_prefix: "WIP: ",
    comments: "comments",
    comment_noun: "comment",
    label_hint: "(the token needs write:issue)",
};

/// Which repository, where, and how statuses are labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiteaSettings {
    /// Instance URL (`https://gitea.example.com`), without `/api/v1`.
    pub url: String,
    /// `owner/name`.
    pub repo: String,
    /// Status and priority label prefixes.
    pub labels: LabelScheme,
    /// Statuses whose transition also closes the issue.
    pub close_on: Vec<String>,
}

impl GiteaSettings {
    /// The settings of a `kind: gitea` tracker config, `None` for other kinds.
    pub fn from_config(tracker: &TrackerConfig) -> Option<Self> {
        match tracker {
            TrackerConfig::Gitea {
                url,
                repo,
                status_label_prefix,
                priority_label_prefix,
                close_on,
                ..
            } => Some(GiteaSettings {
                url: url.clone(),
                repo: repo.clone(),
                labels: LabelScheme::new(status_label_prefix, priority_label_prefix),
                close_on: close_on.clone(),
            }),
            _ => None,
        }
    }
}

adapter_options! {
    /// How the adapter talks to Gitea; the defaults suit production.
    pub struct GiteaOptions {
        /// Sees every response (contract tests, diagnostics). Default none.
        pub observer: Option<ExchangeObserver> = None,
        /// The API under the instance URL. Default `/api/v1` (a contract mock serves `""`).
        pub api_path: String = "/api/v1".to_string(),
    }
}

/// A Gitea repository's issues as a sortie board.
pub struct GiteaTracker {
    settings: GiteaSettings,
    core: ForgeCore,
    /// The repository's labels as the last listing read them.
    label_ids: Mutex<Option<LabelIds>>,
}

impl std::fmt::Debug for GiteaTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_adapter(f, "GiteaTracker", &self.core.name)
    }
}

impl GiteaTracker {
    /// The tracker a `kind: gitea` config names, with the token read from `token_env`.
    pub fn open(config: &Config) -> Result<Self, TrackerError> {
        let doc = "docs/trackers/gitea.md";
        open_adapter(
            &config.tracker,
            "Gitea",
            doc,
            GiteaSettings::from_config,
            |s, token| Self::new(s, token, GiteaOptions::default()),
        )
        .unwrap_or_else(|| Err(not_a(config, "Gitea")))
    }

    /// A tracker for `settings`, authenticating with `token`.
    pub fn new(
        settings: GiteaSettings,
        token: String,
        options: GiteaOptions,
    ) -> Result<Self, TrackerError> {
        let base = format!("{}{}", settings.url.trim_end_matches('/'), options.api_path);
        let auth = ("authorization", format!("token {token}"));
        let (owner, name) = settings
            .repo
            .split_once('/')
            .unwrap_or((&settings.repo, ""));
        let project = format!("/repos/{}/{}", encode(owner), encode(name));
        let timing = (options.timeout, options.clock, options.observer);
        let name = format!("gitea:{}", settings.repo);
        Ok(GiteaTracker {
            core: ForgeCore::connect(&GITEA, name, &base, auth, project, timing)?,
            settings,
            label_ids: Mutex::new(None),
        })
    }

    async fn wire_issue(&self, id: &str) -> Result<WireIssue, TrackerError> {
        self.core.client.get_json(&self.core.issue_path(id)?).await
    }

    /// Every item of a page/limit listing; `first` has its query but no `page`. The
    /// page cap or a failing page fails the whole listing ([`PageWalk`]).
    async fn all_pages(&self, first: &str) -> Result<Vec<Value>, TrackerError> {
        let mut items: Vec<Value> = Vec::new();
        let mut walk = PageWalk::new(format!("Gitea listing {}", strip_query(first)), MAX_PAGES);
        let sep = if first.contains('?') { '&' } else { '?' };
        for page in 1.. {
            let url = format!("{first}{sep}page={page}&limit={LIMIT}");
            walk.visit(&url)?;
            let reply = self.core.client.send(Method::GET, &url, None).await?;
            let got: Vec<Value> = reply.json("GET a Gitea listing")?;
            let n = got.len();
            items.extend(got);
            let total = reply
                .header("x-total-count")
                .and_then(|t| t.trim().parse().ok());
            let next = reply
                .header("link")
                .and_then(super::http::next_link)
                .is_some();
            if !more_pages(n, items.len(), LIMIT, total, next) {
                break;
            }
        }
        Ok(items)
    }

    /// Read the repository's labels (one paginated request) and keep them for this tick.
    async fn refresh_labels(&self) -> Result<LabelIds, TrackerError> {
        let items = self
            .all_pages(&format!("{}/labels", self.core.project))
            .await?;
        let labels: Vec<WireLabel> = items
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect();
        let ids = LabelIds::new(labels);
        *super::unpoisoned(&self.label_ids) = Some(ids.clone());
        Ok(ids)
    }

    /// The id of label `name`, from this tick's label read, reading the labels again
    /// once when it is not known (created since).
    async fn label_id(&self, name: &str) -> Result<i64, TrackerError> {
        let cached = super::unpoisoned(&self.label_ids)
            .as_ref()
            .and_then(|ids| ids.get(name).map(|(id, _)| *id));
        if let Some(id) = cached {
            return Ok(id);
        }
        match self.refresh_labels().await?.get(name) {
            Some((id, _)) => Ok(*id),
            None => Err(TrackerError::Invalid(format!(
                "label {name} does not exist on {}; create it, or run `sortie tracker check \
                 --create-missing-labels`",
                self.settings.repo
            ))),
        }
    }

    /// `POST .../issues/{n}/labels` with one label id: adds it, keeps every other label.
    pub async fn add_label_id(&self, id: &str, label_id: i64) -> Result<(), TrackerError> {
        let path = format!("{}/labels", self.core.issue_path(id)?);
        let body = json!({ "labels": [label_id] });
        self.core
            .client
            .send(Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }

    /// `DELETE .../issues/{n}/labels/{id}`; a label already gone is the goal reached.
    pub async fn delete_label_id(&self, id: &str, label_id: i64) -> Result<(), TrackerError> {
        let url = format!("{}/labels/{label_id}", self.core.issue_path(id)?);
        match self.core.client.send(Method::DELETE, &url, None).await {
            Ok(_) | Err(TrackerError::NotFound(_)) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// `PATCH .../issues/{n}` with `state: closed`.
    pub async fn close_issue(&self, id: &str) -> Result<(), TrackerError> {
        let body = json!({ "state": "closed" });
        self.core
            .client
            .send(Method::PATCH, &self.core.issue_path(id)?, Some(&body))
            .await
            .map(drop)
    }
}

#[async_trait]
impl Tracker for GiteaTracker {
    core_tracker_methods!();

    async fn identity(&self) -> Result<String, TrackerError> {
        self.core.identity(|user: WireUser| user.login).await
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let mut listing = Listing::default();
        if statuses.is_empty() {
            return Ok(listing);
        }
        // Once per tick: the ids transitions need, and which status labels exist.
        let ids = self.refresh_labels().await?;
        let mut issues: BTreeMap<u64, WireIssue> = BTreeMap::new();
        for status in statuses {
            let label = self.settings.labels.status_label(status);
            // Gitea drops unknown names from `labels=`, and a filter left empty matches
            // every issue: a status whose label does not exist has no tickets.
            let Some((_, spelled)) = ids.get(&label) else {
                listing.warnings.push(format!(
                    "label {label} does not exist on {}; status {status} has no tickets \
                     (create it, or run `sortie tracker check --create-missing-labels`)",
                    self.settings.repo
                ));
                continue;
            };
            if spelled.contains(',') {
                listing.warnings.push(format!(
                    "status {status:?} contains a comma and cannot be listed on Gitea"
                ));
                continue;
            }
            let first = format!(
                "{}/issues?state=open&type=issues&labels={}",
                self.core.project,
                encode(spelled)
            );
            let items = self.all_pages(&first).await?;
            self.core.collect(
                items,
                |i: &WireIssue| i.head.number,
                &mut issues,
                &mut listing.warnings,
            );
        }
        for issue in issues.values() {
            issue.classify(&self.settings.labels).list_into(
                &mut listing,
                statuses,
                issue.head.number,
            );
        }
        Ok(listing)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let issue = self.wire_issue(id).await?;
        issue
            .classify(&self.settings.labels)
            .into_ticket(id, issue.head.number)
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let path = format!("{}/comments", self.core.issue_path(id)?);
        let items: Vec<Value> = self.core.client.get_json(&path).await?;
        Ok(self.core.comments(id, items, |_: &WireComment| true))
    }

    async fn post_comment(&self, id: &str, body: &str, _: &str) -> Result<Comment, TrackerError> {
        self.core
            .post_comment::<WireComment>(&self.core.issue_path(id)?, id, body)
            .await
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        // Re-read first: a label a person changed meanwhile must not be clobbered.
        let issue = self.wire_issue(id).await?;
        let close = closes(&self.settings.close_on, to) && issue.head.state != "closed";
        match self
            .settings
            .labels
            .plan_move(id, issue.label_names(), from, to)?
        {
            LabelMove::AlreadyThere => {}
            LabelMove::Write { add, remove } => {
                if let Some(add) = add {
                    let label_id = self.label_id(&add).await?;
                    self.add_label_id(id, label_id).await?;
                }
                for name in remove {
                    if let Some(label_id) = issue.label_id(&name) {
                        self.delete_label_id(id, label_id).await?;
                    }
                }
            }
        }
        if close {
            self.close_issue(id).await?;
        }
        Ok(())
    }

    async fn check(&self, statuses: &[String], create: bool) -> Result<CheckReport, TrackerError> {
        let mut report = CheckReport::default();
        if !check_token(&mut report, self.identity().await)? {
            return Ok(report);
        }
        let Some(ids) = check_access(
            &mut report,
            "repository access",
            self.refresh_labels().await,
            |ids| format!("{} label(s) on {}", ids.len(), self.settings.repo),
            "check `repo`, and that the token can see it",
        )?
        else {
            return Ok(report);
        };
        let has = |label: &str| ids.get(label).is_some();
        self.core
            .check_labels(report, &self.settings.labels, statuses, create, has)
            .await
    }
}

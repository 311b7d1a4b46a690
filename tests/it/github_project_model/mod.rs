//! A stateful model of a GitHub Project ("Projects v2") answering GraphQL at `/graphql`
//! on the GitHub REST model's server: one GitHub, whose issues (in `acme/widgets`,
//! served over REST with their comments and dependencies by [`GithubModel`]) are the
//! cards of project `acme/7`, alongside cards of another repository (`acme/api`, seen
//! over GraphQL only), pull requests and draft items. Every request is validated against
//! GitHub's published schema (`tests/fixtures/github_project/github.schema.graphql`, from
//! `@octokit/graphql-schema`) and refused when invalid, as GitHub refuses it. Points count
//! down per query; rate limits (primary and secondary) and server errors are injected.
#![allow(dead_code)]

mod resolve;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use apollo_compiler::validation::Valid;
use apollo_compiler::Schema;
use serde_json::Value;
use wiremock::matchers::{method, path};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

use crate::github_model::SharedIssues;
pub use crate::github_model::{GithubModel, LOGIN, REPO, TOKEN};
use crate::model_plumbing::NextCursor;

/// The project's owner and number.
pub const OWNER: &str = "acme";
pub const NUMBER: u64 = 7;
/// A second repository whose issues are on the board (GraphQL only).
pub const OTHER_REPO: &str = "acme/api";

/// GitHub's schema, parsed and validated once per test binary.
pub fn schema() -> &'static Valid<Schema> {
    static SCHEMA: OnceLock<Valid<Schema>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| crate::common::graphql::load_schema("github_project/github.schema.graphql"))
}

/// What a card is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// An issue of `acme/widgets`, by number (its data lives in the REST model).
    Issue(u64),
    /// An issue of `acme/api`, by number.
    Other(u64),
    /// A pull request of `acme/widgets`.
    Pull(u64),
    /// A draft item, by title.
    Draft(String),
}

/// One card.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    pub content: Content,
    /// The id of its status option; `None` when the card has no status.
    pub status: Option<String>,
    pub archived: bool,
}

/// An issue of the other repository.
#[derive(Debug, Clone)]
pub struct OtherIssue {
    pub title: String,
    pub open: bool,
}

/// A failure to inject into the next GraphQL answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The hourly points are spent: HTTP 200 with a `RATE_LIMITED` error.
    Primary,
    /// A secondary limit: HTTP 403 with `Retry-After` these seconds.
    Secondary(u64),
    /// HTTP 502.
    Server,
}

/// What a person does to the project, run by the model at a chosen moment.
pub(crate) type PersonActs = Box<dyn FnOnce(&mut Project) + Send>;

pub(crate) struct Project {
    pub issues: SharedIssues,
    pub id: String,
    pub title: String,
    pub field_id: String,
    pub field_name: String,
    /// (id, name) in the board's order.
    pub options: Vec<(String, String)>,
    pub next_id: u64,
    pub items: Vec<Item>,
    pub other: BTreeMap<u64, OtherIssue>,
    pub remaining: u64,
    pub reset_at: chrono::DateTime<chrono::Utc>,
    pub faults: VecDeque<Fault>,
    /// Operation names answered, in order.
    pub log: Vec<String>,
    /// Requests refused as invalid, with the validator's reason.
    pub refused: Vec<String>,
    /// Run before the answer to the n-th next `SortieProjectIssue` (0 = the next).
    pub before_issue_read: Vec<(usize, PersonActs)>,
    /// The `pageInfo` the project's items serve.
    pub next_cursor: NextCursor,
}

impl Project {
    pub fn option_id(&self, name: &str) -> Option<String> {
        self.options
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map(|(id, _)| id.clone())
    }

    pub fn option_name(&self, id: &str) -> Option<String> {
        self.options
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, n)| n.clone())
    }

    fn fresh_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}_{}", self.next_id)
    }
}

/// The model: the REST model of `acme/widgets` and the project over GraphQL.
pub struct ProjectModel {
    pub github: GithubModel,
    state: Arc<Mutex<Project>>,
}

impl ProjectModel {
    /// A project with a `Status` field whose options are `statuses`.
    pub async fn start(statuses: &[&str]) -> Self {
        let github = GithubModel::start().await;
        let mut project = Project {
            issues: github.shared_issues(),
            id: "PVT_kwDOproject7".to_string(),
            title: "Delivery".to_string(),
            field_id: "PVTSSF_status".to_string(),
            field_name: "Status".to_string(),
            options: Vec::new(),
            next_id: 0,
            items: Vec::new(),
            other: BTreeMap::new(),
            remaining: 5000,
            reset_at: chrono::Utc::now() + chrono::Duration::hours(1),
            faults: VecDeque::new(),
            log: Vec::new(),
            refused: Vec::new(),
            before_issue_read: Vec::new(),
            next_cursor: NextCursor::Honest,
        };
        for name in statuses {
            let id = project.fresh_id("opt");
            project.options.push((id, name.to_string()));
        }
        let state = Arc::new(Mutex::new(project));
        Mock::given(method("POST"))
            .and(path("/graphql"))
            .respond_with(Responder(state.clone()))
            .with_priority(1)
            .mount(github.server())
            .await;
        ProjectModel { github, state }
    }

    /// The GraphQL endpoint to configure (`tracker.api_url`); the REST base is beside it.
    pub fn api_url(&self) -> String {
        format!("{}/graphql", self.github.api_url())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Project) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    fn add_item(&self, content: Content, status: Option<&str>) -> String {
        self.with(|p| {
            let status = status.map(|s| p.option_id(s).unwrap_or_else(|| panic!("no option {s}")));
            let id = p.fresh_id("PVTI");
            p.items.push(Item {
                id: id.clone(),
                content,
                status,
                archived: false,
            });
            id
        })
    }

    /// A person files an issue in `acme/widgets` and puts its card in `status`; its number.
    pub fn add_issue(&self, title: &str, status: &str) -> u64 {
        let number = self.github.add_issue(title, &[]);
        self.add_item(Content::Issue(number), Some(status));
        number
    }

    /// An issue of `acme/widgets` whose card has no status.
    pub fn add_issue_without_status(&self, title: &str) -> u64 {
        let number = self.github.add_issue(title, &[]);
        self.add_item(Content::Issue(number), None);
        number
    }

    /// An issue of `acme/api` on the board in `status`; its number.
    pub fn add_other_issue(&self, title: &str, status: &str) -> u64 {
        let number = self.with(|p| {
            let n = p.other.len() as u64 + 1;
            p.other.insert(
                n,
                OtherIssue {
                    title: title.to_string(),
                    open: true,
                },
            );
            n
        });
        self.add_item(Content::Other(number), Some(status));
        number
    }

    /// A pull request of `acme/widgets` on the board in `status`.
    pub fn add_pull_request(&self, title: &str, status: &str) -> u64 {
        let number = self.github.add_pull_request(title, &[]);
        self.add_item(Content::Pull(number), Some(status));
        number
    }

    /// A draft item in `status`.
    pub fn add_draft(&self, title: &str, status: &str) {
        self.add_item(Content::Draft(title.to_string()), Some(status));
    }

    /// A person drags issue `number`'s card to `status`.
    pub fn move_card(&self, number: u64, status: &str) {
        self.with(|p| move_card(p, number, status));
    }

    /// Issue `number`'s column, by option name (`None`: no status).
    pub fn status_of(&self, number: u64) -> Option<String> {
        self.with(|p| {
            let item = p
                .items
                .iter()
                .find(|i| i.content == Content::Issue(number))?;
            p.option_name(item.status.as_deref()?)
        })
    }

    /// A person archives issue `number`'s card.
    pub fn archive(&self, number: u64) {
        self.with(|p| {
            for item in p
                .items
                .iter_mut()
                .filter(|i| i.content == Content::Issue(number))
            {
                item.archived = true;
            }
        });
    }

    /// A person renames an option (its id stays: cards keep it).
    pub fn rename_option(&self, from: &str, to: &str) {
        self.with(|p| {
            let option = p
                .options
                .iter_mut()
                .find(|(_, n)| n == from)
                .expect("option");
            option.1 = to.to_string();
        });
    }

    /// A person deletes an option: GitHub clears it from every card that had it.
    pub fn delete_option(&self, name: &str) {
        self.with(|p| {
            let id = p.option_id(name).expect("option");
            p.options.retain(|(i, _)| *i != id);
            for item in &mut p.items {
                if item.status.as_deref() == Some(id.as_str()) {
                    item.status = None;
                }
            }
        });
    }

    /// Run `f` on the project right before the answer to the `skip + 1`-th next
    /// re-read of one issue (a person acting just before sortie writes back).
    pub fn before_issue_read(&self, skip: usize, f: impl FnOnce(&mut Project) + Send + 'static) {
        self.with(|p| p.before_issue_read.push((skip, Box::new(f))));
    }

    /// Make the next answers fail, one per fault.
    pub fn fail(&self, faults: &[Fault]) {
        self.with(|p| p.faults.extend(faults.iter().copied()));
    }

    /// Serve the items' `pageInfo` as `next` says from now on.
    pub fn set_next_cursor(&self, next: NextCursor) {
        self.with(|p| p.next_cursor = next);
    }

    /// Points left in the hour.
    pub fn set_remaining(&self, points: u64) {
        self.with(|p| p.remaining = points);
    }

    pub fn remaining(&self) -> u64 {
        self.with(|p| p.remaining)
    }

    /// The GraphQL operations answered, in order.
    pub fn log(&self) -> Vec<String> {
        self.with(|p| p.log.clone())
    }

    pub fn clear_log(&self) {
        self.with(|p| p.log.clear());
    }

    /// The requests refused as invalid against GitHub's schema.
    pub fn refused(&self) -> Vec<String> {
        self.with(|p| p.refused.clone())
    }

    /// Pages of items: the model serves at most `first` per page, as GitHub does; this
    /// many cards make several pages.
    pub fn items(&self) -> Vec<Item> {
        self.with(|p| p.items.clone())
    }
}

pub(crate) fn move_card(p: &mut Project, number: u64, status: &str) {
    let id = p
        .option_id(status)
        .unwrap_or_else(|| panic!("no option {status}"));
    let item = p
        .items
        .iter_mut()
        .find(|i| i.content == Content::Issue(number))
        .expect("a card for the issue");
    item.status = Some(id);
}

struct Responder(Arc<Mutex<Project>>);

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let auth = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !auth.eq_ignore_ascii_case(&format!("bearer {TOKEN}")) {
            return ResponseTemplate::new(401)
                .set_body_json(serde_json::json!({"message": "Bad credentials"}));
        }
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                return ResponseTemplate::new(400).set_body_json(
                    serde_json::json!({"message": format!("Problems parsing JSON: {e}")}),
                )
            }
        };
        let mut project = self.0.lock().unwrap();
        let checked = match crate::common::graphql::check(schema(), &body) {
            Ok(c) => c,
            Err(reason) => {
                project.refused.push(reason.clone());
                return ResponseTemplate::new(200)
                    .set_body_json(serde_json::json!({"errors": [{"message": reason}]}));
            }
        };
        if let Some(fault) = project.faults.pop_front() {
            return match fault {
                Fault::Primary => {
                    project.remaining = 0;
                    ResponseTemplate::new(200)
                        .insert_header("x-ratelimit-remaining", "0")
                        .insert_header("x-ratelimit-reset", project.reset_at.timestamp().to_string())
                        .set_body_json(serde_json::json!({"errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded for user ID 1."}]}))
                }
                Fault::Secondary(secs) => ResponseTemplate::new(403)
                    .insert_header("retry-after", secs.to_string())
                    .set_body_json(
                        serde_json::json!({"message": "You have exceeded a secondary rate limit."}),
                    ),
                Fault::Server => {
                    ResponseTemplate::new(502).set_body_string("<html>bad gateway</html>")
                }
            };
        }
        let name = checked.operation_name.clone().unwrap_or_default();
        if name == "SortieProjectIssue" {
            let mut due = Vec::new();
            let hooks = std::mem::take(&mut project.before_issue_read);
            for (skip, f) in hooks {
                if skip == 0 {
                    due.push(f);
                } else {
                    project.before_issue_read.push((skip - 1, f));
                }
            }
            for f in due {
                f(&mut project);
            }
        }
        project.log.push(name);
        if project.remaining == 0 {
            return ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"errors": [{"type": "RATE_LIMITED", "message": "API rate limit exceeded"}]}));
        }
        project.remaining -= 1;
        let answer = resolve::execute(&mut project, &checked);
        ResponseTemplate::new(200)
            .insert_header("x-ratelimit-remaining", project.remaining.to_string())
            .insert_header("x-ratelimit-resource", "graphql")
            .set_body_json(answer)
    }
}

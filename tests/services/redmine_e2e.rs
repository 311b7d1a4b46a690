//! The Redmine adapter and whole pipelines against a real Redmine server.
//!
//! Needs the server `scripts/services/redmine.sh` starts (`./scripts/test` does it):
//! it reads `SORTIE_TEST_REDMINE_URL` and `SORTIE_TEST_REDMINE_API_KEY` (an admin key)
//! and FAILS when they are missing or the server does not answer. Every test creates
//! its own project, so tests run in parallel and never see each other's issues.
//!
//! The server's workflow (scripts/services/redmine/setup.rb) allows every transition
//! between the e2e statuses except `Ready for design` -> `Code review`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use sortie::block::{idempotency_key, parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::report::TickReport;
use sortie::pipeline::{Faults, Pipeline, SystemClock, TickOptions};
use sortie::tracker::redmine::RedmineTracker;
use sortie::tracker::{Tracker, TrackerError};

const KEY_ENV: &str = "SORTIE_TEST_REDMINE_API_KEY";
const HOW_TO_START: &str = "these tests need a real Redmine: run `./scripts/test --test services redmine_e2e`, \
or start one by hand with `export SORTIE_TEST_SERVICES=$(mktemp -d); bash scripts/services/redmine.sh; \
set -a; . $SORTIE_TEST_SERVICES/redmine.env; set +a` (see scripts/services/README.md)";

/// The test server, reached with the admin key.
pub(crate) struct Server {
    url: String,
    key: String,
    http: reqwest::Client,
}

impl Server {
    fn from_env() -> Server {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| panic!("{name} is not set: {HOW_TO_START}"))
        };
        Server {
            url: var("SORTIE_TEST_REDMINE_URL"),
            key: var(KEY_ENV),
            http: reqwest::Client::new(),
        }
    }

    /// A REST call as the admin, or as `login` through `X-Redmine-Switch-User`.
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        as_user: Option<&str>,
    ) -> Value {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .header("X-Redmine-API-Key", &self.key);
        if let Some(login) = as_user {
            req = req.header("X-Redmine-Switch-User", login);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap_or_else(|e| {
            panic!(
                "Redmine at {} does not answer ({e}): {HOW_TO_START}",
                self.url
            )
        });
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{method} {path} -> {status}: {text}");
        if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap()
        }
    }

    async fn status_id(&self, name: &str) -> u64 {
        let list = self.call("GET", "/issue_statuses.json", None, None).await;
        list["issue_statuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| {
                panic!("no status {name:?}: was scripts/services/redmine/setup.rb run?")
            })["id"]
            .as_u64()
            .unwrap()
    }
}

/// A fresh project with a person (Jane, a Manager) besides the admin.
pub(crate) struct Project {
    server: Server,
    identifier: String,
    pub(crate) jane: String,
}

impl Project {
    pub(crate) async fn new() -> Project {
        let server = Server::from_env();
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let identifier = format!("sortie-e2e-{suffix}");
        let project = server
            .call(
                "POST",
                "/projects.json",
                Some(json!({"project": {"name": identifier, "identifier": identifier}})),
                None,
            )
            .await;
        let jane = format!("jane-{suffix}");
        let user = server
            .call(
                "POST",
                "/users.json",
                Some(
                    json!({"user": {"login": jane, "firstname": "Jane", "lastname": "Doe",
                    "mail": format!("{jane}@example.net"), "generate_password": true}}),
                ),
                None,
            )
            .await;
        let roles = server.call("GET", "/roles.json", None, None).await;
        let manager = roles["roles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "Manager")
            .expect("Redmine's default Manager role")["id"]
            .clone();
        server
            .call(
                "POST",
                &format!("/projects/{}/memberships.json", project["project"]["id"]),
                Some(json!({"membership": {"user_id": user["user"]["id"], "role_ids": [manager]}})),
                None,
            )
            .await;
        Project {
            server,
            identifier,
            jane,
        }
    }

    fn tracker_name(&self) -> String {
        format!("redmine:{}", self.identifier)
    }

    pub(crate) fn tracker(&self) -> RedmineTracker {
        RedmineTracker::from_env(&self.server.url, &self.identifier, KEY_ENV).expect("tracker")
    }

    /// Create an issue; returns its id.
    pub(crate) async fn issue(&self, subject: &str, status: &str, priority: &str) -> String {
        let status_id = self.server.status_id(status).await;
        let priorities = self
            .server
            .call("GET", "/enumerations/issue_priorities.json", None, None)
            .await;
        let priority_id = priorities["issue_priorities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == priority)
            .unwrap()["id"]
            .clone();
        let issue = self
            .server
            .call(
                "POST",
                "/issues.json",
                Some(
                    json!({"issue": {"project_id": self.identifier, "subject": subject,
                    "status_id": status_id, "priority_id": priority_id}}),
                ),
                None,
            )
            .await;
        assert_eq!(issue["issue"]["status"]["name"], status, "{issue}");
        issue["issue"]["id"].to_string()
    }

    /// Jane moves an issue, as a person would in the web UI.
    pub(crate) async fn jane_moves(&self, id: &str, status: &str) {
        let status_id = self.server.status_id(status).await;
        self.server
            .call(
                "PUT",
                &format!("/issues/{id}.json"),
                Some(json!({"issue": {"status_id": status_id}})),
                Some(&self.jane),
            )
            .await;
    }

    pub(crate) async fn jane_notes(&self, id: &str, notes: &str) {
        self.server
            .call(
                "PUT",
                &format!("/issues/{id}.json"),
                Some(json!({"issue": {"notes": notes}})),
                Some(&self.jane),
            )
            .await;
    }

    /// A three-stage pipeline on the e2e statuses, run by `agent` (argv) with `env`.
    fn config(&self, dir: &Path, agent: &[&str], env: &[(&str, String)]) -> Config {
        // `$` starts an environment reference in the config; `$$` is a literal `$`.
        let argv: Vec<String> = agent
            .iter()
            .map(|a| format!("{:?}", a.replace('$', "$$")))
            .collect();
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
        let text = format!(
            r#"
tracker: {{kind: redmine, url: "{url}", project: {project}, api_key_env: {KEY_ENV}}}
state_root: state
roles_dir: {roles}
terminal_states: [Closed, Rejected]
concurrency: {{max_in_flight: 1, per_role_max_in_flight: 1}}
agent:
  command: [{argv}]
  env: {{{env}}}
  timeout_seconds: 60
retry: {{max_attempts: 1}}
pipeline_stages:
  - role: architect
    claim_status: Ready for design
    in_progress_status: Designing
    success_status: Design approved
    failure_status: Design blocked
  - role: backend
    claim_status: Design approved
    success_status: Code review
    failure_status: Blocked
    requires_prior_role: architect
  - role: qa
    claim_status: Code review
    success_status: Closed
    failure_status: QA failed
    requires_prior_role: backend
"#,
            url = self.server.url,
            project = self.identifier,
            roles = repo().join("roles").display(),
            argv = argv.join(", "),
            env = env.join(", "),
        );
        Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid e2e config")
    }

    async fn pipeline(&self, dir: &Path, agent: &[&str], env: &[(&str, String)]) -> Pipeline {
        let cfg = self.config(dir, agent, env);
        let tracker = sortie::tracker::open(&cfg).expect("open the Redmine tracker");
        assert_eq!(tracker.name(), self.tracker_name());
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
        Pipeline::with_clock(
            cfg,
            tracker,
            ledger,
            Arc::new(SystemClock::default()),
            Faults::none(),
        )
        .await
        .expect("pipeline")
    }

    /// Every valid outcome block in the issue's journal, oldest first.
    async fn blocks(&self, id: &str) -> Vec<OutcomeBlock> {
        self.tracker()
            .comments(id)
            .await
            .unwrap()
            .iter()
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }

    async fn status(&self, id: &str) -> String {
        self.tracker().get(id).await.unwrap().status
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn tick(p: &Pipeline) -> TickReport {
    p.tick(TickOptions::default()).await.expect("tick")
}

/// An agent that, in the middle of its run, has Jane move its ticket to `$MOVE_TO`
/// through the REST API, then succeeds: the write-back finds the person's status.
fn moving_agent(
    project: &Project,
    to_status_id: u64,
) -> (Vec<&'static str>, Vec<(&'static str, String)>) {
    let script = r#"curl -fsS -X PUT -H "X-Redmine-API-Key: $RM_KEY" -H "X-Redmine-Switch-User: $RM_AS" \
  -H 'Content-Type: application/json' -d "{\"issue\":{\"status_id\":$MOVE_TO}}" \
  "$RM_URL/issues/$SORTIE_TICKET_ID.json" && echo "moved; work done""#;
    let env = vec![
        ("RM_URL", project.server.url.clone()),
        ("RM_KEY", project.server.key.clone()),
        ("RM_AS", project.jane.clone()),
        ("MOVE_TO", to_status_id.to_string()),
    ];
    (vec!["sh", "-c", script], env)
}

#[tokio::test]
async fn tickets_move_through_all_three_stages_with_their_blocks_in_the_journal() {
    let project = Project::new().await;
    let dir = tempfile::tempdir().unwrap();
    let low = project
        .issue("Export as CSV", "Ready for design", "Low")
        .await;
    let urgent = project
        .issue("Fix login", "Ready for design", "Urgent")
        .await;
    let agent = repo().join("scripts/demo-agent");
    let p = project
        .pipeline(dir.path(), &[agent.to_str().unwrap()], &[])
        .await;

    // One architect at a time: the Urgent issue goes first although it is newer.
    let first = tick(&p).await;
    assert_eq!(first.runs.len(), 1, "{}", first.to_text());
    assert_eq!(first.runs[0].ticket, urgent, "{}", first.to_text());
    assert_eq!(project.status(&urgent).await, "Design approved");
    assert_eq!(project.status(&low).await, "Ready for design");

    for _ in 0..8 {
        if tick(&p).await.runs.is_empty() {
            break;
        }
    }
    let stages = [
        ("architect", "Ready for design", "Design approved"),
        ("backend", "Design approved", "Code review"),
        ("qa", "Code review", "Closed"),
    ];
    for id in [&urgent, &low] {
        assert_eq!(project.status(id).await, "Closed");
        assert!(project.tracker().get(id).await.unwrap().closed);
        let blocks = project.blocks(id).await;
        assert_eq!(blocks.len(), 3, "{blocks:?}");
        for (block, (role, stage, to)) in blocks.iter().zip(stages) {
            let OutcomeBlock::Success(s) = block else {
                panic!("expected success blocks: {blocks:?}")
            };
            assert_eq!((s.role.as_str(), s.to_status.as_str()), (role, to));
            assert_eq!(s.stage_attempt, 1);
            assert_eq!(
                s.idempotency_key,
                idempotency_key(&project.tracker_name(), id, role, stage, 1)
            );
        }
    }
    // Every block was written with the API key, so every author is sortie's identity.
    let me = project.tracker().identity().await.unwrap();
    let comments = project.tracker().comments(&urgent).await.unwrap();
    assert!(comments.iter().all(|c| c.author == me), "{comments:?}");
}

#[tokio::test]
async fn a_person_moving_the_issue_mid_run_keeps_their_status_and_the_write_back_is_dropped() {
    let project = Project::new().await;
    let dir = tempfile::tempdir().unwrap();
    let id = project
        .issue("Needs rethinking", "Ready for design", "Normal")
        .await;
    let blocked = project.server.status_id("Blocked").await;
    let (agent, env) = moving_agent(&project, blocked);
    let p = project.pipeline(dir.path(), &agent, &env).await;

    let report = tick(&p).await;
    assert_eq!(report.runs.len(), 1, "{}", report.to_text());
    let writeback = report.runs[0].writeback.clone().unwrap_or_default();
    assert!(
        writeback.contains("dropped") && writeback.contains("Blocked"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        project.status(&id).await,
        "Blocked",
        "the person's status stays"
    );
    assert!(
        project.blocks(&id).await.is_empty(),
        "no block after a person's move"
    );
    // The next tick leaves it alone: Blocked is no stage's status.
    assert!(tick(&p).await.runs.is_empty());
    assert_eq!(project.status(&id).await, "Blocked");
}

#[tokio::test]
async fn closing_the_issue_mid_run_drops_the_write_back() {
    let project = Project::new().await;
    let dir = tempfile::tempdir().unwrap();
    let id = project
        .issue("Duplicate", "Ready for design", "Normal")
        .await;
    let rejected = project.server.status_id("Rejected").await;
    let (agent, env) = moving_agent(&project, rejected);
    let p = project.pipeline(dir.path(), &agent, &env).await;

    let report = tick(&p).await;
    let writeback = report.runs[0].writeback.clone().unwrap_or_default();
    assert!(
        writeback.contains("dropped") && writeback.contains("terminal"),
        "{}",
        report.to_text()
    );
    let ticket = project.tracker().get(&id).await.unwrap();
    assert_eq!((ticket.status.as_str(), ticket.closed), ("Rejected", true));
    assert!(project.blocks(&id).await.is_empty());
}

#[tokio::test]
async fn a_transition_the_workflow_forbids_is_reported_not_believed() {
    let project = Project::new().await;
    let id = project
        .issue("Skip ahead", "Ready for design", "Normal")
        .await;
    let tracker = project.tracker();

    let err = tracker
        .transition(&id, "Ready for design", "Code review")
        .await
        .unwrap_err();
    match &err {
        TrackerError::TransitionRefused {
            id: tid,
            from,
            to,
            current,
            ..
        } => {
            assert_eq!(
                (tid, from.as_str(), to.as_str()),
                (&id, "Ready for design", "Code review")
            );
            assert_eq!(current, "Ready for design");
        }
        other => panic!("expected TransitionRefused, got {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("transition refused by the Redmine workflow"),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(project.status(&id).await, "Ready for design");

    // Allowed transitions work; asking for the status it has is a no-op; a ticket in
    // neither status is a conflict and nothing is written.
    tracker
        .transition(&id, "Ready for design", "Designing")
        .await
        .unwrap();
    tracker
        .transition(&id, "Ready for design", "Designing")
        .await
        .unwrap();
    assert_eq!(project.status(&id).await, "Designing");
    let err = tracker
        .transition(&id, "Code review", "Closed")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TrackerError::Conflict { current, .. } if current == "Designing"),
        "{err:?}"
    );
    assert_eq!(project.status(&id).await, "Designing");
}

#[tokio::test]
async fn listing_pages_through_every_issue_of_the_project_in_the_asked_statuses() {
    let project = Project::new().await;
    let mut expected = Vec::new();
    for n in 0..3 {
        expected.push(
            project
                .issue(&format!("r{n}"), "Ready for design", "Normal")
                .await,
        );
        expected.push(project.issue(&format!("c{n}"), "Code review", "High").await);
    }
    let elsewhere = project.issue("not asked", "Blocked", "Normal").await;
    let tracker = project.tracker().with_page_size(2);

    let statuses = vec!["Ready for design".to_string(), "Code review".to_string()];
    let listing = tracker.list(&statuses).await.unwrap();
    let mut ids: Vec<String> = listing.tickets.iter().map(|t| t.id.clone()).collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected);
    assert!(!ids.contains(&elsewhere));
    assert!(listing.warnings.is_empty(), "{:?}", listing.warnings);
    let t = listing.tickets.iter().find(|t| t.title == "c1").unwrap();
    assert_eq!(t.status, "Code review");
    assert_eq!(
        t.url.as_deref(),
        Some(format!("{}/issues/{}", project.server.url, t.id).as_str())
    );
    let normal = listing.tickets.iter().find(|t| t.title == "r1").unwrap();
    assert!(t.priority < normal.priority, "High sorts before Normal");

    // Another project's issue is not on this board.
    let other = Project::new().await;
    let foreign = other.issue("foreign", "Ready for design", "Normal").await;
    assert!(matches!(
        tracker.get(&foreign).await,
        Err(TrackerError::NotFound(_))
    ));

    let err = tracker
        .list(&["Ready for design".into(), "Reddy".into()])
        .await
        .unwrap_err();
    let TrackerError::Invalid(msg) = err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains(r#"no issue status "Reddy""#) && msg.contains(r#""Code review""#),
        "{msg}"
    );
}

#[tokio::test]
async fn comments_are_notes_and_sortie_recognizes_its_own() {
    let project = Project::new().await;
    let id = project.issue("Talk", "Ready for design", "Normal").await;
    let tracker = project.tracker();
    let posted = tracker
        .post_comment(&id, "first line\n\nsecond line\n", "k1")
        .await
        .unwrap();
    project.jane_moves(&id, "Designing").await; // a status change without a note
    project.jane_notes(&id, "Looks fine to me").await;

    let comments = tracker.comments(&id).await.unwrap();
    let view: Vec<(&str, &str)> = comments
        .iter()
        .map(|c| (c.author.as_str(), c.body.as_str()))
        .collect();
    let me = tracker.identity().await.unwrap();
    assert_eq!(
        view,
        vec![
            (me.as_str(), "first line\n\nsecond line\n"),
            ("Jane Doe", "Looks fine to me")
        ]
    );
    assert_eq!(comments[0].id, posted.id);

    // With Redmine's default display format the identity is the name the journal shows.
    let raw = project
        .server
        .call(
            "GET",
            &format!("/issues/{id}.json?include=journals"),
            None,
            None,
        )
        .await;
    assert_eq!(raw["issue"]["journals"][0]["user"]["name"], me.as_str());
}

#[tokio::test]
async fn tracker_check_names_a_missing_status_and_a_rejected_key() {
    let project = Project::new().await;
    let statuses = vec![
        "Ready for design".to_string(),
        "Desgin approved".to_string(),
    ];
    let report = project.tracker().check(&statuses, false).await.unwrap();
    let line = |what: &str| {
        report
            .checks
            .iter()
            .find(|c| c.what == what)
            .unwrap_or_else(|| panic!("{report:?}"))
    };
    assert!(line("api key").ok && line("project").ok && line("status Ready for design").ok);
    let missing = line("status Desgin approved");
    assert!(!missing.ok);
    assert!(
        missing.detail.contains(r#""Design approved""#),
        "{}",
        missing.detail
    );
    assert!(!report.all_ok());

    let bad = RedmineTracker::new(
        &project.server.url,
        &project.identifier,
        "0".repeat(40),
        "RM_KEY",
    )
    .unwrap();
    let report = bad.check(&statuses, false).await.unwrap();
    assert!(
        !report.checks[0].ok && report.checks[0].detail.contains("$RM_KEY"),
        "{report:?}"
    );
    assert!(matches!(
        bad.identity().await,
        Err(TrackerError::Unauthorized(_))
    ));
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_retryable() {
    // Port 9 (discard) is closed on loopback; no Redmine needed for this one.
    let tracker = RedmineTracker::new("http://127.0.0.1:9", "demo", "k".into(), "RM_KEY").unwrap();
    let err = tracker.list(&["New".to_string()]).await.unwrap_err();
    assert!(
        matches!(err, TrackerError::Unavailable(_)) && err.is_retryable(),
        "{err:?}"
    );
}

#[test]
fn opening_the_tracker_without_its_key_variable_names_the_variable() {
    let var = "SORTIE_TEST_REDMINE_KEY_NEVER_SET";
    let text = format!(
        "tracker: {{kind: redmine, url: \"http://127.0.0.1:9\", project: demo, api_key_env: {var}}}\n\
         agent: {{command: [\"true\"]}}\nactive_states: [New]\nterminal_states: [Closed]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::parse_str(&text, Some(&dir.path().join("pipeline.yaml"))).expect("config");
    match sortie::tracker::open(&cfg).map(|t| t.name().to_string()) {
        Err(TrackerError::Unauthorized(msg)) => assert!(msg.contains(var), "{msg}"),
        other => panic!("expected Unauthorized naming {var}, got {other:?}"),
    }
}

/// Issue #18: Redmine relations (`blocks` / `blocked`) hold a ticket until its blocker
/// closes; blockers are read on Redmine by default (no `tracker.blockers` in the config).
#[tokio::test]
async fn a_ticket_blocked_through_a_relation_waits_until_its_blocker_closes() {
    let project = Project::new().await;
    let dir = tempfile::tempdir().unwrap();
    let blocker = project
        .issue("Schema first", "Design approved", "Normal")
        .await;
    let blocked = project
        .issue("Then the API", "Ready for design", "Normal")
        .await;
    project
        .server
        .call(
            "POST",
            &format!("/issues/{blocker}/relations.json"),
            Some(json!({"relation": {"issue_to_id": blocked.parse::<u64>().unwrap(), "relation_type": "blocks"}})),
            None,
        )
        .await;
    let found = project.tracker().blockers(&blocked).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].id, blocker);
    assert_eq!(found[0].status.as_deref(), Some("Design approved"));

    let cfg = project.config(dir.path(), &["sh", "-c", "echo done"], &[]);
    assert_eq!(cfg.blockers.enabled, None, "the default applies");
    let tracker = sortie::tracker::open(&cfg).expect("tracker");
    let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
    let p = Pipeline::new(cfg, tracker, ledger).await.expect("pipeline");
    let report = p.tick(TickOptions { dry_run: true }).await.expect("tick");
    let skip = report
        .skips
        .iter()
        .find(|s| s.ticket == blocked)
        .unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(
        skip.reason.to_string(),
        format!("blocked by #{blocker} (Design approved)")
    );
    assert!(report.runs.iter().all(|r| r.ticket != blocked));

    project.jane_moves(&blocker, "Closed").await;
    let report = p.tick(TickOptions { dry_run: true }).await.expect("tick");
    assert!(
        report.runs.iter().any(|r| r.ticket == blocked),
        "runs once its blocker is closed: {report:?}"
    );
}

//! Whole pipelines against the GitHub Project model: the real adapter, the real tick, a
//! SQLite ledger in a temp dir and an injected clock. Cards move between the options of
//! the project's `Status` field (spelled capitalised, the config lower case); comments go
//! to the issues over REST. Every GraphQL document is validated against GitHub's schema
//! by the model; each test ends by asserting none was refused. The shared scenarios run
//! from `pipeline_suite` (`pipeline_suite::github_project::*`); this file holds the
//! harness and the scenarios only a project board has, and measures what a tick costs
//! in points (docs/trackers/github-project.md quotes it).

use crate::github_project_model::{self as model, ProjectModel, LOGIN, TOKEN};
use crate::pipeline_suite::{
    Asks, Pipeline3, RateLimited, Report, Spelling, StepClock, Vendor, Who,
};
use sortie::block::question::parse_question_blocks;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::ledger::SqliteLedger;
use sortie::pipeline::{Clock, Faults, Pipeline, TickOptions};
use sortie::tracker::github_project::{GithubProjectOptions, GithubProjectTracker, WAIT_FILE};

/// The pipeline's statuses, spelled in lower case with spaces (the options are
/// capitalised: statuses compare ignoring case).
const SPELLING: Spelling = [
    "ready for design",
    "designing",
    "design approved",
    "design blocked",
    "code review",
    "blocked",
    "done",
    "qa failed",
];

/// An option's name on the board: the config's spelling, capitalised.
fn option(status: &str) -> String {
    let at = crate::pipeline_suite::KEBAB
        .iter()
        .position(|s| *s == status);
    let lower = match (at, status) {
        (Some(i), _) => SPELLING[i],
        (None, "on-hold") => "on hold",
        (None, other) => other,
    };
    let mut chars = lower.chars();
    let first = chars.next().unwrap().to_uppercase();
    format!("{first}{}", chars.as_str())
}

/// Every option of the board: the pipeline's, `On hold`, and `Backlog` (not on it).
fn board() -> Vec<String> {
    let mut options: Vec<String> = crate::pipeline_suite::KEBAB
        .iter()
        .map(|s| option(s))
        .collect();
    options.push("On hold".into());
    options.push("Backlog".into());
    options
}

pub(crate) struct Harness {
    pub model: ProjectModel,
    dir: tempfile::TempDir,
    pub clock: Arc<StepClock>,
    agent: Vec<String>,
    trusted: std::sync::Mutex<Vec<String>>,
}

impl Harness {
    pub async fn new(agent: &[&str]) -> Self {
        let options = board();
        let names: Vec<&str> = options.iter().map(String::as_str).collect();
        Harness {
            model: ProjectModel::start(&names).await,
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(StepClock::new()),
            agent: agent.iter().map(|a| a.to_string()).collect(),
            trusted: Default::default(),
        }
    }

    pub fn config(&self) -> Config {
        let tracker = format!(
            r#"tracker: {{kind: github_project, owner: acme, project: 7, api_url: "{}", token_env: SORTIE_TEST_UNUSED_TOKEN}}"#,
            self.model.api_url()
        );
        let mut cfg = Pipeline3 {
            tracker: &tracker,
            statuses: SPELLING,
            terminal: "[done, cancelled]",
            per_role_max_in_flight: "4",
            agent_extra: "",
        }
        .config(self.dir.path(), &self.agent);
        cfg.trusted_authors = self.trusted.lock().unwrap().clone();
        cfg
    }

    fn tracker(&self) -> Arc<GithubProjectTracker> {
        let clock = self.clock.clone();
        let cfg = self.config();
        let options = GithubProjectOptions {
            retry_backoff: Duration::ZERO,
            clock: Arc::new(move || clock.now()),
            wait_file: Some(cfg.state_root.join(WAIT_FILE)),
            etag_dir: Some(cfg.state_root.clone()),
            ..GithubProjectOptions::default()
        };
        Arc::new(GithubProjectTracker::from_config(&cfg, TOKEN.into(), options).unwrap())
    }

    /// A fresh adapter and pipeline, as a new `sortie pipeline tick` process builds them.
    pub async fn try_process(&self) -> Result<Pipeline, String> {
        let cfg = self.config();
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).expect("ledger"));
        Pipeline::builder(cfg, self.tracker(), ledger)
            .clock(self.clock.clone())
            .faults(Faults::none())
            .build()
            .await
            .map_err(|e| e.to_string())
    }

    /// One tick in a new process; the tick's error as text when it fails.
    pub async fn try_tick(&self) -> Result<Report, String> {
        let p = self.try_process().await?;
        let r = p
            .tick(TickOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok(Report::of(&r, r.to_text()))
    }

    pub async fn tick(&self) -> Report {
        match self.try_tick().await {
            Ok(r) => r,
            Err(err) => panic!("tick: {err}\n{:#?}", self.model.log()),
        }
    }

    fn blocks(&self, n: u64) -> Vec<OutcomeBlock> {
        self.model
            .github
            .issue(n)
            .comments
            .iter()
            .filter(|c| c.author == LOGIN)
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }

    pub fn assert_nothing_refused(&self) {
        let refused = self.model.refused();
        assert!(
            refused.is_empty(),
            "requests that do not validate: {refused:#?}"
        );
    }
}

impl Vendor for Harness {
    type Flavour = ();
    type Id = u64;

    async fn start(_: (), agent: &[&str]) -> Self {
        Harness::new(agent).await
    }
    fn open(&self, title: &str, status: &str, labels: &[&str]) -> u64 {
        let n = self.model.add_issue(title, &option(status));
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        self.model.github.edit(n, |i| i.labels = labels);
        n
    }
    fn person_comments(&self, n: &u64) {
        self.model
            .github
            .add_comment(*n, "alice", "Please keep it small.");
    }
    fn open_parked(&self) -> Option<(u64, String)> {
        Some((self.model.add_issue("Parked", "Backlog"), "Backlog".into()))
    }
    fn status_of(&self, n: &u64) -> String {
        self.model.status_of(*n).unwrap_or_default()
    }
    fn spell(&self, status: &str) -> String {
        option(status)
    }
    fn assert_in(&self, n: &u64, status: &str, labels: &[&str]) {
        assert_eq!(self.model.status_of(*n), Some(option(status)));
        let issue = self.model.github.issue(*n);
        for l in labels {
            assert!(
                issue.labels.iter().any(|x| x == l),
                "{l} kept: {:?}",
                issue.labels
            );
        }
    }
    fn moves_before_read(&self, n: &u64, skip: usize, status: &str) {
        let to = option(status);
        let n = *n;
        self.model
            .before_issue_read(skip, move |p| model::move_card(p, n, &to));
    }
    fn closes_before_read(&self, n: &u64, skip: usize) {
        let issues = self.model.github.shared_issues();
        let n = *n;
        self.model
            .before_issue_read(skip, move |_| issues.edit(n, |i| i.open = false));
    }
    fn assert_closed_in_designing(&self, n: &u64) {
        assert!(!self.model.github.issue(*n).open);
        assert_eq!(self.model.status_of(*n), Some(option("designing")));
    }
    fn blocks(&self, n: &u64) -> Vec<OutcomeBlock> {
        Harness::blocks(self, *n)
    }
    fn comments(&self, n: &u64) -> usize {
        self.model.github.issue(*n).comments.len()
    }
    async fn tick(&self) -> Report {
        Harness::tick(self).await
    }
    fn check_clean(&self) {
        self.assert_nothing_refused();
    }
}

impl RateLimited for Harness {
    fn clock(&self) -> &StepClock {
        &self.clock
    }
    fn ledger_name(&self) -> &'static str {
        "github_project:acme/7"
    }
    fn ledger_path(&self) -> PathBuf {
        self.config().ledger_path()
    }
    fn fail_comment_posts(&self) {
        self.model
            .github
            .fail("POST", "/comments", 429, Some(60), usize::MAX);
    }
    fn clear_faults(&self) {
        self.model.github.clear_faults();
    }
    fn statuses(&self) -> (Vec<u16>, Vec<String>) {
        let statuses = self
            .model
            .github
            .requests()
            .iter()
            .map(|r| r.status)
            .collect();
        (statuses, self.model.github.log())
    }
}

impl Asks for Harness {
    fn trust_person(&self) {
        *self.trusted.lock().unwrap() = vec!["alice".to_string()];
    }
    fn comment_as(&self, n: &u64, who: Who, text: &str) {
        let author = match who {
            Who::Sortie => LOGIN,
            Who::Person => "alice",
            Who::Stranger => "mallory",
        };
        self.model.github.add_comment(*n, author, text);
    }
    fn questions(&self, n: &u64) -> usize {
        self.model
            .github
            .issue(*n)
            .comments
            .iter()
            .filter(|c| c.author == LOGIN)
            .map(|c| parse_question_blocks(&c.body).len())
            .sum()
    }
}

#[tokio::test]
async fn three_issues_flow_through_every_stage_by_moving_their_cards() {
    let agent = crate::pipeline_suite::demo_agent();
    let h = Harness::new(&[&agent]).await;
    let issues: Vec<u64> = ["Export", "Import", "Search"]
        .iter()
        .map(|t| h.model.add_issue(t, "Ready for design"))
        .collect();
    let other = h.model.add_other_issue("Rate limits in the API", "Backlog");
    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks <= 6, "not drained");
        let r = h.tick().await;
        if r.runs().is_empty() {
            break;
        }
        assert_eq!(r.runs().len(), 3, "{}", r.text);
        assert!(r.writebacks().iter().all(|w| *w == "done"), "{}", r.text);
    }
    assert_eq!(
        ticks, 4,
        "one stage per tick for all three, then an idle tick"
    );
    for n in issues {
        assert_eq!(h.model.status_of(n).as_deref(), Some("Done"));
        let blocks = h.blocks(n);
        let roles: Vec<&str> = blocks.iter().map(|b| b.role()).collect();
        assert_eq!(roles, ["architect", "backend", "qa"]);
    }
    let _ = other;
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_renamed_option_is_an_error_naming_the_field_and_its_options_and_nothing_moves() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design");
    h.model.rename_option("Designing", "In design");
    let err = h
        .try_tick()
        .await
        .err()
        .expect("the tick refuses a board it cannot map");
    assert!(
        err.contains("field \"Status\" has no option named \"designing\"")
            && err.contains("its options are: Ready for design, In design, Design approved"),
        "{err}"
    );
    assert_eq!(h.model.status_of(n).as_deref(), Some("Ready for design"));
    assert!(
        !h.model.log().iter().any(|op| op == "SortieProjectMove"),
        "{:?}",
        h.model.log()
    );
    assert!(h.model.github.issue(n).comments.is_empty());
    h.assert_nothing_refused();
}

#[tokio::test]
async fn an_option_deleted_under_a_running_pipeline_moves_nothing() {
    let h = Harness::new(&["true"]).await;
    let queued: Vec<u64> = (0..3)
        .map(|i| h.model.add_issue(&format!("t{i}"), "Code review"))
        .collect();
    let waiting = h.model.add_issue("w", "Ready for design");
    // A person deletes an option the pipeline claims from: GitHub clears it from every
    // card that had it.
    h.model.delete_option("Code review");
    for n in &queued {
        assert_eq!(
            h.model.status_of(*n),
            None,
            "the model cleared the deleted option"
        );
    }
    let err = h.try_tick().await.err().expect("the tick stops");
    assert!(err.contains("no option named \"code review\""), "{err}");
    assert!(
        !h.model.log().iter().any(|op| op == "SortieProjectMove"),
        "{:?}",
        h.model.log()
    );
    let writes = h
        .model
        .github
        .requests()
        .iter()
        .filter(|r| r.method != "GET")
        .count();
    assert_eq!(writes, 0, "nothing written");
    assert_eq!(
        h.model.status_of(waiting).as_deref(),
        Some("Ready for design")
    );
    for n in &queued {
        assert_eq!(h.model.status_of(*n), None, "no card moved");
    }
    h.assert_nothing_refused();
}

#[tokio::test]
async fn the_primary_rate_limit_stops_the_tick_and_the_next_process_waits_for_the_reset() {
    let h = Harness::new(&["true"]).await;
    h.model.add_issue("t", "Ready for design");
    h.model.fail(&[model::Fault::Primary]);
    let err = h.try_tick().await.err().expect("rate limited");
    assert!(err.contains("rate limited"), "{err}");
    let sent = h.model.log().len();
    let err = h.try_tick().await.err().expect("still waiting");
    assert!(err.contains("rate limited"), "{err}");
    assert_eq!(h.model.log().len(), sent, "nothing sent while waiting");
    h.assert_nothing_refused();
}

#[tokio::test]
async fn a_secondary_limit_is_honoured_for_its_retry_after() {
    let h = Harness::new(&["true"]).await;
    let n = h.model.add_issue("t", "Ready for design");
    h.model.fail(&[model::Fault::Secondary(30)]);
    let err = h.try_tick().await.err().expect("rate limited");
    assert!(err.contains("retry after 30s"), "{err}");
    h.clock.advance(10);
    let sent = h.model.log().len();
    assert!(h.try_tick().await.is_err());
    assert_eq!(h.model.log().len(), sent, "nothing sent within the 30 s");
    h.clock.advance(21);
    let r = h.tick().await;
    assert_eq!(r.writebacks(), ["done"], "{}", r.text);
    assert_eq!(h.model.status_of(n).as_deref(), Some("Design approved"));
    h.assert_nothing_refused();
}

/// Points one tick spends, with the operations it sent.
async fn measure(h: &Harness) -> (Report, Vec<String>, u64) {
    h.model.clear_log();
    let before = h.model.remaining();
    let r = h.tick().await;
    (r, h.model.log(), before - h.model.remaining())
}

#[tokio::test]
async fn an_idle_tick_costs_a_point_per_fifty_cards_and_one_for_the_viewer_and_a_run_five() {
    let h = Harness::new(&["true"]).await;
    for i in 0..40 {
        h.model.add_issue(&format!("parked {i}"), "Backlog");
    }
    let (_, ops, points) = measure(&h).await;
    assert_eq!(ops, ["SortieViewer", "SortieProjectItems"], "{ops:?}");
    assert_eq!(
        points, 2,
        "an idle tick: who the token is, one page with the field"
    );
    for i in 0..20 {
        h.model.add_issue(&format!("parked more {i}"), "Backlog");
    }
    let (_, _, points) = measure(&h).await;
    assert_eq!(points, 3, "60 cards: two pages");
    h.model.add_issue("work", "Ready for design");
    let rest_before = h.model.github.requests().len();
    let (r, ops, points) = measure(&h).await;
    assert_eq!(r.writebacks(), ["done"], "{}", r.text);
    // Per run: three re-reads (the claim, the in-progress move, the write-back's move)
    // and two moves (in progress, then the outcome).
    let reads = ops.iter().filter(|o| *o == "SortieProjectIssue").count();
    let moves = ops.iter().filter(|o| *o == "SortieProjectMove").count();
    assert_eq!((reads, moves), (3, 2), "{ops:?}");
    assert_eq!(points, 3 + 5, "{ops:?}");
    // And over REST, on the issue's repository (its own hourly budget): the blockers,
    // the comments (history), again after the claim, before the post, and the post.
    let rest: Vec<String> = h.model.github.requests()[rest_before..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(rest.len(), 5, "{rest:#?}");
    assert!(rest[0].contains("/dependencies/blocked_by"), "{rest:#?}");
    assert_eq!(
        rest.iter().filter(|r| r.starts_with("POST")).count(),
        1,
        "{rest:#?}"
    );
    h.assert_nothing_refused();
}

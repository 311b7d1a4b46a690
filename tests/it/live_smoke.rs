//! The opt-in real-tracker smoke test (Symphony's Real Integration Profile; #39, item
//! 20): one pipeline tick against a real GitHub repository, GitLab project, Jira site
//! and Linear team, with the credentials each adapter documents.
//!
//! `./scripts/test --live` runs the `#[ignore]`d `live_smoke_*` tests. A vendor whose
//! variables are not all set is skipped with a line saying which are missing (a
//! failure instead when `SORTIE_LIVE_REQUIRED` is set): the only tests allowed to
//! skip, and only when asked for. A plain `./scripts/test` lists them as ignored. docs/operations.md says how to prepare each vendor.
//!
//! Each vendor's test takes one ticket the person names, labelled `sortie-smoke` (the
//! tick's `tracker.filter`, so it touches no other ticket): the test moves it to the
//! claim status with the adapter, runs `sortie pipeline tick` (the binary) with a
//! one-stage pipeline whose agent is `sh`, and checks that the ticket reached the
//! success status with a `sortie:success` block. The ticket stays there, with that
//! comment: run it again as often as you like.

use std::sync::Arc;

use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::Config;
use sortie::tracker::Tracker;

/// The label the smoke ticket carries: the tick's filter.
pub const SMOKE_LABEL: &str = "sortie-smoke";

/// One smoke tick: the tracker section, the ticket, and the statuses it goes between.
pub struct Smoke {
    /// The vendor, for messages.
    pub vendor: &'static str,
    /// The `tracker:` mapping's keys (flow style, without braces), `filter` excepted.
    pub tracker: String,
    /// The ticket's id as sortie names it.
    pub ticket: String,
    /// The claim status it is moved to first.
    pub from: String,
    /// The success status the tick moves it to.
    pub to: String,
    /// Variables the binary gets (the token, when a test sets it).
    pub env: Vec<(String, String)>,
}

/// The variables `names`, or `None` after printing which are missing: the test is then
/// skipped, and says so.
pub fn need(vendor: &str, names: &[&str]) -> Option<Vec<String>> {
    let values: Vec<Option<String>> = names
        .iter()
        .map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()))
        .collect();
    let missing: Vec<&str> = names
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| *n)
        .collect();
    if !missing.is_empty() {
        // A job that asked for the real trackers fails rather than skip.
        assert!(
            std::env::var_os("SORTIE_LIVE_REQUIRED").is_none(),
            "live smoke test on {vendor}: SORTIE_LIVE_REQUIRED is set and {} is not",
            missing.join(", ")
        );
        println!(
            "SKIPPED live smoke test on {vendor}: set {} (docs/operations.md, \"Smoke test against a real tracker\")",
            missing.join(", ")
        );
        return None;
    }
    Some(values.into_iter().map(Option::unwrap).collect())
}

/// A variable, or its default.
pub fn var_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// Run the smoke tick; `open` builds the adapter for the config (from the environment
/// in a live run, with a model's token in the harness's own test). Panics saying what
/// went wrong.
pub async fn run(smoke: &Smoke, open: impl FnOnce(&Config) -> Arc<dyn Tracker>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("roles")).unwrap();
    std::fs::write(
        dir.path().join("roles/smoke.md"),
        "A smoke test of sortie on ticket {{ ticket.id }}: nothing to do.\n",
    )
    .unwrap();
    let config_path = dir.path().join("pipeline.yaml");
    std::fs::write(
        &config_path,
        format!(
            r#"tracker: {{{tracker}, filter: {{labels: [{SMOKE_LABEL}]}}}}
state_root: state
roles_dir: roles
agent: {{command: ["sh", "-c", "echo smoke"], timeout_seconds: 120}}
pipeline_stages:
  - {{role: smoke, claim_status: "{from}", success_status: "{to}", evidence: "off", exit: true}}
"#,
            tracker = smoke.tracker,
            from = smoke.from,
            to = smoke.to,
        ),
    )
    .unwrap();
    let config = Config::load(&config_path)
        .unwrap_or_else(|err| panic!("{}: the smoke config: {err}", smoke.vendor));
    let tracker = open(&config);
    let id = smoke.ticket.as_str();
    let before = tracker
        .get(id)
        .await
        .unwrap_or_else(|err| panic!("{}: reading ticket {id}: {err}", smoke.vendor));
    assert!(
        before
            .labels
            .iter()
            .any(|l| l.eq_ignore_ascii_case(SMOKE_LABEL)),
        "{}: ticket {id} must carry the label `{SMOKE_LABEL}` (it has {:?})",
        smoke.vendor,
        before.labels
    );
    tracker
        .transition(id, &before.status, &smoke.from)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "{}: moving ticket {id} from {:?} to {:?}: {err}",
                smoke.vendor, before.status, smoke.from
            )
        });

    let mut tick = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
    tick.args(["pipeline", "tick", "--config", "pipeline.yaml", "--json"])
        .current_dir(dir.path())
        .env_remove("SORTIE_FAULT")
        .envs(smoke.env.iter().map(|(k, v)| (k, v)));
    let out = tick.output().await.expect("run sortie");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: the tick failed\n{stdout}\n{stderr}",
        smoke.vendor
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("tick --json");
    let runs = report["runs"].as_array().cloned().unwrap_or_default();
    assert!(
        runs.iter()
            .any(|r| r["ticket"] == id && r["outcome"] == "success"),
        "{}: no successful run of ticket {id}:\n{report:#}\n{stderr}",
        smoke.vendor
    );

    let after = tracker.get(id).await.expect("re-read the ticket");
    assert!(
        after.status.eq_ignore_ascii_case(&smoke.to),
        "{}: ticket {id} is in {:?}, not {:?}",
        smoke.vendor,
        after.status,
        smoke.to
    );
    let comments = tracker.comments(id).await.expect("read the comments");
    let success = comments
        .iter()
        .flat_map(|c| parse_blocks(&c.body))
        .filter_map(Result::ok)
        .any(|p| matches!(p.block, OutcomeBlock::Success(ref s) if s.role == "smoke"));
    assert!(
        success,
        "{}: no sortie:success block of role smoke on ticket {id}",
        smoke.vendor
    );
    println!(
        "live smoke test on {}: ticket {id} went {:?} -> {:?} with a sortie:success block",
        smoke.vendor, smoke.from, smoke.to
    );
}

/// The adapter of a live run: its token from the environment, as the binary reads it.
fn from_env(config: &Config) -> Arc<dyn Tracker> {
    sortie::tracker::open(config).unwrap_or_else(|err| panic!("opening the tracker: {err}"))
}

/// One vendor's live run: `required` are its variables besides
/// `SORTIE_LIVE_<KEY>_TICKET` (checked together), `tracker` writes the tracker keys from
/// their values, and `SORTIE_LIVE_<KEY>_FROM` / `_TO` override the statuses.
async fn live(
    vendor: &'static str,
    key: &str,
    required: &[&str],
    tracker: impl FnOnce(&[String]) -> String,
    statuses: (&str, &str),
) {
    let ticket_var = format!("SORTIE_LIVE_{key}_TICKET");
    let names: Vec<&str> = required
        .iter()
        .copied()
        .chain([ticket_var.as_str()])
        .collect();
    let Some(mut values) = need(vendor, &names) else {
        return;
    };
    let ticket = values.pop().expect("the ticket's variable");
    let smoke = Smoke {
        vendor,
        tracker: tracker(&values),
        ticket,
        from: var_or(&format!("SORTIE_LIVE_{key}_FROM"), statuses.0),
        to: var_or(&format!("SORTIE_LIVE_{key}_TO"), statuses.1),
        env: Vec::new(),
    };
    run(&smoke, from_env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in, against a real GitHub repository: ./scripts/test --live"]
async fn live_smoke_github() {
    let tracker = |v: &[String]| {
        let api = var_or("SORTIE_LIVE_GITHUB_API_URL", "https://api.github.com");
        format!("kind: github, repo: \"{}\", api_url: \"{api}\"", v[1])
    };
    let required = ["GITHUB_TOKEN", "SORTIE_LIVE_GITHUB_REPO"];
    live(
        "GitHub",
        "GITHUB",
        &required,
        tracker,
        ("smoke-ready", "smoke-done"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in, against a real GitLab project: ./scripts/test --live"]
async fn live_smoke_gitlab() {
    let tracker = |v: &[String]| {
        let url = var_or("SORTIE_LIVE_GITLAB_URL", "https://gitlab.com");
        format!("kind: gitlab, project: \"{}\", url: \"{url}\"", v[1])
    };
    let required = ["GITLAB_TOKEN", "SORTIE_LIVE_GITLAB_PROJECT"];
    live(
        "GitLab",
        "GITLAB",
        &required,
        tracker,
        ("smoke-ready", "smoke-done"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in, against a real Jira Cloud site: ./scripts/test --live"]
async fn live_smoke_jira() {
    let tracker = |v: &[String]| format!("kind: jira, url: \"{}\", project: \"{}\"", v[2], v[3]);
    let required = [
        "JIRA_EMAIL",
        "JIRA_TOKEN",
        "SORTIE_LIVE_JIRA_URL",
        "SORTIE_LIVE_JIRA_PROJECT",
    ];
    live("Jira", "JIRA", &required, tracker, ("To Do", "In Progress")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in, against a real Linear team: ./scripts/test --live"]
async fn live_smoke_linear() {
    let tracker = |v: &[String]| format!("kind: linear, team: \"{}\"", v[1]);
    let required = ["LINEAR_API_KEY", "SORTIE_LIVE_LINEAR_TEAM"];
    live(
        "Linear",
        "LINEAR",
        &required,
        tracker,
        ("Todo", "In Progress"),
    )
    .await;
}

/// The harness itself, on the GitHub model (runs in every CI): a ticket in another
/// status is moved to the claim status, one tick of the binary takes it to the success
/// status with its block, and a second run of the same smoke test passes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_smoke_harness_moves_one_labelled_ticket_through_one_tick_on_a_model() {
    use crate::github_model::{GithubModel, TOKEN};
    use sortie::tracker::github::{GithubOptions, GithubTracker};
    let model = GithubModel::start().await;
    let other = model.add_issue("not mine", &["status:smoke-ready"]);
    let n = model.add_issue("smoke", &["status:backlog", SMOKE_LABEL]);
    let smoke = Smoke {
        vendor: "the GitHub model",
        tracker: format!(
            "kind: github, repo: acme/widgets, api_url: \"{}\", token_env: SORTIE_SMOKE_MODEL_TOKEN",
            model.api_url()
        ),
        ticket: n.to_string(),
        from: "smoke-ready".into(),
        to: "smoke-done".into(),
        env: vec![("SORTIE_SMOKE_MODEL_TOKEN".into(), TOKEN.into())],
    };
    let open = |config: &Config| -> Arc<dyn Tracker> {
        Arc::new(
            GithubTracker::from_config(config, TOKEN.into(), GithubOptions::default()).unwrap(),
        )
    };
    run(&smoke, open).await;
    run(&smoke, open).await;
    assert!(
        model
            .issue(other)
            .labels
            .iter()
            .any(|l| l == "status:smoke-ready"),
        "the unlabelled ticket was not touched"
    );
}

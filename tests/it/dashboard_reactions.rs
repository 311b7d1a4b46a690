//! Issue #32, "Visible": the dashboard's ticket page (HTML and JSON) shows the pull
//! request as sortie last read it (its checks and reviews) and the reactions with their
//! rounds. Real `git` with a local bare remote, the real binary ticking a local board
//! with the GitHub model as the forge, then the real daemon on the same config and state.

use crate::common;
use crate::git_workspaces::bare_remote;
use crate::github_model::{GithubModel, TOKEN};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// The agent: backend commits one new line per run; qa only reports success.
fn agent(dir: &Path) -> PathBuf {
    let script = "#!/bin/sh\n\
if [ \"$SORTIE_ROLE\" = backend ]; then\n\
  echo run >> work.txt\n\
  git add work.txt\n\
  git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"backend: a run\"\n\
fi\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n";
    let path = dir.join("agent.sh");
    std::fs::write(&path, script).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// `sortie args...` in `dir`; its stdout, which it must succeed to give.
fn sortie(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sortie {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A local board with one ticket in `todo`, a backend and a qa stage, pull requests on
/// the GitHub model, and `ci_failure` reactions for tickets in `qa-passed`.
struct Rig {
    model: GithubModel,
    dir: tempfile::TempDir,
    id: String,
}

impl Rig {
    async fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let model = GithubModel::with_remote(&remote).await;
        let text = format!(
            r#"
tracker: {{kind: local, path: board}}
forge:
  kind: github
  repo: acme/widgets
  api_url: "{api}"
  token_env: SORTIE_TEST_FORGE_TOKEN
state_root: state
roles_dir: {roles}
terminal_states: [done]
poll_interval_seconds: 3600
shutdown_grace_seconds: 0
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "{remote}"}}
pull_request: {{after: backend, draft: false}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: review}}
  - {{role: qa, claim_status: review, success_status: qa-passed, requires_prior_role: backend, evidence: off}}
reactions:
  watch: [qa-passed]
  ci_failure: {{to: backend, max_rounds: 3}}
"#,
            api = model.api_url(),
            roles = common::repo().join("roles").display(),
            agent = agent(dir.path()).display(),
            remote = remote.display(),
        );
        std::fs::write(dir.path().join("pipeline.yaml"), text).unwrap();
        sortie(dir.path(), &["board", "init", "board"]);
        let id = sortie(
            dir.path(),
            &[
                "board",
                "add",
                "--board",
                "board",
                "--title",
                "Fix the widget",
                "--status",
                "todo",
            ],
        );
        Rig { model, dir, id }
    }

    /// The clock offset that puts sortie's clock on the model's.
    fn clock_offset(&self) -> String {
        (self.model.now() - chrono::Utc::now())
            .num_seconds()
            .to_string()
    }

    /// One tick of the real binary, which must succeed; its report.
    async fn tick(&self) -> String {
        self.model.advance(1);
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .current_dir(self.dir.path())
            .env("SORTIE_TEST_FORGE_TOKEN", TOKEN)
            .env("SORTIE_CLOCK_OFFSET_SECONDS", self.clock_offset())
            .env_remove("SORTIE_FAULT")
            .output()
            .await
            .expect("run sortie");
        let report = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{report}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        report
    }

    fn status(&self) -> String {
        let shown = sortie(
            self.dir.path(),
            &["board", "show", "--board", "board", &self.id],
        );
        shown
            .lines()
            .find_map(|l| l.trim().strip_prefix("status:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| panic!("no status in {shown}"))
    }

    /// Tick until the ticket is in `status` (at most `ticks`).
    async fn until(&self, status: &str, ticks: usize) {
        for _ in 0..ticks {
            if self.status() == status {
                return;
            }
            self.tick().await;
        }
        assert_eq!(self.status(), status, "after {ticks} ticks");
    }
}

/// `sortie pipeline run` on `dir`'s config, listening on a loopback port of its choice.
struct Daemon {
    child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
}

impl Daemon {
    async fn start(dir: &Path, env: &[(&str, String)]) -> Daemon {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args([
                "pipeline",
                "run",
                "--config",
                "pipeline.yaml",
                "--listen",
                "127.0.0.1:0",
            ])
            .current_dir(dir)
            .env_remove("SORTIE_LOG")
            .env_remove("SORTIE_FAULT")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the daemon");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("the daemon says where it listens")
        .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Daemon {
            child,
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    /// GET `path`, which must answer 200; its body.
    async fn get(&self, path: &str) -> String {
        let reply = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("the daemon answers");
        let status = reply.status();
        let body = reply.text().await.unwrap();
        assert_eq!(status.as_u16(), 200, "GET {path}: {body}");
        body
    }

    /// The ticket's page (its escaping undone) and its JSON view.
    async fn ticket(&self, id: &str) -> (String, serde_json::Value) {
        let html = decoded(self.get(&format!("/tickets/{id}")).await);
        let json = serde_json::from_str(&self.get(&format!("/api/v1/tickets/{id}")).await)
            .expect("the ticket's view is JSON");
        (html, json)
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// `body` with the entities the page's escaping writes decoded (`&#x2f;` is `/`).
fn decoded(body: String) -> String {
    body.replace("&#x2f;", "/")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The ticket page shows the pull request sortie last read (number, the failed check's
/// name and state) and the `ci_failure` reaction as round 1 of 3, in HTML and JSON; a
/// ticket sortie read no pull request for says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticket_page_shows_the_pull_request_as_last_read_and_the_reaction_round() {
    let rig = Rig::new().await;
    rig.until("qa-passed", 4).await;
    let pulls = rig.model.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let pull = rig.model.pull(pulls[0].number).unwrap();
    let (number, head) = (pull.number, pull.head_sha);
    rig.model.add_check_run(
        &head,
        "unit-tests",
        "completed",
        Some("failure"),
        "2 tests failed",
        "assertion failed: widget.turns()",
    );
    // Parked behind a blocker, the ticket stays where the reaction sends it: neither this
    // tick nor the daemon's own ticks run backend and read a newer head, so the page
    // must show this read.
    let blocker = sortie(
        rig.dir.path(),
        &[
            "board", "add", "--board", "board", "--title", "Later", "--status", "backlog",
        ],
    );
    sortie(
        rig.dir.path(),
        &[
            "board", "block", "--board", "board", &rig.id, "--by", &blocker,
        ],
    );
    let report = rig.tick().await;
    assert!(
        report.contains(&format!(
            "reaction ticket {} pull request #{number} ci_failure round 1: reacted",
            rig.id
        )),
        "{report}"
    );
    assert_eq!(rig.status(), "todo", "sent back to backend: {report}");

    let daemon = Daemon::start(
        rig.dir.path(),
        &[
            ("SORTIE_TEST_FORGE_TOKEN", TOKEN.to_string()),
            ("SORTIE_CLOCK_OFFSET_SECONDS", rig.clock_offset()),
        ],
    )
    .await;
    let (html, json) = daemon.ticket(&rig.id).await;

    assert!(
        html.contains(&format!(">#{number}</a>")),
        "the pull request's number: {html}"
    );
    assert!(
        html.contains(
            "unit-tests</a></td><td class=\"check-failure\">failure</td><td>2 tests failed</td>"
        ),
        "the failed check, its state and summary: {html}"
    );
    assert!(html.contains("last read it"), "{html}");
    assert!(
        !html.contains("sortie has not read a pull request"),
        "{html}"
    );
    let short = &head[..7];
    assert!(
        html.contains(&format!(
            "<td>ci_failure</td><td>round 1 of 3</td><td>backend</td><td>#{number}</td><td><code>{short}</code></td>"
        )),
        "the reaction with its round: {html}"
    );

    let p = &json["pull_request"];
    assert_eq!(p["number"], number, "{json:#}");
    assert_eq!(p["head_sha"], head.as_str(), "{json:#}");
    assert!(p["read_at"].is_string(), "{json:#}");
    let checks = p["checks"].as_array().expect("checks");
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "unit-tests" && c["state"] == "failure"),
        "{json:#}"
    );
    let reactions = json["reactions"].as_array().expect("reactions");
    assert_eq!(reactions.len(), 1, "{json:#}");
    let r = &reactions[0];
    assert_eq!(r["kind"], "ci_failure");
    assert_eq!(r["round"], 1);
    assert_eq!(r["max_rounds"], 3);
    assert_eq!(r["to_role"], "backend");
    assert_eq!(r["pull_request"], number);
    assert_eq!(r["head_sha"], head.as_str());

    // The blocker never had a pull request.
    let (html, json) = daemon.ticket(&blocker).await;
    assert!(
        html.contains("sortie has not read a pull request for this ticket"),
        "{html}"
    );
    assert!(
        html.contains("sortie has not reacted to a pull request of this ticket"),
        "{html}"
    );
    assert!(json["pull_request"].is_null(), "{json:#}");
    assert_eq!(json["reactions"], serde_json::json!([]), "{json:#}");
    daemon.stop().await;
}

/// Without a forge or reactions at all, a ticket's page has no pull request and no
/// reactions sections (issue #52, 14: they were there, empty); the API still says
/// `null` and `[]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_without_a_pull_request_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pipeline.yaml"),
        format!(
            r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
poll_interval_seconds: 3600
shutdown_grace_seconds: 0
agent: {{command: ["true"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: done}}
"#,
            roles = common::repo().join("roles").display(),
        ),
    )
    .unwrap();
    sortie(dir.path(), &["board", "init", "board"]);
    let id = sortie(
        dir.path(),
        &[
            "board", "add", "--board", "board", "--title", "Idle", "--status", "backlog",
        ],
    );
    let daemon = Daemon::start(dir.path(), &[]).await;
    let (html, json) = daemon.ticket(&id).await;
    assert!(html.contains(&format!("<h1>#{id} Idle</h1>")), "{html}");
    assert!(!html.contains("pull request"), "{html}");
    assert!(!html.contains(r#"id="reactions""#), "{html}");
    assert!(json["pull_request"].is_null(), "{json:#}");
    assert_eq!(json["reactions"], serde_json::json!([]), "{json:#}");
    daemon.stop().await;
}

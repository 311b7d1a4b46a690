//! Two hosts on one PostgreSQL ledger react once (issue #32): `sortie pipeline tick`
//! processes with their own `SORTIE_HOST_ID` and state roots, one local board, the
//! GitHub model (backed by a bare git remote) as the forge. A red check on the
//! watched pull request, then ticks of both hosts started together, round after
//! round: one reaction block, one move back to backend, one backend run for it.
//!
//! Needs `SORTIE_TEST_POSTGRES_URL` (scripts/services/postgres.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::tracker::local::LocalBoard;
use sortie::tracker::Tracker;

use crate::common::repo;
use crate::github_model::{GithubModel, TOKEN};
use crate::ledger_postgres::schema_url;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=Seed", "-c", "user.email=seed@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed (apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `root/remote.git`, its `main` one commit holding `README`.
fn bare_remote(root: &Path) -> PathBuf {
    git(
        root,
        &[
            "init",
            "-q",
            "--bare",
            "--initial-branch=main",
            "remote.git",
        ],
    );
    git(root, &["clone", "-q", "remote.git", "seed"]);
    let seed = root.join("seed");
    std::fs::write(seed.join("README"), "widgets\n").unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "-q", "-m", "initial"]);
    git(&seed, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
    root.join("remote.git")
}

/// The agent: saves its prompt (under the shared directory, so both hosts' runs are
/// counted), backend commits one line per run, everyone reports success.
fn agent(dir: &Path) -> PathBuf {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    let script = format!(
        "#!/bin/sh\nf={p}/$SORTIE_ROLE-$SORTIE_HOST_ID-$$.txt\ncat > $f\n\
if [ \"$SORTIE_ROLE\" = backend ]; then\n\
  echo \"run $$\" >> work.txt && git add work.txt && \
git -c user.name=Agent -c user.email=agent@example.com commit -q -m backend\n\
fi\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
        p = prompts.display()
    );
    let path = dir.join("agent.sh");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

struct Pair {
    model: GithubModel,
    dir: tempfile::TempDir,
    url: String,
    id: String,
}

impl Pair {
    async fn new() -> Pair {
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let model = GithubModel::with_remote(&remote).await;
        let agent = agent(dir.path());
        for host in 1..=2 {
            let text = format!(
                r#"
tracker: {{kind: local, path: board}}
forge:
  kind: github
  repo: acme/widgets
  api_url: "{api}"
  token_env: SORTIE_TEST_FORGE_TOKEN
state_root: state-{host}
roles_dir: {roles}
terminal_states: [done]
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
ledger:
  kind: postgres
  url_env: SORTIE_LEDGER_URL
"#,
                api = model.api_url(),
                roles = repo().join("roles").display(),
                agent = agent.display(),
                remote = remote.display(),
            );
            std::fs::write(dir.path().join(format!("host-{host}.yaml")), text).unwrap();
        }
        let run = |args: &[&str]| {
            let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        run(&["board", "init", "board"]);
        let id = run(&[
            "board",
            "add",
            "--board",
            "board",
            "--title",
            "Fix the widget",
            "--status",
            "todo",
        ]);
        Pair {
            model,
            dir,
            // The blocking client makes its own runtime: not on this one's thread.
            url: tokio::task::spawn_blocking(|| schema_url("reactions"))
                .await
                .unwrap(),
            id,
        }
    }

    /// A tick of `host`, its clock on the model's.
    async fn tick(&self, host: usize) -> Output {
        let offset = (self.model.now() - chrono::Utc::now()).num_seconds();
        tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(["pipeline", "tick", "--config", &format!("host-{host}.yaml")])
            .current_dir(self.dir.path())
            .env("SORTIE_HOST_ID", format!("host-{host}"))
            .env("SORTIE_LEDGER_URL", &self.url)
            .env("SORTIE_TEST_FORGE_TOKEN", TOKEN)
            .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
            .env_remove("SORTIE_FAULT")
            .output()
            .await
            .expect("run sortie")
    }

    /// Both hosts' ticks, started together; their reports.
    async fn race(&self) -> [String; 2] {
        self.model.advance(1);
        let (one, two) = tokio::join!(self.tick(1), self.tick(2));
        [one, two].map(|out| {
            let report = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(
                out.status.success(),
                "{report}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            report
        })
    }

    async fn status(&self) -> String {
        self.board().get(&self.id).await.unwrap().status
    }

    fn board(&self) -> LocalBoard {
        LocalBoard::open(&self.dir.path().join("board")).unwrap()
    }

    async fn reaction_blocks(&self) -> Vec<String> {
        self.board()
            .comments(&self.id)
            .await
            .unwrap()
            .iter()
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .filter(|b| b.role() == "reactions")
            .map(|b| match b {
                OutcomeBlock::Failure(f) => f.reason_code,
                OutcomeBlock::Success(_) => "success".to_string(),
            })
            .collect()
    }

    fn prompts(&self, role: &str) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(self.dir.path().join("prompts"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|name| name.starts_with(&format!("{role}-")))
            .collect();
        out.sort();
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_on_one_postgres_ledger_react_to_a_red_check_once() {
    let pair = Pair::new().await;
    for _ in 0..6 {
        if pair.status().await == "qa-passed" {
            break;
        }
        pair.race().await;
    }
    assert_eq!(pair.status().await, "qa-passed");
    assert_eq!(
        pair.prompts("backend").len(),
        1,
        "{:?}",
        pair.prompts("backend")
    );
    let pulls = pair.model.pulls();
    assert_eq!(pulls.len(), 1, "one pull request: {pulls:?}");
    let head = pair.model.pull(pulls[0].number).unwrap().head_sha;
    pair.model.add_check_run(
        &head,
        "test",
        "completed",
        Some("failure"),
        "2 tests failed",
        "assertion failed",
    );

    // Race until the ticket has walked backend and qa again (how many ticks that takes
    // depends on which host wins which claim), and a few more.
    let mut reacted = 0;
    let mut rounds = 0;
    while rounds < 4 || (pair.status().await != "qa-passed" && rounds < 12) {
        for report in pair.race().await {
            reacted += report.matches("ci_failure round 1: reacted").count();
        }
        rounds += 1;
    }
    assert_eq!(reacted, 1, "one host reacted, once");
    assert_eq!(pair.reaction_blocks().await, vec!["reaction.ci_failure"]);
    let backend = pair.prompts("backend");
    assert_eq!(
        backend.len(),
        2,
        "one backend run for the reaction: {backend:?}"
    );
    // Whichever host runs qa, its worktree of the branch (maybe older than the
    // remote's, from its own earlier run) is brought up to the backend's fix first, so
    // its push goes through.
    assert_eq!(
        pair.status().await,
        "qa-passed",
        "walked backend and qa again"
    );
}

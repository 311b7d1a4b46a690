//! Issue #21, the `forge:` setting: pull requests open on the GitHub, GitLab or Gitea
//! repository it names, whatever the tracker is. Real `git` with a local bare remote,
//! the real binary, the GitHub model as the forge.

use crate::common;
use crate::git_workspaces::{bare_remote, successes};
use crate::github_model;

use std::path::{Path, PathBuf};
use std::process::Command;

use sortie::block::{parse_blocks, OutcomeBlock};

/// `forge:`: pull requests open on the forge it names, whatever the tracker is (a local
/// board, or a forge tracker of its own), and its token never reaches the agent.
mod pipeline {
    use super::*;

    use github_model::{GithubModel, TOKEN};
    use sortie::tracker::local::LocalBoard;
    use sortie::tracker::Tracker;

    /// The agent: commits once per ticket (a re-run commits nothing new) and writes
    /// down whether it can see the forge token.
    fn agent(dir: &Path) -> PathBuf {
        let script = format!(
            "#!/bin/sh\ncat > /dev/null\n\
echo \"token=${{SORTIE_TEST_FORGE_TOKEN:-unset}}\" >> {seen}\n\
if ! git log --format=%s | grep -q \"^$SORTIE_ROLE: \"; then\n\
  echo \"$SORTIE_ROLE\" >> work.txt\n\
  git add work.txt\n\
  git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"$SORTIE_ROLE: work on $SORTIE_TICKET_ID\"\n\
fi\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
            seen = dir.join("agent-env.log").display(),
        );
        let path = dir.join("agent.sh");
        std::fs::write(&path, script).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        path
    }

    pub(super) fn write_config(dir: &Path, tracker: &str, forge_url: &str, remote: &Path) {
        let text = format!(
            r#"
tracker: {tracker}
forge:
  kind: github
  repo: acme/widgets
  api_url: "{forge_url}"
  token_env: SORTIE_TEST_FORGE_TOKEN
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "{remote}"}}
pull_request: {{after: backend}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: review}}
"#,
            roles = common::repo().join("roles").display(),
            agent = agent(dir).display(),
            remote = remote.display(),
        );
        std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
    }

    async fn tick(dir: &Path, fault: Option<&str>) -> std::process::Output {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .current_dir(dir)
            .env("SORTIE_TEST_FORGE_TOKEN", TOKEN)
            .env("SORTIE_TEST_GH_TOKEN", TOKEN)
            .env_remove("SORTIE_FAULT");
        match fault {
            Some(fault) => cmd.env("SORTIE_FAULT", fault),
            // Later than every lease the killed tick held.
            None => cmd.env("SORTIE_CLOCK_OFFSET_SECONDS", "3600"),
        };
        cmd.output().await.expect("run sortie")
    }

    fn board_add(dir: &Path, title: &str) -> String {
        let run = |args: &[&str]| {
            let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
                .args(args)
                .current_dir(dir)
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
        run(&[
            "board", "add", "--board", "board", "--title", title, "--status", "todo",
        ])
    }

    /// Issue #21 (`forge:`): a local board cannot open pull requests itself; with
    /// `forge: {kind: github}` the ticket's branch gets exactly one pull request on the
    /// GitHub model, a replay after a crash (before or after the outcome is stored)
    /// reuses it, and its URL is in the block. The agent never sees the forge token.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_local_board_opens_one_pull_request_on_the_configured_forge() {
        for fault in ["after_pull_request", "after_outbox"] {
            let model = GithubModel::start().await;
            let dir = tempfile::tempdir().unwrap();
            let remote = bare_remote(dir.path());
            write_config(
                dir.path(),
                "{kind: local, path: board}",
                &model.api_url(),
                &remote,
            );
            let id = board_add(dir.path(), "Fix the widget");

            let crashed = tick(dir.path(), Some(fault)).await;
            assert!(
                !crashed.status.success(),
                "{fault}: the tick was killed: {}",
                String::from_utf8_lossy(&crashed.stderr)
            );
            assert_eq!(model.pulls().len(), 1, "{fault}: opened before the crash");
            let after = tick(dir.path(), None).await;
            assert!(
                after.status.success(),
                "{fault}: {}",
                String::from_utf8_lossy(&after.stderr)
            );

            let pulls = model.pulls();
            assert_eq!(pulls.len(), 1, "{fault}: one pull request: {pulls:?}");
            let pull = &pulls[0];
            let branch = common::ticket_branch(&dir.path().join("pipeline.yaml"), &id);
            assert_eq!(
                (pull.head.as_str(), pull.base.as_str(), pull.draft),
                (branch.as_str(), "main", true)
            );
            assert_eq!(pull.title, format!("{id}: Fix the widget"));
            assert!(pull.body.contains(&format!("ticket {id}")), "{}", pull.body);
            if fault == "after_pull_request" {
                let log = model.log();
                assert!(
                    log.iter()
                        .filter(|l| l.starts_with("GET /repos/acme/widgets/pulls?"))
                        .count()
                        >= 2,
                    "the re-run looked the pull request up again: {log:?}"
                );
            }

            let board = LocalBoard::open(&dir.path().join("board")).unwrap();
            assert_eq!(board.get(&id).await.unwrap().status, "review", "{fault}");
            let blocks: Vec<OutcomeBlock> = board
                .comments(&id)
                .await
                .unwrap()
                .iter()
                .flat_map(|c| parse_blocks(&c.body))
                .filter_map(Result::ok)
                .map(|p| p.block)
                .collect();
            let done = successes(&blocks);
            assert_eq!(done.len(), 1, "{fault}: one success block: {blocks:?}");
            assert_eq!(
                done[0].artifacts["pull_request"],
                format!("https://github.com/acme/widgets/pull/{}", pull.number)
            );
            assert_eq!(done[0].artifacts["branch"], branch);

            let seen = std::fs::read_to_string(dir.path().join("agent-env.log")).unwrap();
            assert!(!seen.is_empty() && !seen.contains(TOKEN), "{fault}: {seen}");
            assert!(
                seen.lines().all(|l| l == "token=unset"),
                "{fault}: the forge token reached the agent: {seen}"
            );
        }
    }

    /// Issue #21 (`forge:`): a forge tracker with a `forge:` of its own opens the pull
    /// request on the forge, never on the tracker.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_forge_is_used_even_when_the_tracker_is_a_forge() {
        let board = GithubModel::start().await;
        let forge = GithubModel::start().await;
        let number = board.add_issue("Fix the widget", &["status:todo"]);
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let tracker = format!(
            "{{kind: github, repo: acme/widgets, api_url: \"{}\", token_env: SORTIE_TEST_GH_TOKEN}}",
            board.api_url()
        );
        write_config(dir.path(), &tracker, &forge.api_url(), &remote);
        let out = tick(dir.path(), None).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(board.pulls().len(), 0, "nothing opened on the tracker");
        let pulls = forge.pulls();
        assert_eq!(pulls.len(), 1, "{pulls:?}");
        let branch = common::ticket_branch(&dir.path().join("pipeline.yaml"), &number.to_string());
        assert_eq!(pulls[0].head, branch);
        assert!(
            board
                .issue(number)
                .labels
                .iter()
                .any(|l| l == "status:review"),
            "the ticket moved on the tracker"
        );
    }
}

/// `sortie tracker check` checks the forge after the tracker: its token and access to its
/// repository, a failed line (and exit 1) when either is wrong.
mod check {
    use super::*;

    use github_model::{GithubModel, LOGIN, TOKEN};

    /// The pipeline tests' config (a local board, the GitHub model as the forge) and its
    /// board.
    fn write_config(dir: &Path, forge_url: &str) {
        let remote = dir.join("remote.git");
        super::pipeline::write_config(dir, "{kind: local, path: board}", forge_url, &remote);
        let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args(["board", "init", "board"])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    async fn check(dir: &Path, token: Option<&str>) -> (bool, String) {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["tracker", "check", "--config", "pipeline.yaml"])
            .current_dir(dir)
            .env_remove("SORTIE_TEST_FORGE_TOKEN");
        if let Some(token) = token {
            cmd.env("SORTIE_TEST_FORGE_TOKEN", token);
        }
        let out = cmd.output().await.expect("run sortie");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tracker_check_checks_the_forge_token_and_repository() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), &model.api_url());

        let (ok, text) = check(dir.path(), Some(TOKEN)).await;
        assert!(ok, "{text}");
        assert!(
            text.contains(&format!(
                "ok   forge token: github:acme/widgets: authenticated as {LOGIN}"
            )),
            "{text}"
        );
        assert!(
            text.contains("ok   forge repository access: github:acme/widgets: "),
            "{text}"
        );

        let (ok, text) = check(dir.path(), None).await;
        assert!(!ok, "an unset forge token fails the check: {text}");
        assert!(
            text.contains(
                "FAIL forge token: github:acme/widgets: unauthorized: environment variable \
                 SORTIE_TEST_FORGE_TOKEN is not set"
            ),
            "{text}"
        );
        assert!(
            text.contains("tracker local"),
            "the tracker's own lines still print: {text}"
        );

        let (ok, text) = check(dir.path(), Some("not-the-token")).await;
        assert!(!ok, "a refused forge token fails the check: {text}");
        assert!(
            text.contains("FAIL forge token: github:acme/widgets: "),
            "{text}"
        );
        assert!(
            !text.contains("forge repository access"),
            "nothing more is checked with a refused token: {text}"
        );
    }
}

/// `forge:` settings: defaults like a tracker of that kind, mistakes refused with the
/// file, line and field.
mod config {
    use sortie::config::{Config, TrackerConfig};

    const BASE: &str = "tracker: {kind: local, path: board}\nagent: {command: [\"true\"]}\n\
        pipeline_stages:\n  - {role: backend, claim_status: todo, success_status: review}\n\
        workspace: {git: {url: r}}\n";

    fn load(text: &str) -> Result<Config, String> {
        Config::parse_str(text, Some(std::path::Path::new("/cfg/pipeline.yaml")))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_forge_lets_a_local_board_open_pull_requests_with_tracker_defaults() {
        let cfg = load(&format!(
            "{BASE}pull_request: {{after: backend}}\nforge: {{kind: github, repo: acme/widgets}}\n"
        ))
        .unwrap();
        let Some(TrackerConfig::Github {
            repo,
            token_env,
            api_url,
            ..
        }) = &cfg.forge
        else {
            panic!("{:?}", cfg.forge)
        };
        assert_eq!(
            (repo.as_str(), token_env.as_str(), api_url.as_str()),
            ("acme/widgets", "GITHUB_TOKEN", "https://api.github.com")
        );
        assert!(
            cfg.secret_env_names().contains(&"GITHUB_TOKEN".to_string()),
            "the forge token is a secret kept from agents: {:?}",
            cfg.secret_env_names()
        );
        let cfg = load(&format!(
            "{BASE}pull_request: {{after: backend}}\nforge: {{kind: gitlab, project: grp/widgets}}\n"
        ))
        .unwrap();
        let Some(TrackerConfig::Gitlab { url, token_env, .. }) = &cfg.forge else {
            panic!("{:?}", cfg.forge)
        };
        assert_eq!(
            (url.as_str(), token_env.as_str()),
            ("https://gitlab.com", "GITLAB_TOKEN")
        );
        // Without `forge:` a local board still cannot open one.
        let err = load(&format!("{BASE}pull_request: {{after: backend}}\n")).unwrap_err();
        assert!(err.contains("forge: {kind: github"), "{err}");
    }

    #[test]
    fn bad_forge_settings_are_refused_with_the_file_line_and_field() {
        let pr = "pull_request: {after: backend}\n";
        for (forge, says) in [
            (
                "forge: {kind: github}",
                "pipeline.yaml:7:1: forge.repo: missing required key `repo`",
            ),
            (
                "forge: {kind: github, repo: widgets}",
                "pipeline.yaml:7:29: forge.repo: expected `owner/name`",
            ),
            (
                "forge: {kind: github, repo: a/b, status_label_prefix: \"s:\"}",
                "forge.status_label_prefix",
            ),
            (
                "forge: {kind: jira, url: x}",
                "unknown value `jira`; expected one of: `github`, `gitlab`, `gitea`",
            ),
            (
                "forge: {kind: gitea, repo: a/b}",
                "forge.url: missing required key `url`",
            ),
            (
                "forge: {kind: gitea, url: \"ftp://x\", repo: a/b}",
                "forge.url",
            ),
            (
                "forge: {kind: gitlab, project: \"a b\"}",
                "forge.project: expected a project path",
            ),
            (
                "forge: {kind: gitlab, project: a/b, auth: basic}",
                "forge.auth: expected `private-token` or `bearer`",
            ),
            (
                "forge: {kind: github, repo: a/b, token_env: \"not a name\"}",
                "forge.token_env",
            ),
        ] {
            let err = load(&format!("{BASE}{pr}{forge}\n")).unwrap_err();
            assert!(err.contains(says), "{forge}: {err}");
        }
        let err = load(&format!("{BASE}forge: {{kind: github, repo: a/b}}\n")).unwrap_err();
        assert!(
            err.contains("pipeline.yaml:6:1: forge: `forge` is where pull requests open"),
            "a forge nothing uses: {err}"
        );
    }
}

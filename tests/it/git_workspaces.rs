//! Issue #21: git workspaces. Real `git`, a local bare repository as the remote, the
//! real binary ticking a local board (and the GitHub model for pull requests): a
//! worktree and a branch per ticket, the commits recorded on the ticket, pushed without
//! force, a pull request opened once, and no handoff for a run that changed nothing.

use crate::common;
use crate::github_model;

mod branches;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Sandbox;
use sortie::block::{parse_blocks, OutcomeBlock, SuccessBlock};

/// Run git in `dir`, assert it worked, return its stdout trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Seed", "-c", "user.email=seed@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git is installed (apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A bare repository at `root/remote.git` whose `main` has one commit, "initial".
/// Every update of its refs is logged, so a test can count pushes.
pub(crate) fn bare_remote(root: &Path) -> PathBuf {
    bare_repository(root, "remote", "initial")
}

/// A bare repository at `root/<name>.git` whose `main` has one commit, `subject`.
fn bare_repository(root: &Path, name: &str, subject: &str) -> PathBuf {
    let bare = format!("{name}.git");
    let remote = root.join(&bare);
    git(
        root,
        &["init", "--quiet", "--bare", "--initial-branch=main", &bare],
    );
    git(&remote, &["config", "core.logAllRefUpdates", "always"]);
    let seed_name = format!("seed-{name}");
    let seed = root.join(&seed_name);
    git(root, &["clone", "--quiet", &bare, &seed_name]);
    std::fs::write(seed.join("README"), format!("{name}\n")).unwrap();
    git(&seed, &["add", "README"]);
    git(&seed, &["commit", "--quiet", "-m", subject]);
    git(
        &seed,
        &["push", "--quiet", "origin", "HEAD:refs/heads/main"],
    );
    remote
}

/// What the agent does for the backend role.
#[derive(Clone, Copy)]
enum Backend {
    /// Commits like every other role.
    Commits,
    /// Changes nothing.
    Idles,
    /// Changes nothing and says nothing needed changing.
    DeclaresNoChange,
}

/// The agent: every role appends its name to `work.txt` and commits it (once per role,
/// so a re-run after a crash commits nothing new), the architect also leaves an
/// uncommitted `notes.txt`.
fn agent_script(dir: &Path, backend: Backend) -> PathBuf {
    let backend_case = match backend {
        Backend::Commits => "",
        Backend::Idles => {
            "if [ \"$SORTIE_ROLE\" = backend ]; then printf 'outcome: success\\nsummary: looked around\\n' > \"$SORTIE_RESULT_FILE\"; exit 0; fi\n"
        }
        Backend::DeclaresNoChange => {
            "if [ \"$SORTIE_ROLE\" = backend ]; then printf 'outcome: success\\nno_change_needed: true\\nsummary: already done upstream\\n' > \"$SORTIE_RESULT_FILE\"; exit 0; fi\n"
        }
    };
    let script = format!(
        "#!/bin/sh\ncat > /dev/null\necho \"$SORTIE_TICKET_ID $SORTIE_ROLE\" >> {runs}\n\
cp \"$SORTIE_PROMPT_FILE\" {dir}/prompt-$SORTIE_ROLE-$SORTIE_TICKET_ID.md\n{backend_case}\
if ! git log --format=%s | grep -q \"^$SORTIE_ROLE: \"; then\n\
  echo \"$SORTIE_ROLE\" >> work.txt\n\
  git add work.txt\n\
  git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"$SORTIE_ROLE: work on $SORTIE_TICKET_ID\"\n\
fi\n\
if [ \"$SORTIE_ROLE\" = architect ]; then echo draft > notes.txt; fi\n\
if [ \"$SORTIE_ROLE\" = qa ] && [ -f notes.txt ]; then cp notes.txt {dir}/notes-seen-by-qa-$SORTIE_TICKET_ID; fi\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
        runs = dir.join("runs.log").display(),
        dir = dir.display(),
    );
    let path = dir.join("agent.sh");
    std::fs::write(&path, script).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// A local board with architect -> backend -> qa in git worktrees of a bare remote.
fn sandbox(backend: Backend) -> (Sandbox, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let remote = bare_remote(dir.path());
    (board_on(dir, &remote, backend), remote)
}

/// A local board in `dir` with architect -> backend -> qa in git worktrees of `remote`.
fn board_on(dir: tempfile::TempDir, remote: &Path, backend: Backend) -> Sandbox {
    let agent = agent_script(dir.path(), backend);
    let config = format!(
        r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
concurrency: {{max_in_flight: 6, per_role_max_in_flight: 3}}
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "file://{remote}", base: main}}
pipeline_stages:
  - {{role: architect, claim_status: ready-for-design, success_status: design-approved, failure_status: design-blocked}}
  - {{role: backend, claim_status: design-approved, success_status: code-review, failure_status: blocked, requires_prior_role: architect, expects_changes: true}}
  - {{role: qa, claim_status: code-review, success_status: done, failure_status: qa-failed, requires_prior_role: backend}}
"#,
        roles = common::repo().join("roles").display(),
        agent = agent.display(),
        remote = remote.display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

pub(crate) fn successes(blocks: &[OutcomeBlock]) -> Vec<&SuccessBlock> {
    blocks
        .iter()
        .filter_map(|b| match b {
            OutcomeBlock::Success(s) => Some(s),
            OutcomeBlock::Failure(_) => None,
        })
        .collect()
}

#[test]
fn each_ticket_gets_its_own_branch_with_every_role_s_commits_pushed_and_recorded() {
    let (sb, remote) = sandbox(Backend::Commits);
    let ids: Vec<String> = (0..3)
        .map(|i| sb.add(&format!("widget {i}"), "ready-for-design", &[]))
        .collect();
    sb.drain(10);
    for id in &ids {
        assert_eq!(sb.ticket(id).status, "done", "ticket {id}");
        let branch = common::ticket_branch(&sb.config_path(), id);
        let log = git(&remote, &["log", "--format=%s", &branch, "--"]);
        assert_eq!(
            log.lines().collect::<Vec<_>>(),
            [
                format!("qa: work on {id}"),
                format!("backend: work on {id}"),
                format!("architect: work on {id}"),
                "initial".to_string()
            ],
            "the remote has ticket {id}'s branch with the three roles' commits in order"
        );
        let blocks = sb.blocks(id);
        let done = successes(&blocks);
        assert_eq!(
            done.iter().map(|s| s.role.as_str()).collect::<Vec<_>>(),
            ["architect", "backend", "qa"]
        );
        for (s, back) in done.iter().zip(["~2", "~1", ""]) {
            assert_eq!(s.artifacts["branch"], branch);
            assert_eq!(s.artifacts["base"], "main");
            assert_eq!(
                s.artifacts["commits"], "1",
                "{}: one commit this run",
                s.role
            );
            let expected = git(&remote, &["rev-parse", &format!("{branch}{back}")]);
            assert_eq!(
                s.artifacts["head"], expected,
                "{}'s head is on the remote",
                s.role
            );
            let subject = git(&remote, &["log", "-1", "--format=%h %s", &expected]);
            assert_eq!(s.artifacts["commit_log"], subject);
        }
        // Later roles see earlier roles' artifacts (`prior.<role>.artifacts`).
        let prompt =
            std::fs::read_to_string(sb.path().join(format!("prompt-backend-{id}.md"))).unwrap();
        assert!(
            prompt.contains(&format!("- head: {}", done[0].artifacts["head"])),
            "{prompt}"
        );
        // The architect's uncommitted notes are listed, and kept for the next roles.
        assert_eq!(done[0].artifacts["uncommitted"], "?? notes.txt");
        assert_eq!(
            std::fs::read_to_string(sb.path().join(format!("notes-seen-by-qa-{id}"))).unwrap(),
            "draft\n",
            "qa found the architect's uncommitted notes in the worktree"
        );
    }
    // Two tickets never share a branch.
    let branches = git(&remote, &["branch", "--list", "sortie/*"]);
    assert_eq!(branches.lines().count(), 3, "{branches}");

    // Terminal tickets: their worktrees went with the write-back to `done` (and pruning
    // forgets stale ones); the branches stay.
    sb.ok(&["workspaces", "prune", "--config", "pipeline.yaml"]);
    for id in &ids {
        assert!(!sb.path().join("state/workspaces").join(id).exists());
        let branch = common::ticket_branch(&sb.config_path(), id);
        git(&remote, &["rev-parse", "--verify", &branch]);
    }
    let mirror = std::fs::read_dir(sb.path().join("state/git"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "git"))
        .expect("one mirror under state/git");
    let worktrees = git(&mirror, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        worktrees.matches("worktree ").count(),
        1,
        "only the bare mirror is left: {worktrees}"
    );
}

#[test]
fn a_run_that_changes_nothing_on_a_stage_expecting_changes_is_held() {
    let (sb, _remote) = sandbox(Backend::Idles);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // architect
    sb.tick(); // backend: nothing changed
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(f.reason_code, "agent.no_changes");
    assert_eq!(f.category.as_str(), "policy");
    assert_eq!(f.next_action.as_str(), "manual");
    assert_eq!(
        f.to_status, "design-approved",
        "held: no transition, not blocked"
    );
    assert!(f.detail.contains("sortie/"), "{}", f.detail);
    assert_eq!(sb.ticket(&id).status, "design-approved");
    // Held: the next tick does not run it again.
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
}

#[test]
fn a_role_may_declare_that_nothing_needed_changing() {
    let (sb, _remote) = sandbox(Backend::DeclaresNoChange);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick();
    sb.tick();
    assert_eq!(sb.ticket(&id).status, "code-review");
    let blocks = sb.blocks(&id);
    let backend = successes(&blocks)
        .into_iter()
        .find(|s| s.role == "backend")
        .expect("a backend success");
    assert_eq!(backend.summary, "already done upstream");
    assert_eq!(backend.artifacts["no_change_needed"], "true");
    assert_eq!(backend.artifacts["commits"], "0");
}

#[test]
fn a_worktree_deleted_by_hand_is_recreated_from_the_branch() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // architect commits and pushes
    let ws = sb.path().join("state/workspaces").join(&id);
    std::fs::remove_dir_all(&ws).unwrap();
    sb.drain(5);
    assert_eq!(sb.ticket(&id).status, "done");
    assert!(!ws.exists(), "the done ticket's worktree is removed");
    let branch = common::ticket_branch(&sb.config_path(), &id);
    assert_eq!(
        git(&remote, &["show", &format!("{branch}:work.txt")]),
        "architect\nbackend\nqa",
        "the architect's committed work came back with the branch"
    );
    let log = git(&remote, &["log", "--format=%s", &branch, "--"]);
    assert_eq!(log.lines().count(), 4, "{log}");
}

mod pull_requests {
    use super::*;

    use github_model::{GithubModel, TOKEN};

    fn write_config(dir: &Path, api_url: &str, remote: &Path, agent: &Path) {
        let text = format!(
            r#"
tracker:
  kind: github
  repo: acme/widgets
  api_url: "{api_url}"
  token_env: SORTIE_TEST_GH_TOKEN
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "{remote}", branch: "sortie/{{{{ ticket.id }}}}"}}
pull_request: {{after: backend, title: "{{{{ ticket.id }}}}: {{{{ ticket.title }}}}", draft: true}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: review}}
"#,
            roles = common::repo().join("roles").display(),
            agent = agent.display(),
            remote = remote.display(),
        );
        std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
    }

    async fn tick(dir: &Path, fault: Option<&str>) -> std::process::Output {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .current_dir(dir)
            .env("SORTIE_TEST_GH_TOKEN", TOKEN)
            .env_remove("SORTIE_FAULT");
        match fault {
            Some(fault) => cmd.env("SORTIE_FAULT", fault),
            // Later than every lease the killed tick held (claim and outbox write lease).
            None => cmd.env("SORTIE_CLOCK_OFFSET_SECONDS", "3600"),
        };
        cmd.output().await.expect("run sortie")
    }

    /// A crash after the push and the pull request (before and after the outcome is
    /// stored), then the next tick: one push on the remote, one pull request on the
    /// model, its URL on the ticket.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crash_after_the_push_then_a_replay_opens_one_pull_request_and_pushes_once() {
        for fault in ["after_pull_request", "after_outbox"] {
            let model = GithubModel::start().await;
            let number = model.add_issue("Fix the widget", &["status:todo"]);
            let dir = tempfile::tempdir().unwrap();
            let remote = bare_remote(dir.path());
            let agent = agent_script(dir.path(), Backend::Commits);
            // A file path, not a URL: local paths work too.
            write_config(dir.path(), &model.api_url(), &remote, &agent);

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
            let branch = format!("sortie/{number}");
            assert_eq!(
                (pull.head.as_str(), pull.base.as_str(), pull.draft),
                (branch.as_str(), "main", true)
            );
            assert_eq!(pull.title, format!("{number}: Fix the widget"));
            let pushes = git(
                &remote,
                &[
                    "reflog",
                    "show",
                    "--format=%H",
                    &format!("refs/heads/{branch}"),
                ],
            );
            assert_eq!(pushes.lines().count(), 1, "{fault}: pushed once: {pushes}");

            let issue = model.issue(number);
            assert!(
                issue.labels.iter().any(|l| l == "status:review"),
                "{fault}: {:?}",
                issue.labels
            );
            let blocks: Vec<OutcomeBlock> = issue
                .comments
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
        }
    }
}

#[test]
fn a_push_the_remote_rejects_is_a_transient_failure_with_git_s_words() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // the architect's commit is pushed
    let branch = common::ticket_branch(&sb.config_path(), &id);
    let before = git(&remote, &["rev-parse", &branch]);
    // The branch becomes protected: the remote's hook refuses every update of it.
    let hook = remote.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'protected branch' >&2\nexit 1\n").unwrap();
    Command::new("chmod").arg("+x").arg(&hook).status().unwrap();

    sb.tick(); // backend commits on top of the architect's work; the push is refused
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(f.reason_code, "git.push_rejected", "{f:?}");
    assert_eq!(f.category.as_str(), "transient");
    assert!(f.detail.contains("rejected"), "git's words: {}", f.detail);
    assert!(f.detail.contains("protected branch"), "{}", f.detail);
    assert_eq!(
        git(&remote, &["rev-parse", &branch]),
        before,
        "never forced"
    );
}

/// Found by the two-host reaction test (#32): a host reused its own worktree of the
/// ticket's branch after another host (or a person) had pushed on top of it, and its
/// push was refused on every retry.
#[test]
fn a_worktree_behind_its_branch_on_the_remote_is_fast_forwarded_before_the_run() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // the architect's commit is pushed; this host keeps its worktree
    let branch = common::ticket_branch(&sb.config_path(), &id);
    let other = sb.path().join("other");
    git(sb.path(), &["clone", "--quiet", "remote.git", "other"]);
    git(&other, &["checkout", "--quiet", &branch]);
    std::fs::write(other.join("theirs.txt"), "theirs\n").unwrap();
    git(&other, &["add", "theirs.txt"]);
    git(
        &other,
        &["commit", "--quiet", "-m", "a person's fix on top"],
    );
    git(&other, &["push", "--quiet", "origin", &branch]);

    sb.tick(); // backend
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Success(backend)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(backend.role, "backend");
    let log = git(&remote, &["log", "--format=%s", &branch, "--"]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            format!("backend: work on {id}"),
            "a person's fix on top".to_string(),
            format!("architect: work on {id}"),
            "initial".to_string()
        ],
        "backend worked on top of the pushed fix and its push went through"
    );
    let worktree = sb.path().join("state/workspaces").join(&id);
    assert_eq!(
        std::fs::read_to_string(worktree.join("theirs.txt")).unwrap(),
        "theirs\n"
    );
}

#[test]
fn ticket_text_in_the_branch_template_becomes_a_valid_ref_and_never_an_option() {
    let (sb, remote) = sandbox(Backend::Commits);
    let config = std::fs::read_to_string(sb.config_path()).unwrap().replace(
        "base: main}",
        "base: main, branch: \"{{ ticket.title }}/{{ ticket.id }}\"}",
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb
        .ok(&[
            "board",
            "add",
            "--board",
            "board",
            "--title=--upload-pack=touch pwned",
            "--status",
            "ready-for-design",
        ])
        .trim()
        .to_string();
    sb.tick();
    let blocks = sb.blocks(&id);
    let done = successes(&blocks);
    assert_eq!(done.len(), 1, "{blocks:?}");
    let branch = &done[0].artifacts["branch"];
    assert!(
        branch.starts_with("_--upload-pack-touch-pwned/"),
        "sanitized, with a hash: {branch}"
    );
    assert_eq!(sortie::config::branch_name_problem(branch), None);
    git(
        &remote,
        &["rev-parse", "--verify", "--end-of-options", branch],
    );
    assert!(!sb.path().join("pwned").exists());
    assert!(!sb.path().join("state/pwned").exists());
}

mod config {
    use sortie::config::Config;

    fn load(extra: &str, tracker: &str) -> Result<Config, String> {
        let text = format!(
            "tracker: {tracker}\nagent: {{command: [\"true\"]}}\n\
             pipeline_stages:\n  - {{role: backend, claim_status: todo, success_status: review}}\n{extra}"
        );
        Config::parse_str(&text, Some(std::path::Path::new("/cfg/pipeline.yaml")))
            .map_err(|e| e.to_string())
    }

    const LOCAL: &str = "{kind: local, path: board}";
    const GITHUB: &str = "{kind: github, repo: acme/widgets}";

    #[test]
    fn defaults_and_local_paths() {
        let cfg = load("workspace: {git: {url: ../repo}}\n", LOCAL).unwrap();
        let git = cfg.workspace.git.unwrap();
        assert_eq!(git.url, "/repo");
        assert_eq!(git.base, "main");
        assert_eq!(git.branch, "sortie/{{ board.key }}/{{ ticket.id }}");
        assert!(git.push);
        let cfg = load(
            "workspace: {git: {url: \"git@host:org/repo.git\"}}\n",
            LOCAL,
        )
        .unwrap();
        assert_eq!(cfg.workspace.git.unwrap().url, "git@host:org/repo.git");
    }

    #[test]
    fn bad_git_settings_are_refused_with_the_field_named() {
        for (extra, says) in [
            ("workspace: {git: {base: main}}\n", "`url` is required"),
            (
                "workspace: {git: {url: \"--upload-pack=x\"}}\n",
                "workspace.git.url",
            ),
            (
                "workspace: {git: {url: r, base: \"a..b\"}}\n",
                "workspace.git.base",
            ),
            (
                "workspace: {git: {url: r, branch: \"sortie/fixed\"}}\n",
                "two tickets would share a branch",
            ),
            (
                "workspace: {git: {url: r, branch: \"{{ ticket.nope }}\"}}\n",
                "does not render",
            ),
            ("workspace: {git: {url: r, pushh: true}}\n", "pushh"),
        ] {
            let err = load(extra, LOCAL).unwrap_err();
            assert!(err.contains(says), "{extra}: {err}");
        }
    }

    #[test]
    fn a_pull_request_needs_a_pushed_branch_a_known_role_and_a_forge() {
        let git = "workspace: {git: {url: r}}\n";
        let ok = load(&format!("{git}pull_request: {{after: backend}}\n"), GITHUB).unwrap();
        let pr = ok.pull_request.unwrap();
        assert_eq!(pr.title, "{{ ticket.id }}: {{ ticket.title }}");
        assert!(pr.draft);
        for (extra, tracker, says) in [
            (
                "pull_request: {after: backend}\n".to_string(),
                GITHUB,
                "configure `workspace.git`",
            ),
            (
                format!("{git}pull_request: {{after: qa}}\n"),
                GITHUB,
                "no stage's role",
            ),
            (
                "workspace: {git: {url: r, push: false}}\npull_request: {after: backend}\n"
                    .to_string(),
                GITHUB,
                "push` must be true",
            ),
            (
                format!("{git}pull_request: {{after: backend}}\n"),
                LOCAL,
                "kind: github",
            ),
        ] {
            let err = load(&extra, tracker).unwrap_err();
            assert!(err.contains(says), "{extra}: {err}");
        }
    }
}

/// GitLab merge requests and Gitea pull requests are opened once too, through the same
/// adapter method, against their models.
mod forge_merge_requests {
    use sortie::tracker::gitea::{GiteaOptions, GiteaSettings, GiteaTracker};
    use sortie::tracker::gitlab::{GitlabOptions, GitlabSettings, GitlabTracker};
    use sortie::tracker::labels::LabelScheme;
    use sortie::tracker::{Forge, PullRequestSpec};

    use crate::{gitea_model, gitlab_model};

    fn spec() -> PullRequestSpec {
        PullRequestSpec {
            ticket_id: "7".into(),
            head: "sortie/7".into(),
            base: "main".into(),
            title: "7: Fix the widget".into(),
            body: "Work on ticket 7, opened by sortie.\n".into(),
            draft: true,
        }
    }

    fn labels(prefix: &str) -> LabelScheme {
        LabelScheme {
            status_prefix: format!("status{prefix}"),
            priority_prefix: format!("priority{prefix}"),
        }
    }

    #[tokio::test]
    async fn gitlab_opens_one_merge_request_per_branch() {
        let model = gitlab_model::start().await;
        let settings = GitlabSettings {
            url: model.url(),
            project: gitlab_model::PROJECT.into(),
            bearer: false,
            labels: labels("::"),
            close_on: Vec::new(),
        };
        let t = GitlabTracker::new(
            settings,
            gitlab_model::TOKEN.into(),
            GitlabOptions::default(),
        )
        .unwrap();
        let first = t.open_pull_request(&spec()).await.unwrap();
        let again = t.open_pull_request(&spec()).await.unwrap();
        assert!(!first.reused && again.reused);
        assert_eq!(first.url, again.url);
        let pulls = model.pulls();
        assert_eq!(pulls.len(), 1, "{pulls:?}");
        assert_eq!(pulls[0].title, "Draft: 7: Fix the widget");
        assert_eq!(
            (pulls[0].head.as_str(), pulls[0].base.as_str()),
            ("sortie/7", "main")
        );
        assert!(first.url.ends_with("/-/merge_requests/1"), "{}", first.url);
    }

    #[tokio::test]
    async fn gitea_opens_one_pull_request_per_branch() {
        let model = gitea_model::start().await;
        let settings = GiteaSettings {
            url: model.url(),
            repo: gitea_model::REPO.into(),
            labels: labels("/"),
            close_on: Vec::new(),
        };
        let t = GiteaTracker::new(settings, gitea_model::TOKEN.into(), GiteaOptions::default())
            .unwrap();
        let first = t.open_pull_request(&spec()).await.unwrap();
        let again = t.open_pull_request(&spec()).await.unwrap();
        assert!(!first.reused && again.reused);
        assert_eq!(first.url, again.url);
        let pulls = model.pulls();
        assert_eq!(pulls.len(), 1, "{pulls:?}");
        assert_eq!(pulls[0].title, "WIP: 7: Fix the widget");
    }
}

/// Issue #29 (4): an agent edits the mirror's config (its worktree shares it) or plants
/// hooks there; sortie's push and fetch still go to the configured repository, by its
/// URL, and run none of the agent's hooks.
mod redirection {
    use super::*;

    /// One backend stage whose agent commits once in its worktree, then runs `attack`
    /// there (`$EVIL` is the other repository's URL, `$REMOTE` the configured one,
    /// `$MARKS` a directory for hooks to leave marks in). Returns the sandbox, the
    /// configured remote and the other repository (whose `main` is another commit).
    fn sandbox(attack: &str) -> (Sandbox, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let evil = bare_repository(dir.path(), "evil", "not the configured repository");
        let marks = dir.path().join("marks");
        std::fs::create_dir(&marks).unwrap();
        let script = format!(
            "#!/bin/sh\ncat > /dev/null\nset -e\n\
EVIL=file://{evil}\nREMOTE=file://{remote}\nMARKS={marks}\n\
if ! git log --format=%s | grep -q \"^$SORTIE_ROLE: \"; then\n\
  echo \"$SORTIE_ROLE\" >> work.txt\n\
  git add work.txt\n\
  git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"$SORTIE_ROLE: work on $SORTIE_TICKET_ID\"\n\
fi\n\
{attack}\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
            evil = evil.display(),
            remote = remote.display(),
            marks = marks.display(),
        );
        let agent = dir.path().join("agent.sh");
        std::fs::write(&agent, script).unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(&agent)
            .status()
            .unwrap();
        let config = format!(
            r#"
tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "file://{remote}", base: main}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: done, failure_status: blocked}}
"#,
            roles = common::repo().join("roles").display(),
            agent = agent.display(),
            remote = remote.display(),
        );
        std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
        let sb = Sandbox { dir };
        sb.ok(&["board", "init", "board"]);
        (sb, remote, evil)
    }

    /// The ticket's branch is on the configured remote with the agent's commit, and the
    /// other repository received nothing.
    fn assert_pushed_to_the_configured_repository_only(
        sb: &Sandbox,
        id: &str,
        remote: &Path,
        evil: &Path,
    ) {
        let blocks = sb.blocks(id);
        assert_eq!(sb.ticket(id).status, "done", "{blocks:?}");
        let branch = common::ticket_branch(&sb.config_path(), id);
        assert_eq!(
            git(remote, &["log", "--format=%s", &branch, "--"]),
            format!("backend: work on {id}\ninitial"),
            "the configured repository has the ticket's branch"
        );
        assert_eq!(
            git(evil, &["for-each-ref", "--format=%(refname)"]),
            "refs/heads/main",
            "the other repository received no push"
        );
        let done = successes(&blocks);
        assert_eq!(
            done[0].artifacts["head"],
            git(remote, &["rev-parse", &branch])
        );
    }

    #[test]
    fn a_push_ignores_a_remote_url_the_agent_rewrote() {
        let (sb, remote, evil) = sandbox("git config remote.origin.url \"$EVIL\"");
        let id = sb.add("widget", "todo", &[]);
        sb.drain(3);
        assert_pushed_to_the_configured_repository_only(&sb, &id, &remote, &evil);
    }

    /// Also a remote *named* by the configured URL: git would use its `pushurl` for a
    /// push to that URL given on the command line.
    #[test]
    fn a_push_ignores_a_push_url_the_agent_set() {
        let (sb, remote, evil) = sandbox(
            "git config remote.origin.pushurl \"$EVIL\"\n\
             git config \"remote.$REMOTE.pushurl\" \"$EVIL\"\n\
             git config \"remote.$REMOTE.url\" \"$EVIL\"",
        );
        let id = sb.add("widget", "todo", &[]);
        sb.drain(3);
        assert_pushed_to_the_configured_repository_only(&sb, &id, &remote, &evil);
    }

    #[test]
    fn a_push_ignores_an_instead_of_rule_the_agent_added() {
        let (sb, remote, evil) = sandbox(
            "git config \"url.$EVIL.insteadOf\" \"$REMOTE\"\n\
             git config \"url.$EVIL.pushInsteadOf\" \"$REMOTE\"",
        );
        let id = sb.add("widget", "todo", &[]);
        sb.drain(3);
        assert_pushed_to_the_configured_repository_only(&sb, &id, &remote, &evil);
    }

    /// Hooks in the mirror's `hooks/` and in a `core.hooksPath` the agent set: sortie's
    /// push (and its fetch, ref updates and worktree creation) run none of them. (The
    /// hooks mark only a git that does not run in an agent's environment: the agent's
    /// own commits run them, which is the agent's business.)
    #[test]
    fn sortie_s_git_runs_no_hook_the_agent_planted() {
        let hooks = ["pre-push", "reference-transaction", "post-checkout"]
            .iter()
            .map(|hook| {
                format!(
                    "printf '#!/bin/sh\\n[ -n \"$SORTIE_ROLE\" ] || touch %s/{hook}\\ncat > /dev/null\\n' \"$MARKS\" > \"$DIR/{hook}\"\n\
                     chmod +x \"$DIR/{hook}\""
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let attack = format!(
            "if [ ! -f \"$MARKS/planted\" ]; then\n\
             touch \"$MARKS/planted\"\n\
             DIR=\"$(git rev-parse --path-format=absolute --git-common-dir)/hooks\"\n{hooks}\n\
             DIR=\"$MARKS/../planted-hooks\"; mkdir -p \"$DIR\"\n{hooks}\n\
             git config core.hooksPath \"$DIR\"\n\
             fi"
        );
        let (sb, remote, evil) = sandbox(&attack);
        let first = sb.add("widget", "todo", &[]);
        sb.drain(3);
        // A second ticket: its fetch and worktree come after the hooks were planted.
        let second = sb.add("gadget", "todo", &[]);
        sb.drain(3);
        for id in [&first, &second] {
            assert_pushed_to_the_configured_repository_only(&sb, id, &remote, &evil);
        }
        let marks: Vec<String> = std::fs::read_dir(sb.path().join("marks"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name != "planted")
            .collect();
        assert_eq!(marks, Vec::<String>::new(), "no planted hook ran");
    }

    /// The fetch too: a ticket started after another ticket's agent redirected `origin`
    /// branches from the configured repository's `main` (pushes are off, so only the
    /// fetch can bring the other repository's `main` in).
    #[test]
    fn a_fetch_ignores_the_remote_settings_the_agent_changed() {
        let (sb, _remote, _evil) = sandbox(
            "git config remote.origin.url \"$EVIL\"\n\
             git config \"url.$EVIL.insteadOf\" \"$REMOTE\"",
        );
        let config = std::fs::read_to_string(sb.config_path())
            .unwrap()
            .replace("base: main}", "base: main, push: false}");
        std::fs::write(sb.config_path(), config).unwrap();
        let first = sb.add("widget", "todo", &[]);
        sb.drain(3);
        let second = sb.add("gadget", "todo", &[]);
        sb.drain(3);
        let mirror = std::fs::read_dir(sb.path().join("state/git"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "git"))
            .expect("one mirror under state/git");
        for id in [&first, &second] {
            assert_eq!(sb.ticket(id).status, "done", "{:?}", sb.blocks(id));
            assert_eq!(
                git(
                    &mirror,
                    &[
                        "log",
                        "--format=%s",
                        &common::ticket_branch(&sb.config_path(), id),
                        "--"
                    ]
                ),
                format!("backend: work on {id}\ninitial"),
                "ticket {id} branched from the configured repository's main"
            );
        }
        assert_eq!(
            git(
                &mirror,
                &["log", "--format=%s", "refs/remotes/origin/main", "--"]
            ),
            "initial"
        );
    }
}

/// Issue #29 (5): many tickets in flight on one repository: fetches (serialized) and
/// pushes (not) never fail each other with a ref lock error. Sixteen tickets at once,
/// so that before the fix ("cannot lock ref 'refs/remotes/origin/sortie/N'") it failed
/// in every one of five drains; `agent::git`'s unit test shows why it cannot now.
#[test]
fn sixteen_concurrent_runs_on_one_repository_drain_with_no_git_failure() {
    let (sb, remote) = sandbox(Backend::Commits);
    let config = std::fs::read_to_string(sb.config_path()).unwrap().replace(
        "concurrency: {max_in_flight: 6, per_role_max_in_flight: 3}",
        "concurrency: {max_in_flight: 16, per_role_max_in_flight: 16}",
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let ids: Vec<String> = (0..16)
        .map(|i| sb.add(&format!("widget {i}"), "ready-for-design", &[]))
        .collect();
    sb.drain(10);
    for id in &ids {
        let blocks = sb.blocks(id);
        let failures: Vec<_> = blocks
            .iter()
            .filter_map(|b| match b {
                OutcomeBlock::Failure(f) => Some((&f.reason_code, &f.detail)),
                OutcomeBlock::Success(_) => None,
            })
            .collect();
        assert_eq!(failures, Vec::<(&String, &String)>::new(), "ticket {id}");
        assert_eq!(sb.ticket(id).status, "done", "ticket {id}");
        let branch = common::ticket_branch(&sb.config_path(), id);
        let log = git(&remote, &["log", "--format=%s", &branch, "--"]);
        assert_eq!(log.lines().count(), 4, "ticket {id}: {log}");
    }
}

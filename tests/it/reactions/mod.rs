//! Issue #32, the pull-request loop on every forge: red CI, review comments, conflicts
//! and merges flow back through the stage graph. Real `git` with a local bare remote,
//! the real binary ticking a local board, a stateful forge model (backed by that
//! remote) as the forge. The scenarios are written once against [`PullForge`]; each
//! forge's file implements it for its model and instantiates the suite with
//! [`suite!`], so `cargo test --test it reactions::github` runs GitHub's.

mod forge_models;
mod github;

use crate::common;
use crate::git_workspaces::bare_remote;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::tracker::local::LocalBoard;
use sortie::tracker::Tracker;

/// What the scenarios need of a forge model: the vendor's own spelling of checks,
/// reviews and merges is the implementation's business.
pub trait PullForge: Sized + Send + Sync + 'static {
    /// The forge's login for the token sortie is given (its own identity).
    const SELF_LOGIN: &'static str;
    /// Requests one tick spends on an idle watched pull request, at most.
    const IDLE_REQUESTS: usize;

    /// A model serving `remote`'s branches as its pull requests' heads and bases.
    fn start(remote: &Path) -> impl Future<Output = Self> + Send;
    /// The `forge:` section's lines (indented two spaces), token from
    /// `SORTIE_TEST_FORGE_TOKEN`.
    fn forge_yaml(&self) -> String;
    /// The token the model accepts.
    fn token(&self) -> &'static str;
    /// The model's clock.
    fn now(&self) -> chrono::DateTime<chrono::Utc>;
    /// Move the model's clock on.
    fn advance(&self, secs: i64);
    /// The numbers of every pull request on the model.
    fn pull_numbers(&self) -> Vec<u64>;
    /// Pull request `number` as the model holds it now.
    fn pull(&self, number: u64) -> PullView;
    /// A failed check `name` on `sha`; the texts the fixing stage's prompt must show.
    fn fail_check(&self, sha: &str, name: &str) -> Vec<String>;
    /// A passing check `name` on `sha`.
    fn pass_check(&self, sha: &str, name: &str);
    /// A review comment by `author` on `path:line`; its id.
    fn add_review_comment(
        &self,
        number: u64,
        author: &str,
        path: &str,
        line: u64,
        body: &str,
    ) -> u64;
    /// The thread of comment `id` resolved by a person.
    fn resolve_thread(&self, id: u64);
    /// The pull request's labels set to `labels`.
    fn set_pull_labels(&self, number: u64, labels: &[&str]);
    /// Every merge sortie asked for: `(expected head sha sent, method)`.
    fn merge_calls(&self) -> Vec<(String, String)>;
    /// A person merges pull request `number`; the merge commit.
    fn merge_by_person(&self, number: u64, who: &str) -> String;
    /// The paths pull request `number`'s head conflicts on with its base.
    fn conflicting_paths(&self, number: u64) -> Vec<String>;
    /// `f` runs inside the next merge request, before the head sha is compared.
    fn before_merge(&self, f: impl FnOnce() + Send + 'static);
    /// The requests served, one line each.
    fn log(&self) -> Vec<String>;
    /// Forget the requests served so far.
    fn clear_log(&self);
    /// Rate-limit units spent so far, on forges that count them.
    fn units_used(&self) -> Option<u64>;
}

/// A pull request as a scenario looks at it.
#[derive(Debug, Clone)]
pub struct PullView {
    pub head_sha: String,
    pub merged: bool,
    pub merge_commit: Option<String>,
}

/// Every scenario as a test named after it, for forge model `$forge`.
macro_rules! suite {
    ($forge:ty) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_red_check_comes_back_through_backend_and_qa_and_the_green_pull_request_merges() {
            crate::reactions::red_check_round_trip::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_review_burst_is_one_round_and_a_resolved_thread_is_not_handed_over() {
            crate::reactions::review_burst::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_conflict_goes_to_backend_and_a_merge_by_a_person_closes_the_ticket() {
            crate::reactions::conflict_then_person_merges::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_push_racing_the_merge_makes_it_fail_and_retry() {
            crate::reactions::push_races_merge::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn rounds_run_out_into_the_escalation_status_and_a_hold_label_stops_everything() {
            crate::reactions::rounds_run_out_and_hold::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_crash_anywhere_in_a_reaction_leaves_one_block_and_one_move() {
            crate::reactions::crash_anywhere::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_dry_run_says_what_it_would_react_to_and_writes_nothing() {
            crate::reactions::dry_run::<$forge>().await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn reactions_cost_an_idle_watched_pull_request() {
            crate::reactions::idle_cost::<$forge>().await
        }
    };
}
pub(crate) use suite;

const WATCH_CI: &str = "  watch: [qa-passed]\n  ci_failure: {to: backend, max_rounds: 3}\n  \
    merge_conflict: {to: backend}\n  auto_merge: {method: squash}\n  merged: {to: done}\n";

struct Rig<F> {
    model: F,
    dir: tempfile::TempDir,
    remote: PathBuf,
    id: String,
    /// How to read the ticket's status when the model is the board too (`None`: the
    /// local board `board/` in `dir` is).
    status_on_model: Option<fn(&F, &str) -> String>,
}

/// A forge model that is also the tracker (GitHub Issues on the GitHub model).
pub trait PullBoard: PullForge {
    /// The `tracker:` line making the model the board, token from
    /// `SORTIE_TEST_FORGE_TOKEN`.
    fn tracker_yaml(&self) -> String;
    /// A person opens a ticket in `status`; its id.
    fn add_ticket(&self, title: &str, status: &str) -> String;
    /// Ticket `id`'s status on the model.
    fn ticket_status(&self, id: &str) -> String;
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Person",
            "-c",
            "user.email=person@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed (apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The agent: saves its prompt; backend merges the base when told of a conflict, then
/// commits one new line per run; qa only reports success.
fn agent(dir: &Path) -> PathBuf {
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    let script = format!(
        "#!/bin/sh\nn=$(ls {p} | wc -l)\nf={p}/$SORTIE_ROLE-$n.txt\ncat > $f\n\
if [ \"$SORTIE_ROLE\" = backend ]; then\n\
  if grep -q 'conflicts with' $f; then\n\
    git fetch -q origin main && git -c user.name=Agent -c user.email=agent@example.com merge -q -X ours --no-edit FETCH_HEAD\n\
  fi\n\
  echo \"run $n\" >> work.txt\n\
  git add work.txt\n\
  git -c user.name=Agent -c user.email=agent@example.com commit -q -m \"backend: run $n\"\n\
fi\n\
printf 'outcome: success\\nsummary: ok\\n' > \"$SORTIE_RESULT_FILE\"\n",
        p = prompts.display()
    );
    let path = dir.join("agent.sh");
    std::fs::write(&path, script).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

impl<F: PullBoard> Rig<F> {
    /// A rig whose ticket is on the model itself: the model is the tracker and,
    /// through it, the forge (no `forge:` section).
    async fn on_model_board(reactions: &str) -> Rig<F> {
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let model = F::start(&remote).await;
        let config = rig_config(dir.path(), &remote, &model.tracker_yaml(), reactions);
        std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
        let id = model.add_ticket("Fix the widget", "todo");
        Rig {
            model,
            dir,
            remote,
            id,
            status_on_model: Some(F::ticket_status),
        }
    }
}

/// The rig's pipeline: backend then qa, a pull request after backend, `tracker`
/// (with its `forge:` lines if any) and `reactions` as given.
fn rig_config(dir: &Path, remote: &Path, tracker: &str, reactions: &str) -> String {
    format!(
        r#"
{tracker}
state_root: state
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
{reactions}"#,
        roles = common::repo().join("roles").display(),
        agent = agent(dir).display(),
        remote = remote.display(),
    )
}

impl<F: PullForge> Rig<F> {
    async fn new(reactions: &str) -> Rig<F> {
        let dir = tempfile::tempdir().unwrap();
        let remote = bare_remote(dir.path());
        let model = F::start(&remote).await;
        let tracker = format!(
            "tracker: {{kind: local, path: board}}\nforge:\n{}",
            model.forge_yaml()
        );
        let text = rig_config(dir.path(), &remote, &tracker, reactions);
        std::fs::write(dir.path().join("pipeline.yaml"), text).unwrap();
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
        Rig {
            model,
            dir,
            remote,
            id,
            status_on_model: None,
        }
    }

    /// One tick of the real binary, its clock on the model's (so review times and
    /// quiet windows line up), with `fault` armed if given.
    async fn tick_with(&self, fault: Option<&str>, extra: &[&str]) -> Output {
        let offset = (self.model.now() - chrono::Utc::now()).num_seconds();
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["pipeline", "tick", "--config", "pipeline.yaml"])
            .args(extra)
            .current_dir(self.dir.path())
            .env("SORTIE_TEST_FORGE_TOKEN", self.model.token())
            .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
            .env_remove("SORTIE_FAULT");
        if let Some(fault) = fault {
            cmd.env("SORTIE_FAULT", fault);
        }
        cmd.output().await.expect("run sortie")
    }

    /// A tick that must succeed; its report.
    async fn tick(&self) -> String {
        self.model.advance(1);
        let out = self.tick_with(None, &[]).await;
        let report = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{report}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        report
    }

    fn board(&self) -> LocalBoard {
        LocalBoard::open(&self.dir.path().join("board")).unwrap()
    }

    async fn status(&self) -> String {
        match self.status_on_model {
            Some(status) => status(&self.model, &self.id),
            None => self.board().get(&self.id).await.unwrap().status,
        }
    }

    async fn blocks(&self) -> Vec<OutcomeBlock> {
        self.board()
            .comments(&self.id)
            .await
            .unwrap()
            .iter()
            .flat_map(|c| parse_blocks(&c.body))
            .filter_map(Result::ok)
            .map(|p| p.block)
            .collect()
    }

    /// The reaction blocks on the ticket, as `(reason code or "success", to_status)`.
    async fn reaction_blocks(&self) -> Vec<(String, String)> {
        self.blocks()
            .await
            .into_iter()
            .filter(|b| b.role() == "reactions")
            .map(|b| match b {
                OutcomeBlock::Failure(f) => (f.reason_code, f.to_status),
                OutcomeBlock::Success(s) => ("success".to_string(), s.to_status),
            })
            .collect()
    }

    /// Tick until the ticket is in `status` (at most `ticks`).
    async fn until(&self, status: &str, ticks: usize) {
        for _ in 0..ticks {
            if self.status().await == status {
                return;
            }
            self.tick().await;
        }
        assert_eq!(self.status().await, status, "after {ticks} ticks");
    }

    /// The pull request sortie opened (the only one) and its head now.
    fn pull(&self) -> (u64, String) {
        let pulls = self.model.pull_numbers();
        assert_eq!(pulls.len(), 1, "one pull request per ticket: {pulls:?}");
        (pulls[0], self.model.pull(pulls[0]).head_sha)
    }

    fn prompt(&self, role: &str, n: usize) -> String {
        let dir = self.dir.path().join("prompts");
        let mut runs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{role}-"))
            })
            .collect();
        runs.sort_by_key(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            name.rsplit('-').next().unwrap().parse::<u32>().unwrap()
        });
        std::fs::read_to_string(&runs[n]).unwrap()
    }

    /// A person pushes a commit to `branch` of the remote that writes `text` to `file`.
    fn person_pushes(&self, branch: &str, file: &str, text: &str) {
        person_pushes(&self.remote, branch, file, text);
    }
}

fn person_pushes(remote: &Path, branch: &str, file: &str, text: &str) {
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &[
            "clone",
            "-q",
            "--branch",
            branch,
            &remote.display().to_string(),
            "c",
        ],
    );
    let clone = work.path().join("c");
    std::fs::write(clone.join(file), text).unwrap();
    git(&clone, &["add", file]);
    git(&clone, &["commit", "-q", "-m", "a person's change"]);
    git(&clone, &["push", "-q", "origin", branch]);
}

/// Red CI on the watched pull request sends the ticket to backend with the failed
/// check and what it says in the prompt; it walks backend and qa again; once green
/// (and mergeable) it merges squash with the head SHA as the guard, and the merged
/// pull request moves the ticket to done with a success block naming the merge commit.
async fn red_check_round_trip<F: PullForge>() {
    let rig = Rig::<F>::new(WATCH_CI).await;
    rig.until("qa-passed", 4).await;
    let (number, head) = rig.pull();
    let waiting = rig.tick().await;
    assert!(
        waiting.contains("no check has reported"),
        "never merged before any check: {waiting}"
    );
    let shown = rig.model.fail_check(&head, "test");

    let report = rig.tick().await;
    assert!(
        report.contains(&format!(
            "reaction ticket {} pull request #{number} ci_failure round 1: reacted",
            rig.id
        )),
        "{report}"
    );
    assert_eq!(
        rig.reaction_blocks().await,
        vec![("reaction.ci_failure".to_string(), "todo".to_string())]
    );
    // The same tick dispatched backend again, which was told what failed.
    assert_eq!(rig.status().await, "review", "{report}");
    let prompt = rig.prompt("backend", 1);
    assert!(
        prompt.contains("came back: ci_failure (round 1 of 3)"),
        "{prompt}"
    );
    assert!(prompt.contains("Failed check `test`"), "{prompt}");
    for text in shown {
        assert!(prompt.contains(&text), "{text:?} in {prompt}");
    }

    rig.until("qa-passed", 3).await;
    let (_, new_head) = rig.pull();
    assert_ne!(new_head, head, "backend pushed a fix");
    rig.model.pass_check(&new_head, "test");
    let report = rig.tick().await;
    assert!(report.contains("merged: reacted"), "{report}");
    assert_eq!(
        rig.model.merge_calls(),
        vec![(new_head.clone(), "squash".to_string())]
    );
    assert_eq!(rig.status().await, "done");
    let merged = rig.model.pull(number);
    assert!(merged.merged);
    let blocks = rig.blocks().await;
    let Some(OutcomeBlock::Success(last)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    assert_eq!(last.role, "reactions");
    assert!(merged.merge_commit.is_some());
    assert_eq!(
        last.artifacts.get("merge_commit"),
        merged.merge_commit.as_ref()
    );
    // Done is terminal: nothing watches it any more.
    let idle = rig.tick().await;
    assert!(!idle.contains("reaction ticket"), "{idle}");
}

/// A review of three comments, then two more within the quiet window, is one round
/// of five; a resolved thread is not handed over; sortie's own comments never count.
async fn review_burst<F: PullForge>() {
    let rig = Rig::<F>::new(
        "  watch: [qa-passed]\n  review_comments: {to: backend, quiet_seconds: 120}\n",
    )
    .await;
    rig.until("qa-passed", 4).await;
    let (number, _) = rig.pull();
    for (author, line) in [("alice", 1), ("alice", 2), ("bob", 3)] {
        rig.model.add_review_comment(
            number,
            author,
            "README",
            line,
            &format!("{author} on {line}"),
        );
    }
    let resolved =
        rig.model
            .add_review_comment(number, "carol", "README", 9, "carol: settled already");
    rig.model.resolve_thread(resolved);
    rig.model
        .add_review_comment(number, F::SELF_LOGIN, "README", 4, "sortie's own note");
    rig.model.advance(60);
    let report = rig.tick().await;
    assert!(report.contains("waiting for 120 s"), "{report}");
    for (author, line) in [("alice", 5), ("dave", 6)] {
        rig.model.add_review_comment(
            number,
            author,
            "README",
            line,
            &format!("{author} on {line}"),
        );
    }
    rig.model.advance(90);
    let report = rig.tick().await;
    assert!(
        report.contains("waiting for 120 s"),
        "the burst went on: {report}"
    );
    assert!(rig.reaction_blocks().await.is_empty());

    rig.model.advance(121);
    let report = rig.tick().await;
    assert!(
        report.contains("review_comments round 1: reacted"),
        "{report}"
    );
    let prompt = rig.prompt("backend", 1);
    for body in [
        "alice on 1",
        "alice on 2",
        "bob on 3",
        "alice on 5",
        "dave on 6",
    ] {
        assert!(prompt.contains(body), "{body} handed over: {prompt}");
    }
    assert!(!prompt.contains("settled already"), "{prompt}");
    assert!(!prompt.contains("sortie's own note"), "{prompt}");

    rig.until("qa-passed", 3).await;
    rig.model.advance(500);
    let report = rig.tick().await;
    assert!(
        !report.contains("reacted"),
        "comments handed over are not handed again: {report}"
    );
    assert_eq!(rig.reaction_blocks().await.len(), 1);
}

/// A person's push to the base that conflicts with the branch is handed to backend,
/// which merges the base; a person merging the pull request closes the ticket.
async fn conflict_then_person_merges<F: PullForge>() {
    let rig = Rig::<F>::new(
        "  watch: [qa-passed]\n  merge_conflict: {to: backend}\n  merged: {to: done}\n",
    )
    .await;
    rig.until("qa-passed", 4).await;
    let (number, _) = rig.pull();
    rig.person_pushes("main", "work.txt", "the base's own line\n");
    assert_eq!(rig.model.conflicting_paths(number), vec!["work.txt"]);
    let report = rig.tick().await;
    assert!(
        report.contains("merge_conflict round 1: reacted"),
        "{report}"
    );
    let prompt = rig.prompt("backend", 1);
    let branch = crate::common::ticket_branch(&rig.dir.path().join("pipeline.yaml"), &rig.id);
    assert!(
        prompt.contains(&format!("The branch `{branch}` conflicts with `main`")),
        "{prompt}"
    );
    rig.until("qa-passed", 3).await;
    assert!(
        rig.model.conflicting_paths(number).is_empty(),
        "backend merged main"
    );
    let report = rig.tick().await;
    assert!(report.contains("a person merges it"), "{report}");
    let sha = rig.model.merge_by_person(number, "alice");
    rig.tick().await;
    assert_eq!(rig.status().await, "done");
    let blocks = rig.blocks().await;
    assert!(
        matches!(blocks.last(), Some(OutcomeBlock::Success(s)) if s.artifacts.get("merge_commit") == Some(&sha)),
        "{blocks:?}"
    );
}

/// A push that lands between sortie's read and its merge makes the merge fail (the
/// head SHA guard), nothing unreviewed is merged, and a later tick merges once the
/// new head is green.
async fn push_races_merge<F: PullForge>() {
    let rig = Rig::<F>::new(WATCH_CI).await;
    rig.until("qa-passed", 4).await;
    let (number, head) = rig.pull();
    rig.model.pass_check(&head, "test");
    let remote = rig.remote.clone();
    let branch = crate::common::ticket_branch(&rig.dir.path().join("pipeline.yaml"), &rig.id);
    rig.model
        .before_merge(move || person_pushes(&remote, &branch, "late.txt", "late\n"));
    let report = rig.tick().await;
    assert!(report.contains("merge_refused"), "{report}");
    assert!(!rig.model.pull(number).merged);
    assert_eq!(rig.status().await, "qa-passed");
    let (_, pushed) = rig.pull();
    assert_ne!(pushed, head);
    let report = rig.tick().await;
    assert!(report.contains("no check has reported"), "{report}");
    rig.model.pass_check(&pushed, "test");
    rig.tick().await;
    assert!(rig.model.pull(number).merged);
    assert_eq!(rig.status().await, "done");
    let merges = rig.model.merge_calls();
    assert_eq!(merges.len(), 2, "{merges:?}");
    assert_eq!(merges[0].0, head, "the first merge guarded the old head");
    assert_eq!(merges[1].0, pushed);
}

/// `max_rounds` used up: the next red check escalates once, with a
/// `reaction.exhausted` block naming what is still red; a hold label stops every
/// reaction until removed.
async fn rounds_run_out_and_hold<F: PullForge>() {
    let rig = Rig::<F>::new(
        "  watch: [qa-passed]\n  ci_failure: {to: backend, max_rounds: 1}\n  \
         escalate_to: needs-human\n",
    )
    .await;
    rig.until("qa-passed", 4).await;
    let (number, head) = rig.pull();
    rig.model.set_pull_labels(number, &["sortie:hold"]);
    rig.model.fail_check(&head, "lint");
    let report = rig.tick().await;
    assert!(report.contains("carries `sortie:hold`"), "{report}");
    assert!(rig.reaction_blocks().await.is_empty());
    rig.model.set_pull_labels(number, &[]);
    let report = rig.tick().await;
    assert!(report.contains("ci_failure round 1: reacted"), "{report}");
    rig.until("qa-passed", 3).await;
    let (_, again) = rig.pull();
    rig.model.fail_check(&again, "lint");
    let report = rig.tick().await;
    assert!(report.contains("exhausted:ci_failure"), "{report}");
    assert_eq!(rig.status().await, "needs-human");
    let blocks = rig.reaction_blocks().await;
    assert_eq!(
        blocks,
        vec![
            ("reaction.ci_failure".to_string(), "todo".to_string()),
            ("reaction.exhausted".to_string(), "needs-human".to_string()),
        ]
    );
}

/// A crash at each point of a reaction (after the decision, after it is stored,
/// after the block, after the move) leaves exactly one block and one move.
async fn crash_anywhere<F: PullForge>() {
    for fault in [
        "after_reaction_decided",
        "after_reaction",
        "after_comment",
        "after_transition",
    ] {
        let rig = Rig::<F>::new(
            "  watch: [qa-passed]\n  ci_failure: {to: backend}\n  escalate_to: needs-human\n",
        )
        .await;
        rig.until("qa-passed", 4).await;
        let (_, head) = rig.pull();
        rig.model.fail_check(&head, "test");
        rig.model.advance(1);
        let crashed = rig.tick_with(Some(fault), &[]).await;
        assert!(!crashed.status.success(), "{fault}: the tick was killed");
        // Later than every lease the killed tick held.
        rig.model.advance(7200);
        rig.tick().await;
        let blocks = rig.reaction_blocks().await;
        assert_eq!(
            blocks,
            vec![("reaction.ci_failure".to_string(), "todo".to_string())],
            "{fault}"
        );
        let status = rig.status().await;
        assert!(
            status == "review" || status == "todo",
            "{fault}: moved once, to backend (which may have run): {status}"
        );
    }
}

/// `--dry-run` says what it would react to and writes nothing.
async fn dry_run<F: PullForge>() {
    let rig = Rig::<F>::new(WATCH_CI).await;
    rig.until("qa-passed", 4).await;
    let (_, head) = rig.pull();
    rig.model.fail_check(&head, "test");
    rig.model.advance(1);
    let out = rig.tick_with(None, &["--dry-run"]).await;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("ci_failure round 1: would_react"),
        "{report}"
    );
    assert!(rig.reaction_blocks().await.is_empty());
    assert_eq!(rig.status().await, "qa-passed");
}

/// The cost of watching (docs/reactions.md, docs/benchmarks.md): the requests one
/// tick spends on an idle watched pull request, printed; on a forge that counts
/// rate-limit units, none once its answers are cached, even across cron processes
/// (the ETags are kept in the state directory).
async fn idle_cost<F: PullForge>() {
    let rig = Rig::<F>::new(IDLE_WATCH).await;
    idle_cost_of(&rig, F::IDLE_REQUESTS).await;
}

/// The reactions of [`idle_cost`].
const IDLE_WATCH: &str = "  watch: [qa-passed]\n  ci_failure: {to: backend}\n";

/// [`idle_cost`] on `rig`: its ticket reaches the watched status, its pull request
/// goes green, then one more tick is the idle one measured: at most `max_requests`,
/// and no rate-limit unit on a forge that counts them.
async fn idle_cost_of<F: PullForge>(rig: &Rig<F>, max_requests: usize) {
    rig.until("qa-passed", 4).await;
    let (_, head) = rig.pull();
    rig.model.pass_check(&head, "test");
    rig.tick().await;
    let units = rig.model.units_used();
    rig.model.clear_log();
    let report = rig.tick().await;
    assert!(report.contains("a person merges it"), "{report}");
    let log = rig.model.log();
    println!(
        "idle watched pull request, one tick: {} requests",
        log.len()
    );
    for line in &log {
        println!("  {line}");
    }
    if let (Some(before), Some(after)) = (units, rig.model.units_used()) {
        println!("rate-limit units spent: {}", after - before);
        assert_eq!(after, before, "every read answered 304: {log:?}");
    }
    assert!(
        log.len() <= max_requests,
        "at most {max_requests} requests: {log:?}"
    );
}

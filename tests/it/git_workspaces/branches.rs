//! Issue #52 (1, 2): whose branch it is, and where its worktree starts. Two boards on
//! one repository never share a ticket's branch, a branch another board (or a board
//! since started over) made is refused, and a worktree the remote's branch moved away
//! from is fast-forwarded or refused, never run on old code.

use super::*;

/// What the agent has done, by ticket and role, in `sb`'s run log.
fn runs(sb: &Sandbox) -> Vec<String> {
    std::fs::read_to_string(sb.path().join("runs.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The last block of `id`, which must be a failure.
fn last_failure(sb: &Sandbox, id: &str) -> sortie::block::FailureBlock {
    let blocks = sb.blocks(id);
    match blocks.last() {
        Some(OutcomeBlock::Failure(f)) => f.clone(),
        other => panic!("expected a failure block last, found {other:?} in {blocks:?}"),
    }
}

/// Board A's ticket walks the whole pipeline (three commits on its branch), then
/// board B, another board with its own state root on the same repository, gets a
/// ticket of the same id. Before #52 both were `sortie/<id>`: B's architect started
/// from A's three commits and its block said `commits: 3` with A's commit log.
#[test]
fn two_boards_on_one_repository_never_share_a_ticket_s_branch_or_count_each_other_s_work() {
    let (a, remote) = sandbox(Backend::Commits);
    let id = a.add("widget", "ready-for-design", &[]);
    a.drain(10);
    assert_eq!(a.ticket(&id).status, "done");
    let b = board_on(tempfile::tempdir().unwrap(), &remote, Backend::Commits);
    let same = b.add("gadget", "ready-for-design", &[]);
    assert_eq!(same, id, "the second board's first ticket has the same id");

    b.tick(); // B's architect
    let blocks = b.blocks(&id);
    let done = successes(&blocks);
    assert_eq!(done.len(), 1, "{blocks:?}");
    let (branch_a, branch_b) = (
        common::ticket_branch(&a.config_path(), &id),
        &done[0].artifacts["branch"],
    );
    assert_ne!(branch_b, &branch_a, "each board has its own branch");
    assert_eq!(
        done[0].artifacts["commits"], "1",
        "only this ticket's commit is counted"
    );
    let subject = git(&remote, &["log", "-1", "--format=%h %s", branch_b]);
    assert_eq!(done[0].artifacts["commit_log"], subject);
    assert_eq!(
        subject.split_once(' ').unwrap().1,
        format!("architect: work on {id}")
    );
    assert_eq!(
        git(&remote, &["log", "--format=%s", branch_b, "--"]),
        format!("architect: work on {id}\ninitial"),
        "B's branch starts from main, not from A's work"
    );
    assert_eq!(
        git(&remote, &["log", "--format=%s", &branch_a, "--"])
            .lines()
            .count(),
        4,
        "A's branch is untouched"
    );
}

/// A board started over (same board directory, so the same board key) on a fresh
/// state root: its ticket 1 finds the old ticket 1's branch on the remote, which no
/// block of the new ticket records. The run fails `workspace.branch_taken` before the
/// agent starts, naming the branch and what to do; the old branch is left as it was.
#[test]
fn a_branch_no_block_of_the_ticket_records_is_refused_as_taken() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.drain(10);
    let branch = common::ticket_branch(&sb.config_path(), &id);
    let old_head = git(&remote, &["rev-parse", &branch]);
    std::fs::remove_dir_all(sb.board_path()).unwrap();
    std::fs::remove_dir_all(sb.path().join("state")).unwrap();
    sb.ok(&["board", "init", "board"]);
    let again = sb.add("another widget", "ready-for-design", &[]);
    assert_eq!(again, id);
    let ran = runs(&sb).len();

    sb.tick();
    let f = last_failure(&sb, &id);
    assert_eq!(f.reason_code, "workspace.branch_taken", "{f:?}");
    assert_eq!(f.category.as_str(), "policy");
    assert_eq!(f.next_action.as_str(), "manual");
    assert!(f.detail.contains(&branch), "names the branch: {}", f.detail);
    assert!(f.detail.contains(&old_head), "and its head: {}", f.detail);
    assert!(
        f.detail.contains("workspace.git.branch") && f.detail.contains("Delete"),
        "says what to do: {}",
        f.detail
    );
    assert_eq!(runs(&sb).len(), ran, "the agent did not start");
    assert_eq!(git(&remote, &["rev-parse", &branch]), old_head);
}

/// The same on the state root that made the old branch: the mirror keeps it (and the
/// record that it is the old ticket's), and the new ticket 1 is another ticket (it was
/// created at another time), so it is refused too.
#[test]
fn a_board_started_over_on_the_same_state_root_does_not_take_up_the_old_ticket_s_branch() {
    let (sb, _remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.drain(10);
    sb.ok(&["workspaces", "prune", "--config", "pipeline.yaml"]);
    std::fs::remove_dir_all(sb.board_path()).unwrap();
    sb.ok(&["board", "init", "board"]);
    let again = sb.add("another widget", "ready-for-design", &[]);
    assert_eq!(again, id);
    // Another creation time, whatever second this test runs in.
    let file = sb.board_path().join(&id).join("ticket.md");
    let text = std::fs::read_to_string(&file).unwrap();
    let line = text.lines().find(|l| l.starts_with("created_at:")).unwrap();
    let text = text.replace(line, "created_at: 2001-02-03T04:05:06Z");
    std::fs::write(&file, text).unwrap();

    sb.tick();
    let f = last_failure(&sb, &id);
    assert_eq!(f.reason_code, "workspace.branch_taken", "{f:?}");
    assert!(f.detail.contains("another ticket's"), "{}", f.detail);
}

/// The other side of the rule: a host with a state root of its own (another host of
/// the same board, or one whose state root was lost) takes up the ticket's branch from
/// the remote, because the architect's block records its head.
#[test]
fn a_fresh_state_root_takes_up_the_ticket_s_branch_its_blocks_record() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // architect, on the first state root
    std::fs::remove_dir_all(sb.path().join("state")).unwrap();
    sb.drain(5);
    assert_eq!(sb.ticket(&id).status, "done", "{:?}", sb.blocks(&id));
    let branch = common::ticket_branch(&sb.config_path(), &id);
    assert_eq!(
        git(&remote, &["log", "--format=%s", &branch, "--"]),
        format!("qa: work on {id}\nbackend: work on {id}\narchitect: work on {id}\ninitial"),
    );
}

/// Someone rewrote the ticket's branch on the remote after this host's architect run:
/// the worktree and the remote each have commits the other lacks. Before #52 the
/// backend ran on the worktree's old code and its push was refused on every retry;
/// now the run fails `workspace.diverged` with both heads, before the agent starts.
#[test]
fn a_worktree_whose_branch_diverged_on_the_remote_fails_diverged_with_both_heads() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // the architect's commit is pushed; this host keeps its worktree
    let branch = common::ticket_branch(&sb.config_path(), &id);
    let ours = git(&remote, &["rev-parse", &branch]);
    let other = sb.path().join("other");
    git(sb.path(), &["clone", "--quiet", "remote.git", "other"]);
    std::fs::write(other.join("theirs.txt"), "theirs\n").unwrap();
    git(&other, &["add", "theirs.txt"]);
    git(&other, &["commit", "--quiet", "-m", "someone else's work"]);
    git(
        &other,
        &[
            "push",
            "--quiet",
            "origin",
            &format!("+HEAD:refs/heads/{branch}"),
        ],
    );
    let theirs = git(&remote, &["rev-parse", &branch]);
    let ran = runs(&sb).len();

    sb.tick(); // backend
    let f = last_failure(&sb, &id);
    assert_eq!(f.reason_code, "workspace.diverged", "{f:?}");
    assert_eq!(f.category.as_str(), "policy");
    assert_eq!(f.next_action.as_str(), "manual");
    assert!(f.detail.contains(&ours), "our head: {}", f.detail);
    assert!(
        f.detail.contains(&theirs),
        "the remote's head: {}",
        f.detail
    );
    assert_eq!(runs(&sb).len(), ran, "the agent did not start on old code");
    assert_eq!(
        git(&remote, &["rev-parse", &branch]),
        theirs,
        "never forced"
    );
}

/// Another host's commit on the branch adds a file the architect left here
/// uncommitted, so git cannot fast-forward the worktree without overwriting it.
/// Before #52 the backend ran on old code (and its push was refused on every retry).
#[test]
fn a_fast_forward_an_uncommitted_change_blocks_fails_diverged_instead_of_running_on_old_code() {
    let (sb, remote) = sandbox(Backend::Commits);
    let id = sb.add("widget", "ready-for-design", &[]);
    sb.tick(); // architect: a pushed commit and an uncommitted notes.txt
    let branch = common::ticket_branch(&sb.config_path(), &id);
    let ours = git(&remote, &["rev-parse", &branch]);
    let other = sb.path().join("other");
    git(sb.path(), &["clone", "--quiet", "remote.git", "other"]);
    git(&other, &["checkout", "--quiet", &branch]);
    std::fs::write(other.join("notes.txt"), "final\n").unwrap();
    git(&other, &["add", "notes.txt"]);
    git(&other, &["commit", "--quiet", "-m", "another host's notes"]);
    git(&other, &["push", "--quiet", "origin", &branch]);
    let theirs = git(&remote, &["rev-parse", &branch]);

    sb.tick(); // backend
    let f = last_failure(&sb, &id);
    assert_eq!(f.reason_code, "workspace.diverged", "{f:?}");
    assert!(
        f.detail.contains(&ours) && f.detail.contains(&theirs),
        "{}",
        f.detail
    );
    assert!(f.detail.contains("uncommitted"), "{}", f.detail);
    let worktree = sb.path().join("state/workspaces").join(&id);
    assert_eq!(
        std::fs::read_to_string(worktree.join("notes.txt")).unwrap(),
        "draft\n",
        "the uncommitted notes are kept"
    );
}

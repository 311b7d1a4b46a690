//! The embedded local board through its library API and the `Tracker` trait.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use sortie::tracker::local::{LocalBoard, NewTicket};
use sortie::tracker::{Tracker, TrackerError};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    board: LocalBoard,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let board = LocalBoard::init(&root.join("board"))
        .unwrap()
        .with_clock(Arc::new(t0));
    Fixture {
        _tmp: tmp,
        root,
        board,
    }
}

fn new_ticket(title: &str, status: &str) -> NewTicket {
    NewTicket {
        title: title.to_owned(),
        status: status.to_owned(),
        priority: None,
        labels: Vec::new(),
        body: String::new(),
    }
}

fn ticket_file(board: &LocalBoard, id: &str) -> PathBuf {
    board.path().join(id).join("ticket.md")
}

fn write_ticket(board: &LocalBoard, id: &str, text: &[u8]) {
    let dir = board.path().join(id);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("ticket.md"), text).unwrap();
}

fn ids(listing: &sortie::tracker::Listing) -> Vec<String> {
    let mut ids: Vec<String> = listing.tickets.iter().map(|t| t.id.clone()).collect();
    ids.sort();
    ids
}

fn statuses(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Every path under `dir`, recursively, with its contents for files.
fn snapshot(dir: &Path) -> BTreeSet<(PathBuf, Vec<u8>)> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path.clone());
                seen.insert((path, Vec::new()));
            } else {
                let bytes = fs::read(&path).unwrap();
                seen.insert((path, bytes));
            }
        }
    }
    seen
}

#[tokio::test]
async fn tickets_and_comments_round_trip() {
    let f = fixture();
    let mut first = new_ticket("Add login page", "ready-for-design");
    first.priority = Some(2);
    first.labels = vec!["flaky".into()];
    first.body = "Body in Markdown.\n".into();
    let t1 = f.board.add_ticket(first).unwrap();
    let t2 = f.board.add_ticket(new_ticket("Fix crash", "todo")).unwrap();
    assert_eq!((t1.id.as_str(), t2.id.as_str()), ("1", "2"));
    assert_eq!(
        fs::read_to_string(ticket_file(&f.board, "1")).unwrap(),
        "---\ntitle: Add login page\nstatus: ready-for-design\npriority: 2\nlabels: [flaky]\n\
         created_at: 2026-11-30T10:00:00Z\nupdated_at: 2026-11-30T10:00:00Z\n---\nBody in Markdown.\n"
    );

    let got = f.board.get("1").await.unwrap();
    assert_eq!(got, t1);
    assert_eq!(got.body, "Body in Markdown.\n");
    assert_eq!(got.created_at, t0());

    let listing = f.board.list(&statuses(&["todo"])).await.unwrap();
    assert_eq!(ids(&listing), ["2"]);
    assert!(listing.warnings.is_empty());

    let posted = f
        .board
        .post_comment("1", "done: yes\n", "key")
        .await
        .unwrap();
    assert_eq!(posted.id, "0001");
    assert_eq!(posted.author, "sortie");
    let second = f.board.add_comment("1", "alice", "looks good").unwrap();
    assert_eq!(second.id, "0002");
    let comments = f.board.comments("1").await.unwrap();
    assert_eq!(comments, vec![posted, second]);
    assert_eq!(f.board.identity().await.unwrap(), "sortie");
    assert_eq!(f.board.name(), "local");
}

#[tokio::test]
async fn a_hand_edited_status_is_what_list_sees() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    let path = ticket_file(&f.board, "1");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("status: todo", "status: ready-for-dev")).unwrap();
    let listing = f.board.list(&statuses(&["todo"])).await.unwrap();
    assert!(listing.tickets.is_empty());
    let listing = f.board.list(&statuses(&["ready-for-dev"])).await.unwrap();
    assert_eq!(ids(&listing), ["1"]);
    assert_eq!(listing.tickets[0].status, "ready-for-dev");
}

#[tokio::test]
async fn a_transition_changes_only_the_status_and_updated_at() {
    let f = fixture();
    let text = "---\n# triaged by bob\ntitle: T\nstatus: todo  # drag me\nowner: bob\n\
                created_at: 2026-01-01T00:00:00Z\n---\n\n  Body *kept*\n---\n";
    write_ticket(&f.board, "7", text.as_bytes());
    f.board.transition("7", "todo", "doing").await.unwrap();
    assert_eq!(
        fs::read_to_string(ticket_file(&f.board, "7")).unwrap(),
        "---\n# triaged by bob\ntitle: T\nstatus: doing # drag me\nowner: bob\n\
         created_at: 2026-01-01T00:00:00Z\nupdated_at: 2026-11-30T10:00:00Z\n---\n\n  Body *kept*\n---\n"
    );
}

#[tokio::test]
async fn a_transition_refuses_to_undo_a_persons_move() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    f.board.set_status("1", "cancelled").unwrap(); // the person's move
    let before = fs::read(ticket_file(&f.board, "1")).unwrap();
    let err = f.board.transition("1", "todo", "doing").await.unwrap_err();
    match err {
        TrackerError::Conflict {
            id,
            expected,
            current,
        } => assert_eq!(
            (id, expected, current),
            ("1".into(), "todo".into(), "cancelled".into())
        ),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(fs::read(ticket_file(&f.board, "1")).unwrap(), before);
}

#[tokio::test]
async fn a_transition_to_the_current_status_writes_nothing() {
    let f = fixture();
    write_ticket(&f.board, "1", b"---\ntitle: T\nstatus: doing\n---\n");
    let path = ticket_file(&f.board, "1");
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    f.board.transition("1", "todo", "doing").await.unwrap();
    assert_eq!(
        fs::read(&path).unwrap(),
        b"---\ntitle: T\nstatus: doing\n---\n"
    );
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime);
}

#[tokio::test]
async fn a_transition_keeps_the_creation_time_a_hand_made_ticket_had_from_its_file() {
    let f = fixture();
    write_ticket(&f.board, "1", b"---\ntitle: T\nstatus: todo\n---\n");
    let created = f.board.get("1").await.unwrap().created_at;
    f.board.transition("1", "todo", "doing").await.unwrap();
    let after = f.board.get("1").await.unwrap();
    assert_eq!(after.created_at, created);
    assert_eq!(after.updated_at, t0());
    assert_eq!(after.status, "doing");
}

#[test]
fn concurrent_transitions_from_threads_all_agree() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (board, barrier) = (f.board.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                board.move_from("1", "todo", "doing")
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert_eq!(f.board.read_ticket("1").unwrap().0.status, "doing");
}

#[test]
fn eight_threads_commenting_at_once_get_eight_numbers() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (board, barrier) = (f.board.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                board
                    .add_comment("1", &format!("writer{i}"), &format!("comment {i}\n"))
                    .unwrap()
                    .id
            })
        })
        .collect();
    let numbers: BTreeSet<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let expected: BTreeSet<String> = (1..=8).map(|n| format!("{n:04}")).collect();
    assert_eq!(numbers, expected);
    let (comments, warnings) = f.board.read_comments("1").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let bodies: BTreeSet<String> = comments.into_iter().map(|c| c.body).collect();
    let expected: BTreeSet<String> = (0..8).map(|i| format!("comment {i}\n")).collect();
    assert_eq!(bodies, expected);
    let files: Vec<_> = fs::read_dir(f.board.path().join("1/comments"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        files.len(),
        8,
        "no temporary file is left behind: {files:?}"
    );
}

#[tokio::test]
async fn broken_entries_are_skipped_with_a_warning_naming_them() {
    let f = fixture();
    f.board.add_ticket(new_ticket("Good", "todo")).unwrap();
    let b = f.board.path();
    fs::create_dir(b.join("bad\nname")).unwrap();
    write_ticket(&f.board, "bad\nname", b"---\ntitle: T\nstatus: todo\n---\n");
    fs::create_dir(b.join("...")).unwrap();
    fs::create_dir(b.join(".hidden")).unwrap();
    fs::create_dir(b.join(std::ffi::OsStr::from_bytes(b"\xffname"))).unwrap();
    write_ticket(&f.board, "broken", b"---\ntitle: T\nstatus: [todo\n---\n");
    write_ticket(&f.board, "nostatus", b"---\ntitle: T\n---\n");
    write_ticket(
        &f.board,
        "latin1",
        b"---\ntitle: Caf\xe9\nstatus: todo\n---\n",
    );
    write_ticket(&f.board, "nofront", b"just text\n");
    fs::create_dir(b.join("notes")).unwrap();
    fs::write(b.join("notes/README.md"), "stray").unwrap();
    fs::create_dir(b.join("creating")).unwrap(); // a ticket folder being created: silent
    fs::write(
        b.join("README.md"),
        "a plain file at the top is not a ticket",
    )
    .unwrap();

    let listing = f.board.list(&statuses(&["todo"])).await.unwrap();
    assert_eq!(ids(&listing), ["1"]);
    let mut warnings = listing.warnings.clone();
    warnings.sort();
    let board = b.display();
    let expected = [
        format!("skipped folder \"...\" in {board}: not a valid ticket id (1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit)"),
        format!("skipped folder \".hidden\" in {board}: not a valid ticket id (1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit)"),
        format!("skipped folder \"\\xFFname\" in {board}: not a valid ticket id (1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit)"),
        format!("skipped folder \"bad\\nname\" in {board}: not a valid ticket id (1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit)"),
        format!("skipped ticket broken ({board}/broken/ticket.md): front matter is not valid YAML: did not find expected ',' or ']' at line 4 column 1, while parsing a flow sequence at line 3 column 9"),
        format!("skipped ticket latin1 ({board}/latin1/ticket.md): ticket.md is not valid UTF-8 (byte 14)"),
        format!("skipped ticket nofront ({board}/nofront/ticket.md): does not start with a `---` front matter line"),
        format!("skipped ticket nostatus ({board}/nostatus/ticket.md): required field `status` is missing or empty"),
        format!("skipped ticket notes ({board}/notes/ticket.md): the folder has no ticket.md"),
    ];
    assert_eq!(warnings, expected);
}

#[tokio::test]
async fn unusable_optional_fields_are_reported_but_the_ticket_runs() {
    let f = fixture();
    write_ticket(
        &f.board,
        "1",
        b"---\ntitle: T\nstatus: todo\npriority: high\n---\n",
    );
    let listing = f.board.list(&statuses(&["todo"])).await.unwrap();
    assert_eq!(ids(&listing), ["1"]);
    assert_eq!(listing.tickets[0].priority, None);
    assert_eq!(
        listing.warnings,
        ["ticket 1: `priority` is not an integer (high); treated as no priority"]
    );
}

#[tokio::test]
async fn missing_timestamps_fall_back_to_the_file_time_silently() {
    let f = fixture();
    write_ticket(&f.board, "1", b"---\ntitle: T\nstatus: todo\n---\n");
    let mtime: DateTime<Utc> = fs::metadata(ticket_file(&f.board, "1"))
        .unwrap()
        .modified()
        .unwrap()
        .into();
    let mtime = mtime.trunc_subsecs(0);
    let listing = f.board.list_all().unwrap();
    assert!(listing.warnings.is_empty(), "{:?}", listing.warnings);
    assert_eq!(listing.tickets[0].created_at, mtime);
    assert_eq!(listing.tickets[0].updated_at, mtime);
}

#[tokio::test]
async fn a_broken_comment_is_skipped_and_the_rest_returned() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    f.board.add_comment("1", "alice", "one").unwrap();
    let dir = f.board.path().join("1/comments");
    fs::write(dir.join("0002.md"), "no front matter").unwrap();
    fs::write(dir.join("0003.md"), b"---\nauthor: \xff\n---\n").unwrap();
    fs::write(dir.join("notes.txt"), "not a comment").unwrap();
    f.board.add_comment("1", "bob", "four").unwrap();
    let (comments, warnings) = f.board.read_comments("1").unwrap();
    let got: Vec<(&str, &str)> = comments
        .iter()
        .map(|c| (c.id.as_str(), c.body.as_str()))
        .collect();
    assert_eq!(got, [("0001", "one"), ("0004", "four")]);
    let dir = dir.display();
    assert_eq!(
        warnings,
        [
            format!("skipped comment {dir}/0002.md of ticket 1: does not start with a `---` front matter line"),
            format!("skipped comment {dir}/0003.md of ticket 1: is not valid UTF-8 (byte 12)"),
        ]
    );
    assert_eq!(f.board.comments("1").await.unwrap().len(), 2);
}

#[tokio::test]
async fn hostile_ids_are_refused_without_touching_anything_outside_the_board() {
    let f = fixture();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    let outside = f.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(
        outside.join("ticket.md"),
        "---\ntitle: T\nstatus: todo\n---\n",
    )
    .unwrap();
    let before = snapshot(&f.root);
    for id in [
        "../outside",
        "..",
        ".",
        "",
        "1/../../outside",
        "/tmp",
        "1\n",
        ".lock",
        "1/comments",
    ] {
        let err = f.board.get(id).await.unwrap_err();
        assert!(
            matches!(err, TrackerError::Invalid(_)),
            "get({id:?}) gave {err:?}"
        );
        let err = f.board.post_comment(id, "x", "k").await.unwrap_err();
        assert!(
            matches!(err, TrackerError::Invalid(_)),
            "post_comment({id:?}) gave {err:?}"
        );
        let err = f.board.transition(id, "todo", "doing").await.unwrap_err();
        assert!(
            matches!(err, TrackerError::Invalid(_)),
            "transition({id:?}) gave {err:?}"
        );
        let err = f.board.comments(id).await.unwrap_err();
        assert!(
            matches!(err, TrackerError::Invalid(_)),
            "comments({id:?}) gave {err:?}"
        );
    }
    assert_eq!(snapshot(&f.root), before);
}

#[tokio::test]
async fn symlinked_folders_are_not_followed_for_writes() {
    let f = fixture();
    let outside = f.root.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(
        outside.join("ticket.md"),
        "---\ntitle: T\nstatus: todo\n---\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, f.board.path().join("5")).unwrap();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap(); // id 6
    std::os::unix::fs::symlink(&outside, f.board.path().join("6/comments")).unwrap();
    f.board.add_ticket(new_ticket("T", "todo")).unwrap(); // id 7
    let planted = outside.join("planted");
    std::os::unix::fs::symlink(&planted, f.board.path().join("7/.lock")).unwrap();
    let before = snapshot(&outside);

    let listing = f.board.list(&statuses(&["todo"])).await.unwrap();
    assert_eq!(ids(&listing), ["6", "7"]);
    assert_eq!(
        listing.warnings,
        ["skipped ticket 5: its folder is a symbolic link"]
    );
    assert!(matches!(
        f.board.post_comment("5", "x", "k").await,
        Err(TrackerError::Invalid(_))
    ));
    assert!(matches!(
        f.board.transition("5", "todo", "x").await,
        Err(TrackerError::Invalid(_))
    ));
    assert!(matches!(
        f.board.post_comment("6", "x", "k").await,
        Err(TrackerError::Invalid(_))
    ));
    assert_eq!(snapshot(&outside), before);
}

#[tokio::test]
async fn unknown_tickets_and_boards_are_not_found() {
    let f = fixture();
    assert!(matches!(
        f.board.get("42").await,
        Err(TrackerError::NotFound(_))
    ));
    assert!(matches!(
        f.board.post_comment("42", "x", "k").await,
        Err(TrackerError::NotFound(_))
    ));
    assert!(matches!(
        f.board.transition("42", "a", "b").await,
        Err(TrackerError::NotFound(_))
    ));
    let missing = f.root.join("nope");
    let err = LocalBoard::open(&missing).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "not found: no board at {0}; create one with `sortie board init {0}`",
            missing.display()
        )
    );
}

#[test]
fn init_is_idempotent_and_new_ids_skip_taken_ones() {
    let f = fixture();
    fs::create_dir(f.board.path().join("9")).unwrap(); // a person's hand-made ticket folder
    write_ticket(&f.board, "9", b"---\ntitle: T\nstatus: todo\n---\n");
    let again = LocalBoard::init(f.board.path()).unwrap();
    assert_eq!(again.add_ticket(new_ticket("T", "todo")).unwrap().id, "10");
    assert_eq!(f.board.list_all().unwrap().tickets.len(), 2);
}

#[test]
fn bad_values_are_refused_before_anything_is_written() {
    let f = fixture();
    let err = f.board.add_ticket(new_ticket(" ", "todo")).unwrap_err();
    assert!(matches!(err, TrackerError::Invalid(_)), "{err:?}");
    let err = f.board.add_ticket(new_ticket("T", "to\ndo")).unwrap_err();
    assert!(matches!(err, TrackerError::Invalid(_)), "{err:?}");
    assert!(f.board.list_all().unwrap().tickets.is_empty());
    f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    let err = f.board.set_status("1", "").unwrap_err();
    assert!(matches!(err, TrackerError::Invalid(_)), "{err:?}");
    let err = f.board.add_comment("1", "a\nb", "x").unwrap_err();
    assert!(matches!(err, TrackerError::Invalid(_)), "{err:?}");
}

/// An outcome-block comment with idempotency key `key`, as sortie writes back.
fn block_comment(key: &str, summary: &str) -> String {
    format!(
        "The architect is done.\n\n```yaml sortie:success\nrole: architect\nstage_attempt: 1\n\
         idempotency_key: {key}\nfrom_status: todo\nto_status: review\nsummary: {summary}\n```\n"
    )
}

/// Regression (#30): two write-backs of the same outcome (same idempotency key) that
/// both checked the board before either posted leave one comment, not two. This is
/// what two ticks did when the ledger was deleted under the first one
/// (`crash_anywhere::deleting_the_ledger_mid_run_...` saw `duplicate_comments: 2`).
/// Each pair of threads checks (no comment yet), meets at a barrier, then posts, so
/// every round is the check-then-post race; `post_comment` must settle it under the
/// ticket lock. A comment by someone else carrying the key, or another key, does not
/// stop sortie's post.
#[test]
fn two_posts_with_the_same_idempotency_key_racing_leave_one_comment() {
    let f = fixture();
    const ROUNDS: usize = 20;
    for _ in 0..ROUNDS {
        f.board.add_ticket(new_ticket("T", "todo")).unwrap();
    }
    for round in 1..=ROUNDS {
        let id = round.to_string();
        let key = sortie::block::idempotency_key("local", &id, "architect", "todo", 1);
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = ["first", "second"]
            .into_iter()
            .map(|who| {
                let (board, barrier) = (f.board.clone(), barrier.clone());
                let (id, key) = (id.clone(), key.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        // The write-back's check: no comment with the key yet.
                        let before = board.comments(&id).await.unwrap();
                        barrier.wait();
                        assert!(before.is_empty());
                        board
                            .post_comment(&id, &block_comment(&key, who), &key)
                            .await
                            .unwrap()
                    })
                })
            })
            .collect();
        let posted: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let comments = f.board.read_comments(&id).unwrap().0;
        assert_eq!(comments.len(), 1, "ticket {id}: {comments:#?}");
        assert!(
            posted.iter().all(|c| c.id == comments[0].id),
            "both posts answer with the one comment: {posted:#?}"
        );
    }

    // Only sortie's own valid blocks count: a person's paste and another key do not.
    let id = "1";
    let key = sortie::block::idempotency_key("local", id, "architect", "todo", 2);
    f.board
        .add_comment(id, "ana", &block_comment(&key, "pasted"))
        .unwrap();
    let other = sortie::block::idempotency_key("local", id, "architect", "todo", 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(f.board.post_comment(id, &block_comment(&key, "mine"), &key))
        .unwrap();
    rt.block_on(
        f.board
            .post_comment(id, &block_comment(&other, "next"), &other),
    )
    .unwrap();
    assert_eq!(f.board.read_comments(id).unwrap().0.len(), 4);
}

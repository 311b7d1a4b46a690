//! `sortie board ...` run as a real binary in a temporary directory, comparing whole outputs.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sortie");

fn sortie(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env_remove("SORTIE_LOG")
        .env("USER", "tester")
        .output()
        .expect("run sortie")
}

/// Timestamps are "now": replace them so outputs can be compared whole.
fn mask_times(text: &str) -> String {
    let re = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").unwrap();
    re.replace_all(text, "<time>").into_owned()
}

#[track_caller]
fn expect(out: &Output, code: i32, stdout: &str, stderr: &str) {
    let got_out = mask_times(&String::from_utf8_lossy(&out.stdout));
    let got_err = mask_times(&String::from_utf8_lossy(&out.stderr));
    let got_code = out.status.code().unwrap_or(-1);
    if (got_code, got_out.as_str(), got_err.as_str()) != (code, stdout, stderr) {
        panic!(
            "exit code {got_code} (expected {code})\n\
             --- stdout, got:\n{got_out}--- stdout, expected:\n{stdout}\
             --- stderr, got:\n{got_err}--- stderr, expected:\n{stderr}---"
        );
    }
}

fn board_with_two_tickets() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    expect(&sortie(d, &["board", "init"]), 0, "board\n", "");
    expect(&sortie(d, &["board", "init"]), 0, "board\n", "");
    fs::write(d.join("body.md"), "Users need to sign in.\n").unwrap();
    expect(
        &sortie(
            d,
            &[
                "board",
                "add",
                "--title",
                "Add login page",
                "--status",
                "ready-for-design",
                "--priority",
                "2",
                "--label",
                "flaky",
                "--label",
                "ui",
                "--body-file",
                "body.md",
            ],
        ),
        0,
        "1\n",
        "",
    );
    expect(
        &sortie(d, &["board", "add", "--title", "Fix: crash on start"]),
        0,
        "2\n",
        "",
    );
    tmp
}

#[test]
fn add_list_show_move_comment_round_trip() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    expect(
        &sortie(d, &["board", "list"]),
        0,
        "ID  STATUS            PRIORITY  TITLE                LABELS\n\
         1   ready-for-design  2         Add login page       flaky, ui\n\
         2   todo              -         Fix: crash on start  -\n",
        "",
    );
    expect(
        &sortie(
            d,
            &[
                "board",
                "comment",
                "1",
                "--body",
                "Which provider?",
                "--author",
                "alice",
            ],
        ),
        0,
        "0001\n",
        "",
    );
    fs::write(d.join("reply.md"), "GitHub.\n").unwrap();
    expect(
        &sortie(d, &["board", "comment", "1", "--body-file", "reply.md"]),
        0,
        "0002\n",
        "",
    );
    expect(
        &sortie(d, &["board", "move", "1", "backend"]),
        0,
        "1: ready-for-design -> backend\n",
        "",
    );
    expect(
        &sortie(d, &["board", "show", "1"]),
        0,
        "id:         1\n\
         title:      Add login page\n\
         status:     backend\n\
         priority:   2\n\
         labels:     flaky, ui\n\
         created_at: <time>\n\
         updated_at: <time>\n\
         \n\
         Users need to sign in.\n\
         \n\
         --- comment 0001 by alice at <time>\n\
         Which provider?\n\
         \n\
         --- comment 0002 by tester at <time>\n\
         GitHub.\n",
        "",
    );
    expect(
        &sortie(
            d,
            &["board", "list", "--status", "backend", "--status", "qa"],
        ),
        0,
        "ID  STATUS   PRIORITY  TITLE           LABELS\n\
         1   backend  2         Add login page  flaky, ui\n",
        "",
    );
}

#[test]
fn json_output_carries_every_field() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    expect(
        &sortie(d, &["board", "list", "--status", "todo", "--json"]),
        0,
        r#"{
  "tickets": [
    {
      "id": "2",
      "title": "Fix: crash on start",
      "body": "",
      "status": "todo",
      "labels": [],
      "priority": null,
      "created_at": "<time>",
      "updated_at": "<time>",
      "url": null,
      "closed": false,
      "assignees": [],
      "blocked_by": []
    }
  ],
  "warnings": []
}
"#,
        "",
    );
    sortie(d, &["board", "comment", "2", "--body", "seen"]);
    expect(
        &sortie(d, &["board", "show", "2", "--json"]),
        0,
        r#"{
  "ticket": {
    "id": "2",
    "title": "Fix: crash on start",
    "body": "",
    "status": "todo",
    "labels": [],
    "priority": null,
    "created_at": "<time>",
    "updated_at": "<time>",
    "url": null,
    "closed": false,
    "assignees": [],
    "blocked_by": []
  },
  "comments": [
    {
      "id": "0001",
      "author": "tester",
      "created_at": "<time>",
      "body": "seen"
    }
  ],
  "warnings": []
}
"#,
        "",
    );
}

#[test]
fn a_hand_edited_status_shows_up_in_the_list() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    let path = d.join("board/2/ticket.md");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("status: todo", "status: done")).unwrap();
    expect(
        &sortie(d, &["board", "list", "--status", "done"]),
        0,
        "ID  STATUS  PRIORITY  TITLE                LABELS\n\
         2   done    -         Fix: crash on start  -\n",
        "",
    );
}

#[test]
fn broken_tickets_are_reported_on_stderr_and_the_rest_listed() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    fs::create_dir(d.join("board/oops")).unwrap();
    fs::write(d.join("board/oops/ticket.md"), "---\ntitle: T\n---\n").unwrap();
    fs::create_dir(d.join("board/bad name")).unwrap();
    let out = sortie(d, &["board", "list", "--status", "todo"]);
    let mut stderr: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .collect();
    stderr.sort();
    assert_eq!(
        stderr,
        [
            "warning: skipped folder \"bad name\" in board: not a valid ticket id (1-64 letters, \
             digits, `.`, `_`, `-`, starting with a letter or digit)",
            "warning: skipped ticket oops (board/oops/ticket.md): required field `status` is \
             missing or empty",
        ]
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ID  STATUS  PRIORITY  TITLE                LABELS\n2   todo    -         Fix: crash on start  -\n"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn unknown_tickets_exit_1_and_invalid_ids_exit_2() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    expect(
        &sortie(d, &["board", "show", "9"]),
        1,
        "",
        "sortie: no ticket 9 on board board\n",
    );
    expect(
        &sortie(d, &["board", "move", "9", "done"]),
        1,
        "",
        "sortie: no ticket 9 on board board\n",
    );
    let invalid =
        "sortie: \"../board/1\" is not a valid ticket id (1-64 letters, digits, `.`, `_`, \
                   `-`, starting with a letter or digit)\n";
    expect(&sortie(d, &["board", "show", "../board/1"]), 2, "", invalid);
    expect(
        &sortie(d, &["board", "comment", "../board/1", "--body", "x"]),
        2,
        "",
        invalid,
    );
    expect(
        &sortie(d, &["board", "move", "../board/1", "done"]),
        2,
        "",
        invalid,
    );
    expect(
        &sortie(d, &["board", "move", "1", ""]),
        2,
        "",
        "sortie: status \"\" must be non-empty text on one line\n",
    );
}

#[test]
fn the_board_comes_from_the_flag_or_defaults_to_board() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    expect(
        &sortie(d, &["board", "list"]),
        1,
        "",
        "sortie: no board at board; create one with `sortie board init board`\n",
    );
    expect(
        &sortie(d, &["board", "init", "elsewhere"]),
        0,
        "elsewhere\n",
        "",
    );
    expect(
        &sortie(d, &["board", "add", "--board", "elsewhere", "--title", "T"]),
        0,
        "1\n",
        "",
    );
    expect(
        &sortie(d, &["board", "list", "--board", "elsewhere"]),
        0,
        "ID  STATUS  PRIORITY  TITLE  LABELS\n1   todo    -         T      -\n",
        "",
    );
    let out = sortie(d, &["board", "list", "--config", "missing.yaml"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a config that cannot be loaded is a usage error"
    );
}

#[test]
fn a_comment_body_can_come_from_stdin() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    let mut child = Command::new(BIN)
        .current_dir(d)
        .args([
            "board",
            "comment",
            "2",
            "--body-file",
            "-",
            "--author",
            "bob",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from a pipe\n")
        .unwrap();
    expect(&child.wait_with_output().unwrap(), 0, "0001\n", "");
    assert_eq!(
        mask_times(&fs::read_to_string(d.join("board/2/comments/0001.md")).unwrap()),
        "---\nauthor: bob\ncreated_at: <time>\n---\nfrom a pipe\n"
    );
}

#[test]
fn two_processes_commenting_at_once_lose_nothing() {
    let tmp = board_with_two_tickets();
    let d = tmp.path();
    let writer = |name: &str| {
        Command::new("sh")
            .current_dir(d)
            .args([
                "-c",
                r#"i=1; while [ $i -le 10 ]; do "$0" board comment 1 --author "$1" --body "$1 $i" >/dev/null || exit 1; i=$((i+1)); done"#,
                BIN,
                name,
            ])
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (writer("alpha"), writer("beta"));
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let mut files: Vec<String> = fs::read_dir(d.join("board/1/comments"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let expected: Vec<String> = (1..=20).map(|n| format!("{n:04}.md")).collect();
    assert_eq!(files, expected);
    let out = sortie(d, &["board", "show", "1", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bodies: Vec<String> = doc["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_owned())
        .collect();
    bodies.sort();
    let mut want: Vec<String> = ["alpha", "beta"]
        .iter()
        .flat_map(|w| (1..=10).map(move |i| format!("{w} {i}")))
        .collect();
    want.sort();
    assert_eq!(bodies, want);
}

/// Regression (#30): without a config, `board add` checks a status against the board's
/// and the shipped pipelines' statuses, and names the misspelt one as the new one; the
/// right spelling added after a typo is not flagged.
#[test]
fn board_add_without_a_config_names_the_misspelt_status_as_the_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(sortie(tmp.path(), &["board", "init", "board"])
        .status
        .success());
    let add = |status: &str| {
        sortie(
            tmp.path(),
            &[
                "board", "add", "--board", "board", "--title", "t", "--status", status,
            ],
        )
    };
    expect(
        &add("ready-for-desing"),
        0,
        "1\n",
        "warning: status `ready-for-desing` is new: no ticket on this board has status \
         `ready-for-desing` and no shipped pipeline names it; did you mean `ready-for-design` \
         (named by the shipped pipelines)? Pass --config to check statuses against your \
         pipeline\n",
    );
    expect(&add("ready-for-design"), 0, "2\n", "");
    expect(&add("my-own-reveiw-step"), 0, "3\n", "");
    expect(
        &add("my-own-review-step"),
        0,
        "4\n",
        "warning: status `my-own-review-step` is new: no ticket on this board has status \
         `my-own-review-step` and no shipped pipeline names it; did you mean \
         `my-own-reveiw-step` (in use on this board)? Pass --config to check statuses against \
         your pipeline\n",
    );
}

/// The statuses `board add` knows without a config are those of `pipelines/*.yaml`.
#[test]
fn the_shipped_statuses_are_the_shipped_pipelines_statuses() {
    let mut named: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(crate::common::repo().join("pipelines")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg =
            sortie::config::Config::parse_str_with_env(&text, Some(&path), &|_| Some("x".into()))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let thens = cfg
            .stages
            .iter()
            .filter_map(|s| s.rework.as_ref().and_then(|r| r.then.clone()));
        for status in cfg
            .configured_statuses()
            .into_iter()
            .map(str::to_string)
            .chain(thens)
        {
            if !named.contains(&status) {
                named.push(status);
            }
        }
    }
    let mut shipped: Vec<String> = sortie::cli::board::SHIPPED_STATUSES
        .iter()
        .map(|s| s.to_string())
        .collect();
    named.sort();
    shipped.sort();
    assert_eq!(shipped, named);
}

//! `sortie block parse`, run as the real binary in a temp dir, whole outputs compared.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const KEY: &str = "22d7724a473c11fa292146f772b4dc2618ddddc3b8a26e96176ffc63c84ba627";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn sortie(dir: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(args)
        .current_dir(dir)
        .env_remove("SORTIE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sortie");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("write stdin");
    drop(input);
    let out = child.wait_with_output().expect("wait");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// Equality of whole texts, with a line-by-line account of where they part.
#[track_caller]
fn assert_text(actual: &str, expected: &str) {
    if actual == expected {
        return;
    }
    let mut report = String::new();
    let (a, e): (Vec<&str>, Vec<&str>) = (actual.lines().collect(), expected.lines().collect());
    for i in 0..a.len().max(e.len()) {
        let (got, want) = (a.get(i).copied(), e.get(i).copied());
        let mark = if got == want { ' ' } else { '!' };
        report.push_str(&format!("{mark} {:>3} got  {got:?}\n", i + 1));
        if got != want {
            report.push_str(&format!("{mark}     want {want:?}\n"));
        }
    }
    panic!("texts differ:\n{report}");
}

fn comment() -> String {
    format!(
        "The architect is done.\n\
         \n\
         ```yaml sortie:success\n\
         role: architect\n\
         stage_attempt: 1\n\
         idempotency_key: {KEY}\n\
         from_status: ready-for-design\n\
         to_status: ready-for-dev\n\
         summary: 'yes: a design'\n\
         artifacts:\n  branch: design/42\n\
         reviewer: ana\n\
         ```\n\
         \n\
         > Quoting an old one:\n\
         > ```yaml sortie:success\n\
         > role: quoted\n\
         > ```\n\
         \n\
         ~~~yaml sortie:failure\n\
         role: qa\n\
         stage_attempt: 3\n\
         idempotency_key: {KEY}\n\
         from_status: code-review\n\
         to_status: qa-blocked\n\
         reason_code: tests.failed\n\
         category: permanent\n\
         transient: false\n\
         next_action: escalate\n\
         detail: |\n  3 cases red\n  see log\n\
         duration_seconds: 12.5\n\
         ~~~\n"
    )
}

fn success_json() -> String {
    format!(
        r#"  {{
    "kind": "success",
    "line": 3,
    "role": "architect",
    "stage_attempt": 1,
    "idempotency_key": "{KEY}",
    "from_status": "ready-for-design",
    "to_status": "ready-for-dev",
    "summary": "yes: a design",
    "run_id": null,
    "duration_seconds": null,
    "artifacts": {{
      "branch": "design/42"
    }},
    "evidence": null,
    "reviewer": "ana"
  }}"#
    )
}

fn failure_json() -> String {
    format!(
        r#"  {{
    "kind": "failure",
    "line": 20,
    "role": "qa",
    "stage_attempt": 3,
    "idempotency_key": "{KEY}",
    "from_status": "code-review",
    "to_status": "qa-blocked",
    "reason_code": "tests.failed",
    "category": "permanent",
    "transient": false,
    "next_action": "escalate",
    "detail": "3 cases red\nsee log\n",
    "run_id": null,
    "duration_seconds": 12.5
  }}"#
    )
}

#[test]
fn prints_every_valid_top_level_block_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("comment.md"), comment()).expect("write");
    let run = sortie(dir.path(), &["block", "parse", "comment.md"], None);
    assert_text(
        &run.stdout,
        &format!("[\n{},\n{}\n]\n", success_json(), failure_json()),
    );
    assert_text(&run.stderr, "");
    assert_eq!(run.code, 0);
}

#[test]
fn kind_filter_keeps_one_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("comment.md"), comment()).expect("write");
    let run = sortie(
        dir.path(),
        &["block", "parse", "comment.md", "--kind", "failure"],
        None,
    );
    assert_text(&run.stdout, &format!("[\n{}\n]\n", failure_json()));
    assert_eq!(run.code, 0);
}

#[test]
fn stdin_is_read_with_a_dash_or_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [&["block", "parse", "-"][..], &["block", "parse"][..]] {
        let run = sortie(dir.path(), args, Some(&comment()));
        assert_text(
            &run.stdout,
            &format!("[\n{},\n{}\n]\n", success_json(), failure_json()),
        );
        assert_eq!(run.code, 0, "{args:?}");
    }
}

#[test]
fn no_blocks_prints_an_empty_array_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sortie(
        dir.path(),
        &["block", "parse", "-"],
        Some("Just a person talking.\n\n```yaml\nrole: not a block\n```\n"),
    );
    assert_text(&run.stdout, "[]\n");
    assert_text(&run.stderr, "");
    assert_eq!(run.code, 1);
}

#[test]
fn malformed_blocks_are_reported_and_valid_ones_still_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = comment()
        .replace("category: permanent", "category: flaky")
        .replace(
            "```\n\n>",
            "```\n\n```yaml sortie:success\nrole: [\n```\n\n>",
        );
    std::fs::write(dir.path().join("bad.md"), text).expect("write");
    let run = sortie(dir.path(), &["block", "parse", "bad.md"], None);
    assert_text(&run.stdout, &format!("[\n{}\n]\n", success_json()));
    assert_text(
        &run.stderr,
        "bad.md:15: success block: invalid YAML: did not find expected node content \
         at line 17 column 1, while parsing a flow node\n\
         bad.md:24: failure block: field `category`: expected one of `transient`, \
         `permanent`, `policy`, `unknown`, found the string \"flaky\"\n",
    );
    assert_eq!(run.code, 2);

    // Malformed blocks of the other kind are not this query's business.
    let run = sortie(
        dir.path(),
        &["block", "parse", "bad.md", "--kind", "failure"],
        None,
    );
    assert_text(&run.stdout, "[]\n");
    assert_text(
        &run.stderr,
        "bad.md:24: failure block: field `category`: expected one of `transient`, \
         `permanent`, `policy`, `unknown`, found the string \"flaky\"\n",
    );
    assert_eq!(run.code, 2);
}

#[test]
fn malformed_stdin_is_reported_as_stdin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sortie(
        dir.path(),
        &["block", "parse"],
        Some("x\n\n```yaml sortie:failure\nrole: qa\n"),
    );
    assert_text(&run.stdout, "[]\n");
    assert_text(
        &run.stderr,
        "<stdin>:3: failure block: the closing fence is missing (was the comment cut short?)\n",
    );
    assert_eq!(run.code, 2);
}

#[test]
fn unreadable_file_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sortie(dir.path(), &["block", "parse", "missing.md"], None);
    assert_text(&run.stdout, "");
    assert_text(
        &run.stderr,
        "sortie: cannot read missing.md: No such file or directory (os error 2)\n",
    );
    assert_eq!(run.code, 2);
}

/// The published schema, compiled once per test.
fn schema() -> (boon::Schemas, boon::SchemaIndex) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/blocks.schema.json");
    let mut schemas = boon::Schemas::new();
    let index = boon::Compiler::new()
        .compile(path, &mut schemas)
        .unwrap_or_else(|e| panic!("{path}: {e:#}"));
    (schemas, index)
}

#[test]
fn every_emitted_object_matches_the_published_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sortie(dir.path(), &["block", "parse", "-"], Some(&comment()));
    assert_eq!(run.code, 0, "{}", run.stderr);
    let emitted: Vec<serde_json::Value> = serde_json::from_str(&run.stdout).expect("json array");
    assert_eq!(emitted.len(), 2);
    let (schemas, index) = schema();
    for object in &emitted {
        if let Err(e) = schemas.validate(object, index) {
            panic!("{object:#}\ndoes not match docs/blocks.schema.json: {e:#}");
        }
    }

    // The schema is not a rubber stamp: it refuses what the parser refuses.
    let mut bad_success = emitted[0].clone();
    bad_success["idempotency_key"] = "ABC".into();
    let mut bad_failure = emitted[1].clone();
    bad_failure["transient"] = true.into(); // category is `permanent`
    let mut no_detail = emitted[1].clone();
    no_detail.as_object_mut().expect("object").remove("detail");
    for bad in [bad_success, bad_failure, no_detail] {
        assert!(
            schemas.validate(&bad, index).is_err(),
            "{bad:#} should not validate"
        );
    }
}

#[test]
fn block_parse_reads_a_jira_adf_document_and_jira_wiki_markup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let adf = sortie::block::jira::adf::from_markdown(&comment()).to_string();
    let wiki = sortie::block::jira::wiki::from_markdown(&comment());
    let markdown = sortie(dir.path(), &["block", "parse", "-"], Some(&comment()));
    assert_eq!(markdown.code, 0, "{}", markdown.stderr);
    let strip_lines = |out: &str| {
        let mut v: Vec<serde_json::Value> = serde_json::from_str(out).expect("json array");
        for o in &mut v {
            o.as_object_mut().unwrap().remove("line");
        }
        v
    };
    let expected = strip_lines(&markdown.stdout);
    for (what, input) in [("ADF", adf), ("wiki markup", wiki)] {
        let run = sortie(dir.path(), &["block", "parse", "-"], Some(&input));
        assert_eq!(run.code, 0, "{what}: {}\n{input}", run.stderr);
        assert_eq!(strip_lines(&run.stdout), expected, "{what}:\n{input}");
    }
}

/// Issue #29 (3): Jira Data Center may hand a comment back with CRLF line endings.
#[test]
fn block_parse_reads_sortie_s_wiki_comment_with_crlf_line_endings_as_the_lf_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wiki = sortie::block::jira::wiki::from_markdown(&comment());
    let lf = sortie(dir.path(), &["block", "parse", "-"], Some(&wiki));
    assert_eq!(lf.code, 0, "{}\n{wiki}", lf.stderr);
    let found: Vec<serde_json::Value> = serde_json::from_str(&lf.stdout).expect("json array");
    assert_eq!(found.len(), 2, "{}", lf.stdout);
    std::fs::write(dir.path().join("comment.wiki"), wiki.replace('\n', "\r\n")).expect("write");
    let crlf = sortie(dir.path(), &["block", "parse", "comment.wiki"], None);
    assert_text(&crlf.stdout, &lf.stdout);
    assert_text(&crlf.stderr, "");
    assert_eq!(crlf.code, 0);
}

/// Issue #34: the question block sortie posts, and the answer block a person writes, match
/// their definitions in the published schema, which refuses what sortie's reader refuses.
#[test]
fn question_and_answer_blocks_match_the_published_schema() {
    use sortie::block::question::{parse_question_blocks, render_question_comment, QuestionBlock};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/blocks.schema.json");
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    let question = compiler
        .compile(&format!("{path}#/$defs/question"), &mut schemas)
        .unwrap();
    let answer = compiler
        .compile(&format!("{path}#/$defs/answer"), &mut schemas)
        .unwrap();
    let block = QuestionBlock {
        question_id: "architect-2-q1".into(),
        role: "architect".into(),
        stage_attempt: 2,
        idempotency_key: sortie::block::idempotency_key(
            "local",
            "7",
            "architect",
            "todo#question1",
            2,
        ),
        question: "Which API?".into(),
        options: vec!["REST v2".into(), "GraphQL".into()],
        default: Some("REST v2".into()),
        deadline: Some(chrono::Utc::now()),
        context: "Both exist.".into(),
    };
    let comment = render_question_comment(&block);
    let body = comment
        .split("sortie:question\n")
        .nth(1)
        .and_then(|rest| rest.rsplit_once("\n```").map(|(yaml, _)| yaml))
        .unwrap();
    let value: serde_json::Value = serde_yaml::from_str(body).unwrap();
    schemas
        .validate(&value, question)
        .unwrap_or_else(|e| panic!("{value:#}: {e:#}"));
    assert_eq!(parse_question_blocks(&comment), vec![block]);
    let mut bad = value.clone();
    bad["question_id"] = "which-one".into();
    assert!(schemas.validate(&bad, question).is_err());
    let mut bad = value.clone();
    bad["surprise"] = true.into();
    assert!(schemas.validate(&bad, question).is_err());

    for good in [
        serde_json::json!({"question_id": "architect-2-q1", "option": 2}),
        serde_json::json!({"question_id": "architect-2-q1", "answer": "GraphQL"}),
    ] {
        schemas
            .validate(&good, answer)
            .unwrap_or_else(|e| panic!("{good}: {e:#}"));
    }
    for bad in [
        serde_json::json!({"question_id": "architect-2-q1"}),
        serde_json::json!({"question_id": "architect-2-q1", "option": 0}),
        serde_json::json!({"question_id": "architect-2-q1", "answer": "x", "by": "me"}),
    ] {
        assert!(schemas.validate(&bad, answer).is_err(), "{bad}");
    }
}

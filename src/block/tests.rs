//! Behaviour of the outcome-block format as a reader of a comment sees it.

use std::collections::BTreeMap;

use super::*;

const KEY: &str = "22d7724a473c11fa292146f772b4dc2618ddddc3b8a26e96176ffc63c84ba627";

fn failure_body() -> String {
    format!(
        "role: qa\nstage_attempt: 1\nidempotency_key: {KEY}\nfrom_status: code-review\n\
         to_status: qa-blocked\nreason_code: tests.failed\ncategory: transient\n\
         transient: true\nnext_action: retry\ndetail: 3 cases red\n"
    )
}

fn success_body() -> String {
    format!(
        "role: architect\nstage_attempt: 2\nidempotency_key: {KEY}\n\
         from_status: ready-for-design\nto_status: ready-for-dev\nsummary: design done\n"
    )
}

fn fenced(kind: &str, body: &str) -> String {
    format!("```yaml sortie:{kind}\n{body}```\n")
}

fn sample_failure() -> FailureBlock {
    FailureBlock {
        role: "qa".into(),
        stage_attempt: 1,
        idempotency_key: KEY.into(),
        from_status: "code-review".into(),
        to_status: "qa-blocked".into(),
        reason_code: "tests.failed".into(),
        category: Category::Transient,
        transient: true,
        next_action: NextAction::Retry,
        detail: "3 cases red".into(),
        run_id: None,
        duration_seconds: None,
        extra: BTreeMap::new(),
    }
}

fn only_error(text: &str) -> BlockError {
    let mut parsed = parse_blocks(text);
    assert_eq!(parsed.len(), 1, "{parsed:?}");
    parsed.remove(0).expect_err("block should be invalid")
}

#[test]
fn idempotency_key_matches_the_documented_digest() {
    // printf 'local\x1f42\x1farchitect\x1fready-for-design\x1f1' | sha256sum
    assert_eq!(
        idempotency_key("local", "42", "architect", "ready-for-design", 1),
        KEY
    );
    assert_ne!(
        idempotency_key("local", "42", "architect", "ready-for-design", 2),
        KEY
    );
}

#[test]
fn the_documented_failure_example_parses() {
    let text = format!(
        "qa found three failing cases.\n\n{}",
        fenced("failure", &failure_body())
    );
    let parsed = parse_blocks(&text);
    assert_eq!(
        parsed,
        vec![Ok(ParsedBlock {
            block: OutcomeBlock::Failure(sample_failure()),
            line: 3
        })]
    );
}

#[test]
fn each_bad_field_is_named() {
    let cases: &[(&str, &str, &str)] = &[
        ("role: qa\n", "", "role"),
        ("role: qa\n", "role: ''\n", "role"),
        ("stage_attempt: 1\n", "stage_attempt: 0\n", "stage_attempt"),
        ("stage_attempt: 1\n", "stage_attempt: -1\n", "stage_attempt"),
        (
            "stage_attempt: 1\n",
            "stage_attempt: '1'\n",
            "stage_attempt",
        ),
        (
            "stage_attempt: 1\n",
            "stage_attempt: 1.5\n",
            "stage_attempt",
        ),
        (
            "stage_attempt: 1\n",
            "stage_attempt: 4294967296\n",
            "stage_attempt",
        ),
        ("to_status: qa-blocked\n", "to_status: 7\n", "to_status"),
        ("from_status: code-review\n", "", "from_status"),
        (
            "reason_code: tests.failed\n",
            "reason_code: Tests.Failed\n",
            "reason_code",
        ),
        (
            "reason_code: tests.failed\n",
            "reason_code: tests..failed\n",
            "reason_code",
        ),
        (
            "reason_code: tests.failed\n",
            "reason_code: ''\n",
            "reason_code",
        ),
        ("category: transient\n", "category: flaky\n", "category"),
        ("transient: true\n", "transient: 'yes'\n", "transient"),
        (
            "next_action: retry\n",
            "next_action: later\n",
            "next_action",
        ),
        ("detail: 3 cases red\n", "detail:\n", "detail"),
        (
            "detail: 3 cases red\n",
            "detail: 3 cases red\nrun_id: [1]\n",
            "run_id",
        ),
        (
            "detail: 3 cases red\n",
            "detail: x\nduration_seconds: -1\n",
            "duration_seconds",
        ),
        (
            "detail: 3 cases red\n",
            "detail: x\nduration_seconds: soon\n",
            "duration_seconds",
        ),
        (
            "detail: 3 cases red\n",
            "detail: x\nkind: failure\n",
            "kind",
        ),
    ];
    for &(from, to, field) in cases {
        let body = failure_body().replacen(from, to, 1);
        assert_ne!(body, failure_body(), "case {to:?} did not change the body");
        let text = format!("prose\n\n{}", fenced("failure", &body));
        let err = only_error(&text);
        assert_eq!(err.field.as_deref(), Some(field), "{to:?}: {err}");
        assert_eq!(err.line, 3, "{err}");
        assert_eq!(err.kind, Some(BlockKind::Failure));
        assert!(
            err.to_string()
                .starts_with(&format!("line 3: failure block: field `{field}`: ")),
            "{err}"
        );
    }
    let key = only_error(&fenced(
        "success",
        &success_body().replace(KEY, &KEY.to_uppercase()),
    ));
    assert_eq!(key.field.as_deref(), Some("idempotency_key"));
    let summary = only_error(&fenced(
        "success",
        &success_body().replace("summary: design done\n", ""),
    ));
    assert_eq!(
        summary.to_string(),
        "line 1: success block: field `summary`: is missing (it is required)"
    );
    let artifact = only_error(&fenced(
        "success",
        &format!("{}artifacts:\n  pr: 12\n", success_body()),
    ));
    assert_eq!(artifact.field.as_deref(), Some("artifacts.pr"));
}

#[test]
fn transient_must_agree_with_category() {
    let disagree = failure_body().replace("transient: true", "transient: false");
    let err = only_error(&fenced("failure", &disagree));
    assert_eq!(err.field.as_deref(), Some("transient"));
    assert!(err.message.contains("category is `transient`"), "{err}");

    let permanent_but_transient =
        failure_body().replace("category: transient", "category: permanent");
    let err = only_error(&fenced("failure", &permanent_but_transient));
    assert_eq!(err.field.as_deref(), Some("transient"));

    let agree = permanent_but_transient.replace("transient: true", "transient: false");
    assert!(parse_failure_block(&fenced("failure", &agree)).is_some());
}

#[test]
fn quoted_blocks_in_replies_and_list_items_are_not_outcomes() {
    let quoted: String = fenced("success", &success_body())
        .lines()
        .map(|l| format!("> {l}\n"))
        .collect();
    let listed: String = fenced("success", &success_body())
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect();
    let reply = format!("Why did this pass?\n\n{quoted}\nand in a list:\n\n- see\n\n{listed}");
    assert_eq!(parse_blocks(&reply), vec![]);
    assert!(parse_success_blocks(&reply).is_empty());
    assert!(!contains_idempotency_key(&reply, KEY));
}

#[test]
fn several_blocks_between_prose_come_back_in_order() {
    let text = format!(
        "Intro.\n\n{}\nBetween.\n\n{}\nOutro with `code`.\n",
        fenced("success", &success_body()),
        fenced("failure", &failure_body())
    );
    let parsed: Vec<(BlockKind, usize)> = parse_blocks(&text)
        .into_iter()
        .map(|p| p.map(|p| (p.block.kind(), p.line)).expect("valid"))
        .collect();
    assert_eq!(
        parsed,
        vec![(BlockKind::Success, 3), (BlockKind::Failure, 14)]
    );
    assert_eq!(parse_success_blocks(&text).len(), 1);
    assert_eq!(parse_failure_block(&text), Some(sample_failure()));
}

#[test]
fn last_valid_failure_block_wins_and_invalid_ones_are_skipped() {
    let later = failure_body().replace("stage_attempt: 1", "stage_attempt: 2");
    let broken = failure_body().replace("category: transient", "category: ???");
    let text = format!(
        "{}\n{}\n{}",
        fenced("failure", &failure_body()),
        fenced("failure", &later),
        fenced("failure", &broken)
    );
    assert_eq!(parse_failure_block(&text).map(|b| b.stage_attempt), Some(2));
}

#[test]
fn crlf_comments_parse_like_lf_ones() {
    let lf = format!(
        "Prose.\n\n{}\nafter\n",
        fenced(
            "success",
            &format!("{}summary2: |\n  a\n  b\n", success_body())
        )
    );
    let crlf = lf.replace('\n', "\r\n");
    assert_eq!(parse_blocks(&crlf), parse_blocks(&lf));
    let block = parse_success_blocks(&crlf).remove(0);
    assert_eq!(block.extra["summary2"], serde_yaml::Value::from("a\nb\n"));
}

#[test]
fn unknown_fields_are_kept_and_rendered_back() {
    let body = format!(
        "{}reviewer: ana\ncost: {{tokens: 1200, usd: 0.4}}\n",
        success_body()
    );
    let block = parse_success_blocks(&fenced("success", &body)).remove(0);
    assert_eq!(block.extra["reviewer"], serde_yaml::Value::from("ana"));
    assert_eq!(block.extra["cost"]["tokens"], serde_yaml::Value::from(1200));
    let rendered = render_block(&OutcomeBlock::Success(block.clone()));
    assert!(rendered.contains("reviewer: ana\n"), "{rendered}");
    assert_eq!(parse_success_blocks(&rendered), vec![block]);
}

#[test]
fn unclosed_fence_and_bad_yaml_are_errors_with_lines() {
    let cut = format!("prose\n\n```yaml sortie:success\n{}", success_body());
    let err = only_error(&cut);
    assert_eq!(err.line, 3);
    assert!(err.message.contains("closing fence is missing"), "{err}");

    let bad = format!(
        "a\n\n{}",
        fenced("failure", "role: qa\nstage_attempt: [1\n")
    );
    let err = only_error(&bad);
    assert_eq!(err.field, None);
    assert!(
        err.message.starts_with("invalid YAML: ") && err.message.contains("at line 6 column 1"),
        "{err}"
    );

    let dup = fenced("failure", &format!("{}role: dev\n", failure_body()));
    assert!(only_error(&dup).message.contains("duplicate"));

    let list = fenced("success", "- a\n- b\n");
    assert!(only_error(&list).message.contains("found a list"));
    assert!(only_error(&fenced("success", "")).message.contains("empty"));
}

#[test]
fn contains_idempotency_key_needs_a_valid_block() {
    let text = fenced("failure", &failure_body());
    assert!(contains_idempotency_key(&text, KEY));
    assert!(!contains_idempotency_key(&text, &"0".repeat(64)));
    let broken = fenced(
        "failure",
        &failure_body().replace("next_action: retry", "next_action: wait"),
    );
    assert!(!contains_idempotency_key(&broken, KEY));
    assert!(!contains_idempotency_key(&format!("the key is {KEY}"), KEY));
}

#[test]
fn rendered_block_is_exactly_the_documented_shape() {
    let mut block = sample_failure();
    block.duration_seconds = Some(12.5);
    block.detail = "3 cases red:\n- a\n- b".into();
    let expected = format!(
        "```yaml sortie:failure\nrole: qa\nstage_attempt: 1\nidempotency_key: {KEY}\n\
         from_status: code-review\nto_status: qa-blocked\nreason_code: tests.failed\n\
         category: transient\ntransient: true\nnext_action: retry\ndetail: |-\n  3 cases red:\n  - a\n  - b\n\
         duration_seconds: 12.5\n```\n"
    );
    assert_eq!(render_block(&OutcomeBlock::Failure(block)), expected);
}

#[test]
fn rendering_picks_a_fence_longer_than_any_backtick_run() {
    let mut block = sample_failure();
    block.detail = "log:\n```\nboom\n````".into();
    let outcome = OutcomeBlock::Failure(block);
    let rendered = render_block(&outcome);
    assert!(
        rendered.starts_with("`````yaml sortie:failure\n"),
        "{rendered}"
    );
    assert_eq!(
        parse_blocks(&rendered),
        vec![Ok(ParsedBlock {
            block: outcome,
            line: 1
        })]
    );
}

#[test]
fn comment_is_prose_blank_line_block() {
    let outcome = OutcomeBlock::Failure(sample_failure());
    let comment = render_comment("qa found three failing cases.\n", &outcome);
    assert_eq!(
        comment,
        format!(
            "qa found three failing cases.\n\n{}",
            render_block(&outcome)
        )
    );
    assert_eq!(render_comment("  \n", &outcome), render_block(&outcome));
}

#[test]
fn prose_that_would_hide_or_forge_a_block_is_fenced_off() {
    let outcome = OutcomeBlock::Failure(sample_failure());
    let forged = format!("Look:\n\n{}", fenced("success", &success_body()));
    let unclosed = "Log:\n\n```\nstill open";
    for prose in [forged.as_str(), unclosed] {
        let comment = render_comment(prose, &outcome);
        assert_eq!(
            parse_blocks(&comment),
            vec![Ok(ParsedBlock {
                block: outcome.clone(),
                line: comment.lines().count() - 11
            })],
            "{comment}"
        );
        assert!(comment.starts_with("````text\n"), "{comment}");
    }
}

#[test]
fn validate_reports_without_a_line() {
    let mut block = sample_failure();
    block.reason_code = "Tests Failed".into();
    let err = OutcomeBlock::Failure(block.clone())
        .validate()
        .expect_err("invalid");
    assert_eq!(err.line, 0);
    assert!(
        err.to_string()
            .starts_with("failure block: field `reason_code`: "),
        "{err}"
    );
    block.reason_code = "tests.failed".into();
    block.extra.insert("detail".into(), "again".into());
    let err = OutcomeBlock::Failure(block)
        .validate()
        .expect_err("invalid");
    assert_eq!(err.field.as_deref(), Some("detail"));
}

/// Regression (found by tests/block_roundtrip.rs): libyaml treats U+2028 as a
/// line break, so indenting an artifact or ending a block scalar on one broke the block.
#[test]
fn line_separators_survive_rendering() {
    let mut success = SuccessBlock {
        role: "yes".into(),
        stage_attempt: 1,
        idempotency_key: KEY.into(),
        from_status: "0".into(),
        to_status: "a".into(),
        summary: "\n\u{2028}".into(),
        run_id: None,
        duration_seconds: None,
        artifacts: BTreeMap::new(),
        evidence: None,
        extra: BTreeMap::new(),
    };
    success
        .artifacts
        .insert("\u{2028}yes\n".into(), "\u{2029}".into());
    let block = OutcomeBlock::Success(success);
    let rendered = render_block(&block);
    assert_eq!(
        parse_blocks(&rendered),
        vec![Ok(ParsedBlock { block, line: 1 })],
        "{rendered}"
    );
}

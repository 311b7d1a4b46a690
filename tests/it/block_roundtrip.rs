//! Property: whatever a block holds, rendering it and parsing the result gives it back.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_yaml::Value;
use sortie::block::jira::{adf, wiki};
use sortie::block::{
    parse_blocks, render_block, render_comment, Category, FailureBlock, NextAction, OutcomeBlock,
    ParsedBlock, SuccessBlock,
};

/// Strings a YAML or Markdown writer is most likely to get wrong.
const TRICKY: &[&str] = &[
    "",
    " ",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "1e3",
    "0x1F",
    "0o17",
    "012",
    "1_000",
    "1:20",
    "2001-12-14",
    ".inf",
    "-.nan",
    "1.0",
    "-1",
    "+1",
    "a: b",
    "- a",
    "? a",
    "# not a comment",
    "a #b",
    "&anchor",
    "*alias",
    "!tag",
    "%YAML",
    "@x",
    "`x`",
    "```",
    "````yaml sortie:success",
    "~~~",
    "---",
    "...",
    "|",
    ">",
    "'",
    "\"",
    "''",
    "\\",
    "\\n",
    "\n",
    "\r\n",
    "\r",
    "\t",
    " leading",
    "trailing ",
    "a\n\nb\n\n",
    "\n lead",
    "\u{0}",
    "\u{7f}",
    "\u{85}",
    "\u{a0}",
    "\u{2028}",
    "\u{2029}",
    "\u{feff}",
    "é漢🦀",
    "<!--",
    "<pre>",
    "> quoted",
    "    indented",
    "[link]: x",
    "{a: 1}",
    "[1, 2]",
    // Jira wiki markup: the macros that end a code box, and its other markup.
    "{code}",
    "{code:yaml}",
    "{CODE}",
    "{noformat}",
    "{noformat:title=x}",
    "{quote}",
    "{{x}}",
    "{",
    "}",
    "\\{code}",
    "bq. ",
    "h1. ",
    "\n```\n{code}\n{noformat}\n```\n",
    "\n{code:yaml}\n# sortie:success\n",
];

/// Any string, biased towards the tricky ones and their combinations.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(TRICKY).prop_map(str::to_owned),
        2 => "[ -~\n\r\t`'\"#:]{0,20}",
        1 => any::<String>(),
    ];
    prop::collection::vec(piece, 0..5).prop_map(|parts| parts.concat())
}

/// A string with something other than whitespace in it (role, status names).
fn name() -> impl Strategy<Value = String> {
    (text(), "[a-z0-9é-]", text()).prop_map(|(a, b, c)| format!("{a}{b}{c}"))
}

fn key() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

fn reason_code() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}(\\.[a-z][a-z0-9_]{0,8}){0,3}"
}

fn duration() -> impl Strategy<Value = Option<f64>> {
    prop::option::of(prop_oneof![
        Just(0.0),
        Just(12.0),
        (prop::num::f64::POSITIVE | prop::num::f64::ZERO).prop_filter("finite", |f| f.is_finite()),
    ])
}

fn yaml_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::num::f64::ANY
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Sequence),
            prop::collection::btree_map(text(), inner, 0..4).prop_map(|m| {
                Value::Mapping(m.into_iter().map(|(k, v)| (Value::String(k), v)).collect())
            }),
        ]
    })
}

const TAKEN: &[&str] = &[
    "role",
    "stage_attempt",
    "idempotency_key",
    "from_status",
    "to_status",
    "summary",
    "run_id",
    "duration_seconds",
    "artifacts",
    "reason_code",
    "category",
    "transient",
    "next_action",
    "detail",
    "kind",
    "line",
];

fn extra() -> impl Strategy<Value = BTreeMap<String, Value>> {
    prop::collection::btree_map(
        text().prop_filter("a defined field", |k| !TAKEN.contains(&k.as_str())),
        yaml_value(),
        0..3,
    )
}

fn success() -> impl Strategy<Value = OutcomeBlock> {
    (
        (name(), 1..=u32::MAX, key(), name(), name(), text()),
        (
            prop::option::of(text()),
            duration(),
            prop::collection::btree_map(text(), text(), 0..3),
            extra(),
        ),
    )
        .prop_map(
            |((role, stage_attempt, idempotency_key, from_status, to_status, summary), rest)| {
                let (run_id, duration_seconds, artifacts, extra) = rest;
                OutcomeBlock::Success(SuccessBlock {
                    role,
                    stage_attempt,
                    idempotency_key,
                    from_status,
                    to_status,
                    summary,
                    run_id,
                    duration_seconds,
                    artifacts,
                    evidence: None,
                    extra,
                })
            },
        )
}

fn failure() -> impl Strategy<Value = OutcomeBlock> {
    (
        (name(), 1..=u32::MAX, key(), name(), name(), reason_code()),
        (
            proptest::sample::select(Category::ALL.to_vec()),
            proptest::sample::select(NextAction::ALL.to_vec()),
            text(),
            prop::option::of(text()),
            duration(),
            extra(),
        ),
    )
        .prop_map(|(head, rest)| {
            let (role, stage_attempt, idempotency_key, from_status, to_status, reason_code) = head;
            let (category, next_action, detail, run_id, duration_seconds, extra) = rest;
            OutcomeBlock::Failure(FailureBlock {
                role,
                stage_attempt,
                idempotency_key,
                from_status,
                to_status,
                reason_code,
                category,
                transient: category == Category::Transient,
                next_action,
                detail,
                run_id,
                duration_seconds,
                extra,
            })
        })
}

fn outcome() -> impl Strategy<Value = OutcomeBlock> {
    prop_oneof![success(), failure()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn rendered_block_parses_back_to_itself(block in outcome()) {
        prop_assert_eq!(block.validate(), Ok(()));
        let rendered = render_block(&block);
        prop_assert!(rendered.ends_with('\n'));
        let parsed = parse_blocks(&rendered);
        prop_assert_eq!(parsed, vec![Ok(ParsedBlock { block, line: 1 })], "rendered:\n{}", rendered);
    }

    #[test]
    fn a_comment_holds_exactly_its_own_block_whatever_the_prose(block in outcome(), prose in text()) {
        let comment = render_comment(&prose, &block);
        let parsed = parse_blocks(&comment);
        prop_assert_eq!(parsed.len(), 1, "comment:\n{}", comment);
        let found = parsed.into_iter().next().expect("one block").expect("valid");
        prop_assert_eq!(found.block, block, "comment:\n{}", comment);
    }

    #[test]
    fn a_block_always_has_a_json_form(block in outcome()) {
        let parsed = ParsedBlock { block, line: 1 };
        let json = serde_json::to_value(&parsed).expect("json");
        prop_assert_eq!(&json["kind"], &serde_json::json!(parsed.block.kind().as_str()));
        prop_assert_eq!(&json["role"], &serde_json::json!(parsed.block.role()));
    }

    #[test]
    fn a_comment_rendered_to_adf_parses_back_to_its_block(block in outcome(), prose in text()) {
        let doc = adf::from_markdown(&render_comment(&prose, &block));
        let json = serde_json::to_string(&doc).expect("json");
        let parsed: Vec<_> = parse_blocks(&json).into_iter().map(|p| p.map(|p| p.block)).collect();
        prop_assert_eq!(parsed, vec![Ok(block.clone())], "ADF:\n{}", json);
        // Jira may drop the code block's language: the marker line in the text keeps the kind.
        let stripped = json.replace(r#""attrs":{"language":"yaml"},"#, "");
        let parsed: Vec<_> = parse_blocks(&stripped).into_iter().map(|p| p.map(|p| p.block)).collect();
        prop_assert_eq!(parsed, vec![Ok(block)], "ADF without language:\n{}", stripped);
    }

    #[test]
    fn a_comment_rendered_to_wiki_markup_parses_back_to_its_block(block in outcome(), prose in text()) {
        let text = wiki::from_markdown(&render_comment(&prose, &block));
        let parsed: Vec<_> = parse_blocks(&text).into_iter().map(|p| p.map(|p| p.block)).collect();
        prop_assert_eq!(parsed, vec![Ok(block.clone())], "wiki:\n{}", text);
        // Data Center may hand the comment back with CRLF line endings.
        let crlf = text.replace('\n', "\r\n");
        let parsed: Vec<_> = parse_blocks(&crlf).into_iter().map(|p| p.map(|p| p.block)).collect();
        prop_assert_eq!(parsed, vec![Ok(block.clone())], "wiki with CRLF:\n{:?}", crlf);
        // The Jira adapter hands the pipeline the Markdown the wiki text stands for.
        let markdown = wiki::to_markdown(&crlf);
        let parsed: Vec<_> = parse_blocks(&markdown).into_iter().map(|p| p.map(|p| p.block)).collect();
        prop_assert_eq!(parsed, vec![Ok(block)], "wiki as Markdown:\n{}", markdown);
    }
}

/// A success block whose summary is `summary`, everything else plain.
fn summarised(summary: &str) -> OutcomeBlock {
    OutcomeBlock::Success(SuccessBlock {
        role: "architect".into(),
        stage_attempt: 1,
        idempotency_key: "ab".repeat(32),
        from_status: "Ready for Design".into(),
        to_status: "Design Approved".into(),
        summary: summary.into(),
        run_id: None,
        duration_seconds: None,
        artifacts: [("notes".to_string(), summary.to_string())].into(),
        evidence: None,
        extra: Default::default(),
    })
}

/// Issue #29 (3): wiki markup has no escape inside `{code}` / `{noformat}`, so a
/// summary holding both closing macros (or backticks) must not end the box early.
#[test]
fn a_summary_holding_wiki_code_macros_or_backticks_survives_wiki_markup() {
    let summaries = [
        "{code}",
        "{noformat}",
        "{noformat:title=x}",
        "uses {code} and {noformat} and ``` fences",
        "{code}\n{noformat}\n```\n{code:yaml}\n# sortie:success",
        "```",
        "`x` and ```` and {{code}}",
        "line one\r\n{noformat}\r{code}",
        "é漢🦀 {CODE} {NoFormat}",
    ];
    for summary in summaries {
        let block = summarised(summary);
        for prose in ["", "The architect is done.", "```\n{code}\n{noformat}\n```"] {
            let text = wiki::from_markdown(&render_comment(prose, &block));
            let parsed: Vec<_> = parse_blocks(&text)
                .into_iter()
                .map(|p| p.map(|p| p.block))
                .collect();
            assert_eq!(
                parsed,
                vec![Ok(block.clone())],
                "summary {summary:?}, wiki:\n{text}"
            );
        }
    }
}

//! Every ADF document sortie can write follows the ADF rules in
//! `tests/fixtures/jira/adf-subset.schema.json` (written from Atlassian's ADF
//! documentation): whatever Markdown the prose holds, and whatever the block.

use proptest::prelude::*;
use serde_json::json;
use sortie::block::jira::adf;
use sortie::block::{render_comment, OutcomeBlock, SuccessBlock};

use crate::jira_model::check_adf;

/// Markdown pieces whose ADF is easy to get wrong.
const PIECES: &[&str] = &[
    "plain",
    "**bold**",
    "*em*",
    "`code`",
    "**`bold code`**",
    "[link](https://x.test)",
    "[`code link`](https://x.test)",
    "[](https://empty.test)",
    "<b>html</b>",
    "# Heading",
    "###### h6",
    "> quoted",
    "> # heading in a quote",
    "> ---",
    "- item",
    "1. first",
    "- > quote in a list",
    "- # heading in a list",
    "  - nested",
    "---",
    "***",
    "```\n```",
    "```rust\nfn main() {}\n```",
    "~~~\n~~~",
    "    indented code",
    "line  \nbreak",
    "a\\\nb",
    "\n",
    "\n\n",
    " ",
    "",
    "[ref]: https://x.test",
    "![img](https://x.test/i.png)",
    "&amp;",
    "\u{0}",
    "é漢🦀",
    "> - a\n>   ```yaml sortie:success\n>   role: a\n>   ```",
];

fn prose() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(PIECES).prop_map(str::to_owned),
        1 => "[ -~\n]{0,12}",
    ];
    prop::collection::vec(piece, 0..6).prop_map(|p| p.join("\n"))
}

fn block() -> OutcomeBlock {
    OutcomeBlock::Success(SuccessBlock {
        role: "architect".into(),
        stage_attempt: 1,
        idempotency_key: "ab".repeat(32),
        from_status: "Ready for Design".into(),
        to_status: "Design Approved".into(),
        summary: "done".into(),
        run_id: None,
        duration_seconds: None,
        artifacts: Default::default(),
        evidence: None,
        extra: Default::default(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn any_comment_sortie_writes_is_valid_adf(prose in prose()) {
        let doc = adf::from_markdown(&render_comment(&prose, &block()));
        prop_assert!(check_adf(&doc).is_ok(), "{}\n{:?}", serde_json::to_string_pretty(&doc).unwrap(), check_adf(&doc));
        let bare = adf::from_markdown(&prose);
        prop_assert!(check_adf(&bare).is_ok(), "{}\n{:?}", serde_json::to_string_pretty(&bare).unwrap(), check_adf(&bare));
    }
}

#[test]
fn the_schema_refuses_what_jira_refuses() {
    // Not a rubber stamp: each document breaks one documented rule.
    let bad = [
        json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [{"type": "text", "text": ""}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "codeBlock", "content": [{"type": "text", "text": "x", "marks": [{"type": "strong"}]}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "paragraph", "content": [{"type": "text", "text": "x", "marks": [{"type": "code"}, {"type": "em"}]}]}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "blockquote", "content": [{"type": "heading", "attrs": {"level": 1}}]}]}),
        json!({"type": "doc", "version": 2, "content": []}),
        json!({"type": "doc", "version": 1, "content": [{"type": "bulletList", "content": []}]}),
        json!({"type": "doc", "version": 1, "content": [{"type": "heading", "attrs": {"level": 7}}]}),
    ];
    for doc in bad {
        assert!(check_adf(&doc).is_err(), "accepted {doc}");
    }
}

#[test]
fn markdown_maps_onto_the_adf_nodes_a_person_expects() {
    let doc = adf::from_markdown(
        "# Result\n\nSee **the** `DESIGN.md` and [PR](https://x.test/1).\n\n- one\n- two\n\n> quoted\n",
    );
    let kinds: Vec<&str> = doc["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["heading", "paragraph", "bulletList", "blockquote"]);
    let para = &doc["content"][1]["content"];
    assert_eq!(
        para[1],
        json!({"type": "text", "text": "the", "marks": [{"type": "strong"}]})
    );
    assert_eq!(
        para[3],
        json!({"type": "text", "text": "DESIGN.md", "marks": [{"type": "code"}]})
    );
    assert_eq!(
        para[5],
        json!({"type": "text", "text": "PR", "marks": [{"type": "link", "attrs": {"href": "https://x.test/1"}}]})
    );
    // And back: the Markdown a reader (and an agent's prompt) gets.
    assert_eq!(
        adf::to_markdown(&doc),
        "# Result\n\nSee **the** `DESIGN.md` and [PR](<https://x.test/1>).\n\n- one\n- two\n\n> quoted\n"
    );
}

#[test]
fn markdown_maps_onto_the_wiki_markup_a_data_center_user_sees() {
    use sortie::block::jira::wiki;
    let text = wiki::from_markdown(
        "# Result\n\nSee **the** `DESIGN.md`, [PR](https://x.test/1) and {this}.\n\n- one\n- two\n\n> quoted\n\n```yaml sortie:success\nrole: qa\n```\n",
    );
    assert_eq!(
        text,
        "h1. Result\n\nSee *the* {{DESIGN.md}}, [PR|https://x.test/1] and \\{this\\}.\n\n\
         * one\n* two\n\n{quote}\nquoted\n{quote}\n\n{code:yaml}\n# sortie:success\nrole: qa\n{code}\n"
    );
}

#[test]
fn wiki_code_macros_with_parameters_and_the_marker_are_outcome_blocks() {
    let body = "# sortie:success\nrole: qa\nstage_attempt: 3\nidempotency_key: {key}\n\
                from_status: Code Review\nto_status: Done\nsummary: ok\n";
    let key = "cd".repeat(32);
    for open in [
        "{code:language=yaml|title=Outcome}",
        "{code:title=x}",
        "{noformat}",
        "{code}",
    ] {
        let close = if open.starts_with("{noformat") {
            "{noformat}"
        } else {
            "{code}"
        };
        let text = format!("Done.\n{open}\n{}{close}\n", body.replace("{key}", &key));
        let parsed = sortie::block::parse_blocks(&text);
        let [Ok(p)] = parsed.as_slice() else {
            panic!("{open}: {parsed:?}");
        };
        assert_eq!((p.block.stage_attempt(), p.line), (3, 2), "{open}");
    }
    // Without the marker it is just code, and inside {quote} it is a person quoting.
    let plain = format!(
        "{{code:yaml}}\n{}{{code}}\n",
        &body.replace("{key}", &key)[17..]
    );
    assert!(sortie::block::parse_blocks(&plain).is_empty());
    let quoted = format!(
        "{{quote}}\n{{code:yaml}}\n{}{{code}}\n{{quote}}\n",
        body.replace("{key}", &key)
    );
    assert!(sortie::block::parse_blocks(&quoted).is_empty());
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        proptest::sample::select(vec![
            "doc",
            "paragraph",
            "codeBlock",
            "text",
            "blockquote",
            "bulletList",
            "listItem",
            "heading",
            "hardBreak",
            "mention",
            "# sortie:success\nrole: a",
            "",
        ])
        .prop_map(|s| json!(s)),
        "[ -~\n]{0,10}".prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(6, 64, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                proptest::sample::select(vec![
                    "type", "content", "text", "attrs", "marks", "language", "level", "href"
                ]),
                inner,
                0..5
            )
            .prop_map(|m| json!(m)),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Hostile comments: whatever a Jira comment body holds, reading it never panics.
    #[test]
    fn any_adf_shaped_json_or_wiki_text_reads_without_panicking(
        content in prop::collection::vec(json_value(), 0..4),
        wiki in prop::collection::vec(proptest::sample::select(vec![
            "{code}", "{code:yaml}", "{code:language=yaml|x}", "{noformat}", "{quote}", "bq. x",
            "# sortie:success", "# sortie:", "role: a", "h1. t", "h9. t", "\\", "{code", "}", "\r",
        ]).prop_map(str::to_owned), 0..12),
    ) {
        let doc = json!({"type": "doc", "version": 1, "content": content});
        let _ = sortie::block::parse_blocks(&doc.to_string());
        let _ = sortie::block::parse_blocks(&wiki.join("\n"));
    }
}

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

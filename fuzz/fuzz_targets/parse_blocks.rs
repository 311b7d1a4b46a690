//! Parse arbitrary comments; every valid block must survive render -> parse unchanged,
//! and a comment rendered around it must hold exactly that block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sortie::block::{parse_blocks, render_block, render_comment, OutcomeBlock};

/// Structural equality that also holds for a NaN kept in an extra field
/// (`NaN != NaN`, but both print as `NaN`).
fn same(a: &OutcomeBlock, b: &OutcomeBlock) -> bool {
    a == b || format!("{a:?}") == format!("{b:?}")
}

fuzz_target!(|text: &str| {
    for parsed in parse_blocks(text).into_iter().flatten() {
        let block = parsed.block;
        assert_eq!(block.validate(), Ok(()), "a parsed block is valid");

        let rendered = render_block(&block);
        let again: Vec<_> = parse_blocks(&rendered);
        assert_eq!(again.len(), 1, "rendered:\n{rendered}");
        let again = again.into_iter().next().unwrap();
        let again = again.unwrap_or_else(|e| panic!("{e}\nrendered:\n{rendered}"));
        assert!(same(&again.block, &block), "{:?}\n!=\n{block:?}\nrendered:\n{rendered}", again.block);

        let comment = render_comment(text, &block);
        let found: Vec<_> = parse_blocks(&comment);
        assert_eq!(found.len(), 1, "comment:\n{comment}");
        let found = found.into_iter().next().unwrap();
        let found = found.unwrap_or_else(|e| panic!("{e}\ncomment:\n{comment}"));
        assert!(same(&found.block, &block), "comment:\n{comment}");
    }
});

//! The adapters that run the tracker contract suite (`crate::contract`), one file each.
//! To add one: a file here with a `Fixture` and a `contract_tests!` line, and its `mod`
//! below (docs/trackers/contract.md).

mod gitea;
mod github;
pub mod github_project;
mod gitlab;
mod jira;
mod linear;
mod local;
mod memory;

use crate::contract::BrokenCursor;
use crate::model_plumbing::NextCursor;

/// What a model serves for the contract's broken cursor.
fn next_cursor(broken: BrokenCursor) -> NextCursor {
    match broken {
        BrokenCursor::Repeated => NextCursor::Repeated,
        BrokenCursor::Missing => NextCursor::Missing,
    }
}

//! A success block's `evidence` (issue #33): what sortie itself saw of a run, beside
//! what the agent said. The checks it ran in the workspace after the agent (`verify`),
//! with their exit codes, durations and test counts, and the change as git sees it
//! against the base at launch. Specified in `docs/evidence.md`.

use serde::{Deserialize, Serialize};

/// What sortie observed of a successful run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The stage's `verify` commands, in order, as they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckEvidence>,
    /// The change on the ticket's branch, when the workspace is a git work tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeEvidence>,
    /// What the handoff check made of the run against the workspace's git baseline at
    /// launch: `observed` (a new head, or a changed index or working tree), `absent`
    /// (unchanged, handed on because the stage's policy is `off`), `not_determinable`
    /// (not a git work tree of its own, or git failed; handed on unless `strict`) or
    /// `no_change_needed` (nothing seen done, and the agent said none was needed, with
    /// its reason as the summary). None when nothing was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<String>,
    /// The model that ran the stage, as its argv selected it (`--model`; see
    /// `config::model_in_argv`); none when that cannot be told (issue #33).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Evidence {
    /// Nothing observed.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
            && self.change.is_none()
            && self.work.is_none()
            && self.model.is_none()
    }
}

/// One `verify` command as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckEvidence {
    /// The command, its words joined by spaces (quoted where a word holds a space).
    pub command: String,
    /// `passed`, `failed` or `timed_out`.
    pub result: String,
    /// The exit code; none when it was killed or stopped by a signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Wall time in seconds.
    pub duration_seconds: f64,
    /// The test counts its output reported, when it has a summary sortie recognises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestCounts>,
}

/// Tests passed, failed and skipped, as a test runner's summary line reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCounts {
    /// Passed.
    pub passed: u64,
    /// Failed.
    pub failed: u64,
    /// Skipped or ignored.
    #[serde(default)]
    pub skipped: u64,
}

/// The run's change as git sees it: the branch head against the head at launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEvidence {
    /// The head at launch.
    pub base: String,
    /// The head now.
    pub head: String,
    /// Commits from `base` to `head`.
    pub commits: u64,
    /// Files changed from `base` to `head` (committed or not).
    pub files_changed: u64,
    /// Lines added.
    pub insertions: u64,
    /// Lines removed.
    pub deletions: u64,
}

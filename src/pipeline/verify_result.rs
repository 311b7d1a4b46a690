//! The last `verify` result on a ticket, read back from its blocks for `pipeline status`
//! and the ticket view.

use std::fmt::Write as _;

use serde::Serialize;

use crate::block::OutcomeBlock;

/// The last `verify` result on a ticket (issue #33), as `pipeline status` and the
/// ticket view show it: from its newest block that has one, a success block's
/// `evidence.checks` or a `verify.failed` / `verify.timeout` failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyResult {
    /// The role whose run was verified.
    pub role: String,
    /// Its attempt.
    pub attempt: u32,
    /// `passed`, `failed`, `timed_out` or `cannot_start`.
    pub result: String,
    /// The checks as they ran (a success block's evidence); empty for a failure, whose
    /// block names the failing command in its detail.
    pub checks: Vec<crate::block::CheckEvidence>,
    /// The failure's reason code (`verify.failed`, `verify.timeout`, `verify.cannot_start`).
    pub reason_code: Option<String>,
    /// The failure detail's first line: which command, how it ended.
    pub detail: Option<String>,
}

impl VerifyResult {
    /// The newest verify result among `blocks` (oldest first), if any has one.
    pub fn last_of<'b>(blocks: impl DoubleEndedIterator<Item = &'b OutcomeBlock>) -> Option<Self> {
        blocks.rev().find_map(Self::of)
    }

    /// The verify result one block records, if it records one.
    pub fn of(block: &OutcomeBlock) -> Option<Self> {
        match block {
            OutcomeBlock::Success(s) => {
                let checks = s.evidence.as_ref().map(|e| e.checks.clone())?;
                let worst = checks
                    .iter()
                    .find(|c| c.result != "passed")
                    .map_or("passed", |c| c.result.as_str())
                    .to_string();
                (!checks.is_empty()).then(|| VerifyResult {
                    role: s.role.clone(),
                    attempt: s.stage_attempt,
                    result: worst,
                    checks,
                    reason_code: None,
                    detail: None,
                })
            }
            OutcomeBlock::Failure(f) => {
                // The reason codes of `run::verify` (`VERIFY_FAILED`, `VERIFY_TIMEOUT`,
                // `VERIFY_CANNOT_START`).
                let result = match f.reason_code.as_str() {
                    "verify.failed" => "failed",
                    "verify.timeout" => "timed_out",
                    "verify.cannot_start" => "cannot_start",
                    _ => return None,
                };
                Some(VerifyResult {
                    role: f.role.clone(),
                    attempt: f.stage_attempt,
                    result: result.to_string(),
                    checks: Vec::new(),
                    reason_code: Some(f.reason_code.clone()),
                    detail: f.detail.lines().next().map(str::to_string),
                })
            }
        }
    }

    /// One line for a person: `backend attempt 2: verify passed: cargo test passed
    /// (12 passed, 0 failed) in 3.1 s; cargo clippy passed in 5.0 s`.
    pub fn to_text(&self) -> String {
        let mut line = format!(
            "{} attempt {}: verify {}",
            self.role, self.attempt, self.result
        );
        if !self.checks.is_empty() {
            let checks: Vec<String> = self.checks.iter().map(check_text).collect();
            let _ = write!(line, ": {}", checks.join("; "));
        }
        if let Some(code) = &self.reason_code {
            let _ = write!(line, " ({code})");
        }
        if let Some(detail) = self.detail.as_deref().filter(|d| !d.is_empty()) {
            let _ = write!(line, ": {detail}");
        }
        line
    }
}

/// `cargo test passed (12 passed, 0 failed) in 3.1 s`.
pub fn check_text(check: &crate::block::CheckEvidence) -> String {
    let mut text = format!("{} {}", check.command, check.result);
    if let Some(code) = check.exit_code.filter(|c| *c != 0) {
        let _ = write!(text, " with exit code {code}");
    }
    if let Some(t) = check.tests {
        let _ = write!(text, " ({} passed, {} failed", t.passed, t.failed);
        if t.skipped > 0 {
            let _ = write!(text, ", {} skipped", t.skipped);
        }
        text.push(')');
    }
    let _ = write!(text, " in {:.1} s", check.duration_seconds);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(yaml: &str) -> OutcomeBlock {
        let text = format!("```yaml sortie:{yaml}\n```\n");
        crate::block::parse_blocks(&text)
            .remove(0)
            .unwrap_or_else(|e| panic!("{e}: {text}"))
            .block
    }

    const COMMON: &str =
        "role: backend\nstage_attempt: 2\nidempotency_key: 22d7724a473c11fa292146f772b4dc2618ddddc3b8a26e96176ffc63c84ba627\nfrom_status: a\nto_status: b\n";

    fn success(checks: &str) -> OutcomeBlock {
        block(&format!(
            "success\n{COMMON}summary: done\nevidence:\n  checks:\n{checks}"
        ))
    }

    fn failure(code: &str, detail: &str) -> OutcomeBlock {
        block(&format!(
            "failure\n{COMMON}reason_code: {code}\ncategory: transient\ntransient: true\nnext_action: retry\ndetail: {detail:?}\n"
        ))
    }

    /// Issue #33: what `pipeline status` and the ticket view say of a ticket's verify.
    #[test]
    fn the_last_verify_result_comes_from_the_newest_block_that_has_one() {
        let passed = success(
            "    - {command: cargo test, result: passed, exit_code: 0, duration_seconds: 3.14, tests: {passed: 12, failed: 0, skipped: 1}}\n    - {command: cargo clippy, result: passed, exit_code: 0, duration_seconds: 5}\n",
        );
        let result = VerifyResult::of(&passed).expect("a result");
        assert_eq!(result.result, "passed");
        assert_eq!(
            result.to_text(),
            "backend attempt 2: verify passed: cargo test passed (12 passed, 0 failed, 1 skipped) in 3.1 s; cargo clippy passed in 5.0 s"
        );
        let timed_out = failure(
            "verify.timeout",
            "the agent reported success, but verify command 1 of 1, `make`, did not finish\nIts output ends with:\n\nx",
        );
        assert_eq!(
            VerifyResult::of(&timed_out).unwrap().to_text(),
            "backend attempt 2: verify timed_out (verify.timeout): the agent reported success, but verify command 1 of 1, `make`, did not finish"
        );
        let unrelated = failure("agent.exit_nonzero", "exit 1");
        assert_eq!(VerifyResult::of(&unrelated), None);
        assert_eq!(
            VerifyResult::of(&success("    []\n")),
            None,
            "no checks ran"
        );
        // The newest block with a result wins; later blocks without one do not hide it.
        let blocks = [passed, timed_out, unrelated];
        assert_eq!(
            VerifyResult::last_of(blocks.iter()).unwrap().result,
            "timed_out"
        );
        let failed_check = success(
            "    - {command: a, result: passed, duration_seconds: 0}\n    - {command: b, result: failed, exit_code: 2, duration_seconds: 0}\n",
        );
        let result = VerifyResult::of(&failed_check).unwrap();
        assert_eq!(result.result, "failed", "the first check that did not pass");
        assert!(
            result
                .to_text()
                .ends_with("b failed with exit code 2 in 0.0 s"),
            "{}",
            result.to_text()
        );
    }
}

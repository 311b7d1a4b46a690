//! What a run produced: the agent's result file, or its exit status, turned into an outcome.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::block::{Category, NextAction};
pub use crate::usage::Usage;

/// The observed result of one agent run.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentOutcome {
    /// The agent did its job.
    Success {
        /// What it did, in a few lines.
        summary: String,
        /// Named outputs (branch, pull request URL, ...).
        artifacts: BTreeMap<String, String>,
    },
    /// The agent, or sortie watching it, observed a failure.
    Failure {
        /// Dotted reason code (`agent.timeout`, `tests.failed`, ...).
        reason_code: String,
        /// How to treat it.
        category: Category,
        /// What should happen next.
        next_action: NextAction,
        /// Human-readable detail.
        detail: String,
    },
    /// The agent needs a person's decision before it can go on (issue #34): the
    /// question is posted on the ticket and the run continues once it is answered.
    Question(AskedQuestion),
}

/// What an agent asked (`outcome: question` in its result file).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AskedQuestion {
    /// The question itself.
    pub question: String,
    /// The choices offered, if any.
    pub options: Vec<String>,
    /// Taken as the answer when the question times out, if given.
    pub default: Option<String>,
    /// What the agent found so far, and why it cannot choose.
    pub context: String,
}

impl AgentOutcome {
    /// A failure with the given code, category, next action and detail.
    pub fn failure(
        reason_code: &str,
        category: Category,
        next_action: NextAction,
        detail: impl Into<String>,
    ) -> Self {
        AgentOutcome::Failure {
            reason_code: reason_code.to_string(),
            category,
            next_action,
            detail: detail.into(),
        }
    }

    /// Whether this is a success.
    pub fn is_success(&self) -> bool {
        matches!(self, AgentOutcome::Success { .. })
    }
}

/// A result file that could not be understood.
#[derive(Debug, thiserror::Error)]
#[error("result file: {0}")]
pub struct ResultFileError(pub String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultFile {
    outcome: String,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    reason_code: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    next_action: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    artifacts: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    no_change_needed: bool,
    #[serde(default)]
    question: Option<String>,
    #[serde(default)]
    options: Vec<serde_yaml::Value>,
    #[serde(default)]
    default: Option<serde_yaml::Value>,
    #[serde(default)]
    context: Option<String>,
}

/// The artifact a success carries when its role declared that nothing needed changing
/// (`no_change_needed: true` in the result file); its value is `"true"`.
pub const NO_CHANGE_NEEDED: &str = "no_change_needed";

/// Parse the YAML an agent wrote to `SORTIE_RESULT_FILE`.
///
/// `outcome: success|failure|question` is required. A question needs `question` (and may
/// carry `options`, a `default` and `context`); `options`, `default` and `context` go
/// with a question only. A failure without `reason_code` is
/// `agent.reported_failure`; without `category` it is `unknown`; without
/// `next_action` it is `retry` for transient failures and `escalate` otherwise.
pub fn parse_result_file(text: &str) -> Result<AgentOutcome, ResultFileError> {
    let file: ResultFile =
        serde_yaml::from_str(text).map_err(|e| ResultFileError(e.to_string()))?;
    let mut artifacts: BTreeMap<String, String> = file
        .artifacts
        .into_iter()
        .map(|(k, v)| (k, scalar_to_string(v)))
        .collect();
    if file.no_change_needed {
        if file.outcome != "success" {
            return Err(ResultFileError(
                "no_change_needed: true goes with outcome: success (and the reason as summary)"
                    .to_string(),
            ));
        }
        artifacts.insert(NO_CHANGE_NEEDED.to_string(), "true".to_string());
    }
    if file.outcome != "question"
        && (file.question.is_some()
            || !file.options.is_empty()
            || file.default.is_some()
            || file.context.is_some())
    {
        return Err(ResultFileError(
            "question, options, default and context go with outcome: question".to_string(),
        ));
    }
    match file.outcome.as_str() {
        "question" => {
            let question = file
                .question
                .map(|q| q.trim().to_string())
                .filter(|q| !q.is_empty())
                .ok_or_else(|| {
                    ResultFileError("outcome: question needs a non-empty `question`".to_string())
                })?;
            let options: Vec<String> = file
                .options
                .into_iter()
                .map(scalar_to_string)
                .map(|o| o.trim().to_string())
                .collect();
            if options.iter().any(String::is_empty) {
                return Err(ResultFileError(
                    "options must be non-empty strings".to_string(),
                ));
            }
            let default = file
                .default
                .map(scalar_to_string)
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty());
            Ok(AgentOutcome::Question(AskedQuestion {
                question,
                options,
                default,
                context: file.context.unwrap_or_default().trim().to_string(),
            }))
        }
        "success" => Ok(AgentOutcome::Success {
            summary: file.summary.unwrap_or_default(),
            artifacts,
        }),
        "failure" => {
            let category = match file.category.as_deref() {
                None => Category::Unknown,
                Some(word) => Category::ALL.into_iter().find(|c| c.as_str() == word).ok_or_else(|| {
                    ResultFileError(format!("category must be one of transient, permanent, policy, unknown; found {word:?}"))
                })?,
            };
            let next_action = match file.next_action.as_deref() {
                None if category == Category::Transient => NextAction::Retry,
                None => NextAction::Escalate,
                Some(word) => NextAction::ALL.into_iter().find(|a| a.as_str() == word).ok_or_else(|| {
                    ResultFileError(format!("next_action must be one of retry, escalate, abandon, manual; found {word:?}"))
                })?,
            };
            let reason_code = file
                .reason_code
                .filter(|c| is_reason_code(c))
                .unwrap_or_else(|| "agent.reported_failure".to_string());
            let detail = match (file.detail, file.summary) {
                (Some(d), _) => d,
                (None, Some(s)) => s,
                (None, None) => String::new(),
            };
            Ok(AgentOutcome::Failure {
                reason_code,
                category,
                next_action,
                detail,
            })
        }
        other => Err(ResultFileError(format!(
            "outcome must be `success`, `failure` or `question`, found {other:?}"
        ))),
    }
}

fn scalar_to_string(value: serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(s) => s,
        serde_yaml::Value::Null => String::new(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        other => serde_yaml::to_string(&other)
            .unwrap_or_default()
            .trim_end()
            .to_string(),
    }
}

/// Whether `code` is a dotted lowercase reason code such as `tests.failed`.
pub(crate) fn is_reason_code(code: &str) -> bool {
    !code.is_empty()
        && code.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        })
}

/// The outcome of an agent that wrote no result file, from how it ended.
pub fn classify_exit(exit_code: Option<i32>, output_tail: &str) -> AgentOutcome {
    match exit_code {
        Some(0) => AgentOutcome::Success {
            summary: if output_tail.trim().is_empty() {
                "agent exited 0 without output".to_string()
            } else {
                output_tail.to_string()
            },
            artifacts: BTreeMap::new(),
        },
        Some(code) => AgentOutcome::failure(
            "agent.exit_nonzero",
            Category::Transient,
            NextAction::Retry,
            format!("agent exited with status {code}\n{output_tail}")
                .trim_end()
                .to_string(),
        ),
        None => AgentOutcome::failure(
            "agent.killed",
            Category::Transient,
            NextAction::Retry,
            format!("agent was killed by a signal\n{output_tail}")
                .trim_end()
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_result_file_with_artifacts() {
        let out = parse_result_file(
            "outcome: success\nsummary: did it\nartifacts:\n  branch: feat/x\n  pr: 12\n",
        )
        .unwrap();
        let AgentOutcome::Success { summary, artifacts } = out else {
            panic!("{out:?}")
        };
        assert_eq!(summary, "did it");
        assert_eq!(artifacts["branch"], "feat/x");
        assert_eq!(artifacts["pr"], "12");
    }

    // Issue #21: a role that found nothing to change says so, and it is recorded.
    #[test]
    fn no_change_needed_is_recorded_on_a_success_only() {
        let out = parse_result_file(
            "outcome: success\nno_change_needed: true\nsummary: already fixed upstream\n",
        )
        .unwrap();
        let AgentOutcome::Success { summary, artifacts } = out else {
            panic!("{out:?}")
        };
        assert_eq!(summary, "already fixed upstream");
        assert_eq!(artifacts[NO_CHANGE_NEEDED], "true");
        assert!(parse_result_file("outcome: failure\nno_change_needed: true\n").is_err());
        let AgentOutcome::Success { artifacts, .. } =
            parse_result_file("outcome: success\n").unwrap()
        else {
            panic!()
        };
        assert!(!artifacts.contains_key(NO_CHANGE_NEEDED));
    }

    #[test]
    fn failure_defaults_follow_category() {
        let out =
            parse_result_file("outcome: failure\ncategory: transient\nreason_code: net.flaky\n")
                .unwrap();
        assert_eq!(
            out,
            AgentOutcome::failure("net.flaky", Category::Transient, NextAction::Retry, "")
        );
        let out = parse_result_file("outcome: failure\ndetail: nope\n").unwrap();
        assert_eq!(
            out,
            AgentOutcome::failure(
                "agent.reported_failure",
                Category::Unknown,
                NextAction::Escalate,
                "nope"
            )
        );
    }

    #[test]
    fn bad_result_files_are_errors_not_panics() {
        assert!(parse_result_file("outcome: maybe\n").is_err());
        assert!(parse_result_file("outcom: success\n").is_err());
        assert!(parse_result_file("- a\n- b\n").is_err());
        assert!(parse_result_file("").is_err());
        let err = parse_result_file("outcome: failure\ncategory: flaky\n").unwrap_err();
        assert!(err.to_string().contains("category must be one of"), "{err}");
    }

    // Issue #34: an agent that needs a person asks through its result file.
    #[test]
    fn a_question_result_file_is_a_question() {
        let out = parse_result_file(
            "outcome: question\nquestion: Which API should the export use?\noptions: [REST v2, GraphQL]\ndefault: REST v2\ncontext: Both exist.\n",
        )
        .unwrap();
        assert_eq!(
            out,
            AgentOutcome::Question(AskedQuestion {
                question: "Which API should the export use?".to_string(),
                options: vec!["REST v2".to_string(), "GraphQL".to_string()],
                default: Some("REST v2".to_string()),
                context: "Both exist.".to_string(),
            })
        );
        let err = parse_result_file("outcome: question\n").unwrap_err();
        assert!(
            err.to_string().contains("needs a non-empty `question`"),
            "{err}"
        );
        let err = parse_result_file("outcome: success\nquestion: why?\n").unwrap_err();
        assert!(
            err.to_string().contains("go with outcome: question"),
            "{err}"
        );
        assert!(parse_result_file("outcome: question\nquestion: q\noptions: ['']\n").is_err());
    }

    #[test]
    fn exit_codes_classify() {
        assert!(classify_exit(Some(0), "ok").is_success());
        let AgentOutcome::Failure {
            reason_code,
            category,
            ..
        } = classify_exit(Some(3), "boom")
        else {
            panic!()
        };
        assert_eq!(
            (reason_code.as_str(), category),
            ("agent.exit_nonzero", Category::Transient)
        );
    }
}

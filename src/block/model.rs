//! The typed outcome-block values and the rules their fields obey.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::BlockError;

/// Field names of a `sortie:success` block, in rendering order.
pub(crate) const SUCCESS_FIELDS: &[&str] = &[
    "role",
    "stage_attempt",
    "idempotency_key",
    "from_status",
    "to_status",
    "summary",
    "run_id",
    "duration_seconds",
    "artifacts",
    "evidence",
];

/// Field names of a `sortie:failure` block, in rendering order.
pub(crate) const FAILURE_FIELDS: &[&str] = &[
    "role",
    "stage_attempt",
    "idempotency_key",
    "from_status",
    "to_status",
    "reason_code",
    "category",
    "transient",
    "next_action",
    "detail",
    "run_id",
    "duration_seconds",
];

/// Keys no block may carry, because `sortie block parse` adds them to every JSON object.
pub(crate) const RESERVED_FIELDS: &[&str] = &["kind", "line"];

/// Which of the two outcome blocks a fenced block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// ```` ```yaml sortie:success ````: the stage's work is done.
    Success,
    /// ```` ```yaml sortie:failure ````: the stage's run failed.
    Failure,
}

impl BlockKind {
    /// The word after `sortie:` in the fence's info string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }

    /// The field names a block of this kind defines (everything else is `extra`).
    pub(crate) fn fields(self) -> &'static [&'static str] {
        match self {
            Self::Success => SUCCESS_FIELDS,
            Self::Failure => FAILURE_FIELDS,
        }
    }
}

impl fmt::Display for BlockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure a run met; decides whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Might pass on retry (flaky test, network, rate limit).
    Transient,
    /// Will fail again the same way until someone changes the ticket or code.
    Permanent,
    /// Refused by a rule (budget, forbidden path, missing approval).
    Policy,
    /// Could not be classified.
    Unknown,
}

impl Category {
    /// Every category, in documentation order.
    pub const ALL: [Category; 4] = [
        Self::Transient,
        Self::Permanent,
        Self::Policy,
        Self::Unknown,
    ];

    /// The YAML/JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Policy => "policy",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the failing run recommends happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NextAction {
    /// Run the stage again after backoff.
    Retry,
    /// Hand to a person or a more senior role.
    Escalate,
    /// Stop working on the ticket.
    Abandon,
    /// A person must act before anything else happens.
    Manual,
}

impl NextAction {
    /// Every action, in documentation order.
    pub const ALL: [NextAction; 4] = [Self::Retry, Self::Escalate, Self::Abandon, Self::Manual];

    /// The YAML/JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Escalate => "escalate",
            Self::Abandon => "abandon",
            Self::Manual => "manual",
        }
    }
}

impl fmt::Display for NextAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `sortie:success` block: a stage finished its work on a ticket.
#[derive(Debug, Clone, PartialEq)]
pub struct SuccessBlock {
    /// Pipeline role that ran.
    pub role: String,
    /// Attempt number of this role on this ticket (>= 1).
    pub stage_attempt: u32,
    /// 64 lowercase hex digits, see [`super::idempotency_key`].
    pub idempotency_key: String,
    /// Status the ticket was claimed from.
    pub from_status: String,
    /// Status the ticket moves to.
    pub to_status: String,
    /// What was done, for people.
    pub summary: String,
    /// Run id, when known.
    pub run_id: Option<String>,
    /// Wall time of the run in seconds (>= 0), when known.
    pub duration_seconds: Option<f64>,
    /// Named results: branch, pull request URL, ...
    pub artifacts: BTreeMap<String, String>,
    /// What sortie itself observed of the run (its checks, the change), when anything.
    pub evidence: Option<super::Evidence>,
    /// Fields this version does not know, kept and rendered back.
    pub extra: BTreeMap<String, serde_yaml::Value>,
}

/// A `sortie:failure` block: a stage's run on a ticket failed.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureBlock {
    /// Pipeline role that ran.
    pub role: String,
    /// Attempt number of this role on this ticket (>= 1).
    pub stage_attempt: u32,
    /// 64 lowercase hex digits, see [`super::idempotency_key`].
    pub idempotency_key: String,
    /// Status the ticket was claimed from.
    pub from_status: String,
    /// Status the ticket moves to.
    pub to_status: String,
    /// Dotted lowercase identifier such as `tests.failed`.
    pub reason_code: String,
    /// Kind of failure.
    pub category: Category,
    /// `true` exactly when `category` is `transient`.
    pub transient: bool,
    /// Recommended next step.
    pub next_action: NextAction,
    /// What went wrong, for people.
    pub detail: String,
    /// Run id, when known.
    pub run_id: Option<String>,
    /// Wall time of the run in seconds (>= 0), when known.
    pub duration_seconds: Option<f64>,
    /// Fields this version does not know, kept and rendered back.
    pub extra: BTreeMap<String, serde_yaml::Value>,
}

/// Either outcome block.
#[derive(Debug, Clone, PartialEq)]
pub enum OutcomeBlock {
    /// A `sortie:success` block.
    Success(SuccessBlock),
    /// A `sortie:failure` block.
    Failure(FailureBlock),
}

/// A valid block found in a comment, with the 1-based line its opening fence is on.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedBlock {
    /// The block.
    pub block: OutcomeBlock,
    /// 1-based line of the opening fence in the comment.
    pub line: usize,
}

/// The fields both kinds share, borrowed.
struct Common<'a> {
    role: &'a str,
    stage_attempt: u32,
    idempotency_key: &'a str,
    from_status: &'a str,
    to_status: &'a str,
    duration_seconds: Option<f64>,
    extra: &'a BTreeMap<String, serde_yaml::Value>,
}

impl OutcomeBlock {
    /// Success or failure.
    pub fn kind(&self) -> BlockKind {
        match self {
            Self::Success(_) => BlockKind::Success,
            Self::Failure(_) => BlockKind::Failure,
        }
    }

    fn common(&self) -> Common<'_> {
        match self {
            Self::Success(b) => Common {
                role: &b.role,
                stage_attempt: b.stage_attempt,
                idempotency_key: &b.idempotency_key,
                from_status: &b.from_status,
                to_status: &b.to_status,
                duration_seconds: b.duration_seconds,
                extra: &b.extra,
            },
            Self::Failure(b) => Common {
                role: &b.role,
                stage_attempt: b.stage_attempt,
                idempotency_key: &b.idempotency_key,
                from_status: &b.from_status,
                to_status: &b.to_status,
                duration_seconds: b.duration_seconds,
                extra: &b.extra,
            },
        }
    }

    /// Pipeline role that ran.
    pub fn role(&self) -> &str {
        self.common().role
    }

    /// Attempt number of the role on the ticket.
    pub fn stage_attempt(&self) -> u32 {
        self.common().stage_attempt
    }

    /// The block's idempotency key.
    pub fn idempotency_key(&self) -> &str {
        self.common().idempotency_key
    }

    /// Status the ticket was claimed from.
    pub fn from_status(&self) -> &str {
        self.common().from_status
    }

    /// Status the ticket moves to.
    pub fn to_status(&self) -> &str {
        self.common().to_status
    }

    /// Fields this version does not know.
    pub fn extra(&self) -> &BTreeMap<String, serde_yaml::Value> {
        self.common().extra
    }

    /// Check every field against the format's rules (the same checks parsing applies).
    ///
    /// The error's `line` is 0: the block is not in a comment yet.
    pub fn validate(&self) -> Result<(), BlockError> {
        let kind = self.kind();
        let err = |field: &str, message: String| BlockError::field(0, kind, field, message);
        let common = self.common();
        not_blank(common.role).map_err(|m| err("role", m))?;
        if common.stage_attempt == 0 {
            return Err(err("stage_attempt", "must be at least 1, got 0".into()));
        }
        check_idempotency_key(common.idempotency_key).map_err(|m| err("idempotency_key", m))?;
        not_blank(common.from_status).map_err(|m| err("from_status", m))?;
        not_blank(common.to_status).map_err(|m| err("to_status", m))?;
        if let Some(seconds) = common.duration_seconds {
            check_duration(seconds).map_err(|m| err("duration_seconds", m))?;
        }
        if let Self::Failure(b) = self {
            check_reason_code(&b.reason_code).map_err(|m| err("reason_code", m))?;
            check_transient(b.category, b.transient).map_err(|m| err("transient", m))?;
        }
        for key in common.extra.keys() {
            if kind.fields().contains(&key.as_str()) || RESERVED_FIELDS.contains(&key.as_str()) {
                return Err(err(
                    key,
                    "is a defined or reserved field and cannot also be an extra field".into(),
                ));
            }
        }
        Ok(())
    }
}

impl From<SuccessBlock> for OutcomeBlock {
    fn from(block: SuccessBlock) -> Self {
        Self::Success(block)
    }
}

impl From<FailureBlock> for OutcomeBlock {
    fn from(block: FailureBlock) -> Self {
        Self::Failure(block)
    }
}

/// A status, role or other identifier must say something.
pub(crate) fn not_blank(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err("must not be empty or only whitespace".into())
    } else {
        Ok(())
    }
}

/// Exactly 64 lowercase hex digits (a sha256 digest).
pub(crate) fn check_idempotency_key(key: &str) -> Result<(), String> {
    if key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(format!(
            "expected 64 lowercase hex digits (a sha256 digest), got {key:?}"
        ))
    }
}

/// `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`, e.g. `tests.failed`, `agent.exit_nonzero`.
pub(crate) fn check_reason_code(code: &str) -> Result<(), String> {
    let segment_ok = |s: &str| {
        let mut bytes = s.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_lowercase())
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if code.split('.').all(segment_ok) {
        Ok(())
    } else {
        Err(format!(
            "expected a dotted lowercase identifier such as `tests.failed` \
             (segments of a-z, 0-9 and _, each starting with a letter), got {code:?}"
        ))
    }
}

/// `transient` is a restatement of the category, for consumers that only read one flag.
pub(crate) fn check_transient(category: Category, transient: bool) -> Result<(), String> {
    let expected = category == Category::Transient;
    if transient == expected {
        Ok(())
    } else {
        Err(format!(
            "is {transient} but category is `{category}`; it must be {expected} \
             (true exactly when category is `transient`)"
        ))
    }
}

/// A finite, non-negative number of seconds.
pub(crate) fn check_duration(seconds: f64) -> Result<(), String> {
    if seconds.is_finite() && seconds >= 0.0 {
        Ok(())
    } else {
        Err(format!(
            "expected a finite number of seconds >= 0, got {seconds}"
        ))
    }
}

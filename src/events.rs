//! The names of the events sortie fires: shared by the config (which checks a hook's
//! `event:` selection) and the hooks (which fire them), so neither imports the other.

/// Fired on every stage transition written back to the tracker.
pub const HANDOFF: &str = "tracker_pipeline.handoff";
/// Fired when a tick wins a claim.
pub const CLAIM_ACQUIRED: &str = "claim.acquired";
/// Fired when an agent process starts for a claim.
pub const RUN_STARTED: &str = "run.started";
/// Fired when an agent run ends with an outcome.
pub const RUN_FINISHED: &str = "run.finished";
/// Fired when a run is stopped before it produced an outcome.
pub const RUN_CANCELLED: &str = "run.cancelled";
/// Fired when a tick finds a claim whose lease ran out.
pub const CLAIM_EXPIRED: &str = "claim.expired";
/// Fired when a write-back is dropped on purpose (terminal wins, moved by a person).
pub const WRITEBACK_DROPPED: &str = "writeback.dropped";

/// Fired when an agent's question is on the ticket and the ticket waits for an answer.
pub const QUESTION_ASKED: &str = "question.asked";

/// Every event name sortie fires, in the order `docs/hooks.md` lists them.
pub const EVENT_NAMES: &[&str] = &[
    HANDOFF,
    CLAIM_ACQUIRED,
    RUN_STARTED,
    RUN_FINISHED,
    RUN_CANCELLED,
    CLAIM_EXPIRED,
    WRITEBACK_DROPPED,
    QUESTION_ASKED,
];

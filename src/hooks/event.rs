//! Events sortie fires: their names, payloads and stable delivery ids.
//!
//! Every event is a name plus a flat JSON object payload. Constructors below fix each
//! event's payload keys (documented in `docs/hooks.md`), so a receiver can rely on them.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use crate::events::*;

/// One event: a name, a JSON object payload and the id receivers deduplicate on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Event name, e.g. `tracker_pipeline.handoff`.
    pub name: String,
    /// Stable id: the same event fired again (a replay) has the same id.
    pub delivery_id: String,
    /// The payload, a flat JSON object.
    pub payload: Map<String, Value>,
}

/// The ticket, role and attempt an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// Tracker identity (`Tracker::name`).
    pub tracker: String,
    /// Ticket id on that tracker.
    pub ticket_id: String,
    /// Pipeline role.
    pub role: String,
    /// The stage's claim status.
    pub stage: String,
    /// The attempt (`stage_attempt`).
    pub stage_attempt: u32,
    /// Run id of the claim / run.
    pub run_id: String,
}

/// Everything `tracker_pipeline.handoff` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// Tracker identity.
    pub tracker: String,
    /// Ticket id.
    pub ticket_id: String,
    /// Role whose run produced the outcome.
    pub role: String,
    /// Status before the transition.
    pub from_status: String,
    /// Status after the transition (equal to `from_status` when the ticket stays).
    pub to_status: String,
    /// Attempt the outcome belongs to.
    pub stage_attempt: u32,
    /// `true` for `success`, `false` for `failure`.
    pub success: bool,
    /// Idempotency key of the outcome block; also the event's delivery id.
    pub idempotency_key: String,
}

/// Lower-case hex SHA-256 of `parts` joined by the unit separator (`\x1f`).
fn digest(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hasher.update([0x1f]);
        }
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// `"success"` or `"failure"`.
fn outcome_word(success: bool) -> &'static str {
    if success {
        "success"
    } else {
        "failure"
    }
}

impl Event {
    /// An event with a payload of your own; the delivery id hashes the name and the payload
    /// (serde_json sorts object keys, so equal payloads give equal ids).
    pub fn new(name: impl Into<String>, payload: Map<String, Value>) -> Event {
        let name = name.into();
        let body = Value::Object(payload.clone()).to_string();
        Event {
            delivery_id: digest(&[&name, &body]),
            name,
            payload,
        }
    }

    /// `tracker_pipeline.handoff`: exactly the nine documented keys; the delivery id is the
    /// idempotency key, so a re-fired handoff (after a crash) is recognised as a replay.
    pub fn handoff(h: &Handoff) -> Event {
        let mut p = Map::new();
        p.insert("handoff_event_name".into(), HANDOFF.into());
        p.insert("tracker".into(), h.tracker.clone().into());
        p.insert("ticket_id".into(), h.ticket_id.clone().into());
        p.insert("role".into(), h.role.clone().into());
        p.insert("from_status".into(), h.from_status.clone().into());
        p.insert("to_status".into(), h.to_status.clone().into());
        p.insert("stage_attempt".into(), h.stage_attempt.into());
        p.insert("outcome".into(), outcome_word(h.success).into());
        p.insert("idempotency_key".into(), h.idempotency_key.clone().into());
        Event {
            name: HANDOFF.to_string(),
            delivery_id: h.idempotency_key.clone(),
            payload: p,
        }
    }

    /// `claim.acquired`: a tick won the claim for `run.run_id`, held by `claimer_id`.
    pub fn claim_acquired(run: &RunRef, claimer_id: &str) -> Event {
        let mut p = run_payload(run);
        p.insert("claimer_id".into(), claimer_id.into());
        run_event(CLAIM_ACQUIRED, run, p)
    }

    /// `run.started`: the agent process of `run` was spawned.
    pub fn run_started(run: &RunRef) -> Event {
        run_event(RUN_STARTED, run, run_payload(run))
    }

    /// `run.finished`: the agent ended with `outcome` (`success`, `failure`,
    /// `question`); `reason_code` for failures.
    pub fn run_finished(run: &RunRef, outcome: &str, reason_code: Option<&str>) -> Event {
        let mut p = run_payload(run);
        p.insert("outcome".into(), outcome.into());
        p.insert(
            "reason_code".into(),
            reason_code.map_or(Value::Null, Into::into),
        );
        run_event(RUN_FINISHED, run, p)
    }

    /// `run.cancelled`: the run was stopped without an outcome, for `reason`
    /// (`lease_lost`, `ticket_left_stage`, `shutdown`).
    pub fn run_cancelled(run: &RunRef, reason: &str) -> Event {
        let mut p = run_payload(run);
        p.insert("reason".into(), reason.into());
        run_event(RUN_CANCELLED, run, p)
    }

    /// `claim.expired`: the lease of `run` (held by `claimer_id`) ran out without renewal.
    pub fn claim_expired(run: &RunRef, claimer_id: &str) -> Event {
        let mut p = run_payload(run);
        p.insert("claimer_id".into(), claimer_id.into());
        run_event(CLAIM_EXPIRED, run, p)
    }

    /// `writeback.dropped`: the outcome with `idempotency_key` was not written, for `reason`
    /// (`terminal`, `moved`, ...); its delivery id derives from the idempotency key.
    pub fn writeback_dropped(
        run: &RunRef,
        idempotency_key: &str,
        outcome: &str,
        reason: &str,
    ) -> Event {
        let mut p = run_payload(run);
        p.insert("outcome".into(), outcome.into());
        p.insert("idempotency_key".into(), idempotency_key.into());
        p.insert("reason".into(), reason.into());
        Event {
            name: WRITEBACK_DROPPED.to_string(),
            delivery_id: digest(&[WRITEBACK_DROPPED, idempotency_key]),
            payload: p,
        }
    }

    /// `question.asked`: an agent's question is on the ticket and the ticket waits in
    /// `waits_in` for a person's answer; the delivery id is the question's idempotency
    /// key, so a replayed write-back is recognised.
    pub fn question_asked(
        run: &RunRef,
        question_id: &str,
        question: &str,
        waits_in: &str,
        idempotency_key: &str,
    ) -> Event {
        let mut p = run_payload(run);
        p.insert("question_id".into(), question_id.into());
        p.insert("question".into(), question.into());
        p.insert("waits_in".into(), waits_in.into());
        p.insert("idempotency_key".into(), idempotency_key.into());
        Event {
            name: QUESTION_ASKED.to_string(),
            delivery_id: idempotency_key.to_string(),
            payload: p,
        }
    }

    /// A payload value as text, when it is a string, number or boolean.
    pub fn field(&self, key: &str) -> Option<String> {
        match self.payload.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// The payload as the JSON text sent to webhooks and written to a shell hook's stdin.
    pub fn body(&self) -> String {
        Value::Object(self.payload.clone()).to_string()
    }

    /// `SORTIE_EVENT_*` variables for a shell hook: `SORTIE_EVENT_NAME`,
    /// `SORTIE_EVENT_DELIVERY_ID`, and one per payload key, upper-cased (null is empty,
    /// lists and objects are their JSON text).
    pub fn env_vars(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            ("SORTIE_EVENT_NAME".to_string(), self.name.clone()),
            (
                "SORTIE_EVENT_DELIVERY_ID".to_string(),
                self.delivery_id.clone(),
            ),
        ];
        for (key, value) in &self.payload {
            let name: String = key
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            let text = match value {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            vars.push((format!("SORTIE_EVENT_{name}"), text));
        }
        vars
    }
}

/// The keys every run-bound event carries.
fn run_payload(run: &RunRef) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("tracker".into(), run.tracker.clone().into());
    p.insert("ticket_id".into(), run.ticket_id.clone().into());
    p.insert("role".into(), run.role.clone().into());
    p.insert("stage".into(), run.stage.clone().into());
    p.insert("stage_attempt".into(), run.stage_attempt.into());
    p.insert("run_id".into(), run.run_id.clone().into());
    p
}

/// A run-bound event: one of each name per run, so name + run id identify it.
fn run_event(name: &str, run: &RunRef, payload: Map<String, Value>) -> Event {
    Event {
        name: name.to_string(),
        delivery_id: digest(&[name, &run.tracker, &run.run_id]),
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunRef {
        RunRef {
            tracker: "local".into(),
            ticket_id: "T-1".into(),
            role: "qa".into(),
            stage: "code-review".into(),
            stage_attempt: 2,
            run_id: "r-1".into(),
        }
    }

    #[test]
    fn run_events_have_distinct_stable_ids() {
        let a = Event::run_started(&run());
        let b = Event::run_finished(&run(), "success", None);
        assert_ne!(a.delivery_id, b.delivery_id);
        assert_eq!(a.delivery_id, Event::run_started(&run()).delivery_id);
        let mut other = run();
        other.run_id = "r-2".into();
        assert_ne!(a.delivery_id, Event::run_started(&other).delivery_id);
    }

    #[test]
    fn env_vars_upper_case_the_keys() {
        let e = Event::run_finished(&run(), "failure", Some("agent.crashed"));
        let vars = e.env_vars();
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SORTIE_EVENT_NAME"), Some(RUN_FINISHED));
        assert_eq!(get("SORTIE_EVENT_TICKET_ID"), Some("T-1"));
        assert_eq!(get("SORTIE_EVENT_STAGE_ATTEMPT"), Some("2"));
        assert_eq!(get("SORTIE_EVENT_REASON_CODE"), Some("agent.crashed"));
        let ok = Event::run_finished(&run(), "success", None).env_vars();
        assert!(ok.contains(&("SORTIE_EVENT_REASON_CODE".into(), String::new())));
    }

    #[test]
    fn custom_event_ids_depend_on_the_payload() {
        let mut p = Map::new();
        p.insert("x".into(), 1.into());
        let a = Event::new("custom", p.clone());
        p.insert("x".into(), 2.into());
        assert_ne!(a.delivery_id, Event::new("custom", p).delivery_id);
    }
}

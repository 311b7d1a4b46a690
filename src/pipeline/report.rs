//! What a tick did or would do, for people (lines) and programs (JSON).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::eligibility::SkipReason;
use crate::agent::CancelReason;
use crate::config::Config;
use crate::ledger::CeilingScope;

/// Everything one tick did, in the order it happened.
#[derive(Debug, Clone, Serialize)]
pub struct TickReport {
    /// Whether this was a dry run (nothing claimed, run or written).
    pub dry_run: bool,
    /// Tracker identity.
    pub tracker: String,
    /// When the tick started.
    pub started_at: DateTime<Utc>,
    /// Tickets listed on the pipeline's statuses.
    pub tickets_listed: usize,
    /// Board entries skipped as unreadable, with the reason.
    pub warnings: Vec<String>,
    /// Outbox entries replayed from earlier runs.
    pub replays: Vec<WritebackLine>,
    /// Claims whose ticket left its stage; their holders were asked to stop.
    pub cancels: Vec<CancelLine>,
    /// Runs this tick started (or, in a dry run, would start).
    pub runs: Vec<RunLine>,
    /// Tickets on pipeline statuses that were not dispatched, and why.
    pub skips: Vec<SkipLine>,
    /// Tickets the board holds on statuses no stage claims and no terminal set names,
    /// counted by status (boards that can list them cheaply: the local board).
    pub unclaimed_statuses: std::collections::BTreeMap<String, usize>,
    /// The in-flight caps that, rather than the board, held tickets back: how many
    /// tickets wait for each (from `skips`).
    pub cap_waits: Vec<CapWait>,
    /// Watched tickets' pull requests: what each called for and what was done (or, in
    /// a dry run, would be), or why nothing.
    pub reactions: Vec<ReactionLine>,
    /// Tickets parked in `questions.waiting_status` whose question was answered, moved
    /// back to their stage's claim status (or, in a dry run, that would be).
    pub unparked: Vec<UnparkLine>,
}

/// A ticket moved back from `questions.waiting_status` to its stage, its question
/// answered (or timed out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnparkLine {
    /// The ticket.
    pub ticket: String,
    /// The role whose question it was.
    pub role: String,
    /// The question.
    pub question_id: String,
    /// `answered by <author>`, `answered by timeout`, `timed out unanswered`.
    pub answered: String,
    /// The waiting status.
    pub from_status: String,
    /// The stage's claim status.
    pub to_status: String,
    /// `moved`, `would move`, or why not.
    pub result: String,
}

/// What one watched ticket's pull request called for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionLine {
    /// The ticket.
    pub ticket: String,
    /// Its pull request, when one was found.
    pub pull_request: Option<u64>,
    /// `ci_failure`, `review_comments`, `bot_review`, `merge_conflict`, `exhausted`,
    /// `merge`, `merged`, `closed_unmerged`; none when it waits.
    pub kind: Option<String>,
    /// `reacted`, `would_react`, `exists` (stored already), `waiting`, `merge_refused`,
    /// `error`.
    pub outcome: String,
    /// The round, for kinds with rounds.
    pub round: Option<u32>,
    /// Why, or what was done.
    pub detail: String,
}

impl ReactionLine {
    /// One line for a person.
    pub fn to_text(&self) -> String {
        let pr = self
            .pull_request
            .map(|n| format!(" pull request #{n}"))
            .unwrap_or_default();
        let kind = self
            .kind
            .as_deref()
            .map(|k| match self.round {
                Some(round) => format!(" {k} round {round}"),
                None => format!(" {k}"),
            })
            .unwrap_or_default();
        format!(
            "reaction ticket {}{pr}{kind}: {}: {}",
            self.ticket, self.outcome, self.detail
        )
    }
}

/// Tickets held back by one in-flight cap: they would run, but the cap is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapWait {
    /// Which cap: `global`, `role` or `status`.
    pub scope: CeilingScope,
    /// The role (role cap) or the claim status (status cap); empty for the global cap.
    pub name: String,
    /// The cap.
    pub limit: u32,
    /// How many tickets wait for it.
    pub tickets: usize,
}

impl CapWait {
    /// `3 tickets wait for role backend's cap of 1 (...)`: which cap, and the setting
    /// that raises it.
    pub fn to_text(&self) -> String {
        let (n, limit) = (self.tickets, self.limit);
        let tickets = if n == 1 {
            "1 ticket waits".to_string()
        } else {
            format!("{n} tickets wait")
        };
        match self.scope {
            CeilingScope::Role => format!(
                "{tickets} for role {}'s cap of {limit} (the stage's max_in_flight, default concurrency.per_role_max_in_flight)",
                self.name
            ),
            CeilingScope::Status => format!(
                "{tickets} for status {}'s cap of {limit} (concurrency.per_status_max_in_flight)",
                self.name
            ),
            CeilingScope::Global => {
                format!("{tickets} for the global cap of {limit} (concurrency.max_in_flight)")
            }
        }
    }
}

/// Group the skips that a cap caused by cap: global first, then roles and statuses in
/// the config's stage order.
pub fn cap_waits(config: &Config, skips: &[SkipLine]) -> Vec<CapWait> {
    let mut out: Vec<CapWait> = Vec::new();
    for skip in skips {
        let SkipReason::CapReached { scope, limit } = &skip.reason else {
            continue;
        };
        let name = match scope {
            CeilingScope::Global => String::new(),
            CeilingScope::Role => skip.role.clone(),
            CeilingScope::Status => config
                .stages
                .iter()
                .find(|s| s.role == skip.role)
                .map_or_else(|| skip.status.clone(), |s| s.claim_status.clone()),
        };
        match out
            .iter_mut()
            .find(|w| w.scope == *scope && w.name == name && w.limit == *limit)
        {
            Some(wait) => wait.tickets += 1,
            None => out.push(CapWait {
                scope: *scope,
                name,
                limit: *limit,
                tickets: 1,
            }),
        }
    }
    let rank = |w: &CapWait| {
        let stage = config.stages.iter().position(|s| match w.scope {
            CeilingScope::Global => true,
            CeilingScope::Role => s.role == w.name,
            CeilingScope::Status => s.claim_status == w.name,
        });
        let scope = match w.scope {
            CeilingScope::Global => 0,
            CeilingScope::Role => 1,
            CeilingScope::Status => 2,
        };
        (scope, stage.unwrap_or(usize::MAX))
    };
    out.sort_by_key(rank);
    out
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunLine {
    /// Ticket id.
    pub ticket: String,
    /// Role.
    pub role: String,
    /// Attempt (0 in a dry run: not allocated).
    pub attempt: u32,
    /// `would_run`, `success`, `failure`, `cancelled` or `not_started`.
    pub outcome: String,
    /// Failure reason code, when there is one.
    pub reason_code: Option<String>,
    /// Status when dispatched.
    pub from_status: String,
    /// Status after write-back, when it changed or was confirmed.
    pub to_status: Option<String>,
    /// A final failure with no `failure_status`: the ticket is held where it is for a
    /// person, not retried (issue #52).
    pub held: bool,
    /// What happened to the write-back.
    pub writeback: Option<String>,
    /// Extra information (why not started, retry due time, ...).
    pub note: Option<String>,
    /// The run's log, when an agent ran.
    pub log_path: Option<String>,
    /// How long the run took, seconds, once it ended.
    pub duration_seconds: Option<f64>,
    /// The stage route the run takes (`routes:`: its name, or its index when unnamed);
    /// none when it runs the stage's defaults.
    pub route: Option<String>,
    /// Why a cancelled run was stopped: `ticket_left_stage` (a person moved or closed
    /// the ticket), `lease_lost` or `shutdown`; none for a run that was not cancelled.
    pub cancel_reason: Option<CancelReason>,
    /// The ledger error that kept the run's outcome from being stored: nothing was
    /// written on the ticket, it runs again at its next claim, and the tick exits 1.
    pub ledger_error: Option<String>,
    /// The results of the stage's `verify` commands this run ran, in order (`passed`,
    /// `failed`, `timed_out`; issue #33); empty when none ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
    /// How the agent's session began (`new`, `resumed`, `fell_back`: a resume was asked
    /// for and a new session began instead); none when the run had no agent session.
    pub session: Option<crate::agent::SessionStart>,
    /// The latest rate-limit report of each limit type the agent's stream carried
    /// (Claude Code's `rate_limit_event`); left out when it carried none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<crate::rate_limit::RateLimit>,
}

impl RunLine {
    /// A run of `role` on `ticket` (at `from_status`), attempt `attempt`, that has not
    /// started yet: outcome `not_started`, nothing else known. The run fills it in.
    pub fn not_started(ticket: &str, role: &str, attempt: u32, from_status: &str) -> Self {
        RunLine {
            ticket: ticket.to_string(),
            role: role.to_string(),
            attempt,
            outcome: "not_started".to_string(),
            reason_code: None,
            from_status: from_status.to_string(),
            to_status: None,
            held: false,
            writeback: None,
            note: None,
            log_path: None,
            duration_seconds: None,
            route: None,
            cancel_reason: None,
            ledger_error: None,
            verify: Vec::new(),
            session: None,
            rate_limits: Vec::new(),
        }
    }
}

/// A ticket that was not dispatched.
#[derive(Debug, Clone, Serialize)]
pub struct SkipLine {
    /// Ticket id.
    pub ticket: String,
    /// Role of the stage that owns its status.
    pub role: String,
    /// Its status.
    pub status: String,
    /// Why.
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// One replayed (or attempted) outbox write-back.
#[derive(Debug, Clone, Serialize)]
pub struct WritebackLine {
    /// Ticket id.
    pub ticket: String,
    /// Role.
    pub role: String,
    /// Attempt.
    pub attempt: u32,
    /// `done`, `dropped: ...` or `deferred: ...`.
    pub result: String,
}

/// A cancellation request for a claim whose ticket left its stage.
#[derive(Debug, Clone, Serialize)]
pub struct CancelLine {
    /// Ticket id.
    pub ticket: String,
    /// Role.
    pub role: String,
    /// Holder asked to stop.
    pub holder: crate::ledger::ClaimerId,
    /// Why.
    pub reason: String,
}

impl TickReport {
    /// The runs whose outcome the ledger could not store (a runtime failure: the tick
    /// exits 1 once it has printed its report).
    pub fn unstored_runs(&self) -> impl Iterator<Item = &RunLine> {
        self.runs.iter().filter(|r| r.ledger_error.is_some())
    }

    /// The report as lines for a person at a terminal: every number says what it is
    /// (`ticket 1 role architect attempt 2`), so the lines read without the docs.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if self.dry_run {
            out.push_str("dry run: nothing is claimed, run or written\n");
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        for r in &self.replays {
            let _ = writeln!(
                out,
                "replayed ticket {} role {} attempt {}: {}",
                r.ticket, r.role, r.attempt, r.result
            );
        }
        for u in &self.unparked {
            let _ = writeln!(
                out,
                "unpark ticket {} role {}: {} {}; {} -> {}: {}",
                u.ticket, u.role, u.question_id, u.answered, u.from_status, u.to_status, u.result
            );
        }
        for c in &self.cancels {
            let verb = if self.dry_run {
                "would cancel"
            } else {
                "cancel"
            };
            let _ = writeln!(
                out,
                "{verb} ticket {} role {} (held by {}): {}",
                c.ticket, c.role, c.holder, c.reason
            );
        }
        for r in &self.runs {
            let _ = writeln!(out, "{}", r.to_text());
        }
        for s in &self.skips {
            let _ = writeln!(
                out,
                "skip ticket {} role {} (status {}): {}",
                s.ticket, s.role, s.status, s.reason
            );
        }
        for wait in &self.cap_waits {
            let _ = writeln!(out, "{}", wait.to_text());
        }
        for r in &self.reactions {
            let _ = writeln!(out, "{}", r.to_text());
        }
        if !self.unclaimed_statuses.is_empty() {
            let total: usize = self.unclaimed_statuses.values().sum();
            let list: Vec<String> = self
                .unclaimed_statuses
                .iter()
                .map(|(status, n)| format!("{status} ({n})"))
                .collect();
            let _ = writeln!(
                out,
                "{total} ticket(s) on statuses no stage claims: {}",
                list.join(", ")
            );
        }
        if self.runs.is_empty() && self.replays.is_empty() && self.cancels.is_empty() {
            // A ticket parked in `questions.waiting_status` is no stage's claim status,
            // but it is the pipeline's: its skip line above says why it waits.
            let waiting: std::collections::BTreeSet<&str> =
                self.skips.iter().map(|s| s.ticket.as_str()).collect();
            let listed = self.tickets_listed.max(waiting.len());
            if listed == 0 {
                let _ = writeln!(out, "nothing to do: no tickets on the pipeline's statuses");
            } else {
                let _ = writeln!(
                    out,
                    "nothing to dispatch: {listed} ticket(s) on the pipeline's statuses, none eligible",
                );
            }
        }
        out
    }
}

impl RunLine {
    /// One line for a person: `run ticket 1 role architect attempt 1: success
    /// ready-for-design -> design-approved (0.5 s)`.
    pub fn to_text(&self) -> String {
        let route = self
            .route
            .as_ref()
            .map(|r| format!(" route {r}"))
            .unwrap_or_default();
        if self.outcome == "would_run" {
            return format!(
                "would run ticket {} role {}{route} (status {}){}",
                self.ticket,
                self.role,
                self.from_status,
                note(&self.note)
            );
        }
        let mut line = format!(
            "run ticket {} role {}{route} attempt {}: {}",
            self.ticket, self.role, self.attempt, self.outcome
        );
        if let Some(code) = &self.reason_code {
            let _ = write!(line, " {code}");
        }
        if self.cancelled_by_a_person() {
            // The ticket did not stay where the run found it: the person's move is the
            // news, and the note says where the ticket is now.
            line.push_str(" by a person");
            if let Some(n) = &self.note {
                let _ = write!(line, ": {n}");
            }
            if let Some(secs) = self.duration_seconds {
                let _ = write!(line, " ({secs:.1} s)");
            }
            return line;
        }
        match &self.to_status {
            Some(to) if to != &self.from_status => {
                let _ = write!(line, " {} -> {to}", self.from_status);
            }
            // Not a retry: nothing runs it again until a person releases it.
            _ if self.held => {
                let _ = write!(line, ", held in {}", self.from_status);
            }
            _ => {
                let _ = write!(line, ", stays {}", self.from_status);
            }
        }
        if let Some(wb) = self.writeback.as_deref().filter(|wb| *wb != "done") {
            let _ = write!(line, " (write-back {wb})");
        }
        let mut notes: Vec<String> = Vec::new();
        if let Some(secs) = self.duration_seconds {
            notes.push(format!("{secs:.1} s"));
        }
        if let Some(n) = &self.note {
            notes.push(n.clone());
        }
        // A retry that lost its context is news; a new or resumed session is not.
        if self.session == Some(crate::agent::SessionStart::FellBack) {
            notes.push("could not resume the agent's session: a new one began".to_string());
        }
        if !notes.is_empty() {
            let _ = write!(line, " ({})", notes.join("; "));
        }
        line
    }

    /// A run stopped because a person moved or closed its ticket, which sortie left
    /// where the person put it (a withdrawn run that sortie moved back says so with
    /// its statuses instead).
    fn cancelled_by_a_person(&self) -> bool {
        self.outcome == "cancelled"
            && self.cancel_reason == Some(CancelReason::TicketLeftStage)
            && self.to_status.is_none()
    }
}

fn note(note: &Option<String>) -> String {
    note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::SessionStart;

    /// Issue #36: a run whose resume fell back says so to the person reading the tick.
    #[test]
    fn a_run_whose_resume_fell_back_says_so() {
        let mut line = RunLine::not_started("7", "backend", 2, "todo");
        line.outcome = "success".into();
        line.to_status = Some("review".into());
        line.duration_seconds = Some(1.5);
        line.session = Some(SessionStart::Resumed);
        assert_eq!(
            line.to_text(),
            "run ticket 7 role backend attempt 2: success todo -> review (1.5 s)"
        );
        line.session = Some(SessionStart::FellBack);
        assert_eq!(
            line.to_text(),
            "run ticket 7 role backend attempt 2: success todo -> review (1.5 s; could not \
             resume the agent's session: a new one began)"
        );
    }
}

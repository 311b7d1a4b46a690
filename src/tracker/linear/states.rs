//! The team's workflow states: read once per tick, names resolved to ids with
//! [`same_name`], and a configured status the team lacks named with the states it has.

use serde_json::json;

use super::wire::{Connection, WireState};
use super::{decode, queries, LinearTracker};
use crate::tracker::http::Retry;
#[cfg(doc)]
use crate::tracker::Tracker;
use crate::tracker::{same_name, TrackerError};

/// The team and its workflow states, as read at the start of a tick.
#[derive(Debug, Clone)]
pub(super) struct TeamStates {
    /// The team's display name.
    pub(super) name: String,
    /// Its workflow states, in Linear's order.
    pub(super) states: Vec<WireState>,
}

impl TeamStates {
    /// The state named `status` (compared with [`same_name`]).
    pub(super) fn find(&self, status: &str) -> Option<&WireState> {
        self.states.iter().find(|s| same_name(&s.name, status))
    }

    /// Every state's name, comma-separated, for error messages.
    pub(super) fn names(&self) -> String {
        self.states
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl LinearTracker {
    /// Read the team's workflow states (once per tick: [`Tracker::list`] calls this).
    pub(super) async fn refresh_states(&self) -> Result<TeamStates, TrackerError> {
        #[derive(serde::Deserialize)]
        struct WireTeam {
            name: String,
            states: Connection<WireState>,
        }
        let data = self
            .transport
            .send(
                "SortieTeamStates",
                queries::TEAM_STATES,
                json!({ "team": self.team }),
                Retry::Safe,
            )
            .await?;
        let teams: Connection<WireTeam> = decode("SortieTeamStates", &data["teams"])?;
        let Some(team) = teams.nodes.into_iter().next() else {
            return Err(TrackerError::NotFound(format!(
                "Linear has no team with the key {:?} that this key can see (tracker.team is the \
                 prefix of the team's issue identifiers, e.g. ENG for ENG-123)",
                self.team
            )));
        };
        if team.states.page_info.has_next_page {
            tracing::warn!(team = %self.team, "more than 50 workflow states: only the first 50 are seen");
        }
        let states = TeamStates {
            name: team.name,
            states: team.states.nodes,
        };
        *crate::tracker::unpoisoned(&self.states) = Some(states.clone());
        Ok(states)
    }

    /// The states read this tick, reading them when nothing has yet.
    pub(super) async fn states(&self) -> Result<TeamStates, TrackerError> {
        let cached = crate::tracker::unpoisoned(&self.states).clone();
        match cached {
            Some(states) => Ok(states),
            None => self.refresh_states().await,
        }
    }

    /// The error naming the configured statuses the team lacks, if any.
    pub(super) fn missing_states(&self, states: &TeamStates) -> Option<TrackerError> {
        let missing: Vec<&str> = self
            .required
            .iter()
            .filter(|s| states.find(s).is_none())
            .map(String::as_str)
            .collect();
        (!missing.is_empty()).then(|| {
            TrackerError::Invalid(format!(
                "Linear team {} has no workflow state named {}; its states are: {} \
                 (rename the status in the pipeline or add the state in Linear's team settings)",
                self.team,
                missing
                    .iter()
                    .map(|m| format!("{m:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                states.names()
            ))
        })
    }
}

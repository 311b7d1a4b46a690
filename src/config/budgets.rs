//! `budgets:` and `prices:`: the spending limits (per run of a stage, per ticket, per
//! day across the pipeline) and the price table that turns tokens into dollars for
//! agents that report tokens without a cost (issue #37).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::Stage;

/// `budgets:`: limits per run of a stage, per ticket across all its roles and attempts,
/// and per day across the pipeline; none by default. A run that reaches one while it
/// runs is stopped, and a ticket at one before its run gets one `budget.exceeded`
/// failure block instead of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Budgets {
    /// Dollars spent on the ticket (reported by agents or priced from `prices`).
    /// Default none.
    pub max_cost_usd_per_ticket: Option<f64>,
    /// Tokens billed to the ticket (input, cache reads and writes, output). Default none.
    pub max_tokens_per_ticket: Option<u64>,
    /// Runs started on the ticket. Default none.
    pub max_runs_per_ticket: Option<u32>,
    /// Limits on each run of the stage of a role, keyed by role. Default none.
    pub per_stage: BTreeMap<String, StageBudget>,
    /// Dollars spent by the whole pipeline (every tracker ticket, every host sharing the
    /// ledger) in one day. Default none.
    pub max_cost_usd_per_day: Option<f64>,
    /// Where the day of `max_cost_usd_per_day` starts and ends. Default UTC.
    pub timezone: DayZone,
}

impl Budgets {
    /// Whether any token limit is set (their checks need a run's usage).
    pub fn limits_tokens(&self) -> bool {
        self.max_tokens_per_ticket.is_some()
            || self
                .per_stage
                .values()
                .any(|s| s.max_tokens_per_run.is_some())
    }

    /// Whether any dollar limit is set (their checks need a run's cost).
    pub fn limits_dollars(&self) -> bool {
        self.max_cost_usd_per_ticket.is_some()
            || self.max_cost_usd_per_day.is_some()
            || self
                .per_stage
                .values()
                .any(|s| s.max_cost_usd_per_run.is_some())
    }

    /// The per-run limits of `role`'s stage (none set: all `None`).
    pub fn for_role(&self, role: &str) -> StageBudget {
        self.per_stage.get(role).copied().unwrap_or_default()
    }
}

/// `budgets.per_stage.<role>:`: limits on each run of that role's stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StageBudget {
    /// Dollars one run may spend. Default none.
    pub max_cost_usd_per_run: Option<f64>,
    /// Tokens one run may be billed for. Default none.
    pub max_tokens_per_run: Option<u64>,
}

/// `budgets.timezone`: a fixed offset from UTC, in seconds east (`+02:00` is 7200).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DayZone {
    /// Seconds east of UTC.
    pub offset_seconds: i32,
}

impl DayZone {
    /// The chrono offset.
    pub fn offset(self) -> chrono::FixedOffset {
        chrono::FixedOffset::east_opt(self.offset_seconds)
            .unwrap_or_else(|| chrono::FixedOffset::east_opt(0).expect("UTC"))
    }

    /// How it is written: `UTC` or `+HH:MM`.
    pub fn label(self) -> String {
        if self.offset_seconds == 0 {
            "UTC".to_string()
        } else {
            self.offset().to_string()
        }
    }
}

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Input tokens not read from a prompt cache (cache writes are priced as input).
    pub input: f64,
    /// Input tokens read from a prompt cache. Default: `input`.
    pub cached_input: f64,
    /// Output tokens (reasoning included).
    pub output: f64,
}

/// `prices:`: model name -> [`Price`]. Default empty.
pub type Prices = BTreeMap<String, Price>;

/// `budgets:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudgets {
    max_cost_usd_per_ticket: Option<f64>,
    max_tokens_per_ticket: Option<u64>,
    max_runs_per_ticket: Option<u32>,
    per_stage: Option<BTreeMap<String, RawStageBudget>>,
    max_cost_usd_per_day: Option<f64>,
    timezone: Option<String>,
}

/// `budgets.per_stage.<role>:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStageBudget {
    max_cost_usd_per_run: Option<f64>,
    max_tokens_per_run: Option<u64>,
}

/// One entry of `prices:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrice {
    input: f64,
    cached_input: Option<f64>,
    output: f64,
}

/// A dollar amount must be a positive, finite number.
fn dollars(problems: &mut Problems, path: &FieldPath, value: Option<f64>) -> Option<f64> {
    if value.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
        problems.at_value(path, "expected a positive number of dollars");
    }
    value
}

/// A count must be at least 1.
fn count<T: Copy + PartialEq + From<u8>>(
    problems: &mut Problems,
    path: &FieldPath,
    value: Option<T>,
) -> Option<T> {
    if value == Some(T::from(0)) {
        problems.at_value(path, "expected at least 1");
    }
    value
}

/// Check `budgets:` against the stages and build it.
pub(crate) fn normalize_budgets(
    raw: RawBudgets,
    stages: &[Stage],
    problems: &mut Problems,
) -> Budgets {
    let path = FieldPath::root().key("budgets");
    let mut per_stage = BTreeMap::new();
    for (role, limits) in raw.per_stage.unwrap_or_default() {
        let at = path.key("per_stage").key(&role);
        if !stages.is_empty() && !stages.iter().any(|s| s.role == role) {
            let roles: Vec<&str> = stages.iter().map(|s| s.role.as_str()).collect();
            problems.at_key(
                &at,
                format!(
                    "`{role}` is no stage's role; expected one of: {}",
                    roles.join(", ")
                ),
            );
        }
        let budget = StageBudget {
            max_cost_usd_per_run: dollars(
                problems,
                &at.key("max_cost_usd_per_run"),
                limits.max_cost_usd_per_run,
            ),
            max_tokens_per_run: count(
                problems,
                &at.key("max_tokens_per_run"),
                limits.max_tokens_per_run,
            ),
        };
        if budget == StageBudget::default() {
            problems.at_value(
                &at,
                "expected at least one of max_cost_usd_per_run, max_tokens_per_run",
            );
        }
        per_stage.insert(role, budget);
    }
    let timezone = match raw.timezone {
        None => DayZone::default(),
        Some(text) => parse_zone(&text).unwrap_or_else(|| {
            problems.at_value(
                &path.key("timezone"),
                format!(
                    "expected `UTC` or a fixed offset such as `+02:00` or `-05:30`, found \
                     {text:?} (zone names such as Europe/Paris are not supported: sortie \
                     carries no time-zone database)"
                ),
            );
            DayZone::default()
        }),
    };
    Budgets {
        max_cost_usd_per_ticket: dollars(
            problems,
            &path.key("max_cost_usd_per_ticket"),
            raw.max_cost_usd_per_ticket,
        ),
        max_tokens_per_ticket: count(
            problems,
            &path.key("max_tokens_per_ticket"),
            raw.max_tokens_per_ticket,
        ),
        max_runs_per_ticket: count(
            problems,
            &path.key("max_runs_per_ticket"),
            raw.max_runs_per_ticket,
        ),
        per_stage,
        max_cost_usd_per_day: dollars(
            problems,
            &path.key("max_cost_usd_per_day"),
            raw.max_cost_usd_per_day,
        ),
        timezone,
    }
}

/// `UTC`, `Z`, `+HH:MM`, `-HH:MM` (also `UTC+HH:MM`): the offset, if it is one.
fn parse_zone(text: &str) -> Option<DayZone> {
    let t = text.trim();
    let t = t
        .strip_prefix("UTC")
        .or_else(|| t.strip_prefix("utc"))
        .unwrap_or(t);
    if t.is_empty() || t == "Z" {
        return Some(DayZone::default());
    }
    let (sign, rest) = match t.as_bytes().first()? {
        b'+' => (1, &t[1..]),
        b'-' => (-1, &t[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "00"));
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 14 || m > 59 {
        return None;
    }
    Some(DayZone {
        offset_seconds: sign * (h * 3600 + m * 60),
    })
}

/// Check `prices:` and build it: every price a finite number >= 0.
pub(crate) fn normalize_prices(
    raw: Option<BTreeMap<String, RawPrice>>,
    problems: &mut Problems,
) -> Prices {
    let path = FieldPath::root().key("prices");
    let mut prices = Prices::new();
    for (model, raw) in raw.unwrap_or_default() {
        let at = path.key(&model);
        if model.trim().is_empty() {
            problems.at_key(&at, "expected a model name, found an empty key");
        }
        let price = Price {
            input: raw.input,
            cached_input: raw.cached_input.unwrap_or(raw.input),
            output: raw.output,
        };
        for (key, value) in [
            ("input", price.input),
            ("cached_input", price.cached_input),
            ("output", price.output),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                problems.at_value(
                    &at.key(key),
                    "expected a number of dollars per million tokens, 0 or more",
                );
            }
        }
        prices.insert(model, price);
    }
    prices
}

/// Where the first limit that applies to `stage`'s runs is set: the stage's own per-run
/// limit (`budgets.per_stage.<role>.<key>`) when `own` says it is set, else the first of
/// the board-wide limits (`budgets.<key>`) that is set.
fn first_limit(stage: &Stage, own: (&str, bool), board_wide: &[(&str, bool)]) -> Option<FieldPath> {
    let path = FieldPath::root().key("budgets");
    if own.1 {
        return Some(path.key("per_stage").key(&stage.role).key(own.0));
    }
    board_wide
        .iter()
        .find(|(_, set)| *set)
        .map(|(key, _)| path.key(key))
}

/// Warn, once per way a stage runs, when a dollar limit applies to runs whose cost
/// sortie cannot know (an agent that reports no cost and whose model has no price): the
/// limit cannot be checked against them.
pub(crate) fn warn_unpriced(
    budgets: &Budgets,
    prices: &Prices,
    stages: &[Stage],
    agent: &super::model::AgentConfig,
    roles_dir: &std::path::Path,
    problems: &mut Problems,
) {
    use super::model::AgentPreset;
    for stage in stages {
        // The first dollar limit that applies to the stage's runs carries the warning.
        let own = budgets
            .per_stage
            .get(&stage.role)
            .is_some_and(|b| b.max_cost_usd_per_run.is_some());
        let board_wide = [
            (
                "max_cost_usd_per_ticket",
                budgets.max_cost_usd_per_ticket.is_some(),
            ),
            (
                "max_cost_usd_per_day",
                budgets.max_cost_usd_per_day.is_some(),
            ),
        ];
        let Some(at) = first_limit(stage, ("max_cost_usd_per_run", own), &board_wide) else {
            continue;
        };
        for run in super::review::runs_of(stage, agent, roles_dir) {
            let why = match (run.preset, run.model.as_deref()) {
                (AgentPreset::ClaudeCode, _) => continue,
                (_, Some(model)) if prices.contains_key(model) => continue,
                (AgentPreset::Command, _) => {
                    "runs a `command` agent, which reports no usage".to_string()
                }
                (AgentPreset::Codex, None) => {
                    "runs Codex, which reports no cost, with no model sortie can tell (set \
                     agent.model) to price it"
                        .to_string()
                }
                (AgentPreset::Codex, Some(model)) => format!(
                    "runs Codex, which reports no cost, with model `{model}`, which has no \
                     entry in `prices`"
                ),
                (AgentPreset::Acp, None) => {
                    "runs an ACP agent, which reports no cost, with no model sortie can tell \
                     (set agent.model) to price it"
                        .to_string()
                }
                (AgentPreset::Acp, Some(model)) => format!(
                    "runs an ACP agent, which reports no cost, with model `{model}`, which has \
                     no entry in `prices`"
                ),
            };
            problems.warn_at_value(
                &at,
                format!(
                    "{} {why}: its runs' cost is unknown, and this dollar limit cannot be \
                     checked against them",
                    run.who
                ),
            );
        }
    }
}

/// Warn, once per way a stage runs, when a token limit applies to runs of an agent that
/// reports no usage at all (a `command` agent): the limit cannot be checked against
/// them, as a dollar limit cannot against runs of unknown cost (issue #52).
pub(crate) fn warn_untokened(
    budgets: &Budgets,
    stages: &[Stage],
    agent: &super::model::AgentConfig,
    roles_dir: &std::path::Path,
    problems: &mut Problems,
) {
    use super::model::AgentPreset;
    for stage in stages {
        // The first token limit that applies to the stage's runs carries the warning.
        let own = budgets
            .per_stage
            .get(&stage.role)
            .is_some_and(|b| b.max_tokens_per_run.is_some());
        let board_wide = [(
            "max_tokens_per_ticket",
            budgets.max_tokens_per_ticket.is_some(),
        )];
        let Some(at) = first_limit(stage, ("max_tokens_per_run", own), &board_wide) else {
            continue;
        };
        for run in super::review::runs_of(stage, agent, roles_dir) {
            if run.preset != AgentPreset::Command {
                continue;
            }
            problems.warn_at_value(
                &at,
                format!(
                    "{} runs a `command` agent, which reports no usage: its runs' tokens are \
                     unknown, and this token limit cannot be checked against them",
                    run.who
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_utc_or_fixed_offsets() {
        let secs = |t: &str| parse_zone(t).map(|z| z.offset_seconds);
        assert_eq!(secs("UTC"), Some(0));
        assert_eq!(secs("Z"), Some(0));
        assert_eq!(secs("+02:00"), Some(7200));
        assert_eq!(secs("-05:30"), Some(-(5 * 3600 + 30 * 60)));
        assert_eq!(secs("UTC+01:00"), Some(3600));
        assert_eq!(secs("Europe/Paris"), None);
        assert_eq!(secs("+2"), None);
        assert_eq!(secs("+15:00"), None);
        assert_eq!(
            DayZone {
                offset_seconds: 7200
            }
            .label(),
            "+02:00"
        );
        assert_eq!(DayZone::default().label(), "UTC");
    }
}

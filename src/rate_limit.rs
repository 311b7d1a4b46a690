//! Where an agent's account stands against its provider's rate limits, as the agent's
//! event stream reported it (Claude Code's `rate_limit_event`), and how many reports
//! from many runs add up to one view per agent and limit: a leaf that the agent runner,
//! the ledger and the daemon all speak of.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One rate limit as an agent last reported it.
///
/// `status` and `limit_type` are kept as the CLI spelled them, so a value a newer CLI
/// adds is shown rather than dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Which limit: `five_hour`, `seven_day`, `seven_day_opus`, `seven_day_sonnet`,
    /// `overage`, ... (Claude Code's `rateLimitType`); `unknown` when not given.
    pub limit_type: String,
    /// `allowed`, `allowed_warning` or `rejected` (or a word a newer CLI uses).
    pub status: String,
    /// When the limit's window resets.
    #[serde(default)]
    pub resets_at: Option<DateTime<Utc>>,
    /// How much of the limit is used, 0 to 1, when reported.
    #[serde(default)]
    pub utilization: Option<f64>,
    /// The status of the pay-as-you-go overage beyond the limit, when reported.
    #[serde(default)]
    pub overage_status: Option<String>,
    /// Whether requests are being served from the overage, when reported.
    #[serde(default)]
    pub is_using_overage: Option<bool>,
    /// The warning threshold (a fraction) the utilization went past, when reported.
    #[serde(default)]
    pub surpassed_threshold: Option<f64>,
    /// When sortie read the report.
    pub observed_at: DateTime<Utc>,
}

impl RateLimit {
    /// How bad `status` is: `allowed` 0, `allowed_warning` 1, a word sortie does not know
    /// 2 (it may mean trouble: shown over a warning), `rejected` 3.
    pub fn severity(status: &str) -> u8 {
        match status {
            "allowed" => 0,
            "allowed_warning" => 1,
            "rejected" => 3,
            _ => 2,
        }
    }
}

/// Keep `new` in `limits`, one entry per limit type: it replaces the entry of its type
/// (a stream's reports arrive in order, so the newer one is the truth).
pub fn keep_latest(limits: &mut Vec<RateLimit>, new: RateLimit) {
    match limits.iter_mut().find(|l| l.limit_type == new.limit_type) {
        Some(old) => *old = new,
        None => limits.push(new),
    }
}

/// One agent's rate limits over many runs: the current state of each limit, and the worst
/// of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentRateLimits {
    /// The agent preset (`claude-code`, ...), or `unknown`.
    pub agent: String,
    /// The worst status among `limits` (see [`RateLimit::severity`]).
    pub status: String,
    /// Each limit as last reported, by limit type.
    pub limits: Vec<AggregatedRateLimit>,
}

/// One limit of one agent, as the latest report of any run says it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AggregatedRateLimit {
    /// The report.
    #[serde(flatten)]
    pub limit: RateLimit,
    /// The run whose report it is.
    pub run_id: String,
    /// How many reports of this limit were seen (every run's latest one counts).
    pub reports: u32,
}

/// Add up rate-limit reports `(agent, run_id, report)` from any number of runs, in any
/// order: per agent and limit type the latest report wins (a limit is the account's state,
/// so an older report, even a worse one, is out of date); two reports read at the same
/// instant keep the worse status. Each agent's `status` is the worst of its limits.
/// Agents and limits come out sorted by name.
pub fn aggregate<'a>(
    reports: impl IntoIterator<Item = (&'a str, &'a str, &'a RateLimit)>,
) -> Vec<AgentRateLimits> {
    let mut latest: BTreeMap<(&str, &str), AggregatedRateLimit> = BTreeMap::new();
    for (agent, run_id, report) in reports {
        let key = (agent, report.limit_type.as_str());
        let candidate = AggregatedRateLimit {
            limit: report.clone(),
            run_id: run_id.to_string(),
            reports: 1,
        };
        match latest.get_mut(&key) {
            None => {
                latest.insert(key, candidate);
            }
            Some(kept) => {
                let reports = kept.reports + 1;
                let newer = report.observed_at > kept.limit.observed_at;
                let as_new_and_worse = report.observed_at == kept.limit.observed_at
                    && RateLimit::severity(&report.status)
                        > RateLimit::severity(&kept.limit.status);
                if newer || as_new_and_worse {
                    *kept = candidate;
                }
                kept.reports = reports;
            }
        }
    }
    let mut agents: Vec<AgentRateLimits> = Vec::new();
    for ((agent, _), limit) in latest {
        match agents.last_mut().filter(|a| a.agent == agent) {
            Some(entry) => {
                if RateLimit::severity(&limit.limit.status) > RateLimit::severity(&entry.status) {
                    entry.status = limit.limit.status.clone();
                }
                entry.limits.push(limit);
            }
            None => agents.push(AgentRateLimits {
                agent: agent.to_string(),
                status: limit.limit.status.clone(),
                limits: vec![limit],
            }),
        }
    }
    agents
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(limit_type: &str, status: &str, at: i64) -> RateLimit {
        RateLimit {
            limit_type: limit_type.to_string(),
            status: status.to_string(),
            resets_at: None,
            utilization: None,
            overage_status: None,
            is_using_overage: None,
            surpassed_threshold: None,
            observed_at: DateTime::from_timestamp(at, 0).unwrap(),
        }
    }

    #[test]
    fn a_stream_keeps_one_report_per_limit_type_the_newest() {
        let mut kept = Vec::new();
        keep_latest(&mut kept, report("five_hour", "allowed", 1));
        keep_latest(&mut kept, report("seven_day", "allowed_warning", 2));
        keep_latest(&mut kept, report("five_hour", "rejected", 3));
        assert_eq!(
            kept,
            vec![
                report("five_hour", "rejected", 3),
                report("seven_day", "allowed_warning", 2)
            ]
        );
    }

    #[test]
    fn unknown_statuses_rank_between_a_warning_and_a_rejection() {
        let order: Vec<u8> = ["allowed", "allowed_warning", "throttled", "rejected"]
            .iter()
            .map(|s| RateLimit::severity(s))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    }
}

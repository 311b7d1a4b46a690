//! `sortie stats`: runs, success rate, durations, tokens, cost and rework over a window
//! of run history, grouped by stage, role or ticket (figures: `crate::stats`).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::pipeline::Clock;
use crate::stats::{compute, parse_since, Figures, GroupBy, Stats};

/// `sortie stats` flags.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Pipeline config file. Default: `sortie.yaml` in the current directory, else `$SORTIE_CONFIG`.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// The runs that started in this window back from now (`7d`, `24h`, `90m`) or since
    /// this instant (RFC 3339).
    #[arg(long, default_value = "7d")]
    since: String,
    /// How runs are grouped (agent and model: as the run's usage row names them,
    /// `unknown` without one).
    #[arg(long, value_enum, default_value = "role")]
    by: By,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `--by`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum By {
    Stage,
    Role,
    Ticket,
    Agent,
    Model,
}

/// Run `sortie stats`.
pub fn run(args: StatsArgs) -> anyhow::Result<u8> {
    let config = Config::load(&super::config_file(args.config)?)?;
    let since = parse_since(&args.since, crate::pipeline::SystemClock::from_env().now())
        .map_err(super::UsageError)?;
    let ledger = crate::ledger::open(&config)?;
    let tracker = config.tracker.name();
    let runs = ledger.runs_since(&tracker, since)?;
    let usage = ledger.usage_since(&tracker, since)?;
    let merged = ledger.merges_since(&tracker, since)?;
    let by = match args.by {
        By::Stage => GroupBy::Stage,
        By::Role => GroupBy::Role,
        By::Ticket => GroupBy::Ticket,
        By::Agent => GroupBy::Agent,
        By::Model => GroupBy::Model,
    };
    let last_role = config.stages.last().map_or("", |s| s.role.as_str());
    let stats = compute(&runs, &usage, &merged, by, last_role, since);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &stats)?;
        writeln!(out)?;
    } else {
        out.write_all(render(&stats, last_role).as_bytes())?;
    }
    Ok(super::EXIT_OK)
}

/// The text report.
pub fn render(stats: &Stats, last_role: &str) -> String {
    let by = match stats.by {
        GroupBy::Stage => "stage",
        GroupBy::Role => "role",
        GroupBy::Ticket => "ticket",
        GroupBy::Agent => "agent",
        GroupBy::Model => "model",
    };
    let mut out = format!(
        "runs started since {}, by {by}\n",
        stats.since.format("%Y-%m-%d %H:%M UTC")
    );
    out.push_str(&format!(
        "{:<20} {:>5} {:>8} {:>8} {:>8} {:>10} {:>7}  cost\n",
        by, "runs", "success", "p50", "p95", "tokens", "rework"
    ));
    for f in stats.groups.iter().chain(std::iter::once(&stats.total)) {
        out.push_str(&line(f));
    }
    let cost = per(
        "ticket",
        "none finished",
        stats.finished_tickets,
        stats.cost_per_finished_ticket,
        stats.finished_tickets_runs_cost_unknown,
    );
    out.push_str(&format!(
        "tickets that reached the last stage ({last_role}): {}, {cost}\n",
        stats.finished_tickets
    ));
    let merged = per(
        "pull request",
        "none merged",
        stats.merged_pull_requests,
        stats.cost_per_merged_pull_request,
        stats.merged_pull_requests_runs_cost_unknown,
    );
    out.push_str(&format!(
        "pull requests merged: {}, {merged}\n",
        stats.merged_pull_requests
    ));
    out
}

/// A cost per `what` over `n` of them: `$0.6000 per ticket`, a lower bound when
/// `unknown` runs are left out, `cost unknown` when no run's cost is known, `none`
/// without any.
fn per(what: &str, none: &str, n: u32, usd: Option<f64>, unknown: u32) -> String {
    match (usd, unknown) {
        _ if n == 0 => none.to_string(),
        (None, _) => format!("cost per {what} unknown ({unknown} run(s) of unknown cost)"),
        (Some(usd), 0) => format!("${usd:.4} per {what}"),
        (Some(usd), n) => {
            format!("at least ${usd:.4} per {what} ({n} run(s) of unknown cost left out)")
        }
    }
}

fn line(f: &Figures) -> String {
    let rate = f
        .success_rate
        .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.0}s"));
    let cost = match (f.cost_usd, f.runs_cost_unknown) {
        (None, n) => format!("unknown ({n} run(s))"),
        (Some(usd), 0) => format!("${usd:.4}"),
        (Some(usd), n) => format!("${usd:.4} + {n} run(s) unknown"),
    };
    let tokens = f.tokens.map_or("unknown".to_string(), |t| t.to_string());
    format!(
        "{:<20} {:>5} {:>8} {:>8} {:>8} {:>10} {:>7}  {cost}\n",
        f.group,
        f.runs,
        rate,
        secs(f.p50_seconds),
        secs(f.p95_seconds),
        tokens,
        f.rework_rounds
    )
}

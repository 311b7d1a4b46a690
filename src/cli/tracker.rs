//! `sortie tracker check`: can sortie work with the configured tracker?

use std::io::Write;
use std::path::Path;

use clap::Subcommand;

use crate::config::Config;

/// Tracker commands.
#[derive(Debug, Subcommand)]
pub enum TrackerCommand {
    /// Check credentials, access and that every pipeline status exists; print the rate limit left.
    ///
    /// With `forge:` (where pull requests open), its token and repository access too.
    ///
    /// Exit 0 when every check passed, 1 otherwise.
    Check {
        #[command(flatten)]
        config: super::ConfigPath,
        /// Create status labels that do not exist yet (trackers that model statuses as labels).
        #[arg(long)]
        create_missing_labels: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run a tracker command.
pub fn run(cmd: TrackerCommand) -> anyhow::Result<u8> {
    match cmd {
        TrackerCommand::Check {
            config,
            create_missing_labels,
            json,
        } => check(&config.locate()?, create_missing_labels, json),
    }
}

fn check(config_path: &Path, create_missing: bool, json: bool) -> anyhow::Result<u8> {
    let config = Config::load(config_path)?;
    let mut statuses = config.pipeline_statuses();
    for stage in &config.stages {
        for s in [&stage.success_status, &stage.failure_status]
            .into_iter()
            .flatten()
        {
            if !statuses.contains(s) {
                statuses.push(s.clone());
            }
        }
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let (report, counted, unit) = runtime.block_on(async {
        let tracker = crate::tracker::open(&config)?;
        let mut report = tracker.check(&statuses, create_missing).await?;
        // What `pipeline tick` counts: the statuses stages claim or run in, narrowed by
        // `tracker.filter`, one listing as the tick's own.
        let counted = tracker
            .list_filtered(&config.pipeline_statuses(), &config.filter)
            .await
            .map(|l| l.tickets.len());
        check_forge(&config, &mut report).await;
        report.push(
            "sandbox",
            true,
            crate::config::sandbox_report(config.agent.bubblewrap.as_ref()),
        );
        let unit = tracker.rate_limit_unit();
        Ok::<_, crate::tracker::TrackerError>((report, counted, unit))
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "tracker {}", config.tracker.name())?;
        for c in &report.checks {
            writeln!(
                out,
                "{} {}: {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.what,
                c.detail
            )?;
        }
        if let Some(left) = report.rate_limit_remaining {
            writeln!(out, "rate limit: {left} {unit} left")?;
        }
        match counted {
            Ok(n) => writeln!(
                out,
                "pipeline: {n} ticket(s) on the statuses its stages claim or run in (as `pipeline tick` counts them)"
            )?,
            Err(err) => writeln!(out, "pipeline: cannot list the stages' statuses: {err}")?,
        }
    }
    Ok(if report.all_ok() {
        super::EXIT_OK
    } else {
        super::EXIT_FAILURE
    })
}

/// The forge's checks (`forge:`, where pull requests open), appended to the tracker's as
/// `forge token`, `forge repository access`, ...: its token and access to its repository,
/// the same checks its own tracker kind runs, without statuses (a forge holds no tickets).
/// A forge that cannot be opened (its token variable unset) or reached is a failed check,
/// not an abort: the tracker's lines still print.
async fn check_forge(config: &Config, report: &mut crate::tracker::CheckReport) {
    let Some(forge_config) = &config.forge else {
        return;
    };
    let name = forge_config.name();
    let forge = match crate::tracker::open_forge(config) {
        Ok(Some(forge)) => forge,
        Ok(None) => return,
        Err(err) => {
            report.push("forge token", false, format!("{name}: {err}"));
            return;
        }
    };
    match forge.check(&[], false).await {
        Ok(checked) => {
            for line in checked.checks {
                report.push(
                    format!("forge {}", line.what),
                    line.ok,
                    format!("{name}: {}", line.detail),
                );
            }
        }
        Err(err) => report.push("forge", false, format!("{name}: {err}")),
    }
}

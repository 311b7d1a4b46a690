//! `sortie workspaces prune`: remove the workspaces of finished tickets.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;

use crate::config::Config;
use crate::ledger::Ledger;
use crate::pipeline::Pipeline;

/// Workspace commands.
#[derive(Debug, Subcommand)]
pub enum WorkspacesCommand {
    /// Remove the workspaces of tickets that are terminal, closed or gone (running the
    /// `before_remove` hook first). Ticks also do this every `workspace.prune_every_ticks`
    /// (and the daemon when it starts), except for gone tickets.
    Prune {
        /// Pipeline config file. Default: `sortie.yaml` in the current directory, else `$SORTIE_CONFIG`.
        #[arg(long, short = 'c')]
        config: Option<PathBuf>,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run a workspaces command.
pub fn run(cmd: WorkspacesCommand) -> anyhow::Result<u8> {
    match cmd {
        WorkspacesCommand::Prune {
            config,
            dry_run,
            json,
        } => prune(&super::config_file(config)?, dry_run, json),
    }
}

fn prune(config_path: &Path, dry_run: bool, json: bool) -> anyhow::Result<u8> {
    let config = Config::load(config_path)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let lines = runtime.block_on(async {
        let tracker = crate::tracker::open(&config)?;
        let ledger: Arc<dyn Ledger> = crate::ledger::open(&config)?;
        let pipeline = Pipeline::new(config, tracker, ledger).await?;
        anyhow::Ok(pipeline.prune_workspaces(dry_run).await?)
    })?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &lines)?;
        writeln!(out)?;
    } else if lines.is_empty() {
        writeln!(out, "no workspaces")?;
    } else {
        for l in &lines {
            let ticket = l.ticket.as_deref().unwrap_or("?");
            writeln!(
                out,
                "{} {} (ticket {ticket}): {}",
                l.action, l.workspace, l.reason
            )?;
        }
    }
    Ok(if lines.iter().any(|l| l.action == "failed") {
        super::EXIT_FAILURE
    } else {
        super::EXIT_OK
    })
}

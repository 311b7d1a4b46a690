//! `sortie pipeline ...`: validate, tick and inspect a pipeline.

use std::path::PathBuf;

use clap::Subcommand;

/// Pipeline commands.
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Check a config and print the pipeline as a chain; exit 2 with every error otherwise.
    Validate {
        /// Pipeline config file.
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Run one reconcile sweep: claim, run and write back what the board asks for.
    Tick {
        /// Pipeline config file.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Claim nothing, run nothing, write nothing: say what would run and why the rest would not.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON document instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Show live claims, the retry queue, held tickets and recent runs.
    Status {
        /// Pipeline config file.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run a pipeline command.
pub fn run(cmd: PipelineCommand) -> anyhow::Result<u8> {
    match cmd {
        PipelineCommand::Validate { config } => super::validate::run(&config),
        other => anyhow::bail!("{other:?} is not implemented yet"),
    }
}

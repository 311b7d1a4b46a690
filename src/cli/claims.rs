//! `sortie claims ...`: inspect and release claims in the ledger.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the ledger is: from a config file's `state_root`, or given directly.
#[derive(Debug, Args)]
pub struct LedgerLocation {
    /// Pipeline config whose `state_root` holds the ledger.
    #[arg(long, short = 'c', conflicts_with = "state_root")]
    pub config: Option<PathBuf>,
    /// State root directory holding `ledger.db` (default `state`).
    #[arg(long)]
    pub state_root: Option<PathBuf>,
}

/// Claims commands.
#[derive(Debug, Subcommand)]
pub enum ClaimsCommand {
    /// List claims (live and expired).
    List {
        /// Where the ledger is.
        #[command(flatten)]
        location: LedgerLocation,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Release a claim. A live claim needs `--force`.
    Release {
        /// Tracker identity (`local`, `github:owner/repo`, ...).
        tracker: String,
        /// Ticket id.
        ticket: String,
        /// Role.
        role: String,
        /// Release even if the lease is live (the holder will find it lost and not write back).
        #[arg(long)]
        force: bool,
        /// Where the ledger is.
        #[command(flatten)]
        location: LedgerLocation,
    },
}

/// Run a claims command.
pub fn run(cmd: ClaimsCommand) -> anyhow::Result<u8> {
    let _ = cmd;
    anyhow::bail!("claims commands are not implemented yet")
}

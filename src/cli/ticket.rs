//! `sortie ticket ...`: act on one ticket of a pipeline; `release` lifts the holds sortie
//! keeps on it after a final failure, so the next tick runs it again.

use std::path::PathBuf;

use clap::Subcommand;

use crate::cli::{ConfigPath, EXIT_FAILURE, EXIT_OK};
use crate::config::Config;
use crate::ledger::{Hold, Scope};

/// Ticket commands.
#[derive(Debug, Subcommand)]
pub enum TicketCommand {
    /// Release a held ticket: the next tick runs it again, on the status it is in
    /// (the same as a person's status change or a `/retry` comment).
    Release {
        /// Ticket id, as the tracker names it (`7`, `PROJ-7`).
        id: String,
        /// Only the hold of this role (default: every hold of the ticket).
        #[arg(long)]
        role: Option<String>,
        /// Where the pipeline config is.
        #[command(flatten)]
        config: ConfigPath,
    },
}

/// Run a ticket command.
pub fn run(cmd: TicketCommand) -> anyhow::Result<u8> {
    match cmd {
        TicketCommand::Release { id, role, config } => {
            release(config.locate()?, &id, role.as_deref())
        }
    }
}

/// Clear the ticket's holds in the pipeline's ledger and say which; exit 1 when it has
/// none (a typo in the id, or already released).
fn release(config_path: PathBuf, id: &str, role: Option<&str>) -> anyhow::Result<u8> {
    let config = Config::load(&config_path)?;
    let ledger = crate::ledger::open(&config)?;
    let tracker = config.tracker.name();
    let holds: Vec<Hold> = ledger
        .holds(Scope::Tracker(&tracker))?
        .into_iter()
        .filter(|h| h.key.ticket_id == id && role.is_none_or(|r| h.key.role == r))
        .collect();
    if holds.is_empty() {
        let whose = role.map(|r| format!(" for {r}")).unwrap_or_default();
        eprintln!("ticket {id} is not held{whose} on {tracker}: nothing to release");
        return Ok(EXIT_FAILURE);
    }
    for hold in &holds {
        if ledger.clear_hold(&hold.key)? {
            println!(
                "released ticket {id} for {} (held in {} after {}); the next tick runs it",
                hold.key.role, hold.status, hold.reason_code
            );
        }
    }
    Ok(EXIT_OK)
}

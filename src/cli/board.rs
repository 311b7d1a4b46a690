//! `sortie board ...`: work with the embedded local board.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the board is: `--board PATH`, or the `tracker.path` of a local-board config.
#[derive(Debug, Args)]
pub struct BoardLocation {
    /// Board directory.
    #[arg(long, conflicts_with = "config")]
    pub board: Option<PathBuf>,
    /// Pipeline config whose tracker is a local board.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
}

/// Board commands.
#[derive(Debug, Subcommand)]
pub enum BoardCommand {
    /// Create an empty board directory (default `board`).
    Init {
        /// Board directory.
        path: Option<PathBuf>,
    },
    /// Add a ticket and print its id.
    Add {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Title.
        #[arg(long)]
        title: String,
        /// Initial status.
        #[arg(long, default_value = "todo")]
        status: String,
        /// Priority (lower is more urgent).
        #[arg(long)]
        priority: Option<i64>,
        /// Label (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// File holding the Markdown body.
        #[arg(long)]
        body_file: Option<PathBuf>,
    },
    /// List tickets.
    List {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Only tickets in this status (repeatable).
        #[arg(long)]
        status: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one ticket with its comments.
    Show {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move a ticket to a status (what a person does by editing `status:`).
    Move {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// New status.
        status: String,
    },
    /// Add a comment to a ticket.
    Comment {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// Comment text.
        #[arg(
            long,
            conflicts_with = "body_file",
            required_unless_present = "body_file"
        )]
        body: Option<String>,
        /// File holding the comment.
        #[arg(long)]
        body_file: Option<PathBuf>,
        /// Author name (default `$USER`).
        #[arg(long)]
        author: Option<String>,
    },
}

/// Run a board command.
pub fn run(cmd: BoardCommand) -> anyhow::Result<u8> {
    let _ = cmd;
    anyhow::bail!("board commands are not implemented yet")
}

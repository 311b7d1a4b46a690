//! `sortie block ...`: parse outcome blocks for downstream automation.

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

/// Block commands.
#[derive(Debug, Subcommand)]
pub enum BlockCommand {
    /// Print the outcome blocks in a comment (file or stdin) as a JSON array.
    ///
    /// Exit 0 when at least one valid block was found, 1 when none, 2 when a block is malformed.
    Parse {
        /// File to read; `-` or nothing reads stdin.
        file: Option<PathBuf>,
        /// Only blocks of this kind.
        #[arg(long, value_enum)]
        kind: Option<BlockKindArg>,
    },
}

/// Kind filter for `block parse`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BlockKindArg {
    /// `sortie:success` blocks.
    Success,
    /// `sortie:failure` blocks.
    Failure,
}

/// Run a block command.
pub fn run(cmd: BlockCommand) -> anyhow::Result<u8> {
    let _ = cmd;
    anyhow::bail!("block parse is not implemented yet")
}

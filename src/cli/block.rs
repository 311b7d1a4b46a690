//! `sortie block ...`: parse outcome blocks for downstream automation.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};

use super::{UsageError, EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use crate::block::{parse_blocks, BlockKind};

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
    match cmd {
        BlockCommand::Parse { file, kind } => parse(file.as_deref(), kind.map(BlockKind::from)),
    }
}

impl From<BlockKindArg> for BlockKind {
    fn from(arg: BlockKindArg) -> Self {
        match arg {
            BlockKindArg::Success => BlockKind::Success,
            BlockKindArg::Failure => BlockKind::Failure,
        }
    }
}

/// `block parse`: valid blocks to stdout as JSON, malformed ones to stderr as `FILE:LINE: message`.
fn parse(file: Option<&Path>, kind: Option<BlockKind>) -> anyhow::Result<u8> {
    let (name, text) = match file {
        None => read_stdin()?,
        Some(path) if path == Path::new("-") => read_stdin()?,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
            (path.display().to_string(), text)
        }
    };
    let wanted = |k: Option<BlockKind>| kind.is_none() || k == kind;
    let mut valid = Vec::new();
    let mut malformed = 0usize;
    for parsed in parse_blocks(&text) {
        match parsed {
            Ok(block) if wanted(Some(block.block.kind())) => valid.push(block),
            Ok(_) => {}
            Err(err) if wanted(err.kind) || err.kind.is_none() => {
                malformed += 1;
                eprintln!("{name}:{}: {}", err.line, err.describe());
            }
            Err(_) => {}
        }
    }
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut stdout, &valid)?;
    writeln!(stdout)?;
    stdout.flush()?;
    Ok(if malformed > 0 {
        EXIT_USAGE
    } else if valid.is_empty() {
        EXIT_FAILURE
    } else {
        EXIT_OK
    })
}

fn read_stdin() -> anyhow::Result<(String, String)> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| UsageError(format!("cannot read <stdin>: {e}")))?;
    Ok(("<stdin>".to_owned(), text))
}

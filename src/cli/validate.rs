//! `sortie pipeline validate`: check a config and print the pipeline as a chain.

use std::path::Path;

/// Validate `config`, print the chain (exit 0) or every error as `FILE:LINE:COL: message` (exit 2).
pub fn run(config: &Path) -> anyhow::Result<u8> {
    let _ = config;
    anyhow::bail!("pipeline validate is not implemented yet")
}

//! Pipeline configuration: YAML loading, defaults, `$ENV` expansion and static contract validation.

mod model;

use std::path::Path;

pub use model::*;

/// Every problem found in a config file (stub until the loader lands).
#[derive(Debug, thiserror::Error)]
#[error("invalid config")]
pub struct ConfigError;

impl Config {
    /// Read, expand, parse and validate the config file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let _ = path;
        Err(ConfigError)
    }
}

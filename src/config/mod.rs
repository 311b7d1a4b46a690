//! Pipeline configuration: YAML loading, defaults, `$ENV` expansion and static contract validation.

mod model;

pub use model::*;

/// Every problem found in a config file (stub until the loader lands).
#[derive(Debug, thiserror::Error)]
#[error("invalid config")]
pub struct ConfigError;

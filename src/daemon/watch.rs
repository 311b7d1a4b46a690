//! What the daemon watches for a reload: the config file and the role files, by
//! modification time and size.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::Config;

/// Modification time and size of each watched file (`None` when it cannot be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, Option<(SystemTime, u64)>)>);

impl Fingerprint {
    /// The config file at `path` and every prompt template of `config`: each stage's
    /// role file and each route's `role_file`.
    pub fn of(path: &Path, config: &Config) -> Self {
        let mut files = vec![path.to_path_buf()];
        files.extend(
            crate::agent::template_files(config)
                .into_iter()
                .map(|(_, file)| file),
        );
        Fingerprint(
            files
                .into_iter()
                .map(|f| {
                    let meta = std::fs::metadata(&f)
                        .ok()
                        .and_then(|m| Some((m.modified().ok()?, m.len())));
                    (f, meta)
                })
                .collect(),
        )
    }
}

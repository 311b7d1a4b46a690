//! Fault points for the crash-anywhere suite: `SORTIE_FAULT=<point>` kills the
//! process with SIGKILL when execution reaches that point.
//!
//! Points: `after_claim`, `after_in_progress`, `mid_agent`, `after_verify` (a stage with `verify`), `after_push`,
//! `after_pull_request` (git workspaces), `after_outbox`, `after_comment`,
//! `after_transition`, `before_release`; reactions: `after_reaction_decided`, `after_reaction`
//! (stored with its outbox entry), then the write-back's `after_comment`, `after_transition`. `SORTIE_FAULT` may list
//! several, comma-separated. Unset (the normal case) costs one string comparison.

use nix::sys::signal::{kill, Signal};
use nix::unistd::getpid;

/// The fault points armed for this process.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    armed: Vec<String>,
}

impl Faults {
    /// Faults armed by the `SORTIE_FAULT` environment variable.
    pub fn from_env() -> Self {
        let armed = std::env::var("SORTIE_FAULT")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        Faults { armed }
    }

    /// No faults.
    pub fn none() -> Self {
        Faults::default()
    }

    /// Die like a SIGKILL if `point` is armed.
    pub fn hit(&self, point: &str) {
        if self.armed.iter().any(|p| p == point) {
            tracing::error!(point, "fault injected: killing this process");
            let _ = kill(getpid(), Signal::SIGKILL);
            // SIGKILL cannot be caught; this is only reached if kill itself failed.
            std::process::abort();
        }
    }
}

//! What a live agent has told on its event stream so far (its last event, turns, tokens
//! and cost), shared between the reader of its stdout and whoever shows live runs.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::outcome::Usage;

/// Longest text of an [`AgentEvent`], in characters.
pub const EVENT_TEXT_CHARS: usize = 160;

/// One event of an agent's stream, as a person reads it at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentEvent {
    /// What it was: `init`, `message`, `tool_use`, `tool_result`, `result`, `retry`,
    /// `rate_limit` (Claude Code); `thread`, `turn`, `message`, `command`, `reasoning`, `file_change`,
    /// `warning`, `error`, `turn_failed` (Codex); `message`, `thought`, `tool_call`,
    /// `tool_result`, `plan`, `permission`, `stop` (ACP); `output` (a log line, for `command`).
    pub kind: String,
    /// A short text: one line, at most [`EVENT_TEXT_CHARS`] characters.
    pub text: String,
    /// When sortie read it.
    pub at: DateTime<Utc>,
}

/// A live run's progress as last read from its stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Progress {
    /// The last event, once the stream had one.
    pub last_event: Option<AgentEvent>,
    /// Model turns so far, once the stream reported one.
    pub turns: Option<u32>,
    /// Tokens (and cost, when the CLI reports it while running) so far.
    pub usage: Option<Usage>,
    /// The latest rate-limit report of each limit type (Claude Code), empty before one.
    pub rate_limits: Vec<crate::rate_limit::RateLimit>,
}

/// A handle on a run's [`Progress`]: the stream reader writes it, the daemon reads it.
/// Clones share the same progress.
#[derive(Debug, Clone, Default)]
pub struct ProgressHandle(Arc<Mutex<Progress>>);

impl ProgressHandle {
    /// The progress as of now.
    pub fn snapshot(&self) -> Progress {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the progress.
    pub(crate) fn set(&self, progress: Progress) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = progress;
    }
}

/// `text` on one line (runs of whitespace made one space), cut to [`EVENT_TEXT_CHARS`]
/// characters with `…` when cut.
pub(crate) fn short_text(text: &str) -> String {
    let mut out = String::new();
    let mut count = 0;
    for word in text.split_whitespace() {
        if count > 0 {
            out.push(' ');
            count += 1;
        }
        for c in word.chars() {
            if count >= EVENT_TEXT_CHARS {
                out.push('…');
                return out;
            }
            out.push(c);
            count += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_line_and_bounded() {
        assert_eq!(short_text("  a\n\tb   c \n"), "a b c");
        let long = "x".repeat(500);
        let cut = short_text(&long);
        assert_eq!(cut.chars().count(), EVENT_TEXT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(
            short_text(&"é".repeat(EVENT_TEXT_CHARS)).chars().count(),
            160
        );
    }
}

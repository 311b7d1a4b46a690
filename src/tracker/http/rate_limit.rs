//! Rate limits: the wait a tracker asked for (nothing is sent until it is over, and
//! every call answers [`TrackerError::RateLimited`] at once, so a rate-limited tick
//! finishes with what it read instead of hammering), the requests left in the
//! window, and the header numbers (`Retry-After`, `*-RateLimit-*`) they come from.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::HeaderMap;

use super::clock::Clock;
use crate::tracker::TrackerError;

/// Longest wait accepted from a `Retry-After` or a reset time (guards against a skewed clock).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The wait after a rate limit that names none: a minute.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Refuse to send while the wait until `until` is not over.
pub(crate) fn refuse_until(
    until: Option<DateTime<Utc>>,
    now: impl FnOnce() -> DateTime<Utc>,
) -> Result<(), TrackerError> {
    if let Some(until) = until {
        let now = now();
        if now < until {
            let left = (until - now).to_std().unwrap_or_default();
            return Err(TrackerError::RateLimited {
                retry_after: Some(round_up(left)),
            });
        }
    }
    Ok(())
}

/// A duration rounded up to whole seconds.
pub(crate) fn round_up(d: Duration) -> Duration {
    if d.subsec_nanos() > 0 {
        Duration::from_secs(d.as_secs() + 1)
    } else {
        d
    }
}

/// Header `name` as a whole number.
pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// Requests left in the rate-limit window, from the last response that said.
#[derive(Debug, Default)]
pub(crate) struct Remaining(Mutex<Option<u64>>);

impl Remaining {
    /// Remember what the last response said.
    pub fn set(&self, left: u64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(left);
    }

    /// What the last response that said left.
    pub fn get(&self) -> Option<u64> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a wait file holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct WaitFile {
    blocked_until: DateTime<Utc>,
}

/// The time until which a tracker asked us to send nothing, optionally kept in a
/// file so the next process (a cron tick) waits too.
pub(crate) struct WaitGate {
    until: Mutex<Option<DateTime<Utc>>>,
    clock: Clock,
    file: Option<PathBuf>,
    /// `Linear`: who asked, for log lines about the file.
    vendor: &'static str,
}

impl WaitGate {
    /// A gate on `clock`, loading and saving its wait in `file` when given.
    pub fn new(clock: Clock, file: Option<PathBuf>, vendor: &'static str) -> Self {
        WaitGate {
            until: Mutex::new(file.as_deref().and_then(|f| load_wait(f, vendor))),
            clock,
            file,
            vendor,
        }
    }

    /// Now, on the gate's clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Refuse to send while the wait is not over.
    pub fn check(&self) -> Result<(), TrackerError> {
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        refuse_until(until, || self.now())
    }

    /// Send nothing until `until` (saved to the file, when there is one).
    pub fn block_until(&self, until: DateTime<Utc>) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
        let Some(path) = &self.file else { return };
        // Losing the file costs one refused request in the next process, nothing more.
        let text = serde_json::to_string(&WaitFile {
            blocked_until: until,
        })
        .unwrap_or_default();
        let written = crate::state_file::write_atomically(path, text.as_bytes());
        if let Err(err) = written {
            tracing::warn!(
                path = %path.display(),
                %err,
                "could not save the {} rate-limit wait",
                self.vendor
            );
        }
    }
}

/// The wait a previous process recorded; an unreadable file is no wait.
fn load_wait(path: &Path, vendor: &str) -> Option<DateTime<Utc>> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str::<WaitFile>(&text) {
        Ok(file) => Some(file.blocked_until),
        Err(err) => {
            tracing::warn!(
                path = %path.display(),
                %err,
                "ignoring an unreadable {vendor} rate-limit file"
            );
            None
        }
    }
}

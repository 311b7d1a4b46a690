//! A run's lease as the run knows it, and the ledger calls of a run in flight that must
//! outlast a database outage: retried with backoff while the lease lasts (issue #20).
//!
//! A run whose ledger is unreachable keeps its agent going. Its renewal is retried
//! sooner than the next renewal interval, and when it ends, storing its outcome (the
//! renewal before it and the fenced outbox insert) is retried until the lease it last
//! renewed runs out. Past that, another host may hold the ticket: the run gives up,
//! says so in the log and on its report line, and whichever host claims the ticket next
//! runs it again. Nothing was stored, so nothing is written back twice.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::context::Clock;
use crate::ledger::LedgerError;

/// First wait after a failed call; doubled after each failure up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between two tries.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// When this run's lease runs out, as of its last successful claim or renewal.
#[derive(Debug)]
pub(crate) struct LeaseEnd(Mutex<DateTime<Utc>>);

impl LeaseEnd {
    /// The lease of a claim just acquired.
    pub(crate) fn new(until: DateTime<Utc>) -> Self {
        LeaseEnd(Mutex::new(until))
    }

    /// A renewal moved it.
    pub(crate) fn renewed(&self, until: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    /// When it runs out.
    pub(crate) fn until(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The next wait after `previous` (doubling, capped).
pub(crate) fn next_backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF)
}

/// Call `op` until it answers anything but [`LedgerError::Unavailable`], waiting
/// 250 ms, 500 ms, ... (at most 5 s) between tries, while `lease` lasts; the last try is
/// at the lease's end. Then it gives up with the last error. The end is measured by
/// `clock` and by the time elapsed here, whichever comes first (a test clock
/// that stands still must not make a run wait forever). Returns the answer and the
/// number of failed tries.
pub(crate) async fn retry_within_lease<T>(
    clock: &dyn Clock,
    lease: &LeaseEnd,
    what: &str,
    mut op: impl FnMut() -> Result<T, LedgerError>,
) -> (Result<T, LedgerError>, u32) {
    let left = (lease.until() - clock.now())
        .to_std()
        .unwrap_or(Duration::ZERO);
    let deadline = tokio::time::Instant::now() + left;
    let mut wait = FIRST_BACKOFF;
    let mut failed = 0;
    loop {
        let result = op();
        let Err(LedgerError::Unavailable(reason)) = &result else {
            return (result, failed);
        };
        failed += 1;
        let lease_left = (lease.until() - clock.now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let elapsed_left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let left = lease_left.min(elapsed_left);
        if left.is_zero() {
            return (result, failed);
        }
        // The last try falls on the lease's end: giving up earlier would leave a lease
        // that still stands, and the next claimer would have to wait it out anyway.
        let wait_now = wait.min(left);
        tracing::warn!(%reason, tries = failed, retry_in_ms = wait_now.as_millis() as u64, "ledger unavailable while {what}; retrying within the lease");
        tokio::time::sleep(wait_now).await;
        wait = next_backoff(wait);
    }
}

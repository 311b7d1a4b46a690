//! Where "now" comes from, so tests can move time instead of sleeping.

use std::sync::Arc;

use chrono::{DateTime, Utc};

/// Where "now" comes from (rate-limit waits).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The system clock, the default of every adapter's options.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

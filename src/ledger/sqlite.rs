//! SQLite implementation of the ledger (stub until it lands).

/// The embedded SQLite ledger.
#[derive(Debug)]
pub struct SqliteLedger;

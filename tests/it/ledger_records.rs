//! SQLite ledger files: schema versioning and migration (the behaviour every backend shares
//! is in tests/ledger_suite).

use sortie::ledger::{LedgerError, SqliteLedger};

#[test]
fn a_ledger_from_a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(SqliteLedger::open(&path).unwrap());
    let newer = SqliteLedger::SCHEMA_VERSION + 1;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {newer}"))
        .unwrap();

    let err = SqliteLedger::open(&path).unwrap_err();
    match &err {
        LedgerError::TooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, newer);
            assert_eq!(*supported, SqliteLedger::SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains("newer than this sortie supports"),
        "{message}"
    );
}

#[test]
fn a_fresh_file_is_migrated_to_the_current_version_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(SqliteLedger::open(&path).unwrap());
    drop(SqliteLedger::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SqliteLedger::SCHEMA_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_file_that_is_not_a_ledger_is_an_open_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    std::fs::write(
        &path,
        "this is not a database, it is a shopping list\n".repeat(100),
    )
    .unwrap();
    let err = SqliteLedger::open(&path).unwrap_err();
    assert!(matches!(err, LedgerError::Open { .. }), "{err:?}");
    assert!(err.to_string().contains("ledger.db"), "{err}");
}

/// Issue #37: a file from schema 7 (before run history kept the agent and model) is
/// upgraded, and its runs read with no agent or model (tests/ledger_suite).
#[test]
fn runs_from_before_the_agent_was_on_run_history_read_as_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for version in 1..=7 {
        conn.execute_batch(SqliteLedger::migration_sql(version).unwrap())
            .unwrap();
    }
    conn.execute_batch("PRAGMA user_version = 7").unwrap();
    conn.execute_batch(crate::ledger_suite::records::ROWS_WITHOUT_RUN_AGENTS)
        .unwrap();
    drop(conn);
    let ledger = SqliteLedger::open(&path).unwrap();
    crate::ledger_suite::records::rows_without_run_agents_read_as_unknown(&ledger);
}

//! The ledger suite (tests/ledger_suite) against the SQLite ledger: in memory for fresh
//! ledgers, a file in a temporary directory where a test reopens its ledger.

use std::path::PathBuf;
use std::sync::Arc;

use sortie::ledger::{Ledger, SqliteLedger};

use crate::ledger_suite::{Backend, Store};

struct Sqlite;

struct SqliteFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Store for SqliteFile {
    fn open(&self) -> Arc<dyn Ledger> {
        Arc::new(SqliteLedger::open(&self.path).unwrap())
    }
}

impl Backend for Sqlite {
    fn store(&self) -> Box<dyn Store> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/state/ledger.db");
        Box::new(SqliteFile { _dir: dir, path })
    }

    fn fresh(&self) -> Arc<dyn Ledger> {
        Arc::new(SqliteLedger::open_in_memory().unwrap())
    }
}

ledger_suite!(Sqlite);

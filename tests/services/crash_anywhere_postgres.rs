//! The crash-anywhere suite (tests/crash_suite) on the PostgreSQL ledger (issue #20):
//! the same fault points, the same random SIGKILLs, the same assertions (nothing lost,
//! no comment twice, no agent re-run once its outcome was stored), every tick process
//! sharing one database schema.
//!
//! Needs `SORTIE_TEST_POSTGRES_URL` (scripts/services/postgres.sh).

use crate::crash_suite::Store;
use crate::ledger_postgres::schema_url;

crash_suite!(Store::Postgres(schema_url("crash")));

//! Tests against services `scripts/test` starts (real Redmine, PostgreSQL, Prism, Chromium): each fails, never skips, when its service is missing, and says how to start it.

#[path = "../it/common/mod.rs"]
mod common;
#[path = "../it/github_model/mod.rs"]
mod github_model;
#[macro_use]
#[path = "../ledger_suite/mod.rs"]
mod ledger_suite;

mod daemon_dashboard;
mod github_contract;
mod ledger_postgres;
mod ledger_postgres_hosts;
mod redmine_e2e;

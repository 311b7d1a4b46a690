//! Tests against services `scripts/test` starts (real Redmine, PostgreSQL, Prism, Chromium, the real agent CLIs): each fails, never skips, when its service is missing, and says how to start it.

#[path = "../it/common/mod.rs"]
mod common;
#[path = "../it/contract/mod.rs"]
mod contract;
#[path = "../it/github_model/mod.rs"]
mod github_model;
#[path = "../it/model_plumbing/mod.rs"]
mod model_plumbing;
#[macro_use]
#[path = "../ledger_suite/mod.rs"]
mod ledger_suite;
#[macro_use]
#[path = "../crash_suite/mod.rs"]
mod crash_suite;

mod agent_clis;
mod agent_clis_acp;
mod agent_fresh;
mod agent_pipeline;
mod agent_questions;
mod budgets_claude;
mod budgets_postgres;
mod crash_anywhere_postgres;
mod daemon_dashboard;
mod forge_contract;
mod github_contract;
mod jira_contract;
mod ledger_postgres;
mod ledger_postgres_hosts;
mod ledger_postgres_outage;
mod ledger_postgres_slots;
mod model_server;
mod pulls_contract;
mod reactions_postgres;
mod redmine_contract;
mod redmine_e2e;
mod sandbox;
mod sandbox_clis;
mod supervision_strace;

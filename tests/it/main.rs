//! Integration tests that need no external service, in one binary (one link instead of one per file).

mod common;
mod github_model;
#[macro_use]
#[path = "../ledger_suite/mod.rs"]
mod ledger_suite;

mod agent_presets;
mod agent_runner;
mod agent_secrets;
mod block_cli;
mod block_roundtrip;
mod board_cli;
mod board_local;
mod board_perf;
mod budgets;
mod config_cli;
mod config_load;
mod config_rules;
mod crash_anywhere;
mod daemon_e2e;
mod github_adapter;
mod github_cli;
mod github_pipeline;
mod hooks_config;
mod hooks_events;
mod hooks_ledger;
mod hooks_pipeline;
mod hooks_shell;
mod hooks_webhook;
mod hostile_input;
mod leases_and_cancel;
mod ledger_cli;
mod ledger_race;
mod ledger_records;
mod ledger_sqlite;
mod pipeline_e2e;
mod pipeline_lib;
mod secrets;
mod tracker_faults;
mod workspace_hooks;

//! Integration tests that need no external service, in one binary (one link instead of one per file).

mod common;
mod contract;
mod contract_adapters;
mod forge_model;
mod gitea_model;
mod github_model;
#[macro_use]
#[path = "../ledger_suite/mod.rs"]
mod ledger_suite;
#[macro_use]
#[path = "../crash_suite/mod.rs"]
mod crash_suite;
mod gitlab_model;
mod jira_model;
mod linear_model;

mod agent_presets;
mod agent_resume;
mod agent_runner;
mod agent_secrets;
mod block_cli;
mod block_roundtrip;
mod board_cli;
mod board_local;
mod board_perf;
mod budgets;
mod config_cli;
mod config_default;
mod config_home;
mod config_load;
mod config_rules;
mod crash_anywhere;
mod daemon_e2e;
mod daemon_serve;
mod dashboard_pages;
mod first_hour;
mod flow_blockers;
mod flow_filters;
mod flow_github;
mod flow_rework;
mod forge_adapter;
mod forge_pipeline;
mod forge_rules;
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
mod jira_adapter;
mod jira_adf;
mod jira_pipeline;
mod leases_and_cancel;
mod ledger_cli;
mod ledger_race;
mod ledger_records;
mod ledger_sqlite;
mod linear_adapter;
mod linear_cli;
mod linear_config;
mod linear_pipeline;
mod linear_schema;
mod pipeline_e2e;
mod pipeline_lib;
mod secrets;
mod stale_listing;
mod status_names;
mod tick_signals;
mod tracker_faults;
mod workspace_hooks;
mod workspace_safety;

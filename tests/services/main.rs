//! Tests against services `scripts/test` starts (real Redmine, Prism, Chromium, the real agent CLIs): each fails, never skips, when its service is missing, and says how to start it.

#[path = "../it/common/mod.rs"]
mod common;
#[path = "../it/contract/mod.rs"]
mod contract;
#[path = "../it/github_model/mod.rs"]
mod github_model;

mod agent_clis;
mod agent_pipeline;
mod daemon_dashboard;
mod forge_contract;
mod github_contract;
mod jira_contract;
mod model_server;
mod redmine_contract;
mod redmine_e2e;

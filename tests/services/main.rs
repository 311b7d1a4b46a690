//! Tests against services `scripts/test` starts (real Redmine, Prism, Chromium): each fails, never skips, when its service is missing, and says how to start it.

#[path = "../it/common/mod.rs"]
mod common;
#[path = "../it/github_model/mod.rs"]
mod github_model;

mod daemon_dashboard;
mod github_contract;
mod jira_contract;
mod redmine_e2e;

//! sortie: a multi-agent role pipeline whose desired state is the issue tracker.
#![forbid(unsafe_code)]

pub mod agent;
pub mod block;
pub mod budget;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod events;
pub mod hooks;
pub mod ledger;
pub mod names;
pub mod pipeline;
pub mod program;
pub mod rate_limit;
pub mod state_file;
pub mod stats;
pub mod tracker;
pub mod usage;

//! The default of every config value that has one, in one place (`docs/configuration.md` lists them).

/// Default claim lease, seconds.
pub(crate) const DEFAULT_TTL_SECONDS: u64 = 600;
/// Default `poll_interval_seconds`.
pub(crate) const DEFAULT_POLL_SECONDS: u64 = 30;
/// Default `shutdown_grace_seconds`.
pub(crate) const DEFAULT_GRACE_SECONDS: u64 = 30;
/// Default global in-flight ceiling.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: u32 = 4;
/// Default per-role in-flight ceiling.
pub(crate) const DEFAULT_PER_ROLE: u32 = 1;
/// Default terminal states.
pub(crate) const DEFAULT_TERMINAL: &[&str] = &["done", "cancelled"];
/// Default agent timeout, seconds.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: u64 = 3600;
/// Default workspace hook timeout, seconds.
pub(crate) const DEFAULT_HOOK_TIMEOUT: u64 = 60;
/// Default number of ticks between automatic workspace prunes.
pub(crate) const DEFAULT_PRUNE_EVERY_TICKS: u32 = 10;
/// Default stall timeout, seconds.
pub(crate) const DEFAULT_STALL_SECONDS: u64 = 300;
/// Default bound on an ACP agent's handshake, seconds.
pub(crate) const DEFAULT_HANDSHAKE_SECONDS: u64 = 60;
/// Default attempts per stage.
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default backoff base, seconds.
pub(crate) const DEFAULT_BACKOFF_BASE: u64 = 10;
/// Default backoff ceiling, seconds.
pub(crate) const DEFAULT_BACKOFF_MAX: u64 = 300;
/// Default `tracker.blockers.max_reads_per_tick`.
pub(crate) const DEFAULT_BLOCKER_READS_PER_TICK: u32 = 20;
/// Default `tracker.api_url` of `kind: linear`.
pub(crate) const DEFAULT_LINEAR_API_URL: &str = "https://api.linear.app/graphql";
/// GitHub's GraphQL endpoint (`tracker.api_url` of a `github_project`).
pub(crate) const DEFAULT_GITHUB_GRAPHQL_URL: &str = "https://api.github.com/graphql";

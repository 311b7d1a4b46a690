//! Command-line surface: clap definitions, dispatch to the library, output formatting.
//!
//! Each area has its own file; `run` dispatches. Output for the person at the
//! terminal goes to stdout; logs (tracing) go to stderr.

pub mod block;
pub mod board;
pub mod claims;
pub mod pipeline;
mod preflight;
pub mod stats;
pub mod ticket;
pub mod tracker;
pub mod validate;
pub mod workspaces;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// Exit code: the command ran.
pub const EXIT_OK: u8 = 0;
/// Exit code: a runtime failure (tracker or ledger unavailable, nothing found, ...).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code: bad usage or invalid configuration.
pub const EXIT_USAGE: u8 = 2;

/// sortie: run a role pipeline whose desired state is your issue tracker.
#[derive(Debug, Parser)]
#[command(name = "sortie", version, about, long_about = None)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug; `pipeline run` logs at info
    /// without it). `SORTIE_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate, tick and inspect a pipeline.
    #[command(subcommand)]
    Pipeline(pipeline::PipelineCommand),
    /// Parse outcome blocks for downstream automation.
    #[command(subcommand)]
    Block(block::BlockCommand),
    /// Inspect and release claims in the ledger.
    #[command(subcommand)]
    Claims(claims::ClaimsCommand),
    /// Work with the embedded local board.
    #[command(subcommand)]
    Board(board::BoardCommand),
    /// Check the configured tracker.
    #[command(subcommand)]
    Tracker(tracker::TrackerCommand),
    /// Act on one ticket: release a held ticket.
    #[command(subcommand)]
    Ticket(ticket::TicketCommand),
    /// Manage per-ticket workspaces.
    #[command(subcommand)]
    Workspaces(workspaces::WorkspacesCommand),
    /// Runs, success rate, durations, tokens, cost and rework over run history.
    Stats(stats::StatsArgs),
}

/// An error that is the user's to fix (bad flags, invalid config): exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The config file looked for in the current directory when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "sortie.yaml";
/// The environment variable naming the config file when `--config` is not given and
/// the current directory has no `sortie.yaml`.
pub const CONFIG_ENV: &str = "SORTIE_CONFIG";

/// The config file a command uses: `--config` when given, else `sortie.yaml` in the
/// current directory, else `$SORTIE_CONFIG`; a usage error naming both otherwise.
/// Where a command's pipeline config is: `--config FILE`, or the file as the command's
/// argument (`sortie pipeline tick pipelines/demo.yaml`), else the default search.
#[derive(Debug, clap::Args)]
pub struct ConfigPath {
    /// Pipeline config file. Default: `sortie.yaml` in the current directory, else `$SORTIE_CONFIG`.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// The pipeline config file, as `--config` gives it.
    #[arg(value_name = "CONFIG", conflicts_with = "config")]
    file: Option<PathBuf>,
}

impl ConfigPath {
    /// The config file to load ([`config_file`]).
    pub fn locate(self) -> Result<PathBuf, UsageError> {
        config_file(self.config.or(self.file))
    }
}

pub fn config_file(given: Option<PathBuf>) -> Result<PathBuf, UsageError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    locate_config(given, &cwd, std::env::var_os(CONFIG_ENV))
}

/// [`config_file`] with the current directory and `$SORTIE_CONFIG` given (pure but for
/// checking which files exist).
pub fn locate_config(
    given: Option<PathBuf>,
    cwd: &Path,
    env: Option<std::ffi::OsString>,
) -> Result<PathBuf, UsageError> {
    if let Some(given) = given {
        return Ok(given);
    }
    let local = cwd.join(DEFAULT_CONFIG_FILE);
    if local.is_file() {
        // Shown and reloaded as the person would type it.
        return Ok(PathBuf::from(DEFAULT_CONFIG_FILE));
    }
    let env = env.filter(|v| !v.is_empty()).map(PathBuf::from);
    match env {
        Some(path) if path.exists() => Ok(path),
        Some(path) => Err(UsageError(format!(
            "no config file: --config is not given, there is no {DEFAULT_CONFIG_FILE} in {} \
             and ${CONFIG_ENV} names {}, which does not exist",
            cwd.display(),
            path.display()
        ))),
        None => Err(UsageError(format!(
            "no config file: --config is not given, there is no {DEFAULT_CONFIG_FILE} in {} \
             and ${CONFIG_ENV} is not set; pass --config FILE, create {DEFAULT_CONFIG_FILE} \
             or set ${CONFIG_ENV}",
            cwd.display()
        ))),
    }
}

/// Run one parsed command line and return its exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Pipeline(cmd) => pipeline::run(cmd),
        Command::Block(cmd) => block::run(cmd),
        Command::Claims(cmd) => claims::run(cmd),
        Command::Board(cmd) => board::run(cmd),
        Command::Tracker(cmd) => tracker::run(cmd),
        Command::Ticket(cmd) => ticket::run(cmd),
        Command::Workspaces(cmd) => workspaces::run(cmd),
        Command::Stats(args) => stats::run(args),
    }
}

/// Exit code for an error that reached `main`.
pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<UsageError>().is_some()
        || err.downcast_ref::<crate::config::ConfigError>().is_some()
    {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }
}

/// Whether the error is a closed stdout (`sortie ... | head`), which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        let io = cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind);
        // `--json` output goes through serde_json, which wraps the io::Error.
        let json = cause
            .downcast_ref::<serde_json::Error>()
            .and_then(serde_json::Error::io_error_kind);
        io.or(json) == Some(std::io::ErrorKind::BrokenPipe)
    })
}

impl Cli {
    /// Whether this command line runs the daemon (`pipeline run`), whose log is its
    /// account of what it did: it logs at `info` by default.
    pub fn is_daemon(&self) -> bool {
        matches!(
            self.command,
            Command::Pipeline(pipeline::PipelineCommand::Run { .. })
        )
    }
}

/// Send tracing output to stderr at a level chosen by `-v` or `SORTIE_LOG`. Without
/// either, the daemon logs at `info` (each run, each removal, each dropped write-back:
/// a tick where nothing happened logs nothing) and every other command, a cron tick
/// included, at `warn`, so it stays quiet unless something went wrong.
///
/// A log line that cannot be written (stderr on a full disk, a closed pipe) is dropped:
/// losing the log never stops a tick or the daemon (issue #39, item 17).
pub fn init_logging(verbose: u8, daemon: bool) {
    let default = match (verbose, daemon) {
        (0, false) => "warn",
        (0, true) | (1, _) => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SORTIE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        // Its report of a failed write goes to the same stderr, with `eprintln!`, which
        // panics when that write fails too.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Standard error for logs and messages to the person at the terminal, where a failed
/// write is dropped: there is nowhere left to report it, and the work matters more than
/// its log. (`eprintln!` panics instead.)
#[derive(Debug, Clone, Copy, Default)]
pub struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Write one line to standard error, dropping it when that fails ([`LossyStderr`]): for
/// messages on the paths of a tick and the daemon, which must not die of a full disk
/// under their stderr.
pub fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(LossyStderr, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_config_wins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sortie.yaml"), "").unwrap();
        let got = locate_config(
            Some("other.yaml".into()),
            dir.path(),
            Some("env.yaml".into()),
        );
        assert_eq!(got.unwrap(), PathBuf::from("other.yaml"));
    }

    #[test]
    fn sortie_yaml_in_the_current_directory_comes_before_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let env_file = dir.path().join("env.yaml");
        std::fs::write(&env_file, "").unwrap();
        let from_env = locate_config(None, dir.path(), Some(env_file.clone().into()));
        assert_eq!(from_env.unwrap(), env_file);
        std::fs::write(dir.path().join("sortie.yaml"), "").unwrap();
        let local = locate_config(None, dir.path(), Some(env_file.into()));
        assert_eq!(local.unwrap(), PathBuf::from("sortie.yaml"));
    }

    #[test]
    fn without_either_the_error_names_both() {
        let dir = tempfile::tempdir().unwrap();
        for env in [
            None,
            Some("".into()),
            Some(dir.path().join("gone.yaml").into()),
        ] {
            let err = locate_config(None, dir.path(), env.clone()).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("sortie.yaml") && text.contains("$SORTIE_CONFIG"),
                "{env:?}: {text}"
            );
        }
        let err = locate_config(None, dir.path(), Some(dir.path().join("gone.yaml").into()));
        assert!(err.unwrap_err().to_string().contains("gone.yaml"));
    }
}

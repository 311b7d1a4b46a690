//! The `sortie` command line: parse flags, call the library, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 usage or config error).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use sortie::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    cli::init_logging(cli.verbose, cli.is_daemon());
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if cli::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            // Never `eprintln!`: it panics on a full disk under stderr (issue #39).
            cli::say(format_args!("sortie: {err:#}"));
            ExitCode::from(cli::exit_code_for(&err))
        }
    }
}

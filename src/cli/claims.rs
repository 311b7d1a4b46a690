//! `sortie claims ...`: inspect and release claims in the ledger.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::Utc;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::cli::{EXIT_FAILURE, EXIT_OK};
use crate::config::Config;
use std::sync::Arc;

use crate::config::LedgerConfig;
use crate::ledger::{claimer_host, Claim, ClaimKey, Ledger, Scope, SqliteLedger, Timestamp};

/// Where the ledger is: from a config file's `state_root`, or given directly.
#[derive(Debug, Args)]
pub struct LedgerLocation {
    /// Pipeline config whose `state_root` holds the ledger.
    #[arg(long, short = 'c', conflicts_with = "state_root")]
    pub config: Option<PathBuf>,
    /// State root directory holding `ledger.db` (default `state`).
    #[arg(long)]
    pub state_root: Option<PathBuf>,
}

/// Claims commands.
#[derive(Debug, Subcommand)]
pub enum ClaimsCommand {
    /// List claims (live and expired).
    List {
        /// Where the ledger is.
        #[command(flatten)]
        location: LedgerLocation,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Release a claim. A live claim needs `--force`.
    Release {
        /// Tracker identity (`local`, `github:owner/repo`, ...).
        tracker: String,
        /// Ticket id.
        ticket: String,
        /// Role.
        role: String,
        /// Release even if the lease is live (the holder will find it lost and not write back).
        #[arg(long)]
        force: bool,
        /// Where the ledger is.
        #[command(flatten)]
        location: LedgerLocation,
    },
}

/// Run a claims command.
pub fn run(cmd: ClaimsCommand) -> anyhow::Result<u8> {
    match cmd {
        ClaimsCommand::List { location, json } => list(location.open()?, json),
        ClaimsCommand::Release {
            tracker,
            ticket,
            role,
            force,
            location,
        } => release(
            location.open()?,
            &ClaimKey::new(tracker, ticket, role),
            force,
        ),
    }
}

/// An opened ledger (`None`: no SQLite file there yet) and how to name it in messages.
struct Opened {
    ledger: Option<Arc<dyn Ledger>>,
    shown: String,
}

impl LedgerLocation {
    /// The config's ledger (`ledger:`; SQLite under its `state_root` by default), or
    /// `<state-root>/ledger.db`, or `state/ledger.db`. A config that does not load is a
    /// usage error (exit 2).
    fn open(&self) -> anyhow::Result<Opened> {
        if let Some(config) = &self.config {
            let config = Config::load(config)?;
            if let LedgerConfig::Postgres { url_env } = &config.ledger {
                return Ok(Opened {
                    ledger: Some(crate::ledger::open(&config)?),
                    shown: format!("the postgres ledger (${url_env})"),
                });
            }
            return open_existing(&config.ledger_path());
        }
        let root = self.state_root.as_deref().unwrap_or(Path::new("state"));
        open_existing(&root.join("ledger.db"))
    }
}

/// Open an existing SQLite ledger; no ledger if there is no file (nothing was ever
/// claimed there). Listing must not create a state directory as a side effect of a typo.
fn open_existing(path: &Path) -> anyhow::Result<Opened> {
    let shown = path.display().to_string();
    if !path.exists() {
        return Ok(Opened {
            ledger: None,
            shown,
        });
    }
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(path)?);
    Ok(Opened {
        ledger: Some(ledger),
        shown,
    })
}

fn list(opened: Opened, json: bool) -> anyhow::Result<u8> {
    let shown = &opened.shown;
    let exists = opened.ledger.is_some();
    let claims = match &opened.ledger {
        Some(ledger) => ledger
            .claims(Scope::All)
            .with_context(|| format!("reading claims from {shown}"))?,
        None => Vec::new(),
    };
    let now = Utc::now();
    let mut out = std::io::stdout().lock();
    if json {
        let rows: Vec<ClaimView<'_>> = claims.iter().map(|c| ClaimView::new(c, now)).collect();
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else if !exists {
        writeln!(
            out,
            "no ledger at {shown} (nothing has run with this state root yet)"
        )?;
    } else if claims.is_empty() {
        writeln!(out, "no claims in {shown}")?;
    } else {
        out.write_all(claims_table(&claims, now).as_bytes())?;
    }
    Ok(EXIT_OK)
}

fn release(opened: Opened, key: &ClaimKey, force: bool) -> anyhow::Result<u8> {
    let shown = &opened.shown;
    let Some(ledger) = &opened.ledger else {
        eprintln!("no claim for {key} (no ledger at {shown})");
        return Ok(EXIT_FAILURE);
    };
    let Some(claim) = ledger.claim(key)? else {
        eprintln!("no claim for {key} in {shown}");
        return Ok(EXIT_FAILURE);
    };
    let now = Utc::now();
    let live = claim.lease_expires_at > now;
    if live && !force {
        eprintln!(
            "{key} is held by {} (lease left {}); pass --force to release it anyway \
             (the holder will find its lease lost and not write back)",
            claim.claimer_id,
            age(claim.lease_expires_at - now)
        );
        return Ok(EXIT_FAILURE);
    }
    // Without --force, delete only the row we looked at: if its holder renewed or someone
    // took the key over meanwhile, that claim is not ours to drop.
    let released = if force {
        ledger.force_release(key)?
    } else {
        ledger.release(key, &claim.claimer_id)?
    };
    if !released {
        eprintln!("{key} changed while releasing it; run `sortie claims list` and retry");
        return Ok(EXIT_FAILURE);
    }
    let lease = if live {
        format!("lease left {}", age(claim.lease_expires_at - now))
    } else {
        format!("lease expired {} ago", age(now - claim.lease_expires_at))
    };
    println!("released {key} (held by {}, {lease})", claim.claimer_id);
    Ok(EXIT_OK)
}

/// One claim as `claims list --json` prints it.
#[derive(Debug, Serialize)]
struct ClaimView<'a> {
    tracker: &'a str,
    ticket_id: &'a str,
    role: &'a str,
    stage: &'a str,
    claimer_id: &'a str,
    /// The host part of `claimer_id` (`SORTIE_HOST_ID` or the host name).
    host: &'a str,
    stage_attempt: u32,
    run_id: &'a str,
    claimed_at: Timestamp,
    lease_expires_at: Timestamp,
    expired: bool,
    cancel_requested: bool,
    agent_pid: Option<u32>,
}

impl<'a> ClaimView<'a> {
    fn new(claim: &'a Claim, now: Timestamp) -> Self {
        ClaimView {
            tracker: &claim.key.tracker,
            ticket_id: &claim.key.ticket_id,
            role: &claim.key.role,
            stage: &claim.stage,
            claimer_id: &claim.claimer_id,
            host: claimer_host(&claim.claimer_id),
            stage_attempt: claim.stage_attempt,
            run_id: &claim.run_id,
            claimed_at: claim.claimed_at,
            lease_expires_at: claim.lease_expires_at,
            expired: claim.lease_expires_at <= now,
            cancel_requested: claim.cancel_requested,
            agent_pid: claim.agent_pid,
        }
    }
}

/// The `claims list` table, aligned, one claim per line.
fn claims_table(claims: &[Claim], now: Timestamp) -> String {
    let header = [
        "TRACKER", "TICKET", "ROLE", "STAGE", "HOLDER", "ATTEMPT", "CLAIMED", "LEASE", "CANCEL",
    ];
    let rows: Vec<[String; 9]> = claims
        .iter()
        .map(|c| {
            let lease = if c.lease_expires_at > now {
                age(c.lease_expires_at - now)
            } else {
                "expired".to_owned()
            };
            [
                c.key.tracker.clone(),
                c.key.ticket_id.clone(),
                c.key.role.clone(),
                c.stage.clone(),
                c.claimer_id.to_string(),
                c.stage_attempt.to_string(),
                format!("{} ago", age(now - c.claimed_at)),
                lease,
                if c.cancel_requested { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut table = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        table.push_str(cells.join("  ").trim_end());
        table.push('\n');
    }
    table
}

/// A duration for people: `42s`, `5m07s`, `3h02m`, `2d04h`; negative durations read as 0s.
fn age(d: chrono::TimeDelta) -> String {
    let secs = d.num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        s => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_naturally() {
        let s = chrono::TimeDelta::seconds;
        assert_eq!(age(s(-5)), "0s");
        assert_eq!(age(s(42)), "42s");
        assert_eq!(age(s(307)), "5m07s");
        assert_eq!(age(s(3 * 3600 + 125)), "3h02m");
        assert_eq!(age(s(2 * 86_400 + 4 * 3600 + 5)), "2d04h");
    }
}

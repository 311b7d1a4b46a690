//! `sortie board ...`: work with the embedded local board.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use super::{UsageError, EXIT_OK};
use crate::config::{Config, TrackerConfig};
use crate::tracker::local::{compare_ids, LocalBoard, NewTicket};
use crate::tracker::{Comment, Ticket, TrackerError};

/// Where the board is: `--board PATH`, or the `tracker.path` of a local-board config.
#[derive(Debug, Args)]
pub struct BoardLocation {
    /// Board directory.
    #[arg(long, conflicts_with = "config")]
    pub board: Option<PathBuf>,
    /// Pipeline config whose tracker is a local board.
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
}

/// Board commands.
#[derive(Debug, Subcommand)]
pub enum BoardCommand {
    /// Create an empty board directory (default `board`).
    Init {
        /// Board directory.
        path: Option<PathBuf>,
    },
    /// Add a ticket and print its id.
    Add {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Title.
        #[arg(long)]
        title: String,
        /// Initial status.
        #[arg(long, default_value = "todo")]
        status: String,
        /// Priority (lower is more urgent).
        #[arg(long)]
        priority: Option<i64>,
        /// Label (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
        /// File holding the Markdown body.
        #[arg(long)]
        body_file: Option<PathBuf>,
    },
    /// List tickets.
    List {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Only tickets in this status (repeatable).
        #[arg(long)]
        status: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// One row per ticket with what sortie did: attempts per role (from the outcome
        /// blocks sortie wrote on it) and the last failure's reason code.
        #[arg(long, conflicts_with = "json")]
        outcomes: bool,
    },
    /// Show one ticket with its comments.
    Show {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move a ticket to a status (what a person does by editing `status:`).
    Move {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// New status.
        status: String,
    },
    /// Record that a ticket is blocked by another (its `blocked_by` front matter): the
    /// pipeline does not dispatch it until every blocker is terminal.
    Block {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// The blocked ticket.
        id: String,
        /// The blocking ticket.
        #[arg(long)]
        by: String,
    },
    /// Add a comment to a ticket.
    Comment {
        /// Where the board is.
        #[command(flatten)]
        location: BoardLocation,
        /// Ticket id.
        id: String,
        /// Comment text.
        #[arg(
            long,
            conflicts_with = "body_file",
            required_unless_present = "body_file"
        )]
        body: Option<String>,
        /// File holding the comment.
        #[arg(long)]
        body_file: Option<PathBuf>,
        /// Author name (default `$USER`).
        #[arg(long)]
        author: Option<String>,
    },
}

/// Run a board command.
pub fn run(cmd: BoardCommand) -> anyhow::Result<u8> {
    let mut out = io::stdout().lock();
    match cmd {
        BoardCommand::Init { path } => {
            let path = path.unwrap_or_else(|| PathBuf::from(DEFAULT_BOARD));
            LocalBoard::init(&path).map_err(from_tracker)?;
            writeln!(out, "{}", path.display())?;
        }
        BoardCommand::Add {
            location,
            title,
            status,
            priority,
            labels,
            body_file,
        } => {
            let board = open(&location)?;
            check_status(&location, &board, &status)?;
            let body = match body_file {
                Some(file) => read_text(&file)?,
                None => String::new(),
            };
            let new = NewTicket {
                title,
                status,
                priority,
                labels,
                body,
            };
            let ticket = board.add_ticket(new).map_err(from_tracker)?;
            writeln!(out, "{}", ticket.id)?;
        }
        BoardCommand::List {
            location,
            status,
            json,
            outcomes,
        } => {
            let board = open(&location)?;
            let mut listing = if status.is_empty() {
                board.list_all()
            } else {
                board.list_in(&status)
            }
            .map_err(from_tracker)?;
            listing.tickets.sort_by(|a, b| compare_ids(&a.id, &b.id));
            if json {
                let doc = ListJson {
                    tickets: &listing.tickets,
                    warnings: &listing.warnings,
                };
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else if outcomes {
                print_warnings(&listing.warnings);
                // Who may answer a question: the config's trusted_authors, when given.
                let trusted_authors = match &location.config {
                    Some(path) => Config::load(path)?.trusted_authors,
                    None => Vec::new(),
                };
                write_outcomes(&mut out, &board, &listing.tickets, &trusted_authors)?;
            } else {
                print_warnings(&listing.warnings);
                write_table(&mut out, &listing.tickets)?;
            }
        }
        BoardCommand::Show { location, id, json } => {
            let board = open(&location)?;
            let (ticket, mut warnings) = board.read_ticket(&id).map_err(from_tracker)?;
            let (comments, comment_warnings) = board.read_comments(&id).map_err(from_tracker)?;
            warnings.extend(comment_warnings);
            if json {
                let doc = ShowJson {
                    ticket: &ticket,
                    comments: &comments,
                    warnings: &warnings,
                };
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else {
                print_warnings(&warnings);
                write_ticket(&mut out, &ticket, &comments)?;
            }
        }
        BoardCommand::Move {
            location,
            id,
            status,
        } => {
            let board = open(&location)?;
            check_status(&location, &board, &status)?;
            let before = board.set_status(&id, &status).map_err(from_tracker)?;
            writeln!(out, "{id}: {before} -> {}", status.trim())?;
        }
        BoardCommand::Block { location, id, by } => {
            let board = open(&location)?;
            let blockers = board.add_blocker(&id, &by).map_err(from_tracker)?;
            writeln!(out, "{id}: blocked by {}", blockers.join(", "))?;
        }
        BoardCommand::Comment {
            location,
            id,
            body,
            body_file,
            author,
        } => {
            let board = open(&location)?;
            let body = match (body, body_file) {
                (Some(body), _) => body,
                (None, Some(file)) => read_text(&file)?,
                (None, None) => return Err(UsageError("pass --body or --body-file".into()).into()),
            };
            let author = author
                .or_else(|| std::env::var("USER").ok())
                .filter(|a| !a.trim().is_empty())
                .unwrap_or_else(|| "unknown".to_owned());
            let comment = board
                .add_comment(&id, &author, &body)
                .map_err(from_tracker)?;
            writeln!(out, "{}", comment.id)?;
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

/// The board used when neither `--board` nor `--config` says otherwise.
const DEFAULT_BOARD: &str = "board";

fn open(location: &BoardLocation) -> anyhow::Result<LocalBoard> {
    let path = match (&location.board, &location.config) {
        (Some(board), _) => board.clone(),
        (None, Some(config)) => board_of_config(config)?,
        (None, None) => PathBuf::from(DEFAULT_BOARD),
    };
    LocalBoard::open(&path).map_err(from_tracker)
}

/// The pipeline config a board command checks statuses against: `--config`, else a
/// `sortie.yaml` in the current directory when `--board` is not given.
fn checking_config(location: &BoardLocation) -> anyhow::Result<Option<Config>> {
    match (&location.board, &location.config) {
        (_, Some(config)) => Ok(Some(Config::load(config)?)),
        (None, None) if Path::new("sortie.yaml").is_file() => {
            Ok(Some(Config::load(Path::new("sortie.yaml"))?))
        }
        _ => Ok(None),
    }
}

/// A status given to `board add` or `board move`: with a config, one it names (no stage
/// and no terminal set naming it is refused, with "did you mean"); without one, a warning
/// when no ticket on the board has it yet.
fn check_status(location: &BoardLocation, board: &LocalBoard, status: &str) -> anyhow::Result<()> {
    if let Some(config) = checking_config(location)? {
        if config.canonical_status(status).is_some() {
            return Ok(());
        }
        let known = config.configured_statuses();
        let best = known
            .iter()
            .map(|k| (strsim::jaro_winkler(status.trim(), k), *k))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .filter(|(score, _)| *score >= 0.8)
            .map(|(_, k)| format!("; did you mean `{k}`?"))
            .unwrap_or_default();
        return Err(UsageError(format!(
            "status `{}` is named by no stage and no terminal state of {}{best} (expected one of: {})",
            status.trim(),
            config
                .source
                .as_deref()
                .map_or_else(|| "the config".to_string(), |p| p.display().to_string()),
            known.join(", ")
        ))
        .into());
    }
    let listing = board.list_all().map_err(from_tracker)?;
    let mut in_use: Vec<String> = listing.tickets.iter().map(|t| t.status.clone()).collect();
    in_use.sort();
    in_use.dedup();
    if let Some(warning) = new_status_warning(status.trim(), &in_use) {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// Every status the pipelines shipped in `pipelines/` name (claim, in-progress, success,
/// failure, `rework.then` and terminal statuses). Without a config, `board add` and
/// `board move` check a status against these and the board's own (issue #30).
pub const SHIPPED_STATUSES: &[&str] = &[
    "ready-for-design",
    "designing",
    "design-approved",
    "design-blocked",
    "implementing",
    "code-review",
    "blocked",
    "testing",
    "qa-failed",
    "qa-passed",
    "needs-human",
    "todo",
    "doing",
    "review",
    "done",
    "cancelled",
];

/// Without a config: a status that neither a ticket on the board nor a shipped pipeline
/// has, yet is a near miss of one of them, is worth a word naming the new one as new. A
/// status either side knows is fine (a board whose first ticket has a typo does not make
/// the right spelling look wrong), and so is a status unlike any known one.
fn new_status_warning(status: &str, in_use: &[String]) -> Option<String> {
    let same = crate::tracker::same_name;
    if in_use.iter().any(|s| same(s, status)) || SHIPPED_STATUSES.iter().any(|s| same(s, status)) {
        return None;
    }
    let close = |known: &str| strsim::jaro_winkler(&known.to_lowercase(), &status.to_lowercase());
    let board = in_use
        .iter()
        .map(|s| (close(s), s.as_str(), "in use on this board"));
    let shipped = SHIPPED_STATUSES
        .iter()
        .map(|s| (close(s), *s, "named by the shipped pipelines"));
    let (_, near, whose) = board
        .chain(shipped)
        .filter(|(score, _, _)| *score >= 0.9)
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    Some(format!(
        "status `{status}` is new: no ticket on this board has status `{status}` and no shipped \
         pipeline names it; did you mean `{near}` ({whose})? Pass --config to check statuses \
         against your pipeline"
    ))
}

fn board_of_config(path: &Path) -> anyhow::Result<PathBuf> {
    let config = Config::load(path)?;
    match config.tracker {
        TrackerConfig::Local { path } => Ok(path),
        _ => Err(UsageError(format!(
            "{}: the tracker is not a local board (`tracker.kind: local`)",
            path.display()
        ))
        .into()),
    }
}

/// An invalid id or value is the user's to fix (exit 2); anything else is a runtime failure (exit 1).
fn from_tracker(err: TrackerError) -> anyhow::Error {
    match err {
        TrackerError::Invalid(msg) => UsageError(msg).into(),
        TrackerError::NotFound(msg) => anyhow::anyhow!(msg),
        other => anyhow::Error::new(other),
    }
}

/// Read a body from `file`, or from standard input when it is `-`.
fn read_text(file: &Path) -> anyhow::Result<String> {
    if file == Path::new("-") {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .context("reading the body from standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

#[derive(Serialize)]
struct ListJson<'a> {
    tickets: &'a [Ticket],
    warnings: &'a [String],
}

#[derive(Serialize)]
struct ShowJson<'a> {
    ticket: &'a Ticket,
    comments: &'a [Comment],
    warnings: &'a [String],
}

/// Text for a table cell or header line: control characters would break the layout.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn priority_text(priority: Option<i64>) -> String {
    priority.map_or_else(|| "-".to_owned(), |p| p.to_string())
}

fn labels_text(labels: &[String]) -> String {
    if labels.is_empty() {
        "-".to_owned()
    } else {
        one_line(&labels.join(", "))
    }
}

/// `board list --outcomes`: ticket, title, status, attempts per role, last reason.
fn write_outcomes(
    out: &mut impl Write,
    board: &LocalBoard,
    tickets: &[Ticket],
    trusted_authors: &[String],
) -> io::Result<()> {
    let trusted: std::collections::HashSet<String> =
        [crate::tracker::local::IDENTITY.to_string()].into();
    let who = crate::pipeline::history::Answerers {
        identity: crate::tracker::local::IDENTITY,
        trusted_authors,
    };
    let now = chrono::Utc::now();
    let mut rows = vec![[
        "ID".to_owned(),
        "STATUS".to_owned(),
        "TITLE".to_owned(),
        "ATTEMPTS".to_owned(),
        "LAST REASON".to_owned(),
    ]];
    for t in tickets {
        let comments = board
            .read_comments(&t.id)
            .map(|(c, _)| c)
            .unwrap_or_default();
        let history = crate::pipeline::history::TicketHistory::from_comments(&comments, &trusted);
        let mut roles: Vec<String> = Vec::new();
        for b in history.blocks() {
            if !roles.iter().any(|r| r == b.role()) {
                roles.push(b.role().to_string());
            }
        }
        let attempts: Vec<String> = roles
            .iter()
            .map(|r| format!("{r} {}", history.max_attempt(r)))
            .collect();
        let last_reason = last_reason(&history, &who, now);
        rows.push([
            t.id.clone(),
            one_line(&t.status),
            one_line(&t.title),
            if attempts.is_empty() {
                "-".to_string()
            } else {
                attempts.join(", ")
            },
            last_reason,
        ]);
    }
    write_columns(out, &rows)
}

/// The LAST REASON of `board list --outcomes` (issue #52): the question a ticket waits
/// on, with its options; else the newest outcome's reason code, `-` when that outcome
/// is a success (a failure the ticket went past is history, not its reason now).
fn last_reason(
    history: &crate::pipeline::history::TicketHistory,
    who: &crate::pipeline::history::Answerers<'_>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    use crate::pipeline::decide::question::{state, QuestionState};
    if let Some(open) = history.open_questions(who).into_iter().next() {
        let id = &open.block.question_id;
        let waits = match state(&open, now) {
            QuestionState::Waiting => format!("waiting for an answer to {id}"),
            QuestionState::Answered { by, .. } => {
                format!("{id} answered by {by}; the next tick goes on")
            }
            QuestionState::Unanswered => format!("{id} timed out"),
        };
        let asked = crate::block::question::one_line(&open.block.question, &open.block.options);
        return format!("{waits}: {asked}");
    }
    match history.blocks().last() {
        Some(crate::block::OutcomeBlock::Failure(f)) => one_line(&f.reason_code),
        _ => "-".to_string(),
    }
}

fn write_table(out: &mut impl Write, tickets: &[Ticket]) -> io::Result<()> {
    let mut rows = vec![[
        "ID".to_owned(),
        "STATUS".to_owned(),
        "PRIORITY".to_owned(),
        "TITLE".to_owned(),
        "LABELS".to_owned(),
    ]];
    rows.extend(tickets.iter().map(|t| {
        [
            t.id.clone(),
            one_line(&t.status),
            priority_text(t.priority),
            one_line(&t.title),
            labels_text(&t.labels),
        ]
    }));
    write_columns(out, &rows)
}

/// Rows as left-aligned columns two spaces apart, trailing spaces trimmed.
fn write_columns(out: &mut impl Write, rows: &[[String; 5]]) -> io::Result<()> {
    let mut widths = [0usize; 5];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

fn write_ticket(out: &mut impl Write, ticket: &Ticket, comments: &[Comment]) -> io::Result<()> {
    writeln!(out, "id:         {}", ticket.id)?;
    writeln!(out, "title:      {}", one_line(&ticket.title))?;
    writeln!(out, "status:     {}", one_line(&ticket.status))?;
    writeln!(out, "priority:   {}", priority_text(ticket.priority))?;
    writeln!(out, "labels:     {}", labels_text(&ticket.labels))?;
    writeln!(out, "created_at: {}", time_text(ticket.created_at))?;
    writeln!(out, "updated_at: {}", time_text(ticket.updated_at))?;
    if !ticket.body.trim().is_empty() {
        writeln!(out)?;
        write_block(out, &ticket.body)?;
    }
    for c in comments {
        writeln!(out)?;
        writeln!(
            out,
            "--- comment {} by {} at {}",
            c.id,
            one_line(&c.author),
            time_text(c.created_at)
        )?;
        write_block(out, &c.body)?;
    }
    Ok(())
}

fn time_text(t: chrono::DateTime<chrono::Utc>) -> String {
    crate::tracker::local::render::render_time(t)
}

fn write_block(out: &mut impl Write, text: &str) -> io::Result<()> {
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

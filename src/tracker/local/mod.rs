//! The embedded local board: one folder per ticket in plain files that people edit by hand.
//!
//! Layout (see `docs/trackers/local.md`):
//!
//! ```text
//! <board>/<ID>/ticket.md              YAML front matter (title, status, ...) + Markdown body
//! <board>/<ID>/comments/0001.md       front matter (author, created_at) + Markdown body
//! ```
//!
//! A person moves a card by editing its `status:` line; sortie's own writes are
//! atomic, never clobber a comment, and never overwrite a person's concurrent move.

pub mod files;
pub mod format;
mod read;
pub mod render;
mod write;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};

use self::read::{comment_number, load_comment, load_ticket, Loaded};
use super::{Capabilities, Comment, Listing, Ticket, Tracker, TrackerError};

pub use self::format::{compare_ids, is_valid_id};

/// The file holding a ticket inside its folder.
pub const TICKET_FILE: &str = "ticket.md";
/// The folder holding a ticket's comments.
pub const COMMENTS_DIR: &str = "comments";
/// The author sortie's own comments carry.
pub const IDENTITY: &str = "sortie";

/// Where "now" comes from, so tests can pin it.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// A ticket to create with [`LocalBoard::add_ticket`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTicket {
    /// One-line title (required, non-empty).
    pub title: String,
    /// Initial status.
    pub status: String,
    /// Priority, lower is more urgent.
    pub priority: Option<i64>,
    /// Labels.
    pub labels: Vec<String>,
    /// Markdown body, stored byte for byte.
    pub body: String,
}

/// A board directory on the local file system.
#[derive(Clone)]
pub struct LocalBoard {
    root: PathBuf,
    clock: Clock,
}

impl std::fmt::Debug for LocalBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBoard")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl LocalBoard {
    /// Open an existing board directory.
    pub fn open(path: &Path) -> Result<LocalBoard, TrackerError> {
        match fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(LocalBoard {
                root: path.to_path_buf(),
                clock: Arc::new(Utc::now),
            }),
            Ok(_) => Err(TrackerError::NotFound(format!(
                "{} is not a directory, so it cannot be a board",
                path.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(TrackerError::NotFound(format!(
                "no board at {0}; create one with `sortie board init {0}`",
                path.display()
            ))),
            Err(e) => Err(io_error(path, e)),
        }
    }

    /// Create the board directory if needed (idempotent) and open it.
    pub fn init(path: &Path) -> Result<LocalBoard, TrackerError> {
        fs::create_dir_all(path).map_err(|e| io_error(path, e))?;
        LocalBoard::open(path)
    }

    /// Use `clock` for every timestamp this board writes.
    pub fn with_clock(mut self, clock: Clock) -> LocalBoard {
        self.clock = clock;
        self
    }

    /// The board directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock)().trunc_subsecs(0)
    }

    /// Every ticket on the board, whatever its status.
    pub fn list_all(&self) -> Result<Listing, TrackerError> {
        self.scan(None)
    }

    /// The tickets whose status is one of `statuses` (the synchronous [`Tracker::list`]),
    /// each with the statuses of its blockers.
    pub fn list_in(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let mut listing = self.scan(Some(statuses))?;
        for ticket in &mut listing.tickets {
            self.resolve_blockers(ticket);
        }
        Ok(listing)
    }

    /// Fill in the status of each of `ticket`'s blockers from its file. A blocker whose
    /// file is missing or unreadable keeps `status: None`: the pipeline never treats it
    /// as done.
    pub fn resolve_blockers(&self, ticket: &mut Ticket) {
        let Some(blockers) = ticket.blocked_by.as_mut() else {
            return;
        };
        for blocker in blockers {
            if let Ok((other, _)) = self.read_ticket(&blocker.id) {
                blocker.status = Some(other.status);
                blocker.closed = other.closed;
            }
        }
    }

    fn scan(&self, statuses: Option<&[String]>) -> Result<Listing, TrackerError> {
        let entries = fs::read_dir(&self.root).map_err(|e| self.board_error(e))?;
        let mut listing = Listing::default();
        let mut buf = Vec::with_capacity(8192);
        let mut path = self.root.clone();
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    listing
                        .warnings
                        .push(format!("reading {}: {e}", self.root.display()));
                    continue;
                }
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if !kind.is_dir() && !kind.is_symlink() {
                continue; // plain files (a README, say) are not tickets
            }
            let name = entry.file_name();
            let Some(id) = name.to_str().filter(|n| is_valid_id(n)) else {
                if !is_version_control_dir(&name) {
                    listing.warnings.push(format!(
                            "skipped folder {name:?} in {}: not a valid ticket id \
                             (1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit)",
                            self.root.display()
                        ),
                    );
                }
                continue;
            };
            if kind.is_symlink() {
                listing.warnings.push(format!(
                    "skipped ticket {id}: its folder is a symbolic link"
                ));
                continue;
            }
            path.push(id);
            path.push(TICKET_FILE);
            match load_ticket(&path, id, &mut buf, statuses) {
                Ok(Loaded::Ticket(ticket, notes)) => {
                    for note in notes {
                        listing.warnings.push(format!("ticket {id}: {note}"));
                    }
                    listing.tickets.push(*ticket);
                }
                Ok(Loaded::Filtered(status)) => {
                    *listing.other_statuses.entry(status).or_default() += 1;
                }
                Ok(Loaded::Absent) => {}
                Err(reason) => listing.warnings.push(format!(
                    "skipped ticket {id} ({}): {reason}",
                    path.display()
                )),
            }
            path.pop();
            path.pop();
        }
        Ok(listing)
    }

    /// The folder of ticket `id`, after checking the id and that the folder is a real one.
    fn ticket_dir(&self, id: &str) -> Result<PathBuf, TrackerError> {
        if !is_valid_id(id) {
            return Err(TrackerError::Invalid(format!(
                "{id:?} is not a valid ticket id (1-64 letters, digits, `.`, `_`, `-`, \
                 starting with a letter or digit)"
            )));
        }
        let dir = self.root.join(id);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(TrackerError::Invalid(format!(
                "ticket {id}: {} is not a real folder",
                dir.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if self.root.is_dir() {
                    Err(TrackerError::NotFound(format!(
                        "no ticket {id} on board {}",
                        self.root.display()
                    )))
                } else {
                    Err(self.board_error(e))
                }
            }
            Err(e) => Err(io_error(&dir, e)),
        }
    }

    /// Read one ticket (the synchronous [`Tracker::get`]), with notes about fields it could not use.
    pub fn read_ticket(&self, id: &str) -> Result<(Ticket, Vec<String>), TrackerError> {
        let path = self.ticket_dir(id)?.join(TICKET_FILE);
        let mut buf = Vec::new();
        match load_ticket(&path, id, &mut buf, None) {
            Ok(Loaded::Ticket(ticket, notes)) => Ok((
                *ticket,
                notes
                    .into_iter()
                    .map(|n| format!("ticket {id}: {n}"))
                    .collect(),
            )),
            Ok(Loaded::Filtered(_) | Loaded::Absent) => Err(TrackerError::NotFound(format!(
                "no ticket {id} on board {} (its folder has no {TICKET_FILE})",
                self.root.display()
            ))),
            Err(reason) => Err(TrackerError::Invalid(format!(
                "ticket {id} ({}): {reason}",
                path.display()
            ))),
        }
    }

    /// [`LocalBoard::read_comments`] of each of `ids`, in order, on up to as many threads
    /// as the machine has cores when there are enough to share.
    fn read_comments_of(&self, ids: &[String]) -> Vec<CommentsRead> {
        const PER_THREAD: usize = 16;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(ids.len() / PER_THREAD)
            .max(1);
        if threads == 1 {
            return ids.iter().map(|id| self.read_comments(id)).collect();
        }
        let chunk = ids.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let parts: Vec<_> = ids
                .chunks(chunk)
                .map(|part| {
                    let reader = scope.spawn(move || {
                        part.iter()
                            .map(|id| self.read_comments(id))
                            .collect::<Vec<_>>()
                    });
                    (part.len(), reader)
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|(len, reader)| {
                    reader.join().unwrap_or_else(|_| {
                        (0..len)
                            .map(|_| {
                                Err(TrackerError::Unavailable(
                                    "a local board read panicked".to_string(),
                                ))
                            })
                            .collect()
                    })
                })
                .collect()
        })
    }

    /// All readable comments of ticket `id`, oldest first, and a warning per skipped file.
    pub fn read_comments(&self, id: &str) -> Result<(Vec<Comment>, Vec<String>), TrackerError> {
        let dir = self.ticket_dir(id)?.join(COMMENTS_DIR);
        let mut warnings = Vec::new();
        let mut numbered = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    Some((comment_number(&name)?, name))
                })
                .collect::<Vec<_>>(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error(&dir, e)),
        };
        numbered.sort();
        let mut comments = Vec::with_capacity(numbered.len());
        let mut buf = Vec::new();
        for (_, name) in numbered {
            let path = dir.join(&name);
            match load_comment(&path, &name, &mut buf) {
                Ok(comment) => comments.push(comment),
                Err(reason) => warnings.push(format!(
                    "skipped comment {} of ticket {id}: {reason}",
                    path.display()
                )),
            }
        }
        Ok((comments, warnings))
    }

    fn board_error(&self, e: io::Error) -> TrackerError {
        if e.kind() == io::ErrorKind::NotFound {
            TrackerError::NotFound(format!(
                "no board at {0}; create one with `sortie board init {0}`",
                self.root.display()
            ))
        } else {
            io_error(&self.root, e)
        }
    }

    fn ticket_io(&self, id: &str, path: &Path, e: io::Error) -> TrackerError {
        if e.kind() == io::ErrorKind::NotFound {
            TrackerError::NotFound(format!(
                "no ticket {id} on board {} ({} is missing)",
                self.root.display(),
                path.display()
            ))
        } else {
            io_error(path, e)
        }
    }
}

pub(super) fn io_error(path: &Path, e: io::Error) -> TrackerError {
    TrackerError::Unavailable(format!("{}: {e}", path.display()))
}

/// Log what the person at the board should fix; the CLI prints these itself instead.
fn log_warnings(warnings: &[String]) {
    for w in warnings {
        tracing::warn!("{w}");
    }
}

fn is_version_control_dir(name: &std::ffi::OsStr) -> bool {
    matches!(name.to_str(), Some(".git" | ".hg" | ".svn"))
}

impl LocalBoard {
    /// Run blocking file work off the async executor.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(LocalBoard) -> Result<T, TrackerError> + Send + 'static,
    ) -> Result<T, TrackerError> {
        let board = self.clone();
        tokio::task::spawn_blocking(move || work(board))
            .await
            .map_err(|e| TrackerError::Unavailable(format!("local board task failed: {e}")))?
    }
}

/// One ticket's comments as read off the board, with a warning per skipped file.
type CommentsRead = Result<(Vec<Comment>, Vec<String>), TrackerError>;

/// Histories a tick reads ahead on the local board, per stage and round: file reads
/// cost no request, and a round of reads costs a handoff to the blocking pool.
const LOCAL_READ_AHEAD: usize = 64;

#[async_trait]
impl Tracker for LocalBoard {
    fn name(&self) -> &str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::workflow_states(true)
    }

    async fn identity(&self) -> Result<String, TrackerError> {
        Ok(IDENTITY.to_owned())
    }

    async fn list(&self, statuses: &[String]) -> Result<Listing, TrackerError> {
        let statuses = statuses.to_vec();
        let listing = self.blocking(move |board| board.list_in(&statuses)).await?;
        log_warnings(&listing.warnings);
        Ok(listing)
    }

    async fn get(&self, id: &str) -> Result<Ticket, TrackerError> {
        let id = id.to_owned();
        let (ticket, notes) = self
            .blocking(move |board| {
                let (mut ticket, notes) = board.read_ticket(&id)?;
                board.resolve_blockers(&mut ticket);
                Ok((ticket, notes))
            })
            .await?;
        log_warnings(&notes);
        Ok(ticket)
    }

    async fn comments(&self, id: &str) -> Result<Vec<Comment>, TrackerError> {
        let id = id.to_owned();
        let (comments, warnings) = self.blocking(move |board| board.read_comments(&id)).await?;
        log_warnings(&warnings);
        Ok(comments)
    }

    /// One blocking task for all of `ids`: a handoff to the blocking pool per ticket
    /// cost more than reading its comments (issue #29).
    async fn comments_of(&self, ids: &[String]) -> Vec<Result<Vec<Comment>, TrackerError>> {
        let owned = ids.to_vec();
        let read = self
            .blocking(move |board| Ok(board.read_comments_of(&owned)))
            .await;
        match read {
            Ok(all) => all
                .into_iter()
                .map(|r| {
                    r.map(|(comments, warnings)| {
                        log_warnings(&warnings);
                        comments
                    })
                })
                .collect(),
            Err(err) => ids
                .iter()
                .map(|_| Err(TrackerError::Unavailable(err.to_string())))
                .collect(),
        }
    }

    fn read_ahead(&self) -> usize {
        LOCAL_READ_AHEAD
    }

    async fn post_comment(&self, id: &str, body: &str, key: &str) -> Result<Comment, TrackerError> {
        let (id, body, key) = (id.to_owned(), body.to_owned(), key.to_owned());
        self.blocking(move |board| board.add_comment_once(&id, IDENTITY, &body, &key))
            .await
    }

    async fn transition(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        let (id, from, to) = (id.to_owned(), from.to_owned(), to.to_owned());
        self.blocking(move |board| board.move_from(&id, &from, &to))
            .await
    }
}

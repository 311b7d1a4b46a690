//! Writing to the local board: new tickets, comments, status moves.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::files::{read_into, TempFile, TicketLock};
use super::format::{parse_ticket_front, split_front_matter, Split, TicketFront};
use super::read::{comment_number, modified, utf8_reason};
use super::render::{
    edit_front_matter, has_top_level_key, render_comment, render_ticket, render_time,
    rewrite_front_matter, yaml_scalar, TicketFile,
};
use super::{io_error, LocalBoard, NewTicket, COMMENTS_DIR, TICKET_FILE};
use crate::tracker::{Comment, Ticket, TrackerError};

impl LocalBoard {
    /// Create a ticket with the next free integer id.
    pub fn add_ticket(&self, new: NewTicket) -> Result<Ticket, TrackerError> {
        if new.title.trim().is_empty() {
            return Err(TrackerError::Invalid(
                "a ticket needs a non-empty title".into(),
            ));
        }
        check_status(&new.status)?;
        for label in &new.labels {
            check_line("label", label)?;
        }
        let now = self.now();
        let text = render_ticket(&TicketFile {
            title: new.title.trim(),
            status: new.status.trim(),
            priority: new.priority,
            labels: &new.labels,
            created_at: now,
            updated_at: now,
            body: &new.body,
        });
        let mut n = self.highest_numeric_id()? + 1;
        // `create_dir` fails if the folder exists: two writers never get the same id.
        let (id, dir) = loop {
            let id = n.to_string();
            let dir = self.root.join(&id);
            match fs::create_dir(&dir) {
                Ok(()) => break (id, dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(io_error(&dir, e)),
            }
        };
        TempFile::write(&dir, text.as_bytes())
            .and_then(|t| t.rename_to(&dir.join(TICKET_FILE)))
            .map_err(|e| io_error(&dir, e))?;
        self.read_ticket(&id).map(|(ticket, _)| ticket)
    }

    fn highest_numeric_id(&self) -> Result<u64, TrackerError> {
        let entries = fs::read_dir(&self.root).map_err(|e| self.board_error(e))?;
        Ok(entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0))
    }

    /// Add a comment by `author`; it gets the next free number and never replaces another.
    pub fn add_comment(&self, id: &str, author: &str, body: &str) -> Result<Comment, TrackerError> {
        let ticket_dir = self.comment_target(id, author)?;
        self.write_comment(&ticket_dir, author, body)
    }

    /// The folder of ticket `id`, once `author` is a valid author line and the ticket exists.
    fn comment_target(&self, id: &str, author: &str) -> Result<PathBuf, TrackerError> {
        check_line("author", author)?;
        let ticket_dir = self.ticket_dir(id)?;
        if !ticket_dir.join(TICKET_FILE).is_file() {
            return Err(TrackerError::NotFound(format!(
                "no ticket {id} on board {}",
                self.root.display()
            )));
        }
        Ok(ticket_dir)
    }

    /// Write a comment by `author` into the ticket folder `ticket_dir` (checked by
    /// [`LocalBoard::comment_target`]).
    fn write_comment(
        &self,
        ticket_dir: &Path,
        author: &str,
        body: &str,
    ) -> Result<Comment, TrackerError> {
        let dir = ticket_dir.join(COMMENTS_DIR);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let real_dir = fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
                if !real_dir {
                    return Err(TrackerError::Invalid(format!(
                        "{} is not a real folder; refusing to write through it",
                        dir.display()
                    )));
                }
            }
            Err(e) => return Err(io_error(&dir, e)),
        }
        let first = fs::read_dir(&dir)
            .map_err(|e| io_error(&dir, e))?
            .filter_map(|e| comment_number(e.ok()?.file_name().to_str()?))
            .max()
            .unwrap_or(0)
            + 1;
        let created_at = self.now();
        let author = author.trim();
        let number = TempFile::write(&dir, render_comment(author, created_at, body).as_bytes())
            .and_then(|t| t.link_numbered(&dir, first, comment_file_name))
            .map_err(|e| io_error(&dir, e))?;
        Ok(Comment {
            id: format!("{number:04}"),
            author: author.to_owned(),
            created_at,
            body: body.to_owned(),
        })
    }

    /// Add a comment by `author` unless one by `author` already carries an outcome block
    /// whose idempotency key is `idempotency_key`: then that comment, and nothing is
    /// written (what [`Tracker::post_comment`](crate::tracker::Tracker::post_comment)
    /// does on this board).
    ///
    /// The check and the write happen under the ticket's lock, so two writers posting
    /// the same key at once (two ticks that both found no such comment, say one of them
    /// on a ledger that was deleted under the other) leave one comment, not two. The key
    /// is recognised as `TicketHistory::contains_key` does: by the `idempotency_key` of a
    /// valid block in the comment, not by text matching. An empty key never matches.
    pub fn add_comment_once(
        &self,
        id: &str,
        author: &str,
        body: &str,
        idempotency_key: &str,
    ) -> Result<Comment, TrackerError> {
        let ticket_dir = self.comment_target(id, author)?;
        let _lock = TicketLock::acquire(&ticket_dir).map_err(|e| io_error(&ticket_dir, e))?;
        if !idempotency_key.is_empty() {
            let (comments, _) = self.read_comments(id)?;
            let author = author.trim();
            if let Some(posted) = comments
                .into_iter()
                .find(|c| c.author == author && carries_key(&c.body, idempotency_key))
            {
                return Ok(posted);
            }
        }
        self.write_comment(&ticket_dir, author, body)
    }

    /// Move ticket `id` to `status` whatever it is in now (what a person does); returns the old status.
    pub fn set_status(&self, id: &str, status: &str) -> Result<String, TrackerError> {
        self.rewrite_status(id, None, status)
    }

    /// Move ticket `id` from `from` to `to` (the synchronous [`Tracker::transition`]).
    pub fn move_from(&self, id: &str, from: &str, to: &str) -> Result<(), TrackerError> {
        self.rewrite_status(id, Some(from), to).map(|_| ())
    }

    fn rewrite_status(
        &self,
        id: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<String, TrackerError> {
        self.rewrite_status_with(id, from, to, &mut || {})
    }

    /// [`Self::rewrite_status`], calling `before_check` between writing the new file
    /// and the final re-read: where a person's concurrent save would land.
    fn rewrite_status_with(
        &self,
        id: &str,
        from: Option<&str>,
        to: &str,
        before_check: &mut dyn FnMut(),
    ) -> Result<String, TrackerError> {
        check_status(to)?;
        let to = to.trim();
        self.edit_ticket_file(
            id,
            "move",
            before_check,
            |file, path, text, split, front| {
                if crate::tracker::same_name(&front.status, to) {
                    return Ok(Edit::Keep(front.status));
                }
                if let Some(from) = from {
                    if !crate::tracker::same_name(&front.status, from) {
                        return Err(TrackerError::Conflict {
                            id: id.to_owned(),
                            expected: from.to_owned(),
                            current: front.status,
                        });
                    }
                }
                let mut changes = vec![
                    ("status", yaml_scalar(to)),
                    ("updated_at", render_time(self.now())),
                ];
                if front.created_at.is_none() && !has_top_level_key(split.front, "created_at") {
                    let mtime = modified(file).unwrap_or_else(|| self.now());
                    changes.push(("created_at", render_time(mtime)));
                }
                let moved = |new: &String| same_ticket_moved(&front, split.body, new, to);
                let updated = edit_front_matter(text, &changes)
                    .filter(moved)
                    .or_else(|| rewrite_front_matter(text, &changes).filter(moved))
                    .ok_or_else(|| {
                        TrackerError::Invalid(format!(
                            "ticket {id}: cannot rewrite the status in {}",
                            path.display()
                        ))
                    })?;
                Ok(Edit::Write(updated, front.status))
            },
        )
    }

    /// Rewrite ticket `id`'s file under the ticket lock: `edit` reads it (the open file,
    /// its path, text, front matter split off and parsed) and says what to write. The new
    /// file replaces the old only when a re-read right before (after `before_check`)
    /// finds it unchanged; otherwise a person saved meanwhile and `edit` runs again on
    /// their version, up to 8 times (then [`TrackerError::Unavailable`], saying `doing`).
    fn edit_ticket_file<T>(
        &self,
        id: &str,
        doing: &str,
        before_check: &mut dyn FnMut(),
        mut edit: impl FnMut(
            &fs::File,
            &Path,
            &str,
            &Split<'_>,
            TicketFront,
        ) -> Result<Edit<T>, TrackerError>,
    ) -> Result<T, TrackerError> {
        let dir = self.ticket_dir(id)?;
        let path = dir.join(TICKET_FILE);
        // Serializes sortie writers; a person's editor is handled by the re-check below.
        let _lock = TicketLock::acquire(&dir).map_err(|e| io_error(&dir, e))?;
        let mut original = Vec::new();
        let mut current = Vec::new();
        for _ in 0..8 {
            let file = read_into(&path, &mut original).map_err(|e| self.ticket_io(id, &path, e))?;
            let (text, split, front) = parse_ticket_file(id, &path, &original)?;
            let (updated, answer) = match edit(&file, &path, text, &split, front)? {
                Edit::Keep(answer) => return Ok(answer),
                Edit::Write(updated, answer) => (updated, answer),
            };
            let temp = TempFile::write(&dir, updated.as_bytes()).map_err(|e| io_error(&dir, e))?;
            before_check();
            // Right before the rename: has anyone (a person) changed the file since we read it?
            read_into(&path, &mut current).map_err(|e| self.ticket_io(id, &path, e))?;
            if current != original {
                continue;
            }
            temp.rename_to(&path).map_err(|e| io_error(&path, e))?;
            return Ok(answer);
        }
        Err(TrackerError::Unavailable(format!(
            "ticket {id}: {} kept changing while sortie tried to {doing} it",
            path.display()
        )))
    }
}

/// What one read of a ticket file decides: leave the file as it is, or write new text;
/// either way with the answer to give.
enum Edit<T> {
    /// Nothing to change.
    Keep(T),
    /// Replace the file with this text.
    Write(String, T),
}

impl LocalBoard {
    /// Record that ticket `id` is blocked by ticket `by` (its `blocked_by` front matter);
    /// returns the blockers now listed. Both tickets must exist and differ.
    pub fn add_blocker(&self, id: &str, by: &str) -> Result<Vec<String>, TrackerError> {
        if id.trim() == by.trim() {
            return Err(TrackerError::Invalid(format!(
                "ticket {id} cannot block itself"
            )));
        }
        self.read_ticket(by)?;
        self.edit_ticket_file(id, "edit", &mut || {}, |_, path, text, _, front| {
            let mut blockers = front.blocked_by.clone();
            if blockers.iter().any(|b| b == by.trim()) {
                return Ok(Edit::Keep(blockers));
            }
            blockers.push(by.trim().to_string());
            let list = format!(
                "[{}]",
                blockers
                    .iter()
                    .map(|b| yaml_scalar(b))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let changes = [
                ("blocked_by", list),
                ("updated_at", render_time(self.now())),
            ];
            let updated = edit_front_matter(text, &changes)
                .or_else(|| rewrite_front_matter(text, &changes))
                .ok_or_else(|| {
                    TrackerError::Invalid(format!(
                        "ticket {id}: cannot rewrite blocked_by in {}",
                        path.display()
                    ))
                })?;
            Ok(Edit::Write(updated, blockers))
        })
    }
}

pub(super) fn check_line(what: &str, value: &str) -> Result<(), TrackerError> {
    if value.trim().is_empty() || value.chars().any(char::is_control) {
        return Err(TrackerError::Invalid(format!(
            "{what} {value:?} must be non-empty text on one line"
        )));
    }
    Ok(())
}

pub(super) fn check_status(status: &str) -> Result<(), TrackerError> {
    check_line("status", status)
}

/// Whether `new` is the ticket `front` with only its status changed to `to`, body intact.
fn same_ticket_moved(front: &TicketFront, body: &str, new: &str, to: &str) -> bool {
    let Ok(split) = split_front_matter(new) else {
        return false;
    };
    let Ok(moved) = parse_ticket_front(&split) else {
        return false;
    };
    split.body == body
        && moved.status == to
        && moved.title == front.title
        && moved.priority == front.priority
        && moved.labels == front.labels
        && (front.created_at.is_none() || moved.created_at == front.created_at)
}

/// Whether `body` holds a valid outcome block whose idempotency key is `key`.
fn carries_key(body: &str, key: &str) -> bool {
    crate::block::parse_blocks(body)
        .into_iter()
        .flatten()
        .any(|parsed| parsed.block.idempotency_key() == key)
}

fn comment_file_name(n: u64) -> String {
    format!("{n:04}.md")
}

/// Ticket `id`'s file as read into `bytes` (from `path`): its text, split at the front
/// matter, and the front matter parsed; what every rewrite of the file starts from.
fn parse_ticket_file<'a>(
    id: &str,
    path: &Path,
    bytes: &'a [u8],
) -> Result<(&'a str, Split<'a>, TicketFront), TrackerError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        TrackerError::Invalid(format!(
            "ticket {id}: {} {}",
            path.display(),
            utf8_reason(&e)
        ))
    })?;
    let split = split_front_matter(text).map_err(|e| invalid(id, path, e))?;
    let front = parse_ticket_front(&split).map_err(|e| invalid(id, path, e))?;
    Ok((text, split, front))
}

fn invalid(id: &str, path: &Path, e: super::format::FormatError) -> TrackerError {
    TrackerError::Invalid(format!("ticket {id} ({}): {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use super::*;

    #[test]
    fn a_persons_save_during_a_transition_is_not_overwritten() {
        let tmp = tempfile::tempdir().unwrap();
        let board = LocalBoard::init(tmp.path())
            .unwrap()
            .with_clock(Arc::new(|| {
                Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
            }));
        let dir = tmp.path().join("1");
        fs::create_dir(&dir).unwrap();
        let path = dir.join(TICKET_FILE);
        fs::write(&path, "---\ntitle: T\nstatus: todo\n---\nbody\n").unwrap();
        let persons_save = "---\ntitle: T\nstatus: cancelled\n---\nbody, edited\n";
        let mut saves = 0;
        let result = board.rewrite_status_with("1", Some("todo"), "doing", &mut || {
            saves += 1;
            fs::write(&path, persons_save).unwrap();
        });
        match result {
            Err(TrackerError::Conflict { current, .. }) => assert_eq!(current, "cancelled"),
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert_eq!(saves, 1);
        assert_eq!(fs::read_to_string(&path).unwrap(), persons_save);
    }

    #[test]
    fn an_unrelated_save_during_a_transition_is_kept_and_the_move_still_happens() {
        let tmp = tempfile::tempdir().unwrap();
        let board = LocalBoard::init(tmp.path()).unwrap();
        let dir = tmp.path().join("1");
        fs::create_dir(&dir).unwrap();
        let path = dir.join(TICKET_FILE);
        fs::write(
            &path,
            "---\ntitle: T\nstatus: todo\ncreated_at: 2026-01-01\n---\nbody\n",
        )
        .unwrap();
        let mut first = true;
        board
            .rewrite_status_with("1", Some("todo"), "doing", &mut || {
                if std::mem::take(&mut first) {
                    let text = fs::read_to_string(&path).unwrap();
                    fs::write(&path, text.replace("body", "body, edited")).unwrap();
                }
            })
            .unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("status: doing\n"), "{text}");
        assert!(text.ends_with("---\nbody, edited\n"), "{text}");
    }
}

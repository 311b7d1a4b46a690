//! Reading one ticket or comment file off the local board.

use std::fs;
use std::io;
use std::path::Path;

use chrono::{DateTime, SubsecRound, Utc};

use super::files::{read_head_into, read_into, read_rest};
use super::format::{
    has_closed_front_matter, parse_comment_front, parse_ticket_front, quick_status,
    split_front_matter,
};
use super::TICKET_FILE;
use crate::tracker::labels::normalize_labels;
use crate::tracker::{Comment, Ticket};

/// How one ticket folder turned out while listing.
pub(super) enum Loaded {
    /// A ticket and notes about its unusable fields.
    Ticket(Box<Ticket>, Vec<String>),
    /// Parsed, but not in a requested status.
    Filtered(String),
    /// No `ticket.md` and nothing else that looks like content: a folder being created.
    Absent,
}

/// The file's modification time, to the second like every time the board writes.
pub(super) fn modified(file: &fs::File) -> Option<DateTime<Utc>> {
    file.metadata()
        .ok()?
        .modified()
        .ok()
        .map(|t| DateTime::<Utc>::from(t).trunc_subsecs(0))
}

pub(super) fn utf8_reason(e: &std::str::Utf8Error) -> String {
    format!("is not valid UTF-8 (byte {})", e.valid_up_to())
}

/// `0001.md` -> 1; anything else (temp files, notes) is not a comment.
pub(super) fn comment_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".md")?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Read one `ticket.md`; only its front matter unless its status is wanted.
pub(super) fn load_ticket(
    path: &Path,
    id: &str,
    buf: &mut Vec<u8>,
    statuses: Option<&[String]>,
) -> Result<Loaded, String> {
    let (mut file, whole) = match read_head_into(path, buf, has_closed_front_matter) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return folder_without_ticket(path.parent().unwrap_or(path));
        }
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let front = {
        let text = match std::str::from_utf8(buf) {
            Ok(text) => text,
            Err(e) => {
                // The front matter must lie before the first bad byte; the body is checked when read.
                let prefix = std::str::from_utf8(&buf[..e.valid_up_to()]).unwrap_or_default();
                if split_front_matter(prefix).is_err() {
                    return Err(format!("{TICKET_FILE} {}", utf8_reason(&e)));
                }
                prefix
            }
        };
        let split = split_front_matter(text).map_err(|e| e.to_string())?;
        if let (Some(wanted), Some(status)) = (statuses, quick_status(split.front)) {
            if !wanted.iter().any(|s| crate::tracker::same_name(s, status)) {
                return Ok(Loaded::Filtered(status.trim().to_string()));
            }
        }
        parse_ticket_front(&split).map_err(|e| e.to_string())?
    };
    if statuses.is_some_and(|wanted| {
        !wanted
            .iter()
            .any(|s| crate::tracker::same_name(s, &front.status))
    }) {
        return Ok(Loaded::Filtered(front.status.trim().to_string()));
    }
    if !whole {
        read_rest(&mut file, buf).map_err(|e| format!("cannot read: {e}"))?;
    }
    let text =
        std::str::from_utf8(buf).map_err(|e| format!("{TICKET_FILE} {}", utf8_reason(&e)))?;
    let body = split_front_matter(text).map_err(|e| e.to_string())?.body;
    let mtime = || modified(&file).unwrap_or_else(Utc::now);
    let created_at = front.created_at.unwrap_or_else(mtime);
    let updated_at = front.updated_at.unwrap_or_else(mtime);
    Ok(Loaded::Ticket(
        Box::new(Ticket {
            id: id.to_owned(),
            title: front.title,
            body: body.to_owned(),
            status: front.status,
            labels: normalize_labels(front.labels),
            priority: front.priority,
            created_at,
            updated_at,
            url: None,
            closed: false,
            assignees: front.assignees,
            // Statuses filled in by the board (`LocalBoard::resolve_blockers`).
            blocked_by: Some(
                front
                    .blocked_by
                    .into_iter()
                    .map(|id| crate::tracker::Blocker {
                        id,
                        status: None,
                        closed: false,
                    })
                    .collect(),
            ),
        }),
        front.notes,
    ))
}

/// A ticket folder without `ticket.md`: silent while it is empty (being created), an error otherwise.
fn folder_without_ticket(dir: &Path) -> Result<Loaded, String> {
    let has_content = fs::read_dir(dir).is_ok_and(|mut entries| {
        entries.any(|e| {
            e.ok()
                .is_some_and(|e| !e.file_name().to_string_lossy().starts_with('.'))
        })
    });
    if has_content {
        Err(format!("the folder has no {TICKET_FILE}"))
    } else {
        Ok(Loaded::Absent)
    }
}

pub(super) fn load_comment(path: &Path, name: &str, buf: &mut Vec<u8>) -> Result<Comment, String> {
    let file = read_into(path, buf).map_err(|e| format!("cannot read: {e}"))?;
    let text = std::str::from_utf8(buf).map_err(|e| utf8_reason(&e))?;
    let split = split_front_matter(text).map_err(|e| e.to_string())?;
    let front = parse_comment_front(&split).map_err(|e| e.to_string())?;
    let created_at = front
        .created_at
        .unwrap_or_else(|| modified(&file).unwrap_or_else(Utc::now));
    Ok(Comment {
        id: name.trim_end_matches(".md").to_owned(),
        author: front.author,
        created_at,
        body: split.body.to_owned(),
    })
}

//! Crash- and race-safe file operations the local board is built on.
//!
//! Every write goes to a hidden temporary file in the destination directory,
//! is fsynced, and then appears under its final name in one step: `rename` to
//! replace a ticket, `link` (which refuses to clobber) to add a numbered file.
//! Readers therefore see a whole old file or a whole new one, never a torn one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Name of the per-ticket advisory lock file.
pub const LOCK_FILE: &str = ".lock";

/// A hidden temporary file in `dir`, removed on drop unless it was consumed.
pub struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl TempFile {
    /// Write `bytes` to a new hidden file in `dir` and fsync it.
    pub fn write(dir: &Path, bytes: &[u8]) -> io::Result<TempFile> {
        let path = dir.join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
        let temp = TempFile { path, keep: false };
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp.path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(temp)
    }

    /// Atomically replace `dest` with this file.
    pub fn rename_to(mut self, dest: &Path) -> io::Result<()> {
        fs::rename(&self.path, dest)?;
        self.keep = true;
        sync_parent(dest);
        Ok(())
    }

    /// Link this file as `dir/<first free number formatted by name_of>`, starting at `first`.
    ///
    /// `link` fails when the name exists, so two writers racing for the same
    /// number never overwrite each other: the loser moves on to the next one.
    pub fn link_numbered(
        self,
        dir: &Path,
        first: u64,
        name_of: impl Fn(u64) -> String,
    ) -> io::Result<u64> {
        let mut n = first;
        loop {
            let dest = dir.join(name_of(n));
            match fs::hard_link(&self.path, &dest) {
                Ok(()) => {
                    sync_parent(&dest);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Make a rename or link durable: fsync the directory holding `path` (best effort).
fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// An exclusive advisory lock on one ticket, held until dropped.
///
/// It serializes sortie's own read-modify-write of `ticket.md` across threads
/// and processes; a person's editor does not take it, which is why writers
/// also re-check the file right before renaming.
pub struct TicketLock {
    _lock: Flock<File>,
}

impl TicketLock {
    /// Block until the lock of the ticket folder `dir` is ours.
    pub fn acquire(dir: &Path) -> io::Result<TicketLock> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            // A `.lock` planted as a symlink must not make us create files elsewhere.
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(dir.join(LOCK_FILE))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(TicketLock { _lock: lock }),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => return Err(io::Error::from(errno)),
            }
        }
    }
}

/// Read all of `path` into `buf` (cleared first), reusing its allocation.
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<File> {
    buf.clear();
    let mut file = File::open(path)?;
    read_rest(&mut file, buf)?;
    Ok(file)
}

/// Append the rest of `file` (a regular file) to `buf`. `read_to_end` first asks the
/// file its size and position and reads until a read returns nothing (three system
/// calls more than the data needs); for a board's small files those cost more than the
/// read itself (issue #29), so this reads in chunks until one comes back short, which
/// a regular file does only at its end. The board's own writes replace a file whole
/// (written aside, then renamed or linked), so no read sees one half written.
pub fn read_rest(file: &mut File, buf: &mut Vec<u8>) -> io::Result<()> {
    const CHUNK: usize = 4096;
    loop {
        let start = buf.len();
        buf.resize(start + CHUNK, 0);
        match file.read(&mut buf[start..]) {
            Ok(0) => {
                buf.truncate(start);
                return Ok(());
            }
            Ok(n) => {
                buf.truncate(start + n);
                // Less than asked of a regular file: its end (one read less a file).
                if n < CHUNK {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(start),
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
}

/// Read `path` into `buf` until its front matter is closed (or the file ends).
///
/// Returns the open file and whether the whole file was read.
pub fn read_head_into(
    path: &Path,
    buf: &mut Vec<u8>,
    closed: impl Fn(&[u8]) -> bool,
) -> io::Result<(File, bool)> {
    const CHUNK: usize = 4096;
    buf.clear();
    let mut file = File::open(path)?;
    loop {
        let start = buf.len();
        buf.resize(start + CHUNK, 0);
        let n = loop {
            match file.read(&mut buf[start..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        buf.truncate(start + n);
        if n == 0 {
            return Ok((file, true));
        }
        if closed(buf) {
            // A regular file answers a read with less than asked only at its end: the
            // whole file is in (one system call less per ticket, issue #29).
            return Ok((file, n < CHUNK));
        }
    }
}

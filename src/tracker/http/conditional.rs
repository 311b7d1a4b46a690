//! Conditional requests and their cache: the last page the tracker sent for each URL
//! with its `ETag`, so an unchanged board is re-read with `If-None-Match` requests
//! that GitHub answers `304` without counting them against the rate limit.
//!
//! Cron ticks are separate processes, so the pages every tick asks for (the board
//! listing, the token's user, single issues, which the workspace prune re-reads every
//! few ticks, the comments of tickets, which watching a pull request re-reads every
//! tick, and the pull requests' own reads) are also persisted to a JSON file under the
//! state root, together with the time until which the tracker asked us to wait. The
//! file is written after each listing and when the cache is dropped (the tracker
//! closes); it keeps the most recently used pages within a count and a size. Everything
//! else (blockers, repository labels) is kept for the life of the process only. The
//! file is a cache: a missing, stale or broken file only costs full requests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::client::Reply;
use super::paging::next_link;
use crate::tracker::TrackerError;

/// Pages kept in memory at most (least recently used go first).
const MEMORY_ENTRIES: usize = 1000;
/// Pages written to the file at most (most recently used are kept).
const FILE_ENTRIES: usize = 300;
/// Pages bigger than this are not written to the file.
const FILE_BODY_MAX: usize = 512 * 1024;
/// The pages' bodies written to the file at most, in all (most recently used are kept):
/// persisting every ticket's comments must not make each save rewrite a huge file.
const FILE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Format version of the file; another version is ignored.
const FILE_VERSION: u32 = 1;

/// One cached response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CachedPage {
    /// The `ETag` the tracker sent with it.
    pub etag: String,
    /// The response body.
    pub body: String,
    /// Its `rel="next"` link.
    pub next: Option<String>,
}

#[derive(Debug, Clone)]
struct Entry {
    page: CachedPage,
    persist: bool,
    used: u64,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Entry>,
    blocked_until: Option<DateTime<Utc>>,
    dirty: bool,
    clock: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct FileForm {
    version: u32,
    #[serde(default)]
    blocked_until: Option<DateTime<Utc>>,
    #[serde(default)]
    pages: HashMap<String, CachedPage>,
}

/// ETag -> page cache, optionally backed by a file.
#[derive(Debug)]
pub(crate) struct ResponseCache {
    path: Option<PathBuf>,
    /// `GitHub`: whose cache, for log lines about the file.
    vendor: &'static str,
    state: Mutex<State>,
}

impl ResponseCache {
    /// A cache of `vendor`'s pages loaded from `path` (if given and readable), saved
    /// back there.
    pub fn open(path: Option<PathBuf>, vendor: &'static str) -> Self {
        let mut state = State::default();
        if let Some(file) = path.as_deref().and_then(|p| load(p, vendor)) {
            state.blocked_until = file.blocked_until;
            for (url, page) in file.pages {
                state.entries.insert(
                    url,
                    Entry {
                        page,
                        persist: true,
                        used: 0,
                    },
                );
            }
        }
        ResponseCache {
            path,
            vendor,
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a single insert or assignment, so a poisoned lock still
        // holds consistent data.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached page for `url`, marking it used.
    pub fn lookup(&self, url: &str) -> Option<CachedPage> {
        let mut state = self.state();
        state.clock += 1;
        let now = state.clock;
        let entry = state.entries.get_mut(url)?;
        entry.used = now;
        Some(entry.page.clone())
    }

    /// Remember `page` for `url`; `persist` also writes it to the file at the next save.
    pub fn store(&self, url: &str, page: CachedPage, persist: bool) {
        let mut state = self.state();
        state.clock += 1;
        let used = state.clock;
        let changed = state.entries.get(url).is_none_or(|e| e.page != page);
        state.entries.insert(
            url.to_string(),
            Entry {
                page,
                persist,
                used,
            },
        );
        if persist && changed {
            state.dirty = true;
        }
        if state.entries.len() > MEMORY_ENTRIES {
            if let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            {
                state.entries.remove(&oldest);
            }
        }
    }

    /// Until when the tracker asked us not to send anything.
    pub fn blocked_until(&self) -> Option<DateTime<Utc>> {
        self.state().blocked_until
    }

    /// Record until when the tracker asked us not to send anything.
    pub fn set_blocked_until(&self, until: Option<DateTime<Utc>>) {
        let mut state = self.state();
        if state.blocked_until != until {
            state.blocked_until = until;
            state.dirty = true;
        }
    }

    /// Write the persisted part to the file if anything changed. Failures are logged:
    /// losing the cache costs requests, never correctness.
    pub fn save(&self) {
        let Some(path) = &self.path else { return };
        let form = {
            let mut state = self.state();
            if !state.dirty {
                return;
            }
            state.dirty = false;
            let mut persisted: Vec<(&String, &Entry)> = state
                .entries
                .iter()
                .filter(|(_, e)| e.persist && e.page.body.len() <= FILE_BODY_MAX)
                .collect();
            persisted.sort_by_key(|(_, e)| std::cmp::Reverse(e.used));
            persisted.truncate(FILE_ENTRIES);
            let mut bytes = 0;
            let within_size = persisted.into_iter().take_while(|(_, e)| {
                bytes += e.page.body.len();
                bytes <= FILE_BYTES_MAX
            });
            FileForm {
                version: FILE_VERSION,
                blocked_until: state.blocked_until,
                pages: within_size
                    .map(|(k, e)| (k.clone(), e.page.clone()))
                    .collect(),
            }
        };
        if let Err(err) = write_atomically(path, &form) {
            tracing::warn!(
                path = %path.display(),
                %err,
                "could not save the {} ETag cache",
                self.vendor
            );
        }
    }
}

impl ResponseCache {
    /// The page a conditional `GET url` answered: the `cached` one for a 304, else the
    /// new one, remembered (and persisted when `persist`) when it has an `ETag`.
    pub fn answered(
        &self,
        url: &str,
        cached: Option<CachedPage>,
        reply: Reply,
        persist: bool,
    ) -> Result<CachedPage, TrackerError> {
        if reply.status == 304 {
            return cached.ok_or_else(|| {
                TrackerError::Unavailable(format!("{url}: 304 Not Modified without a cached page"))
            });
        }
        let header = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let page = CachedPage {
            etag: header("etag").unwrap_or_default(),
            body: reply.body,
            next: header("link").as_deref().and_then(next_link),
        };
        if !page.etag.is_empty() {
            self.store(url, page.clone(), persist);
        }
        Ok(page)
    }
}

impl Drop for ResponseCache {
    /// Pages learned after the last save (single issues read after the listing, as
    /// the workspace prune does) reach the file too.
    fn drop(&mut self) {
        self.save();
    }
}

fn load(path: &Path, vendor: &str) -> Option<FileForm> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(err) => {
            tracing::warn!(
                path = %path.display(),
                %err,
                "could not read the {vendor} ETag cache; starting empty"
            );
            return None;
        }
    };
    match serde_json::from_str::<FileForm>(&text) {
        Ok(form) if form.version == FILE_VERSION => Some(form),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "ignoring a broken {vendor} ETag cache");
            None
        }
    }
}

/// Write `form` so a concurrent reader (another tick) never sees half a file.
fn write_atomically(path: &Path, form: &FileForm) -> std::io::Result<()> {
    crate::state_file::write_atomically(path, &serde_json::to_vec(form)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(etag: &str) -> CachedPage {
        CachedPage {
            etag: etag.into(),
            body: "[]".into(),
            next: None,
        }
    }

    #[test]
    fn persisted_pages_and_the_wait_survive_a_restart_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/github-etags.json");
        let cache = ResponseCache::open(Some(path.clone()), "GitHub");
        cache.store("https://api/list", page("\"a\""), true);
        cache.store("https://api/issue/1", page("\"b\""), false);
        let until = Utc::now();
        cache.set_blocked_until(Some(until));
        cache.save();

        let again = ResponseCache::open(Some(path), "GitHub");
        assert_eq!(again.lookup("https://api/list"), Some(page("\"a\"")));
        assert_eq!(again.lookup("https://api/issue/1"), None);
        assert_eq!(again.blocked_until(), Some(until));
    }

    #[test]
    fn the_file_keeps_the_most_recently_used_pages_within_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("github-etags.json");
        let cache = ResponseCache::open(Some(path.clone()), "GitHub");
        let big = |etag: &str| CachedPage {
            body: "x".repeat(FILE_BODY_MAX),
            ..page(etag)
        };
        let pages = FILE_BYTES_MAX / FILE_BODY_MAX + 1;
        for n in 0..pages {
            cache.store(&format!("https://api/comments/{n}"), big("\"c\""), true);
        }
        cache.save();

        let again = ResponseCache::open(Some(path), "GitHub");
        assert_eq!(
            again.lookup("https://api/comments/0"),
            None,
            "the oldest goes"
        );
        for n in 1..pages {
            let url = format!("https://api/comments/{n}");
            assert!(again.lookup(&url).is_some(), "{url} is kept");
        }
    }

    #[test]
    fn a_broken_file_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("github-etags.json");
        std::fs::write(&path, "{not json").unwrap();
        let cache = ResponseCache::open(Some(path), "GitHub");
        assert_eq!(cache.lookup("x"), None);
    }
}

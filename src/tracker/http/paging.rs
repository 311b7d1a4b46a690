//! Paging: where the next page of a listing is, by `Link` header, by offset, or by
//! cursor, and the walk over a listing's pages, which refuses to act on part of it.

use std::collections::HashSet;

use super::url::{path_of, strip_query};
use crate::tracker::TrackerError;

/// Pages one listing reads at most where the adapter sets no cap of its own.
pub const MAX_PAGES: usize = 1000;

/// The pages one listing has read. Every refusal is an error, never a shorter listing
/// with a warning: a tick must not act on part of the board (issue #39). It refuses a
/// next link off the API base (the token would go to another host), a page already
/// read (a link or cursor loop, a page token the server repeats), a page that says more
/// follow without a cursor (issue #52), and a page past the cap.
#[derive(Debug)]
pub struct PageWalk {
    what: String,
    cap: usize,
    seen: HashSet<String>,
}

impl PageWalk {
    /// A walk over the pages of `what` (`GitHub listing /repos/o/r/issues`), reading
    /// `cap` pages at most.
    pub fn new(what: impl Into<String>, cap: usize) -> Self {
        PageWalk {
            what: what.into(),
            cap,
            seen: HashSet::new(),
        }
    }

    /// Count the page at `key` (its URL, offset or cursor) before reading it: an error
    /// when it was read already or the cap is reached.
    pub fn visit(&mut self, key: &str) -> Result<(), TrackerError> {
        if self.seen.len() >= self.cap {
            return Err(TrackerError::Invalid(format!(
                "{}: more than {} pages; refusing to act on part of the board",
                self.what, self.cap
            )));
        }
        if !self.seen.insert(key.to_string()) {
            return Err(TrackerError::Invalid(format!(
                "{}: the next page ({}) was read already (a pagination loop); refusing to act \
                 on part of the board",
                self.what,
                strip_query(path_of(key))
            )));
        }
        Ok(())
    }

    /// The cursor of the next page, `None` when the page said it was the last
    /// (`more` false). A page that says more follow but gives no cursor is an error:
    /// ending there would act on part of the board. A cursor that was read already (a
    /// server repeating its page token) is refused by the next [`visit`](Self::visit).
    pub fn next_cursor(
        &self,
        more: bool,
        cursor: Option<String>,
    ) -> Result<Option<String>, TrackerError> {
        if !more {
            return Ok(None);
        }
        match cursor.filter(|c| !c.is_empty()) {
            Some(cursor) => Ok(Some(cursor)),
            None => Err(TrackerError::Invalid(format!(
                "{}: a page says more follow but gives no cursor to the next one; refusing \
                 to act on part of the board",
                self.what
            ))),
        }
    }

    /// `next`, when it is a link under `base` (the API base URL, no trailing `/`); else
    /// an error: following it would send the token to another host or path.
    pub fn follow(&self, next: String, base: &str) -> Result<String, TrackerError> {
        let base = base.trim_end_matches('/');
        let under = next
            .strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']));
        if under {
            Ok(next)
        } else {
            Err(TrackerError::Invalid(format!(
                "{}: the next page link {next} is not under the API base {base}; not followed, \
                 and the listing fails rather than act on part of the board",
                self.what
            )))
        }
    }
}

/// The `rel="next"` target of a `Link` header, if any.
pub fn next_link(header: &str) -> Option<String> {
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let target = &after[..close];
        let params_and_rest = &after[close + 1..];
        // The parameters run up to the next link (`, <`), or the end.
        let params_end = params_and_rest.find('<').unwrap_or(params_and_rest.len());
        let params = &params_and_rest[..params_end];
        let is_next = params.split(';').any(|p| {
            let p = p.trim().trim_end_matches(',').trim();
            p.strip_prefix("rel=").is_some_and(|v| {
                v.trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("next"))
            })
        });
        if is_next {
            return Some(target.to_string());
        }
        rest = &params_and_rest[params_end..];
    }
    None
}

/// The offset of the next page after `count` items from offset `start`, of `total`;
/// `None` when that was the last page (or an empty one).
pub fn next_offset(start: u64, count: u64, total: u64) -> Option<u64> {
    let next = start + count;
    (count > 0 && next < total).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagination_integrity_a_loop_the_cap_and_an_off_host_link_are_errors() {
        let mut walk = PageWalk::new("listing /issues", 2);
        walk.visit("https://api.example/issues?page=1").unwrap();
        let looped = walk.visit("https://api.example/issues?page=1").unwrap_err();
        assert!(looped.to_string().contains("read already"), "{looped}");
        walk.visit("https://api.example/issues?page=2").unwrap();
        let capped = walk.visit("https://api.example/issues?page=3").unwrap_err();
        assert!(capped.to_string().contains("more than 2 pages"), "{capped}");
        let base = "https://api.example/api/v4";
        assert!(walk.follow(format!("{base}/issues?page=2"), base).is_ok());
        for off in [
            "https://evil.example/api/v4/issues?page=2",
            "https://api.example/api/v4evil/issues",
            "https://api.example.evil/api/v4/issues",
            "/api/v4/issues?page=2",
        ] {
            let err = walk.follow(off.to_string(), base).unwrap_err();
            assert!(matches!(err, TrackerError::Invalid(_)), "{off}: {err}");
        }
    }

    #[test]
    fn next_link_finds_rel_next_anywhere_in_the_header() {
        let h = r#"<https://api.github.com/repositories/1/issues?labels=a%2Cb&page=1>; rel="prev", <https://api.github.com/repositories/1/issues?page=3>; rel="next", <https://api.github.com/repositories/1/issues?page=9>; rel="last""#;
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://api.github.com/repositories/1/issues?page=3")
        );
        assert_eq!(next_link(r#"<https://x/?page=9>; rel="last""#), None);
        assert_eq!(next_link(""), None);
        assert_eq!(
            next_link("<https://x/?a,b>; rel=next").as_deref(),
            Some("https://x/?a,b")
        );
    }

    #[test]
    fn offsets_stop_at_the_total_or_an_empty_page() {
        assert_eq!(next_offset(0, 100, 250), Some(100));
        assert_eq!(next_offset(200, 50, 250), None);
        assert_eq!(next_offset(0, 0, 250), None);
    }

    #[test]
    fn a_cursor_loop_and_a_missing_cursor_are_errors_and_the_last_page_ends_the_walk() {
        let mut walk = PageWalk::new("Jira search", 10);
        walk.visit("").unwrap();
        assert_eq!(walk.next_cursor(false, Some("b".into())).unwrap(), None);
        assert_eq!(walk.next_cursor(false, None).unwrap(), None);
        for missing in [None, Some(String::new())] {
            let err = walk.next_cursor(true, missing).unwrap_err();
            assert!(matches!(err, TrackerError::Invalid(_)), "{err}");
            assert!(
                err.to_string()
                    .contains("Jira search: a page says more follow but gives no cursor"),
                "{err}"
            );
        }
        let next = walk.next_cursor(true, Some("b".into())).unwrap().unwrap();
        walk.visit(&next).unwrap();
        let repeated = walk.next_cursor(true, Some("b".into())).unwrap().unwrap();
        let looped = walk.visit(&repeated).unwrap_err();
        assert!(looped.to_string().contains("pagination loop"), "{looped}");
    }
}

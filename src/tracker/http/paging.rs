//! Paging: where the next page of a listing is, by `Link` header, by offset, or by
//! cursor.

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

/// The cursor of the next page: `next`, unless the page says it is the last or the
/// cursor did not move (`current`), which would read the same page forever.
pub fn next_cursor(next: Option<String>, last: bool, current: Option<&String>) -> Option<String> {
    next.filter(|n| !last && Some(n) != current)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_cursor_that_does_not_move_ends_the_listing() {
        let a = "a".to_string();
        assert_eq!(
            next_cursor(Some("b".into()), false, Some(&a)),
            Some("b".into())
        );
        assert_eq!(next_cursor(Some("a".into()), false, Some(&a)), None);
        assert_eq!(next_cursor(Some("b".into()), true, Some(&a)), None);
        assert_eq!(next_cursor(None, false, None), None);
    }
}

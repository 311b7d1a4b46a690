//! URL pieces: percent-encoding, and the path of a URL for error messages.

/// Percent-encode one path segment or query value (`group/sub` -> `group%2Fsub`).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The path and query of a URL, for error messages (never the host or a token).
pub(crate) fn path_of(url: &str) -> &str {
    url.find("://")
        .and_then(|scheme| url[scheme + 3..].find('/').map(|p| &url[scheme + 3 + p..]))
        .unwrap_or(url)
}

/// A path or URL without its query.
pub(crate) fn strip_query(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("group/sub/repo"), "group%2Fsub%2Frepo");
        assert_eq!(encode("status::ready"), "status%3A%3Aready");
        assert_eq!(encode("a b"), "a%20b");
    }

    #[test]
    fn error_messages_name_the_path_and_never_the_host() {
        assert_eq!(
            path_of("https://ghe.example/api/v3/user?x=1"),
            "/api/v3/user?x=1"
        );
        assert_eq!(strip_query("/a/b?c=d"), "/a/b");
    }
}

//! Splitting an output stream that arrives in arbitrary chunks into lines, with a bound on
//! how much of one line is held in memory.

/// Longest event line kept for parsing (4 MiB); longer lines are skipped, not buffered.
pub const MAX_EVENT_LINE_BYTES: usize = 4 * 1024 * 1024;

/// One piece of output handed to the line consumer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// A complete line, without its `\n` (a trailing `\r` is left to the consumer).
    Line(&'a [u8]),
    /// A line longer than the bound; reported once, when it crosses the bound.
    Overlong,
}

/// Reassembles lines across chunk boundaries. Holds at most `max` bytes of one line.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
    /// Inside a line that crossed the bound: drop bytes until its end.
    skipping: bool,
}

impl LineSplitter {
    /// A splitter that keeps lines of up to `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            max,
            skipping: false,
        }
    }

    /// Bytes of an unfinished line currently held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.buf.len()
    }

    /// Feed the next chunk; `sink` receives every line it completes, in order.
    pub(crate) fn push(&mut self, mut chunk: &[u8], sink: &mut impl FnMut(Piece<'_>)) {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&chunk[..end], &chunk[end + 1..]);
            chunk = rest;
            if self.skipping {
                self.skipping = false;
            } else if self.buf.len() + head.len() > self.max {
                self.release();
                sink(Piece::Overlong);
            } else if self.buf.is_empty() {
                sink(Piece::Line(head));
            } else {
                self.buf.extend_from_slice(head);
                sink(Piece::Line(&self.buf));
                self.buf.clear();
            }
        }
        if self.skipping || chunk.is_empty() {
            return;
        }
        if self.buf.len() + chunk.len() > self.max {
            self.release();
            self.skipping = true;
            sink(Piece::Overlong);
        } else {
            self.buf.extend_from_slice(chunk);
        }
    }

    /// The stream ended: a last line without `\n` still counts.
    pub(crate) fn finish(&mut self, sink: &mut impl FnMut(Piece<'_>)) {
        if !self.skipping && !self.buf.is_empty() {
            sink(Piece::Line(&self.buf));
        }
        self.release();
        self.skipping = false;
    }

    /// Drop the held bytes and their allocation (it may be near `max`).
    fn release(&mut self) {
        self.buf = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]], max: usize) -> Vec<String> {
        let mut splitter = LineSplitter::new(max);
        let mut out = Vec::new();
        let mut sink = |p: Piece<'_>| {
            out.push(match p {
                Piece::Line(l) => String::from_utf8_lossy(l).into_owned(),
                Piece::Overlong => "<overlong>".to_string(),
            })
        };
        for chunk in chunks {
            splitter.push(chunk, &mut sink);
        }
        splitter.finish(&mut sink);
        out
    }

    #[test]
    fn lines_are_reassembled_across_chunks() {
        assert_eq!(
            split(&[b"{\"a\":", b"1}\n{\"b\"", b":2}\n", b"tail"], 100),
            ["{\"a\":1}", "{\"b\":2}", "tail"]
        );
        assert_eq!(split(&[b"a\n\nb\n"], 100), ["a", "", "b"]);
        assert_eq!(split(&[b"\n", b"\n"], 100), ["", ""]);
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_once_and_the_next_line_survives() {
        let long = vec![b'x'; 25];
        assert_eq!(
            split(&[b"ok\nxx", &long, &long, b"x\nnext\n"], 10),
            ["ok", "<overlong>", "next"]
        );
        // Exactly at the bound is kept; one byte more is not.
        assert_eq!(
            split(&[b"0123456789\n01234567890\n"], 10),
            ["0123456789", "<overlong>"]
        );
        assert_eq!(split(&[b"01234", b"567890\nz"], 10), ["<overlong>", "z"]);
        // An overlong last line without a newline is not reported as a line.
        assert_eq!(split(&[b"a\n", &long], 10), ["a", "<overlong>"]);
    }

    #[test]
    fn memory_stays_bounded_for_a_giant_line() {
        let mut splitter = LineSplitter::new(1024);
        let chunk = vec![b'y'; 8192];
        let mut lines = 0;
        let mut overlong = 0;
        let mut sink = |p: Piece<'_>| match p {
            Piece::Line(_) => lines += 1,
            Piece::Overlong => overlong += 1,
        };
        for _ in 0..1000 {
            splitter.push(&chunk, &mut sink);
            assert!(splitter.held() <= 1024, "held {}", splitter.held());
        }
        splitter.push(b"\n{}\n", &mut sink);
        splitter.finish(&mut sink);
        assert_eq!((lines, overlong), (1, 1));
    }
}

//! Source positions of config fields: maps a field path such as
//! `pipeline_stages[1].success_status` to the line and column where it is written.
//!
//! serde_yaml 0.9 keeps no spans on its `Value`, so the text is walked a second
//! time with yaml-rust2's event parser, whose events carry a `Marker`. The walk
//! never expands aliases (an alias is one event), so it is linear in the input.

use std::collections::{HashMap, HashSet};
use std::fmt;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// One step of a field path: a mapping key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Segment {
    /// A mapping key.
    Key(String),
    /// A sequence index (0-based).
    Index(usize),
}

/// The path of a value inside the config document; empty for the document itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct FieldPath(pub(crate) Vec<Segment>);

impl FieldPath {
    /// The document root.
    pub(crate) fn root() -> Self {
        FieldPath(Vec::new())
    }

    /// This path extended by a mapping key.
    pub(crate) fn key(&self, key: &str) -> Self {
        let mut out = self.clone();
        out.0.push(Segment::Key(key.to_string()));
        out
    }

    /// This path extended by a sequence index.
    pub(crate) fn index(&self, index: usize) -> Self {
        let mut out = self.clone();
        out.0.push(Segment::Index(index));
        out
    }

    /// The path one level up (the root stays the root).
    fn parent(&self) -> Self {
        let mut out = self.clone();
        out.0.pop();
        out
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Key(k) if i == 0 => write!(f, "{k}")?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// Line, from 1.
    pub(crate) line: usize,
    /// Column in characters, from 1.
    pub(crate) column: usize,
}

impl Position {
    /// The start of the file, used when nothing better is known.
    pub(crate) const START: Position = Position { line: 1, column: 1 };

    fn from_marker(m: Marker) -> Self {
        // yaml-rust2 0.11 reports 1-based lines but 0-based columns.
        Position {
            line: m.line().max(1),
            column: m.col() + 1,
        }
    }
}

/// Where one node is written.
#[derive(Debug, Clone, Copy)]
struct NodeSpan {
    /// The mapping key naming this node, when the node is a mapping value.
    key: Option<Position>,
    /// The node itself (scalar text, `-`/`[` of a sequence, first key of a mapping).
    node: Position,
    /// Character index of `node`, to pick the earliest marker of a block mapping.
    node_index: usize,
    /// How a scalar was written (`None` for collections and aliases).
    style: Option<TScalarStyle>,
}

/// Field path -> position index of one YAML document.
#[derive(Debug, Default)]
pub(crate) struct Locator {
    spans: HashMap<FieldPath, NodeSpan>,
    /// Keys that appear twice in the same mapping: (path of the second one, its position).
    duplicates: Vec<(FieldPath, Position)>,
}

/// Collections nested deeper than this are refused: no config needs it, and libyaml's
/// scanner (under serde_yaml) slows down quadratically on deeply nested flow collections.
pub(crate) const MAX_NESTING: usize = 64;

/// Why a text could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LocateError {
    /// Collections nest deeper than `MAX_NESTING` (or the parser's own limit) at this position.
    TooDeep(Position),
    /// yaml-rust2 found a syntax error (serde_yaml words its own message for it).
    Syntax,
}

impl Locator {
    /// Index the first document of `text`. Linear in the text: aliases are not expanded and
    /// the walk stops as soon as nesting exceeds `MAX_NESTING`.
    pub(crate) fn index(text: &str) -> Result<Self, LocateError> {
        let mut walk = Walk::default();
        let mut parser = Parser::new_from_str(text);
        loop {
            let (ev, mark) = match parser.next_token() {
                Ok(next) => next,
                Err(err) if err.info().contains("recursion limit") => {
                    return Err(LocateError::TooDeep(Position::from_marker(*err.marker())));
                }
                Err(_) => return Err(LocateError::Syntax),
            };
            if matches!(ev, Event::StreamEnd | Event::DocumentEnd) {
                break;
            }
            walk.on_event(ev, mark);
            if walk.stack.len() > MAX_NESTING {
                return Err(LocateError::TooDeep(Position::from_marker(mark)));
            }
        }
        Ok(Locator {
            spans: walk.spans,
            duplicates: walk.duplicates,
        })
    }

    /// Position of the value at `path` (or of its nearest written ancestor).
    pub(crate) fn value(&self, path: &FieldPath) -> Position {
        self.nearest(path).map_or(Position::START, |s| s.node)
    }

    /// Position of the key naming `path` when it is a mapping entry, else of its value.
    pub(crate) fn key(&self, path: &FieldPath) -> Position {
        self.nearest(path)
            .map_or(Position::START, |s| s.key.unwrap_or(s.node))
    }

    /// Whether the scalar at `path` was written plain (unquoted, not a block scalar).
    pub(crate) fn is_plain(&self, path: &FieldPath) -> bool {
        self.spans.get(path).and_then(|s| s.style) == Some(TScalarStyle::Plain)
    }

    /// The first key written twice in one mapping, if any.
    pub(crate) fn first_duplicate(&self) -> Option<&(FieldPath, Position)> {
        self.duplicates.first()
    }

    fn nearest(&self, path: &FieldPath) -> Option<&NodeSpan> {
        let mut p = path.clone();
        loop {
            if let Some(span) = self.spans.get(&p) {
                return Some(span);
            }
            if p.0.is_empty() {
                return None;
            }
            p = p.parent();
        }
    }
}

/// Paths deeper than this are not indexed: no config field lives deeper, and a lookup of a
/// deeper path falls back to its nearest indexed ancestor. Keeps the index small.
const MAX_INDEXED_DEPTH: usize = 6;

/// An open collection during the walk.
enum Frame {
    Map {
        /// The key just read, waiting for its value.
        pending: Option<(String, Position)>,
        /// Whether the next node is a key.
        expect_key: bool,
        seen: HashSet<String>,
    },
    Seq {
        next: usize,
    },
}

/// Event receiver building the index.
#[derive(Default)]
struct Walk {
    stack: Vec<Frame>,
    /// Path of the innermost open collection (one segment per frame, the root has none).
    path: Vec<Segment>,
    spans: HashMap<FieldPath, NodeSpan>,
    duplicates: Vec<(FieldPath, Position)>,
}

/// What `begin_node` found the node to be.
enum NodeRole {
    /// A scalar mapping key (recorded as the `key` position of the value that follows).
    Key,
    /// A value at the path extended by this segment (`None` for the root).
    Value(Option<Segment>),
}

impl Walk {
    fn indexed(&self, extra: usize) -> bool {
        self.path.len() + extra <= MAX_INDEXED_DEPTH
    }

    fn path_with(&self, seg: Option<&Segment>) -> FieldPath {
        let mut p = FieldPath(self.path.clone());
        p.0.extend(seg.cloned());
        p
    }

    /// Called at the start of every node: classify it and index its position.
    fn begin_node(
        &mut self,
        mark: Marker,
        style: Option<TScalarStyle>,
        text: Option<&str>,
    ) -> NodeRole {
        let pos = Position::from_marker(mark);
        let (seg, key) = match self.stack.last_mut() {
            None => (None, None),
            Some(Frame::Seq { next }) => {
                *next += 1;
                (Some(Segment::Index(*next - 1)), None)
            }
            Some(Frame::Map {
                pending,
                expect_key,
                seen,
            }) if *expect_key => {
                *expect_key = false;
                let name = text.unwrap_or("?").to_string();
                let duplicate = text.is_some() && !seen.insert(name.clone());
                *pending = Some((name.clone(), pos));
                if duplicate && self.duplicates.is_empty() {
                    let at = self.path_with(Some(&Segment::Key(name)));
                    self.duplicates.push((at, pos));
                }
                // A block mapping's start marker lies after its first key: the key fixes it.
                if self.indexed(0) {
                    let here = FieldPath(self.path.clone());
                    if let Some(span) = self.spans.get_mut(&here) {
                        if span.node_index > mark.index() {
                            span.node = pos;
                            span.node_index = mark.index();
                        }
                    }
                }
                return match text {
                    Some(_) => NodeRole::Key,
                    // A collection or alias used as a key: walked, never indexed.
                    None => NodeRole::Value(Some(Segment::Key("\u{0}complex-key".to_string()))),
                };
            }
            Some(Frame::Map { pending, .. }) => {
                let (name, key_pos) = pending.take().unwrap_or_else(|| ("?".to_string(), pos));
                (Some(Segment::Key(name)), Some(key_pos))
            }
        };
        if self.indexed(usize::from(seg.is_some())) {
            let span = NodeSpan {
                key,
                node: pos,
                node_index: mark.index(),
                style,
            };
            self.spans.insert(self.path_with(seg.as_ref()), span);
        }
        NodeRole::Value(seg)
    }

    /// Called when a node is complete: the enclosing mapping now expects a key again.
    fn end_node(&mut self) {
        if let Some(Frame::Map {
            expect_key,
            pending,
            ..
        }) = self.stack.last_mut()
        {
            if pending.is_none() {
                *expect_key = true;
            }
        }
    }

    fn open(&mut self, role: NodeRole, frame: Frame) {
        // A collection used as a key gets a placeholder segment so `path` stays one per frame.
        let seg = match role {
            NodeRole::Value(seg) => seg,
            NodeRole::Key => Some(Segment::Key("?".to_string())),
        };
        if !self.stack.is_empty() {
            self.path.push(seg.unwrap_or(Segment::Key("?".to_string())));
        }
        self.stack.push(frame);
    }
}

impl MarkedEventReceiver for Walk {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(text, style, ..) => {
                if let NodeRole::Value(_) = self.begin_node(mark, Some(style), Some(&text)) {
                    self.end_node();
                }
            }
            Event::Alias(_) => {
                self.begin_node(mark, None, None);
                self.end_node();
            }
            Event::SequenceStart(..) => {
                let role = self.begin_node(mark, None, None);
                self.open(role, Frame::Seq { next: 0 });
            }
            Event::MappingStart(..) => {
                let role = self.begin_node(mark, None, None);
                self.open(
                    role,
                    Frame::Map {
                        pending: None,
                        expect_key: true,
                        seen: HashSet::new(),
                    },
                );
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if self.stack.pop().is_some() && !self.stack.is_empty() {
                    self.path.pop();
                }
                self.end_node();
            }
            _ => {}
        }
    }
}

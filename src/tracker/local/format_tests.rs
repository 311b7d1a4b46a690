use std::cmp::Ordering;

use chrono::TimeZone;
use proptest::prelude::*;

use super::*;

fn front(text: &str) -> Result<TicketFront, FormatError> {
    parse_ticket_front(&split_front_matter(text)?)
}

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

const EXAMPLE: &str = "---\ntitle: Add login page\nstatus: ready-for-design\npriority: 2\n\
labels: [flaky]\ncreated_at: 2026-11-30T10:00:00Z\nupdated_at: 2026-11-30T10:00:00Z\n---\n\
Body in Markdown.\n";

#[test]
fn ids_that_could_name_another_path_are_refused() {
    for good in ["1", "42", "PROJ-7", "a.b_c-d", &"x".repeat(64)] {
        assert!(is_valid_id(good), "{good:?} should be valid");
    }
    for bad in [
        "",
        ".",
        "..",
        ".hidden",
        "-x",
        "_x",
        "a/b",
        "../1",
        "a\\b",
        "a\nb",
        "a b",
        "ü",
        "1\0",
        &"x".repeat(65),
    ] {
        assert!(!is_valid_id(bad), "{bad:?} should be invalid");
    }
}

#[test]
fn ids_sort_numerically_then_by_text() {
    let mut ids = vec!["10", "a", "9", "1a", "2", "02", "B"];
    ids.sort_by(|a, b| compare_ids(a, b));
    assert_eq!(ids, ["02", "2", "9", "10", "1a", "B", "a"]);
}

proptest! {
    #[test]
    fn id_order_is_a_total_order(a in "[0-9a-c]{1,3}", b in "[0-9a-c]{1,3}", c in "[0-9a-c]{1,3}") {
        prop_assert_eq!(compare_ids(&a, &b), compare_ids(&b, &a).reverse());
        if compare_ids(&a, &b) != Ordering::Greater && compare_ids(&b, &c) != Ordering::Greater {
            prop_assert_ne!(compare_ids(&a, &c), Ordering::Greater);
        }
        prop_assert_eq!(compare_ids(&a, &b) == Ordering::Equal, a == b);
    }

    #[test]
    fn rendered_times_parse_back(secs in 0i64..4_000_000_000) {
        let t = Utc.timestamp_opt(secs, 0).unwrap();
        prop_assert_eq!(parse_time(&crate::tracker::local::render::render_time(t)), Some(t));
    }
}

#[test]
fn the_documented_example_parses() {
    let t = front(EXAMPLE).unwrap();
    assert_eq!(t.title, "Add login page");
    assert_eq!(t.status, "ready-for-design");
    assert_eq!(t.priority, Some(2));
    assert_eq!(t.labels, ["flaky"]);
    assert_eq!(t.created_at, Some(at(2026, 11, 30, 10, 0, 0)));
    assert_eq!(t.updated_at, Some(at(2026, 11, 30, 10, 0, 0)));
    assert!(t.notes.is_empty());
    assert_eq!(
        split_front_matter(EXAMPLE).unwrap().body,
        "Body in Markdown.\n"
    );
}

#[test]
fn body_is_everything_after_the_closing_line_byte_for_byte() {
    let text = "---\r\ntitle: T\r\nstatus: s\r\n---\r\n\r\n  body\r\n---\r\nmore";
    assert_eq!(
        split_front_matter(text).unwrap().body,
        "\r\n  body\r\n---\r\nmore"
    );
    assert_eq!(split_front_matter("---\ntitle: T\n---").unwrap().body, "");
    assert_eq!(
        split_front_matter("---\ntitle: T\n...\nb").unwrap().body,
        "b"
    );
    let bom = "\u{feff}---\ntitle: T\nstatus: s\n---\nb";
    assert_eq!(front(bom).unwrap().title, "T");
}

#[test]
fn files_without_a_closed_front_matter_are_refused() {
    assert_eq!(
        split_front_matter("title: T\n"),
        Err(FormatError::NoFrontMatter)
    );
    assert_eq!(split_front_matter(""), Err(FormatError::NoFrontMatter));
    assert_eq!(
        split_front_matter("---"),
        Err(FormatError::UnclosedFrontMatter)
    );
    assert_eq!(
        split_front_matter("---\ntitle: T\nstatus: s\n"),
        Err(FormatError::UnclosedFrontMatter)
    );
    assert!(!has_closed_front_matter(b"---\ntitle: T\n"));
    assert!(has_closed_front_matter(b"---\ntitle: T\n---\n\xff\xfe"));
}

#[test]
fn hand_written_values_are_read_leniently() {
    let t = front(
        "---\ntitle: 42\nstatus: ' todo '\npriority: \"2\"\nlabels: ui\n\
                   created_at: 2026-11-30\nupdated_at: 2026-11-30 10:30\n---\n",
    )
    .unwrap();
    assert_eq!(t.title, "42");
    assert_eq!(t.status, "todo");
    assert_eq!(t.priority, Some(2));
    assert_eq!(t.labels, ["ui"]);
    assert_eq!(t.created_at, Some(at(2026, 11, 30, 0, 0, 0)));
    assert_eq!(t.updated_at, Some(at(2026, 11, 30, 10, 30, 0)));
    assert!(t.notes.is_empty(), "{:?}", t.notes);
    let t =
        front("---\ntitle: T\nstatus: s\ncreated_at: 2026-11-30T11:00:00+01:00\n---\n").unwrap();
    assert_eq!(t.created_at, Some(at(2026, 11, 30, 10, 0, 0)));
}

#[test]
fn unusable_optional_fields_are_noted_but_keep_the_ticket() {
    let t =
        front("---\ntitle: T\nstatus: s\npriority: high\nlabels: {a: 1}\ncreated_at: soon\n---\n")
            .unwrap();
    assert_eq!(t.priority, None);
    assert!(t.labels.is_empty());
    assert_eq!(t.created_at, None);
    assert_eq!(t.notes.len(), 3, "{:?}", t.notes);
    assert!(
        t.notes[0].contains("`priority` is not an integer (high)"),
        "{:?}",
        t.notes
    );
    assert!(t.notes[2].contains("`created_at`"), "{:?}", t.notes);
}

#[test]
fn unknown_keys_are_ignored_and_missing_timestamps_are_not_noted() {
    let t = front("---\ntitle: T\nstatus: s\nassignee: bob\nestimate: [1, 2]\n---\n").unwrap();
    assert_eq!(t.assignees, ["bob"]);
    assert_eq!((t.created_at, t.updated_at), (None, None));
    assert!(t.notes.is_empty());
}

#[test]
fn title_and_status_are_required() {
    assert_eq!(
        front("---\nstatus: s\n---\n"),
        Err(FormatError::Missing("title"))
    );
    assert_eq!(front("---\n---\n"), Err(FormatError::Missing("title")));
    assert_eq!(
        front("---\ntitle: T\n---\n"),
        Err(FormatError::Missing("status"))
    );
    assert_eq!(
        front("---\ntitle: T\nstatus: ''\n---\n"),
        Err(FormatError::Missing("status"))
    );
    let err = front("---\ntitle: T\nstatus: 3\n---\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "field `status`: expected text, found a number"
    );
    let err = front("---\ntitle: T\nstatus: [a]\n---\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "field `status`: expected text, found a list"
    );
}

#[test]
fn yaml_errors_name_the_line_of_the_file() {
    let err = front("---\ntitle: T\nstatus: [todo\n---\nbody\n").unwrap_err();
    let FormatError::Yaml(msg) = err else {
        panic!("expected a YAML error, got {err:?}")
    };
    assert!(msg.contains("line 4"), "{msg}");
    let err = front("---\ntitle: T\n  status: x\n---\n").unwrap_err();
    assert!(
        matches!(&err, FormatError::Yaml(m) if m.contains("line 3")),
        "{err}"
    );
}

#[test]
fn quick_status_reads_only_simple_status_lines() {
    assert_eq!(
        quick_status("title: T\nstatus: ready-for-dev\n"),
        Some("ready-for-dev")
    );
    assert_eq!(quick_status("status: todo   \r\n"), Some("todo"));
    assert_eq!(quick_status("status: \"todo\"\n"), None);
    assert_eq!(quick_status("status: todo # moved\n"), None);
    assert_eq!(quick_status("status: todo\nstatus: done\n"), None);
    assert_eq!(quick_status("status: null\n"), None);
    assert_eq!(quick_status("title: T\n"), None);
    assert_eq!(
        quick_status("meta:\n  status: done\nstatus: todo\n"),
        Some("todo")
    );
    assert_eq!(quick_status("? status\n: done\n"), None);
}

#[test]
fn comments_need_an_author() {
    let c = parse_comment_front(
        &split_front_matter("---\nauthor: alice\ncreated_at: 2026-11-30T10:00:00Z\n---\nhi\n")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(c.author, "alice");
    assert_eq!(c.created_at, Some(at(2026, 11, 30, 10, 0, 0)));
    let err = parse_comment_front(&split_front_matter("---\ncreated_at: x\n---\n").unwrap());
    assert_eq!(err, Err(FormatError::Missing("author")));
}

use chrono::TimeZone;
use proptest::prelude::*;

use super::*;
use crate::tracker::local::format::{parse_comment_front, parse_ticket_front};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
}

fn status_of(text: &str) -> String {
    parse_ticket_front(&split_front_matter(text).unwrap())
        .unwrap()
        .status
}

#[test]
fn a_new_ticket_looks_like_the_documented_example() {
    let labels = vec!["flaky".to_owned()];
    let text = render_ticket(&TicketFile {
        title: "Add login page",
        status: "ready-for-design",
        priority: Some(2),
        labels: &labels,
        created_at: t0(),
        updated_at: t0(),
        body: "Body in Markdown.\n",
    });
    assert_eq!(
        text,
        "---\ntitle: Add login page\nstatus: ready-for-design\npriority: 2\nlabels: [flaky]\n\
         created_at: 2026-11-30T10:00:00Z\nupdated_at: 2026-11-30T10:00:00Z\n---\nBody in Markdown.\n"
    );
}

#[test]
fn scalars_yaml_would_misread_are_quoted() {
    assert_eq!(yaml_scalar("todo"), "todo");
    assert_eq!(yaml_scalar("in review"), "in review");
    assert_eq!(yaml_scalar("yes"), "\"yes\"");
    assert_eq!(yaml_scalar("2"), "\"2\"");
    assert_eq!(yaml_scalar("Fix: crash"), "\"Fix: crash\"");
    assert_eq!(yaml_scalar("a, b"), "\"a, b\"");
    assert_eq!(yaml_scalar("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
    assert_eq!(yaml_scalar("\u{85}"), "\"\\u0085\"");
}

proptest! {
    #[test]
    fn any_text_round_trips_through_a_ticket_file(
        title in any::<String>().prop_filter("non-empty", |t| !t.trim().is_empty()),
        status in "[^\\p{Cc}]{1,20}".prop_filter("non-empty", |s| !s.trim().is_empty()),
        labels in proptest::collection::vec("[^\\p{Cc}]{1,12}", 0..4),
        body in any::<String>(),
    ) {
        let labels: Vec<String> = labels.into_iter().filter(|l| !l.trim().is_empty()).collect();
        let text = render_ticket(&TicketFile {
            title: &title, status: &status, priority: Some(-3), labels: &labels,
            created_at: t0(), updated_at: t0(), body: &body,
        });
        let split = split_front_matter(&text).unwrap();
        let front = parse_ticket_front(&split).unwrap();
        prop_assert_eq!(front.title, title);
        prop_assert_eq!(front.status, status.trim());
        let trimmed: Vec<String> = labels.iter().map(|l| l.trim().to_owned()).collect();
        prop_assert_eq!(front.labels, trimmed);
        prop_assert_eq!(front.priority, Some(-3));
        prop_assert_eq!(split.body, body.as_str());
    }

    #[test]
    fn editing_the_status_keeps_the_body_byte_for_byte(
        body in any::<String>(),
        extra in "[a-z]{1,8}: [a-z0-9 ]{0,12}",
    ) {
        let text = format!("---\ntitle: T\n{extra}\nstatus: todo\n---\n{body}");
        let edited = edit_front_matter(&text, &[("status", "doing".into())]).unwrap();
        prop_assert_eq!(edited, format!("---\ntitle: T\n{extra}\nstatus: doing\n---\n{body}"));
    }
}

#[test]
fn comment_files_round_trip() {
    let text = render_comment("sortie", t0(), "```yaml sortie:success\n```\n");
    let split = split_front_matter(&text).unwrap();
    let front = parse_comment_front(&split).unwrap();
    assert_eq!(front.author, "sortie");
    assert_eq!(front.created_at, Some(t0()));
    assert_eq!(split.body, "```yaml sortie:success\n```\n");
}

#[test]
fn an_edit_touches_only_the_changed_lines() {
    let text = "---\n# a person's note\ntitle: T\nstatus: todo   # drag me\nowner: bob\n\
                updated_at: 2020-01-01\n---\nbody\n";
    let edited = edit_front_matter(
        text,
        &[
            ("status", "doing".into()),
            ("updated_at", render_time(t0())),
        ],
    )
    .unwrap();
    assert_eq!(
        edited,
        "---\n# a person's note\ntitle: T\nstatus: doing # drag me\nowner: bob\n\
         updated_at: 2026-11-30T10:00:00Z\n---\nbody\n"
    );
}

#[test]
fn an_edit_keeps_crlf_and_adds_missing_keys_before_the_closing_line() {
    let text = "---\r\ntitle: T\r\nstatus: todo\r\n---\r\nbody\r\n";
    let edited = edit_front_matter(
        text,
        &[
            ("status", "doing".into()),
            ("created_at", render_time(t0())),
        ],
    )
    .unwrap();
    assert_eq!(
        edited,
        "---\r\ntitle: T\r\nstatus: doing\r\ncreated_at: 2026-11-30T10:00:00Z\r\n---\r\nbody\r\n"
    );
}

#[test]
fn an_edit_replaces_a_multi_line_status_whole() {
    let text = "---\ntitle: T\nstatus: >-\n  ready for\n  design\nowner: bob\n---\n";
    let edited = edit_front_matter(text, &[("status", "doing".into())]).unwrap();
    assert_eq!(edited, "---\ntitle: T\nstatus: doing\nowner: bob\n---\n");
    assert_eq!(status_of(text), "ready for design");
}

#[test]
fn an_edit_refuses_a_key_written_twice() {
    let text = "---\ntitle: T\nstatus: a\nstatus: b\n---\n";
    assert_eq!(edit_front_matter(text, &[("status", "c".into())]), None);
}

#[test]
fn a_full_rewrite_keeps_unknown_keys_and_the_body() {
    let text = "---\n{title: T, status: todo, owner: bob}\n---\n body \n";
    let rewritten = rewrite_front_matter(text, &[("status", "doing".into())]).unwrap();
    assert_eq!(status_of(&rewritten), "doing");
    assert!(rewritten.contains("owner: bob"), "{rewritten}");
    assert!(rewritten.ends_with("---\n body \n"), "{rewritten}");
}

#[test]
fn top_level_keys_are_found_by_line() {
    assert!(has_top_level_key("title: T\ncreated_at:\n", "created_at"));
    assert!(!has_top_level_key(
        "title: T\n  created_at: x\n",
        "created_at"
    ));
    assert!(!has_top_level_key("created_at_x: 1\n", "created_at"));
}

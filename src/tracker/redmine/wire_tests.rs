//! The JSON mapping, on answers copied from a Redmine 5.0 server.

use super::*;

const ISSUE: &str = r#"{"issue":{"id":12,"project":{"id":3,"name":"Demo"},
 "tracker":{"id":1,"name":"Bug"},
 "status":{"id":7,"name":"Ready for design","is_closed":false},
 "priority":{"id":4,"name":"Urgent"},"author":{"id":1,"name":"Redmine Admin"},
 "category":{"id":2,"name":"Backend"},
 "subject":"Export as CSV","description":null,"start_date":"2026-11-30",
 "created_on":"2026-11-30T11:20:11Z","updated_on":"2026-11-30T12:00:00Z","closed_on":null,
 "journals":[
  {"id":1,"user":{"id":1,"name":"Redmine Admin"},"notes":"first","created_on":"2026-11-30T11:21:00Z","private_notes":false,"details":[]},
  {"id":2,"user":{"id":5,"name":"Jane Doe"},"notes":"","created_on":"2026-11-30T11:22:00Z","private_notes":false,
   "details":[{"property":"attr","name":"status_id","old_value":"7","new_value":"8"}]},
  {"id":3,"user":{"id":5,"name":"Jane Doe"},"notes":null,"created_on":"2026-11-30T11:23:00Z","details":[]},
  {"id":4,"user":{"id":5,"name":"Jane Doe"},"notes":"  \n ","created_on":"2026-11-30T11:24:00Z","details":[]},
  {"id":5,"user":{"id":5,"name":"Jane Doe"},"notes":"looks good","created_on":"2026-11-30T11:25:00Z","details":[]}
 ]}}"#;

const STATUSES: &str = r#"{"issue_statuses":[{"id":1,"name":"New","is_closed":false},
 {"id":5,"name":"Closed","is_closed":true},{"id":7,"name":"Ready for design","is_closed":false}]}"#;

const PRIORITIES: &str = r#"{"issue_priorities":[{"id":1,"name":"Low","is_default":false,"active":true},
 {"id":2,"name":"Normal","is_default":true,"active":true},{"id":3,"name":"High","is_default":false,"active":true},
 {"id":4,"name":"Urgent","is_default":false,"active":true},{"id":5,"name":"Immediate","is_default":false,"active":true}]}"#;

fn catalogue() -> StatusCatalogue {
    StatusCatalogue::new(
        serde_json::from_str::<StatusList>(STATUSES)
            .unwrap()
            .issue_statuses,
    )
}

fn ranks() -> PriorityRanks {
    PriorityRanks::from_positions(
        &serde_json::from_str::<PriorityList>(PRIORITIES)
            .unwrap()
            .issue_priorities,
    )
}

fn issue() -> Issue {
    serde_json::from_str::<IssueEnvelope>(ISSUE).unwrap().issue
}

#[test]
fn an_issue_becomes_a_ticket_with_its_status_name_dates_link_and_labels() {
    let t = ticket(&issue(), "http://rm.example", &catalogue(), &ranks());
    assert_eq!(t.id, "12");
    assert_eq!(t.title, "Export as CSV");
    assert_eq!(t.body, "", "a null description is an empty body");
    assert_eq!(t.status, "Ready for design");
    assert!(!t.closed);
    assert_eq!(t.labels, vec!["Bug", "Backend"]);
    assert_eq!(t.created_at.to_rfc3339(), "2026-11-30T11:20:11+00:00");
    assert_eq!(t.updated_at.to_rfc3339(), "2026-11-30T12:00:00+00:00");
    assert_eq!(t.url.as_deref(), Some("http://rm.example/issues/12"));
}

#[test]
fn urgent_sorts_before_normal_and_low() {
    let r = ranks();
    let (immediate, urgent, normal, low) = (r.rank(5), r.rank(4), r.rank(2), r.rank(1));
    assert_eq!(immediate, Some(1));
    assert!(
        urgent < normal && normal < low,
        "{urgent:?} {normal:?} {low:?}"
    );
    assert_eq!(r.rank(99), None, "an unknown priority has no rank");
    assert_eq!(
        ticket(&issue(), "", &catalogue(), &r).priority,
        Some(2),
        "Urgent is the second most urgent of the five defaults"
    );
}

#[test]
fn a_closed_status_makes_a_closed_ticket_even_on_servers_that_omit_is_closed() {
    let mut i = issue();
    i.status = IssueStatusRef {
        id: 5,
        name: "Closed".into(),
        is_closed: None,
    };
    assert!(ticket(&i, "", &catalogue(), &ranks()).closed);
    i.status.is_closed = Some(true);
    assert!(ticket(&i, "", &StatusCatalogue::default(), &ranks()).closed);
}

#[test]
fn only_journals_with_a_note_are_comments_and_own_notes_carry_the_identity() {
    let c = comments(&issue().journals, 1, "Sortie Bot");
    let view: Vec<(&str, &str, &str)> = c
        .iter()
        .map(|c| (c.id.as_str(), c.author.as_str(), c.body.as_str()))
        .collect();
    assert_eq!(
        view,
        vec![
            ("1", "Sortie Bot", "first"),
            ("5", "Jane Doe", "looks good")
        ]
    );
}

#[test]
fn comments_come_oldest_first_whatever_order_the_server_sends() {
    let mut journals = issue().journals;
    journals.reverse();
    let ids: Vec<String> = comments(&journals, 1, "me")
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec!["1", "5"]);
}

#[test]
fn the_display_name_falls_back_to_the_login() {
    let mut me = CurrentUser {
        id: 1,
        login: "sortie".into(),
        firstname: "Sortie".into(),
        lastname: " Bot ".into(),
    };
    assert_eq!(me.display_name(), "Sortie Bot");
    me.firstname.clear();
    me.lastname.clear();
    assert_eq!(me.display_name(), "sortie");
}

#[test]
fn a_status_is_found_ignoring_case_as_every_adapter_compares_them() {
    // Issue #17: statuses compare with `same_name`.
    let statuses = catalogue();
    let found = statuses.resolve("ready FOR design ", "http://rm").unwrap();
    assert_eq!(found.name, "Ready for design");
}

#[test]
fn an_unknown_status_names_it_lists_the_others_and_points_to_tracker_check() {
    let err = catalogue()
        .resolve("Ready fo design", "http://rm")
        .unwrap_err();
    let TrackerError::Invalid(msg) = err else {
        panic!("{err:?}")
    };
    assert!(
        msg.contains(r#"no issue status "Ready fo design""#),
        "{msg}"
    );
    assert!(
        msg.contains(r#""New", "Closed", "Ready for design""#),
        "{msg}"
    );
    assert!(msg.contains("sortie tracker check"), "{msg}");
    assert_eq!(catalogue().resolve("Closed", "").unwrap().id, 5);
}

#[test]
fn http_statuses_map_onto_the_errors_the_pipeline_branches_on() {
    let e = |status, body| http_error(status, body, None, "PUT /issues/1.json", "RM_KEY");
    let TrackerError::Unauthorized(msg) = e(401, "") else {
        panic!()
    };
    assert!(msg.contains("$RM_KEY"), "{msg}");
    assert!(matches!(e(403, ""), TrackerError::Unauthorized(_)));
    assert!(matches!(e(404, ""), TrackerError::NotFound(_)));
    let TrackerError::Invalid(msg) = e(
        422,
        r#"{"errors":["Subject cannot be blank","Status is invalid"]}"#,
    ) else {
        panic!()
    };
    assert!(
        msg.contains("Subject cannot be blank; Status is invalid"),
        "{msg}"
    );
    let TrackerError::Invalid(msg) = e(422, r#"{"errors":[]}"#) else {
        panic!()
    };
    assert!(msg.contains("no reason given"), "{msg}");
    assert!(e(500, "<html>boom</html>").is_retryable());
    assert!(e(503, "").is_retryable());
    let limited = http_error(
        429,
        "",
        Some(std::time::Duration::from_secs(7)),
        "GET /x",
        "K",
    );
    assert!(matches!(
        limited,
        TrackerError::RateLimited { retry_after: Some(d) } if d.as_secs() == 7
    ));
}

#[test]
fn notes_compare_modulo_line_endings_and_trailing_blanks() {
    assert!(same_note("a\r\nb\r\n", "a\nb\n"));
    assert!(same_note("a\nb", "a\nb\n\n"));
    assert!(!same_note("a\nb", "a\nc"));
}

#[test]
fn a_page_keeps_its_issues_raw_so_one_bad_issue_does_not_sink_it() {
    let page: IssuePage = serde_json::from_str(
        r#"{"issues":[{"id":1,"subject":"no status"},{"id":2}],"total_count":2,"offset":0,"limit":100}"#,
    )
    .unwrap();
    assert_eq!(page.total_count, 2);
    assert!(serde_json::from_value::<Issue>(page.issues[0].clone()).is_err());
}

#[test]
fn labels_normalized_trimmed_blanks_dropped_case_duplicates_merged() {
    // Issue #39: a tracker and a category named alike read back as one label, trimmed.
    let mut v: serde_json::Value = serde_json::from_str(ISSUE).unwrap();
    v["issue"]["tracker"]["name"] = " Bug ".into();
    v["issue"]["category"]["name"] = "bug".into();
    let issue = serde_json::from_value::<IssueEnvelope>(v).unwrap().issue;
    let t = ticket(&issue, "http://rm.example", &catalogue(), &ranks());
    assert_eq!(t.labels, ["Bug"]);
}

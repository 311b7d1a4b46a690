//! The tracker contract (docs/trackers/contract.md) as one suite every adapter runs
//! (issue #17). An adapter joins with one fixture file: a type implementing [`Fixture`]
//! (build the adapter over some board, act on the board as a person would) and one
//! `contract_tests!(path::to::async_fixture_fn);` line, which expands into one test per
//! clause. This module needs nothing from the `it` binary, so the `services` binary
//! includes it too (real Redmine).
#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use sortie::block::{parse_blocks, render_comment, OutcomeBlock, SuccessBlock};
use sortie::tracker::{Tracker, TrackerError};

/// A failure the fixture makes the tracker answer with on its next request.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// 503: the tracker is down.
    Unavailable,
    /// 429 with `Retry-After: secs`.
    RateLimited { secs: u64 },
}

/// A cursor the tracker serves broken on every page of a listing (issue #52).
#[derive(Debug, Clone, Copy)]
pub enum BrokenCursor {
    /// The page says more follow and names its own cursor as the next one: a server
    /// repeating its page token.
    Repeated,
    /// The page says more follow and names no cursor.
    Missing,
}

/// One adapter over a board the test controls.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// The adapter under test.
    fn tracker(&self) -> Arc<dyn Tracker>;
    /// Three distinct open statuses the board has (created by the fixture if need be).
    fn statuses(&self) -> [String; 3];
    /// A person opens a ticket in `status`; its id.
    async fn open_ticket(&self, title: &str, status: &str) -> String;
    /// A person moves the ticket to `status`, whatever it is in.
    async fn move_to(&self, id: &str, status: &str);
    /// A person opens a ticket in `status` carrying `labels`, spelled as given as far as
    /// the tracker keeps them; its id. `None` only where labels are not free-form (a
    /// real Redmine: its tracker and category names, which an admin sets up).
    async fn open_labelled(&self, title: &str, status: &str, labels: &[&str]) -> Option<String>;
    /// The tracker serves the ticket's record malformed from now on (its creation time
    /// not a date). False only where no record can be malformed: the memory board holds
    /// typed tickets, a real Redmine serves what it validated.
    async fn corrupt(&self, id: &str) -> bool;
    /// A person closes the ticket. `None` when the tracker flags it closed
    /// (`Ticket::closed`); `Some(status)` when closing is moving it to a status the
    /// pipeline configures as terminal (the local board, Redmine without closed flags).
    async fn close(&self, id: &str) -> Option<String>;
    /// A person (not sortie) comments.
    async fn comment(&self, id: &str, body: &str);
    /// The name a person's comments carry.
    fn person(&self) -> String;
    /// Requests sent to the tracker so far, when the fixture can count them.
    fn requests(&self) -> Option<usize> {
        None
    }
    /// Writes (non-GET requests, or the tracker's own count) so far, when countable.
    fn writes(&self) -> Option<usize> {
        None
    }
    /// Make the next requests fail with `fault`; false when the fixture cannot.
    fn inject(&self, fault: Fault) -> bool {
        let _ = fault;
        false
    }
    /// Make every page of the tracker's listings carry `broken` from now on; false
    /// when its listings are not paged by cursor (links, offsets, a file).
    fn break_cursors(&self, broken: BrokenCursor) -> bool {
        let _ = broken;
        false
    }
    /// The adapter with credentials the tracker rejects, when it has credentials.
    fn unauthorized(&self) -> Option<Arc<dyn Tracker>> {
        None
    }
    /// An id no ticket has.
    fn missing_id(&self) -> String {
        "999999".to_string()
    }
}

/// One `#[tokio::test]` per clause of the contract, for the fixture `$make().await`.
#[macro_export]
macro_rules! contract_tests {
    ($make:path) => {
        $crate::contract_tests!(@each $make;
            an_empty_status_list_sends_no_request,
            a_listing_holds_the_requested_statuses_only,
            statuses_compare_ignoring_case,
            get_rereads_the_ticket,
            a_ticket_missing_from_a_listing_is_not_closed,
            a_closed_ticket_is_reported_closed,
            comments_come_back_in_order_with_their_authors,
            a_posted_block_comes_back_parsed_identically,
            a_transition_moves_the_ticket,
            a_transition_to_the_current_status_is_a_no_op,
            a_transition_from_elsewhere_is_a_conflict_and_writes_nothing,
            errors_are_typed,
            check_passes_on_a_board_with_every_status,
            labels_normalized_trimmed_blanks_dropped_case_duplicates_merged,
            malformed_record_get_is_an_error_and_a_listing_skips_it,
            a_cursor_loop_or_a_missing_cursor_fails_the_listing,
        );
    };
    (@each $make:path; $($clause:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $clause() {
                let fixture = $make().await;
                $crate::contract::$clause(&fixture).await;
            }
        )*
    };
}

/// `first` followed by `rest`: a status label and the other labels of a new issue.
pub fn labels_after<'a>(first: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    std::iter::once(first).chain(rest.iter().copied()).collect()
}

fn ids(listing: &sortie::tracker::Listing) -> Vec<String> {
    let mut ids: Vec<String> = listing.tickets.iter().map(|t| t.id.clone()).collect();
    ids.sort();
    ids
}

/// `list(&[])` answers an empty listing without a request.
pub async fn an_empty_status_list_sends_no_request(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    f.open_ticket("there", &a).await;
    let before = f.requests();
    let listing = f.tracker().list(&[]).await.expect("list");
    assert!(listing.tickets.is_empty(), "{:?}", listing.tickets);
    assert_eq!(f.requests(), before, "no request for no statuses");
}

/// A listing holds the tickets in the requested statuses, each with its status.
pub async fn a_listing_holds_the_requested_statuses_only(f: &dyn Fixture) {
    let [a, b, c] = f.statuses();
    let x = f.open_ticket("in a", &a).await;
    let y = f.open_ticket("in b", &b).await;
    let z = f.open_ticket("in c", &c).await;
    let t = f.tracker();
    let listing = t.list(std::slice::from_ref(&a)).await.expect("list a");
    assert_eq!(ids(&listing), std::slice::from_ref(&x));
    let listing = t.list(&[a.clone(), b.clone()]).await.expect("list a, b");
    let mut want = vec![x.clone(), y.clone()];
    want.sort();
    assert_eq!(ids(&listing), want);
    for ticket in &listing.tickets {
        let expected = if ticket.id == x { &a } else { &b };
        assert!(
            sortie::tracker::same_name(&ticket.status, expected),
            "{ticket:?}"
        );
        assert!(!ticket.closed);
    }
    assert!(!ids(&listing).contains(&z));
}

/// Statuses compare ignoring case and surrounding spaces: a listing asked for ` a `
/// finds tickets in `a`; a ticket a person put in `A` is in status `a` for `get` and
/// `transition`. (A server-side filter is sent as configured, trimmed: whether the
/// tracker matches it ignoring case is the tracker's; see contract.md.)
pub async fn statuses_compare_ignoring_case(f: &dyn Fixture) {
    let [a, b, _] = f.statuses();
    let x = f.open_ticket("case", &a).await;
    let t = f.tracker();
    let padded = format!(" {a} ");
    let listing = t.list(std::slice::from_ref(&padded)).await.expect("list");
    assert_eq!(
        ids(&listing),
        std::slice::from_ref(&x),
        "listed by {padded:?}"
    );
    f.move_to(&x, &a.to_uppercase()).await;
    let ticket = t.get(&x).await.expect("get");
    assert!(sortie::tracker::same_name(&ticket.status, &a), "{ticket:?}");
    t.transition(&x, &a, &b)
        .await
        .expect("transition from the other case");
    let ticket = t.get(&x).await.unwrap();
    assert!(sortie::tracker::same_name(&ticket.status, &b), "{ticket:?}");
    let before = f.writes();
    t.transition(&x, &a, &b.to_uppercase())
        .await
        .expect("already there, by another case");
    assert_eq!(f.writes(), before, "nothing written");
}

/// `get` re-reads: a person's move shows at once.
pub async fn get_rereads_the_ticket(f: &dyn Fixture) {
    let [a, b, _] = f.statuses();
    let x = f.open_ticket("moved", &a).await;
    let t = f.tracker();
    let first = t.get(&x).await.expect("get");
    assert_eq!(first.title, "moved");
    assert!(sortie::tracker::same_name(&first.status, &a));
    f.move_to(&x, &b).await;
    let again = t.get(&x).await.expect("get again");
    assert!(sortie::tracker::same_name(&again.status, &b), "{again:?}");
}

/// A ticket moved out of the listed statuses leaves the listing but is not closed.
pub async fn a_ticket_missing_from_a_listing_is_not_closed(f: &dyn Fixture) {
    let [a, _, c] = f.statuses();
    let x = f.open_ticket("elsewhere", &a).await;
    f.move_to(&x, &c).await;
    let t = f.tracker();
    let listing = t.list(std::slice::from_ref(&a)).await.expect("list");
    assert!(!ids(&listing).contains(&x));
    let ticket = t.get(&x).await.expect("still readable");
    assert!(
        !ticket.closed,
        "absent from a listing is not closed: {ticket:?}"
    );
}

/// A ticket a person closed reads as closed (or in the terminal status closing means).
pub async fn a_closed_ticket_is_reported_closed(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    let x = f.open_ticket("closed", &a).await;
    let status = f.close(&x).await;
    let ticket = f.tracker().get(&x).await.expect("get");
    match status {
        None => assert!(ticket.closed, "{ticket:?}"),
        Some(s) => assert!(sortie::tracker::same_name(&ticket.status, &s), "{ticket:?}"),
    }
}

/// Comments come back oldest first, each with its author; sortie's carry `identity()`.
pub async fn comments_come_back_in_order_with_their_authors(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    let x = f.open_ticket("talk", &a).await;
    let t = f.tracker();
    let me = t.identity().await.expect("identity");
    f.comment(&x, "first, from a person").await;
    let posted = t
        .post_comment(&x, "second, from sortie", "k1")
        .await
        .expect("post");
    assert_eq!(posted.author, me);
    f.comment(&x, "third, from a person").await;
    let got: Vec<(String, String)> = t
        .comments(&x)
        .await
        .expect("comments")
        .into_iter()
        .map(|c| (c.author, c.body.trim_end().to_string()))
        .collect();
    let person = f.person();
    assert_eq!(
        got,
        [
            (person.clone(), "first, from a person".to_string()),
            (me, "second, from sortie".to_string()),
            (person, "third, from a person".to_string()),
        ]
    );
}

/// An outcome block posted comes back parsed identically.
pub async fn a_posted_block_comes_back_parsed_identically(f: &dyn Fixture) {
    let [a, b, _] = f.statuses();
    let x = f.open_ticket("block", &a).await;
    let block = OutcomeBlock::Success(SuccessBlock {
        role: "architect".into(),
        stage_attempt: 2,
        idempotency_key: "ab".repeat(32),
        from_status: a.clone(),
        to_status: b.clone(),
        summary: "Designed it.\nKeys: `a: b`, \"quotes\", é, <html> & ```fences```".into(),
        run_id: Some("run-1".into()),
        duration_seconds: Some(12.5),
        artifacts: [("branch".to_string(), "feature/x".to_string())].into(),
        evidence: None,
        extra: Default::default(),
    });
    let body = render_comment("Done; see below.", &block);
    let t = f.tracker();
    t.post_comment(&x, &body, &"ab".repeat(32))
        .await
        .expect("post");
    let comments = t.comments(&x).await.expect("comments");
    let found: Vec<OutcomeBlock> = comments
        .iter()
        .flat_map(|c| parse_blocks(&c.body))
        .map(|p| p.expect("parses").block)
        .collect();
    assert_eq!(found, [block]);
}

/// A transition moves the ticket from `from` to `to`.
pub async fn a_transition_moves_the_ticket(f: &dyn Fixture) {
    let [a, b, _] = f.statuses();
    let x = f.open_ticket("go", &a).await;
    let t = f.tracker();
    t.transition(&x, &a, &b).await.expect("transition");
    let ticket = t.get(&x).await.unwrap();
    assert!(sortie::tracker::same_name(&ticket.status, &b), "{ticket:?}");
    let listing = t.list(std::slice::from_ref(&b)).await.unwrap();
    assert_eq!(ids(&listing), [x]);
}

/// A transition to the status the ticket has is a no-op: nothing is written.
pub async fn a_transition_to_the_current_status_is_a_no_op(f: &dyn Fixture) {
    let [a, b, _] = f.statuses();
    let x = f.open_ticket("there already", &a).await;
    f.move_to(&x, &b).await;
    let t = f.tracker();
    let before = f.writes();
    t.transition(&x, &a, &b).await.expect("no-op");
    assert_eq!(f.writes(), before, "nothing written");
    assert!(sortie::tracker::same_name(
        &t.get(&x).await.unwrap().status,
        &b
    ));
}

/// A transition from a status the ticket left is a conflict naming where it is.
pub async fn a_transition_from_elsewhere_is_a_conflict_and_writes_nothing(f: &dyn Fixture) {
    let [a, b, c] = f.statuses();
    let x = f.open_ticket("moved by a person", &a).await;
    f.move_to(&x, &c).await;
    let t = f.tracker();
    let before = f.writes();
    match t.transition(&x, &a, &b).await {
        Err(TrackerError::Conflict { current, .. }) => {
            assert!(sortie::tracker::same_name(&current, &c), "{current:?}")
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(f.writes(), before, "nothing written");
    assert!(sortie::tracker::same_name(
        &t.get(&x).await.unwrap().status,
        &c
    ));
}

/// Failures are typed: not found, unauthorized, rate limited with a time, unavailable.
pub async fn errors_are_typed(f: &dyn Fixture) {
    let t = f.tracker();
    match t.get(&f.missing_id()).await {
        Err(TrackerError::NotFound(_)) => {}
        other => panic!("a missing ticket: expected NotFound, got {other:?}"),
    }
    if let Some(bad) = f.unauthorized() {
        let [a, ..] = f.statuses();
        match bad.list(&[a]).await {
            Err(TrackerError::Unauthorized(_)) => {}
            other => panic!("rejected credentials: expected Unauthorized, got {other:?}"),
        }
    }
    let [a, ..] = f.statuses();
    let x = f.open_ticket("faults", &a).await;
    if f.inject(Fault::Unavailable) {
        match t.get(&x).await {
            Err(e @ TrackerError::Unavailable(_)) => assert!(e.is_retryable()),
            other => panic!("a 503: expected Unavailable, got {other:?}"),
        }
    }
    if f.inject(Fault::RateLimited { secs: 7 }) {
        match t.get(&x).await {
            Err(TrackerError::RateLimited {
                retry_after: Some(d),
            }) => assert_eq!(d.as_secs(), 7),
            other => panic!("a 429: expected RateLimited after 7 s, got {other:?}"),
        }
    }
}

/// `check` passes on a board that has every status.
pub async fn check_passes_on_a_board_with_every_status(f: &dyn Fixture) {
    let statuses = f.statuses().to_vec();
    let report = f
        .tracker()
        .check(&statuses, false)
        .await
        .expect("check runs");
    assert!(report.all_ok(), "{:#?}", report.checks);
}

/// Labels read back normalized by one rule for every adapter (issue #39, item 8):
/// trimmed, blanks dropped, names differing only by case kept once in their first
/// spelling (case is kept, not lowered), by `get` and by a listing alike.
pub async fn labels_normalized_trimmed_blanks_dropped_case_duplicates_merged(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    let Some(x) = f
        .open_labelled("labels", &a, &[" Bug ", "bug", "", "Agent-OK"])
        .await
    else {
        // A real Redmine: its labels (tracker, category) are not free-form; the rule
        // is unit-tested on its wire format.
        return;
    };
    let t = f.tracker();
    let got = t.get(&x).await.expect("get").labels;
    let listing = t.list(std::slice::from_ref(&a)).await.expect("list");
    let listed = listing
        .tickets
        .iter()
        .find(|t| t.id == x)
        .expect("listed")
        .labels
        .clone();
    for mut labels in [got, listed] {
        // Order is the tracker's (Linear sorts them): compare the set.
        labels.sort();
        assert_eq!(labels, ["Agent-OK", "Bug"]);
    }
}

/// A malformed record (issue #39, item 9): re-reading it is an error, never "gone"
/// (`NotFound`, on which reconcile would drop a claim); a listing skips it with a
/// warning and lists the rest.
pub async fn malformed_record_get_is_an_error_and_a_listing_skips_it(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    let bad = f.open_ticket("malformed", &a).await;
    let good = f.open_ticket("fine", &a).await;
    let t = f.tracker();
    if !f.corrupt(&bad).await {
        // The memory board, a real Redmine: no record can be malformed; it still reads.
        t.get(&bad).await.expect("a typed ticket reads");
        return;
    }
    match t.get(&bad).await {
        Err(TrackerError::NotFound(e)) => panic!("a malformed record read as gone: {e}"),
        Err(_) => {}
        Ok(ticket) => panic!("a malformed record read as a ticket: {ticket:?}"),
    }
    let listing = t
        .list(std::slice::from_ref(&a))
        .await
        .expect("a listing skips a malformed record");
    assert_eq!(ids(&listing), [good]);
    assert!(!listing.warnings.is_empty(), "skipped with a warning");
}

/// A cursor-paged listing is the whole board or an error (issue #52, item 10): a page
/// token the server repeats (a loop) and a page that says more follow without a cursor
/// fail the listing (`Invalid`, naming why), never end it early with what was read.
pub async fn a_cursor_loop_or_a_missing_cursor_fails_the_listing(f: &dyn Fixture) {
    let [a, ..] = f.statuses();
    f.open_ticket("paged", &a).await;
    let t = f.tracker();
    for (broken, says) in [
        (BrokenCursor::Repeated, "pagination loop"),
        (BrokenCursor::Missing, "gives no cursor"),
    ] {
        if !f.break_cursors(broken) {
            // Not paged by cursor: links and offsets have their own tests
            // (`tests/it/pagination_integrity.rs`).
            return;
        }
        match t.list(std::slice::from_ref(&a)).await {
            Err(TrackerError::Invalid(m)) => assert!(
                m.contains(says) && m.contains("refusing to act on part of the board"),
                "{broken:?}: {m}"
            ),
            Err(other) => panic!("{broken:?}: expected Invalid naming {says:?}, got {other}"),
            Ok(l) => panic!(
                "{broken:?}: the listing ended early with {} ticket(s) instead of failing",
                l.tickets.len()
            ),
        }
    }
}

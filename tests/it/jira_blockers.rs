//! Jira issue links as blockers (issue #18), through the real adapter and tick against
//! the Jira model: an issue "is blocked by" another through a `Blocks` link (or the
//! type `tracker.blockers.link_type` names) waits with the reason, at no request beyond
//! the listing, and runs on the first tick after its blocker is done; links that cannot
//! be read hold the issue, never dispatch it on a guess.

use crate::jira_model::Mode;
use crate::jira_pipeline::Harness;

#[tokio::test]
async fn a_blocked_jira_issue_waits_with_the_reason_then_runs_the_tick_after_its_blocker_is_done() {
    for mode in [Mode::Cloud, Mode::DataCenter] {
        let h = Harness::new(mode, &["true"]).await;
        let blocker = h.model.add_issue("schema first", "On Hold", &[]);
        let blocked = h.model.add_issue("then the API", "Ready for Design", &[]);
        let related = h.model.add_issue("a cousin", "On Hold", &[]);
        h.model.block(&blocked, &blocker);
        // Neither a link of another type nor one where it is the blocker holds it back.
        h.model.link("Relates", &related, &blocked);
        h.model.block(&related, &blocked);

        let r = h.tick().await;
        assert!(r.runs().is_empty(), "{mode:?}: {}", r.text);
        let skip = &r.json["skips"][0];
        assert_eq!(skip["ticket"], blocked.as_str(), "{:#}", r.json);
        assert_eq!(skip["reason"], "blocked", "{:#}", r.json);
        assert_eq!(
            skip["by"],
            serde_json::json!([format!("{blocker} (On Hold)")])
        );
        assert!(
            r.text.contains(&format!("blocked by {blocker} (On Hold)")),
            "{}",
            r.text
        );
        // The links came with the search: no request of their own, nothing written.
        let log: Vec<String> = h.model.log().iter().map(|l| l.to_string()).collect();
        assert_eq!(log.len(), 2, "{mode:?}: /myself and the search: {log:#?}");
        assert!(h.model.issue(&blocked).comments.is_empty());

        h.model.edit(&blocker, |i| i.status = "Done".into());
        let r = h.tick().await;
        assert_eq!(r.runs().len(), 1, "{mode:?}: {}", r.text);
        assert_eq!(r.runs()[0]["ticket"], blocked.as_str());
        assert_eq!(h.model.issue(&blocked).status, "Design Approved");
    }
}

#[tokio::test]
async fn a_blocker_in_a_done_category_status_the_config_does_not_name_is_done() {
    // `Won't Do` is in the done category; a config that does not list it as terminal
    // still lets the blocked issue run (the workflow says the blocker is finished).
    let h = Harness::new(Mode::Cloud, &["true"]).await;
    let blocker = h.model.add_issue("dropped", "Won't Do", &[]);
    let blocked = h.model.add_issue("go", "Ready for Design", &[]);
    h.model.block(&blocked, &blocker);
    let r = h.tick_with_terminal(&["Done"]).await;
    assert_eq!(r.runs().len(), 1, "{}", r.text);
}

#[tokio::test]
async fn the_configured_link_type_is_the_one_that_blocks() {
    let h = Harness::new(Mode::Cloud, &["true"])
        .await
        .with_tracker_yaml("  blockers: {link_type: depends}");
    let blocker = h.model.add_issue("waits on this", "On Hold", &[]);
    let other = h.model.add_issue("not this", "On Hold", &[]);
    let blocked = h.model.add_issue("api", "Ready for Design", &[]);
    h.model.link("Depends", &blocker, &blocked);
    h.model.block(&blocked, &other);
    let r = h.tick().await;
    assert!(r.runs().is_empty(), "{}", r.text);
    assert_eq!(
        r.json["skips"][0]["by"],
        serde_json::json!([format!("{blocker} (On Hold)")]),
        "{:#}",
        r.json
    );
}

#[tokio::test]
async fn links_that_cannot_be_read_hold_the_issue_and_never_dispatch_it() {
    for mode in [Mode::Cloud, Mode::DataCenter] {
        let h = Harness::new(mode, &["true"]).await;
        let key = h.model.add_issue("api", "Ready for Design", &[]);
        // A site with issue linking turned off sends no `issuelinks`: the adapter reads
        // the issue's links once, and that read fails first.
        h.model.set_linking_off(true);
        h.model.fail("GET", "fields=issuelinks", 500, None, 1);
        let r = h.tick().await;
        assert!(r.runs().is_empty(), "{mode:?}: {}", r.text);
        let skip = &r.json["skips"][0];
        assert_eq!(skip["reason"], "blockers_unknown", "{:#}", r.json);
        assert!(
            skip["message"]
                .as_str()
                .unwrap()
                .contains("tracker unavailable"),
            "{skip:#}"
        );

        let r = h.tick().await;
        assert!(r.runs().is_empty(), "{mode:?}: {}", r.text);
        let skip = &r.json["skips"][0];
        assert_eq!(skip["reason"], "blockers_unknown", "{:#}", r.json);
        let message = skip["message"].as_str().unwrap();
        assert!(
            message.contains("no `issuelinks` field") && message.contains("enabled: false"),
            "says why and what to do: {message}"
        );
        let reads = h
            .model
            .log()
            .iter()
            .filter(|l| l.path.contains("fields=issuelinks"))
            .count();
        assert_eq!(reads, 2, "one read per tick");
        assert!(h.model.issue(&key).comments.is_empty(), "nothing written");
        assert_eq!(h.model.issue(&key).status, "Ready for Design");

        // Linking back on: the listing carries the links again, and the issue runs.
        h.model.set_linking_off(false);
        let r = h.tick().await;
        assert_eq!(r.runs().len(), 1, "{mode:?}: {}", r.text);
    }
}

#[tokio::test]
async fn blockers_off_runs_a_linked_issue_without_reading_links() {
    let h = Harness::new(Mode::DataCenter, &["true"])
        .await
        .with_tracker_yaml("  blockers: {enabled: false}");
    let blocker = h.model.add_issue("schema", "On Hold", &[]);
    let blocked = h.model.add_issue("api", "Ready for Design", &[]);
    h.model.block(&blocked, &blocker);
    h.model.set_linking_off(true);
    let r = h.tick().await;
    assert_eq!(r.runs().len(), 1, "{}", r.text);
    assert!(!h
        .model
        .log()
        .iter()
        .any(|l| l.path.contains("fields=issuelinks")));
}

#[tokio::test]
async fn links_read_one_issue_at_a_time_are_bounded_per_tick() {
    let h = Harness::new(Mode::Cloud, &["true"])
        .await
        .with_tracker_yaml("  blockers: {max_reads_per_tick: 1}");
    h.model.add_issue("a", "Ready for Design", &[]);
    h.model.add_issue("b", "Ready for Design", &[]);
    h.model.set_linking_off(true);
    for _ in 0..2 {
        h.model.clear_log();
        let r = h.tick().await;
        assert!(r.runs().is_empty(), "{}", r.text);
        let reads = h
            .model
            .log()
            .iter()
            .filter(|l| l.path.contains("fields=issuelinks"))
            .count();
        assert_eq!(reads, 1, "max_reads_per_tick: 1");
        let held: Vec<&str> = r.json["skips"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["reason"] == "blockers_unknown")
            .map(|s| s["message"].as_str().unwrap())
            .collect();
        assert_eq!(held.len(), 2, "both held: {:#}", r.json);
        assert_eq!(
            held.iter().filter(|m| m.contains("used up")).count(),
            1,
            "the one not read waits for a later tick: {held:?}"
        );
    }
}

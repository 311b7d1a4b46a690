//! The forge-specific write rules on whole pipelines (issue #17): GitLab's one atomic
//! PUT with `close_on` and its system notes, Gitea's ids and never a replace-all, never
//! listing on a missing Gitea label; and what a tick costs on each (docs/trackers/
//! gitlab.md and gitea.md quote it).

use crate::forge_pipeline::{demo_agent, Forge, Harness, Report, FORGES};

#[tokio::test]
async fn gitlab_moves_labels_in_one_put_and_close_on_closes_in_the_same_put() {
    let agent = demo_agent();
    let h = Harness::with(Forge::Gitlab, &[&agent], ", close_on: [done]").await;
    let n = h
        .model
        .add_issue("ship it", &["status::ready-for-design", "feature"]);
    for _ in 0..3 {
        h.model.clear_log();
        let r = h.tick().await;
        if r.runs().iter().any(|r| r["role"] == "qa") {
            break;
        }
    }
    let issue = h.model.issue(n);
    assert!(!issue.open, "close_on: [done] closed it");
    assert_eq!(issue.labels, ["feature", "status::done"]);
    let puts: Vec<_> = h
        .model
        .requests()
        .into_iter()
        .filter(|l| l.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 1, "the qa transition is one PUT: {puts:#?}");
    assert_eq!(
        puts[0].body,
        serde_json::json!({"add_labels": ["status::done"], "remove_labels": ["status::code-review"], "state_event": "close"})
    );
    // GitLab wrote system notes for every relabel; none of them reached the pipeline
    // as a comment (blocks are found and the comment count is the people's).
    assert!(issue.comments.iter().any(|c| c.system));
    let cfg = h.config();
    let comments = Forge::Gitlab
        .tracker(&cfg, None)
        .comments(&n.to_string())
        .await
        .unwrap();
    assert!(
        comments.iter().all(|c| !c.body.starts_with("added ")),
        "{comments:#?}"
    );
}

#[tokio::test]
async fn gitea_adds_and_deletes_labels_by_id_and_never_replaces_the_set() {
    let agent = demo_agent();
    let h = Harness::with(Forge::Gitea, &[&agent], ", close_on: [done]").await;
    let n = h
        .model
        .add_issue("Export", &["status/ready-for-design", "feature"]);
    for _ in 0..4 {
        h.tick().await;
    }
    let issue = h.model.issue(n);
    assert_eq!(issue.labels, ["feature", "status/done"]);
    assert!(!issue.open, "close_on: [done] closed it");
    let log = h.model.requests();
    assert!(
        log.iter().all(|l| l.method != "PUT"),
        "{:#?}",
        h.model.log()
    );
    let adds: Vec<_> = log
        .iter()
        .filter(|l| l.method == "POST" && l.path.ends_with("/labels"))
        .collect();
    assert!(
        adds.iter().all(|l| l.body["labels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v.is_i64())),
        "labels added by id: {adds:#?}"
    );
    assert!(log.iter().any(|l| l.method == "DELETE"
        && l.path
            .starts_with(&format!("/repos/acme/widgets/issues/{n}/labels/"))));
    // Label ids are read once per tick, not per transition.
    let label_reads = log
        .iter()
        .filter(|l| l.method == "GET" && l.path.starts_with("/repos/acme/widgets/labels"))
        .count();
    assert_eq!(label_reads, 4, "one per tick: {:#?}", h.model.log());
}

#[tokio::test]
async fn gitea_never_lists_with_a_label_that_does_not_exist() {
    let h = Harness::new(Forge::Gitea, &["true"]).await;
    // A repository where `status/design-approved` was never created, and an issue with
    // no status label: a `labels=status/design-approved` filter would match it.
    h.model.board().labels.remove("status/design-approved");
    h.model.add_issue("unrelated", &["question"]);
    let r = h.tick().await;
    assert!(r.runs().is_empty(), "{}", r.text);
    assert!(
        h.model.log().iter().all(|l| !l.contains("design-approved")),
        "{:#?}",
        h.model.log()
    );
    assert!(
        r.warnings()
            .iter()
            .any(|w| w.contains("label status/design-approved does not exist")),
        "{}",
        r.text
    );
}

/// What a tick costs in requests.
async fn measure(h: &Harness) -> (Report, Vec<String>) {
    h.model.clear_log();
    let r = h.tick().await;
    (r, h.model.log())
}

#[tokio::test]
async fn what_a_tick_costs() {
    for forge in FORGES {
        let h = Harness::new(forge, &["true"]).await;
        h.model.add_issue("parked", &[&h.label("triage")]);
        let (r, idle) = measure(&h).await;
        assert!(r.runs().is_empty());
        // identity + one listing per pipeline status (4), + Gitea's label read.
        let expected = match forge {
            Forge::Gitlab => 5,
            Forge::Gitea => 6,
        };
        assert_eq!(idle.len(), expected, "{forge:?}: {idle:#?}");

        for i in 0..3 {
            h.model
                .add_issue(&format!("new {i}"), &[&h.label("ready-for-design")]);
        }
        let (r, busy) = measure(&h).await;
        assert_eq!(r.runs().len(), 3, "{forge:?}: {}", r.text);
        // Per run: comments, comments again after the claim (a stale listing, issue
        // #20), in-progress move (re-read + writes), write-back (re-read, comments,
        // comment, move re-read + writes).
        let per_run = (busy.len() - expected) / 3;
        let expected_per_run = match forge {
            Forge::Gitlab => 9, // moves are one PUT each
            Forge::Gitea => 11, // add by id + delete by id
        };
        assert_eq!(per_run, expected_per_run, "{forge:?}: {busy:#?}");
        println!(
            "{forge:?}: idle tick {} requests; busy tick (3 architect runs) {} requests",
            idle.len(),
            busy.len()
        );
    }
}

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::tracker::{Review, ReviewComment};

const YAML: &str = "tracker: {kind: local, path: b}\nagent: {command: [\"true\"]}\n\
    workspace: {git: {url: /tmp/r.git}}\n\
    pipeline_stages:\n\
    - {role: backend, claim_status: design-approved, success_status: code-review}\n\
    - {role: qa, claim_status: code-review, success_status: qa-passed}\n\
    terminal_states: [done]\n\
    pull_request: {after: backend}\n\
    forge: {kind: github, repo: acme/widgets}\n";

fn config(reactions: &str) -> Config {
    Config::parse_str(&format!("{YAML}reactions:\n{reactions}"), None).unwrap()
}

fn full() -> Config {
    config(
        "  watch: [qa-passed]\n  ci_failure: {to: backend, max_rounds: 2}\n  \
         review_comments: {to: backend, quiet_seconds: 120}\n  \
         bot_review: {to: backend, bots: [\"coderabbitai[bot]\"]}\n  \
         merge_conflict: {to: backend}\n  auto_merge: {method: squash}\n  \
         escalate_to: needs-human\n",
    )
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn green() -> PullState {
    let mut pull = PullState::open(7, "https://github.com/acme/widgets/pull/7", "aaa111");
    pull.head_branch = "sortie/42".into();
    pull.base_branch = "main".into();
    pull.mergeability = Mergeability::Clean;
    pull.checks.push(check("build", CheckState::Success));
    pull
}

fn check(name: &str, state: CheckState) -> Check {
    Check {
        id: format!("run:{name}"),
        name: name.into(),
        state,
        url: None,
        summary: format!("{name} output"),
    }
}

fn comment(id: &str, author: &str, minutes_ago: i64) -> ReviewComment {
    ReviewComment {
        id: id.into(),
        author: author.into(),
        bot: author.ends_with("[bot]"),
        path: Some("src/lib.rs".into()),
        line: Some(3),
        body: format!("comment {id}"),
        url: None,
        resolved: false,
        outdated: false,
        updated_at: Some((now() - Duration::minutes(minutes_ago)).to_rfc3339()),
    }
}

fn verdict(config: &Config, pull: &PullState, past: &[ReactionRecord]) -> Verdict {
    verdict_with(config, pull, past, &[])
}

fn verdict_with(
    config: &Config,
    pull: &PullState,
    past: &[ReactionRecord],
    labels: &[String],
) -> Verdict {
    let resolved = HashSet::new();
    decide(
        config,
        config.reactions.as_ref().unwrap(),
        &Watched {
            tracker: "local",
            ticket_id: "42",
            ticket_labels: labels,
            pull,
            resolved: &resolved,
            past,
            identity: "sortie-bot",
            now: now(),
        },
    )
}

fn record(v: &Verdict) -> ReactionRecord {
    let Verdict::React(r) = v else {
        panic!("not a reaction: {v:?}")
    };
    ReactionRecord {
        tracker: "local".into(),
        ticket_id: "42".into(),
        kind: r.kind.as_str().into(),
        fingerprint: r.fingerprint.clone(),
        round: r.round,
        to_role: Some(r.to_role.clone()),
        pull_request: 7,
        head_sha: "x".into(),
        handed: r.comments.iter().map(|c| c.id.clone()).collect(),
        payload: serde_json::Value::Null,
        decided_at: now(),
    }
}

#[test]
fn a_red_check_sends_the_ticket_to_the_fixing_stage_once_per_head() {
    let config = full();
    let mut pull = green();
    pull.checks.push(check("test", CheckState::Failure));
    let first = verdict(&config, &pull, &[]);
    let Verdict::React(r) = &first else {
        panic!("{first:?}")
    };
    assert_eq!(r.kind, ReactionKind::CiFailure);
    assert_eq!((r.round, r.to_status.as_str()), (1, "design-approved"));
    assert_eq!(r.checks.len(), 1);
    assert_eq!(r.checks[0].name, "test");
    let past = vec![record(&first)];
    assert!(
        matches!(verdict(&config, &pull, &past), Verdict::Wait(w) if w.contains("handed over already")),
        "the same failure on the same head is never reacted to twice"
    );
    pull.head_sha = "bbb222".into();
    let second = verdict(&config, &pull, &past);
    assert!(
        matches!(&second, Verdict::React(r) if r.round == 2),
        "{second:?}"
    );
}

#[test]
fn the_round_after_the_last_escalates_once() {
    let config = full();
    let mut pull = green();
    pull.checks.push(check("test", CheckState::Failure));
    let mut past = Vec::new();
    for head in ["h1", "h2"] {
        pull.head_sha = head.into();
        past.push(record(&verdict(&config, &pull, &past)));
    }
    pull.head_sha = "h3".into();
    let v = verdict(&config, &pull, &past);
    let Verdict::Exhausted {
        kind,
        rounds,
        to_status,
        detail,
        ..
    } = &v
    else {
        panic!("{v:?}")
    };
    assert_eq!((*kind, *rounds), (ReactionKind::CiFailure, 2));
    assert_eq!(to_status.as_deref(), Some("needs-human"));
    assert!(detail.contains("test"), "{detail}");
    let mut done = past.clone();
    done.push(ReactionRecord {
        kind: exhausted_kind(ReactionKind::CiFailure),
        fingerprint: "e".into(),
        ..past[0].clone()
    });
    assert!(
        matches!(verdict(&config, &pull, &done), Verdict::Wait(w) if w.contains("escalated already"))
    );
}

#[test]
fn review_comments_wait_for_the_quiet_window_and_come_as_one_round() {
    let config = full();
    let mut pull = green();
    pull.comments = vec![
        comment("1", "alice", 10),
        comment("2", "alice", 9),
        comment("3", "bob", 1),
    ];
    assert!(
        matches!(verdict(&config, &pull, &[]), Verdict::Wait(w) if w.contains("waiting for 120 s")),
        "the last comment is a minute old"
    );
    pull.comments[2] = comment("3", "bob", 3);
    let v = verdict(&config, &pull, &[]);
    let Verdict::React(r) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(r.kind, ReactionKind::ReviewComments);
    assert_eq!(r.comments.len(), 3);
    // Handed over ones are not handed again; a new one is a new round.
    let past = vec![record(&v)];
    assert!(!matches!(verdict(&config, &pull, &past), Verdict::React(_)));
    pull.comments.push(comment("4", "alice", 5));
    let next = verdict(&config, &pull, &past);
    assert!(
        matches!(&next, Verdict::React(r) if r.round == 2 && r.comments.len() == 1 && r.comments[0].id == "4"),
        "{next:?}"
    );
}

#[test]
fn resolved_outdated_and_own_comments_are_not_handed_over() {
    let config = full();
    let mut pull = green();
    let mut resolved = comment("1", "alice", 10);
    resolved.resolved = true;
    let mut outdated = comment("2", "alice", 10);
    outdated.outdated = true;
    pull.comments = vec![resolved, outdated, comment("3", "sortie-bot", 10)];
    assert!(!matches!(verdict(&config, &pull, &[]), Verdict::React(_)));
    pull.comments.push(comment("4", "carol", 10));
    let v = verdict(&config, &pull, &[]);
    assert!(
        matches!(&v, Verdict::React(r) if r.comments.iter().map(|c| c.id.as_str()).collect::<Vec<_>>() == ["4"]),
        "{v:?}"
    );
}

#[test]
fn a_listed_bot_is_handled_at_once_and_apart_from_people() {
    let config = full();
    let mut pull = green();
    pull.comments = vec![
        comment("1", "coderabbitai[bot]", 0),
        comment("2", "alice", 0),
    ];
    let v = verdict(&config, &pull, &[]);
    assert!(
        matches!(&v, Verdict::React(r) if r.kind == ReactionKind::BotReview && r.comments.len() == 1),
        "{v:?}"
    );
}

#[test]
fn a_conflict_comes_before_a_red_check() {
    let config = full();
    let mut pull = green();
    pull.mergeability = Mergeability::Conflict;
    pull.checks.push(check("test", CheckState::Failure));
    assert!(
        matches!(verdict(&config, &pull, &[]), Verdict::React(r) if r.kind == ReactionKind::MergeConflict)
    );
}

#[test]
fn green_approved_and_mergeable_merges_with_the_head_as_guard() {
    let config = full();
    let mut pull = green();
    assert!(matches!(
        verdict(&config, &pull, &[]),
        Verdict::Merge { ref head_sha, method: MergeMethod::Squash } if head_sha == "aaa111"
    ));
    pull.draft = true;
    assert!(matches!(verdict(&config, &pull, &[]), Verdict::Wait(w) if w.contains("draft")));
    pull.draft = false;
    pull.checks.push(check("slow", CheckState::Pending));
    assert!(matches!(verdict(&config, &pull, &[]), Verdict::Wait(w) if w.contains("slow")));
    pull.checks.pop();
    pull.mergeability = Mergeability::Blocked;
    assert!(matches!(verdict(&config, &pull, &[]), Verdict::Wait(_)));
    pull.mergeability = Mergeability::Clean;
    pull.reviews.push(Review {
        id: "9".into(),
        author: "alice".into(),
        bot: false,
        verdict: ReviewVerdict::ChangesRequested,
        body: String::new(),
        submitted_at: None,
        url: None,
    });
    assert!(
        matches!(verdict(&config, &pull, &[]), Verdict::Wait(w) if w.contains("requests changes"))
    );
    pull.checks.clear();
    pull.reviews.clear();
    assert!(
        matches!(verdict(&config, &pull, &[]), Verdict::Wait(w) if w.contains("no check")),
        "never merged before any check reported"
    );
}

#[test]
fn auto_merge_is_off_unless_configured() {
    let config = config("  watch: [qa-passed]\n");
    assert!(
        matches!(verdict(&config, &green(), &[]), Verdict::Wait(w) if w.contains("auto_merge is off"))
    );
}

#[test]
fn a_hold_label_on_the_ticket_or_the_pull_request_stops_everything() {
    let config = full();
    let mut pull = green();
    pull.checks.push(check("test", CheckState::Failure));
    let held = vec!["sortie:hold".to_string()];
    assert!(
        matches!(verdict_with(&config, &pull, &[], &held), Verdict::Wait(w) if w.contains("sortie:hold"))
    );
    pull.labels = held;
    pull.lifecycle = PullLifecycle::Merged {
        merge_commit: None,
        merged_by: None,
    };
    assert!(matches!(verdict(&config, &pull, &[]), Verdict::Wait(_)));
}

#[test]
fn merged_moves_on_and_closed_unmerged_is_held_unless_configured() {
    let config = full();
    let mut pull = green();
    pull.lifecycle = PullLifecycle::Merged {
        merge_commit: Some("m1".into()),
        merged_by: Some("alice".into()),
    };
    assert!(matches!(
        verdict(&config, &pull, &[]),
        Verdict::Merged { ref to_status, ref merge_commit, .. } if to_status == "done" && merge_commit.as_deref() == Some("m1")
    ));
    pull.lifecycle = PullLifecycle::Closed;
    assert!(matches!(
        verdict(&config, &pull, &[]),
        Verdict::ClosedUnmerged {
            to_status: None,
            ..
        }
    ));
}

//! Whole three-stage pipelines against every vendor's model, written once: the real
//! adapter, the real tick, a SQLite ledger in a temp dir and an injected clock. Each
//! vendor's pipeline file (`github_pipeline.rs`, `forge_pipeline.rs`,
//! `jira_pipeline.rs`, `linear_pipeline.rs`) implements [`Vendor`] for its harness and
//! keeps the scenarios only it has; the modules at the bottom run the shared ones on
//! each (`pipeline_suite::github::three_stages_run_end_to_end`).

pub use crate::common::{Pipeline3, Spelling, KEBAB};

use std::path::PathBuf;
use std::sync::Mutex;

use chrono::{DateTime, SubsecRound, Utc};
use sortie::block::OutcomeBlock;
use sortie::ledger::{Ledger, SqliteLedger};
use sortie::pipeline::Clock;

/// A clock the test moves by hand, shared by the pipeline and the adapter.
pub struct StepClock(Mutex<DateTime<Utc>>);

impl StepClock {
    /// Now, to the millisecond.
    pub fn new() -> Self {
        StepClock(Mutex::new(Utc::now().trunc_subsecs(3)))
    }

    pub fn advance(&self, secs: i64) {
        *self.0.lock().unwrap() += chrono::Duration::seconds(secs);
    }
}

impl Clock for StepClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap()
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The demo agent script (writes a success block for each role).
pub fn demo_agent() -> String {
    repo().join("scripts/demo-agent").display().to_string()
}

/// What a tick reported (its type is not exported: as JSON, and as text for failures).
pub struct Report {
    pub json: serde_json::Value,
    pub text: String,
}

impl Report {
    pub fn of(r: &impl serde::Serialize, text: String) -> Self {
        Report {
            json: serde_json::to_value(r).unwrap(),
            text,
        }
    }
    pub fn runs(&self) -> &Vec<serde_json::Value> {
        self.json["runs"].as_array().unwrap()
    }
    /// The write-back result of every run.
    pub fn writebacks(&self) -> Vec<&str> {
        self.runs()
            .iter()
            .map(|r| r["writeback"].as_str().unwrap_or(""))
            .collect()
    }
    pub fn replays(&self) -> Vec<&str> {
        self.json["replays"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect()
    }
    pub fn warnings(&self) -> Vec<&str> {
        self.json["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect()
    }
}

/// One vendor's harness: its model, the adapter on it, and how a person acts there.
/// Statuses are named by the pipeline's kebab words (`on-hold`, `ready-for-design`).
pub(crate) trait Vendor: Sized {
    /// What picks the model (GitLab or Gitea, Jira Cloud or Data Center).
    type Flavour: Copy + std::fmt::Debug;
    type Id: Clone;

    /// A fresh model, with a harness running `agent`.
    async fn start(flavour: Self::Flavour, agent: &[&str]) -> Self;
    /// A person opens a ticket in `status` with these other labels.
    fn open(&self, title: &str, status: &str, labels: &[&str]) -> Self::Id;
    /// A person asks, in a comment, to keep it small.
    fn person_comments(&self, id: &Self::Id);
    /// A ticket elsewhere on the board, not on the pipeline, and its status as the
    /// tracker names it (vendors whose old test had one).
    fn open_parked(&self) -> Option<(Self::Id, String)> {
        None
    }
    /// The ticket's status as the tracker names it.
    fn status_of(&self, id: &Self::Id) -> String;
    /// The tracker's name for a status of the pipeline, as write-back results quote it.
    fn spell(&self, status: &str) -> String;
    /// The ticket is in `status`, carrying `labels` besides (labels are checked only
    /// where status is a label).
    fn assert_in(&self, id: &Self::Id, status: &str, labels: &[&str]);
    /// A person moves the ticket to `status` right before the `skip + 1`-th re-read.
    fn moves_before_read(&self, id: &Self::Id, skip: usize, status: &str);
    /// A person closes (completes) the ticket right before the `skip + 1`-th re-read.
    fn closes_before_read(&self, id: &Self::Id, skip: usize);
    /// The ticket was closed by that person and left in `designing`.
    fn assert_closed_in_designing(&self, id: &Self::Id);
    /// The outcome blocks sortie's own account wrote on the ticket.
    fn blocks(&self, id: &Self::Id) -> Vec<OutcomeBlock>;
    /// Comments on the ticket, the tracker's own notes left out.
    fn comments(&self, id: &Self::Id) -> usize;
    /// One tick in a new process.
    async fn tick(&self) -> Report;
    /// What the vendor checks besides once a ticket drained (comment formats, ids).
    fn check_drained(&self, _id: &Self::Id) {}
    /// What the vendor checks at the end of every scenario (requests the model refused).
    fn check_clean(&self) {}
}

/// A vendor whose comment posts can be answered 429 with `Retry-After`.
pub(crate) trait RateLimited: Vendor {
    fn clock(&self) -> &StepClock;
    /// The ledger's name for the tracker.
    fn ledger_name(&self) -> &'static str;
    fn ledger_path(&self) -> PathBuf;
    /// Answer every comment post with 429 and `Retry-After: 60`.
    fn fail_comment_posts(&self);
    fn clear_faults(&self);
    /// The status of every request so far, and the log for failures.
    fn statuses(&self) -> (Vec<u16>, Vec<String>);
    /// What the vendor checks `waited` seconds into the wait; returns `waited`.
    async fn while_waiting(&self) -> i64 {
        0
    }
}

pub(crate) async fn three_stages_run_end_to_end<V: Vendor>(flavour: V::Flavour) {
    let agent = demo_agent();
    let h = V::start(flavour, &[&agent]).await;
    let n = h.open("Export to CSV", "ready-for-design", &["feature"]);
    h.person_comments(&n);
    let parked = h.open_parked();

    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks <= 6, "{flavour:?}: not drained");
        let r = h.tick().await;
        if r.runs().is_empty() {
            break;
        }
        assert!(
            r.writebacks().iter().all(|w| *w == "done"),
            "{flavour:?}: {}",
            r.text
        );
    }
    assert_eq!(
        ticks, 4,
        "{flavour:?}: one stage per tick, then an idle tick"
    );
    h.assert_in(&n, "done", &["feature"]);
    if let Some((p, status)) = parked {
        assert_eq!(h.status_of(&p), status, "not on the pipeline");
    }
    let blocks = h.blocks(&n);
    let roles: Vec<(&str, bool)> = blocks
        .iter()
        .map(|b| (b.role(), matches!(b, OutcomeBlock::Success(_))))
        .collect();
    assert_eq!(
        roles,
        [("architect", true), ("backend", true), ("qa", true)],
        "{flavour:?}"
    );
    assert_eq!(
        h.comments(&n),
        4,
        "{flavour:?}: the person's comment and one per stage"
    );
    h.check_drained(&n);
    h.check_clean();
}

pub(crate) async fn a_person_moving_the_ticket_during_the_run_wins<V: Vendor>(flavour: V::Flavour) {
    let h = V::start(flavour, &["true"]).await;
    let n = h.open("t", "ready-for-design", &[]);
    // Re-read #1 is the in-progress transition's; #2 is the write-back's.
    h.moves_before_read(&n, 1, "on-hold");

    let r = h.tick().await;
    let dropped = format!("dropped: moved by a person to {}", h.spell("on-hold"));
    assert_eq!(r.writebacks(), [dropped], "{flavour:?}: {}", r.text);
    h.assert_in(&n, "on-hold", &[]);
    assert!(h.blocks(&n).is_empty(), "{flavour:?}: nothing written");
    h.check_clean();
}

pub(crate) async fn a_person_moving_the_ticket_right_before_the_transition_keeps_it<V: Vendor>(
    flavour: V::Flavour,
) {
    let h = V::start(flavour, &["true"]).await;
    let n = h.open("t", "ready-for-design", &[]);
    // Re-read #3 is the write-back transition's own re-read, after the comment.
    h.moves_before_read(&n, 2, "on-hold");

    let r = h.tick().await;
    let dropped = format!(
        "dropped: moved by a person to {} during write-back",
        h.spell("on-hold")
    );
    assert_eq!(r.writebacks(), [dropped], "{flavour:?}: {}", r.text);
    h.assert_in(&n, "on-hold", &[]);
    h.check_clean();
}

pub(crate) async fn a_closed_ticket_is_terminal_and_gets_no_write_back<V: Vendor>(
    flavour: V::Flavour,
) {
    let h = V::start(flavour, &["true"]).await;
    let n = h.open("t", "ready-for-design", &[]);
    h.closes_before_read(&n, 1);

    let r = h.tick().await;
    assert!(
        r.writebacks()[0].starts_with("dropped: ticket is terminal"),
        "{flavour:?}: {}",
        r.text
    );
    h.assert_closed_in_designing(&n);
    assert!(h.blocks(&n).is_empty(), "{flavour:?}");

    // Closed tickets are not on the board any more: the next tick sees nothing to do.
    let r = h.tick().await;
    assert!(
        r.runs().is_empty() && r.json["tickets_listed"] == 0,
        "{flavour:?}: {}",
        r.text
    );
    h.check_clean();
}

pub(crate) async fn a_429_with_retry_after_defers_the_write_without_a_request_storm<
    V: RateLimited,
>(
    flavour: V::Flavour,
) {
    let h = V::start(flavour, &["true"]).await;
    let n = h.open("a", "ready-for-design", &[]);
    h.open("b", "ready-for-design", &[]);
    h.fail_comment_posts();

    let r = h.tick().await;
    assert_eq!(r.runs().len(), 2, "{flavour:?}: {}", r.text);
    assert!(
        r.writebacks()
            .iter()
            .all(|w| w.starts_with("deferred: rate limited")),
        "{flavour:?}: {}",
        r.text
    );
    // Once the tracker said 429 nothing more was sent, except what the other run
    // already had in flight before the answer arrived: at most one request.
    let (statuses, log) = h.statuses();
    let first = statuses.iter().position(|s| *s == 429).expect("a 429");
    assert!(statuses.len() - first - 1 <= 1, "{flavour:?}: {log:#?}");
    let ledger = SqliteLedger::open(&h.ledger_path()).unwrap();
    assert_eq!(ledger.outbox_pending(h.ledger_name()).unwrap().len(), 2);
    // The write waits.
    h.assert_in(&n, "designing", &[]);

    // After the wait the stored outcomes are written, once each.
    let waited = h.while_waiting().await;
    h.clear_faults();
    h.clock().advance(61 - waited);
    let r = h.tick().await;
    assert_eq!(r.replays(), ["done", "done"], "{flavour:?}: {}", r.text);
    let architect = h
        .blocks(&n)
        .iter()
        .filter(|b| b.role() == "architect")
        .count();
    assert_eq!(architect, 1, "{flavour:?}: written once");
}

/// Who writes a comment in the question scenarios.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Who {
    /// sortie's own account.
    Sortie,
    /// The person `trust_person` names in `trusted_authors`.
    Person,
    /// Someone `trusted_authors` does not name.
    Stranger,
}

/// A vendor on which a person answers an agent's question (issue #34).
pub(crate) trait Asks: Vendor {
    /// Put the person in `trusted_authors` for the next ticks, as the vendor names them.
    fn trust_person(&self);
    /// `who` comments `text` (one line) on the ticket, in the tracker's own format.
    fn comment_as(&self, id: &Self::Id, who: Who, text: &str);
    /// The `sortie:question` blocks sortie's account wrote on the ticket.
    fn questions(&self, id: &Self::Id) -> usize;
}

/// The skips of `report` for `role`, as JSON.
fn skips_of<'r>(report: &'r Report, role: &str) -> Vec<&'r serde_json::Value> {
    report.json["skips"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == role)
        .collect()
}

/// Issue #34: the demo architect asks which API to use; the ticket waits in its stage;
/// sortie's own comment and a stranger's do not answer it; the person's `/answer 2`
/// runs the same attempt again with "GraphQL", and the ticket flows on to done.
pub(crate) async fn an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on<V: Asks>(
    flavour: V::Flavour,
) {
    let agent = demo_agent();
    let h = V::start(flavour, &[&agent]).await;
    h.trust_person();
    let n = h.open("Export to CSV", "ready-for-design", &["needs-decision"]);

    let r = h.tick().await;
    assert_eq!(r.runs().len(), 1, "{flavour:?}: {}", r.text);
    assert_eq!(
        r.runs()[0]["outcome"],
        "question",
        "{flavour:?}: {}",
        r.text
    );
    assert_eq!(r.writebacks(), ["done"], "{flavour:?}: {}", r.text);
    // Back in the claim status, or, where the workflow has no way back (the Jira
    // model's), held in the in-progress status: both are the stage's.
    let parked = r.runs()[0]["to_status"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    let back = h.spell("ready-for-design").to_lowercase();
    assert!(
        parked == back || parked == h.spell("designing").to_lowercase(),
        "{flavour:?}: {}",
        r.text
    );
    if parked == back {
        h.assert_in(&n, "ready-for-design", &["needs-decision"]);
    }
    assert_eq!(h.questions(&n), 1, "{flavour:?}: one question block");
    assert!(
        h.blocks(&n).is_empty(),
        "{flavour:?}: a question is no outcome"
    );

    let r = h.tick().await;
    assert!(r.runs().is_empty(), "{flavour:?}: {}", r.text);
    let skips = skips_of(&r, "architect");
    assert_eq!(
        skips[0]["reason"], "waiting_for_answer",
        "{flavour:?}: {}",
        r.text
    );
    assert_eq!(skips[0]["question_id"], "architect-1-q1", "{flavour:?}");

    h.comment_as(&n, Who::Sortie, "/answer 1");
    h.comment_as(&n, Who::Stranger, "/answer 1");
    let r = h.tick().await;
    assert!(r.runs().is_empty(), "{flavour:?}: {}", r.text);
    let ignored = skips_of(&r, "architect")[0]["ignored"].to_string();
    assert!(
        ignored.contains("sortie's own comment is not an answer"),
        "{flavour:?}: {ignored}"
    );
    assert!(
        ignored.contains("is not in trusted_authors"),
        "{flavour:?}: {ignored}"
    );

    h.comment_as(&n, Who::Person, "/answer 2");
    let r = h.tick().await;
    assert_eq!(r.runs()[0]["outcome"], "success", "{flavour:?}: {}", r.text);
    assert_eq!(
        r.runs()[0]["attempt"],
        1,
        "{flavour:?}: the asking attempt goes on"
    );
    let blocks = h.blocks(&n);
    let OutcomeBlock::Success(design) = &blocks[0] else {
        panic!("{flavour:?}: {blocks:?}")
    };
    assert!(
        design.summary.contains("It uses GraphQL."),
        "{flavour:?}: {}",
        design.summary
    );
    for _ in 0..4 {
        if h.tick().await.runs().is_empty() {
            break;
        }
    }
    h.assert_in(&n, "done", &["needs-decision"]);
    assert_eq!(h.questions(&n), 1, "{flavour:?}: still one question block");
    h.check_clean();
}

/// The suite's scenarios for one vendor: `vendor!(module, Harness, flavour; tests)`.
macro_rules! vendor {
    ($module:ident, $harness:ty, $flavour:expr; $($test:ident),+ $(,)?) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test::<$harness>($flavour).await;
                }
            )+
        }
    };
}

vendor!(github, crate::github_pipeline::Harness, ();
    three_stages_run_end_to_end,
    an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on,
    a_person_moving_the_ticket_during_the_run_wins,
    a_person_moving_the_ticket_right_before_the_transition_keeps_it,
    a_closed_ticket_is_terminal_and_gets_no_write_back,
    a_429_with_retry_after_defers_the_write_without_a_request_storm,
);

vendor!(gitlab, crate::forge_pipeline::Harness, crate::forge_pipeline::Forge::Gitlab;
    three_stages_run_end_to_end,
    a_person_moving_the_ticket_during_the_run_wins,
    a_person_moving_the_ticket_right_before_the_transition_keeps_it,
    a_closed_ticket_is_terminal_and_gets_no_write_back,
    a_429_with_retry_after_defers_the_write_without_a_request_storm,
);

vendor!(gitea, crate::forge_pipeline::Harness, crate::forge_pipeline::Forge::Gitea;
    three_stages_run_end_to_end,
    a_person_moving_the_ticket_during_the_run_wins,
    a_person_moving_the_ticket_right_before_the_transition_keeps_it,
    a_closed_ticket_is_terminal_and_gets_no_write_back,
    a_429_with_retry_after_defers_the_write_without_a_request_storm,
);

vendor!(jira_cloud, crate::jira_pipeline::Harness, crate::jira_model::Mode::Cloud;
    three_stages_run_end_to_end,
    an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on,
    a_person_moving_the_ticket_during_the_run_wins,
);

vendor!(jira_data_center, crate::jira_pipeline::Harness, crate::jira_model::Mode::DataCenter;
    three_stages_run_end_to_end,
    an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on,
);

vendor!(linear, crate::linear_pipeline::Harness, ();
    three_stages_run_end_to_end,
    an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on,
    a_person_moving_the_ticket_during_the_run_wins,
    a_person_moving_the_ticket_right_before_the_transition_keeps_it,
    a_closed_ticket_is_terminal_and_gets_no_write_back,
);

vendor!(github_project, crate::github_project_pipeline::Harness, ();
    three_stages_run_end_to_end,
    an_agent_asks_on_the_ticket_and_a_persons_answer_goes_on,
    a_person_moving_the_ticket_during_the_run_wins,
    a_person_moving_the_ticket_right_before_the_transition_keeps_it,
    a_closed_ticket_is_terminal_and_gets_no_write_back,
    a_429_with_retry_after_defers_the_write_without_a_request_storm,
);

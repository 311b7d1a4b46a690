//! Questions through the ticket (issue #34) on the local board, with the real binary: an
//! agent asks, the ticket waits in its stage with the reason, only a person's answer
//! counts, and the run goes on from it; timeouts, the bound, and crashes around both.

use std::process::Command;

use sortie::block::question::parse_question_blocks;
use sortie::block::OutcomeBlock;

use crate::common::{self, Sandbox};

/// The three-stage demo pipeline with `extra` top-level config, `trusted_authors: [ana]`.
fn sandbox(extra: &str) -> Sandbox {
    let config = common::three_stages_config(2);
    Sandbox::with_config(&format!("{config}trusted_authors: [ana]\n{extra}"))
}

fn comment(sb: &Sandbox, id: &str, author: &str, body: &str) {
    sb.ok(&[
        "board", "comment", "--board", "board", id, "--author", author, "--body", body,
    ]);
}

fn questions(sb: &Sandbox, id: &str) -> Vec<sortie::block::question::QuestionBlock> {
    sb.comments(id)
        .iter()
        .filter(|c| c.author == sortie::tracker::local::IDENTITY)
        .flat_map(|c| parse_question_blocks(&c.body))
        .collect()
}

/// The dry run's architect skip of the ticket, as JSON text.
fn skip_reason(sb: &Sandbox, id: &str) -> String {
    let report = sb.tick_json(&["--dry-run"]);
    report["skips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["ticket"] == id && s["role"] == "architect")
        .map(|s| s.to_string())
        .unwrap_or_else(|| panic!("no architect skip for {id}: {report:#}"))
}

/// Regression (#52, 11): a waiting question shows where people look, with its text and
/// its options: `pipeline status` says what the ticket waits for (it said `waiting`),
/// the dry run says it, and `board list --outcomes` says it too (it showed nothing).
#[test]
fn a_waiting_question_shows_its_text_and_options_in_status_and_the_board_list() {
    let sb = sandbox("");
    let id = sb.add(
        "Export to CSV",
        "ready-for-design",
        &["--label", "needs-decision"],
    );
    sb.tick_json(&[]);
    let asked = r#""Which API should the export use?" (options: 1. REST v2, 2. GraphQL)"#;

    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    let line = status
        .lines()
        .find(|l| l.contains("architect-1-q1"))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        line.trim_start().starts_with(&format!(
            "{id} architect: waiting for an answer to architect-1-q1 (asked "
        )),
        "{line}"
    );
    assert!(line.ends_with(&format!("): {asked}")), "{line}");
    let json = sb.status_json();
    let question = &json["questions"][0];
    assert_eq!(question["question"], "Which API should the export use?");
    assert_eq!(
        question["options"],
        serde_json::json!(["REST v2", "GraphQL"])
    );
    assert_eq!(question["state"], "waiting", "{json:#}");

    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains(&format!("waiting for an answer to architect-1-q1: {asked}")),
        "{text}"
    );

    let list = sb.ok(&["board", "list", "--board", "board", "--outcomes"]);
    let row = list
        .lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        row.ends_with(&format!("waiting for an answer to architect-1-q1: {asked}")),
        "{list}"
    );

    // Answered by a trusted author (the config's trusted_authors): the next tick goes on.
    comment(&sb, &id, "ana", "/answer 2");
    let list = sb.ok(&["board", "list", "--config", "pipeline.yaml", "--outcomes"]);
    assert!(
        list.contains("architect-1-q1 answered by ana; the next tick goes on"),
        "{list}"
    );
}

#[test]
fn an_agent_asks_the_ticket_waits_and_a_persons_answer_resumes_the_run() {
    let sb = sandbox("");
    let id = sb.add(
        "Export to CSV",
        "ready-for-design",
        &["--label", "needs-decision"],
    );

    let report = sb.tick_json(&[]);
    let run = &report["runs"][0];
    assert_eq!(run["outcome"], "question", "{report:#}");
    assert_eq!(run["attempt"], 1, "{report:#}");
    assert_eq!(
        run["note"], "waiting for an answer to architect-1-q1",
        "{report:#}"
    );
    // Parked in the stage's claim status (moved back from its in-progress status).
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
    let asked = questions(&sb, &id);
    assert_eq!(asked.len(), 1, "one question block");
    assert_eq!(asked[0].options, ["REST v2", "GraphQL"]);
    assert!(sb.blocks(&id).is_empty(), "a question is no outcome");

    // Nothing runs while it waits, and the dry run says why.
    let report = sb.tick_json(&[]);
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    let reason = skip_reason(&sb, &id);
    assert!(
        reason.contains(r#""question_id":"architect-1-q1""#),
        "{reason}"
    );
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        text.contains("waiting for an answer to architect-1-q1"),
        "{text}"
    );

    // `pipeline status` lists it.
    let status = sb.ok(&["pipeline", "status", "--config", "pipeline.yaml"]);
    let line = status
        .lines()
        .find(|l| l.contains("architect-1-q1"))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(status.contains("open questions (1):"), "{status}");
    assert!(
        line.trim_start().starts_with(&format!(
            "{id} architect: waiting for an answer to architect-1-q1 (asked "
        )),
        "{line}"
    );

    // sortie's own comment and a stranger's do not answer it, and say why.
    comment(&sb, &id, sortie::tracker::local::IDENTITY, "/answer 1");
    comment(&sb, &id, "mallory", "/answer 1");
    let report = sb.tick_json(&[]);
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    let reason = skip_reason(&sb, &id);
    assert!(
        reason.contains("sortie's own comment is not an answer"),
        "{reason}"
    );
    assert!(
        reason.contains("mallory is not in trusted_authors"),
        "{reason}"
    );

    // A person's `/answer 2` picks the second option; the run goes on with it, as the
    // same attempt, and the ticket flows on.
    comment(&sb, &id, "ana", "/answer 2");
    let report = sb.tick_json(&[]);
    let run = &report["runs"][0];
    assert_eq!(run["outcome"], "success", "{report:#}");
    assert_eq!(run["attempt"], 1, "the asking attempt goes on: {report:#}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    let OutcomeBlock::Success(design) = &sb.blocks(&id)[0] else {
        panic!("{:?}", sb.blocks(&id))
    };
    assert_eq!(design.stage_attempt, 1);
    assert!(
        design.summary.contains("It uses GraphQL."),
        "{}",
        design.summary
    );
    assert!(
        sb.comments(&id).iter().any(|c| c
            .body
            .contains("It went on from architect-1-q1, answered by ana.")),
        "{:#?}",
        sb.comments(&id)
    );
    let workspace = sb
        .path()
        .join("state/workspaces")
        .join(&id)
        .join("DESIGN.md");
    let design_md = std::fs::read_to_string(&workspace).unwrap();
    assert!(design_md.contains("API: GraphQL"), "{design_md}");

    sb.drain(4);
    assert_eq!(sb.ticket(&id).status, "done");
    assert_eq!(questions(&sb, &id).len(), 1, "still one question block");
}

#[test]
fn answers_by_block_and_to_another_question() {
    let sb = sandbox("");
    let id = sb.add("t", "ready-for-design", &["--label", "needs-decision"]);
    sb.tick();
    comment(
        &sb,
        &id,
        "ana",
        "```yaml sortie:answer\nquestion_id: backend-9-q1\nanswer: REST v2\n```\n",
    );
    let reason = skip_reason(&sb, &id);
    assert!(
        reason.contains("answers question backend-9-q1, not this one"),
        "{reason}"
    );
    comment(
        &sb,
        &id,
        "ana",
        "We talked it over.\n\n```yaml sortie:answer\nquestion_id: architect-1-q1\noption: 1\n```\n",
    );
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    let OutcomeBlock::Success(design) = &sb.blocks(&id)[0] else {
        panic!()
    };
    assert!(
        design.summary.contains("It uses REST v2."),
        "{}",
        design.summary
    );
}

/// An agent (for the architect) that asks `question` with or without a default, and
/// on an answer writes it into its summary; every other role succeeds.
fn asking_agent(sb: &Sandbox, default: Option<&str>) -> String {
    let path = sb.path().join("asking-agent");
    let default = default
        .map(|d| format!("default: {d}\n"))
        .unwrap_or_default();
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nprompt=$(cat)\necho run >> \"$(dirname \"$0\")/runs.log\"\n\
             answer=$(printf '%s\\n' \"$prompt\" | sed -n 's/^Answer ([^)]*): //p' | tail -n 1)\n\
             if [ \"$SORTIE_ROLE\" = architect ] && [ -z \"$answer\" ]; then\n\
             printf 'outcome: question\\nquestion: Which API?\\noptions: [REST v2, GraphQL]\\n{default}' > \"$SORTIE_RESULT_FILE\"\n\
             else printf 'outcome: success\\nsummary: \"took %s\"\\n' \"$answer\" > \"$SORTIE_RESULT_FILE\"; fi\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn with_agent(extra: &str, default: Option<&str>) -> Sandbox {
    let sb = sandbox(extra);
    let agent = asking_agent(&sb, default);
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    let demo = common::repo()
        .join("scripts/demo-agent")
        .display()
        .to_string();
    std::fs::write(sb.config_path(), config.replace(&demo, &agent)).unwrap();
    sb
}

fn runs(sb: &Sandbox) -> usize {
    std::fs::read_to_string(sb.path().join("runs.log"))
        .map(|l| l.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_timed_out_question_takes_its_default_and_says_so() {
    let sb = with_agent("questions: {timeout_seconds: 1}\n", Some("REST v2"));
    let id = sb.add("t", "ready-for-design", &[]);
    sb.tick();
    let q = &questions(&sb, &id)[0];
    assert!(q.deadline.is_some(), "{q:?}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(
        report["runs"][0]["note"], "goes on from architect-1-q1 (answered by timeout)",
        "{report:#}"
    );
    let OutcomeBlock::Success(design) = &sb.blocks(&id)[0] else {
        panic!()
    };
    assert_eq!(design.summary, "took REST v2");
    // Said on the ticket, with the outcome.
    assert!(
        sb.comments(&id).iter().any(|c| c.body.contains(
            "Nobody answered architect-1-q1 by its deadline, so its default was taken: REST v2."
        )),
        "{:#?}",
        sb.comments(&id)
    );
}

#[test]
fn a_timed_out_question_without_a_default_fails_unanswered() {
    let sb = with_agent("questions: {timeout_seconds: 1}\n", None);
    let id = sb.add("t", "ready-for-design", &[]);
    sb.tick();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"][0]["reason_code"], "question.unanswered",
        "{report:#}"
    );
    assert_eq!(sb.ticket(&id).status, "design-blocked");
    assert_eq!(
        runs(&sb),
        1,
        "the agent is not run for an unanswered question"
    );
}

#[test]
fn the_question_past_max_per_stage_fails_with_question_limit() {
    let sb = with_agent("", None);
    // Each answer's run asks again: its prompt carries no `Answer (...)` line after the
    // agent strips it (an agent that keeps asking).
    let script = sb.path().join("asking-agent");
    let text = std::fs::read_to_string(&script).unwrap();
    std::fs::write(&script, text.replace("[ -z \"$answer\" ]", "true")).unwrap();
    let id = sb.add("t", "ready-for-design", &[]);
    for n in 1..=3 {
        let report = sb.tick_json(&[]);
        assert_eq!(
            report["runs"][0]["outcome"], "question",
            "question {n}: {report:#}"
        );
        comment(&sb, &id, "ana", &format!("/answer answer {n}"));
    }
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"][0]["reason_code"], "question.limit",
        "{report:#}"
    );
    assert_eq!(sb.ticket(&id).status, "design-blocked");
    let ids: Vec<String> = questions(&sb, &id)
        .into_iter()
        .map(|q| q.question_id)
        .collect();
    assert_eq!(ids, ["architect-1-q1", "architect-1-q2", "architect-1-q3"]);
}

/// One tick with `SORTIE_FAULT=<point>`: the process dies there.
fn crash_at(sb: &Sandbox, point: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
        .args(["pipeline", "tick", "--config", "pipeline.yaml"])
        .current_dir(sb.path())
        .env("SORTIE_FAULT", point)
        .env_remove("SORTIE_LOG")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the tick was meant to die at {point}"
    );
}

#[test]
fn a_crash_after_the_question_is_posted_leaves_one_question_and_a_parked_ticket() {
    let sb = with_agent("", None);
    // The dead run's outbox entry is replayed once its write lease has run out.
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    std::fs::write(
        sb.config_path(),
        config.replace("claim_lock_ttl_seconds: 60", "claim_lock_ttl_seconds: 1"),
    )
    .unwrap();
    let id = sb.add("t", "ready-for-design", &[]);
    crash_at(&sb, "after_comment");
    assert_eq!(sb.ticket(&id).status, "designing", "died before the park");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // The next ticks take the dead run's claim back and finish the write-back from the
    // outbox, posting nothing twice and running nothing again.
    let mut replays = Vec::new();
    for _ in 0..3 {
        let report = sb.tick_json(&[]);
        assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
        replays.extend(report["replays"].as_array().unwrap().clone());
    }
    assert_eq!(replays.len(), 1, "{replays:?}");
    assert_eq!(replays[0]["result"], "done", "{replays:?}");
    assert_eq!(sb.ticket(&id).status, "ready-for-design");
    assert_eq!(questions(&sb, &id).len(), 1);
    assert_eq!(runs(&sb), 1);
}

#[test]
fn a_crash_between_reading_the_answer_and_the_resume_runs_the_resume_once() {
    let sb = with_agent("", None);
    let id = sb.add("t", "ready-for-design", &[]);
    sb.tick();
    comment(&sb, &id, "ana", "/answer 2");
    crash_at(&sb, "after_claim");
    assert_eq!(runs(&sb), 1, "died before the agent");
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(report["runs"][0]["attempt"], 1, "{report:#}");
    assert_eq!(runs(&sb), 2, "the question's run and one resumed run");
    assert_eq!(questions(&sb, &id).len(), 1);
    let OutcomeBlock::Success(design) = &sb.blocks(&id)[0] else {
        panic!()
    };
    assert_eq!(design.summary, "took GraphQL");
}

#[test]
fn with_a_waiting_status_the_ticket_waits_there_and_goes_back_once_answered() {
    let sb = sandbox("questions: {waiting_status: needs-answer}\n");
    let id = sb.add(
        "Export to CSV",
        "ready-for-design",
        &["--label", "needs-decision"],
    );
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "question", "{report:#}");
    assert_eq!(report["runs"][0]["to_status"], "needs-answer", "{report:#}");
    assert_eq!(sb.ticket(&id).status, "needs-answer");

    // It waits there, with the reason, through a stranger's answer.
    comment(&sb, &id, "mallory", "/answer 1");
    let report = sb.tick_json(&[]);
    assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
    assert!(
        report["unparked"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
    let reason = skip_reason(&sb, &id);
    assert!(reason.contains(r#""status":"needs-answer""#), "{reason}");
    assert!(
        reason.contains("mallory is not in trusted_authors"),
        "{reason}"
    );
    assert_eq!(sb.ticket(&id).status, "needs-answer");
    // The person at the terminal is told it is on the pipeline and why it waits, not
    // that the pipeline's statuses are empty (the waiting status is no stage's).
    let text = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml"]);
    assert!(
        text.contains("nothing to dispatch: 1 ticket(s) on the pipeline's statuses, none eligible"),
        "{text}"
    );
    assert!(!text.contains("nothing to do"), "{text}");

    // Answered: the same tick moves it back and runs the stage with the answer.
    comment(&sb, &id, "ana", "/answer 2");
    let dry = sb.ok(&["pipeline", "tick", "--config", "pipeline.yaml", "--dry-run"]);
    assert!(
        dry.contains("unpark ticket 1 role architect: architect-1-q1 answered by ana; needs-answer -> ready-for-design: would move"),
        "{dry}"
    );
    assert_eq!(
        sb.ticket(&id).status,
        "needs-answer",
        "a dry run moves nothing"
    );
    let report = sb.tick_json(&[]);
    assert_eq!(report["unparked"][0]["result"], "moved", "{report:#}");
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(report["runs"][0]["attempt"], 1, "{report:#}");
    assert_eq!(sb.ticket(&id).status, "design-approved");
    let OutcomeBlock::Success(design) = &sb.blocks(&id)[0] else {
        panic!()
    };
    assert!(
        design.summary.contains("It uses GraphQL."),
        "{}",
        design.summary
    );
}

#[test]
fn a_waiting_status_a_stage_uses_is_refused_with_the_reason() {
    let sb = sandbox("questions: {waiting_status: design-blocked}\n");
    let out = sb.sortie(&["pipeline", "validate", "--config", "pipeline.yaml"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("questions.waiting_status"), "{err}");
    assert!(
        err.contains("it is stage architect's failure_status"),
        "{err}"
    );
}

#[test]
fn a_question_fires_question_asked_once_and_no_handoff() {
    let sb = sandbox("");
    let log = sb.path().join("events.log");
    let config = std::fs::read_to_string(sb.config_path()).unwrap();
    std::fs::write(
        sb.config_path(),
        format!(
            "{config}hooks:\n  - event: \"*\"\n    command: [sh, -c, 'echo \"$$SORTIE_EVENT_NAME $$SORTIE_EVENT_OUTCOME $$SORTIE_EVENT_QUESTION_ID\" >> {}']\n",
            log.display()
        ),
    )
    .unwrap();
    let id = sb.add("t", "ready-for-design", &["--label", "needs-decision"]);
    sb.tick();
    sb.tick();
    let events = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = events.lines().map(str::trim).collect();
    assert!(lines.contains(&"run.finished question"), "{events}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("question.asked"))
            .copied()
            .collect::<Vec<_>>(),
        ["question.asked  architect-1-q1"],
        "{events}"
    );
    assert!(!events.contains("tracker_pipeline.handoff"), "{events}");
    comment(&sb, &id, "ana", "/answer 2");
    sb.tick();
    let events = std::fs::read_to_string(&log).unwrap();
    assert!(
        events.contains("tracker_pipeline.handoff success"),
        "{events}"
    );
}

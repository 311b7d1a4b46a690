//! Questions through the ticket (issue #34) with the real Claude Code and Codex CLIs on the
//! local board, against the scripted model server: the agent asks through its result file,
//! a person answers `/answer 2`, and the run that goes on resumes the agent's session (the
//! model server sees the earlier turns) with the answer in the new turn; with
//! `resume: false` it starts fresh, and the question and the answer are in its prompt.

use sortie::block::question::parse_question_blocks;
use sortie::block::OutcomeBlock;

use crate::agent_pipeline::{agent_yaml, Cli};
use crate::common::{repo, Sandbox};
use crate::model_server::{ModelServer, Step};

/// The shell line that writes a result file.
fn result_file(yaml: &str) -> Step {
    Step::Shell(format!("printf '{yaml}' > \"$SORTIE_RESULT_FILE\""))
}

fn config(agent: &str) -> String {
    format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done, cancelled]
{agent}pipeline_stages:
  - role: architect
    claim_status: ready-for-design
    in_progress_status: designing
    success_status: design-approved
    failure_status: design-blocked
"#,
        roles = repo().join("roles").display()
    )
}

/// The conversation a model call carried, as text.
fn conversation(body: &serde_json::Value) -> String {
    if body["messages"].is_array() {
        body["messages"].to_string()
    } else {
        body["input"].to_string()
    }
}

fn asks_and_goes_on(cli: Cli, resume: bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(ModelServer::start(vec![], None, "/nonexistent"));
    let home = crate::agent_clis::scratch_dir();
    let agent = agent_yaml(cli, &server, home.path());
    let mut extra = format!("  resume: {resume}\n");
    if let Cli::Claude = cli {
        extra.push_str("  allowed_tools: [Bash]\n");
    }
    let agent = agent.replacen("agent:\n", &format!("agent:\n{extra}"), 1);
    // The state root outside `/tmp` (as it is in production): Codex's workspace-write
    // sandbox lets commands write the workspace and `/tmp` only, so this proves the
    // result file's directory is made writable (`--add-dir`).
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config(&agent).replace(
        "state_root: state",
        &format!("state_root: {}", state.path().display()),
    );
    let sb = Sandbox::with_config(&config);
    let id = sb.add("Export to CSV", "ready-for-design", &[]);
    let workspace = sortie::agent::workspace_dir(state.path(), &id);
    server.set_workspace(&workspace.display().to_string());

    // Run 1: the agent asks.
    server.script(
        vec![
            result_file(
                "outcome: question\\nquestion: Which API should the export use?\\noptions: [REST v2, GraphQL]\\ncontext: MOCK-CONTEXT both exist\\n",
            ),
            Step::Text("MOCK-ASKED".into()),
        ],
        None,
    );
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"][0]["outcome"], "question",
        "{cli:?}: {report:#}"
    );
    assert_eq!(sb.ticket(&id).status, "ready-for-design", "{cli:?}");
    let asked: usize = sb
        .comments(&id)
        .iter()
        .map(|c| parse_question_blocks(&c.body).len())
        .sum();
    assert_eq!(asked, 1, "{cli:?}");
    let calls_before = server.model_calls().len();

    // A person answers; run 2 goes on.
    sb.ok(&[
        "board",
        "comment",
        "--board",
        "board",
        &id,
        "--author",
        "ana",
        "--body",
        "/answer 2",
    ]);
    server.script(
        vec![
            result_file("outcome: success\\nsummary: MOCK-DONE with GraphQL\\n"),
            Step::Text("MOCK-DONE".into()),
        ],
        None,
    );
    let report = sb.tick_json(&[]);
    assert_eq!(
        report["runs"][0]["outcome"], "success",
        "{cli:?}: {report:#}"
    );
    assert_eq!(report["runs"][0]["attempt"], 1, "{cli:?}: {report:#}");
    assert_eq!(sb.ticket(&id).status, "design-approved", "{cli:?}");
    let blocks = sb.blocks(&id);
    let Some(OutcomeBlock::Success(s)) = blocks.last() else {
        panic!("{cli:?}: {blocks:#?}")
    };
    assert_eq!(
        (s.stage_attempt, s.summary.as_str()),
        (1, "MOCK-DONE with GraphQL")
    );

    // What run 2's first model call carried.
    let calls = server.model_calls();
    let first = conversation(&calls[calls_before].body);
    assert!(
        first.contains("Answer (from ana): GraphQL"),
        "{cli:?}: the new turn carries the answer: {first}"
    );
    assert!(
        first.contains("Which API should the export use?"),
        "{cli:?}: and the question: {first}"
    );
    let earlier_turns = first.contains("MOCK-ASKED");
    assert_eq!(
        earlier_turns,
        resume,
        "{cli:?}: resume {resume}: the earlier turns are {}in the call: {first}",
        if resume { "" } else { "not " }
    );
}

#[test]
fn claude_code_resumes_the_asking_session_with_the_answer() {
    asks_and_goes_on(Cli::Claude, true);
}

#[test]
fn claude_code_without_resume_starts_fresh_with_question_and_answer() {
    asks_and_goes_on(Cli::Claude, false);
}

#[test]
fn codex_resumes_the_asking_session_with_the_answer() {
    asks_and_goes_on(Cli::Codex, true);
}

#[test]
fn codex_without_resume_starts_fresh_with_question_and_answer() {
    asks_and_goes_on(Cli::Codex, false);
}

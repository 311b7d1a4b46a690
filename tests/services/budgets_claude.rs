//! Issue #37: the real Claude Code CLI, against the scripted model server, whose usage
//! grows past its stage's `max_tokens_per_run`: sortie stops it at the usage event that
//! reaches the limit, the ticket gets a `budget.exceeded` block with the figures, the
//! usage until then is recorded, and the next ticket runs.

use sortie::block::OutcomeBlock;

use crate::agent_pipeline::{agent_yaml, Cli};
use crate::common::{repo, Sandbox};
use crate::model_server::{ModelServer, Step, CLAUDE_CALL};

#[test]
fn claude_code_past_its_token_limit_is_stopped_with_its_usage_and_the_next_ticket_runs() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every model call asks for one more tool call: left alone, the CLI goes on until its
    // `max_turns`.
    let server = rt.block_on(ModelServer::start(
        vec![],
        Some(Step::Shell("true".into())),
        "/nonexistent",
    ));
    let home = crate::agent_clis::scratch_dir();
    let limit = 3000;
    let config = format!(
        "tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
{agent}budgets: {{per_stage: {{architect: {{max_tokens_per_run: {limit}}}}}}}
pipeline_stages:
  - {{role: architect, claim_status: ready, success_status: done, failure_status: failed}}
",
        roles = repo().join("roles").display(),
        agent = agent_yaml(Cli::Claude, &server, home.path()),
    );
    let sb = Sandbox::with_config(&config);
    let grows = sb.add("grows", "ready", &[]);
    let next = sb.add("small", "ready", &[]);

    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], grows.as_str(), "{report:#}");
    assert_eq!(
        report["runs"][0]["reason_code"], "budget.exceeded",
        "{report:#}"
    );
    let blocks = sb.blocks(&grows);
    let Some(OutcomeBlock::Failure(f)) = blocks.last() else {
        panic!("{blocks:?}")
    };
    let per_call: u64 = CLAUDE_CALL.iter().sum();
    let stopped_at: u64 = f
        .detail
        .strip_prefix("stopped at ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {:?}", f.detail));
    assert!(
        f.detail.contains(&format!(
            "budgets.per_stage.architect.max_tokens_per_run is {limit} tokens"
        )),
        "{}",
        f.detail
    );
    // Within one usage event (one model call) of the limit: at or past it, and the
    // event before was under it.
    assert!(
        stopped_at >= limit && stopped_at < limit + per_call,
        "stopped at {stopped_at}, limit {limit}, {per_call} per call: {}",
        f.detail
    );
    assert!(
        server.billed().calls < 10,
        "stopped before its max_turns: {:?}",
        server.billed()
    );
    assert_eq!(sb.ticket(&grows).status, "failed");
    // The usage until the stop is recorded: the figure the block names.
    let status = sb.status_json();
    let row = status["usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["ticket_id"] == grows.as_str())
        .unwrap_or_else(|| panic!("the stopped run's usage is recorded: {status:#}"));
    let recorded: u64 = [
        "tokens_in",
        "tokens_out",
        "cache_read_tokens",
        "cache_write_tokens",
    ]
    .iter()
    .map(|k| row[k].as_u64().unwrap())
    .sum();
    assert_eq!(recorded, stopped_at, "{row}");

    // The next ticket runs, and succeeds within its budget.
    server.script(vec![Step::Text("MOCK-DONE architect".into())], None);
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["ticket"], next.as_str(), "{report:#}");
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    assert_eq!(sb.ticket(&next).status, "done");
}

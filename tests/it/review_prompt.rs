//! Issue #33, a fresh reviewer gets the change and the evidence: a stage with
//! `review:` is given the branch's diff against where it left its base, and what
//! sortie's checks saw of the earlier stage, in its prompt (`roles/qa.md`).

use std::process::Command;

use crate::common::{repo, Sandbox};
use crate::git_workspaces::bare_remote;

#[test]
fn a_reviewing_stage_is_given_the_diff_and_the_earlier_stages_checks() {
    let sb = Sandbox::with_config("");
    let remote = bare_remote(sb.path());
    let prompts = sb.path().join("prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    let agent = sb.path().join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncat > {p}/$SORTIE_ROLE.txt\n\
if [ \"$SORTIE_ROLE\" = backend ]; then\n\
  echo 'fn widget_turns() -> u32 {{ 2 }}' > widget.rs\n\
  git add widget.rs && git -c user.name=Agent -c user.email=a@example.com commit -q -m 'backend: the widget'\n\
  printf 'outcome: success\\nsummary: built the widget\\n' > \"$SORTIE_RESULT_FILE\"\n\
else\n\
  printf 'outcome: success\\nno_change_needed: true\\nsummary: reviewed\\n' > \"$SORTIE_RESULT_FILE\"\n\
fi\n",
            p = prompts.display()
        ),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&agent)
        .status()
        .unwrap();
    let config = format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent: {{command: ["{agent}"], timeout_seconds: 60}}
workspace:
  prune_every_ticks: 0
  git: {{url: "{remote}"}}
pipeline_stages:
  - role: backend
    claim_status: todo
    success_status: review
    verify:
      commands: [["sh", "-c", "echo 'test result: ok. 7 passed; 0 failed; 0 ignored'"]]
  - role: qa
    claim_status: review
    success_status: done
    requires_prior_role: backend
    review: {{fresh_session: true}}
"#,
        roles = repo().join("roles").display(),
        agent = agent.display(),
        remote = remote.display(),
    );
    std::fs::write(sb.config_path(), config).unwrap();
    let id = sb.add("Build the widget", "todo", &[]);
    for _ in 0..3 {
        if sb.ticket(&id).status == "done" {
            break;
        }
        sb.tick();
    }
    assert_eq!(sb.ticket(&id).status, "done");
    let qa = std::fs::read_to_string(prompts.join("qa.txt")).unwrap();
    assert!(qa.contains("## The change under review"), "{qa}");
    assert!(qa.contains("widget.rs | 1 +"), "the diff's stat: {qa}");
    assert!(
        qa.contains("+fn widget_turns() -> u32 { 2 }"),
        "the diff itself: {qa}"
    );
    assert!(
        qa.contains("sortie ran its checks after backend"),
        "the earlier stage's evidence: {qa}"
    );
    assert!(qa.contains("(7 passed, 0 failed)"), "{qa}");
    let backend = std::fs::read_to_string(prompts.join("backend.txt")).unwrap();
    assert!(
        !backend.contains("The change under review"),
        "a stage without `review:` gets no diff"
    );
}

//! Symphony conformance (#39): the prompt's ticket variables (item 3) and the dispatch
//! order (item 12), through the binary on a local board whose ticket files are written
//! by hand, as a person (or another tool) writes them.

use crate::common;

use common::Sandbox;

/// A one-stage pipeline (`ready` -> `done`) whose role file is `template` and whose
/// agent copies its prompt into `prompts/<ticket>.md`.
fn sandbox(template: &str) -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("roles")).unwrap();
    std::fs::create_dir_all(dir.path().join("prompts")).unwrap();
    std::fs::write(dir.path().join("roles/worker.md"), template).unwrap();
    let config = format!(
        r#"tracker: {{kind: local, path: board}}
state_root: state
roles_dir: roles
concurrency: {{max_in_flight: 10, per_role_max_in_flight: 10}}
agent: {{command: ["sh", "-c", "cp \"$$SORTIE_PROMPT_FILE\" {prompts}/$$SORTIE_TICKET_ID.md"]}}
pipeline_stages:
  - {{role: worker, claim_status: ready, success_status: done}}
terminal_states: [done]
"#,
        prompts = dir.path().join("prompts").display(),
    );
    std::fs::write(dir.path().join("pipeline.yaml"), config).unwrap();
    let sb = Sandbox { dir };
    sb.ok(&["board", "init", "board"]);
    sb
}

/// Write ticket `id` with `front` matter lines (besides title) straight to the board.
fn write_ticket(sb: &Sandbox, id: &str, front: &str) {
    let dir = sb.board_path().join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ticket.md"),
        format!("---\ntitle: ticket {id}\n{front}---\nThe body of {id}.\n"),
    )
    .unwrap();
}

/// Item 3, template variables: `ticket` carries every normalized field the tracker
/// reads, blockers, assignees and both times included.
#[test]
fn template_variables_carry_every_normalized_ticket_field() {
    let sb = sandbox(
        "id={{ ticket.id }}\ntitle={{ ticket.title }}\nstatus={{ ticket.status }}\n\
         labels={{ ticket.labels | join(',') }}\npriority={{ ticket.priority }}\n\
         assignees={{ ticket.assignees | join(',') }}\n\
         created={{ ticket.created_at }}\nupdated={{ ticket.updated_at }}\n\
         {% for b in ticket.blockers %}blocker={{ b.id }}:{{ b.status }}:{{ b.closed }}\n{% endfor %}\
         body={{ ticket.body }}\n",
    );
    write_ticket(
        &sb,
        "1",
        "status: done\ncreated_at: 2026-01-01T08:00:00Z\nupdated_at: 2026-01-01T08:00:00Z\n",
    );
    write_ticket(
        &sb,
        "2",
        "status: ready\nlabels: [api, urgent]\npriority: 2\nassignees: [alice, bob]\n\
         blocked_by: [1]\ncreated_at: 2026-02-03T10:30:00+02:00\nupdated_at: 2026-02-04T09:15:00Z\n",
    );
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    let prompt = std::fs::read_to_string(sb.path().join("prompts/2.md")).unwrap();
    assert_eq!(
        prompt,
        "id=2\ntitle=ticket 2\nstatus=ready\nlabels=api,urgent\npriority=2\n\
         assignees=alice,bob\ncreated=2026-02-03T08:30:00Z\nupdated=2026-02-04T09:15:00Z\n\
         blocker=1:done:False\nbody=The body of 2.\n\n",
    );
}

/// Item 12, sort order: priority 1-4 first, then no priority, then the oldest creation
/// time as an instant (an offset is not compared as text), then the id. Creation order
/// and id order differ here.
#[test]
fn sort_order_priority_then_oldest_creation_instant_then_id() {
    let sb = sandbox("{{ ticket.id }}\n");
    // 10:30+02:00 is 08:30Z: older than 09:00Z, though it reads later as text.
    for (id, front) in [
        ("1", "created_at: 2026-01-01T12:00:00Z\n"),
        ("2", "created_at: 2026-01-01T09:00:00Z\n"),
        ("3", "created_at: 2026-01-01T10:30:00+02:00\n"),
        ("4", "priority: 2\ncreated_at: 2026-01-01T13:00:00Z\n"),
        ("5", "priority: 1\ncreated_at: 2026-01-01T14:00:00Z\n"),
        ("6", "priority: 2\ncreated_at: 2026-01-01T07:00:00Z\n"),
        ("7", "created_at: 2026-01-01T09:00:00Z\n"),
    ] {
        write_ticket(
            &sb,
            id,
            &format!("status: ready\n{front}updated_at: 2026-01-02T00:00:00Z\n"),
        );
    }
    let report = sb.tick_json(&["--dry-run"]);
    let order: Vec<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ticket"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["5", "6", "4", "3", "2", "7", "1"], "{report:#}");
}

/// Issue #52, item 17 (17.1.15, declared in docs/conformance.md): `attempt` is the
/// stage attempt, 1 on the first run of a role on a ticket, never null as Symphony's
/// first attempt is; a second attempt after a failure is 2.
#[test]
fn attempt_is_one_on_the_first_run_not_null() {
    let sb = sandbox("attempt={{ attempt }} none={{ attempt is none }}\n");
    write_ticket(&sb, "1", "status: ready\n");
    let report = sb.tick_json(&[]);
    assert_eq!(report["runs"][0]["outcome"], "success", "{report:#}");
    let prompt = std::fs::read_to_string(sb.path().join("prompts/1.md")).unwrap();
    assert_eq!(prompt, "attempt=1 none=False\n");
}

use serde_json::json;

use super::policy::{choose, decide, may_read, may_write, Confinement, ToolFacts};
use super::usage;
use super::*;

/// A session in a fresh workspace, its handshake answered up to the prompt.
struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    session: AcpSession,
}

fn options(dir: &std::path::Path) -> AcpOptions {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    AcpOptions {
        permissions: AcpPermissions::Workspace,
        model: None,
        resume: None,
        workspace: ws,
        result_file: dir.join("run/result.yaml"),
        prompt: "Do the thing.".into(),
    }
}

fn sent(session: &mut AcpSession) -> Vec<Value> {
    session
        .take_outgoing()
        .iter()
        .map(|l| {
            assert!(!l.contains('\n'), "one message, one line: {l}");
            serde_json::from_str(l).unwrap()
        })
        .collect()
}

fn feed(session: &mut AcpSession, message: Value) -> Taken {
    session.line(&message.to_string())
}

fn prompting(edit: impl FnOnce(&mut AcpOptions)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    edit(&mut opts);
    let ws = opts.workspace.canonicalize().unwrap();
    let mut session = AcpSession::new(opts);
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
    );
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/prompt");
    Fixture {
        _dir: dir,
        ws,
        session,
    }
}

fn stop(session: &mut AcpSession, reason: &str) {
    feed(
        session,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": reason}}),
    );
}

#[test]
fn the_handshake_goes_initialize_new_prompt_with_ids_and_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = AcpSession::new(options(dir.path()));
    let out = sent(&mut session);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["method"], "initialize");
    assert_eq!(out[0]["id"], 0);
    assert_eq!(out[0]["jsonrpc"], "2.0");
    assert_eq!(session.handshake_waiting(), Some("initialize"));
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/new");
    let ws = dir.path().join("ws").canonicalize().unwrap();
    assert_eq!(out[0]["params"]["cwd"], ws.display().to_string());
    assert_eq!(out[0]["params"]["mcpServers"], json!([]));
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/prompt");
    assert_eq!(out[0]["params"]["sessionId"], "s1");
    let text = out[0]["params"]["prompt"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Do the thing."));
    assert!(text.contains("run/result.yaml"), "{text}");
    assert_eq!(session.handshake_waiting(), None);
    assert!(!session.finished());
    stop(&mut session, "end_turn");
    assert!(session.finished());
    assert_eq!(session.decisive(), None);
}

#[test]
fn stop_reasons_map_to_outcomes() {
    let cases = [
        ("max_tokens", "agent.max_tokens", Category::Policy),
        ("max_turn_requests", "agent.max_turns", Category::Policy),
        ("refusal", "agent.refusal", Category::Policy),
        ("cancelled", "agent.cancelled_by_agent", Category::Transient),
        ("tea_break", "agent.stop_reason", Category::Unknown),
    ];
    for (reason, code, category) in cases {
        let mut f = prompting(|_| {});
        stop(&mut f.session, reason);
        match f.session.decisive() {
            Some(AgentOutcome::Failure {
                reason_code,
                category: got,
                ..
            }) => assert_eq!((reason_code.as_str(), got), (code, category), "{reason}"),
            other => panic!("{reason}: {other:?}"),
        }
    }
    // Cancelled after sortie's own session/cancel: not a failure, the run is cancelled.
    let mut f = prompting(|_| {});
    f.session.cancel();
    let out = sent(&mut f.session);
    assert_eq!(out[0]["method"], "session/cancel");
    assert_eq!(out[0]["params"]["sessionId"], "s1");
    assert!(out[0].get("id").is_none(), "a notification: {}", out[0]);
    f.session.cancel();
    assert!(sent(&mut f.session).is_empty(), "sent once");
    stop(&mut f.session, "cancelled");
    assert_eq!(f.session.decisive(), None);
}

#[test]
fn end_turn_without_a_result_file_is_the_last_message_unless_something_was_denied() {
    let mut f = prompting(|_| {});
    for text in ["Looked. ", "All good."] {
        feed(
            &mut f.session,
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}}),
        );
    }
    stop(&mut f.session, "end_turn");
    assert_eq!(
        f.session.outcome("exit status 0", "", ""),
        AgentOutcome::Success {
            summary: "Looked. All good.".into(),
            artifacts: BTreeMap::new()
        }
    );

    let mut f = prompting(|_| {});
    feed(
        &mut f.session,
        json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {
            "sessionId": "s1", "toolCall": {"toolCallId": "t", "title": "rm", "kind": "delete",
            "locations": [{"path": "/etc/passwd"}]},
            "options": [{"optionId": "a", "kind": "allow_once"}, {"optionId": "r", "kind": "reject_once"}]}}),
    );
    let answer = sent(&mut f.session);
    assert_eq!(answer[0]["id"], 7);
    assert_eq!(answer[0]["result"]["outcome"]["optionId"], "r");
    assert!(f.session.take_log()[0]
        .starts_with("permission denied (policy workspace): rm [delete] on /etc/passwd"));
    stop(&mut f.session, "end_turn");
    match f.session.outcome("exit status 0", "", "") {
        AgentOutcome::Failure {
            reason_code,
            detail,
            ..
        } => {
            assert_eq!(reason_code, "agent.permission_denied");
            assert!(
                detail.contains("/etc/passwd is outside the workspace"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn framing_tolerates_garbage_and_answers_bad_requests() {
    let mut f = prompting(|_| {});
    assert_eq!(f.session.line("not json"), Taken::Noise);
    assert_eq!(f.session.line("[1,2]"), Taken::Noise);
    assert_eq!(f.session.line("{\"jsonrpc\":\"2.0\"}"), Taken::Noise);
    // An answer to nothing sortie asked.
    assert_eq!(
        f.session
            .line("{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}"),
        Taken::Noise
    );
    assert!(sent(&mut f.session).is_empty());
    assert_eq!(
        f.session
            .line("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":7}"),
        Taken::Noise
    );
    assert_eq!(sent(&mut f.session)[0]["error"]["code"], -32600);
    feed(
        &mut f.session,
        json!({"jsonrpc": "2.0", "id": "x", "method": "terminal/create", "params": {}}),
    );
    let out = sent(&mut f.session);
    assert_eq!(out[0]["id"], "x");
    assert_eq!(out[0]["error"]["code"], -32601);
    // Still waiting for the prompt's answer: nothing broke.
    assert!(!f.session.finished());
}

#[test]
fn an_error_answer_to_the_handshake_fails_the_run_and_a_failed_load_starts_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = AcpSession::new(options(dir.path()));
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -32000, "message": "Authentication required"}}),
    );
    assert!(session.finished());
    match session.decisive() {
        Some(AgentOutcome::Failure { reason_code, .. }) => assert_eq!(reason_code, "agent.auth"),
        other => panic!("{other:?}"),
    }

    let mut opts = options(dir.path());
    opts.resume = Some("old".into());
    let mut session = AcpSession::new(opts);
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"agentCapabilities": {"loadSession": true}}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/load");
    assert_eq!(out[0]["params"]["sessionId"], "old");
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "gone"}}),
    );
    assert_eq!(sent(&mut session)[0]["method"], "session/new");
    assert_eq!(session.notes().len(), 1);
    assert!(session.notes()[0].contains("session/load of session old failed (gone)"));
}

#[test]
fn a_resume_without_load_session_starts_fresh_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.resume = Some("old".into());
    let mut session = AcpSession::new(opts);
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"agentCapabilities": {}}}),
    );
    assert_eq!(sent(&mut session)[0]["method"], "session/new");
    assert!(session.notes()[0].contains("does not offer session/load"));
}

#[test]
fn a_model_refused_by_set_model_is_tried_as_a_config_option_then_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.model = Some("m1".into());
    let mut session = AcpSession::new(opts);
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {}}),
    );
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/set_model");
    assert_eq!(out[0]["params"]["modelId"], "m1");
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "no"}}),
    );
    let out = sent(&mut session);
    assert_eq!(out[0]["method"], "session/set_config_option");
    assert_eq!(out[0]["params"]["configId"], "model");
    assert_eq!(out[0]["params"]["value"], "m1");
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "no"}}),
    );
    match session.decisive() {
        Some(AgentOutcome::Failure { reason_code, .. }) => assert_eq!(reason_code, "agent.config"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn updates_feed_the_live_run_and_a_replayed_history_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.resume = Some("old".into());
    let mut session = AcpSession::new(opts);
    sent(&mut session);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 0, "result": {"agentCapabilities": {"loadSession": true}}}),
    );
    let update = |kind: &str, rest: Value| {
        let mut u = rest;
        u["sessionUpdate"] = json!(kind);
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "old", "update": u}})
    };
    // History replayed during the load.
    feed(
        &mut session,
        update(
            "agent_message_chunk",
            json!({"content": {"type": "text", "text": "old"}}),
        ),
    );
    assert_eq!(session.last_event().1, None);
    feed(
        &mut session,
        json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
    );
    assert_eq!(session.session_id(), Some("old"));
    feed(
        &mut session,
        update(
            "plan",
            json!({"entries": [
            {"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}]}),
        ),
    );
    assert_eq!(session.last_event().1, Some(("plan", "2 steps; now: b")));
    feed(
        &mut session,
        update(
            "tool_call",
            json!({"toolCallId": "t1", "title": "Read a.rs", "kind": "read"}),
        ),
    );
    assert_eq!(
        session.last_event().1,
        Some(("tool_call", "Read a.rs [read]"))
    );
    assert_eq!(session.turns(), Some(1));
    feed(
        &mut session,
        update(
            "tool_call_update",
            json!({"toolCallId": "t1", "status": "completed"}),
        ),
    );
    assert_eq!(
        session.last_event().1,
        Some(("tool_result", "Read a.rs: completed"))
    );
    feed(
        &mut session,
        update(
            "agent_message_chunk",
            json!({"content": {"type": "text", "text": "Done."}}),
        ),
    );
    assert_eq!(session.last_event().1, Some(("message", "Done.")));
    // A message after a tool result is the next model call.
    assert_eq!(session.turns(), Some(2));
    assert_eq!(session.usage(), None);
}

#[test]
fn the_workspace_policy_allows_inside_and_denies_outside_fetches_and_mode_switches() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let room = Confinement::new(&ws, &dir.path().join("run/result.yaml"));
    let facts = |call: Value| {
        let mut f = ToolFacts::default();
        f.merge(&call);
        f
    };
    let policy = AcpPermissions::Workspace;
    let inside = facts(json!({"kind": "edit", "locations": [{"path": ws.join("src/a.rs")}]}));
    assert!(decide(policy, &inside, &room).allow);
    let relative = facts(json!({"kind": "edit", "rawInput": {"file_path": "src/b.rs"}}));
    assert!(decide(policy, &relative, &room).allow);
    let escape = facts(json!({"kind": "edit", "rawInput": {"path": "src/../../x"}}));
    let verdict = decide(policy, &escape, &room);
    assert!(!verdict.allow);
    assert!(
        verdict.why.contains("is outside the workspace"),
        "{}",
        verdict.why
    );
    let result = facts(json!({"rawInput": {"file_path": dir.path().join("run/result.yaml")}}));
    assert!(
        decide(policy, &result, &room).allow,
        "the result file may be written"
    );
    let command = facts(json!({"kind": "execute", "rawInput": {"command": "cargo test"}}));
    assert!(decide(policy, &command, &room).allow);
    let elsewhere = facts(json!({"kind": "execute", "rawInput": {"command": "ls", "cwd": "/"}}));
    assert!(!decide(policy, &elsewhere, &room).allow);
    assert!(!decide(policy, &facts(json!({"kind": "fetch"})), &room).allow);
    let web = facts(json!({"title": "WebFetch", "rawInput": {"url": "https://example.com"}}));
    assert!(!decide(policy, &web, &room).allow);
    assert!(!decide(policy, &facts(json!({"kind": "switch_mode"})), &room).allow);
    // A symbolic link out of the workspace is outside.
    std::os::unix::fs::symlink("/etc", ws.join("etc")).unwrap();
    let linked = facts(json!({"kind": "edit", "locations": [{"path": ws.join("etc/hosts")}]}));
    assert!(!decide(policy, &linked, &room).allow);

    assert!(decide(AcpPermissions::AllowAll, &escape, &room).allow);
    assert!(!decide(AcpPermissions::DenyAll, &inside, &room).allow);
}

#[test]
fn options_are_chosen_by_kind_once_first() {
    let options = json!([
        {"optionId": "aa", "kind": "allow_always"},
        {"optionId": "a", "kind": "allow_once"},
        {"optionId": "r", "kind": "reject_always"}
    ]);
    assert_eq!(choose(&options, true).as_deref(), Some("a"));
    assert_eq!(choose(&options, false).as_deref(), Some("r"));
    assert_eq!(
        choose(&json!([{"optionId": "a", "kind": "allow_once"}]), false),
        None
    );
    assert_eq!(choose(&json!(null), true), None);
}

#[test]
fn file_requests_are_confined_and_a_missing_file_reads_empty() {
    let mut f = prompting(|_| {});
    let ws = f.ws.clone();
    std::fs::write(ws.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let mut ask = |method: &str, params: Value| {
        feed(
            &mut f.session,
            json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params}),
        );
        sent(&mut f.session).remove(0)
    };
    let read = ask(
        "fs/read_text_file",
        json!({"path": ws.join("a.txt"), "line": 2, "limit": 1}),
    );
    assert_eq!(read["result"]["content"], "two\n");
    let missing = ask("fs/read_text_file", json!({"path": ws.join("new.txt")}));
    assert_eq!(missing["result"]["content"], "");
    let outside = ask("fs/read_text_file", json!({"path": "/etc/hostname"}));
    assert!(outside["error"]["message"]
        .as_str()
        .unwrap()
        .contains("outside the workspace"));
    let write = ask(
        "fs/write_text_file",
        json!({"path": ws.join("d/b.txt"), "content": "hi"}),
    );
    assert_eq!(write["result"], json!({}));
    assert_eq!(std::fs::read_to_string(ws.join("d/b.txt")).unwrap(), "hi");
    let refused = ask(
        "fs/write_text_file",
        json!({"path": "/tmp/sortie-acp-outside", "content": "x"}),
    );
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(!std::path::Path::new("/tmp/sortie-acp-outside").exists());

    let dir = tempfile::tempdir().unwrap();
    let room = Confinement::new(&dir.path().join("ws"), &dir.path().join("r.yaml"));
    let r = dir.path().join("r.yaml").display().to_string();
    let w = dir.path().join("ws/x").display().to_string();
    assert!(may_write(AcpPermissions::DenyAll, &r, &room));
    assert!(!may_write(AcpPermissions::DenyAll, &w, &room));
    assert!(may_read(AcpPermissions::DenyAll, &w, &room));
    assert!(may_write(AcpPermissions::AllowAll, "/anywhere", &room));
}

#[test]
fn usage_shapes_of_each_agent() {
    // Gemini CLI: `_meta.quota.token_count` on the prompt answer.
    let gemini = json!({"stopReason": "end_turn",
        "_meta": {"quota": {"token_count": {"input_tokens": 2300, "output_tokens": 120}}}});
    assert_eq!(
        usage::of_answer(&gemini),
        Some(Usage {
            input_tokens: 2300,
            output_tokens: 120,
            ..Usage::default()
        })
    );
    // OpenCode: the standard `usage`; its total shows the cache apart from the input.
    let opencode = json!({"usage": {"totalTokens": 900, "inputTokens": 700, "outputTokens": 150,
        "cachedReadTokens": 50}});
    let got = usage::of_answer(&opencode).unwrap();
    assert_eq!((got.input_tokens, got.cache_read_tokens), (700, 50));
    // A total that counts the cache inside the input: the cache is taken out of it.
    let inside = json!({"totalTokens": 1000, "inputTokens": 900, "outputTokens": 100,
        "cachedReadTokens": 600});
    let got = usage::tokens(&inside).unwrap();
    assert_eq!(
        (got.input_tokens, got.cache_read_tokens, got.total_tokens()),
        (300, 600, 1000)
    );
    // Reasoning counted apart from the output: added to it (it is a part of output here).
    let thoughts = json!({"totalTokens": 1260, "inputTokens": 1000, "outputTokens": 50,
        "thoughtTokens": 10, "cachedReadTokens": 200});
    let got = usage::tokens(&thoughts).unwrap();
    assert_eq!((got.output_tokens, got.reasoning_tokens), (60, 10));
    // Qwen Code: on the update.
    let update = json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
        "_meta": {"usage": {"promptTokens": 10, "completionTokens": 2}}}});
    assert_eq!(
        usage::of_update(&update).map(|u| u.total_tokens()),
        Some(12)
    );
    // Nothing reported: unknown, never zero.
    assert_eq!(usage::of_answer(&json!({"stopReason": "end_turn"})), None);
    assert_eq!(usage::tokens(&json!({"totalTokens": 5})), None);
}

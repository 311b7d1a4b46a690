//! The Jira adapter against the in-memory model, call by call: identity, listing with
//! `tracker.jql`, tickets, comments in ADF and wiki markup (whose blocks count and
//! whose do not), faults, `check`, config errors and `sortie tracker check`.

use crate::jira_model::{self, JiraModel, Mode, BOT_ACCOUNT, BOT_NAME, PROJECT};

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use sortie::block::{parse_blocks, OutcomeBlock};
use sortie::config::{Config, TicketFilter};
use sortie::tracker::jira::{JiraSettings, JiraTracker, PAGE_SIZE};
use sortie::tracker::{Tracker, TrackerError};

fn settings(model: &JiraModel, jql: Option<&str>) -> JiraSettings {
    JiraSettings {
        url: model.url(),
        project: PROJECT.into(),
        api_version: model.mode.version(),
        jql: jql.map(str::to_string),
        transitions: BTreeMap::new(),
        priority_order: ["Highest", "High", "Medium", "Low", "Lowest"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        claim_statuses: vec!["Ready for Design".into()],
        pipeline_statuses: vec!["ready for design".into()],
        page_size: PAGE_SIZE,
        link_type: "Blocks".into(),
    }
}

fn adapter(model: &JiraModel, jql: Option<&str>) -> JiraTracker {
    let (email, token) = match model.mode {
        Mode::Cloud => (Some(jira_model::EMAIL.into()), jira_model::CLOUD_TOKEN),
        Mode::DataCenter => (None, jira_model::DC_TOKEN),
    };
    JiraTracker::new(settings(model, jql), email, token.into(), "$E / $T".into()).unwrap()
}

fn names(statuses: &[&str]) -> Vec<String> {
    statuses.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn identity_is_the_account_id_on_cloud_and_the_user_name_on_data_center() {
    let cloud = JiraModel::start(Mode::Cloud).await;
    assert_eq!(adapter(&cloud, None).identity().await.unwrap(), BOT_ACCOUNT);
    let dc = JiraModel::start(Mode::DataCenter).await;
    assert_eq!(adapter(&dc, None).identity().await.unwrap(), BOT_NAME);
}

#[tokio::test]
async fn rejected_credentials_are_unauthorized_naming_the_project_and_the_variables() {
    let model = JiraModel::start(Mode::Cloud).await;
    let t = JiraTracker::new(
        settings(&model, None),
        Some("bot@acme.test".into()),
        "wrong".into(),
        "$JIRA_EMAIL / $JIRA_TOKEN".into(),
    )
    .unwrap();
    match t.list(&names(&["Ready for Design"])).await {
        Err(TrackerError::Unauthorized(m)) => {
            assert!(m.contains("project PROJ"), "{m}");
            assert!(m.contains("$JIRA_EMAIL / $JIRA_TOKEN"), "{m}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
}

#[tokio::test]
async fn the_jql_clause_narrows_every_listing_and_jira_s_refusal_is_shown() {
    let model = JiraModel::start(Mode::Cloud).await;
    let ok = model.add_issue("ok", "Ready for Design", &["agent-ok"]);
    model.add_issue("not ok", "Ready for Design", &[]);
    model.add_issue("ok but elsewhere", "On Hold", &["agent-ok"]);
    let t = adapter(&model, Some("labels = agent-ok"));
    let listing = t.list(&names(&["Ready for Design"])).await.unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [ok.as_str()]);

    let t = adapter(&model, Some("frobnicate ~ 3"));
    match t.list(&names(&["Ready for Design"])).await {
        Err(TrackerError::Invalid(m)) => {
            assert!(
                m.contains("the model does not understand"),
                "Jira's text: {m}"
            );
            assert!(m.contains("tracker.jql"), "{m}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[tokio::test]
async fn an_issue_becomes_a_ticket_with_priority_url_and_done_category() {
    let model = JiraModel::start(Mode::DataCenter).await;
    let key = model.add_issue("Export", "Ready for Design", &["csv"]);
    model.edit(&key, |i| i.priority = "High".into());
    let done = model.add_issue("Old", "Done", &[]);
    let t = adapter(&model, None);
    let ticket = t.get(&key).await.unwrap();
    assert_eq!(ticket.title, "Export");
    assert_eq!(ticket.body, "What Export should do.");
    assert_eq!(
        ticket.status, "ready for design",
        "a status the config names is reported in the config's spelling"
    );
    assert_eq!(ticket.labels, ["csv"]);
    assert_eq!(ticket.priority, Some(1), "High is second of five");
    assert_eq!(ticket.url, Some(format!("{}/browse/{key}", model.url())));
    assert!(!ticket.closed);
    assert!(
        t.get(&done).await.unwrap().closed,
        "category done is terminal"
    );
}

#[tokio::test]
async fn a_done_category_status_a_stage_claims_from_is_not_terminal() {
    let model = JiraModel::start(Mode::Cloud).await;
    let key = model.add_issue("t", "Done", &[]);
    let mut s = settings(&model, None);
    s.claim_statuses = vec!["done".into()];
    let t = JiraTracker::new(
        s,
        Some(jira_model::EMAIL.into()),
        jira_model::CLOUD_TOKEN.into(),
        "x".into(),
    )
    .unwrap();
    assert!(!t.get(&key).await.unwrap().closed);
}

#[tokio::test]
async fn a_deleted_issue_is_not_found_and_says_so() {
    let model = JiraModel::start(Mode::Cloud).await;
    let t = adapter(&model, None);
    match t.get("PROJ-404").await {
        Err(TrackerError::NotFound(m)) => assert!(m.contains("deleted"), "{m}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    match t
        .transition("PROJ-404", "Ready for Design", "In Design")
        .await
    {
        Err(TrackerError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

#[tokio::test]
async fn an_issue_moved_to_another_project_is_not_found_under_its_old_key() {
    let model = JiraModel::start(Mode::Cloud).await;
    let key = model.add_issue("t", "Ready for Design", &[]);
    model.move_issue(&key, "OTHER-9");
    let t = adapter(&model, None);
    for result in [
        t.get(&key).await.map(drop),
        t.transition(&key, "Ready for Design", "In Design").await,
    ] {
        match result {
            Err(TrackerError::NotFound(m)) => assert!(m.contains("OTHER-9"), "{m}"),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
    assert_eq!(
        model.issue("OTHER-9").status,
        "Ready for Design",
        "nothing written"
    );
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retryable_with_retry_after() {
    let model = JiraModel::start(Mode::Cloud).await;
    let key = model.add_issue("t", "Ready for Design", &[]);
    let t = adapter(&model, None);
    model.fail("GET", "/issue/", 503, Some(7), 1);
    match t.get(&key).await {
        Err(e @ TrackerError::RateLimited { .. }) => {
            assert!(e.is_retryable());
            assert!(e.to_string().contains("retry after 7s"), "{e}");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    model.fail("GET", "/issue/", 500, None, 1);
    assert!(matches!(
        t.get(&key).await,
        Err(TrackerError::Unavailable(_))
    ));
    assert!(t.get(&key).await.is_ok());
}

#[tokio::test]
async fn no_request_is_sent_while_x_ratelimit_says_none_are_left() {
    let model = JiraModel::start(Mode::Cloud).await;
    let key = model.add_issue("t", "Ready for Design", &[]);
    let t = adapter(&model, None);
    let reset = (chrono::Utc::now() + chrono::Duration::minutes(2)).format("%Y-%m-%dT%H:%MZ");
    model.rate_limit_headers(0, &reset.to_string());
    t.get(&key)
        .await
        .expect("the answer that says none are left");
    assert_eq!(t.rate_limit_remaining(), Some(0));
    let sent = model.log().len();
    match t.get(&key).await {
        Err(TrackerError::RateLimited {
            retry_after: Some(wait),
        }) => {
            assert!((30..=120).contains(&wait.as_secs()), "{wait:?}");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(model.log().len(), sent, "nothing sent before the reset");

    // A 429 without Retry-After waits until X-RateLimit-Reset.
    let fresh = adapter(&model, None);
    model.rate_limit_headers(5, &reset.to_string());
    model.fail("GET", "/issue/", 429, None, 1);
    match fresh.get(&key).await {
        Err(TrackerError::RateLimited {
            retry_after: Some(wait),
        }) => {
            assert!((30..=120).contains(&wait.as_secs()), "{wait:?}");
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert!(
        fresh.get(&key).await.is_ok(),
        "remaining 5: requests go out"
    );
}

#[tokio::test]
async fn comments_round_trip_their_block_in_adf_and_a_quoted_block_does_not_count() {
    let model = JiraModel::start(Mode::Cloud).await;
    let key = model.add_issue("t", "Ready for Design", &[]);
    let t = adapter(&model, None);
    let block = "```yaml sortie:success\nrole: architect\nstage_attempt: 1\nidempotency_key: \
                 a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\n\
                 from_status: Ready for Design\nto_status: Design Approved\nsummary: done\n```\n";
    let body = format!("Designed **it**, see `DESIGN.md`.\n\n{block}");
    t.post_comment(&key, &body, "k").await.unwrap();
    // A person quotes sortie's block in a reply.
    let quoted =
        sortie::block::jira::adf::from_markdown(&format!("> {}", block.replace('\n', "\n> ")));
    assert_eq!(quoted["content"][0]["type"], "blockquote");
    model.add_comment(&key, BOT_ACCOUNT, "Sortie Bot", quoted);

    let comments = t.comments(&key).await.unwrap();
    assert_eq!(comments.len(), 2);
    assert_eq!(comments[0].author, BOT_ACCOUNT);
    let blocks: Vec<OutcomeBlock> = comments
        .iter()
        .flat_map(|c| parse_blocks(&c.body))
        .map(|b| b.unwrap().block)
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "the quoted block is a person talking about it"
    );
    assert_eq!(blocks[0].role(), "architect");
    assert!(
        comments[0]
            .body
            .starts_with("Designed **it**, see `DESIGN.md`."),
        "{}",
        comments[0].body
    );

    // What Jira stores: the code block carries the kind in its text.
    let stored = &model.issue(&key).comments[0].body;
    jira_model::check_adf(stored).unwrap();
    let code = &stored["content"][1];
    assert_eq!(code["type"], "codeBlock");
    assert_eq!(code["attrs"]["language"], "yaml");
    assert!(code["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("# sortie:success\nrole: architect\n"));
}

#[tokio::test]
async fn a_block_survives_jira_dropping_or_renaming_the_code_language() {
    for language in [None, Some("YAML"), Some("text")] {
        let mut code = json!({"type": "codeBlock", "content": [{"type": "text", "text":
            "# sortie:failure\nrole: qa\nstage_attempt: 2\nidempotency_key: \
             b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2\n\
             from_status: Code Review\nto_status: QA Failed\nreason_code: tests.failed\n\
             category: transient\ntransient: true\nnext_action: retry\ndetail: red"}]});
        if let Some(l) = language {
            code["attrs"] = json!({"language": l});
        }
        let doc = json!({"type": "doc", "version": 1, "content": [code]});
        let parsed = parse_blocks(&doc.to_string());
        let [Ok(p)] = parsed.as_slice() else {
            panic!("{language:?}: {parsed:?}");
        };
        assert_eq!(p.block.role(), "qa");
        assert_eq!(p.block.stage_attempt(), 2);
    }
}

#[tokio::test]
async fn data_center_comments_are_wiki_markup_and_a_quoted_macro_does_not_count() {
    let model = JiraModel::start(Mode::DataCenter).await;
    let key = model.add_issue("t", "Ready for Design", &[]);
    let t = adapter(&model, None);
    let block = "```yaml sortie:success\nrole: backend\nstage_attempt: 1\nidempotency_key: \
                 c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3\n\
                 from_status: Design Approved\nto_status: Code Review\nsummary: '{code} and [x]'\n```\n";
    t.post_comment(&key, &format!("Built *it* in {{braces}}.\n\n{block}"), "k")
        .await
        .unwrap();
    let stored = model.issue(&key).comments[0]
        .body
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        stored.starts_with("Built _it_ in \\{braces\\}.\n\n{code:yaml}\n# sortie:success\n")
            && stored.contains("\n? \"summary\"\n: \"\\x7bcode} and [x]\"\n{code}\n"),
        "{stored}"
    );
    model.add_comment(
        &key,
        BOT_NAME,
        "Sortie Bot",
        json!(format!("{{quote}}\n{stored}{{quote}}\n")),
    );
    let comments = t.comments(&key).await.unwrap();
    let blocks: Vec<OutcomeBlock> = comments
        .iter()
        .flat_map(|c| parse_blocks(&c.body))
        .map(|b| b.unwrap().block)
        .collect();
    assert_eq!(blocks.len(), 1, "{comments:#?}");
    let OutcomeBlock::Success(b) = &blocks[0] else {
        panic!()
    };
    assert_eq!(b.summary, "{code} and [x]");
}

#[tokio::test]
async fn an_unclosed_wiki_code_macro_is_reported_as_cut_short() {
    let text = "{code:yaml}\n# sortie:success\nrole: qa\n";
    let parsed = parse_blocks(text);
    let [Err(e)] = parsed.as_slice() else {
        panic!("{parsed:?}");
    };
    assert_eq!(e.line, 1);
    assert!(e.message.contains("closing fence is missing"), "{e}");
}

#[tokio::test]
async fn check_names_missing_statuses_and_the_ones_that_exist() {
    let model = JiraModel::start(Mode::Cloud).await;
    let t = adapter(&model, None);
    let report = t
        .check(&names(&["Ready for Design", "Done", "Designing"]), false)
        .await
        .unwrap();
    let lines: Vec<String> = report
        .checks
        .iter()
        .map(|c| {
            format!(
                "{} {}: {}",
                if c.ok { "ok" } else { "FAIL" },
                c.what,
                c.detail
            )
        })
        .collect();
    assert!(!report.all_ok(), "{lines:#?}");
    assert!(
        lines[0].starts_with(&format!(
            "ok credentials: authenticated as \"Sortie Bot\" ({BOT_ACCOUNT})"
        )),
        "{lines:#?}"
    );
    let missing = lines
        .iter()
        .find(|l| l.contains("status Designing"))
        .unwrap();
    assert!(missing.starts_with("FAIL"), "{missing}");
    assert!(
        missing.contains("In Design") && missing.contains("Ready for Design"),
        "{missing}"
    );
    let done = lines.iter().find(|l| l.contains("status Done")).unwrap();
    assert!(
        done.starts_with("ok") && done.contains("category done"),
        "{done}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("ok board")),
        "{lines:#?}"
    );
}

#[test]
fn jira_config_errors_name_the_field() {
    let base = |tracker: &str| {
        format!(
            "tracker: {tracker}\nagent: {{command: [\"true\"]}}\nterminal_states: [Done]\n\
             pipeline_stages:\n  - role: a\n    claim_status: To Do\n    success_status: Done\n"
        )
    };
    let cases = [
        (
            "{kind: jira, url: https://acme.atlassian.net, project: PROJ, api_version: 4}",
            "tracker.api_version",
            "expected 3 (Jira Cloud) or 2",
        ),
        (
            "{kind: jira, url: https://acme.atlassian.net, project: PROJ, api_version: 2, email_env: E}",
            "tracker.email_env",
            "personal access token alone",
        ),
        (
            "{kind: jira, url: https://acme.atlassian.net, project: 'my proj'}",
            "tracker.project",
            "Jira project key",
        ),
        (
            "{kind: jira, url: acme, project: PROJ}",
            "tracker.url",
            "http:// or https://",
        ),
        (
            "{kind: jira, url: https://acme.atlassian.net, project: PROJ, jql: ' '}",
            "tracker.jql",
            "JQL clause",
        ),
        (
            "{kind: jira, url: https://acme.atlassian.net, project: PROJ, transition: {}}",
            "transition",
            "unknown",
        ),
        (
            "{kind: jira, url: https://acme.atlassian.net, project: PROJ, transitions: {Dnoe: Finish}}",
            "tracker.transitions.Dnoe",
            "no status of the pipeline; expected one of: To Do, Done",
        ),
    ];
    for (tracker, field, message) in cases {
        let err = Config::parse_str(&base(tracker), Some(Path::new("p.yaml")))
            .expect_err(tracker)
            .to_string();
        assert!(
            err.contains(field) && err.contains(message),
            "{tracker}:\n{err}"
        );
    }
    let ok = Config::parse_str(
        &base("{kind: jira, url: https://acme.atlassian.net/, project: PROJ, transitions: {done: Finish}}"),
        Some(Path::new("p.yaml")),
    )
    .unwrap();
    assert_eq!(ok.tracker.name(), "jira:PROJ");
    assert_eq!(ok.secret_env_names(), ["JIRA_EMAIL", "JIRA_TOKEN"]);
    let _ = TicketFilter::default();
}

fn write_config(dir: &Path, url: &str) {
    let roles = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    let text = format!(
        r#"
tracker:
  kind: jira
  url: "{url}"
  project: PROJ
  email_env: SORTIE_TEST_JIRA_EMAIL
  token_env: SORTIE_TEST_JIRA_TOKEN
state_root: state
roles_dir: {roles}
agent: {{command: ["true"]}}
terminal_states: [Done]
pipeline_stages:
  - role: architect
    claim_status: Ready for Design
    success_status: Done
"#,
        roles = roles.display()
    );
    std::fs::write(dir.join("pipeline.yaml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracker_check_reads_email_and_token_from_their_variables() {
    let model = JiraModel::start(Mode::Cloud).await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &model.url());
    let run = |email: Option<&str>| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sortie"));
        cmd.args(["tracker", "check", "--config", "pipeline.yaml"])
            .current_dir(dir.path())
            .env("SORTIE_TEST_JIRA_TOKEN", jira_model::CLOUD_TOKEN)
            .env_remove("SORTIE_TEST_JIRA_EMAIL");
        if let Some(e) = email {
            cmd.env("SORTIE_TEST_JIRA_EMAIL", e);
        }
        cmd.output()
    };
    let out = run(None).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("$SORTIE_TEST_JIRA_EMAIL"), "{stderr}");
    assert!(model.log().is_empty(), "nothing sent without credentials");

    let out = run(Some(jira_model::EMAIL)).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("status Ready for Design"), "{stdout}");
}

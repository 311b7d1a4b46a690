//! Contract tests: every kind of request the Jira Cloud adapter makes, sent to
//! Stoplight Prism serving Atlassian's published Jira Cloud REST v3 description
//! (`tests/fixtures/jira/jira-issues.openapi.json`). Prism answers a request that fits
//! the description with 2xx and flags one that does not in an `sl-violations`
//! header. Prism keeps no state and answers with the description's examples (issue
//! `EX-1` without a status, say), so this checks the shape of the requests;
//! `tests/it/jira_adapter.rs` and `tests/it/jira_pipeline.rs` check behaviour. The
//! description leaves comment bodies untyped, so every ADF document sent is also
//! checked against `tests/fixtures/jira/adf-subset.schema.json`.
//!
//! Needs `SORTIE_TEST_PRISM_JIRA` (set by `./scripts/test` through
//! `scripts/services/prism-jira.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use sortie::tracker::jira::{Exchange, JiraSettings, JiraTracker, PAGE_SIZE};
use sortie::tracker::Tracker;

fn prism_url() -> String {
    std::env::var("SORTIE_TEST_PRISM_JIRA").unwrap_or_else(|_| {
        panic!(
            "SORTIE_TEST_PRISM_JIRA is not set: run ./scripts/test, or start Prism with \
             scripts/services/prism-jira.sh (see scripts/services/README.md)"
        )
    })
}

/// A Cloud adapter pointed at Prism, and every exchange it has had.
fn tracker() -> (JiraTracker, Arc<Mutex<Vec<Exchange>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let settings = JiraSettings {
        url: prism_url(),
        project: "PROJ".into(),
        api_version: 3,
        jql: Some("labels = agent-ok OR priority = Highest".into()),
        transitions: BTreeMap::new(),
        priority_order: vec!["High".into(), "Low".into()],
        claim_statuses: vec!["To Do".into()],
        pipeline_statuses: vec![],
        page_size: PAGE_SIZE,
        link_type: "Blocks".into(),
    };
    let t = JiraTracker::new(
        settings,
        Some("bot@acme.test".into()),
        "contract-token".into(),
        "$JIRA_EMAIL / $JIRA_TOKEN".into(),
    )
    .unwrap()
    .with_observer(Arc::new(move |e: &Exchange| {
        sink.lock().unwrap().push(e.clone())
    }));
    (t, seen)
}

/// `GET http://h/rest/api/3/issue/PROJ-1/comment?x` -> `GET /issue/{key}/comment`.
fn operation(e: &Exchange) -> String {
    let path = e
        .url
        .split("://")
        .nth(1)
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    let path = path.strip_prefix("/rest/api/3").unwrap_or(path);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let templated: Vec<&str> = segs
        .iter()
        .enumerate()
        .map(|(i, s)| match (segs[0], i) {
            ("issue", 1) => "{key}",
            ("project", 1) => "{project}",
            _ => s,
        })
        .collect();
    format!("{} /{}", e.method, templated.join("/"))
}

fn adf_schema() -> (boon::Schemas, boon::SchemaIndex) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jira/adf-subset.schema.json"
    );
    let mut schemas = boon::Schemas::new();
    let index = boon::Compiler::new()
        .compile(path, &mut schemas)
        .unwrap_or_else(|e| panic!("{path}: {e:#}"));
    (schemas, index)
}

#[tokio::test]
async fn every_request_the_cloud_adapter_makes_fits_atlassians_openapi_description() {
    let (t, seen) = tracker();
    let statuses = vec!["To Do".to_string(), "In Progress".to_string()];

    // Reads the pipeline makes.
    t.identity().await.expect("GET /myself");
    let listing = t.list(&statuses).await.expect("search");
    // The description's example issue has no status: skipped with a reason, not fatal.
    assert!(!listing.warnings.is_empty(), "{listing:?}");
    assert!(
        t.get("PROJ-1").await.is_err(),
        "the example issue is EX-1 without a status"
    );
    // An issue's links alone (read for an issue whose listing carried none, issue #18);
    // the example answers as EX-1, which reads as a moved issue.
    assert!(t.blockers("PROJ-1").await.is_err(), "the example is EX-1");
    t.comments("PROJ-1").await.expect("comments");
    // Writes: a comment with prose and a block, and a transition (the status read
    // before it fails on the example, so the post is made directly).
    let body = "Designed it: see **DESIGN.md** and [the PR](https://example.test/pr/1).\n\n\
                - small\n- tested\n\n\
                ```yaml sortie:success\nrole: architect\nstage_attempt: 1\nidempotency_key: \
                abababababababababababababababababababababababababababababababab\n\
                from_status: To Do\nto_status: In Progress\nsummary: done\n```\n";
    t.post_comment("PROJ-1", body, "k")
        .await
        .expect("post comment");
    assert!(t
        .transition("PROJ-1", "To Do", "In Progress")
        .await
        .is_err());
    t.post_transition("PROJ-1", "11")
        .await
        .expect("post transition");
    // `sortie tracker check`.
    let report = t.check(&statuses, false).await.expect("check");
    assert!(
        report
            .checks
            .iter()
            .any(|c| c.what == "status In Progress" && c.ok),
        "{report:?}"
    );

    let exchanges = seen.lock().unwrap().clone();
    let mut problems = Vec::new();
    for e in &exchanges {
        if !(200..300).contains(&e.status) || e.header("sl-violations").is_some() {
            problems.push(format!(
                "{} {} -> {} {}",
                e.method,
                e.url,
                e.status,
                e.header("sl-violations").unwrap_or("")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "requests outside the description:\n{}",
        problems.join("\n")
    );

    let covered: BTreeSet<String> = exchanges.iter().map(operation).collect();
    let expected: BTreeSet<String> = [
        "GET /myself",
        "POST /search/jql",
        "GET /issue/{key}",
        "GET /issue/{key}/comment",
        "POST /issue/{key}/comment",
        "POST /issue/{key}/transitions",
        "GET /project/{project}/statuses",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(covered, expected);

    // Every ADF document sent follows the ADF rules (Prism cannot check them).
    let (schemas, index) = adf_schema();
    let posted: Vec<&Exchange> = exchanges
        .iter()
        .filter(|e| operation(e) == "POST /issue/{key}/comment")
        .collect();
    assert_eq!(posted.len(), 1);
    for e in posted {
        let doc = &e.body.as_ref().expect("a body")["body"];
        if let Err(err) = schemas.validate(doc, index) {
            panic!("{doc:#}\nbreaks the ADF rules: {err:#}");
        }
    }

    assert!(
        exchanges
            .iter()
            .any(|e| e.method == "GET" && e.url.ends_with("/issue/PROJ-1?fields=issuelinks")),
        "the links read was sent"
    );
    // The search asks for the issue links with the other fields (blockers at no extra
    // request).
    let search = exchanges
        .iter()
        .find(|e| operation(e) == "POST /search/jql")
        .unwrap();
    let fields = &search.body.as_ref().unwrap()["fields"];
    assert!(
        fields.as_array().unwrap().iter().any(|f| f == "issuelinks"),
        "{fields}"
    );

    // The search carries the clause parenthesised after project and statuses.
    let search = exchanges
        .iter()
        .find(|e| operation(e) == "POST /search/jql")
        .unwrap();
    assert_eq!(
        search.body.as_ref().unwrap()["jql"],
        "project = \"PROJ\" AND status in (\"To Do\", \"In Progress\") AND \
         (labels = agent-ok OR priority = Highest) ORDER BY key ASC"
    );
}

#[tokio::test]
async fn prism_flags_a_request_outside_the_description() {
    // The check above can fail: a search whose maxResults is a string is flagged.
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/rest/api/3/search/jql", prism_url()))
        .basic_auth("bot@acme.test", Some("contract-token"))
        .json(&serde_json::json!({"jql": "project = PROJ", "maxResults": "many"}))
        .send()
        .await
        .expect("prism answers");
    let flagged = !answer.status().is_success() || answer.headers().contains_key("sl-violations");
    assert!(flagged, "{:?}", answer.headers());
}

//! Every GraphQL document the Linear adapter can send validates against Linear's
//! published schema (`tests/fixtures/linear/linear.schema.graphql`), checked with
//! apollo-compiler, a GraphQL validator that checks operations against a schema.

use crate::linear_model::schema;

use apollo_compiler::ExecutableDocument;
use sortie::tracker::linear::queries;

#[test]
fn every_document_sortie_sends_validates_against_the_linear_schema() {
    let schema = schema();
    let all = queries::all();
    assert!(all.len() >= 10, "the adapter's documents: {}", all.len());
    for (name, text) in all {
        let doc = ExecutableDocument::parse_and_validate(
            schema,
            text.as_str(),
            format!("{name}.graphql"),
        )
        .unwrap_or_else(|e| panic!("{name} does not validate:\n{e}"));
        let op = doc
            .operations
            .get(Some(name))
            .unwrap_or_else(|_| panic!("{name}: the document has no operation named {name}"));
        assert_eq!(
            doc.operations.len(),
            1,
            "{name}: one operation per document"
        );
        let _ = op;
    }
}

#[test]
fn the_validator_refuses_documents_linear_would_refuse() {
    // Guards the test above: a validator that accepted anything would prove nothing.
    let schema = schema();
    let bad = [
        ("unknown field", "query A { viewer { id nickname } }"),
        (
            "wrong argument",
            "query B { issues(count: 5) { nodes { id } } }",
        ),
        ("missing selection", "query C { viewer }"),
        (
            "bad variable type",
            "query D($id: Int!) { issue(id: $id) { id } }",
        ),
        (
            "unknown input field",
            "mutation E { issueUpdate(id: \"x\", input: { status: \"Done\" }) { success } }",
        ),
    ];
    for (what, text) in bad {
        assert!(
            ExecutableDocument::parse_and_validate(schema, text, "bad.graphql").is_err(),
            "{what} was accepted: {text}"
        );
    }
}

#[tokio::test]
async fn the_model_refuses_requests_that_do_not_validate_as_linear_would() {
    // The run-time half: the model behind the pipeline tests checks every request's
    // document and variables, so a query the adapter builds wrongly fails those tests.
    let model = crate::linear_model::LinearModel::start().await;
    let client = reqwest::Client::new();
    let send = |body: serde_json::Value| {
        client
            .post(model.api_url())
            .header("authorization", crate::linear_model::TOKEN)
            .json(&body)
            .send()
    };
    let bad_field = send(serde_json::json!({"query": "query A { viewer { id nickname } }"}))
        .await
        .unwrap();
    assert_eq!(bad_field.status(), 400);
    let bad_variable = send(serde_json::json!({
        "operationName": "SortieIssue",
        "query": queries::issue(),
        "variables": {"id": 42},
    }))
    .await
    .unwrap();
    assert_eq!(bad_variable.status(), 400);
    let good = send(serde_json::json!({
        "operationName": "SortieViewer",
        "query": queries::VIEWER,
    }))
    .await
    .unwrap();
    assert_eq!(good.status(), 200);
    let refused = model.refused();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    assert!(refused[0].contains("nickname"), "{refused:#?}");
    assert!(
        refused[1].starts_with("SortieIssue: variables"),
        "{refused:#?}"
    );
}

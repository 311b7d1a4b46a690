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

//! Every GraphQL document the GitHub Project adapter can send validates against GitHub's
//! published schema (`tests/fixtures/github_project/github.schema.graphql`, from the npm
//! package `@octokit/graphql-schema`), checked with apollo-compiler.

use apollo_compiler::ExecutableDocument;
use sortie::tracker::github_project::queries;

use crate::github_project_model::schema;

#[test]
fn every_document_sortie_sends_validates_against_githubs_schema() {
    let schema = schema();
    let all = queries::all();
    assert_eq!(all.len(), 5, "the adapter's documents");
    for (name, text) in all {
        let doc = ExecutableDocument::parse_and_validate(
            schema,
            text.as_str(),
            format!("{name}.graphql"),
        )
        .unwrap_or_else(|e| panic!("{name} does not validate:\n{e}"));
        assert!(
            doc.operations.get(Some(name)).is_ok(),
            "{name}: the document has no operation named {name}"
        );
        assert_eq!(
            doc.operations.len(),
            1,
            "{name}: one operation per document"
        );
    }
}

#[test]
fn the_validator_refuses_documents_github_would_refuse() {
    // Guards the test above: a validator that accepted anything would prove nothing.
    let schema = schema();
    let bad = [
        ("unknown field", "query A { viewer { login nickname } }"),
        (
            "an items filter this schema does not have",
            "query B { organization(login: \"a\") { projectV2(number: 1) { items(first: 5, query: \"status:Todo\") { nodes { id } } } } }",
        ),
        ("missing selection", "query C { viewer }"),
        (
            "bad variable type",
            "query D($n: String!) { organization(login: \"a\") { projectV2(number: $n) { id } } }",
        ),
        (
            "unknown input field",
            "mutation E { updateProjectV2ItemFieldValue(input: {projectId: \"p\", itemId: \"i\", fieldId: \"f\", value: {option: \"x\"}}) { clientMutationId } }",
        ),
        (
            "a fragment on a type the field cannot be",
            "query F { viewer { ... on Organization { login } } }",
        ),
    ];
    for (what, text) in bad {
        assert!(
            ExecutableDocument::parse_and_validate(schema, text, "bad.graphql").is_err(),
            "{what} was accepted: {text}"
        );
    }
}

//! The GraphQL side of the Linear model: the schema, validating a request (document
//! and variables) the way a GraphQL server does, shaping an answer to the request's
//! selection set, and a complexity estimate after Linear's published rules.

use std::sync::OnceLock;

use apollo_compiler::executable::{ExecutableDocument, Field, SelectionSet};
use apollo_compiler::validation::Valid;
use apollo_compiler::Schema;
use serde_json::Value;

pub use crate::common::graphql::{argument, fields, shape, Checked};

/// Linear's schema, parsed and validated once per test binary.
pub fn schema() -> &'static Valid<Schema> {
    static SCHEMA: OnceLock<Valid<Schema>> = OnceLock::new();
    SCHEMA.get_or_init(|| crate::common::graphql::load_schema("linear/linear.schema.graphql"))
}

/// Validate a request body against Linear's schema.
pub fn check(body: &Value) -> Result<Checked, String> {
    crate::common::graphql::check(schema(), body)
}

/// Complexity after Linear's published rules: 0.1 per scalar field, 1 per object,
/// a connection's children multiplied by its `first:` (50 when absent), rounded up.
pub fn complexity(checked: &Checked) -> u64 {
    let op = checked.operation();
    cost(&checked.doc, &op.selection_set, &checked.variables).ceil() as u64
}

fn cost(doc: &ExecutableDocument, set: &SelectionSet, variables: &Value) -> f64 {
    let mut total = 0.0;
    for field in fields(doc, set) {
        if field.selection_set.selections.is_empty() {
            total += 0.1;
            continue;
        }
        let children = cost(doc, &field.selection_set, variables);
        let is_connection = field.selection_set.ty.as_str().ends_with("Connection");
        let first = argument(field, "first", variables).and_then(|v| v.as_f64());
        total += match (is_connection, first) {
            (true, first) => {
                1.0 + first.unwrap_or(50.0) * node_cost(doc, field, variables)
                    + (children - node_cost(doc, field, variables))
            }
            (false, _) => 1.0 + children,
        };
    }
    total
}

/// The cost of a connection's `nodes` selection (one node).
fn node_cost(doc: &ExecutableDocument, connection: &Field, variables: &Value) -> f64 {
    fields(doc, &connection.selection_set)
        .into_iter()
        .filter(|f| f.name == "nodes")
        .map(|f| {
            if f.selection_set.selections.is_empty() {
                0.1
            } else {
                1.0 + cost(doc, &f.selection_set, variables)
            }
        })
        .sum()
}

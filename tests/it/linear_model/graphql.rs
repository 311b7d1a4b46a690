//! The GraphQL side of the Linear model: the schema, validating a request (document
//! and variables) the way a GraphQL server does, shaping an answer to the request's
//! selection set, and a complexity estimate after Linear's published rules.

use std::sync::OnceLock;

use apollo_compiler::ast;
use apollo_compiler::executable::{ExecutableDocument, Field, Operation, Selection, SelectionSet};
use apollo_compiler::validation::Valid;
use apollo_compiler::Schema;
use serde_json::{Map, Value};

/// Linear's schema, parsed and validated once per test binary.
pub fn schema() -> &'static Valid<Schema> {
    static SCHEMA: OnceLock<Valid<Schema>> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/linear/linear.schema.graphql"
        );
        let text = std::fs::read_to_string(path).expect("the Linear schema fixture");
        Schema::parse_and_validate(text, path).expect("Linear's schema is valid")
    })
}

/// A request that validated: its document, the operation to run, its variables.
pub struct Checked {
    pub doc: Valid<ExecutableDocument>,
    pub operation_name: Option<String>,
    pub variables: Value,
}

impl Checked {
    pub fn operation(&self) -> &Operation {
        self.doc
            .operations
            .get(self.operation_name.as_deref())
            .expect("checked when validated")
    }
}

/// Validate a request body (`{query, operationName, variables}`) against the schema:
/// the document, the operation choice, and the variables' types.
pub fn check(body: &Value) -> Result<Checked, String> {
    let query = body
        .get("query")
        .and_then(Value::as_str)
        .ok_or("the request has no `query` string")?;
    let doc = ExecutableDocument::parse_and_validate(schema(), query, "request.graphql")
        .map_err(|e| e.errors.to_string())?;
    let operation_name = body
        .get("operationName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let operation = doc
        .operations
        .get(operation_name.as_deref())
        .map_err(|e| e.message().to_string())?;
    let variables = body.get("variables").cloned().unwrap_or(Value::Null);
    let map: apollo_compiler::response::JsonMap = match &variables {
        Value::Null => Default::default(),
        v => serde_json::from_value(v.clone()).map_err(|e| format!("variables: {e}"))?,
    };
    apollo_compiler::request::coerce_variable_values(schema(), operation, &map)
        .map_err(|e| format!("variables: {}", e.message()))?;
    Ok(Checked {
        doc,
        operation_name,
        variables,
    })
}

/// The value of argument `name` of `field`, variables resolved.
pub fn argument(field: &Field, name: &str, variables: &Value) -> Option<Value> {
    field
        .arguments
        .iter()
        .find(|a| a.name == name)
        .map(|a| ast_value(&a.value, variables))
}

fn ast_value(value: &ast::Value, variables: &Value) -> Value {
    match value {
        ast::Value::Null => Value::Null,
        ast::Value::Variable(name) => variables.get(name.as_str()).cloned().unwrap_or(Value::Null),
        ast::Value::Enum(e) => Value::String(e.to_string()),
        ast::Value::String(s) => Value::String(s.to_string()),
        ast::Value::Boolean(b) => Value::Bool(*b),
        ast::Value::Int(i) => i.try_to_i32().map(Value::from).unwrap_or(Value::Null),
        ast::Value::Float(f) => f.try_to_f64().map(Value::from).unwrap_or(Value::Null),
        ast::Value::List(items) => {
            Value::Array(items.iter().map(|v| ast_value(v, variables)).collect())
        }
        ast::Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), ast_value(v, variables)))
                .collect(),
        ),
    }
}

/// The fields of `set`, with fragments flattened.
pub fn fields<'a>(doc: &'a ExecutableDocument, set: &'a SelectionSet) -> Vec<&'a Field> {
    let mut out = Vec::new();
    for selection in &set.selections {
        match selection {
            Selection::Field(f) => out.push(f.as_ref()),
            Selection::FragmentSpread(s) => {
                if let Some(fragment) = doc.fragments.get(&s.fragment_name) {
                    out.extend(fields(doc, &fragment.selection_set));
                }
            }
            Selection::InlineFragment(f) => out.extend(fields(doc, &f.selection_set)),
        }
    }
    out
}

/// Shape `full` (the model's whole object) to what `set` asks for. A nested
/// connection (an object with `nodes`) is cut to its `first:` argument and its
/// `pageInfo.hasNextPage` says whether something was cut.
pub fn shape(
    doc: &ExecutableDocument,
    set: &SelectionSet,
    full: &Value,
    variables: &Value,
) -> Value {
    match full {
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| shape(doc, set, i, variables))
                .collect(),
        ),
        Value::Object(object) => {
            let mut out = Map::new();
            for field in fields(doc, set) {
                let key = field.response_key().to_string();
                let mut value = object
                    .get(field.name.as_str())
                    .cloned()
                    .unwrap_or(Value::Null);
                if let Some(first) = argument(field, "first", variables).and_then(|v| v.as_u64()) {
                    cut(&mut value, first as usize);
                }
                let shaped = if field.selection_set.selections.is_empty() {
                    value
                } else {
                    shape(doc, &field.selection_set, &value, variables)
                };
                out.insert(key, shaped);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn cut(connection: &mut Value, first: usize) {
    let Some(nodes) = connection.get_mut("nodes").and_then(Value::as_array_mut) else {
        return;
    };
    if nodes.len() > first {
        nodes.truncate(first);
        if let Some(info) = connection
            .get_mut("pageInfo")
            .and_then(Value::as_object_mut)
        {
            info.insert("hasNextPage".into(), Value::Bool(true));
        }
    }
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

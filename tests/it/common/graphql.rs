//! GraphQL for the tracker models (Linear, GitHub Projects): loading a vendor's schema,
//! validating a request (document and variables) the way a GraphQL server does, and
//! shaping an answer to the request's selection set.

use apollo_compiler::ast;
use apollo_compiler::executable::{ExecutableDocument, Field, Operation, Selection, SelectionSet};
use apollo_compiler::validation::Valid;
use apollo_compiler::Schema;
use serde_json::{Map, Value};

/// The schema in `tests/fixtures/<relative>`, parsed and validated (panics with the
/// file named when it is missing or invalid: the fixture is part of the repository).
pub fn load_schema(relative: &str) -> Valid<Schema> {
    let path = format!("{}/tests/fixtures/{relative}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Schema::parse_and_validate(text, &path).unwrap_or_else(|e| panic!("{path} is invalid: {e}"))
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

/// Validate a request body (`{query, operationName, variables}`) against `schema`:
/// the document, the operation choice, and the variables' types.
pub fn check(schema: &Valid<Schema>, body: &Value) -> Result<Checked, String> {
    let query = body
        .get("query")
        .and_then(Value::as_str)
        .ok_or("the request has no `query` string")?;
    let doc = ExecutableDocument::parse_and_validate(schema, query, "request.graphql")
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
    apollo_compiler::request::coerce_variable_values(schema, operation, &map)
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
    shape_with(doc, set, full, variables, &|_, _| None)
}

/// What a model computes for a field with arguments (e.g. `fieldValueByName(name:)`),
/// given the field and the object it is read on; `None` reads the object's key.
pub type Computed<'a> = dyn Fn(&Field, &Map<String, Value>) -> Option<Value> + 'a;

/// [`shape`], with `computed` answering fields whose value depends on their arguments,
/// and inline fragments applied by type: an object carrying `__typename` (and, for the
/// interfaces and unions it belongs to, `__types`) gets only the fragments on its types,
/// as a GraphQL server answers.
pub fn shape_with(
    doc: &ExecutableDocument,
    set: &SelectionSet,
    full: &Value,
    variables: &Value,
    computed: &Computed<'_>,
) -> Value {
    match full {
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| shape_with(doc, set, i, variables, computed))
                .collect(),
        ),
        Value::Object(object) => {
            let mut out = Map::new();
            for field in typed_fields(doc, set, object) {
                let key = field.response_key().to_string();
                let mut value = computed(field, object).unwrap_or_else(|| {
                    object
                        .get(field.name.as_str())
                        .cloned()
                        .unwrap_or(Value::Null)
                });
                if let Some(first) = argument(field, "first", variables).and_then(|v| v.as_u64()) {
                    cut(&mut value, first as usize);
                }
                let shaped = if field.selection_set.selections.is_empty() {
                    value
                } else {
                    shape_with(doc, &field.selection_set, &value, variables, computed)
                };
                out.insert(key, shaped);
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// Whether an object of the model is of type `name`: its `__typename`, or one of its
/// `__types`; an object that says neither is of every type.
fn is_of(object: &Map<String, Value>, name: &str) -> bool {
    let typename = object.get("__typename").and_then(Value::as_str);
    let types = object.get("__types").and_then(Value::as_array);
    match (typename, types) {
        (None, None) => true,
        (typename, types) => {
            typename == Some(name)
                || types.is_some_and(|t| t.iter().any(|t| t.as_str() == Some(name)))
        }
    }
}

/// The fields of `set` that apply to `object`, fragments flattened by type.
fn typed_fields<'a>(
    doc: &'a ExecutableDocument,
    set: &'a SelectionSet,
    object: &Map<String, Value>,
) -> Vec<&'a Field> {
    let mut out = Vec::new();
    for selection in &set.selections {
        match selection {
            Selection::Field(f) => out.push(f.as_ref()),
            Selection::FragmentSpread(s) => {
                if let Some(fragment) = doc.fragments.get(&s.fragment_name) {
                    if is_of(object, fragment.type_condition().as_str()) {
                        out.extend(typed_fields(doc, &fragment.selection_set, object));
                    }
                }
            }
            Selection::InlineFragment(f) => {
                let applies = f
                    .type_condition
                    .as_ref()
                    .is_none_or(|t| is_of(object, t.as_str()));
                if applies {
                    out.extend(typed_fields(doc, &f.selection_set, object));
                }
            }
        }
    }
    out
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

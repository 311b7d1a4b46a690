//! The vendor's description of the pull-request operations
//! (`tests/fixtures/github/github-pulls.openapi.json`), as a check of the model's
//! answers: every field the model serves is one the schema declares, with the type
//! it declares. Fields the schema requires but the model leaves out are not
//! checked (the model serves what sortie reads, not all of GitHub's fields).

use serde_json::Value;

const SPEC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/github/github-pulls.openapi.json"
);
const LOCATION: &str = "file:///github-pulls.openapi.json";

/// The description, compiled once per use.
pub struct PullsSpec {
    document: Value,
    schemas: boon::Schemas,
    compiler: boon::Compiler,
}

impl PullsSpec {
    /// Read the description, its OpenAPI 3.0 `nullable` made JSON Schema, its
    /// `required` lists dropped.
    pub fn load() -> Self {
        let text = std::fs::read_to_string(SPEC).unwrap_or_else(|e| panic!("{SPEC}: {e}"));
        let mut document: Value = serde_json::from_str(&text).expect("the description is JSON");
        // GitHub answers `line` and `position` null on an outdated review comment
        // (the description of `position` says so in prose) though the schema types
        // them integer only; take GitHub's word, as the adapter does.
        for field in ["line", "position"] {
            document["components"]["schemas"]["pull-request-review-comment"]["properties"][field]
                ["nullable"] = Value::Bool(true);
        }
        let original = document.clone();
        loosen(&mut document);
        let mut compiler = boon::Compiler::new();
        compiler
            .add_resource(LOCATION, document)
            .expect("the description loads");
        PullsSpec {
            document: original,
            schemas: boon::Schemas::new(),
            compiler,
        }
    }

    /// Check `value` against `components/schemas/<name>`: the first field of a type
    /// the schema does not allow, or that it does not declare, as an error.
    pub fn check(&mut self, name: &str, value: &Value) -> Result<(), String> {
        let location = format!("{LOCATION}#/components/schemas/{name}");
        let index = self
            .compiler
            .compile(&location, &mut self.schemas)
            .map_err(|e| format!("{name}: {e:#}"))?;
        self.schemas
            .validate(value, index)
            .map_err(|e| format!("{name}: {e:#}"))?;
        let schema = &self.document["components"]["schemas"][name];
        undeclared(&self.document, schema, value, name)
    }

    /// The fields `components/schemas/<name>` requires that `value` lacks.
    pub fn missing_required(&self, name: &str, value: &Value) -> Vec<String> {
        let schema = &self.document["components"]["schemas"][name];
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|field| value.get(field).is_none())
            .map(str::to_string)
            .collect()
    }
}

/// OpenAPI 3.0 to JSON Schema: `nullable: true` admits null; `required` lists go.
fn loosen(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("required").is_some_and(Value::is_array) {
                map.remove("required");
            }
            if map.remove("nullable") == Some(Value::Bool(true)) {
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.push(Value::Null);
                }
                match map.get("type").cloned() {
                    Some(Value::String(t)) => {
                        map.insert("type".into(), serde_json::json!([t, "null"]));
                    }
                    _ => {
                        let inner = Value::Object(std::mem::take(map));
                        map.insert("anyOf".into(), serde_json::json!([inner, {"type": "null"}]));
                    }
                }
            }
            for child in map.values_mut() {
                loosen(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(loosen),
        _ => {}
    }
}

/// `#/components/schemas/x` looked up in the document.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(
            document,
            document
                .pointer(r.trim_start_matches('#'))
                .unwrap_or(&Value::Null),
        ),
        None => schema,
    }
}

/// The first key of `value` (at `at`) that its schema's `properties` do not name.
/// Schemas with combinators or free-form objects are not walked.
fn undeclared(document: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(document, schema);
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return Ok(());
            };
            if schema.get("additionalProperties").is_some() {
                return Ok(());
            }
            for (key, child) in map {
                let Some(declared) = props.get(key) else {
                    return Err(format!("{at}.{key} is not in the description"));
                };
                undeclared(document, declared, child, &format!("{at}.{key}"))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let Some(item) = schema.get("items") else {
                return Ok(());
            };
            for (i, child) in items.iter().enumerate() {
                undeclared(document, item, child, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

//! A vendor's API description as a check of a model's answers, for descriptions in
//! OpenAPI 3.0 (`components/schemas`, `nullable`) and Swagger 2.0 (`definitions`,
//! `x-nullable`) alike: every field the model serves is one the schema declares,
//! with the type it declares (JSON Schema through `boon`, as
//! `github_model::spec` checks GitHub's). Fields the schema requires but the model
//! leaves out are not checked: the models serve what sortie reads.

use serde_json::{json, Value};

/// A description, compiled as it is used.
pub struct VendorSpec {
    location: String,
    document: Value,
    schemas: boon::Schemas,
    compiler: boon::Compiler,
}

impl VendorSpec {
    /// Read `tests/fixtures/<file>`; `nullable` made JSON Schema, `required` lists
    /// dropped.
    pub fn load(file: &str) -> Self {
        let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let document: Value = serde_json::from_str(&text).expect("the description is JSON");
        let mut loose = document.clone();
        loosen(&mut loose);
        let location = format!("file:///{}", file.replace('/', "-"));
        let mut compiler = boon::Compiler::new();
        compiler
            .add_resource(&location, loose)
            .expect("the description loads");
        VendorSpec {
            location,
            document,
            schemas: boon::Schemas::new(),
            compiler,
        }
    }

    /// Check `value` against what the description says operation `method path`
    /// answers with `status` (`path` as the description spells it, with its
    /// `{placeholders}`): the JSON schema of that response.
    pub fn check_answer(
        &mut self,
        method: &str,
        path: &str,
        status: u16,
        value: &Value,
    ) -> Result<(), String> {
        let what = format!("{method} {path} -> {status}");
        let escaped = path.replace('~', "~0").replace('/', "~1");
        let mut at = format!(
            "/paths/{escaped}/{}/responses/{status}",
            method.to_lowercase()
        );
        let mut response = self
            .document
            .pointer(&at)
            .ok_or_else(|| format!("{what}: not in the description"))?;
        if let Some(r) = response.get("$ref").and_then(Value::as_str) {
            at = r.trim_start_matches('#').to_string();
            response = self.document.pointer(&at).unwrap_or(&Value::Null);
        }
        let at = if response.get("content").is_some() {
            format!("{at}/content/application~1json/schema")
        } else {
            format!("{at}/schema")
        };
        let schema = self
            .document
            .pointer(&at)
            .ok_or_else(|| format!("{what}: no JSON schema at {at}"))?
            .clone();
        let location = format!(
            "{}#{}",
            self.location,
            at.replace('{', "%7B").replace('}', "%7D")
        );
        let index = self
            .compiler
            .compile(&location, &mut self.schemas)
            .map_err(|e| format!("{what}: {e:#}"))?;
        self.schemas
            .validate(value, index)
            .map_err(|e| format!("{what}: {e:#}"))?;
        undeclared(&self.document, &schema, value, &what)
    }
}

/// To JSON Schema: `nullable: true` / `x-nullable: true` admit null; `required`
/// lists go.
fn loosen(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("required").is_some_and(Value::is_array) {
                map.remove("required");
            }
            let nullable = [map.remove("nullable"), map.remove("x-nullable")]
                .contains(&Some(Value::Bool(true)));
            if nullable {
                if let Some(Value::Array(values)) = map.get_mut("enum") {
                    values.push(Value::Null);
                }
                match map.get("type").cloned() {
                    Some(Value::String(t)) => {
                        map.insert("type".into(), json!([t, "null"]));
                    }
                    _ => {
                        let inner = Value::Object(std::mem::take(map));
                        map.insert("anyOf".into(), json!([inner, {"type": "null"}]));
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

/// A `$ref` looked up in the document.
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

//! The JSON shape of outcome blocks, as `sortie block parse` prints them.
//!
//! One flat object per block: `kind`, `line` (for a [`ParsedBlock`]), every
//! field of the kind (absent optional ones as `null`, `artifacts` as `{}`), then
//! the extra fields under their own names.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Number, Value as Json};
use serde_yaml::Value as Yaml;

use super::{OutcomeBlock, ParsedBlock};

impl Serialize for OutcomeBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("kind", &self.kind())?;
        write_fields(&mut map, self)?;
        map.end()
    }
}

impl Serialize for ParsedBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("kind", &self.block.kind())?;
        map.serialize_entry("line", &self.line)?;
        write_fields(&mut map, &self.block)?;
        map.end()
    }
}

fn write_fields<M: SerializeMap>(map: &mut M, block: &OutcomeBlock) -> Result<(), M::Error> {
    match block {
        OutcomeBlock::Success(b) => {
            map.serialize_entry("role", &b.role)?;
            map.serialize_entry("stage_attempt", &b.stage_attempt)?;
            map.serialize_entry("idempotency_key", &b.idempotency_key)?;
            map.serialize_entry("from_status", &b.from_status)?;
            map.serialize_entry("to_status", &b.to_status)?;
            map.serialize_entry("summary", &b.summary)?;
            map.serialize_entry("run_id", &b.run_id)?;
            map.serialize_entry("duration_seconds", &b.duration_seconds)?;
            map.serialize_entry("artifacts", &b.artifacts)?;
            map.serialize_entry("evidence", &b.evidence)?;
        }
        OutcomeBlock::Failure(b) => {
            map.serialize_entry("role", &b.role)?;
            map.serialize_entry("stage_attempt", &b.stage_attempt)?;
            map.serialize_entry("idempotency_key", &b.idempotency_key)?;
            map.serialize_entry("from_status", &b.from_status)?;
            map.serialize_entry("to_status", &b.to_status)?;
            map.serialize_entry("reason_code", &b.reason_code)?;
            map.serialize_entry("category", &b.category)?;
            map.serialize_entry("transient", &b.transient)?;
            map.serialize_entry("next_action", &b.next_action)?;
            map.serialize_entry("detail", &b.detail)?;
            map.serialize_entry("run_id", &b.run_id)?;
            map.serialize_entry("duration_seconds", &b.duration_seconds)?;
        }
    }
    for (key, value) in block.extra() {
        map.serialize_entry(key, &yaml_to_json(value))?;
    }
    Ok(())
}

/// Any YAML value as JSON: non-string keys become their YAML text, `.nan` and
/// `.inf` become the strings YAML spells them with, and a tagged value becomes
/// `{"!tag": value}`.
pub(crate) fn yaml_to_json(value: &Yaml) -> Json {
    match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                n.as_f64()
                    .and_then(Number::from_f64)
                    .map_or_else(|| Json::String(n.to_string()), Json::Number)
            }
        }
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Sequence(items) => Json::Array(items.iter().map(yaml_to_json).collect()),
        Yaml::Mapping(mapping) => {
            let object: Map<String, Json> = mapping
                .iter()
                .map(|(k, v)| (key_text(k), yaml_to_json(v)))
                .collect();
            Json::Object(object)
        }
        Yaml::Tagged(tagged) => {
            let mut object = Map::new();
            object.insert(tagged.tag.to_string(), yaml_to_json(&tagged.value));
            Json::Object(object)
        }
    }
}

fn key_text(key: &Yaml) -> String {
    match key {
        Yaml::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_yaml_values_become_json() {
        let yaml: Yaml =
            serde_yaml::from_str("a: .nan\nb: !x 1\nc: {[1]: 2, 3: 4}\nd: -2\ne: 1.5\n")
                .expect("yaml");
        let json = yaml_to_json(&yaml);
        assert_eq!(
            json,
            serde_json::json!({"a": ".nan", "b": {"!x": 1}, "c": {"- 1": 2, "3": 4}, "d": -2, "e": 1.5})
        );
    }
}

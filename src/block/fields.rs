//! Turning a block's YAML body into a typed [`OutcomeBlock`], one named field at a time.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;

use serde_yaml::{Mapping, Value};

use super::model::RESERVED_FIELDS;
use super::{
    BlockError, BlockKind, Category, FailureBlock, NextAction, OutcomeBlock, SuccessBlock,
};

/// Parse the body of a block of `kind` whose opening fence is on `line`.
pub(crate) fn parse_body(
    kind: BlockKind,
    line: usize,
    body: &str,
) -> Result<OutcomeBlock, BlockError> {
    let block_err = |message: String| BlockError::block(line, kind, message);
    let value: Value = serde_yaml::from_str(body).map_err(|e| block_err(yaml_message(&e, line)))?;
    let mapping = match value {
        Value::Mapping(mapping) => mapping,
        Value::Null => return Err(block_err("is empty; expected `field: value` lines".into())),
        other => {
            return Err(block_err(format!(
                "expected `field: value` lines (a YAML mapping), found {}",
                describe(&other)
            )))
        }
    };
    let mut fields = Fields::new(kind, line, mapping)?;
    let block = match kind {
        BlockKind::Success => OutcomeBlock::Success(SuccessBlock {
            role: fields.string("role")?,
            stage_attempt: fields.attempt()?,
            idempotency_key: fields.string("idempotency_key")?,
            from_status: fields.string("from_status")?,
            to_status: fields.string("to_status")?,
            summary: fields.string("summary")?,
            run_id: fields.optional_string("run_id")?,
            duration_seconds: fields.optional_number("duration_seconds")?,
            artifacts: fields.string_map("artifacts")?,
            evidence: fields.evidence()?,
            extra: fields.extra()?,
        }),
        BlockKind::Failure => OutcomeBlock::Failure(FailureBlock {
            role: fields.string("role")?,
            stage_attempt: fields.attempt()?,
            idempotency_key: fields.string("idempotency_key")?,
            from_status: fields.string("from_status")?,
            to_status: fields.string("to_status")?,
            reason_code: fields.string("reason_code")?,
            category: fields.choice("category", &Category::ALL, |c| c.as_str())?,
            transient: fields.boolean("transient")?,
            next_action: fields.choice("next_action", &NextAction::ALL, |a| a.as_str())?,
            detail: fields.string("detail")?,
            run_id: fields.optional_string("run_id")?,
            duration_seconds: fields.optional_number("duration_seconds")?,
            extra: fields.extra()?,
        }),
    };
    block.validate().map_err(|e| BlockError { line, ..e })?;
    Ok(block)
}

/// The body's fields, taken out one at a time; what is left over is `extra`.
struct Fields {
    kind: BlockKind,
    line: usize,
    map: BTreeMap<String, Value>,
}

impl Fields {
    fn new(kind: BlockKind, line: usize, mapping: Mapping) -> Result<Self, BlockError> {
        let mut map = BTreeMap::new();
        for (key, value) in mapping {
            match key {
                Value::String(key) => {
                    map.insert(key, value);
                }
                other => {
                    return Err(BlockError::block(
                        line,
                        kind,
                        format!("field names must be strings, found {}", describe(&other)),
                    ))
                }
            }
        }
        Ok(Self { kind, line, map })
    }

    fn error(&self, field: &str, message: String) -> BlockError {
        BlockError::field(self.line, self.kind, field, message)
    }

    fn required(&mut self, field: &str) -> Result<Value, BlockError> {
        self.map
            .remove(field)
            .ok_or_else(|| self.error(field, "is missing (it is required)".into()))
    }

    /// An absent field and an explicit `null` both mean "not given".
    fn optional(&mut self, field: &str) -> Option<Value> {
        self.map.remove(field).filter(|v| !v.is_null())
    }

    fn string(&mut self, field: &str) -> Result<String, BlockError> {
        let value = self.required(field)?;
        self.as_string(field, value)
    }

    fn optional_string(&mut self, field: &str) -> Result<Option<String>, BlockError> {
        self.optional(field)
            .map(|value| self.as_string(field, value))
            .transpose()
    }

    fn as_string(&self, field: &str, value: Value) -> Result<String, BlockError> {
        match value {
            Value::String(s) => Ok(s),
            other => Err(self.error(field, expected("a string", &other))),
        }
    }

    fn attempt(&mut self) -> Result<u32, BlockError> {
        let field = "stage_attempt";
        let value = self.required(field)?;
        value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                self.error(
                    field,
                    expected("a whole number from 1 to 4294967295", &value),
                )
            })
    }

    fn boolean(&mut self, field: &str) -> Result<bool, BlockError> {
        let value = self.required(field)?;
        value
            .as_bool()
            .ok_or_else(|| self.error(field, expected("`true` or `false`", &value)))
    }

    fn optional_number(&mut self, field: &str) -> Result<Option<f64>, BlockError> {
        self.optional(field)
            .map(|value| {
                value
                    .as_f64()
                    .ok_or_else(|| self.error(field, expected("a number", &value)))
            })
            .transpose()
    }

    fn choice<T: Copy>(
        &mut self,
        field: &str,
        all: &[T],
        spelling: fn(T) -> &'static str,
    ) -> Result<T, BlockError> {
        let value = self.required(field)?;
        let found = value
            .as_str()
            .and_then(|s| all.iter().copied().find(|&choice| spelling(choice) == s));
        found.ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|&c| format!("`{}`", spelling(c))).collect();
            self.error(
                field,
                expected(&format!("one of {}", names.join(", ")), &value),
            )
        })
    }

    fn string_map(&mut self, field: &str) -> Result<BTreeMap<String, String>, BlockError> {
        let Some(value) = self.optional(field) else {
            return Ok(BTreeMap::new());
        };
        let Value::Mapping(mapping) = value else {
            return Err(self.error(field, expected("a mapping of name: value", &value)));
        };
        let mut map = BTreeMap::new();
        for (key, value) in mapping {
            let Value::String(key) = key else {
                return Err(self.error(field, expected("string names", &key)));
            };
            let value = self.as_string(&format!("{field}.{key}"), value)?;
            map.insert(key, value);
        }
        Ok(map)
    }

    /// `evidence`: a mapping of `checks`, `change` and `work` (docs/evidence.md).
    fn evidence(&mut self) -> Result<Option<super::Evidence>, BlockError> {
        let Some(value) = self.optional("evidence") else {
            return Ok(None);
        };
        if !value.is_mapping() {
            return Err(self.error(
                "evidence",
                expected("a mapping of checks, change and work", &value),
            ));
        }
        serde_yaml::from_value(value).map(Some).map_err(|e| {
            self.error(
                "evidence",
                format!("is not readable as evidence (docs/evidence.md): {e}"),
            )
        })
    }

    /// Whatever the known fields left behind, minus the keys `sortie block parse` reserves.
    fn extra(&mut self) -> Result<BTreeMap<String, Value>, BlockError> {
        if let Some(key) = RESERVED_FIELDS.iter().find(|k| self.map.contains_key(**k)) {
            return Err(self.error(
                key,
                "is reserved (`sortie block parse` adds it to every block) and cannot be a field"
                    .into(),
            ));
        }
        Ok(std::mem::take(&mut self.map))
    }
}

/// "expected X, found Y".
fn expected(what: &str, found: &Value) -> String {
    let hint = match found {
        Value::Number(_) | Value::Bool(_) if what == "a string" => {
            " (quote it to make it a string)"
        }
        Value::Null if what == "a string" => " (write '' for an empty string)",
        _ => "",
    };
    format!("expected {what}, found {}{hint}", describe(found))
}

/// A short description of a YAML value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => format!("the boolean `{b}`"),
        Value::Number(n) => format!("the number `{n}`"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged `{}`", t.tag),
    }
}

/// A YAML syntax error, its `line N` references shifted from the body's lines to the comment's.
fn yaml_message(error: &serde_yaml::Error, fence_line: usize) -> String {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = LINE.get_or_init(|| Regex::new(r"\bline (\d+)").expect("valid regex"));
    let text = error.to_string();
    let shifted = line.replace_all(&text, |caps: &regex::Captures<'_>| {
        match caps[1].parse::<usize>() {
            Ok(n) => format!("line {}", n + fence_line),
            Err(_) => caps[0].to_owned(),
        }
    });
    format!("invalid YAML: {shifted}")
}

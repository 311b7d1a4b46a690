//! Tool calls for the protocols that offer tools as JSON schemas (the Gemini API, OpenAI
//! Chat Completions): a step's file write or command becomes a call of whichever offered
//! tool does that, with arguments built from the tool's own schema, so one script drives
//! Gemini CLI, Qwen Code and OpenCode alike.

use serde_json::{json, Map, Value};

use super::Step;

/// Names the agents give their file-writing tool (Gemini CLI and Qwen Code: `write_file`;
/// OpenCode: `write`).
const WRITE_TOOLS: &[&str] = &["write_file", "write", "Write", "create_file"];
/// Names of their shell tool (Gemini CLI and Qwen Code: `run_shell_command`; OpenCode: `bash`).
const SHELL_TOOLS: &[&str] = &["run_shell_command", "bash", "shell", "Bash"];
const PATH_KEYS: &[&str] = &["file_path", "filePath", "absolute_path", "path"];
const CONTENT_KEYS: &[&str] = &["content", "contents", "text"];

/// One offered tool: its name and its parameters' JSON schema.
#[derive(Debug, Clone)]
pub struct Offered {
    /// The tool's name.
    pub name: String,
    /// The JSON schema of its arguments (Null when none).
    pub schema: Value,
}

/// The absolute path a step's `file` names: as given when absolute, else in `workspace`.
pub fn target(workspace: &str, file: &str) -> String {
    if file.starts_with('/') {
        file.to_string()
    } else {
        format!("{workspace}/{file}")
    }
}

/// The tool call (name, arguments) a step makes with the tools `offered`; `None` for a step
/// without one.
pub fn call_for(step: &Step, offered: &[Offered], workspace: &str) -> Option<(String, Value)> {
    let (names, known): (&[&str], Vec<(&[&str], String)>) = match step {
        Step::WriteFile { file, content } => (
            WRITE_TOOLS,
            vec![
                (PATH_KEYS, target(workspace, file)),
                (CONTENT_KEYS, content.clone()),
            ],
        ),
        Step::Shell(command) => (SHELL_TOOLS, vec![(&["command"][..], command.clone())]),
        _ => return None,
    };
    let tool = names
        .iter()
        .find_map(|n| offered.iter().find(|t| t.name == *n))
        .cloned()
        .unwrap_or(Offered {
            name: names[0].to_string(),
            schema: Value::Null,
        });
    let properties = tool.schema["properties"].as_object().cloned();
    let mut args = Map::new();
    for (keys, value) in known {
        // The first of `keys` the schema has (the first of all without a schema).
        let key = keys
            .iter()
            .find(|k| properties.as_ref().is_none_or(|p| p.contains_key(**k)))
            .unwrap_or(&keys[0]);
        args.insert(key.to_string(), json!(value));
    }
    // Every other required argument, filled by its type (`description`, `is_background`).
    for name in tool.schema["required"].as_array().into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        if !args.contains_key(name) {
            let schema = properties
                .as_ref()
                .and_then(|p| p.get(name))
                .cloned()
                .unwrap_or(Value::Null);
            args.insert(name.to_string(), filler(name, &schema));
        }
    }
    Some((tool.name, Value::Object(args)))
}

/// A value that fits `schema` (for required arguments the script does not name, and for
/// the JSON answers of an agent's side calls, such as Gemini CLI's next-speaker check).
pub fn filler(name: &str, schema: &Value) -> Value {
    if let Some(options) = schema["enum"].as_array().filter(|o| !o.is_empty()) {
        // A next-speaker check is answered "the user": the model's turn is over.
        return options
            .iter()
            .find(|o| o.as_str() == Some("user"))
            .unwrap_or(&options[0])
            .clone();
    }
    let kind = match &schema["type"] {
        Value::Array(kinds) => kinds.first().cloned().unwrap_or(Value::Null),
        kind => kind.clone(),
    };
    match kind.as_str().map(str::to_ascii_lowercase).as_deref() {
        Some("boolean") => json!(false),
        Some("integer") | Some("number") => json!(0),
        Some("array") => json!([]),
        Some("object") => {
            let mut object = Map::new();
            for (key, property) in schema["properties"].as_object().into_iter().flatten() {
                object.insert(key.clone(), filler(key, property));
            }
            Value::Object(object)
        }
        _ => json!(format!("mock {name}")),
    }
}

//! The agent's requests to sortie: permission requests answered by policy, file reads and
//! writes served inside the confinement, anything else refused.

use serde_json::{json, Value};

use super::policy::{self, tool_id};
use super::{AcpSession, MAX_READ_BYTES};

impl AcpSession {
    /// Answer a request of the agent's, at once.
    pub(super) fn on_request(&mut self, method: &str, id: Value, params: &Value) {
        match method {
            "session/request_permission" => self.answer_permission(id, params),
            "fs/read_text_file" => self.read_file(id, params),
            "fs/write_text_file" => self.write_file(id, params),
            _ => self.reply_error(id, -32601, &format!("sortie does not offer `{method}`")),
        }
    }

    fn answer_permission(&mut self, id: Value, params: &Value) {
        let call = params.get("toolCall").cloned().unwrap_or(Value::Null);
        let facts = self.remember(tool_id(&call), &call);
        let verdict = policy::decide(self.options.permissions, &facts, &self.room);
        let options = params.get("options").cloned().unwrap_or(Value::Null);
        let chosen = policy::choose(&options, verdict.allow);
        let (word, allowed) = match (&chosen, verdict.allow) {
            (Some(_), true) => ("allowed", true),
            (None, true) => ("denied (no allow option was offered)", false),
            (_, false) => ("denied", false),
        };
        let answer = chosen
            .clone()
            .map(|option| json!({"outcome": {"outcome": "selected", "optionId": option}}))
            .unwrap_or_else(|| json!({"outcome": {"outcome": "cancelled"}}));
        let line = format!(
            "permission {word} (policy {}): {}; {}; answered {}",
            self.options.permissions.as_str(),
            facts.describe(),
            verdict.why,
            chosen.as_deref().unwrap_or("cancelled"),
        );
        tracing::info!(allowed, tool = %facts.describe(), why = %verdict.why, "ACP permission request answered");
        if !allowed {
            self.denials
                .push(format!("- {}: {}", facts.describe(), verdict.why));
        }
        self.log.push(line);
        self.saw("permission", format!("{word}: {}", facts.describe()));
        self.reply(id, answer);
    }

    fn read_file(&mut self, id: Value, params: &Value) {
        let Some(path) = params.get("path").and_then(Value::as_str) else {
            return self.reply_error(id, -32602, "fs/read_text_file needs a `path`");
        };
        if !policy::may_read(self.options.permissions, path, &self.room) {
            self.log.push(format!(
                "file read refused: {path} is outside the workspace"
            ));
            return self.reply_error(id, -32000, &format!("{path} is outside the workspace"));
        }
        let resolved = self.room.resolve(path);
        let text = match std::fs::metadata(&resolved) {
            Ok(meta) if meta.len() > MAX_READ_BYTES => {
                return self.reply_error(id, -32000, &format!("{path} is over 8 MiB"));
            }
            // Gemini CLI cannot create a file whose read failed: a new file reads empty.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
            _ => match std::fs::read_to_string(&resolved) {
                Ok(text) => text,
                Err(err) => return self.reply_error(id, -32000, &format!("{path}: {err}")),
            },
        };
        let line = params
            .get("line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        let limit = params.get("limit").and_then(Value::as_u64);
        let content = if line == 1 && limit.is_none() {
            text
        } else {
            let skip = usize::try_from(line - 1).unwrap_or(usize::MAX);
            let take = limit.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
            text.split_inclusive('\n').skip(skip).take(take).collect()
        };
        self.reply(id, json!({"content": content}));
    }

    fn write_file(&mut self, id: Value, params: &Value) {
        let (Some(path), Some(content)) = (
            params.get("path").and_then(Value::as_str),
            params.get("content").and_then(Value::as_str),
        ) else {
            return self.reply_error(id, -32602, "fs/write_text_file needs `path` and `content`");
        };
        if !policy::may_write(self.options.permissions, path, &self.room) {
            let why = format!(
                "{path} is outside what policy {} lets the agent write",
                self.options.permissions.as_str()
            );
            self.log.push(format!("file write refused: {why}"));
            self.denials.push(format!("- write {path}: {why}"));
            return self.reply_error(id, -32000, &why);
        }
        let resolved = self.room.resolve(path);
        let written = resolved
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&resolved, content));
        match written {
            Ok(()) => self.reply(id, json!({})),
            Err(err) => self.reply_error(id, -32000, &format!("{path}: {err}")),
        }
    }
}

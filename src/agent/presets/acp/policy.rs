//! Answering an ACP agent's permission requests and file requests by the `permissions`
//! policy: what a tool call touches, whether that is inside the workspace, and which of the
//! offered options says so.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::config::AcpPermissions;

/// Keys of a tool call's `rawInput` that name a path it works on (the agents differ).
const PATH_KEYS: &[&str] = &[
    "file_path",
    "filePath",
    "path",
    "absolute_path",
    "notebook_path",
    "dir_path",
    "directory",
    "target_file",
];

/// What sortie knows about one tool call: from the permission request, merged with the
/// `tool_call` updates of the same id (claude-code-acp's requests carry no kind nor locations).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ToolFacts {
    /// A short title (`Edit src/a.rs`).
    pub title: Option<String>,
    /// ACP tool kind: `read`, `edit`, `delete`, `move`, `search`, `execute`, `think`,
    /// `fetch`, `switch_mode`, `other`.
    pub kind: Option<String>,
    /// Paths the call names (locations, path-like input keys), as written.
    pub paths: Vec<String>,
    /// The directory a command runs in, when the input names one.
    pub cwd: Option<String>,
    /// A URL the call fetches.
    pub url: Option<String>,
}

impl ToolFacts {
    /// Merge what `call` (a `ToolCall` or `ToolCallUpdate` object) says.
    pub(crate) fn merge(&mut self, call: &Value) {
        if let Some(title) = call.get("title").and_then(Value::as_str) {
            self.title = Some(title.to_string());
        }
        if let Some(kind) = call.get("kind").and_then(Value::as_str) {
            self.kind = Some(kind.to_string());
        }
        let mut add = |path: &str| {
            if !path.is_empty() && !self.paths.iter().any(|p| p == path) {
                self.paths.push(path.to_string());
            }
        };
        for location in call
            .get("locations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(path) = location.get("path").and_then(Value::as_str) {
                add(path);
            }
        }
        if let Some(input) = call.get("rawInput").filter(|v| v.is_object()) {
            for key in PATH_KEYS {
                if let Some(path) = input.get(*key).and_then(Value::as_str) {
                    add(path);
                }
            }
            if let Some(cwd) = input.get("cwd").and_then(Value::as_str) {
                self.cwd = Some(cwd.to_string());
            }
            if let Some(url) = input.get("url").and_then(Value::as_str) {
                self.url = Some(url.to_string());
            }
        }
    }

    /// One line for the log: title, kind and paths.
    pub(crate) fn describe(&self) -> String {
        let mut text = self.title.clone().unwrap_or_else(|| "a tool call".into());
        if let Some(kind) = &self.kind {
            text.push_str(&format!(" [{kind}]"));
        }
        if !self.paths.is_empty() {
            text.push_str(&format!(" on {}", self.paths.join(", ")));
        }
        if let Some(url) = &self.url {
            text.push_str(&format!(" fetching {url}"));
        }
        text
    }
}

/// Where a run may read and write: its workspace, plus its result file.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    workspace: PathBuf,
    result_file: PathBuf,
}

impl Confinement {
    /// The confinement of a run in `workspace` that reports through `result_file`.
    pub(crate) fn new(workspace: &Path, result_file: &Path) -> Self {
        Confinement {
            workspace: resolve(workspace, Path::new("/")),
            result_file: resolve(result_file, Path::new("/")),
        }
    }

    /// The workspace, as resolved.
    pub(crate) fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// `path` (relative paths are taken from the workspace) with `..` and symbolic links
    /// of its existing part resolved.
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        resolve(Path::new(path), &self.workspace)
    }

    /// Whether `path` is inside the workspace.
    pub(crate) fn in_workspace(&self, path: &str) -> bool {
        self.resolve(path).starts_with(&self.workspace)
    }

    /// Whether `path` is the run's result file.
    pub(crate) fn is_result_file(&self, path: &str) -> bool {
        self.resolve(path) == self.result_file
    }
}

/// `path` made absolute against `base`, `.` and `..` dropped lexically, then its longest
/// existing prefix canonicalized (so a symbolic link out of the workspace is seen).
fn resolve(path: &Path, base: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    let mut existing = out.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut real = real;
            for part in rest.iter().rev() {
                real.push(part);
            }
            return real;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return out,
        }
    }
}

/// The answer to one permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Allowed or not.
    pub allow: bool,
    /// Why, for the log.
    pub why: String,
}

/// The `policy`'s answer to a tool call described by `facts`.
pub(crate) fn decide(policy: AcpPermissions, facts: &ToolFacts, room: &Confinement) -> Verdict {
    let verdict = |allow: bool, why: String| Verdict { allow, why };
    match policy {
        AcpPermissions::AllowAll => return verdict(true, "policy allow_all".into()),
        AcpPermissions::DenyAll => return verdict(false, "policy deny_all".into()),
        AcpPermissions::Workspace => {}
    }
    match facts.kind.as_deref() {
        Some("fetch") => {
            return verdict(
                false,
                "a fetch from the network is outside the workspace".into(),
            )
        }
        Some("switch_mode") => {
            return verdict(
                false,
                "the agent may not change its own permission mode".into(),
            )
        }
        _ => {}
    }
    if let Some(url) = &facts.url {
        return verdict(false, format!("fetching {url} is outside the workspace"));
    }
    let outside = facts
        .paths
        .iter()
        .chain(facts.cwd.iter())
        .find(|p| !room.in_workspace(p) && !room.is_result_file(p));
    match outside {
        Some(path) => verdict(
            false,
            format!(
                "{path} is outside the workspace {}",
                room.workspace().display()
            ),
        ),
        None => verdict(true, "inside the workspace".into()),
    }
}

/// The `optionId` among `options` (`PermissionOption`s) that gives `allow`: a once-option
/// before an always-option; `None` when none is offered (the request is then answered
/// `cancelled`, which every agent takes as a refusal).
pub(crate) fn choose(options: &Value, allow: bool) -> Option<String> {
    let kinds: [&str; 2] = if allow {
        ["allow_once", "allow_always"]
    } else {
        ["reject_once", "reject_always"]
    };
    let options = options.as_array()?;
    kinds.iter().find_map(|kind| {
        options
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
            .and_then(|o| o.get("optionId").and_then(Value::as_str))
            .map(str::to_string)
    })
}

/// Whether a client-side file read (`fs/read_text_file`) of `path` is allowed.
pub(crate) fn may_read(policy: AcpPermissions, path: &str, room: &Confinement) -> bool {
    match policy {
        AcpPermissions::AllowAll => true,
        AcpPermissions::Workspace | AcpPermissions::DenyAll => {
            room.in_workspace(path) || room.is_result_file(path)
        }
    }
}

/// Whether a client-side file write (`fs/write_text_file`) of `path` is allowed: the result
/// file always; the workspace unless the policy denies all.
pub(crate) fn may_write(policy: AcpPermissions, path: &str, room: &Confinement) -> bool {
    match policy {
        AcpPermissions::AllowAll => true,
        AcpPermissions::Workspace => room.in_workspace(path) || room.is_result_file(path),
        AcpPermissions::DenyAll => room.is_result_file(path),
    }
}

/// The `toolCallId` of a `ToolCall` or `ToolCallUpdate` object.
pub(crate) fn tool_id(call: &Value) -> Option<String> {
    call.get("toolCallId")
        .and_then(Value::as_str)
        .map(str::to_string)
}

//! `agent.sandbox` written as a mapping: the bubblewrap settings, validated, and whether
//! `bwrap` is installed and usable on this host (a sandbox that cannot start is a config
//! error at load, never a silent fall back to running unconfined).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_yaml::Value;

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{Bubblewrap, SandboxHome, SandboxNetwork};
use super::raw::RawSandbox;
use super::values::{expand_home_or_report, resolve};

/// The variable naming the `bwrap` program to use instead of `bwrap` on `PATH`.
pub const BWRAP_ENV: &str = "SORTIE_BWRAP";

/// The bubblewrap settings of `agent.sandbox` (a mapping), or `None` for `kind: none`;
/// every problem is recorded against its field.
pub(super) fn bubblewrap(
    value: &Value,
    path: &FieldPath,
    base: &Path,
    problems: &mut Problems,
) -> Option<Bubblewrap> {
    let raw: RawSandbox = match serde_path_to_error::deserialize(value.clone()) {
        Ok(raw) => raw,
        Err(err) => {
            problems.serde(path, &err);
            return None;
        }
    };
    match raw.kind.as_deref() {
        None => {
            problems.at_key(
                &path.key("kind"),
                "missing required key `kind` in `agent.sandbox`; expected `bubblewrap` or `none`",
            );
            return None;
        }
        Some("none") => return None,
        Some("bubblewrap") => {}
        Some(other) => {
            problems.at_value(
                &path.key("kind"),
                format!("unknown sandbox kind {other:?}; expected `bubblewrap` or `none`"),
            );
            return None;
        }
    }
    let network = match raw.network.as_deref() {
        None | Some("host") => SandboxNetwork::Host,
        Some("none") => SandboxNetwork::None,
        Some(other) => {
            problems.at_value(
                &path.key("network"),
                format!("unknown network {other:?}; expected `host` or `none`"),
            );
            SandboxNetwork::Host
        }
    };
    let home = match raw.home.as_deref() {
        None | Some("ephemeral") => SandboxHome::Ephemeral,
        Some("persistent") => SandboxHome::Persistent,
        Some(other) => {
            problems.at_value(
                &path.key("home"),
                format!("unknown home {other:?}; expected `ephemeral` or `persistent`"),
            );
            SandboxHome::Ephemeral
        }
    };
    let paths = |key: &str, list: Option<Vec<String>>, problems: &mut Problems| {
        let mut out = Vec::new();
        for (i, p) in list.unwrap_or_default().into_iter().enumerate() {
            let at = path.key(key).index(i);
            if p.trim().is_empty() {
                problems.at_value(&at, "expected a path, found an empty string");
                continue;
            }
            let expanded = expand_home_or_report(problems, &at, &p);
            let resolved = lexically_normal(&resolve(base, &expanded));
            if resolved == Path::new("/") {
                problems.at_value(
                    &at,
                    "`/` would hand the agent the whole host; name the directories it needs",
                );
                continue;
            }
            out.push(resolved);
        }
        out
    };
    let read_only = paths("read_only", raw.read_only, problems);
    let writable = paths("writable", raw.writable, problems);
    let mut env = Vec::new();
    for (i, name) in raw.env.unwrap_or_default().into_iter().enumerate() {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            problems.at_value(
                &path.key("env").index(i),
                format!("{name:?} is not a valid environment variable name"),
            );
        } else {
            env.push(name);
        }
    }
    let program = match usable_bwrap(network) {
        Ok(program) => program,
        Err(why) => {
            problems.at_value(
                &path.key("kind"),
                format!(
                    "`kind: bubblewrap`, but {why}; install Debian's `bubblewrap` package (or \
                     set ${BWRAP_ENV}), or set `kind: none` to run agents unconfined \
                     (docs/sandbox.md says how to check a host)"
                ),
            );
            return None;
        }
    };
    Some(Bubblewrap {
        program,
        network,
        read_only,
        writable,
        env,
        home,
    })
}

/// `path` with `.` and `..` components folded (without touching the file system).
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Programs already shown to start a sandbox here (a tick or a reload does not start
/// the probe again).
static PROBED: Mutex<Option<HashSet<(PathBuf, SandboxNetwork)>>> = Mutex::new(None);

/// The `bwrap` program, once it has started a sandbox with the namespaces sortie asks
/// for; why not otherwise (not installed, or user namespaces refused on this host).
pub fn usable_bwrap(network: SandboxNetwork) -> Result<PathBuf, String> {
    let program = match std::env::var_os(BWRAP_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => crate::program::find_program("bwrap")
            .ok_or_else(|| "`bwrap` is not on PATH".to_string())?,
    };
    let key = (program.clone(), network);
    if PROBED
        .lock()
        .expect("probe lock")
        .as_ref()
        .is_some_and(|seen| seen.contains(&key))
    {
        return Ok(program);
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
    ]);
    if network == SandboxNetwork::None {
        cmd.arg("--unshare-net");
    }
    cmd.args([
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "true",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let out = cmd
        .output()
        .map_err(|e| format!("{} cannot be started: {e}", program.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(format!(
            "{} cannot start a sandbox on this host (unprivileged user namespaces may be \
             disabled: see `sysctl kernel.unprivileged_userns_clone` and \
             `user.max_user_namespaces`): {said}",
            program.display()
        ));
    }
    PROBED
        .lock()
        .expect("probe lock")
        .get_or_insert_with(HashSet::new)
        .insert(key);
    Ok(program)
}

/// An extra path that holds `state_root` (the ledger, every workspace) or lies inside
/// it would hand the agent what the sandbox is there to hide.
pub(super) fn check_state_root(jail: &Bubblewrap, state_root: &Path, problems: &mut Problems) {
    let root = lexically_normal(state_root);
    let base = FieldPath::root().key("agent").key("sandbox");
    for (key, list) in [("read_only", &jail.read_only), ("writable", &jail.writable)] {
        for (i, p) in list.iter().enumerate() {
            if root.starts_with(p) || p.starts_with(&root) {
                problems.at_value(
                    &base.key(key).index(i),
                    format!(
                        "{} overlaps state_root {} (the ledger and every ticket's workspace), \
                         which the sandbox hides from the agent",
                        p.display(),
                        root.display()
                    ),
                );
            }
        }
    }
}

/// What `pipeline validate` and `tracker check` say of the sandbox: whether the
/// configured one starts here (it did, or the config would not have loaded), or for
/// `kind: none` whether one could.
pub fn sandbox_report(jail: Option<&Bubblewrap>) -> String {
    match jail {
        Some(j) => format!(
            "bubblewrap ({} starts a sandbox here; network {}, home {})",
            j.program.display(),
            match j.network {
                SandboxNetwork::Host => "host",
                SandboxNetwork::None => "none",
            },
            match j.home {
                SandboxHome::Ephemeral => "ephemeral",
                SandboxHome::Persistent => "persistent",
            }
        ),
        None => match usable_bwrap(SandboxNetwork::Host) {
            Ok(program) => format!(
                "none: agents run unconfined ({} could confine them: `agent.sandbox: {{kind: bubblewrap}}`)",
                program.display()
            ),
            Err(why) => format!("none: agents run unconfined (no sandbox possible here: {why})"),
        },
    }
}

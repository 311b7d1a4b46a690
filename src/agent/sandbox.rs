//! Confining a run with bubblewrap (`agent.sandbox`, `kind: bubblewrap`; docs/sandbox.md).
//!
//! The agent (and the `before_run` / `after_run` hooks) start under `bwrap` in new user,
//! PID, IPC, UTS and cgroup namespaces (and a network namespace with `network: none`),
//! dying with sortie. The file system it sees is built from nothing: the host's system
//! directories read-only, a fresh `/tmp`, `/proc` and `/dev`, a private home, the agent
//! program's install directory read-only, the ticket's workspace and the run's own
//! directory (prompt, result file) read-write at their own paths, and the paths the
//! config adds. `state_root`, the other workspaces and the host's home directories are
//! not there. Its environment is built from nothing too: only the variables named in
//! `sandbox.env`, the agent's `env`, the `SORTIE_*` ones and what the preset needs.
//!
//! With `workspace.git`, the mirror is bound read-only and only this worktree's own
//! administrative directory read-write; the agent commits on a detached `HEAD` into an
//! object directory of its own ([`crate::agent::git::enter_sandbox`]), and sortie moves
//! the commits onto the ticket's branch after the run, outside the sandbox.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{AgentConfig, AgentPreset, Bubblewrap, SandboxHome, SandboxNetwork};

mod toolchains;

pub use toolchains::Toolchain;

/// What a confined run's block records in `sandbox:`.
pub const SANDBOX_BUBBLEWRAP: &str = "bubblewrap";

/// Variables of sortie's environment every sandbox gets (locale and terminal only).
const BASE_ENV: &[&str] = &[
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
];

/// Host directories bound read-only when they exist (a symlink, as in a merged-`/usr`
/// system, is recreated as the same symlink).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// The git storage a sandboxed run of a worktree sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxGit {
    /// The bare mirror, bound read-only.
    pub mirror: PathBuf,
    /// This worktree's administrative directory in the mirror (`worktrees/<name>`), bound
    /// read-write: its `HEAD`, index and logs.
    pub admin: PathBuf,
    /// Where the agent's new objects go (inside `admin`).
    pub objects: PathBuf,
}

/// How one run is confined: built by the pipeline, applied by the runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The `bwrap` program.
    pub program: PathBuf,
    /// `host` or `none`.
    pub network: SandboxNetwork,
    /// Host paths bound read-only (at the same path), beyond the system directories.
    pub read_only: Vec<PathBuf>,
    /// Host paths bound read-write (at the same path), beyond the workspace and run directory.
    pub writable: Vec<PathBuf>,
    /// Files bound read-only at another path (a preset's config files into the private home).
    pub files: Vec<(PathBuf, PathBuf)>,
    /// Files hidden behind an empty one (credentials inside a bound toolchain root).
    pub hidden: Vec<PathBuf>,
    /// The version managers installed on the host (rustup, pyenv, ...): a command whose
    /// `PATH` or program lies in one gets it bound ([`toolchains`]).
    pub toolchains: Vec<Toolchain>,
    /// The private home (host path, bound at the same path; `HOME` inside).
    pub home: PathBuf,
    /// Remove `home` after the run (`home: ephemeral`).
    pub remove_home: bool,
    /// The environment inside, before the agent's `env` and the `SORTIE_*` variables.
    pub env: BTreeMap<String, String>,
    /// Variables the preset sets last (its config directory inside the private home).
    pub preset_env: BTreeMap<String, String>,
    /// The worktree's git storage, with `workspace.git`.
    pub git: Option<SandboxGit>,
}

/// The private home of a run: per run (`ephemeral`) or per ticket (`persistent`).
pub fn sandbox_home(
    state_root: &Path,
    home: SandboxHome,
    ticket_id: &str,
    run_id: &str,
) -> PathBuf {
    let homes = state_root.join("sandbox").join("homes");
    match home {
        SandboxHome::Ephemeral => {
            homes.join(format!("run-{}", super::workspace::workspace_name(run_id)))
        }
        SandboxHome::Persistent => homes.join(super::workspace::workspace_name(ticket_id)),
    }
}

impl SandboxPlan {
    /// The plan for running `agent` confined by `jail` on `ticket_id` (run `run_id`),
    /// with `env` as sortie's environment (a lookup, for tests).
    pub fn new(
        jail: &Bubblewrap,
        agent: &AgentConfig,
        state_root: &Path,
        ticket_id: &str,
        run_id: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> SandboxPlan {
        let home = sandbox_home(state_root, jail.home, ticket_id, run_id);
        let mut inside = BTreeMap::new();
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(jail.env.iter().map(String::as_str))
        {
            if let Some(value) = env(name) {
                inside.insert(name.to_string(), value);
            }
        }
        let mut plan = SandboxPlan {
            program: jail.program.clone(),
            network: jail.network,
            read_only: jail.read_only.clone(),
            writable: jail.writable.clone(),
            files: Vec::new(),
            hidden: Vec::new(),
            toolchains: toolchains::installed(env, state_root),
            home: home.clone(),
            remove_home: jail.home == SandboxHome::Ephemeral,
            env: inside,
            preset_env: BTreeMap::new(),
            git: None,
        };
        plan.preset_needs(agent, env);
        plan
    }

    /// What the agent's CLI needs from the host: its config files, read-only, in the
    /// private home (sessions are written there, so `--resume` works within a run's
    /// home: across runs with `home: persistent`).
    fn preset_needs(&mut self, agent: &AgentConfig, env: &dyn Fn(&str) -> Option<String>) {
        let lookup = |name: &str| agent.env.get(name).cloned().or_else(|| env(name));
        let host_home = env("HOME").map(PathBuf::from);
        match agent.preset {
            // An ACP agent's own files are the agent's business (docs/agents.md): a
            // persistent home keeps its sessions for `session/load`.
            AgentPreset::Command | AgentPreset::Acp => {}
            AgentPreset::ClaudeCode => {
                let config = lookup("CLAUDE_CONFIG_DIR")
                    .map(PathBuf::from)
                    .or_else(|| host_home.map(|h| h.join(".claude")));
                let inside = self.home.join(".claude");
                if let Some(config) = config {
                    for name in ["settings.json", ".credentials.json"] {
                        let file = config.join(name);
                        if file.is_file() {
                            self.files.push((file, inside.join(name)));
                        }
                    }
                }
                if lookup("CLAUDE_CONFIG_DIR").is_some() {
                    self.preset_env
                        .insert("CLAUDE_CONFIG_DIR".into(), inside.display().to_string());
                }
            }
            AgentPreset::Codex => {
                let config = lookup("CODEX_HOME")
                    .map(PathBuf::from)
                    .or_else(|| host_home.map(|h| h.join(".codex")));
                let inside = self.home.join(".codex");
                if let Some(config) = config {
                    for name in ["config.toml", "auth.json"] {
                        let file = config.join(name);
                        if file.is_file() {
                            self.files.push((file, inside.join(name)));
                        }
                    }
                }
                self.preset_env
                    .insert("CODEX_HOME".into(), inside.display().to_string());
            }
        }
    }

    /// The `bwrap` arguments (before the agent's argv) for a run in `workspace` whose
    /// prompt and result file are in `run_dir`.
    pub fn bwrap_args(&self, workspace: &Path, run_dir: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_os_string()));
        };
        push(&[
            &"--unshare-user",
            &"--unshare-pid",
            &"--unshare-ipc",
            &"--unshare-uts",
            &"--unshare-cgroup-try",
            &"--die-with-parent",
            &"--new-session",
        ]);
        if self.network == SandboxNetwork::None {
            push(&[&"--unshare-net"]);
        }
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        push(&[&"--symlink", &target, &path]);
                    }
                }
                Ok(_) => push(&[&"--ro-bind", &path, &path]),
                Err(_) => {}
            }
        }
        push(&[
            &"--proc", &"/proc", &"--dev", &"/dev", &"--tmpfs", &"/tmp", &"--tmpfs", &"/run",
        ]);
        for path in &self.read_only {
            push(&[&"--ro-bind-try", path, path]);
        }
        // After the roots they lie in: an empty file over each.
        for path in &self.hidden {
            push(&[&"--ro-bind", &"/dev/null", path]);
        }
        for path in &self.writable {
            push(&[&"--bind-try", path, path]);
        }
        push(&[&"--bind", &self.home, &self.home]);
        for (from, to) in &self.files {
            push(&[&"--ro-bind", from, to]);
        }
        if let Some(git) = &self.git {
            push(&[&"--ro-bind", &git.mirror, &git.mirror]);
            push(&[&"--bind", &git.admin, &git.admin]);
        }
        push(&[&"--bind", &workspace, &workspace]);
        push(&[&"--bind", &run_dir, &run_dir]);
        push(&[&"--chdir", &workspace]);
        args
    }

    /// The whole environment inside for a run whose agent has `agent_env` and `vars`.
    pub fn environment(
        &self,
        agent_env: &BTreeMap<String, String>,
        vars: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        env.extend(agent_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.insert("HOME".into(), self.home.display().to_string());
        env.insert("TMPDIR".into(), "/tmp".into());
        env.extend(self.preset_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(git) = &self.git {
            env.insert(
                "GIT_OBJECT_DIRECTORY".into(),
                git.objects.display().to_string(),
            );
            env.insert(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES".into(),
                git.mirror.join("objects").display().to_string(),
            );
            // The mirror is read-only inside: no automatic gc or maintenance there.
            for (i, (key, value)) in [("gc.auto", "0"), ("maintenance.auto", "false")]
                .iter()
                .enumerate()
            {
                env.insert(format!("GIT_CONFIG_KEY_{i}"), key.to_string());
                env.insert(format!("GIT_CONFIG_VALUE_{i}"), value.to_string());
            }
            env.insert("GIT_CONFIG_COUNT".into(), "2".into());
        }
        env
    }

    /// `program args` under `bwrap` in `workspace` (also binding `run_dir`), with exactly
    /// the environment `environment` builds from `agent_env` and `vars`.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
        workspace: &Path,
        run_dir: &Path,
        agent_env: &BTreeMap<String, String>,
        vars: &BTreeMap<String, String>,
    ) -> tokio::process::Command {
        let binds = self.for_program(program, agent_env);
        // The home and mount points exist before anything starts in the sandbox (a
        // `before_run` hook runs before the agent); a failure shows as bwrap's own error.
        if let Err(err) = binds.prepare() {
            tracing::warn!(%err, "could not prepare the sandbox's home");
        }
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(binds.bwrap_args(workspace, run_dir))
            .arg("--")
            .arg(program)
            .args(args)
            .env_clear()
            .envs(binds.environment(agent_env, vars));
        cmd
    }

    /// This plan with what `program` brings: its own files (found on the `PATH` inside)
    /// and the toolchains of version managers that `PATH` or the program lies in, with
    /// their variables.
    pub fn for_program(&self, program: &str, agent_env: &BTreeMap<String, String>) -> SandboxPlan {
        let mut binds = self.clone();
        let path_var = self.inside_path(agent_env);
        let path_var = path_var.as_deref();
        binds.read_only.extend(program_dirs(program, path_var));
        let mut paths = Vec::new();
        if let Some(found) = find_on(program, path_var) {
            paths.extend(found.canonicalize().ok());
            paths.push(found);
        }
        for toolchain in toolchains::needed(&self.toolchains, path_var, &paths) {
            binds.read_only.extend(toolchain.roots.iter().cloned());
            binds.read_only.extend(toolchain.program.iter().cloned());
            binds.hidden.extend(toolchain.hidden.iter().cloned());
            for (host, in_home) in &toolchain.home_files {
                let to = self.home.join(in_home);
                if !binds.files.iter().any(|(_, t)| *t == to) {
                    binds.files.push((host.clone(), to));
                }
            }
            for (name, value) in &toolchain.env {
                binds
                    .env
                    .entry(name.clone())
                    .or_insert_with(|| value.clone());
            }
        }
        binds
    }

    /// The `PATH` inside: the agent's `env` sets it, else sortie's.
    fn inside_path(&self, agent_env: &BTreeMap<String, String>) -> Option<String> {
        agent_env
            .get("PATH")
            .or_else(|| self.env.get("PATH"))
            .cloned()
    }

    /// Whether `program` can be started inside, run in `workspace`: it is found on the
    /// `PATH` inside (a bare name), or it is an executable file (a path, relative to
    /// `workspace`). Why not otherwise, in words for a person.
    pub fn can_start(
        &self,
        program: &str,
        workspace: &Path,
        agent_env: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let path = self.inside_path(agent_env);
        let found = if program.contains('/') {
            let file = workspace.join(program);
            is_executable(&file).then_some(file)
        } else {
            std::env::split_paths(path.as_deref().unwrap_or_default())
                .map(|dir| dir.join(program))
                .find(|p| is_executable(p))
        };
        match found {
            Some(_) => Ok(()),
            None if program.contains('/') => Err(format!(
                "cannot start `{program}`: no executable file there"
            )),
            None => Err(format!(
                "cannot start `{program}`: not found on the sandbox's PATH ({})",
                path.as_deref().unwrap_or("unset")
            )),
        }
    }

    /// Create the private home and the mount points of the preset's files.
    pub fn prepare(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.home)?;
        for (_, to) in &self.files {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            if !to.exists() {
                std::fs::write(to, "")?;
            }
        }
        if let Some(git) = &self.git {
            std::fs::create_dir_all(&git.objects)?;
        }
        Ok(())
    }

    /// Remove an ephemeral home after the run.
    pub fn clean_up(&self) {
        if self.remove_home {
            if let Err(err) = std::fs::remove_dir_all(&self.home) {
                if err.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(%err, home = %self.home.display(), "could not remove the sandbox's home");
                }
            }
        }
    }
}

/// The directories the agent program needs read-only: where `program` is found, the
/// file it resolves to, and for a package installed by npm its whole `node_modules`
/// tree; the script interpreter a `#!` line names, likewise. System directories are
/// bound anyway and not repeated.
fn program_dirs(program: &str, path_var: Option<&str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let found = find_on(program, path_var);
    let Some(found) = found else {
        return out;
    };
    add_program(&found, &mut out);
    if let Some(interpreter) = shebang(&found) {
        let (first, rest) = interpreter;
        let target = if first.ends_with("/env") {
            rest.and_then(|name| find_on(&name, path_var))
        } else {
            Some(PathBuf::from(first))
        };
        if let Some(target) = target {
            add_program(&target, &mut out);
        }
    }
    out.retain(|p| !SYSTEM_DIRS.iter().any(|d| p.starts_with(d)));
    out.sort();
    out.dedup();
    out
}

fn add_program(found: &Path, out: &mut Vec<PathBuf>) {
    out.push(found.to_path_buf());
    let Ok(real) = found.canonicalize() else {
        return;
    };
    // An npm package needs its dependencies beside it: the outermost node_modules.
    let modules = real
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_path_buf);
    out.push(modules.unwrap_or_else(|| real.clone()));
    if let Some(link_modules) = found
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
    {
        out.push(link_modules.to_path_buf());
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_on(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return p.exists().then_some(p);
    }
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The interpreter and its first argument from a `#!` line.
fn shebang(file: &Path) -> Option<(String, Option<String>)> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let text = std::str::from_utf8(head.get(..n)?).ok().or_else(|| {
        let end = head[..n].iter().position(|b| *b == b'\n')?;
        std::str::from_utf8(&head[..end]).ok()
    })?;
    let line = text.strip_prefix("#!")?.lines().next()?;
    let mut words = line.split_whitespace();
    let first = words.next()?.to_string();
    Some((first, words.next().map(str::to_string)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_npm_program_brings_its_node_modules_and_its_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let pkg = root.join("node_modules/@acme/cli");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(root.join("node_modules/.bin")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(pkg.join("cli.js"), "#!/usr/bin/env fakenode\n").unwrap();
        std::fs::write(root.join("bin/fakenode"), "").unwrap();
        std::os::unix::fs::symlink(pkg.join("cli.js"), root.join("node_modules/.bin/acme"))
            .unwrap();
        let path = format!("{}:/usr/bin", root.join("bin").display());
        let dirs = program_dirs(
            root.join("node_modules/.bin/acme").to_str().unwrap(),
            Some(&path),
        );
        assert!(dirs.contains(&root.join("node_modules")), "{dirs:?}");
        assert!(dirs.contains(&root.join("bin/fakenode")), "{dirs:?}");
        assert!(
            !dirs.iter().any(|d| d == &root || d == &root.join("bin")),
            "only the program's own files, never the directory around them: {dirs:?}"
        );
    }
}

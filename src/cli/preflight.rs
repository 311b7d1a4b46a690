//! What `pipeline validate` checks on this machine beyond the config itself (issue #52),
//! so that a problem every ticket would meet at run time is said once, before any run:
//! each stage's `verify` programs are installed; with the bubblewrap sandbox, each agent
//! and verify program starts inside it; `workspace.git.url` answers `git ls-remote` and
//! has the base branch (skipped with `--offline`). Each finding is a warning naming the
//! key to change, as `FILE:LINE:COL: field: message`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::agent::sandbox::SandboxPlan;
use crate::agent::RoleTemplates;
use crate::config::{AgentConfig, Bubblewrap, Config, FieldStep};

/// How long a program may take to answer `--version` in the sandbox.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `git ls-remote` may take to answer.
const LS_REMOTE_TIMEOUT: Duration = Duration::from_secs(20);
/// Lines of a failed probe's output quoted in its warning.
const QUOTED_LINES: usize = 3;

/// Every warning of the checks above, in order: missing verify programs, programs that
/// do not start in the sandbox, the git remote.
pub fn warnings(cfg: &Config, templates: &RoleTemplates, offline: bool) -> Vec<String> {
    let mut out = missing_verify_programs(cfg);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return out;
    };
    out.extend(runtime.block_on(sandbox_starts(cfg, templates)));
    if !offline {
        if let Some(warning) = runtime.block_on(git_remote(cfg)) {
            out.push(warning);
        }
    }
    out
}

/// One program a run starts, and where the config says it.
struct Program<'a> {
    /// The program (argv[0]).
    name: String,
    /// Who starts it, for the message (`agent of role backend`, `verify command 1 of role qa`).
    who: String,
    /// The key to change.
    at: Vec<FieldStep<'a>>,
    /// The agent whose sandbox it runs in.
    agent: AgentConfig,
}

/// Every agent and verify program of `cfg`, each once.
fn programs<'a>(cfg: &Config, templates: &RoleTemplates) -> Vec<Program<'a>> {
    let mut out: Vec<Program<'a>> = Vec::new();
    for (i, stage) in cfg.stages.iter().enumerate() {
        let runs = std::iter::once((None, None)).chain(
            stage
                .routes
                .iter()
                .enumerate()
                .map(|(j, r)| (Some(j), Some(r))),
        );
        for (j, route) in runs {
            let agent = templates.agent_for(cfg, stage, route);
            let Some(name) = crate::agent::preset_argv(&agent).first().cloned() else {
                continue;
            };
            let at = match j {
                Some(j) => vec![
                    FieldStep::Key("pipeline_stages"),
                    FieldStep::Index(i),
                    FieldStep::Key("routes"),
                    FieldStep::Index(j),
                    FieldStep::Key("agent"),
                ],
                None => vec![FieldStep::Key("agent"), FieldStep::Key("command")],
            };
            if !out.iter().any(|p| p.name == name) {
                out.push(Program {
                    who: format!("agent of role {}", stage.role),
                    name,
                    at,
                    agent,
                });
            }
        }
        let Some(verify) = &stage.verify else {
            continue;
        };
        for (j, argv) in verify.commands.iter().enumerate() {
            let Some(name) = argv.first().cloned() else {
                continue;
            };
            if !out.iter().any(|p| p.name == name) {
                out.push(Program {
                    who: format!("verify command {} of role {}", j + 1, stage.role),
                    name,
                    at: verify_key(i, j),
                    agent: templates.agent_for(cfg, stage, None),
                });
            }
        }
    }
    out
}

fn verify_key<'a>(stage: usize, command: usize) -> Vec<FieldStep<'a>> {
    vec![
        FieldStep::Key("pipeline_stages"),
        FieldStep::Index(stage),
        FieldStep::Key("verify"),
        FieldStep::Key("commands"),
        FieldStep::Index(command),
    ]
}

/// A path relative to the workspace (`./scripts/check`): only there at run time.
fn in_workspace(program: &str) -> bool {
    program.contains('/') && !Path::new(program).is_absolute()
}

/// Verify programs not found on this machine, as validate says of a missing agent.
fn missing_verify_programs(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, stage) in cfg.stages.iter().enumerate() {
        let Some(verify) = &stage.verify else {
            continue;
        };
        for (j, argv) in verify.commands.iter().enumerate() {
            let Some(program) = argv.first() else {
                continue;
            };
            if in_workspace(program) || crate::agent::find_program(program).is_some() {
                continue;
            }
            let message = format!(
                "verify program `{program}` (role {}) is not found on this machine; every run \
                 of this stage would end `verify.cannot_start`: install it, or change the command",
                stage.role
            );
            out.push(cfg.diagnostic_at(&verify_key(i, j), message).to_string());
        }
    }
    out
}

/// With the bubblewrap sandbox: each program that is installed here but does not start
/// inside the sandbox a run gets.
async fn sandbox_starts(cfg: &Config, templates: &RoleTemplates) -> Vec<String> {
    let mut out = Vec::new();
    for program in programs(cfg, templates) {
        let Some(jail) = program.agent.bubblewrap.clone() else {
            continue;
        };
        // A missing program is said above (or by the missing agent warning).
        if in_workspace(&program.name) || crate::agent::find_program(&program.name).is_none() {
            continue;
        }
        if let Some(why) = fails_inside(&jail, &program).await {
            let message = format!(
                "`{}` ({}) is installed here but does not start in the sandbox: {why}; bind \
                 what it needs with `agent.sandbox.read_only` and pass its variables with \
                 `agent.sandbox.env` (docs/sandbox.md lists what is bound), or change this \
                 command",
                program.name, program.who
            );
            out.push(cfg.diagnostic_at(&program.at, message).to_string());
        }
    }
    out
}

/// How a probe ended: its exit code (none when killed or timed out) and its output.
struct Probe {
    code: Option<i32>,
    timed_out: bool,
    output: String,
}

/// Why `program --version` fails in the sandbox of a run when it answers in a sandbox
/// that sees the whole host read-only: that difference is what the run's sandbox lacks.
/// A program that does not take `--version` fails both ways and is not reported, unless
/// it could not start at all inside (bwrap's `execvp`, exit 126 or 127).
async fn fails_inside(jail: &Bubblewrap, program: &Program<'_>) -> Option<String> {
    let scratch = Scratch::new().ok()?;
    let env = |name: &str| std::env::var(name).ok();
    let plan = SandboxPlan::new(
        jail,
        &program.agent,
        &scratch.state,
        "validate",
        "validate",
        &env,
    );
    let inside = plan.command(
        &program.name,
        &["--version".to_string()],
        &scratch.workspace,
        &scratch.run_dir,
        &program.agent.env,
        &BTreeMap::new(),
    );
    let inside = probe(inside).await?;
    if inside.code == Some(0) || inside.timed_out {
        return None;
    }
    let wide = probe(whole_host(jail, program, &scratch.workspace)).await?;
    let cannot_start =
        inside.output.contains("bwrap: execvp") || matches!(inside.code, Some(126 | 127));
    if wide.code != Some(0) && !cannot_start {
        return None;
    }
    let how = match inside.code {
        Some(code) => format!("`{} --version` exits {code} inside", program.name),
        None => format!("`{} --version` was killed inside", program.name),
    };
    let said: Vec<&str> = inside
        .output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(QUOTED_LINES)
        .collect();
    Some(if said.is_empty() {
        how
    } else {
        format!("{how} ({})", said.join(" / "))
    })
}

/// `program --version` in a sandbox that sees the whole host read-only, with sortie's
/// environment and the agent's `env`: what the program needs from the host, it has.
fn whole_host(jail: &Bubblewrap, program: &Program<'_>, dir: &Path) -> tokio::process::Command {
    let mut wide = tokio::process::Command::new(&jail.program);
    wide.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
    ])
    .arg(dir)
    .arg(dir)
    .arg("--chdir")
    .arg(dir)
    .arg("--")
    .arg(&program.name)
    .arg("--version")
    .envs(&program.agent.env);
    wide
}

/// Run `cmd` with no input, bounded by [`PROBE_TIMEOUT`]; `None` when it cannot be started.
async fn probe(mut cmd: tokio::process::Command) -> Option<Probe> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().ok()?;
    match tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(out)) => Some(Probe {
            code: out.status.code(),
            timed_out: false,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        }),
        Ok(Err(_)) => None,
        Err(_) => Some(Probe {
            code: None,
            timed_out: true,
            output: String::new(),
        }),
    }
}

/// A throw-away state root for the probes (removed when dropped): nothing is written
/// under the config's own `state_root` by `validate`.
struct Scratch {
    state: PathBuf,
    workspace: PathBuf,
    run_dir: PathBuf,
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let state = std::env::temp_dir().join(format!("sortie-validate-{}", uuid::Uuid::new_v4()));
        let workspace = state.join("workspaces").join("validate");
        let run_dir = state.join("runs").join("validate");
        std::fs::create_dir_all(&workspace)?;
        std::fs::create_dir_all(&run_dir)?;
        Ok(Scratch {
            state,
            workspace,
            run_dir,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// `workspace.git.url` is reachable with `git ls-remote` and has the base branch; the
/// warning otherwise.
async fn git_remote(cfg: &Config) -> Option<String> {
    let git = cfg.workspace.git.as_ref()?;
    let url_key = [
        FieldStep::Key("workspace"),
        FieldStep::Key("git"),
        FieldStep::Key("url"),
    ];
    let base_ref = format!("refs/heads/{}", git.base);
    let probe = ls_remote(&git.url, &base_ref).await;
    let message = match probe {
        Err(why) => format!(
            "cannot start `git` to check {}: {why}; sortie needs git for `workspace.git`",
            git.url
        ),
        Ok(p) if p.timed_out => format!(
            "`git ls-remote {}` did not answer within {} s; every run would fail preparing its \
             worktree: check the URL and this machine's network (`--offline` skips this check)",
            git.url,
            LS_REMOTE_TIMEOUT.as_secs()
        ),
        Ok(p) if p.code != Some(0) => format!(
            "`git ls-remote {}` failed ({}); every run would fail preparing its worktree: check \
             the URL and this machine's access to it (`--offline` skips this check)",
            git.url,
            first_line(&p.output)
        ),
        Ok(p) if !p.output.lines().any(|l| l.ends_with(&base_ref)) => {
            let message = format!(
                "branch `{}` is not on {}; every ticket's branch starts from it: push it, or set \
                 `workspace.git.base` to a branch that is there",
                git.base, git.url
            );
            let at = [
                FieldStep::Key("workspace"),
                FieldStep::Key("git"),
                FieldStep::Key("base"),
            ];
            return Some(cfg.diagnostic_at(&at, message).to_string());
        }
        Ok(_) => return None,
    };
    Some(cfg.diagnostic_at(&url_key, message).to_string())
}

/// `git ls-remote URL REF` as sortie's own git runs it (no terminal prompt, SSH in batch
/// mode), bounded by [`LS_REMOTE_TIMEOUT`].
async fn ls_remote(url: &str, reference: &str) -> Result<Probe, String> {
    // sortie's own git environment (`agent::git::git_command`): minimal variables, no
    // prompt, SSH in batch mode, killed when dropped.
    let mut cmd = crate::agent::git::git_command(Path::new("/"));
    cmd.args(["ls-remote", "--", url, reference]);
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    Ok(
        match tokio::time::timeout(LS_REMOTE_TIMEOUT, child.wait_with_output()).await {
            Ok(Ok(out)) => Probe {
                code: out.status.code(),
                timed_out: false,
                output: if out.status.success() {
                    String::from_utf8_lossy(&out.stdout).into_owned()
                } else {
                    String::from_utf8_lossy(&out.stderr).into_owned()
                },
            },
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => Probe {
                code: None,
                timed_out: true,
                output: String::new(),
            },
        },
    )
}

/// git's first line says what went wrong (the rest is advice).
fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
}

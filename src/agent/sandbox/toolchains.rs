//! The toolchains of version managers a confined run needs (issue #52): `cargo` is a
//! rustup proxy that reads `~/.rustup`, `python3` a pyenv shim that runs
//! `~/.pyenv/libexec/pyenv`; inside the sandbox `HOME` is a private home, so neither finds
//! its root unless the sandbox binds it and names it.
//!
//! Each manager's roots are found on the host (its variable in sortie's environment, else
//! its default under the host's home). A command needs a manager when a directory of the
//! sandbox's `PATH`, or the program itself, lies in one of its roots: then every root of
//! that manager is bound read-only at its own path, its variables are set inside to those
//! paths, the version it selects in sortie's environment (`RUSTUP_TOOLCHAIN`,
//! `PYENV_VERSION`, ...) is passed, its program found on `PATH` is bound, and the global
//! version files it reads from the home are bound into the private home. Credentials
//! kept in a root (`$CARGO_HOME/credentials.toml`) are hidden behind an empty file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A root of a version manager: the variable that names it and where it is by default.
struct Root {
    /// The variable naming it (`RUSTUP_HOME`).
    var: &'static str,
    /// Its default, relative to the host's home (`.rustup`).
    default: &'static str,
    /// Files in it never shown inside (credentials).
    hidden: &'static [&'static str],
}

/// A version manager sortie knows how to bind.
struct Manager {
    /// Its roots.
    roots: &'static [Root],
    /// Variables selecting a version, passed in when sortie's environment sets them.
    pass: &'static [&'static str],
    /// Files of the home it reads (global versions, settings), relative to the home.
    home_files: &'static [&'static str],
    /// Its own program, when its shims run it from `PATH` (asdf, mise).
    program: Option<&'static str>,
}

const fn root(var: &'static str, default: &'static str) -> Root {
    Root {
        var,
        default,
        hidden: &[],
    }
}

/// rustup, pyenv, nodenv, rbenv, nvm, asdf and mise (docs/sandbox.md lists them).
const MANAGERS: &[Manager] = &[
    Manager {
        roots: &[
            root("RUSTUP_HOME", ".rustup"),
            Root {
                var: "CARGO_HOME",
                default: ".cargo",
                hidden: &["credentials.toml", "credentials"],
            },
        ],
        pass: &["RUSTUP_TOOLCHAIN"],
        home_files: &[],
        program: Some("rustup"),
    },
    Manager {
        roots: &[root("PYENV_ROOT", ".pyenv")],
        pass: &["PYENV_VERSION"],
        home_files: &[],
        program: Some("pyenv"),
    },
    Manager {
        roots: &[root("NODENV_ROOT", ".nodenv")],
        pass: &["NODENV_VERSION"],
        home_files: &[],
        program: Some("nodenv"),
    },
    Manager {
        roots: &[root("RBENV_ROOT", ".rbenv")],
        pass: &["RBENV_VERSION"],
        home_files: &[],
        program: Some("rbenv"),
    },
    Manager {
        roots: &[root("NVM_DIR", ".nvm")],
        pass: &[],
        home_files: &[],
        program: None,
    },
    Manager {
        roots: &[root("ASDF_DATA_DIR", ".asdf")],
        pass: &[],
        home_files: &[".tool-versions", ".asdfrc"],
        program: Some("asdf"),
    },
    Manager {
        roots: &[root("MISE_DATA_DIR", ".local/share/mise")],
        pass: &["MISE_ENV"],
        home_files: &[".tool-versions", ".config/mise/config.toml"],
        program: Some("mise"),
    },
];

/// A version manager installed on this host, resolved to what a sandbox binds for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// Its roots that exist on the host, bound read-only at their own paths.
    pub roots: Vec<PathBuf>,
    /// Variables set inside: each root's variable, and the version selections sortie's
    /// environment sets.
    pub env: BTreeMap<String, String>,
    /// Files in its roots hidden behind an empty file (credentials).
    pub hidden: Vec<PathBuf>,
    /// Files of the host's home bound read-only into the private home: (host path, path
    /// relative to the home).
    pub home_files: Vec<(PathBuf, PathBuf)>,
    /// Its own program as found on `PATH` and the file that resolves to.
    pub program: Vec<PathBuf>,
}

impl Toolchain {
    /// Whether `path` lies in one of its roots.
    pub fn holds(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }
}

/// Every version manager with a root on this host, given sortie's environment `env`
/// (a lookup, for tests). A root is never `/`, the host's home or a directory above it,
/// nor one that overlaps `state_root`: those would hand the sandbox far more than a
/// toolchain, so they are left out (and logged).
pub fn installed(env: &dyn Fn(&str) -> Option<String>, state_root: &Path) -> Vec<Toolchain> {
    let home = env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let state = state_root
        .canonicalize()
        .unwrap_or_else(|_| state_root.to_path_buf());
    let path_var = env("PATH");
    let mut out = Vec::new();
    for manager in MANAGERS {
        let mut toolchain = Toolchain {
            roots: Vec::new(),
            env: BTreeMap::new(),
            hidden: Vec::new(),
            home_files: Vec::new(),
            program: Vec::new(),
        };
        for root in manager.roots {
            let Some(dir) = env(root.var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(root.default)))
            else {
                continue;
            };
            if !dir.is_dir() {
                continue;
            }
            if too_wide(&dir, home.as_deref(), &state) {
                tracing::warn!(root = %dir.display(), var = root.var, "not binding a toolchain root that would expose the home or the state root to the sandbox");
                continue;
            }
            toolchain
                .env
                .insert(root.var.to_string(), dir.display().to_string());
            toolchain.hidden.extend(
                root.hidden
                    .iter()
                    .map(|f| dir.join(f))
                    .filter(|f| f.is_file()),
            );
            toolchain.roots.push(dir);
        }
        if toolchain.roots.is_empty() {
            continue;
        }
        for name in manager.pass {
            if let Some(value) = env(name) {
                toolchain.env.insert(name.to_string(), value);
            }
        }
        if let Some(home) = &home {
            for file in manager.home_files {
                let host = home.join(file);
                if host.is_file() {
                    toolchain.home_files.push((host, PathBuf::from(file)));
                }
            }
        }
        if let Some(found) = manager
            .program
            .and_then(|p| super::find_on(p, path_var.as_deref()))
        {
            toolchain.program.push(found.clone());
            if let Ok(real) = found.canonicalize() {
                toolchain.program.push(real);
            }
        }
        out.push(toolchain);
    }
    out
}

/// `/`, the host's home or a directory above it, or a directory that contains the state
/// root or lies inside it.
fn too_wide(dir: &Path, home: Option<&Path>, state_root: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let home = home.map(|h| h.canonicalize().unwrap_or_else(|_| h.to_path_buf()));
    dir == Path::new("/")
        || home.is_some_and(|h| h.starts_with(&dir))
        || state_root.starts_with(&dir)
        || dir.starts_with(state_root)
}

/// The toolchains of `installed` a command needs: those holding a directory of
/// `path_var` (the `PATH` inside) or the program's path (`program`: where it was found
/// and the file it resolves to).
pub fn needed<'a>(
    installed: &'a [Toolchain],
    path_var: Option<&str>,
    program: &[PathBuf],
) -> Vec<&'a Toolchain> {
    let dirs: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    installed
        .iter()
        .filter(|t| {
            dirs.iter()
                .chain(program)
                .any(|p| p.is_absolute() && t.holds(p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn a_rustup_proxy_on_path_brings_both_homes_their_variables_and_hides_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap().join("home");
        for d in [".cargo/bin", ".rustup/toolchains", ".pyenv/shims"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap();
        let state = dir.path().join("state");
        let vars = [
            ("HOME", home.display().to_string()),
            (
                "PATH",
                format!("{}:/usr/bin", home.join(".cargo/bin").display()),
            ),
            ("RUSTUP_TOOLCHAIN", "stable".to_string()),
        ];
        let all = installed(&lookup(&vars), &state);
        assert_eq!(all.len(), 2, "rustup and pyenv are installed: {all:?}");
        let path = vars[1].1.clone();
        let used = needed(&all, Some(&path), &[]);
        assert_eq!(used.len(), 1, "only rustup is on PATH: {used:?}");
        let rustup = used[0];
        assert_eq!(
            rustup.roots,
            vec![home.join(".rustup"), home.join(".cargo")]
        );
        assert_eq!(
            rustup.env,
            BTreeMap::from([
                (
                    "CARGO_HOME".to_string(),
                    home.join(".cargo").display().to_string()
                ),
                (
                    "RUSTUP_HOME".to_string(),
                    home.join(".rustup").display().to_string()
                ),
                ("RUSTUP_TOOLCHAIN".to_string(), "stable".to_string()),
            ])
        );
        assert_eq!(rustup.hidden, vec![home.join(".cargo/credentials.toml")]);

        // A shim named by its path needs its manager even when PATH does not have it.
        let shim = home.join(".pyenv/shims/python3");
        let used = needed(&all, Some("/usr/bin"), std::slice::from_ref(&shim));
        assert_eq!(used.len(), 1);
        assert_eq!(used[0].roots, vec![home.join(".pyenv")]);
    }

    #[test]
    fn a_root_that_is_the_home_or_holds_the_state_root_is_never_bound() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(home.join("state")).unwrap();
        let vars = [
            ("HOME", home.display().to_string()),
            ("NVM_DIR", home.display().to_string()),
            ("PYENV_ROOT", "/".to_string()),
            ("RBENV_ROOT", home.join("state").display().to_string()),
        ];
        let all = installed(&lookup(&vars), &home.join("state"));
        assert_eq!(all, Vec::new());
    }
}

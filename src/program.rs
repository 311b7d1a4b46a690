//! Finding a program (the agent, `bwrap`) on `PATH` before anything is claimed: a leaf
//! that the config's probes and the agent runner both use.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where `program` would be executed from: a path containing `/` as it is, a bare name
/// looked up on `PATH`. `None` when there is no executable file there.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_on_path_and_by_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("surely-not-a-program-sortie").is_none());
        assert!(find_program("/nonexistent/agent").is_none());
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("notes.txt");
        std::fs::write(&plain, "not a program").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            find_program(plain.to_str().unwrap()).is_none(),
            "not executable"
        );
    }
}

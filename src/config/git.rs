//! `workspace.git` and `pull_request`: the repository, branch names derived from the
//! ticket id (rendered, sanitized, checked as git refs) and the pull request settings.
//!
//! The ref rules live here, pure, so the loader can refuse a bad `base` and the
//! runtime (`agent::git`) can name a ticket's branch with the same code.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::diagnostic::Problems;
use super::locate::FieldPath;
use super::model::{GitWorkspace, PullRequestConfig, Stage, TrackerConfig};
use super::raw::{RawGit, RawPullRequest};
use super::values::resolve;

/// Default `workspace.git.base`.
pub const DEFAULT_BASE: &str = "main";
/// Default `workspace.git.branch`: unique to the board (issue #52), so two boards, or
/// two state roots, on one repository never share a ticket's branch.
pub const DEFAULT_BRANCH: &str = "sortie/{{ board.key }}/{{ ticket.id }}";
/// The board key the loader renders branch templates with to check them.
const SAMPLE_BOARD_KEY: &str = "0123abcd";
/// Default `pull_request.title`.
pub const DEFAULT_PR_TITLE: &str = "{{ ticket.id }}: {{ ticket.title }}";
/// Longest branch name sortie makes (git has no limit; forges and file systems do).
const MAX_BRANCH_LEN: usize = 200;

/// Why `name` is not a branch name sortie will hand to git, or `None` when it is one:
/// the rules of `git check-ref-format --branch`, plus no leading `-` (git would read
/// it as an option) and at most 200 bytes.
pub fn branch_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.len() > MAX_BRANCH_LEN {
        return Some("is longer than 200 bytes");
    }
    if name.starts_with('-') {
        return Some("starts with `-`");
    }
    if name == "@" || name == "HEAD" {
        return Some("is reserved by git");
    }
    if name.contains("..") || name.contains("@{") || name.contains("//") {
        return Some("contains `..`, `@{` or `//`");
    }
    if name.starts_with('/') || name.ends_with('/') || name.ends_with('.') {
        return Some("starts or ends with `/`, or ends with `.`");
    }
    if name
        .chars()
        .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return Some("contains a space, a control character or one of ~ ^ : ? * [ \\");
    }
    if name
        .split('/')
        .any(|part| part.starts_with('.') || part.ends_with(".lock"))
    {
        return Some("has a component starting with `.` or ending with `.lock`");
    }
    None
}

/// `rendered` made into a valid branch name: characters outside `[A-Za-z0-9._/-]`
/// become `-`, empty components are dropped, and components git refuses are mended.
/// When anything had to change, `-` and 64 bits of the SHA-256 of `ticket_id` are
/// appended, so two tickets whose ids sanitize alike never share a branch.
pub fn sanitize_branch(rendered: &str, ticket_id: &str) -> String {
    let mapped: String = rendered
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut parts: Vec<String> = Vec::new();
    for part in mapped.split('/').filter(|p| !p.is_empty()) {
        let mut part = part.to_string();
        while part.contains("..") {
            part = part.replace("..", ".");
        }
        if part.starts_with('.') {
            part.replace_range(..1, "_");
        }
        while part.ends_with('.') {
            part.pop();
            part.push('_');
        }
        if part.ends_with(".lock") {
            part.truncate(part.len() - ".lock".len());
            part.push_str("_lock");
        }
        parts.push(part);
    }
    let mut name = parts.join("/");
    if name.starts_with('-') {
        name.insert(0, '_');
    }
    if name.is_empty() {
        name.push_str("ticket");
    }
    if name != rendered || branch_name_problem(&name).is_some() {
        let digest = hex::encode(Sha256::digest(ticket_id.as_bytes()));
        let keep = MAX_BRANCH_LEN - 17;
        if name.len() > keep {
            let mut end = keep;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            name.truncate(end);
            while name.ends_with('/') || name.ends_with('.') {
                name.pop();
            }
        }
        name = format!("{name}-{}", &digest[..16]);
    }
    name
}

/// Render a ticket template (`{{ ticket.id }}`, `{{ ticket.title }}`); an unknown
/// variable is an error.
pub fn render_ticket_template(template: &str, id: &str, title: &str) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let ctx = minijinja::context! { ticket => minijinja::context! { id => id, title => title } };
    env.render_str(template, ctx).map_err(|e| e.to_string())
}

/// The board's short key, `{{ board.key }}` in branch templates: 8 hex digits of the
/// SHA-256 of what names the board (the tracker's kind, its server and its project,
/// repository, team or board directory), so two boards on one repository get different
/// branches for tickets with the same id, and every host of one board the same. A
/// local board is named by its directory's real path (symbolic links resolved, the
/// current directory joined to a relative one), so how sortie was started never
/// changes it.
pub fn board_key(tracker: &TrackerConfig) -> String {
    let identity = match tracker {
        TrackerConfig::Local { path } => {
            let real = std::fs::canonicalize(path)
                .or_else(|_| std::path::absolute(path))
                .unwrap_or_else(|_| path.clone());
            format!("local\x1f{}", real.display())
        }
        TrackerConfig::Github { repo, api_url, .. } => format!("github\x1f{api_url}\x1f{repo}"),
        TrackerConfig::Gitlab { url, project, .. } => format!("gitlab\x1f{url}\x1f{project}"),
        TrackerConfig::Gitea { url, repo, .. } => format!("gitea\x1f{url}\x1f{repo}"),
        TrackerConfig::Redmine { url, project, .. } => format!("redmine\x1f{url}\x1f{project}"),
        TrackerConfig::Linear { team, api_url, .. } => format!("linear\x1f{api_url}\x1f{team}"),
        TrackerConfig::GithubProject {
            owner,
            project,
            api_url,
            ..
        } => format!("github_project\x1f{api_url}\x1f{owner}/{project}"),
        TrackerConfig::Jira { url, project, .. } => format!("jira\x1f{url}\x1f{project}"),
    };
    hex::encode(Sha256::digest(identity.as_bytes()))[..8].to_string()
}

/// Render a branch template: a ticket template with `{{ board.key }}` too.
fn render_branch_template(
    template: &str,
    board_key: &str,
    id: &str,
    title: &str,
) -> Result<String, String> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let ctx = minijinja::context! {
        ticket => minijinja::context! { id => id, title => title },
        board => minijinja::context! { key => board_key },
    };
    env.render_str(template, ctx).map_err(|e| e.to_string())
}

/// The branch of `ticket_id` under `git` on the board whose key is `board_key`
/// ([`board_key`]): the template rendered, then sanitized.
pub fn ticket_branch(
    git: &GitWorkspace,
    board_key: &str,
    ticket_id: &str,
    title: &str,
) -> Result<String, String> {
    let rendered = render_branch_template(&git.branch, board_key, ticket_id, title)?;
    Ok(sanitize_branch(&rendered, ticket_id))
}

/// Whether `url` names a remote git reaches over a transport (`scheme://`, or the
/// scp-like `user@host:path`), as opposed to a local path.
fn is_remote_url(url: &str) -> bool {
    if url.contains("://") {
        return true;
    }
    match url.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/'),
        None => false,
    }
}

/// `workspace.git:` checked, with defaults; a local path resolved against `base_dir`.
pub(crate) fn normalize_git(
    raw: Option<RawGit>,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<GitWorkspace> {
    let raw = raw?;
    let path = FieldPath::root().key("workspace").key("git");
    let url = match raw.url {
        None => {
            problems.at_key(
                &path,
                "`url` is required: the repository to clone (a URL or a local path)",
            );
            String::new()
        }
        Some(url) if url.trim().is_empty() || url.starts_with('-') => {
            problems.at_value(
                &path.key("url"),
                format!("expected a repository URL or path, found {url:?}"),
            );
            url
        }
        Some(url) if is_remote_url(&url) => url,
        Some(local) => resolve(base_dir, &local).display().to_string(),
    };
    let base = raw.base.unwrap_or_else(|| DEFAULT_BASE.to_string());
    if let Some(why) = branch_name_problem(&base) {
        problems.at_value(
            &path.key("base"),
            format!("branch {base:?} {why}; expected a valid git branch name"),
        );
    }
    let branch = raw.branch.unwrap_or_else(|| DEFAULT_BRANCH.to_string());
    let sample = |id| render_branch_template(&branch, SAMPLE_BOARD_KEY, id, "title");
    match sample("42") {
        Err(err) => problems.at_value(
            &path.key("branch"),
            format!(
                "the branch template does not render: {err}; expected `{{{{ ticket.id }}}}`, \
                 `{{{{ ticket.title }}}}` and `{{{{ board.key }}}}` only"
            ),
        ),
        Ok(one) if sample("43").as_ref() == Ok(&one) => problems.at_value(
            &path.key("branch"),
            "the branch template must use {{ ticket.id }}: two tickets would share a branch",
        ),
        Ok(_) => {}
    }
    Some(GitWorkspace {
        url,
        base,
        branch,
        push: raw.push.unwrap_or(true),
    })
}

/// Whether pull requests have a forge to open on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forge {
    /// `forge:`, or a forge tracker (GitHub, GitLab, Gitea).
    Known,
    /// A board that is no code host (local, Jira, Linear, Redmine).
    None,
    /// A board whose tickets live in several repositories (a GitHub Project): which one
    /// is the forge must be said.
    AcrossRepositories,
}

/// `pull_request:` checked against the stages and `workspace.git`; `on_forge` says
/// whether pull requests have a forge to open on (`None`: the tracker is unknown).
pub(crate) fn normalize_pull_request(
    raw: Option<RawPullRequest>,
    stages: &[Stage],
    git: Option<&GitWorkspace>,
    on_forge: Option<Forge>,
    problems: &mut Problems,
) -> Option<PullRequestConfig> {
    let raw = raw?;
    let path = FieldPath::root().key("pull_request");
    match on_forge {
        Some(Forge::None) => problems.at_key(
            &path,
            "pull requests open on a forge, and this tracker is none: name the repository \
             they open on with `forge: {kind: github, repo: owner/name}` (or `kind: gitlab`, \
             `gitea`), use a forge tracker, or remove `pull_request`",
        ),
        Some(Forge::AcrossRepositories) => problems.at_key(
            &path,
            "a GitHub Project spans repositories, and `workspace.git.url` is no GitHub \
             repository on the project's host: name the one pull requests open on (the \
             repository the workspace clones) with `forge: {kind: github, repo: \
             owner/name}`, or remove `pull_request`",
        ),
        _ => {}
    }
    let after = raw.after.unwrap_or_default();
    if after.is_empty() {
        problems.at_key(
            &path,
            "`after` is required: the role after whose success the pull request opens",
        );
    } else if !stages.is_empty() && !stages.iter().any(|s| s.role == after) {
        let roles: Vec<&str> = stages.iter().map(|s| s.role.as_str()).collect();
        problems.at_value(
            &path.key("after"),
            format!(
                "`{after}` is no stage's role; expected one of: {}",
                roles.join(", ")
            ),
        );
    }
    match git {
        None => problems.at_key(
            &path,
            "a pull request needs a branch: configure `workspace.git` too",
        ),
        Some(g) if !g.push => problems.at_key(
            &path,
            "a pull request needs the branch on the remote: `workspace.git.push` must be true",
        ),
        Some(_) => {}
    }
    let title = raw.title.unwrap_or_else(|| DEFAULT_PR_TITLE.to_string());
    if let Err(err) = render_ticket_template(&title, "42", "title") {
        problems.at_value(
            &path.key("title"),
            format!("the title template does not render: {err}"),
        );
    }
    Some(PullRequestConfig {
        after,
        title,
        draft: raw.draft.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_branch_names_are_kept() {
        assert_eq!(sanitize_branch("sortie/42", "42"), "sortie/42");
        assert_eq!(sanitize_branch("sortie/PROJ-7", "PROJ-7"), "sortie/PROJ-7");
    }

    #[test]
    fn hostile_ids_become_valid_distinct_refs() {
        let ids = [
            "a b",
            "a-b",
            "--upload-pack=evil",
            "../x",
            "x.lock",
            "a..b",
            "@{u}",
            "x~1^2:3?*[\\",
            "",
            ".hidden",
            "é",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for id in ids {
            let name = sanitize_branch(&format!("sortie/{id}"), id);
            assert_eq!(branch_name_problem(&name), None, "{id:?} -> {name:?}");
            assert!(seen.insert(name.clone()), "{id:?} -> {name:?} collides");
        }
        let bare = sanitize_branch("--upload-pack=evil", "--upload-pack=evil");
        assert!(!bare.starts_with('-'), "{bare}");
    }

    #[test]
    fn templates_render_and_unknown_variables_are_errors() {
        assert_eq!(
            render_ticket_template("{{ ticket.id }}: {{ ticket.title }}", "7", "Fix it").unwrap(),
            "7: Fix it"
        );
        assert!(render_ticket_template("{{ ticket.nope }}", "7", "t").is_err());
    }

    fn github(api_url: &str, repo: &str) -> TrackerConfig {
        TrackerConfig::Github {
            repo: repo.to_string(),
            token_env: "GITHUB_TOKEN".to_string(),
            api_url: api_url.to_string(),
            status_label_prefix: "status:".to_string(),
            priority_label_prefix: "priority:".to_string(),
        }
    }

    // Issue #52 (1): two boards on one repository got the same `sortie/<id>` branch.
    #[test]
    fn the_default_branch_is_unique_to_the_board_and_the_same_on_every_host() {
        let git = GitWorkspace {
            url: "/srv/repo.git".to_string(),
            base: DEFAULT_BASE.to_string(),
            branch: DEFAULT_BRANCH.to_string(),
            push: true,
        };
        let api = "https://api.github.com";
        let boards = [
            github(api, "acme/widgets"),
            github(api, "acme/gadgets"),
            github("https://ghe.example.com/api/v3", "acme/widgets"),
            TrackerConfig::Local {
                path: "/srv/boards/one".into(),
            },
            TrackerConfig::Local {
                path: "/srv/boards/two".into(),
            },
        ];
        let branches: std::collections::BTreeSet<String> = boards
            .iter()
            .map(|b| ticket_branch(&git, &board_key(b), "1", "t").unwrap())
            .collect();
        assert_eq!(branches.len(), boards.len(), "{branches:?}");
        let one = ticket_branch(&git, &board_key(&boards[0]), "1", "t").unwrap();
        let key = board_key(&github(api, "acme/widgets"));
        assert_eq!(
            one,
            format!("sortie/{key}/1"),
            "the same board, the same branch"
        );
        assert_eq!(key.len(), 8);
        assert_eq!(branch_name_problem(&one), None);
    }

    #[test]
    fn a_local_board_s_key_does_not_depend_on_how_its_path_was_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("board")).unwrap();
        let plain = dir.path().join("board");
        let roundabout = dir.path().join("board/../board/.");
        let key = |path: &Path| {
            board_key(&TrackerConfig::Local {
                path: path.to_path_buf(),
            })
        };
        assert_eq!(key(&plain), key(&roundabout));
    }

    #[test]
    fn ref_rules() {
        for bad in [
            "", "-x", "a..b", "a b", "a/", "/a", "a.", "a/.b", "a.lock", "a@{b", "HEAD", "a//b",
        ] {
            assert!(branch_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["main", "release/1.2", "sortie/42", "feat_x-y"] {
            assert_eq!(branch_name_problem(good), None, "{good:?}");
        }
    }
}

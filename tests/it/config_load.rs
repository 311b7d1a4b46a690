//! Loading valid configs: defaults, both forms, path resolution, `$VAR` expansion, and the
//! loader's robustness against hostile input (it must refuse, never panic or hang).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sortie::config::{
    AgentConfig, AgentPreset, Budgets, Concurrency, Config, ConfigError, RetryConfig, Stage,
    TrackerConfig, WorkspaceConfig, WorkspaceHooks, MAX_CONFIG_BYTES,
};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Parse `text` as if it were `/srv/sortie/pipeline.yaml`, with a fixed environment.
fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    Config::parse_str_with_env(text, Some(Path::new("/srv/sortie/pipeline.yaml")), env)
}

/// The single message of a refused config.
fn only_problem(result: Result<Config, ConfigError>) -> String {
    let err = result.expect_err("config should be refused");
    let d = err.diagnostics();
    assert_eq!(d.len(), 1, "{err}");
    d[0].to_string()
}

const MINIMAL: &str =
    "tracker: {kind: local, path: board}\nagent: {command: [my-agent]}\nactive_states: [todo]\n";

#[test]
fn three_stage_fixture_loads_with_every_field() {
    let dir = fixture_dir();
    let path = dir.join("three-stage.yaml");
    let cfg = Config::load(&path).unwrap();
    let stage = |role: &str,
                 claim: &str,
                 ip: Option<&str>,
                 ok: &str,
                 fail: Option<&str>,
                 prior: Option<&str>,
                 cap| Stage {
        role: role.into(),
        claim_status: claim.into(),
        in_progress_status: ip.map(Into::into),
        success_status: Some(ok.into()),
        failure_status: fail.map(Into::into),
        requires_prior_role: prior.map(Into::into),
        max_in_flight: cap,
        filter: Default::default(),
        rework: None,
        routes: Vec::new(),
        verify: None,
        evidence: Default::default(),
        review: None,
    };
    let expected = Config {
        source: Some(path.clone()),
        tracker: TrackerConfig::Local {
            path: dir.join("board"),
        },
        filter: Default::default(),
        blockers: Default::default(),
        state_root: dir.join("state"),
        ledger: Default::default(),
        reactions: None,
        roles_dir: dir.join("roles"),
        claim_ttl: Duration::from_secs(600),
        concurrency: Concurrency {
            max_in_flight: 4,
            per_role_max_in_flight: 1,
            per_status_max_in_flight: BTreeMap::from([("code-review".to_string(), 1)]),
        },
        terminal_states: vec!["done".into(), "cancelled".into()],
        agent: AgentConfig {
            preset: AgentPreset::Command,
            command: vec![
                dir.join("scripts/demo-agent").display().to_string(),
                "--role-file".into(),
            ],
            model: None,
            permission_mode: None,
            max_turns: None,
            allowed_tools: Vec::new(),
            sandbox: None,
            bubblewrap: None,
            extra_args: Vec::new(),
            timeout: Duration::from_secs(3600),
            stall_timeout: None,
            handshake_timeout: Duration::from_secs(60),
            env: BTreeMap::from([("AGENT_MODE".to_string(), "careful".to_string())]),
            resume: true,
            allow_permission_denials: false,
            permissions: Default::default(),
        },
        retry: RetryConfig {
            max_attempts: 3,
            backoff_base: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
        },
        stages: vec![
            stage(
                "architect",
                "ready-for-design",
                Some("designing"),
                "design-approved",
                Some("design-blocked"),
                None,
                1,
            ),
            stage(
                "backend",
                "design-approved",
                None,
                "code-review",
                Some("blocked"),
                Some("architect"),
                2,
            ),
            stage("qa", "code-review", None, "done", None, Some("backend"), 1),
        ],
        trusted_authors: vec!["ada".into()],
        workspace: WorkspaceConfig {
            hooks: WorkspaceHooks::default(),
            hook_timeout: Duration::from_secs(60),
            prune_every_ticks: 10,
            git: None,
        },
        hooks: vec![],
        budgets: Budgets::default(),
        prices: Default::default(),
        questions: Default::default(),
        poll_interval: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(30),
        http: sortie::config::HttpConfig::default(),
        pull_request: None,
        forge: None,
        warnings: Vec::new(),
    };
    assert_eq!(cfg, expected);
    assert_eq!(cfg.ledger_path(), dir.join("state/ledger.db"));
}

#[test]
fn single_role_form_becomes_a_one_stage_pipeline() {
    let dir = fixture_dir();
    let cfg = Config::load(&dir.join("single-role.yaml")).unwrap();
    assert_eq!(
        cfg.stages,
        vec![Stage {
            role: "agent".into(),
            claim_status: "todo".into(),
            in_progress_status: Some("doing".into()),
            success_status: Some("review".into()),
            failure_status: None,
            requires_prior_role: None,
            max_in_flight: 1,
            filter: Default::default(),
            rework: None,
            routes: Vec::new(),
            verify: None,
            evidence: Default::default(),
            review: None,
        }]
    );
    assert_eq!(
        cfg.tracker,
        TrackerConfig::Local {
            path: dir.join("board")
        }
    );
}

#[test]
fn single_role_form_takes_a_role_and_works_without_handoff() {
    let cfg = parse(&format!("{MINIMAL}role: writer\n"), &no_env).unwrap();
    assert_eq!(cfg.stages.len(), 1);
    assert_eq!(cfg.stages[0].role, "writer");
    assert_eq!(cfg.stages[0].claim_status, "todo");
    assert_eq!(cfg.stages[0].in_progress_status, None);
    assert_eq!(cfg.stages[0].success_status, None);
}

#[test]
fn defaults_are_applied() {
    let cfg = parse(MINIMAL, &no_env).unwrap();
    let base = Path::new("/srv/sortie");
    assert_eq!(cfg.state_root, base.join("state"));
    assert_eq!(cfg.roles_dir, base.join("roles"));
    assert_eq!(cfg.claim_ttl, Duration::from_secs(600));
    assert_eq!(
        cfg.concurrency,
        Concurrency {
            max_in_flight: 4,
            per_role_max_in_flight: 1,
            per_status_max_in_flight: BTreeMap::new()
        }
    );
    assert_eq!(
        cfg.terminal_states,
        vec!["done".to_string(), "cancelled".to_string()]
    );
    assert_eq!(cfg.agent.timeout, Duration::from_secs(3600));
    assert_eq!(cfg.agent.stall_timeout, Some(Duration::from_secs(300)));
    assert_eq!(cfg.retry.backoff(1), Duration::from_secs(10));
    assert_eq!(cfg.retry.backoff(10), Duration::from_secs(300));
    assert_eq!(cfg.retry.max_attempts, 3);
    assert!(cfg.trusted_authors.is_empty());
}

#[test]
fn per_role_default_fills_stage_caps_unless_overridden() {
    let text = "tracker: {kind: local, path: b}\nagent: {command: [a]}\nconcurrency: {per_role_max_in_flight: 3}\n\
                pipeline_stages:\n  - {role: a, claim_status: x, success_status: y}\n  - {role: b, claim_status: y, success_status: z, max_in_flight: 5}\n";
    let cfg = parse(text, &no_env).unwrap();
    assert_eq!(
        cfg.stages
            .iter()
            .map(|s| s.max_in_flight)
            .collect::<Vec<_>>(),
        vec![3, 5]
    );
}

#[test]
fn paths_resolve_against_the_config_directory_and_absolute_paths_stay() {
    let text = "tracker: {kind: local, path: ../board}\nstate_root: /var/lib/sortie\nroles_dir: ./prompts\n\
                agent: {command: [./bin/agent, ./not-a-program]}\nactive_states: [todo]\n";
    let cfg = parse(text, &no_env).unwrap();
    assert_eq!(
        cfg.tracker,
        TrackerConfig::Local {
            path: PathBuf::from("/srv/board")
        }
    );
    assert_eq!(cfg.state_root, PathBuf::from("/var/lib/sortie"));
    assert_eq!(cfg.roles_dir, PathBuf::from("/srv/sortie/prompts"));
    // Only the program is resolved; later arguments are the agent's business.
    assert_eq!(
        cfg.agent.command,
        vec![
            "/srv/sortie/bin/agent".to_string(),
            "./not-a-program".to_string()
        ]
    );
}

#[test]
fn a_bare_program_name_is_left_for_path_lookup() {
    let cfg = parse(MINIMAL, &no_env).unwrap();
    assert_eq!(cfg.agent.command, vec!["my-agent".to_string()]);
}

#[test]
fn without_a_source_paths_resolve_against_the_current_directory() {
    let cfg = Config::parse_str_with_env(MINIMAL, None, &no_env).unwrap();
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(cfg.source, None);
    assert_eq!(
        cfg.tracker,
        TrackerConfig::Local {
            path: cwd.join("board")
        }
    );
    let err = Config::parse_str_with_env("tracker: 3\n", None, &no_env).unwrap_err();
    assert!(
        err.to_string().starts_with("<config>:1:10: tracker: "),
        "{err}"
    );
}

#[test]
fn env_variables_expand_in_string_values() {
    let env = |name: &str| match name {
        "BOARD" => Some("/data/board".to_string()),
        "TIMEOUT" => Some("120".to_string()),
        "TOKEN" => Some("s3cret".to_string()),
        _ => None,
    };
    let text = "tracker: {kind: local, path: \"${BOARD}\"}\nagent:\n  command: [agent, --price, \"$$5\"]\n  \
                timeout_seconds: $TIMEOUT\n  env: {API_TOKEN: \"Bearer ${TOKEN}\"}\nactive_states: [todo]\n";
    let cfg = parse(text, &env).unwrap();
    assert_eq!(
        cfg.tracker,
        TrackerConfig::Local {
            path: PathBuf::from("/data/board")
        }
    );
    assert_eq!(
        cfg.agent.command,
        vec!["agent".to_string(), "--price".into(), "$5".into()]
    );
    assert_eq!(cfg.agent.timeout, Duration::from_secs(120));
    assert_eq!(cfg.agent.env["API_TOKEN"], "Bearer s3cret");
}

#[test]
fn a_quoted_variable_stays_a_string() {
    let env = |_: &str| Some("120".to_string());
    let text = format!("{MINIMAL}retry: {{max_attempts: \"${{N}}\"}}\n");
    let msg = only_problem(parse(&text, &env));
    assert!(msg.contains("retry.max_attempts: expected a whole number between 1 and 4294967295, found string \"120\""), "{msg}");
}

#[test]
fn every_unset_variable_and_every_section_problem_is_reported_together() {
    let text = "tracker: {kind: local, path: $BOARD}\nagent:\n  command: [$AGENT]\n  timout_seconds: 5\n\
                pipeline_stages:\n  - {role: a, claim_status: x, success_status: y}\n  - {role: b, claim_status: y}\n";
    let err = parse(text, &no_env).unwrap_err();
    let lines: Vec<String> = err
        .diagnostics()
        .iter()
        .map(|d| format!("{}:{} {}", d.line, d.column, d.field))
        .collect();
    assert_eq!(
        lines,
        vec![
            "1:30 tracker.path",
            "3:13 agent.command[0]",
            "4:3 agent.timout_seconds",
            "7:5 pipeline_stages[1].success_status"
        ],
        "{err}"
    );
    assert!(
        err.to_string().contains("did you mean `timeout_seconds`?"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("missing required key `success_status`"),
        "{err}"
    );
}

#[test]
fn missing_required_sections_are_named() {
    let err = parse("active_states: [todo]\n", &no_env).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tracker: missing required key `tracker`"),
        "{text}"
    );
    assert!(
        text.contains("agent: missing required key `agent`"),
        "{text}"
    );
    let msg = only_problem(parse(
        "tracker: {kind: local}\nagent: {command: [a]}\nactive_states: [t]\n",
        &no_env,
    ));
    assert!(
        msg.ends_with("1:1: tracker.path: missing required key `path`"),
        "{msg}"
    );
}

#[test]
fn stall_timeout_zero_disables_stall_detection() {
    let cfg = parse(
        &MINIMAL.replace(
            "{command: [my-agent]}",
            "{command: [a], stall_timeout_seconds: 0}",
        ),
        &no_env,
    )
    .unwrap();
    assert_eq!(cfg.agent.stall_timeout, None);
}

// --- robustness: refuse clearly, never panic or hang ---

#[test]
fn an_empty_file_is_refused() {
    for text in ["", "\n", "# only a comment\n", "---\n"] {
        let msg = only_problem(parse(text, &no_env));
        assert!(msg.contains("1:1: the config is empty"), "{text:?}: {msg}");
    }
}

#[test]
fn a_top_level_list_or_scalar_is_refused() {
    let msg = only_problem(parse("- tracker\n- agent\n", &no_env));
    assert!(
        msg.contains("expected a mapping of settings at the top level, found a list"),
        "{msg}"
    );
    let msg = only_problem(parse("just words\n", &no_env));
    assert!(msg.contains("found a single value"), "{msg}");
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    let mut prev = 'a';
    for name in 'b'..='j' {
        let refs = vec![format!("*{prev}"); 10].join(", ");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        prev = name;
    }
    let started = Instant::now();
    let msg = only_problem(parse(&bomb, &no_env));
    assert!(msg.contains("aliases expand to too many nodes"), "{msg}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn deep_nesting_is_refused() {
    // libyaml needs quadratic time for deep flow nesting: the loader must refuse it first.
    for text in [
        format!("a: {}", "[".repeat(500_000)),
        "[".repeat(500_000),
        (0..100)
            .map(|i| format!("{}a:\n", "  ".repeat(i)))
            .collect(),
    ] {
        let started = Instant::now();
        let msg = only_problem(parse(&text, &no_env));
        assert!(
            msg.contains("nested too deeply; expected at most 64 levels"),
            "{msg}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_ten_megabyte_text_is_refused_before_parsing() {
    let huge = format!("# {}\n", "x".repeat(10 * 1024 * 1024));
    let msg = only_problem(parse(&huge, &no_env));
    assert!(
        msg.contains(&format!("expected at most {MAX_CONFIG_BYTES} bytes")),
        "{msg}"
    );
}

#[test]
fn a_ten_megabyte_file_is_refused_by_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, vec![b'#'; 10 * 1024 * 1024]).unwrap();
    let msg = only_problem(Config::load(&path));
    assert!(msg.contains("the config file is 10485760 bytes"), "{msg}");
}

#[test]
fn non_utf8_bytes_are_refused_with_their_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.yaml");
    std::fs::write(
        &path,
        b"tracker: {kind: local, path: board}\nrole: caf\xe9\n",
    )
    .unwrap();
    let msg = only_problem(Config::load(&path));
    assert_eq!(
        msg,
        format!(
            "{}:2:10: the file is not valid UTF-8; expected a UTF-8 text file",
            path.display()
        )
    );
}

#[test]
fn a_missing_file_is_a_read_error() {
    let err = Config::load(Path::new("/nonexistent/sortie.yaml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert_eq!(
        err.to_string(),
        "cannot read config file /nonexistent/sortie.yaml"
    );
}

#[test]
fn several_documents_are_refused() {
    let msg = only_problem(parse(&format!("{MINIMAL}---\n{MINIMAL}"), &no_env));
    assert!(msg.contains("invalid YAML"), "{msg}");
}

#[test]
fn non_string_keys_and_merge_keys_are_refused() {
    let msg = only_problem(parse(&format!("{MINIMAL}1: x\n"), &no_env));
    assert!(msg.contains("top-level keys must be strings"), "{msg}");
    let text = "base: &b {kind: local, path: board}\n";
    let err = parse(&format!("{text}{MINIMAL}"), &no_env).unwrap_err();
    assert!(err.to_string().contains("unknown key `base`"), "{err}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any text built from YAML's punctuation either loads or is refused with positioned
        /// diagnostics; it never panics.
        #[test]
        fn arbitrary_yaml_like_text_never_panics(text in "([a-z_]{1,8}|[:\\-\\[\\]{},&*!|>'\"#$ ]|\n {0,4}){0,80}") {
            if let Err(err) = parse(&text, &no_env) {
                for d in err.diagnostics() {
                    prop_assert!(d.line >= 1 && d.column >= 1);
                }
            }
        }

        /// Mutating a valid config by one character never panics either.
        #[test]
        fn mutated_valid_config_never_panics(at in 0usize..400, ch in any::<char>()) {
            let base = std::fs::read_to_string(fixture_dir().join("three-stage.yaml")).unwrap();
            let mut chars: Vec<char> = base.chars().collect();
            let at = at % chars.len();
            chars[at] = ch;
            let text: String = chars.into_iter().collect();
            let _ = parse(&text, &no_env);
        }
    }
}

#[test]
fn thousands_of_problems_are_capped_with_a_count() {
    let mut text = String::from(MINIMAL);
    for i in 0..5000 {
        text.push_str(&format!("unknown_{i}: x\n"));
    }
    let err = parse(&text, &no_env).unwrap_err();
    let d = err.diagnostics();
    assert_eq!(d.len(), sortie::config::MAX_DIAGNOSTICS + 1);
    assert_eq!(d[0].line, 4);
    assert_eq!(
        d.last().unwrap().message,
        "4900 more problems not shown; fix the ones above first"
    );
}

#[test]
fn a_stage_cannot_run_in_its_own_claim_status() {
    let text = "tracker: {kind: local, path: b}\nagent: {command: [a]}\npipeline_stages:\n  \
                - {role: a, claim_status: todo, in_progress_status: todo, success_status: done}\n";
    let msg = only_problem(parse(text, &no_env));
    assert!(
        msg.ends_with("4:55: pipeline_stages[0].in_progress_status: in_progress_status `todo` equals this stage's claim_status; expected a different status"),
        "{msg}"
    );
}

#[test]
fn agent_env_values_are_text_and_command_must_name_a_program() {
    let text = MINIMAL.replace(
        "{command: [my-agent]}",
        "{command: [my-agent, 3], env: {RETRIES: 3, DEBUG: true}}",
    );
    let cfg = parse(&text, &no_env).unwrap();
    assert_eq!(
        cfg.agent.command,
        vec!["my-agent".to_string(), "3".to_string()]
    );
    assert_eq!(cfg.agent.env["RETRIES"], "3");
    assert_eq!(cfg.agent.env["DEBUG"], "true");
    for (command, want) in [
        (
            "[]",
            "agent.command: expected at least the program to run, found an empty list",
        ),
        (
            "[\"\"]",
            "agent.command[0]: the program must not be an empty string",
        ),
        (
            "[a, [b]]",
            "agent.command[1]: expected a string argument, found a list",
        ),
    ] {
        let text = MINIMAL.replace("[my-agent]", command);
        let msg = only_problem(parse(&text, &no_env));
        assert!(msg.ends_with(want), "{command}: {msg}");
    }
}

#[test]
fn trusted_authors_must_be_names() {
    let msg = only_problem(parse(
        &format!("{MINIMAL}trusted_authors: [ada, \"\"]\n"),
        &no_env,
    ));
    assert!(msg.ends_with("4:24: trusted_authors[1]: author \"\" must be a non-empty name without surrounding whitespace"), "{msg}");
}

#[test]
fn workspace_hooks_are_argvs_checked_like_agent_command() {
    let text = "tracker: {kind: local, path: board}\nagent: {command: [x]}\nworkspace:\n  hooks:\n    before_run: \"./prepare.sh --fast\"\n    after_run: []\n    after_create: [./bin/setup, --quiet]\nactive_states: [todo]\n";
    let err = Config::parse_str(text, Some(Path::new("/srv/sortie/p.yaml"))).unwrap_err();
    let shown = err.to_string();
    assert!(shown.contains("p.yaml:5:17: workspace.hooks.before_run: expected a list of arguments (argv), found the string"), "{shown}");
    assert!(
        shown.contains(
            "p.yaml:6:16: workspace.hooks.after_run: expected at least the program to run"
        ),
        "{shown}"
    );
    let ok = text.replace(
        "    before_run: \"./prepare.sh --fast\"\n    after_run: []\n",
        "",
    );
    let cfg = Config::parse_str(&ok, Some(Path::new("/srv/sortie/p.yaml"))).unwrap();
    assert_eq!(
        cfg.workspace.hooks.after_create,
        Some(vec![
            "/srv/sortie/bin/setup".to_string(),
            "--quiet".to_string()
        ])
    );
}

/// Regression (#52): `to_role` on the fixing kinds and `to_status` on `merged` and
/// `closed_unmerged` say what `to` says, and `to` still works where it is unambiguous.
#[test]
fn reactions_take_to_role_and_to_status_and_keep_to() {
    let config = |ci: &str, merged: &str| {
        format!(
            "tracker: {{kind: github, repo: acme/widgets}}
agent: {{command: [my-agent]}}
workspace: {{git: {{url: \"https://example.com/acme/widgets.git\"}}}}
pull_request: {{after: backend}}
pipeline_stages:
  - {{role: backend, claim_status: todo, success_status: review}}
  - {{role: qa, claim_status: review, success_status: qa-passed}}
reactions:
  watch: [qa-passed]
  ci_failure: {ci}
  merged: {merged}
  closed_unmerged: {{to_status: needs-human}}
"
        )
    };
    let explicit = parse(
        &config("{to_role: backend}", "{to_status: shipped}"),
        &no_env,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let written_to =
        parse(&config("{to: backend}", "{to: shipped}"), &no_env).unwrap_or_else(|e| panic!("{e}"));
    for cfg in [&explicit, &written_to] {
        let r = cfg.reactions.as_ref().expect("reactions");
        let ci = r.rule(sortie::config::ReactionKind::CiFailure).expect("ci");
        assert_eq!(ci.to, "backend");
        assert_eq!(r.merged_to.as_deref(), Some("shipped"));
        assert_eq!(r.closed_unmerged_to.as_deref(), Some("needs-human"));
    }
    assert_eq!(explicit.reactions, written_to.reactions);
}

//! Config `hooks:` section (issue #8): a valid section parses with its defaults and resolved
//! paths; each invalid form is refused with the exact line, column and field.

use std::path::PathBuf;
use std::time::Duration;

use sortie::config::{
    Config, ConfigError, Diagnostic, HookConfig, HookEvents, HookOutcome, HookTarget,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(name)
}

fn problems(name: &str) -> Vec<Diagnostic> {
    match Config::load(&fixture(name)) {
        Ok(cfg) => panic!("{name} should be refused, loaded {:#?}", cfg.hooks),
        Err(err) => err.diagnostics().to_vec(),
    }
}

/// Assert the diagnostics are exactly `expected` as (line, column, field, message fragment).
fn assert_problems(got: &[Diagnostic], expected: &[(usize, usize, &str, &str)]) {
    let shown: Vec<String> = got.iter().map(ToString::to_string).collect();
    assert_eq!(got.len(), expected.len(), "{}", shown.join("\n"));
    for (d, (line, column, field, fragment)) in got.iter().zip(expected) {
        assert_eq!(
            (d.line, d.column, d.field.as_str()),
            (*line, *column, *field),
            "{d}"
        );
        assert!(d.message.contains(fragment), "{d}\n  expected {fragment:?}");
    }
}

const BASE: &str =
    "tracker: {kind: local, path: board}\nagent: {command: [my-agent]}\nactive_states: [todo]\n";

fn parse(hooks: &str) -> Result<Config, ConfigError> {
    Config::parse_str_with_env(&format!("{BASE}{hooks}"), None, &|_| None)
}

#[test]
fn a_valid_hooks_section_parses_with_defaults_and_resolved_paths() {
    let cfg = Config::load(&fixture("hooks.yaml")).unwrap();
    let dir = fixture("");
    assert_eq!(
        cfg.hooks,
        vec![
            HookConfig {
                events: HookEvents::Named(vec!["tracker_pipeline.handoff".into()]),
                roles: vec![],
                outcomes: vec![],
                target: HookTarget::Command {
                    argv: vec![
                        dir.join("hooks/notify.sh").display().to_string(),
                        "--channel".into(),
                        "builds".into(),
                    ],
                },
                timeout: Duration::from_secs(20),
                max_attempts: 1,
            },
            HookConfig {
                events: HookEvents::Named(vec!["run.finished".into(), "writeback.dropped".into()]),
                roles: vec!["qa".into()],
                outcomes: vec![HookOutcome::Failure],
                target: HookTarget::Webhook {
                    url: "https://hooks.example.com/sortie".into(),
                    secret_env: Some("SORTIE_WEBHOOK_SECRET".into()),
                },
                timeout: Duration::from_secs(10),
                max_attempts: 4,
            },
            HookConfig {
                events: HookEvents::All,
                roles: vec![],
                outcomes: vec![],
                target: HookTarget::Command {
                    argv: vec!["logger".into(), "-t".into(), "sortie".into()],
                },
                timeout: Duration::from_secs(30),
                max_attempts: 1,
            },
        ]
    );
}

#[test]
fn no_hooks_section_means_no_hooks() {
    assert!(parse("").unwrap().hooks.is_empty());
}

#[test]
fn webhook_defaults_are_ten_seconds_and_five_attempts() {
    let cfg =
        parse("hooks:\n  - {event: run.started, webhook: \"http://127.0.0.1:9/x\"}\n").unwrap();
    assert_eq!(cfg.hooks[0].timeout, Duration::from_secs(10));
    assert_eq!(cfg.hooks[0].max_attempts, 5);
    assert_eq!(
        cfg.hooks[0].target,
        HookTarget::Webhook {
            url: "http://127.0.0.1:9/x".into(),
            secret_env: None
        }
    );
}

#[test]
fn semantic_problems_each_name_their_line_and_field() {
    assert_problems(
        &problems("hooks-invalid.yaml"),
        &[
            (
                8,
                12,
                "hooks[0].event",
                "unknown event `tracker_pipeline.handof`; did you mean `tracker_pipeline.handoff`?",
            ),
            (
                12,
                5,
                "hooks[1].webhook",
                "either `command` or `webhook`, not both",
            ),
            (13, 5, "hooks[2]", "missing `command` or `webhook`"),
            (
                16,
                14,
                "hooks[3].webhook",
                "expected an http:// or https:// URL, found \"ftp://example.com\"",
            ),
            (
                17,
                17,
                "hooks[3].secret_env",
                "expected the name of an environment variable",
            ),
            (
                18,
                22,
                "hooks[3].timeout_seconds",
                "expected a whole number >= 1, found 0",
            ),
            (
                19,
                19,
                "hooks[3].max_attempts",
                "expected a whole number >= 1, found 0",
            ),
            (
                20,
                13,
                "hooks[4].event[0]",
                "\"*\" selects every event and must stand alone",
            ),
            (21, 14, "hooks[4].command", "it is not split by a shell"),
            (
                22,
                13,
                "hooks[4].roles[0]",
                "`frontend` is no stage's role; expected one of: backend",
            ),
            (
                25,
                5,
                "hooks[5].secret_env",
                "a command hook takes no secret",
            ),
            (
                26,
                15,
                "hooks[5].outcomes",
                "expected at least one outcome, found an empty list",
            ),
        ],
    );
}

#[test]
fn type_problems_each_name_their_line_and_field() {
    assert_problems(
        &problems("hooks-unknown-key.yaml"),
        &[
            (
                6,
                5,
                "hooks[0].comand",
                "unknown key `comand`; did you mean `command`?",
            ),
            (
                9,
                16,
                "hooks[1].outcomes[0]",
                "unknown value `succes`; expected one of: `success`, `failure`",
            ),
            (10, 5, "hooks[2].event", "missing required key `event`"),
        ],
    );
}

#[test]
fn hooks_must_be_a_list_and_events_names() {
    let err = parse("hooks: {event: run.started}\n").unwrap_err();
    assert_problems(
        err.diagnostics(),
        &[(4, 8, "hooks", "expected a list of hooks, found a mapping")],
    );
    let err = parse("hooks:\n  - {event: 3, command: [x]}\n").unwrap_err();
    assert_problems(
        err.diagnostics(),
        &[(
            5,
            13,
            "hooks[0].event",
            "expected an event name, a list of event names, or \"*\", found a number",
        )],
    );
    let err = parse("hooks:\n  - {event: [], command: [x]}\n").unwrap_err();
    assert_problems(
        err.diagnostics(),
        &[(5, 13, "hooks[0].event", "expected at least one event name")],
    );
}

#[test]
fn secrets_are_named_never_written() {
    // A key holding the secret itself is not a hooks key at all.
    let err =
        parse("hooks:\n  - {event: run.started, webhook: \"https://x.test\", secret: hunter2}\n")
            .unwrap_err();
    assert_problems(
        err.diagnostics(),
        &[(5, 53, "hooks[0].secret", "unknown key `secret`")],
    );
}

//! Every static contract rule of the config loader, one invalid fixture each: the loader must
//! refuse the file and point at the exact line, column and field, saying what was expected.

use std::path::PathBuf;

use sortie::config::{Config, ConfigError, Diagnostic};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/config")
        .join(name)
}

/// Load an invalid fixture and return its diagnostics.
fn problems(name: &str) -> Vec<Diagnostic> {
    match Config::load(&fixture(name)) {
        Ok(cfg) => panic!("{name} should be refused, loaded {cfg:#?}"),
        Err(ConfigError::Read { source, .. }) => panic!("{name} unreadable: {source}"),
        Err(ConfigError::Invalid { diagnostics }) => diagnostics,
    }
}

/// Assert the diagnostics are exactly `expected` as (line, column, field, message fragment).
fn assert_problems(name: &str, expected: &[(usize, usize, &str, &str)]) {
    let got = problems(name);
    let shown: Vec<String> = got.iter().map(ToString::to_string).collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "{name}: wrong number of problems:\n{}",
        shown.join("\n")
    );
    for (d, (line, column, field, fragment)) in got.iter().zip(expected) {
        assert_eq!(
            (d.line, d.column, d.field.as_str()),
            (*line, *column, *field),
            "{name}: {d}"
        );
        assert!(
            d.message.contains(fragment),
            "{name}: {d}\n  expected message containing {fragment:?}"
        );
        assert!(
            d.file.ends_with(name),
            "{name}: diagnostic names file {}",
            d.file
        );
    }
}

#[test]
fn handoff_state_must_not_be_active() {
    assert_problems(
        "handoff-in-active.yaml",
        &[(
            6,
            16,
            "handoff_state",
            "expected a status outside active_states",
        )],
    );
}

#[test]
fn in_progress_state_must_be_active() {
    assert_problems(
        "in-progress-not-active.yaml",
        &[(
            5,
            20,
            "in_progress_state",
            "must be one of active_states (todo)",
        )],
    );
}

#[test]
fn active_and_terminal_states_are_disjoint() {
    assert_problems(
        "active-terminal-overlap.yaml",
        &[(
            4,
            17,
            "active_states[0]",
            "`todo` is both active and terminal",
        )],
    );
}

#[test]
fn single_role_form_claims_from_exactly_one_status() {
    assert_problems(
        "several-claimable.yaml",
        &[(
            4,
            16,
            "active_states",
            "2 statuses to claim from (todo, backlog)",
        )],
    );
}

#[test]
fn both_forms_together_are_refused() {
    assert_problems(
        "both-forms.yaml",
        &[(
            4,
            1,
            "active_states",
            "cannot be combined with `pipeline_stages`",
        )],
    );
}

#[test]
fn a_config_without_any_pipeline_is_refused() {
    assert_problems(
        "no-pipeline.yaml",
        &[(1, 1, "", "expected `pipeline_stages`")],
    );
}

#[test]
fn roles_are_unique() {
    assert_problems(
        "duplicate-role.yaml",
        &[(
            8,
            11,
            "pipeline_stages[1].role",
            "already used by pipeline_stages[0]",
        )],
    );
}

#[test]
fn two_stages_cannot_share_a_claim_status() {
    assert_problems(
        "duplicate-claim-status.yaml",
        &[(
            9,
            19,
            "pipeline_stages[1].claim_status",
            "`todo` is already pipeline_stages[0].claim_status",
        )],
    );
}

#[test]
fn two_stages_cannot_share_an_in_progress_status() {
    assert_problems(
        "duplicate-in-progress.yaml",
        &[(
            11,
            25,
            "pipeline_stages[1].in_progress_status",
            "already pipeline_stages[0].in_progress_status",
        )],
    );
}

#[test]
fn one_stages_in_progress_cannot_be_anothers_claim_status() {
    assert_problems(
        "in-progress-is-other-claim.yaml",
        &[(
            10,
            19,
            "pipeline_stages[1].claim_status",
            "`review` is already pipeline_stages[0].in_progress_status",
        )],
    );
}

#[test]
fn no_stage_claims_or_runs_in_a_terminal_status() {
    assert_problems(
        "claims-terminal.yaml",
        &[
            (
                7,
                19,
                "pipeline_stages[0].claim_status",
                "`done` is a terminal state",
            ),
            (
                11,
                25,
                "pipeline_stages[1].in_progress_status",
                "`cancelled` is a terminal state",
            ),
        ],
    );
}

#[test]
fn outcome_statuses_differ_from_the_stages_own_statuses() {
    assert_problems(
        "success-is-own-status.yaml",
        &[
            (
                8,
                21,
                "pipeline_stages[0].success_status",
                "own claim_status, so the stage would re-dispatch itself",
            ),
            (
                9,
                21,
                "pipeline_stages[0].failure_status",
                "own in_progress_status",
            ),
        ],
    );
}

#[test]
fn requires_prior_role_names_an_earlier_stage() {
    assert_problems(
        "requires-later-role.yaml",
        &[
            (
                8,
                26,
                "pipeline_stages[0].requires_prior_role",
                "`qa` is not an earlier stage",
            ),
            (
                12,
                26,
                "pipeline_stages[1].requires_prior_role",
                "no stage has role `architect`; expected the role of an earlier stage (backend)",
            ),
        ],
    );
}

#[test]
fn unknown_keys_are_named_with_the_closest_known_key() {
    assert_problems(
        "unknown-key.yaml",
        &[
            (
                4,
                1,
                "pipline_stages",
                "unknown key `pipline_stages`; did you mean `pipeline_stages`?",
            ),
            (
                7,
                5,
                "pipeline_stages[0].claim_statu",
                "unknown key `claim_statu`; did you mean `claim_status`?",
            ),
        ],
    );
}

#[test]
fn wrong_types_say_what_was_expected() {
    assert_problems(
        "wrong-type.yaml",
        &[
            (
                4,
                20,
                "agent.timeout_seconds",
                "expected a whole number >= 1, found string \"soon\"",
            ),
            (
                9,
                20,
                "pipeline_stages[0].max_in_flight",
                "found integer `-1`",
            ),
        ],
    );
}

#[test]
fn agent_command_as_a_string_explains_argv() {
    assert_problems(
        "command-string.yaml",
        &[(
            3,
            12,
            "agent.command",
            "expected a list of arguments (argv), found the string \"my-agent --flag\"",
        )],
    );
}

#[test]
fn unset_environment_variable_is_named() {
    assert_problems(
        "unset-env.yaml",
        &[(
            3,
            9,
            "tracker.path",
            "environment variable `SORTIE_TEST_UNSET_BOARD` is not set",
        )],
    );
}

#[test]
fn numbers_out_of_range_are_all_reported() {
    assert_problems(
        "numbers-out-of-range.yaml",
        &[
            (
                2,
                25,
                "claim_lock_ttl_seconds",
                "expected a whole number >= 1, found 0",
            ),
            (4, 18, "concurrency.max_in_flight", ">= 1"),
            (5, 27, "concurrency.per_role_max_in_flight", ">= 1"),
            (8, 20, "agent.timeout_seconds", ">= 1"),
            (10, 17, "retry.max_attempts", ">= 1"),
            (
                12,
                24,
                "retry.backoff_max_seconds",
                "backoff_base_seconds (60) is larger than backoff_max_seconds (30)",
            ),
            (17, 20, "pipeline_stages[0].max_in_flight", ">= 1"),
        ],
    );
}

#[test]
fn status_and_role_names_are_checked() {
    assert_problems(
        "bad-names.yaml",
        &[
            (
                5,
                11,
                "pipeline_stages[0].role",
                "role \"Back End\" is not a valid role name",
            ),
            (
                6,
                19,
                "pipeline_stages[0].claim_status",
                "must not start or end with whitespace",
            ),
            (
                7,
                21,
                "pipeline_stages[0].success_status",
                "must not be empty",
            ),
            (
                8,
                11,
                "pipeline_stages[1].role",
                "role \"../etc\" is not a valid role name",
            ),
            (
                9,
                19,
                "pipeline_stages[1].claim_status",
                "must not contain control characters",
            ),
        ],
    );
}

#[test]
fn unknown_tracker_kind_lists_the_known_kinds() {
    assert_problems(
        "unknown-tracker-kind.yaml",
        &[(
            2,
            9,
            "tracker.kind",
            "unknown value `trello`; expected one of: `local`, `github`, `gitlab`, `gitea`, `redmine`, `linear`, `github_project`, `jira`",
        )],
    );
}

#[test]
fn per_status_caps_name_claim_statuses() {
    assert_problems(
        "per-status-unknown.yaml",
        &[(
            5,
            5,
            "concurrency.per_status_max_in_flight.reviw",
            "`reviw` is no stage's claim_status; expected one of: todo",
        )],
    );
}

/// Symphony conformance (#39, item 2): a per-status cap of 0 or one that is not a number
/// is refused with its file, line and key (Symphony ignores such values; sortie refuses
/// them, as every other invalid value).
#[test]
fn per_status_cap_map_refuses_a_zero_cap_with_its_line() {
    assert_problems(
        "per-status-zero.yaml",
        &[(
            5,
            11,
            "concurrency.per_status_max_in_flight.todo",
            "expected a whole number >= 1, found 0",
        )],
    );
}

#[test]
fn per_status_cap_map_refuses_a_cap_that_is_not_a_number_with_its_line() {
    assert_problems(
        "per-status-not-a-number.yaml",
        &[(
            5,
            11,
            "concurrency.per_status_max_in_flight.todo",
            "expected a whole number between 1 and 4294967295, found string \"many\"",
        )],
    );
}

#[test]
fn a_key_written_twice_is_refused_at_the_second_one() {
    assert_problems(
        "duplicate-key.yaml",
        &[(5, 1, "agent", "key `agent` is written twice")],
    );
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    assert_problems(
        "syntax-error.yaml",
        &[(2, 6, "", "invalid YAML: did not find expected ',' or '}'")],
    );
}

#[test]
fn display_prints_one_file_line_col_line_per_problem() {
    let err = Config::load(&fixture("success-is-own-status.yaml")).unwrap_err();
    let text = err.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let file = fixture("success-is-own-status.yaml").display().to_string();
    assert!(
        lines[0].starts_with(&format!("{file}:8:21: pipeline_stages[0].success_status: ")),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&format!("{file}:9:21: pipeline_stages[0].failure_status: ")),
        "{text}"
    );
}

/// Regression (#52): a fixing kind names a stage's role and a move names a status; a
/// name of the wrong kind, under `to`, `to_role` or `to_status`, is refused with the name
/// meant.
#[test]
fn reactions_refuse_a_name_of_the_wrong_kind_with_the_name_meant() {
    assert_problems(
        "reactions-wrong-kind.yaml",
        &[
            (
                13,
                20,
                "reactions.ci_failure.to",
                "`todo` is a status, not a stage's role; did you mean `to_role: backend` (the \
                 stage that claims `todo`)?",
            ),
            (
                14,
                21,
                "reactions.review_comments.to_status",
                "review_comments sends the ticket back to the stage that fixes it, named by its \
                 role (`to_role`), not to a status; did you mean `to_role: qa` (the stage that \
                 claims `review`)?",
            ),
            (
                15,
                25,
                "reactions.bot_review.to_role",
                "`bakend` is no stage's role; did you mean `backend`?",
            ),
            (
                16,
                20,
                "reactions.merge_conflict.to",
                "`to_role` and `to` both say where the ticket goes; keep one",
            ),
            (
                17,
                16,
                "reactions.merged.to",
                "`qa` is a stage's role, not a status; did you mean `to_status: review` (the \
                 status stage `qa` claims)?",
            ),
            (
                18,
                21,
                "reactions.closed_unmerged.to_role",
                "this moves the ticket to a status (`to_status`), not to a stage; did you mean \
                 `to_status: todo` (the status stage `backend` claims)?",
            ),
            (
                19,
                16,
                "reactions.escalate_to",
                "`backend` is a stage's role, not a status; did you mean `escalate_to: todo`",
            ),
        ],
    );
}

/// Regression (#52): `to` is kept where the name can only mean one thing; a name that is
/// both a role and a status needs `to_role` or `to_status`.
#[test]
fn reactions_refuse_a_to_that_names_both_a_role_and_a_status() {
    assert_problems(
        "reactions-ambiguous-to.yaml",
        &[
            (
                13,
                20,
                "reactions.ci_failure.to",
                "`review` is both a stage's role and the status stage `backend` claims, so `to` \
                 could mean either: write `to_role: review` for stage `review`, or `to_role: \
                 backend` for the stage that claims `review`",
            ),
            (
                15,
                16,
                "reactions.merged.to",
                "`review` is both a stage's role and a status, so `to` could mean either: write \
                 `to_status: review` for the status",
            ),
        ],
    );
}

/// `reactions:` (issue #32): every stage and status it names is checked, with file,
/// line and field, like every other reference; and GitLab cannot be asked to rebase.
#[test]
fn reactions_name_real_stages_and_unwatched_statuses() {
    assert_problems(
        "reactions-refs.yaml",
        &[
            (12, 11, "reactions.watch[0]", "is where stage `qa` works"),
            (
                13,
                20,
                "reactions.ci_failure.to",
                "`frontend` is no stage's role",
            ),
            (
                14,
                46,
                "reactions.review_comments.max_rounds",
                "expected at least 1",
            ),
            (
                15,
                33,
                "reactions.merge_conflict.quiet_seconds",
                "belongs to `review_comments` only",
            ),
            (16, 16, "reactions.escalate_to", "is watched"),
            (
                17,
                24,
                "reactions.auto_merge.method",
                "GitLab merges with the project's own merge method",
            ),
        ],
    );
}

//! `tracker: {kind: linear, ...}` in the config file: defaults, the filter's `project`
//! (Linear only), and clear errors naming the line and field.

use sortie::config::{LinearTokenType, TrackerConfig};

use crate::common::{parse_tracker as parse, tracker_problems as problems};

#[test]
fn a_linear_tracker_needs_only_the_team_and_takes_linear_defaults() {
    let cfg = parse("tracker: {kind: linear, team: ENG}\n").unwrap();
    assert_eq!(
        cfg.tracker,
        TrackerConfig::Linear {
            team: "ENG".into(),
            token_env: "LINEAR_API_KEY".into(),
            api_url: "https://api.linear.app/graphql".into(),
            token_type: LinearTokenType::ApiKey,
        }
    );
    assert_eq!(cfg.tracker.name(), "linear:ENG");
    assert_eq!(cfg.secret_env_names(), ["LINEAR_API_KEY"]);
    let cfg =
        parse("tracker: {kind: linear, team: ENG, token_type: oauth, token_env: LIN_OAUTH}\n")
            .unwrap();
    assert!(matches!(
        cfg.tracker,
        TrackerConfig::Linear {
            token_type: LinearTokenType::Oauth,
            ..
        }
    ));
}

#[test]
fn the_filter_takes_labels_and_a_project_on_linear_only() {
    let cfg = parse(
        "tracker:\n  kind: linear\n  team: ENG\n  filter: {labels: [agent-ok], project: \"Checkout revamp\"}\n",
    )
    .unwrap();
    assert_eq!(cfg.filter.labels, ["agent-ok"]);
    assert_eq!(cfg.filter.project.as_deref(), Some("Checkout revamp"));

    let found = problems("tracker:\n  kind: local\n  path: board\n  filter: {project: X}\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 4);
    assert_eq!(found[0].1, "tracker.filter.project");
    assert!(found[0].2.contains("Linear"), "{found:?}");

    let found = problems("tracker:\n  kind: linear\n  team: ENG\n  filter: {milestone: X}\n");
    assert!(
        found.iter().any(|(_, _, m)| m.contains("milestone")),
        "unknown filter keys are an error: {found:?}"
    );
}

#[test]
fn bad_linear_values_are_errors_naming_the_field() {
    let found = problems("tracker: {kind: linear, team: ENG, token_type: bearer}\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0, found[0].1.as_str()), (1, "tracker.token_type"));
    assert!(
        found[0].2.contains("`api_key`") && found[0].2.contains("`oauth`"),
        "{found:?}"
    );

    let found = problems("tracker: {kind: linear, team: \"ENG-1\"}\n");
    assert_eq!(found[0].1, "tracker.team", "{found:?}");
    assert!(found[0].2.contains("`ENG` for ENG-123"), "{found:?}");

    let found = problems("tracker: {kind: linear, team: ENG, api_url: \"not a url\"}\n");
    assert_eq!(found[0].1, "tracker.api_url", "{found:?}");

    let found = problems("tracker: {kind: linear}\n");
    assert!(
        found.iter().any(|(_, _, m)| m.contains("team")),
        "{found:?}"
    );
}

//! Issue #37: `budgets:` (per stage, per day, its time zone) and `prices:` load with
//! their defaults, and every mistake in them is refused at its line and field.

use std::path::Path;

use sortie::config::{Config, ConfigError, DayZone, Price, StageBudget};

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse_str_with_env(text, Some(Path::new("/srv/sortie/pipeline.yaml")), &|_| {
        None
    })
}

const HEAD: &str = "tracker: {kind: local, path: board}
agent: {preset: codex, command: [codex], model: gpt-5-codex}
pipeline_stages:
  - {role: qa, claim_status: todo, success_status: done}
";

#[test]
fn budgets_and_prices_load_with_their_defaults() {
    let cfg = parse(&format!(
        "{HEAD}budgets:
  max_cost_usd_per_ticket: 5
  per_stage:
    qa: {{max_cost_usd_per_run: 0.5, max_tokens_per_run: 200000}}
  max_cost_usd_per_day: 40
  timezone: \"+02:00\"
prices:
  gpt-5-codex: {{input: 1.25, cached_input: 0.125, output: 10}}
  other: {{input: 2, output: 8}}
"
    ))
    .unwrap();
    let b = &cfg.budgets;
    assert_eq!(b.max_cost_usd_per_ticket, Some(5.0));
    assert_eq!(b.max_cost_usd_per_day, Some(40.0));
    assert_eq!(
        b.timezone,
        DayZone {
            offset_seconds: 7200
        }
    );
    assert_eq!(
        b.for_role("qa"),
        StageBudget {
            max_cost_usd_per_run: Some(0.5),
            max_tokens_per_run: Some(200_000)
        }
    );
    assert_eq!(b.for_role("dev"), StageBudget::default());
    assert_eq!(
        cfg.prices["other"],
        Price {
            input: 2.0,
            cached_input: 2.0,
            output: 8.0
        },
        "cached_input defaults to input"
    );
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);

    let cfg = parse(HEAD).unwrap();
    assert_eq!(cfg.budgets, Default::default());
    assert_eq!(cfg.budgets.timezone.label(), "UTC");
    assert!(cfg.prices.is_empty());
}

#[test]
fn every_budget_and_price_mistake_is_refused_at_its_line_and_field() {
    let err = parse(&format!(
        "{HEAD}budgets:
  per_stage:
    qa: {{max_tokens_per_run: 0}}
    ops: {{max_cost_usd_per_run: 1}}
  max_cost_usd_per_day: -1
  timezone: Europe/Paris
prices:
  gpt-5-codex: {{input: 1.25, output: -10}}
"
    ))
    .expect_err("refused");
    let got: Vec<(usize, String, String)> = err
        .diagnostics()
        .iter()
        .map(|d| (d.line, d.field.clone(), d.message.clone()))
        .collect();
    let expected = [
        (
            7,
            "budgets.per_stage.qa.max_tokens_per_run",
            "expected at least 1",
        ),
        (
            8,
            "budgets.per_stage.ops",
            "`ops` is no stage's role; expected one of: qa",
        ),
        (
            9,
            "budgets.max_cost_usd_per_day",
            "expected a positive number of dollars",
        ),
        (
            10,
            "budgets.timezone",
            "zone names such as Europe/Paris are not supported",
        ),
        (
            12,
            "prices.gpt-5-codex.output",
            "dollars per million tokens, 0 or more",
        ),
    ];
    assert_eq!(got.len(), expected.len(), "{err}");
    for ((line, field, message), (eline, efield, fragment)) in got.iter().zip(expected) {
        assert_eq!((*line, field.as_str()), (eline, efield), "{err}");
        assert!(message.contains(fragment), "{message}");
    }
}

#[test]
fn unknown_keys_in_budgets_and_prices_are_refused() {
    let err = parse(&format!(
        "{HEAD}budgets:\n  per_stage:\n    qa: {{max_tokens: 5}}\n"
    ))
    .expect_err("refused");
    let shown = err.to_string();
    assert!(shown.contains("max_tokens"), "{shown}");
    assert!(
        shown.contains("max_tokens_per_run"),
        "names the keys it knows: {shown}"
    );
    assert_eq!(err.diagnostics()[0].line, 7, "{shown}");

    let err = parse(&format!(
        "{HEAD}prices:\n  m: {{input: 1, output: 2, cached: 1}}\n"
    ))
    .expect_err("refused");
    let shown = err.to_string();
    assert!(shown.contains("cached"), "{shown}");
    assert_eq!(err.diagnostics()[0].line, 6, "{shown}");

    let err = parse(&format!("{HEAD}price: {{}}\n")).expect_err("refused");
    assert!(
        err.to_string().contains("prices"),
        "a typo names the key: {err}"
    );
}

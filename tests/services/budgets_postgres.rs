//! Issue #37: on a PostgreSQL ledger the day's spending is one number for the fleet:
//! two hosts tick one board, and once their runs together reach
//! `budgets.max_cost_usd_per_day`, neither starts a run until the next day.
//!
//! Needs `SORTIE_TEST_POSTGRES_URL` (scripts/services/postgres.sh).

use std::process::Command;

use crate::common::{repo, Sandbox};
use crate::ledger_postgres::schema_url;

struct Fleet {
    sandbox: Sandbox,
    url: String,
}

impl Fleet {
    fn new() -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox { dir };
        sandbox.ok(&["board", "init", "board"]);
        for host in 1..=2 {
            let config = format!(
                "tracker: {{kind: local, path: board}}
state_root: state-{host}
roles_dir: {roles}
agent: {{preset: claude-code, command: [\"{agent}\"]}}
budgets: {{max_cost_usd_per_day: 0.02}}
ledger: {{kind: postgres, url_env: SORTIE_LEDGER_URL}}
pipeline_stages:
  - {{role: architect, claim_status: ready, success_status: done}}
",
                roles = repo().join("roles").display(),
                agent = repo().join("tests/fixtures/agents/fake-claude").display(),
            );
            std::fs::write(sandbox.path().join(format!("host-{host}.yaml")), config).unwrap();
        }
        Fleet {
            sandbox,
            url: schema_url("budgets"),
        }
    }

    /// One `pipeline tick --json` of `host` with the clock moved `offset` seconds.
    fn tick(&self, host: usize, offset: i64) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_sortie"))
            .args([
                "pipeline",
                "tick",
                "--config",
                &format!("host-{host}.yaml"),
                "--json",
            ])
            .current_dir(self.sandbox.path())
            .env("SORTIE_HOST_ID", format!("host-{host}"))
            .env("SORTIE_LEDGER_URL", &self.url)
            .env("SORTIE_CLOCK_OFFSET_SECONDS", offset.to_string())
            .env_remove("SORTIE_LOG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

#[test]
fn the_day_limit_is_one_number_for_the_fleet() {
    let fleet = Fleet::new();
    let sb = &fleet.sandbox;
    let ids: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|t| sb.add(t, "ready", &[]))
        .collect();
    // 01:00 UTC tomorrow, whenever the test runs: far from the day's ends.
    let now = chrono::Utc::now();
    let tomorrow = (now + chrono::Duration::days(1))
        .date_naive()
        .and_hms_opt(1, 0, 0)
        .unwrap()
        .and_utc();
    let morning = (tomorrow - now).num_seconds();

    // Each run costs $0.01453 (tests/fixtures/agents/claude-success.jsonl): host 1's
    // first run leaves the day under $0.02, host 2's second takes it over.
    let first = fleet.tick(1, morning);
    assert_eq!(first["runs"][0]["ticket"], ids[0].as_str(), "{first:#}");
    let second = fleet.tick(2, morning);
    assert_eq!(second["runs"][0]["ticket"], ids[1].as_str(), "{second:#}");
    // Host 1 knows what host 2 spent: it holds the third ticket.
    let held = fleet.tick(1, morning);
    assert_eq!(held["runs"].as_array().map(Vec::len), Some(0), "{held:#}");
    let skip = held["skips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["ticket"] == ids[2].as_str())
        .unwrap_or_else(|| panic!("{held:#}"));
    assert_eq!(skip["reason"], "day_budget_spent", "{skip}");
    let spent = skip["spent_usd"].as_f64().unwrap();
    assert!(
        (spent - 2.0 * 0.01453).abs() < 1e-9,
        "both hosts' runs: {skip}"
    );

    // The next day, either host runs it.
    let next_day = fleet.tick(2, morning + 86_400);
    assert_eq!(
        next_day["runs"][0]["ticket"],
        ids[2].as_str(),
        "{next_day:#}"
    );
}

/// Issue #37: a schema from version 5 (before run history kept the agent and model) is
/// upgraded, and its runs read with no agent or model (tests/ledger_suite).
#[test]
fn runs_from_before_the_agent_was_on_run_history_read_as_unknown() {
    use sortie::ledger::PostgresLedger;
    let url = schema_url("run_agents");
    let mut client = crate::ledger_postgres::old_schema(&url, 5);
    client
        .batch_execute(crate::ledger_suite::records::ROWS_WITHOUT_RUN_AGENTS)
        .unwrap();
    let ledger = PostgresLedger::open(&url).unwrap();
    crate::ledger_suite::records::rows_without_run_agents_read_as_unknown(&ledger);
}

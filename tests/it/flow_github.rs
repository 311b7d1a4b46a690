//! Issue #18 on GitHub: `tracker.filter` labels are applied server-side, joined to the
//! status label in one `labels=` query, against the in-memory GitHub model.

use crate::github_model;

use std::time::Duration;

use github_model::{GithubModel, REPO, TOKEN};
use sortie::config::TicketFilter;
use sortie::tracker::github::{GithubOptions, GithubSettings, GithubTracker, LabelScheme};
use sortie::tracker::Tracker;

fn tracker(model: &GithubModel) -> GithubTracker {
    let settings = GithubSettings {
        repo: REPO.to_string(),
        api_url: model.api_url(),
        labels: LabelScheme {
            status_prefix: "status:".into(),
            priority_prefix: "priority:".into(),
        },
    };
    let options = GithubOptions {
        retry_backoff: Duration::ZERO,
        ..GithubOptions::default()
    };
    GithubTracker::new(settings, TOKEN.into(), options).unwrap()
}

#[tokio::test]
async fn filter_labels_join_the_status_label_in_one_labels_query() {
    let model = GithubModel::start().await;
    let opted = model.add_issue("opted in", &["status:ready", "Agent-OK"]);
    model.add_issue("not opted in", &["status:ready"]);
    let gh = tracker(&model);
    model.clear_log();
    let filter = TicketFilter {
        labels: vec!["agent-ok".into()],
        ..TicketFilter::default()
    };
    let listing = gh
        .list_filtered(&["ready".to_string()], &filter)
        .await
        .unwrap();
    let ids: Vec<&str> = listing.tickets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, [opted.to_string()]);
    assert_eq!(
        model.log(),
        ["GET /repos/acme/widgets/issues?labels=status%3Aready%2Cagent-ok&state=open&per_page=100 -> 200"]
    );
}

mod blockers {
    use super::*;

    use std::sync::Arc;

    use sortie::config::Config;
    use sortie::ledger::SqliteLedger;
    use sortie::pipeline::{Pipeline, TickOptions};

    fn config(dir: &std::path::Path, api_url: &str, max_reads: u32) -> Config {
        config_with(dir, api_url, max_reads, "")
    }

    /// The pipeline, with `extra` top-level YAML (caps, workspace settings).
    fn config_with(dir: &std::path::Path, api_url: &str, max_reads: u32, extra: &str) -> Config {
        let text = format!(
            r#"
tracker:
  kind: github
  repo: acme/widgets
  api_url: "{api_url}"
  token_env: SORTIE_TEST_UNUSED_TOKEN
  blockers: {{enabled: true, max_reads_per_tick: {max_reads}}}
state_root: state
roles_dir: {roles}
terminal_states: [done]
agent: {{command: ["sh", "-c", "echo done"], timeout_seconds: 60}}
pipeline_stages:
  - {{role: agent, claim_status: todo, success_status: review}}
{extra}
"#,
            roles = common_roles(),
        );
        Config::parse_str(&text, Some(&dir.join("pipeline.yaml"))).expect("valid config")
    }

    fn common_roles() -> String {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("roles")
            .display()
            .to_string()
    }

    async fn tick(model: &GithubModel, dir: &std::path::Path, max_reads: u32) -> serde_json::Value {
        let cfg = config(dir, &model.api_url(), max_reads);
        tick_with(cfg, None).await
    }

    /// A cron tick: a new process, with the ETag cache the state root keeps.
    async fn cron_tick(cfg: Config) -> serde_json::Value {
        let file = cfg.state_root.join(sortie::tracker::github::ETAG_FILE);
        tick_with(cfg, Some(file)).await
    }

    async fn tick_with(cfg: Config, etag_file: Option<std::path::PathBuf>) -> serde_json::Value {
        let gh = Arc::new(
            GithubTracker::from_config(
                &cfg,
                TOKEN.into(),
                GithubOptions {
                    retry_backoff: Duration::ZERO,
                    etag_file,
                    ..GithubOptions::default()
                },
            )
            .unwrap(),
        );
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).unwrap());
        let p = Pipeline::new(cfg, gh, ledger).await.expect("pipeline");
        serde_json::to_value(p.tick(TickOptions::default()).await.expect("tick")).unwrap()
    }

    fn blocker_reads(model: &GithubModel) -> usize {
        model
            .log()
            .iter()
            .filter(|l| l.contains("/dependencies/blocked_by"))
            .count()
    }

    #[tokio::test]
    async fn a_ticket_blocked_by_an_open_issue_waits_then_runs_once_it_closes() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let blocker = model.add_issue("schema first", &["status:backlog"]);
        let blocked = model.add_issue("then the API", &["status:todo"]);
        model.block(blocked, blocker);

        let report = tick(&model, dir.path(), 20).await;
        assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
        assert_eq!(report["skips"][0]["reason"], "blocked", "{report:#}");
        assert_eq!(report["skips"][0]["by"][0], format!("#{blocker} (backlog)"));

        model.edit(blocker, |i| i.open = false);
        let report = tick(&model, dir.path(), 20).await;
        assert_eq!(
            report["runs"][0]["ticket"],
            blocked.to_string(),
            "{report:#}"
        );
        assert!(model
            .issue(blocked)
            .labels
            .contains(&"status:review".to_string()));
    }

    #[tokio::test]
    async fn a_blocker_read_failure_holds_the_ticket() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        // An open blocker: the listing's summary says a read is needed.
        let blocker = model.add_issue("closes some day", &["status:backlog"]);
        let id = model.add_issue("free, but unreadable", &["status:todo"]);
        model.block(id, blocker);
        model.fail("GET", "/dependencies/blocked_by", 500, None, 100);
        for _ in 0..2 {
            let report = tick(&model, dir.path(), 20).await;
            assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
            assert_eq!(report["skips"][0]["ticket"], id.to_string());
            assert_eq!(
                report["skips"][0]["reason"], "blockers_unknown",
                "{report:#}"
            );
        }
        assert!(
            model.issue(id).comments.is_empty(),
            "never dispatched on a guess"
        );
    }

    /// Regression: a failed read was not recorded, so a ticket whose blocker read kept
    /// failing stayed "never read" and took the tick's reads first, every tick.
    #[tokio::test]
    async fn a_blocker_read_that_keeps_failing_takes_its_turn_and_no_more() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let blocker = model.add_issue("never closes", &["status:backlog"]);
        let failing = model.add_issue("links unreadable", &["status:todo"]);
        let readable = model.add_issue("links readable", &["status:todo"]);
        model.block(readable, blocker);
        model.block(failing, blocker);
        let failing_path = format!("/issues/{failing}/dependencies/blocked_by");
        model.fail("GET", &failing_path, 500, None, 10_000);
        let mut turns = Vec::new();
        for _ in 0..4 {
            let report = tick(&model, dir.path(), 1).await;
            let reason = |id: u64| -> String {
                let skip = report["skips"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["ticket"].as_str() == Some(id.to_string().as_str()))
                    .unwrap_or_else(|| panic!("#{id} not skipped: {report:#}"));
                let message = skip["message"].as_str().unwrap_or_default();
                match skip["reason"].as_str().unwrap() {
                    "blockers_unknown" if message.contains("used up") => "waits".into(),
                    "blockers_unknown" => "read failed".into(),
                    other => other.to_string(),
                }
            };
            turns.push((reason(failing), reason(readable)));
        }
        let readable_reads = turns.iter().filter(|(_, r)| r == "blocked").count();
        let failing_reads = turns.iter().filter(|(f, _)| f == "read failed").count();
        assert_eq!(
            (failing_reads, readable_reads),
            (2, 2),
            "one read per tick, taken in turns: {turns:?}"
        );
    }

    #[tokio::test]
    async fn reads_are_bounded_per_tick_and_rotate_across_candidates() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let blocker = model.add_issue("never closes", &["status:backlog"]);
        let ids: Vec<u64> = (0..3)
            .map(|i| model.add_issue(&format!("blocked {i}"), &["status:todo"]))
            .collect();
        for id in &ids {
            model.block(*id, blocker);
        }
        let mut read_order = Vec::new();
        for _ in 0..3 {
            model.clear_log();
            let report = tick(&model, dir.path(), 1).await;
            assert_eq!(blocker_reads(&model), 1, "one read per tick");
            let read: Vec<String> = report["skips"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["reason"] == "blocked")
                .map(|s| s["ticket"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(read.len(), 1, "{report:#}");
            read_order.push(read[0].clone());
            let deferred = report["skips"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["reason"] == "blockers_unknown")
                .count();
            assert_eq!(deferred, 2, "the others wait for a later tick: {report:#}");
        }
        read_order.sort();
        let mut expected: Vec<String> = ids.iter().map(u64::to_string).collect();
        expected.sort();
        assert_eq!(
            read_order, expected,
            "each candidate read once in three ticks"
        );
    }

    fn runs(report: &serde_json::Value) -> usize {
        report["runs"].as_array().unwrap().len()
    }

    /// Regression (#29, 2): every candidate cost one blocker read, and
    /// `max_reads_per_tick` (20) capped a tick at 20 dispatches of 150. The listing's
    /// `issue_dependencies_summary` says which issues have no open blocker: those need
    /// no read, and the board settled, a cron tick still costs nothing.
    #[tokio::test]
    async fn a_tick_dispatches_all_150_issues_whose_summary_has_no_open_blocker() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let closed = model.add_issue("done long ago", &["status:done"]);
        model.edit(closed, |i| i.open = false);
        let ids: Vec<u64> = (0..150)
            .map(|i| model.add_issue(&format!("ticket {i}"), &["status:todo"]))
            .collect();
        // Blocked by a closed issue only: its summary counts no open blocker either.
        model.block(ids[0], closed);
        let caps = "concurrency: {max_in_flight: 150, per_role_max_in_flight: 150}";
        let cfg = || config_with(dir.path(), &model.api_url(), 20, caps);

        let report = cron_tick(cfg()).await;
        assert_eq!(runs(&report), 150, "{:#}", report["skips"]);
        assert_eq!(blocker_reads(&model), 0, "no blocker read needed");
        for id in [ids[0], ids[149]] {
            assert!(model
                .issue(id)
                .labels
                .contains(&"status:review".to_string()));
        }

        cron_tick(cfg()).await;
        let before = model.units_used();
        model.clear_log();
        let report = cron_tick(cfg()).await;
        assert_eq!(runs(&report), 0);
        assert_eq!(
            model.units_used(),
            before,
            "an idle tick costs no rate limit: {:#?}",
            model.log()
        );
    }

    /// Lines a tracing subscriber writes, for the test that installed it.
    #[derive(Clone, Default)]
    struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    /// Regression (#29, 2): a server without issue dependencies (GitHub Enterprise
    /// Server before they shipped) answers 404 to their endpoint and sends no summary;
    /// every ticket was held with "blockers could not be read", for ever. Now the 404
    /// means "this server reads no blockers": warned once, dispatched as if blockers
    /// were off, and the next listing needs no read at all.
    #[tokio::test]
    async fn a_server_without_issue_dependencies_dispatches_as_if_blockers_were_off() {
        let model = GithubModel::start().await;
        model.without_dependencies();
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<u64> = (0..3)
            .map(|i| model.add_issue(&format!("ticket {i}"), &["status:todo"]))
            .collect();
        let caps = "concurrency: {max_in_flight: 3, per_role_max_in_flight: 3}";
        let cfg = config_with(dir.path(), &model.api_url(), 20, caps);
        let gh = Arc::new(
            GithubTracker::from_config(
                &cfg,
                TOKEN.into(),
                GithubOptions {
                    retry_backoff: Duration::ZERO,
                    ..GithubOptions::default()
                },
            )
            .unwrap(),
        );
        let ledger = Arc::new(SqliteLedger::open(&cfg.ledger_path()).unwrap());
        let p = Pipeline::new(cfg, gh, ledger).await.expect("pipeline");

        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let report = serde_json::to_value(p.tick(TickOptions::default()).await.unwrap()).unwrap();
        assert_eq!(runs(&report), 3, "{report:#}");
        assert_eq!(
            blocker_reads(&model),
            1,
            "one 404 tells: {:#?}",
            model.log()
        );

        let later = model.add_issue("later", &["status:todo"]);
        model.clear_log();
        let report = serde_json::to_value(p.tick(TickOptions::default()).await.unwrap()).unwrap();
        assert_eq!(report["runs"][0]["ticket"], later.to_string(), "{report:#}");
        assert_eq!(blocker_reads(&model), 0, "{:#?}", model.log());
        for id in ids {
            assert!(model
                .issue(id)
                .labels
                .contains(&"status:review".to_string()));
        }
        let text = logs.text();
        assert_eq!(
            text.matches("this GitHub server has no issue dependencies")
                .count(),
            1,
            "warned once: {text}"
        );
    }

    /// On a server with issue dependencies, a 404 says the issue is gone, not that the
    /// server has none: the candidate is held, as after a 5xx (#29, 2).
    #[tokio::test]
    async fn a_server_error_or_a_404_where_summaries_exist_still_holds_the_candidate() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        let blocker = model.add_issue("open blocker", &["status:backlog"]);
        let id = model.add_issue("needs a read", &["status:todo"]);
        model.block(id, blocker);
        for status in [502, 404] {
            model.clear_faults();
            model.fail("GET", "/dependencies/blocked_by", status, None, 100);
            let report = tick(&model, dir.path(), 20).await;
            assert!(report["runs"].as_array().unwrap().is_empty(), "{report:#}");
            assert_eq!(report["skips"][0]["ticket"], id.to_string());
            assert_eq!(
                report["skips"][0]["reason"], "blockers_unknown",
                "HTTP {status}: {report:#}"
            );
        }
        model.clear_faults();
        model.edit(blocker, |i| i.open = false);
        let report = tick(&model, dir.path(), 20).await;
        assert_eq!(report["runs"][0]["ticket"], id.to_string(), "{report:#}");
    }

    /// Regression (#29, 5): the workspace prune re-read each live workspace's ticket
    /// with a plain `GET /issues/{n}` in every cron process, so with
    /// `prune_every_ticks: 1` an idle tick cost one unit per workspace. The reads are
    /// conditional across processes now: an unchanged ticket answers 304, for free.
    #[tokio::test]
    async fn an_idle_cron_tick_with_a_prune_every_tick_costs_nothing() {
        let model = GithubModel::start().await;
        let dir = tempfile::tempdir().unwrap();
        for i in 0..4 {
            model.add_issue(&format!("ticket {i}"), &["status:todo"]);
        }
        let extra = "concurrency: {max_in_flight: 4, per_role_max_in_flight: 4}\nworkspace: {prune_every_ticks: 1}";
        let cfg = || config_with(dir.path(), &model.api_url(), 20, extra);
        let report = cron_tick(cfg()).await;
        assert_eq!(runs(&report), 4, "{report:#}");
        // The tickets wait in review (not terminal): their workspaces live on.
        let workspaces = std::fs::read_dir(dir.path().join("state/workspaces"))
            .unwrap()
            .count();
        assert_eq!(workspaces, 4);

        cron_tick(cfg()).await;
        model.clear_log();
        let before = model.units_used();
        cron_tick(cfg()).await;
        let reads: Vec<_> = model
            .requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path.starts_with("/repos/acme/widgets/issues/"))
            .collect();
        assert_eq!(
            reads.len(),
            4,
            "the prune read every ticket: {:#?}",
            model.log()
        );
        assert!(
            reads.iter().all(|r| r.if_none_match && r.status == 304),
            "{:#?}",
            model.log()
        );
        assert_eq!(model.units_used(), before, "{:#?}", model.log());
    }
}

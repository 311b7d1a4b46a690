//! One tick, as the list of its steps in order; each step is a call into the module
//! that owns it:
//!
//! | step | module | writes |
//! |---|---|---|
//! | replay | `writeback::replay_outbox` | tracker, outbox (not in a dry run) |
//! | react | `react::react` (`decide::reaction`, pure) | reactions + outbox, tracker, merges (not in a dry run) |
//! | announce | `presence::announce` | this host's presence (not in a dry run) |
//! | observe | `observe::observe` | none |
//! | reconcile | `reconcile::reap`, `reconcile::reconcile` -> `reconcile::apply` | cancel requests, retries, holds, workspaces (not in a dry run) |
//! | read for the plan | `observe::read_for_plan` -> `observe::record_blocker_checks` | when blockers were read (not in a dry run) |
//! | plan | `decide::plan` (`Planner::finish`) | none (pure) |
//! | apply | `apply::claim_and_start` -> `run` -> `writeback` | claims, agents, outbox, tracker |
//! | after | `prune`, hook deliveries | workspaces |
//!
//! Steps that decide return what to do, and the tick applies it: a dry run is the same
//! steps with nothing applied (and the plan's dispatches reported as `would_run`).

use super::decide::eligibility::natural_cmp;
use super::report::{self, TickReport};
use super::{apply, observe, presence, prune, reconcile, writeback};
use super::{Pipeline, PipelineError, TickOptions};

impl Pipeline {
    /// replay -> react -> observe -> reconcile -> read for the plan -> plan -> apply. With
    /// `detach`, the runs go on after the tick returns (the daemon's tick).
    pub(super) async fn sweep(
        &self,
        opts: TickOptions,
        detach: bool,
    ) -> Result<TickReport, PipelineError> {
        let ctx = &self.ctx;
        let dry_run = opts.dry_run;
        let mut report = TickReport {
            dry_run,
            tracker: ctx.tracker_name().to_string(),
            started_at: ctx.clock.now(),
            tickets_listed: 0,
            warnings: Vec::new(),
            replays: Vec::new(),
            cancels: Vec::new(),
            runs: Vec::new(),
            skips: Vec::new(),
            unclaimed_statuses: Default::default(),
            cap_waits: Vec::new(),
            reactions: Vec::new(),
            unparked: Vec::new(),
        };

        // Replay: finish what earlier runs stored but could not write, before anything new.
        if !dry_run {
            report.replays = writeback::replay_outbox(ctx).await?;
            ctx.events.retry_failed();
            prune::remove_waiting(ctx).await;
        }

        // React: watched tickets' pull requests (CI, reviews, conflicts, merges), before
        // the board is read, so a ticket sent back is dispatched by this same tick.
        report.reactions = super::react::react(ctx, dry_run).await?;

        // Unpark: tickets waiting in `questions.waiting_status` whose question is
        // answered go back to their stage, so this same tick dispatches them.
        let unparked = super::unpark::unpark(ctx, dry_run).await?;
        report.unparked = unparked.moved;

        // Announce: this host is here, so the hosts present share the fleet's caps.
        if !dry_run {
            presence::announce(ctx)?;
        }

        // Observe: the board once, the ledger once.
        let mut obs = observe::observe(ctx).await?;
        report.tickets_listed = obs.tickets.len();
        report.warnings = obs.warnings.clone();
        report.unclaimed_statuses = obs.unclaimed_statuses.clone();

        // Reconcile: reap dead holders' claims, then decide and apply what left its stage.
        if !dry_run {
            reconcile::reap(ctx, &obs.expired);
        }
        let reconciled = reconcile::reconcile(ctx, &obs).await;
        // A hold released now does not keep its ticket out of this tick's plan.
        obs.ledger.holds.retain(|h| !reconciled.releases(&h.key));
        report.cancels = if !dry_run {
            reconcile::apply(ctx, reconciled).await?
        } else {
            reconciled.cancels.into_iter().map(|c| c.line).collect()
        };

        // Read for the plan: the histories and blockers it asks for.
        let (planner, reads) = observe::read_for_plan(ctx, &obs).await;
        if !dry_run {
            observe::record_blocker_checks(ctx, &reads);
        }

        // Plan: pure.
        let mut plan = planner.finish(&reads.facts(ctx, obs.now));
        // The day's spending at `budgets.max_cost_usd_per_day` holds every dispatch.
        if !plan.dispatches.is_empty() {
            if let Some(reason) = super::run::day_hold(ctx, obs.now) {
                super::decide::budget::hold_dispatches(&mut plan, &reason);
            }
        }
        report.skips = plan
            .skips
            .iter()
            .map(|s| apply::skip_line(&ctx.config, s.ticket, s.stage, s.reason.clone()))
            .chain(unparked.waiting)
            .collect();
        if dry_run {
            report.runs = apply::would_start(&ctx.config, &plan.dispatches);
            report.cap_waits = report::cap_waits(&ctx.config, &report.skips);
            return Ok(report);
        }

        // Apply: claim, run, write back.
        let started = apply::claim_and_start(
            ctx,
            &self.supervisor,
            &plan.dispatches,
            &reads,
            obs.now,
            detach,
        )
        .await?;
        report.skips.extend(started.skips);
        let mut runs = started.runs;
        while let Some(done) = runs.join_next().await {
            match done {
                Ok(line) => report.runs.push(line),
                Err(err) => tracing::error!(%err, "a run task panicked"),
            }
        }

        // After: workspaces of finished tickets, hook deliveries, the report in order.
        report.cap_waits = report::cap_waits(&ctx.config, &report.skips);
        prune::remove_waiting(ctx).await;
        self.maybe_prune().await;
        ctx.events.drain().await;
        report
            .runs
            .sort_by(|a, b| natural_cmp(&a.ticket, &b.ticket).then(a.role.cmp(&b.role)));
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::config::Config;
    use crate::ledger::SqliteLedger;
    use crate::pipeline::decide;
    use crate::pipeline::decide::eligibility::SkipReason;
    use crate::pipeline::{Pipeline, TickOptions};
    use crate::tracker::memory::MemoryTracker;

    /// Issue #29: on a board where 3,000 candidates of one stage (one slot) wait
    /// without the prior role's block, a dry-run tick took 2.5 s on 10,000 tickets,
    /// because every round of history reads planned the whole board again (3,000
    /// rounds of 3,000 verdicts, and a sort each). The tick's planning work must grow
    /// with the board, not with its square.
    #[tokio::test(flavor = "current_thread")]
    async fn a_tick_whose_candidates_all_wait_for_the_prior_role_plans_in_linear_work() {
        let state = tempfile::tempdir().unwrap();
        let config = Config::parse_str(
            &format!(
                "tracker: {{kind: local, path: unused}}\nstate_root: {}\nroles_dir: {}/roles\n\
                 agent: {{command: [\"true\"]}}\n\
                 pipeline_stages:\n\
                 - {{role: architect, claim_status: ready-for-design, success_status: design-approved}}\n\
                 - {{role: backend, claim_status: design-approved, success_status: code-review, requires_prior_role: architect}}\n\
                 - {{role: qa, claim_status: code-review, success_status: done, requires_prior_role: backend}}\n",
                state.path().display(),
                env!("CARGO_MANIFEST_DIR"),
            ),
            None,
        )
        .unwrap();
        let tracker = Arc::new(MemoryTracker::new());
        let waiting = 1_500;
        for i in 0..waiting * 3 {
            let status = ["done", "backlog", "design-approved"][i % 3];
            tracker.insert(MemoryTracker::ticket(&i.to_string(), "t", status));
        }
        let ledger = Arc::new(SqliteLedger::open(&config.ledger_path()).unwrap());
        let pipeline = Pipeline::builder(config, tracker, ledger)
            .require_agents(false)
            .build()
            .await
            .unwrap();
        decide::plan::JUDGED.with(|n| n.set(0));
        let report = pipeline.tick(TickOptions { dry_run: true }).await.unwrap();
        let judged = decide::plan::JUDGED.with(|n| n.get());
        assert!(report.runs.is_empty());
        let prior_missing = report
            .skips
            .iter()
            .filter(|s| matches!(s.reason, SkipReason::PriorRoleMissing { .. }))
            .count();
        assert_eq!(prior_missing, waiting, "every waiting ticket was checked");
        // Each candidate is judged a few times (once to find it needs its history,
        // once more when it has it, once for the final plan), never once per round.
        assert!(
            judged <= 4 * waiting as u64,
            "{judged} verdicts for {waiting} candidates: planning is not linear"
        );
    }
}

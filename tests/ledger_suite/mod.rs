//! The ledger test suite, one set of tests for every backend: each test takes a
//! [`Backend`] that hands out fresh, empty ledgers. `tests/it/ledger_sqlite.rs` runs it
//! against SQLite and `tests/services/ledger_postgres.rs` against a real PostgreSQL (the
//! `ledger_suite!` macro writes one `#[test]` per suite function).

pub mod claims;
pub mod fleet;
pub mod hooks;
pub mod reactions;
pub mod records;

use std::sync::Arc;

use sortie::ledger::Ledger;

/// One ledger's storage, opened as often as a test likes (each open sees the same rows).
pub trait Store {
    /// Open (connect to) the ledger.
    fn open(&self) -> Arc<dyn Ledger>;
}

/// A ledger backend under test.
pub trait Backend {
    /// New, empty storage of this backend.
    fn store(&self) -> Box<dyn Store>;
    /// A new, empty ledger.
    fn fresh(&self) -> Arc<dyn Ledger> {
        self.store().open()
    }
}

/// One `#[test]` per suite function, each run against `$backend` (an expression
/// implementing [`Backend`]).
macro_rules! ledger_suite {
    ($backend:expr) => {
        ledger_suite!(@each $backend;
            claims::first_caller_wins_and_the_loser_learns_the_holder,
            claims::the_holder_claiming_again_renews_instead_of_being_refused,
            claims::an_expired_lease_is_taken_over_with_a_higher_attempt,
            claims::a_live_lease_one_millisecond_before_expiry_is_still_held,
            claims::the_role_ceiling_counts_only_live_claims_of_that_role,
            claims::the_global_ceiling_counts_live_claims_of_this_tracker_across_roles,
            claims::the_status_ceiling_applies_only_when_set_and_only_to_that_stage,
            claims::a_zero_cap_refuses_every_claim,
            claims::only_the_owner_releases_but_force_release_removes_any_claim,
            claims::renew_extends_only_for_the_holder_and_reports_a_cancel_request,
            claims::a_late_renewal_succeeds_while_nobody_has_taken_the_expired_claim,
            claims::agent_pid_is_recorded_only_by_the_holder,
            claims::claims_lists_live_and_expired_rows_ordered_by_key,
            claims::attempts_grow_across_release_expiry_takeover_and_floor,
            claims::attempts_survive_reopening_the_ledger,
            fleet::a_host_holding_its_share_is_refused_while_other_hosts_claim,
            fleet::announced_hosts_are_listed_until_they_expire,
            fleet::three_hosts_share_the_runs_of_a_fleet_cap,
            records::outbox_put_is_idempotent_on_the_key,
            records::outbox_pending_and_update_round_trip,
            records::outbox_entries_survive_reopening_the_ledger,
            records::retries_are_queued_replaced_listed_by_due_time_and_cleared,
            records::holds_are_recorded_replaced_and_cleared,
            records::runs_are_upserted_by_run_id_and_listed_newest_first,
            records::agent_rate_limits_on_a_run_record_are_kept_once_recorded,
            records::usage_since_lists_the_usage_of_the_runs_started_in_the_window,
            hooks::an_update_keeps_the_first_attempt_time_and_replaces_the_rest,
            hooks::failures_list_newest_first_and_due_retries_soonest_first,
            reactions::a_reaction_is_stored_once_with_its_outbox_entry,
            reactions::hosts_racing_to_store_one_round_store_it_once,
            reactions::merges_since_lists_the_merged_reactions_of_the_window,
        );
    };
    (@each $backend:expr; $($module:ident :: $name:ident,)*) => {
        $(
            #[test]
            fn $name() {
                crate::ledger_suite::$module::$name(&$backend)
            }
        )*
    };
}

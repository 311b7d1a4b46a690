//! Announce: this host's presence in the ledger, written by every tick that may claim,
//! so the hosts ticking one tracker share its caps (`decide::caps`, issue #52).

use super::context::Context;
use super::PipelineError;

/// Record that this host ticks the tracker and runs each stage of the config, for one
/// claim TTL from now: a host that stops ticking stops counting when its claims would
/// have expired too.
pub(crate) fn announce(ctx: &Context) -> Result<(), PipelineError> {
    let now = ctx.clock.now();
    let ttl = chrono::Duration::from_std(ctx.config.claim_ttl).unwrap_or(chrono::Duration::MAX);
    let until = now.checked_add_signed(ttl).unwrap_or(now);
    let stages: Vec<(String, String)> = ctx
        .config
        .stages
        .iter()
        .map(|stage| (stage.role.clone(), stage.claim_status.clone()))
        .collect();
    ctx.ledger.announce(
        ctx.tracker_name(),
        ctx.claimer_id.host(),
        &stages,
        until,
        now,
    )?;
    Ok(())
}

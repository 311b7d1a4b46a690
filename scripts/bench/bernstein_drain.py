"""Bernstein's tracker pipeline (bernstein==3.23.0, `TrackerPipeline`) on the work of
`scripts/bench-daemon costs`: N tickets through architect -> backend -> qa on an in-memory
tracker, each run one agent process (`sh -c 'sleep 0'`), claims in Bernstein's own SQLite
ledger. Prints the wall time of the drain in seconds.

    python bernstein_drain.py N STATE_DIR
"""

import subprocess
import sys
import time
from pathlib import Path

from bernstein.core.orchestration.tracker_pipeline import (
    ClaimLedger,
    DispatchOutcome,
    PipelineConfig,
    PipelineStage,
    TrackerPipeline,
)
from bernstein.core.trackers.contract import Comment, Ticket


class MemoryTracker:
    """Tickets and comments in dicts: the tracker costs nothing."""

    def __init__(self, n):
        self.status = {str(i): "ready-for-design" for i in range(1, n + 1)}
        self.comments = {str(i): [] for i in range(1, n + 1)}

    def pull_open_tickets(self, filter=None):
        want = (filter or {}).get("status")
        for id, status in list(self.status.items()):
            if want is None or status == want:
                yield Ticket(id=id, external_url="", title=f"t{id}", body="", status=status)

    def list_comments(self, ticket_id):
        return list(self.comments[ticket_id])

    def add_comment(self, ticket_id, body, idempotency_key=None):
        self.comments[ticket_id].append(Comment(id=str(len(self.comments[ticket_id])), body=body))

    def transition(self, ticket_id, status_id, idempotency_key=None, etag=None):
        self.status[ticket_id] = status_id


class ProcessDispatcher:
    """Each run is one agent process, as in sortie's drain."""

    def dispatch(self, *, tracker, ticket, role, stage_attempt, idempotency_key):
        done = subprocess.run(["sh", "-c", "sleep 0"], stdin=subprocess.DEVNULL)
        return DispatchOutcome(success=done.returncode == 0, summary="done")


def main():
    n, state = int(sys.argv[1]), Path(sys.argv[2])
    stage = lambda role, claim, success, prior: PipelineStage(
        role=role, claim_status=claim, success_status=success, failure_status="failed",
        requires_prior_role=prior)
    config = PipelineConfig(
        pipeline_stages=(
            stage("architect", "ready-for-design", "design-approved", None),
            stage("backend", "design-approved", "code-review", "architect"),
            stage("qa", "code-review", "done", "backend"),
        ),
        per_role_max_in_flight=4,
    )
    tracker = MemoryTracker(n)
    t0 = time.time()
    pipeline = TrackerPipeline(config=config, trackers={"memory": tracker},
                               ledger=ClaimLedger(state / "ledger.db"), dispatcher=ProcessDispatcher())
    for _ in range(10 * n):
        if all(s == "done" for s in tracker.status.values()):
            break
        pipeline.tick()
    else:
        raise SystemExit(f"Bernstein did not drain: {tracker.status}")
    print(f"{time.time() - t0:.3f}")


main()

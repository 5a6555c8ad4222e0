"""``twopc recover`` as a function: plan with :func:`~twopc.sink_status`, refuse what the
commit log cannot prove, then let the coordinator's recovery act and show what is left."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twopc._contract.retry import wait_until
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.liveness import DEFAULT_STALE_AFTER
from twopc._coordination.steps import QUIET, Steps
from twopc._operations.status import ItemKind, SinkStatus, sink_status
from twopc.protocol import Sink

__all__ = ["RecoveryReport", "recover_sink"]

_log = logging.getLogger("twopc.recover")


@dataclass(frozen=True)
class RecoveryReport:
    """What ``twopc recover`` planned, whether it acted, and what is left afterwards."""

    plan: SinkStatus
    performed: bool
    refused: str | None = None
    committed: int = 0
    aborted: int = 0
    swept: int = 0
    after: SinkStatus | None = None
    error: str | None = None
    forced: tuple[str, ...] = ()
    """The warnings ``force`` acted past (the plan's :attr:`SinkStatus.warnings`), and what
    they cost: prepared work aborted although the log could not prove its batch undecided."""

    @property
    def ok(self) -> bool:
        """Nothing refused, nothing failed, nothing left in doubt (for a dry run: nothing
        in doubt to begin with)."""
        if self.refused or self.error:
            return False
        remaining = self.after.items if self.after is not None else self.plan.items
        return not remaining

    def to_dict(self) -> dict[str, Any]:
        return {
            "performed": self.performed,
            "refused": self.refused,
            "committed": self.committed,
            "aborted": self.aborted,
            "swept": self.swept,
            "error": self.error,
            "forced": list(self.forced),
            "plan": self.plan.to_dict(),
            "after": None if self.after is None else self.after.to_dict(),
        }


def recover_sink(
    sink: Sink[Any],
    sink_id: str,
    commit_log: CommitLog,
    *,
    dry_run: bool = False,
    force: bool = False,
    stale_after: float = DEFAULT_STALE_AFTER,
    settle_seconds: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    steps: Steps = QUIET,
) -> RecoveryReport:
    """Resolve what crashed runs of ``sink_id`` left, as the coordinator does at start.

    Commits decided work, aborts undecided prepared work, sweeps leftovers. Refuses, unless
    ``force``:

    - while a liveness record says a writer runs (the query's own recovery could race with
      this one and abort work it is about to commit);
    - when the commit log looks like the wrong place (:attr:`SinkStatus.warnings`): it
      does not exist, it holds another sink id's decisions, or the target holds prepared
      work of a batch the log has no record of. Only the log the query wrote to can prove a
      batch undecided; aborting on another's word could throw away a decided batch.

    ``dry_run`` only plans, and is never refused. With ``force`` past a warning, the
    report's ``forced`` says what was acted on without proof.
    After acting it inspects again; work the target aborts on its own time (open
    transactions that fencing aborts, e.g. Kafka's) takes a moment to show as aborted, so it
    waits up to ``settle_seconds`` for that. ``steps`` hears how far it is (``twopc
    recover`` shows it on a terminal).
    """
    plan = sink_status(sink, sink_id, commit_log, stale_after=stale_after, steps=steps)
    if dry_run:  # changes nothing, so it needs no refusal; the plan shows the writers
        return RecoveryReport(plan, performed=False)
    if plan.running and not force:
        reasons = "; ".join(f"query {w.heartbeat.query_id}: {w.reason}" for w in plan.running)
        return RecoveryReport(plan, performed=False, refused=f"a writer is running ({reasons})")
    if plan.warnings and not force:
        return RecoveryReport(
            plan, performed=False, refused="; ".join(plan.warnings) + ". Nothing was changed"
        )
    forced = _forced(plan) if force else ()
    for line in forced:
        _log.warning("twopc sink=%s: recover --force: %s", sink_id, line)
    coordinator = Coordinator(sink, sink_id, commit_log)
    try:
        stats = coordinator.recover(steps)
    except Exception as exc:
        after = sink_status(sink, sink_id, commit_log, stale_after=stale_after, steps=steps)
        return RecoveryReport(plan, performed=True, after=after, error=f"{exc}", forced=forced)
    after = sink_status(sink, sink_id, commit_log, stale_after=stale_after, steps=steps)

    def settled() -> bool:
        nonlocal after
        if not after.items or not all(i.kind is ItemKind.OPEN for i in after.items):
            return True
        steps.note("waiting for the target to finish aborting open transactions")
        after = sink_status(sink, sink_id, commit_log, stale_after=stale_after, steps=steps)
        return not after.items

    wait_until(settled, timeout=settle_seconds, sleep=sleep)
    return RecoveryReport(
        plan,
        performed=True,
        committed=stats.committed,
        aborted=stats.aborted,
        swept=stats.swept,
        after=after,
        forced=forced,
    )


def _forced(plan: SinkStatus) -> tuple[str, ...]:
    """What ``force`` acts past: the plan's warnings and, for each batch the log does not
    know, the prepared work that is aborted (lost, if that batch was decided elsewhere)."""
    lost: dict[tuple[str, int], list[str]] = {}
    for item in plan.unproven:
        lost.setdefault((item.query_id or "", item.batch_id or 0), []).append(item.ident)
    return plan.warnings + tuple(
        f"aborting batch {b} of query {q} without proof that it was undecided: "
        f"{len(idents)} prepared item(s) ({', '.join(idents)}); if that batch was decided, "
        "its output is lost"
        for (q, b), idents in sorted(lost.items())
    )

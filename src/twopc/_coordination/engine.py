"""What the coordinator needs of an engine: a small base class whose one required method
runs phase 1 on every partition; the rest has defaults for an engine that cannot tell."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

from twopc._contract.paths import CommitPath
from twopc._coordination.completeness import collect_committables
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc.protocol import Committable

__all__ = ["BatchEngine"]

_log = logging.getLogger("twopc")


class BatchEngine(ABC):
    """Runs a phase-1 task on every partition of one batch's data (Spark's jobs, the local
    engine's processes). Subclass it: :meth:`run_phase1` is required; every other method has
    a default for an engine that cannot tell.

    ``run_phase1`` must run every partition, return one report per partition (the
    successful attempt's), and raise if any partition's task failed for good.
    """

    @abstractmethod
    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        """Phase 1 on every partition; one report per partition."""

    def discard(self) -> None:
        """Consume the batch's input without writing it (a skipped replay). Spark needs
        every partition of a stateful query evaluated before it commits the state."""
        return None

    def partition_count(self) -> int | None:
        """Partitions phase 1 will run, known before it starts (recorded, so that a restart
        with fewer partitions still cleans up after this run); ``None``: not known."""
        return None

    def planned_partitions(self) -> int:
        """:meth:`partition_count` for the run record: 0 when unknown, or when asking
        failed (the run then learns its count from phase 1's reports)."""
        try:
            value = self.partition_count()
        except Exception:
            _log.debug("the engine could not tell its partition count", exc_info=True)
            return 0
        return int(value) if value else 0

    def task_slots(self) -> int | None:
        """How many tasks run at once (Spark: its default parallelism, the executors'
        cores), for the target's per-task limits (:meth:`~twopc.Sink.work_limits`);
        ``None``: cannot tell."""
        return None

    def partitions_run(self) -> int | None:
        """After :meth:`run_phase1`: how many partitions it ran, as the engine itself knows
        it (not from the reports). The coordinator refuses a batch with fewer reports, so
        that a lost report never commits the batch without that partition's rows. ``None``:
        the engine cannot tell; the reports' partition numbers are then trusted to be
        0..n-1."""
        return None

    def committables(
        self,
        reports: Sequence[TaskReport],
        *,
        sink_id: str,
        query_id: str,
        batch_id: int,
        path: CommitPath,
    ) -> list[Committable]:
        """After :meth:`run_phase1`: the batch's committables from its reports, or
        :class:`~twopc.BatchFailedError` when they do not make a whole batch (checked
        against :meth:`partitions_run`). An engine that runs several sinks (a group's)
        checks each one's share."""
        return collect_committables(
            reports,
            sink_id=sink_id,
            query_id=query_id,
            batch_id=batch_id,
            path=path,
            partitions_run=self.partitions_run(),
        )

    def concurrent_attempts(self) -> bool:
        """Whether copies of a task may run at the same time as it (known before phase 1:
        speculation)."""
        return False

    def duplicate_attempts_possible(self) -> bool:
        """Whether a losing run of a task may have prepared (known after phase 1)."""
        return False

    def wait_for_stragglers(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, until losing attempts ended; whether they
        did (``False`` when the engine cannot tell)."""
        return False

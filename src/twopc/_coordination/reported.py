"""Batches whose tasks ran before the coordinator is asked: ``format("twopc")``.

Spark plans the batch's tasks, runs phase 1 in them, and then calls the writer's
``commit`` (or ``abort``) in a fresh Python process with the tasks' messages and nothing
else. The rules are the coordinator's, through the same parts: recovery, admission (at
planning, :attr:`~.admission.When.PLANNING`, and at the commit,
:attr:`~.admission.When.AFTER_TASKS`), completeness, the decision and phase 2.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from twopc._coordination.admission import When
from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus
from twopc._coordination.batch_outcome import committed_metrics, finished, metrics_with_progress
from twopc._coordination.completeness import WHAT_STAYS
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.records import Decision
from twopc._coordination.reports import TaskReport
from twopc.errors import BatchFailedError
from twopc.progress import SourceOffsets

__all__ = ["ReportedBatches"]

_log = logging.getLogger("twopc")


class ReportedBatches:
    """Plans, commits and aborts ``format("twopc")``'s batches with one coordinator's
    parts."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self._recovery = coordinator.recovery
        self._admission = coordinator.admission
        self._decider = coordinator.decider
        self.sink_id = coordinator.sink_id

    def finish_decided(self) -> int:
        """Finish every batch that was decided but not finished, and nothing else; returns
        how many. Where the batch's tasks cannot be planned with the checks (the offset log
        cannot be read), this runs before they start instead: a replay's tasks must never
        meet decided work still prepared."""
        return self._recovery.finish_decided()

    def plan(self, query_id: str, batch_id: int, *, input_fingerprint: str | None = None) -> bool:
        """Where the batch's tasks are planned, before any starts. Returns whether the batch
        is decided already: a replay, whose tasks must then write nothing (their markers may
        be gone, and a driver-commit sink has none to look at).

        Otherwise decided batches are finished, the batch is admitted as
        :meth:`Coordinator.run_batch` admits one, and undecided prepared work an earlier run
        left is aborted. The run is recorded with its partition count unknown until
        :meth:`commit`, so that a crash during the tasks leaves its shape and age in the
        log."""
        listing = self.coordinator.commit_log.listing()
        self._recovery.finish_decided(listing)
        admitted = self._admission.admit_batch(
            query_id,
            batch_id,
            partitions=0,
            input_fingerprint=input_fingerprint,
            when=When.PLANNING,
            listing=listing,
        )
        if admitted.replay is not None:
            return True
        self._recovery.clear_before_tasks()
        return False

    def commit(
        self,
        query_id: str,
        batch_id: int,
        reports: Sequence[TaskReport | None],
        *,
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> BatchMetrics:
        """Decide and commit a batch whose tasks already ran, from their reports (one per
        partition, ``None`` where a task failed).

        The log is listed once, and that listing serves finishing decided batches, the
        admission checks and the clean-up of earlier runs. A batch already decided is a
        replay: its tasks prepared again before the coordinator saw it, so that work is
        aborted (driver path; the task path's markers made them write nothing) and the
        batch counts as skipped. Speculative copies cannot be observed, so every commit
        cleans up as if one had run. Raises when the batch cannot commit; nothing of it is
        then visible (driver path) or a replay finishes it (task path)."""
        started = time.monotonic()
        listing = self.coordinator.commit_log.listing()
        recovered, earlier = self._recovery.before_commit(listing)
        admitted = self._admission.admit_batch(
            query_id,
            batch_id,
            partitions=len(reports),
            input_fingerprint=input_fingerprint,
            when=When.AFTER_TASKS,
            listing=listing,
            before_run=lambda: self._refuse_failed_tasks(query_id, batch_id, reports),
        )
        state = admitted.state
        base = BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status=BatchStatus.SKIPPED,
            backend=self.coordinator.sink.backend_name,
            recovered_committed=recovered,
            commit_log_batches=len(state.decided),
        )
        present = [r for r in reports if r is not None]
        if admitted.replay is not None:
            skipped = self._skip_replay(base, present, admitted.replay, source_offsets)
            return finished(skipped, started)
        assert admitted.run is not None
        run = admitted.run
        # Spark's commit gets one message per task it ran, so len(reports) is Spark's own
        # count of the batch's partitions (a failed task's message is None)
        committables = self.coordinator.collect(present, query_id, batch_id, len(reports))
        written_at = time.monotonic()
        progress = self.coordinator.publisher.for_batch(source_offsets, query_id, batch_id)
        decided = self._decider.decide_and_commit(
            query_id,
            batch_id,
            committables,
            state,
            progress=progress.decided,
            source_offsets=source_offsets,
        )
        committed_at = time.monotonic()
        published = self.coordinator.publisher.publish(decided.decision)
        cleaned = self._recovery.clean_up_after(decided.decision, run, earlier)
        metrics = committed_metrics(base, present, decided.log_batches)
        metrics = replace(
            metrics,
            write_seconds=max((t.seconds for t in metrics.tasks), default=0.0),
            decide_seconds=decided.decided_at - written_at,
            commit_seconds=committed_at - decided.decided_at,
            commit_retries=self._decider.retries.take(),
            recovered_aborted=cleaned.aborted,
            swept=cleaned.swept,
            lingering_aborted=cleaned.lingering,
        )
        return finished(metrics_with_progress(metrics, published), started)

    def _skip_replay(
        self,
        base: BatchMetrics,
        present: Sequence[TaskReport],
        decision: Decision,
        source_offsets: SourceOffsets | None,
    ) -> BatchMetrics:
        """A batch decided before: its replay's tasks prepared again before the coordinator
        saw it. The decision was finished before they started (where they were planned), so
        none of their work is decided, even where an attempt id repeats one of the
        decision's (Spark counts task attempts from 0 after a restart): abort it all."""
        _log.info(
            "twopc sink=%s: batch %d of query %s is already committed; the replay's work is "
            "discarded",
            self.sink_id,
            base.batch_id,
            base.query_id,
        )
        aborted = self._recovery.abort_reported(present, keep=None)
        published = self.coordinator.publisher.publish(decision, source_offsets)
        skipped = replace(base, recovered_aborted=aborted, swept=self._recovery.sweep())
        return metrics_with_progress(skipped, published)

    def _refuse_failed_tasks(
        self, query_id: str, batch_id: int, reports: Sequence[TaskReport | None]
    ) -> None:
        failed = [index for index, report in enumerate(reports) if report is None]
        if not failed:
            return
        self._recovery.abort_batch(query_id, batch_id)
        raise BatchFailedError(
            f"the task(s) of partition(s) {failed} failed ({WHAT_STAYS[self.coordinator.path]})",
            sink_id=self.sink_id,
            batch_id=batch_id,
            partition=failed[0],
        )

    def abort(self, query_id: str, batch_id: int, reports: Sequence[TaskReport | None]) -> None:
        """Spark gave up on a batch whose tasks already ran (a task failed, or ``commit``
        raised): abort what its tasks prepared, except what a recorded decision holds (a
        restart commits that), and remove what never prepared. Tasks that committed in the
        task stay committed; their markers make the replay skip them."""
        decision = self.coordinator.commit_log.decision(query_id, batch_id)
        if decision is None:
            self._recovery.abort_batch(query_id, batch_id)
            return
        self._recovery.abort_reported([r for r in reports if r is not None], keep=decision)
        self._recovery.sweep()

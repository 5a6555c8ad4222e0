"""The engine-agnostic two-phase-commit coordinator, on the driver.

Nothing here knows Spark. An engine (the Spark adapter, or the local engine in
:mod:`twopc.local`) runs a :class:`~twopc._coordination.phase1.Phase1Task` once per
partition wherever its partitions live and hands back one report per partition. The
:class:`Coordinator` runs one batch through the parts that own each step: recovery first
when needed (:mod:`.recovery`), the admission checks (:mod:`.admission`), phase 1 by the
engine, completeness (:mod:`.completeness`), the decision and phase 2 (:mod:`.deciding`),
and the clean-up of losing attempts. ``format("twopc")``, whose tasks run before the
coordinator is asked, goes through the same parts in :mod:`.reported`.

A batch that follows a committed batch of the same coordinator reads the commit log once
and asks the target nothing before phase 1.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from twopc._contract.boundary import describe_exception
from twopc._contract.paths import CommitPath
from twopc._contract.retry import RetryPolicy
from twopc._coordination.admission import Admission, When
from twopc._coordination.batch_metrics import BatchMetrics, BatchStatus
from twopc._coordination.batch_outcome import committed_metrics, finished, metrics_with_progress
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.completeness import WHAT_STAYS, collect_committables
from twopc._coordination.deciding import (
    DEFAULT_COMMIT_PARALLELISM,
    Decider,
    DecisionMade,
    LastResourceRun,
)
from twopc._coordination.engine import BatchEngine
from twopc._coordination.group_engine import GroupEngine
from twopc._coordination.limits import WorkLimits
from twopc._coordination.open_work import of_batch
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.publishing import Publisher
from twopc._coordination.records import BatchState, Decision
from twopc._coordination.recovery import STRAGGLER_WAIT_SECONDS, Recovery, RecoveryStats
from twopc._coordination.replay_guard import ReplayGuard
from twopc._coordination.reports import TaskReport
from twopc._coordination.steps import QUIET, Steps
from twopc.errors import BatchFailedError, ConfigurationError
from twopc.faults import FaultPlan
from twopc.groups import SinkGroup
from twopc.progress import ProgressInTask, ProgressReporter, SourceOffsets
from twopc.protocol import CommitsInTask, Committable, KeepsMarkers, Sink

__all__ = ["Coordinator", "DecidedBatch", "RecoveryStats"]

_log = logging.getLogger("twopc")


class Coordinator:
    """Drives one sink through two-phase commit, batch after batch, on the driver.

    Args:
        sink: the sink, with its commit role; shipped to executors inside each task.
        sink_id: a stable name for this output; part of every transaction, file and log
            entry, so it must not change between restarts of the query.
        commit_log: where decisions are recorded durably.
        retry: bounded retries for phase 2.
        faults: fault injection plan (tests, demo); ``None`` means off.
        log_retention: finished batches kept in the commit log per query (like Spark's
            ``spark.sql.streaming.minBatchesToRetain``); older entries are deleted.
        commit_parallelism: at most this many commit calls at once in phase 2 and
            recovery, for a sink that commits concurrently.
    """

    def __init__(
        self,
        sink: Sink[Any],
        sink_id: str,
        commit_log: CommitLog,
        *,
        retry: RetryPolicy | None = None,
        faults: FaultPlan | None = None,
        log_retention: int = 100,
        sleep: Callable[[float], None] = time.sleep,
        progress: ProgressReporter | None = None,
        commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM,
    ) -> None:
        if log_retention < 1:
            raise ConfigurationError("log_retention must keep at least the last batch")
        self.path = CommitPath.of(sink)
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.publisher = Publisher(progress, sink, sink_id)
        self.decider = Decider(
            sink,
            sink_id,
            commit_log,
            retry=retry or RetryPolicy(),
            faults=faults,
            publisher=self.publisher,
            log_retention=log_retention,
            sleep=sleep,
            abort_batch=self._abort_batch,
            commit_parallelism=commit_parallelism,
        )
        self.recovery = Recovery(sink, sink_id, commit_log, self.decider)
        self.limits = WorkLimits()
        markers = sink if isinstance(sink, KeepsMarkers) else None
        guard = ReplayGuard(sink_id, commit_log, markers, sink.naming)
        self.admission = Admission(sink, sink_id, commit_log, guard, self.publisher)
        self._last_resource_id = (
            sink.last_resource_id(sink_id) if isinstance(sink, SinkGroup) else None
        )
        """A group's last resource, whose commit decides its batches (Kafka ``atomic``)."""
        self._counts_partitions = isinstance(sink, CommitsInTask | KeepsMarkers)
        """Whether a run's partition count matters (an in-task sink's open work and markers
        are found by it); a driver-path sink's prepared work is found by listing, so its
        runs skip the engine's call for the count."""

    @property
    def faults(self) -> FaultPlan | None:
        """The fault plan every part fires its crash points from (tests may swap it)."""
        return self.decider.faults

    @faults.setter
    def faults(self, plan: FaultPlan | None) -> None:
        self.decider.faults = plan

    def _abort_batch(self, query_id: str, batch_id: int) -> None:
        self.recovery.abort_batch(query_id, batch_id)

    def recover(self, steps: Steps = QUIET) -> RecoveryStats:
        """Finish what a crash left: commit what was decided, abort what was not, remove
        what never prepared. ``steps`` hears how far it is (``twopc recover`` shows it on a
        terminal)."""
        return self.recovery.recover(steps)

    def run_batch(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        *,
        run_id: str = "",
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> BatchMetrics:
        """Write one micro-batch exactly once. Raises if it could not; then nothing of
        the batch is visible (phase 1 failed) or a restart finishes it (phase 2 failed).

        ``input_fingerprint`` identifies the batch's input as the checkpoint plans it (the
        engine reads it from the offset log); with it, a replay over other input (an older
        checkpoint put back) is refused instead of skipped. ``source_offsets`` are the source's
        offsets the batch ends at, for a coordinator that reports progress to a group."""
        started = self.start_batch(
            query_id,
            batch_id,
            engine,
            run_id=run_id,
            input_fingerprint=input_fingerprint,
            source_offsets=source_offsets,
        )
        return started if isinstance(started, BatchMetrics) else self.finish_batch(started)

    def start_batch(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        *,
        run_id: str = "",
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> BatchMetrics | DecidedBatch:
        """:meth:`run_batch` up to the durable decision: the batch to :meth:`finish_batch`,
        or the metrics of a replay that was skipped."""
        try:
            return self._start_batch(
                query_id,
                batch_id,
                engine,
                run_id=run_id,
                input_fingerprint=input_fingerprint,
                source_offsets=source_offsets,
            )
        except BaseException:
            self.recovery.needed = True  # whatever failed, the next batch recovers first
            self.limits.forget()  # and reads the target's limits again
            raise

    def finish_batch(self, batch: DecidedBatch) -> BatchMetrics:
        """Phase 2 of a decided batch, its progress published, its losing attempts
        cleaned up: the rest of :meth:`run_batch`. A failure leaves the decided batch to
        the next batch's recovery."""
        try:
            return self._finish_batch(batch)
        except BaseException:
            self.recovery.needed = True
            raise

    def _start_batch(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        *,
        run_id: str,
        input_fingerprint: str | None,
        source_offsets: SourceOffsets | None,
    ) -> BatchMetrics | DecidedBatch:
        started = time.monotonic()
        recovery = self.recovery.recover_if_needed()
        recovered_at = time.monotonic()
        admitted = self.admission.admit_batch(
            query_id,
            batch_id,
            partitions=engine.planned_partitions if self._counts_partitions else _UNCOUNTED,
            input_fingerprint=input_fingerprint,
            when=When.BEFORE_TASKS,
            before_run=functools.partial(
                self.limits.check_batch, self.sink, self.sink_id, batch_id, engine
            ),
        )
        state = admitted.state
        base = self._skipped_metrics(
            query_id, batch_id, recovery, recovered_at - started, len(state.decided)
        )
        if admitted.replay is not None:
            return self._skip_replay(engine, admitted.replay, base, source_offsets, started)
        assert admitted.run is not None
        run = admitted.run
        progress = self.publisher.for_batch(source_offsets, query_id, batch_id)
        reports = self._phase1(
            query_id,
            batch_id,
            engine,
            run_id,
            progress=progress.in_task,
            source_offsets=source_offsets,
            partitions=run.footprint.partitions,
        )
        committables = self._of_engine(engine, reports, query_id, batch_id)
        written_at = time.monotonic()
        if self._counts_partitions:
            self.admission.learn_partitions(query_id, batch_id, run, len(committables))
        made = self.decider.decide(
            query_id,
            batch_id,
            committables,
            progress=progress.decided,
            last_resource=self._last_resource(engine, batch_id),
            source_offsets=source_offsets,
        )
        return DecidedBatch(
            made,
            state,
            [*reports, *made.last_resource_reports],
            engine,
            replace(base, write_seconds=written_at - recovered_at),
            started,
            written_at,
        )

    def _finish_batch(self, batch: DecidedBatch) -> BatchMetrics:
        batch_id = batch.made.decision.batch_id
        open_work = of_batch(self.sink, self.sink_id, batch_id, batch.reports)
        decided = self.decider.commit_decided(batch.made, batch.state)
        committed_at = time.monotonic()
        published = self.publisher.publish(decided.decision)
        aborted, swept = self.recovery.clean_losing_attempts(
            batch.reports, decided.decision, batch.engine
        )
        base = batch.base
        metrics = replace(
            committed_metrics(base, batch.reports, decided.log_batches),
            decide_seconds=decided.decided_at - batch.written_at,
            commit_seconds=committed_at - decided.decided_at,
            commit_retries=self.decider.retries.take(),
            recovered_aborted=base.recovered_aborted + aborted,
            swept=base.swept + swept,
            open_work_seconds=open_work.seconds,
            near_timeout=open_work.near_timeout,
        )
        return finished(metrics_with_progress(metrics, published), batch.started)

    def _skip_replay(
        self,
        engine: BatchEngine,
        decision: Decision,
        base: BatchMetrics,
        source_offsets: SourceOffsets | None,
        started: float,
    ) -> BatchMetrics:
        """The replay of a batch that committed before a crash writes nothing; its group
        may lag, so its offsets are published again."""
        _log.info(
            "twopc sink=%s: batch %d of query %s is already committed; replay skipped",
            self.sink_id,
            base.batch_id,
            base.query_id,
        )
        engine.discard()
        published = self.publisher.publish(decision, source_offsets)
        base = replace(base, commit_retries=self.decider.retries.take())
        return finished(metrics_with_progress(base, published), started)

    def _skipped_metrics(
        self,
        query_id: str,
        batch_id: int,
        recovery: RecoveryStats,
        recover_seconds: float,
        log_batches: int,
    ) -> BatchMetrics:
        """A batch's metrics before it writes anything (what its recovery did, and how many
        batches the commit log holds for the query)."""
        return BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status=BatchStatus.SKIPPED,
            backend=self.sink.backend_name,
            recover_seconds=recover_seconds,
            recovered_committed=recovery.committed,
            recovered_aborted=recovery.aborted,
            swept=recovery.swept,
            lingering_aborted=recovery.lingering,
            commit_log_batches=log_batches,
        )

    def _phase1(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        run_id: str,
        *,
        progress: ProgressInTask | None,
        source_offsets: SourceOffsets | None,
        partitions: int,
    ) -> list[TaskReport]:
        """Phase 1 by the engine; a failure aborts what the batch prepared. The tasks get
        the batch's source offsets and planned partition count, to store with markers."""
        task = Phase1Task(
            self.sink,
            self.sink_id,
            query_id,
            batch_id,
            self.path,
            run_id,
            self.faults,
            self.decider.retry,
            progress,
            concurrent_attempts=engine.concurrent_attempts(),
            source_offsets=source_offsets,
            partitions=partitions,
        )
        try:
            return engine.run_phase1(task)
        except BaseException as exc:
            if isinstance(exc, Exception):
                self._let_stragglers_end(engine, batch_id)
            self._abort_batch(query_id, batch_id)
            if isinstance(exc, BatchFailedError) or not isinstance(exc, Exception):
                raise
            raise BatchFailedError(
                f"phase 1 failed ({WHAT_STAYS[self.path]}): {describe_exception(exc)}",
                sink_id=self.sink_id,
                batch_id=batch_id,
            ) from exc

    def _last_resource(self, engine: BatchEngine, batch_id: int) -> LastResourceRun | None:
        """A group's last resource, to run once the other members' work is recorded; a
        failed run first lets its stragglers end, so that fencing it is the last word."""
        if self._last_resource_id is None:
            return None
        if not isinstance(engine, GroupEngine):
            raise ConfigurationError(
                f"a group with a last resource is run by the group engine, not by "
                f"{type(engine).__name__}",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
        group_engine = engine

        def run() -> tuple[list[TaskReport], list[Committable]]:
            try:
                return group_engine.run_last_resource()
            except Exception:
                self._let_stragglers_end(group_engine, batch_id)
                raise

        return LastResourceRun(self._last_resource_id, run)

    def _let_stragglers_end(self, engine: BatchEngine, batch_id: int) -> None:
        """Before a failed phase 1 is cleaned up: wait (bounded) for the failed job's other
        tasks, which Spark lets run on after the job failed and which may prepare work after
        a clean-up that did not wait (found by the chaos campaign, seed 120146). Never
        raises: the batch's own error is the one to report."""
        try:
            engine.wait_for_stragglers(STRAGGLER_WAIT_SECONDS)
        except Exception:
            _log.debug(
                "twopc sink=%s batch %d: cannot tell whether phase 1's tasks ended",
                self.sink_id,
                batch_id,
                exc_info=True,
            )

    def collect(
        self,
        reports: Sequence[TaskReport],
        query_id: str,
        batch_id: int,
        partitions_run: int | None,
    ) -> list[Committable]:
        """The batch's committables (:func:`~.completeness.collect_committables`); an
        incomplete batch aborts what it prepared."""
        return self._committables(
            lambda: collect_committables(
                reports,
                sink_id=self.sink_id,
                query_id=query_id,
                batch_id=batch_id,
                path=self.path,
                partitions_run=partitions_run,
            ),
            query_id,
            batch_id,
        )

    def _of_engine(
        self, engine: BatchEngine, reports: list[TaskReport], query_id: str, batch_id: int
    ) -> list[Committable]:
        """The committables of phase 1's reports as the engine puts them together."""
        return self._committables(
            lambda: engine.committables(
                reports, sink_id=self.sink_id, query_id=query_id, batch_id=batch_id, path=self.path
            ),
            query_id,
            batch_id,
        )

    def _committables(
        self, collect: Callable[[], list[Committable]], query_id: str, batch_id: int
    ) -> list[Committable]:
        try:
            return collect()
        except BaseException:
            self._abort_batch(query_id, batch_id)
            raise


@dataclass(frozen=True)
class DecidedBatch:
    """A batch between :meth:`Coordinator.start_batch` and :meth:`Coordinator.
    finish_batch`: its decision durable, its phase 2 not run."""

    made: DecisionMade
    state: BatchState
    """The query's commit log as the batch's one listing saw it."""
    reports: list[TaskReport]
    """Phase 1's reports (and a group's last resource's)."""
    engine: BatchEngine
    base: BatchMetrics
    """The batch's metrics so far (its recovery, its phase 1's time)."""
    started: float
    written_at: float
    """When phase 1 ended (monotonic clock)."""


_UNCOUNTED = functools.partial(int)
"""A run's partition count when it does not matter: 0, without asking the engine."""

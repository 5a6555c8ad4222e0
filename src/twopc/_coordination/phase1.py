"""Phase 1 of one partition, wherever the engine runs it: begin, invoke, pre-commit, and
for in-task sinks the task's own commit. Nothing here knows Spark."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from twopc._contract.boundary import leaving_sink
from twopc._contract.paths import CommitPath
from twopc._contract.retry import RetryPolicy, call_with_retries
from twopc._coordination.open_work import warn_if_near
from twopc._coordination.reports import TaskOutcome, TaskReport, class_name
from twopc.errors import PermanentSinkError, TwoPCError
from twopc.faults import CrashPoint, FaultPlan
from twopc.progress import ProgressInTask, SourceOffsets
from twopc.protocol import CommitOutcome, CommitsInTask, Committable, Sink, TaskContext

__all__ = ["Phase1Task"]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class Phase1Task:
    """Phase 1 for one partition. Picklable: the engine ships it to wherever the
    partition's data lives.

    Data the sink rejects for good (:class:`~twopc.PermanentSinkError`) is reported in-band,
    so the engine does not retry what cannot succeed; other errors are raised (with the
    sink, batch and partition filled in), so the engine may retry the task.
    """

    sink: Sink[Any]
    sink_id: str
    query_id: str
    batch_id: int
    path: CommitPath
    run_id: str = ""
    faults: FaultPlan | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    progress: ProgressInTask | None = None
    concurrent_attempts: bool = False
    """Passed to the sink as :attr:`TaskContext.concurrent_attempts`."""
    source_offsets: SourceOffsets | None = None
    """Passed to the sink as :attr:`TaskContext.source_offsets`."""
    partitions: int = 0
    """Passed to the sink as :attr:`TaskContext.partitions`."""

    def run(
        self,
        partition: int,
        attempt: int,
        batches: Iterable[pa.RecordBatch],
        *,
        attempt_id: int | None = None,
    ) -> TaskReport:
        """Phase 1 of ``partition``. ``attempt`` counts the engine's attempts of the task
        (fault filters and metrics use it); ``attempt_id`` names this attempt's work and
        must be unique among every run of the partition in this engine (Spark's task attempt
        id: a re-attempted stage counts its attempts from 0 again). Default: ``attempt``."""
        run = _Attempt(
            TaskContext(
                self.sink_id,
                self.query_id,
                self.batch_id,
                partition,
                attempt if attempt_id is None else attempt_id,
                self.run_id,
                self.progress,
                self.concurrent_attempts,
                self.source_offsets,
                self.partitions,
            ),
            attempt,
            time.monotonic(),
            time.time(),
        )
        self._fire(CrashPoint.BEFORE_BEGIN, run)
        try:
            with self._leaving(partition):
                txn = self.sink.begin_transaction(run.ctx)
        except TwoPCError as exc:
            return self._rejected(exc, run)
        rows = size = 0
        try:
            with self._leaving(partition):
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    self.sink.invoke(txn, batch)
                    rows += batch.num_rows
                    size += batch.nbytes
                    self._fire(CrashPoint.AFTER_INVOKE, run, rows)
                self._fire(CrashPoint.BEFORE_PRE_COMMIT, run)
                committable = self.sink.pre_commit(txn)
        except BaseException as exc:
            self._abort_quietly(txn, run)
            if isinstance(exc, TwoPCError):
                return self._rejected(exc, run)
            raise
        finish: Callable[[Any, _Attempt], TaskOutcome] = {
            CommitPath.DRIVER: self._leave_prepared,
            CommitPath.TASK: self._commit_in_task,
        }[self.path]
        outcome = finish(txn, run)
        return run.report(outcome, committable, rows, size)

    def _leave_prepared(self, txn: Any, run: _Attempt) -> TaskOutcome:
        """Driver path: the prepared work waits for the decision (recovery's, if we die)."""
        self._fire(CrashPoint.AFTER_PRE_COMMIT, run)
        return TaskOutcome.PREPARED

    def _commit_in_task(self, txn: Any, run: _Attempt) -> TaskOutcome:
        """Task path: commit the task's transaction and its marker now; abort it if that
        fails, so nothing of this attempt stays open in the worker."""
        sink = self.sink
        assert isinstance(sink, CommitsInTask)
        partition = run.ctx.partition
        try:
            self._fire(CrashPoint.AFTER_PRE_COMMIT, run)
            run.aged(
                warn_if_near(sink.work_timeout(), run.age, self.sink_id, self.batch_id, partition)
            )
            self._fire(CrashPoint.BEFORE_TASK_COMMIT, run)
            with self._leaving(partition, what="commit failed: "):
                outcome, _ = call_with_retries(
                    self.retry,
                    lambda: sink.commit_in_task(txn),
                    f"sink {self.sink_id!r} batch {self.batch_id} partition {partition} commit",
                )
            self._fire(CrashPoint.AFTER_TASK_COMMIT, run)
        except BaseException:
            self._abort_quietly(txn, run)
            raise
        if outcome is CommitOutcome.ALREADY_COMMITTED:
            return TaskOutcome.ALREADY_COMMITTED
        return TaskOutcome.COMMITTED

    def _leaving(self, partition: int, what: str = "") -> Any:
        return leaving_sink(self.sink_id, self.batch_id, partition, what=what)

    def _fire(self, point: CrashPoint, run: _Attempt, rows: int | None = None) -> None:
        if self.faults:
            self.faults.fire(
                point,
                sink_id=self.sink_id,
                batch_id=self.batch_id,
                partition=run.ctx.partition,
                attempt=run.number,
                rows=rows,
            )

    def _abort_quietly(self, txn: Any, run: _Attempt) -> None:
        try:
            self.sink.abort(txn)
        except Exception:
            _log.exception(
                "sink %r batch %d partition %d: abort after failure failed too; recovery "
                "will clean up",
                self.sink_id,
                self.batch_id,
                run.ctx.partition,
            )

    def _rejected(self, exc: TwoPCError, run: _Attempt) -> TaskReport:
        """Bad data is reported in-band (the batch fails); anything else is raised."""
        if not isinstance(exc, PermanentSinkError):
            raise exc
        return run.report(
            TaskOutcome.REJECTED,
            None,
            0,
            0,
            error=exc.cause_message,
            error_type=class_name(type(exc)),
        )


@dataclass
class _Attempt:
    """One run of a task: its context (named by the unique attempt id), the engine's
    attempt number, when it started (monotonic clock and epoch) and, for a task that
    commits itself, how old its transaction was at the commit."""

    ctx: TaskContext
    number: int
    started: float
    began_at: float = field(default_factory=time.time)
    open_seconds: float | None = None
    near_timeout: bool = False

    @property
    def age(self) -> float:
        return time.monotonic() - self.started

    def aged(self, near_timeout: bool) -> None:
        """The transaction is about to commit: its age now, and whether it is near the
        sink's timeout."""
        self.open_seconds = self.age
        self.near_timeout = near_timeout

    def report(
        self,
        outcome: TaskOutcome,
        committable: Committable | None,
        rows: int,
        size: int,
        *,
        error: str | None = None,
        error_type: str | None = None,
    ) -> TaskReport:
        return TaskReport(
            self.ctx.partition,
            self.number,
            outcome,
            committable,
            rows=rows,
            bytes=size,
            seconds=time.monotonic() - self.started,
            error=error,
            error_type=error_type,
            began_at=self.began_at,
            open_seconds=self.open_seconds,
            near_timeout=self.near_timeout,
        )

"""The engine-agnostic two-phase-commit coordinator.

Nothing here knows Spark. An engine (the Spark adapter, or the local engine in
:mod:`twopc.local`) runs :class:`Phase1Task` once per partition wherever its partitions
live and hands back one :class:`TaskReport` per partition; the :class:`Coordinator` does
everything else on the driver: recovery, replay skipping, the durable decision, phase 2
with retries, and clean-up of lingering attempts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pyarrow as pa

from twopc._commit_log import BatchRun, CommitLog, Decision
from twopc._metrics import BatchMetrics, TaskMetrics
from twopc._replay_guard import ReplayGuard
from twopc.errors import (
    BatchFailedError,
    CommitError,
    PermanentSinkError,
    SinkError,
    TwoPCError,
)
from twopc.faults import CrashPoint, FaultPlan
from twopc.protocol import (
    CommitOutcome,
    Committable,
    Footprint,
    RecoveryScope,
    Sink,
    TaskContext,
)

__all__ = [
    "BatchEngine",
    "Coordinator",
    "Phase1Task",
    "RetryPolicy",
    "TaskReport",
]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff for commits that fail transiently."""

    max_attempts: int = 5
    initial_backoff_seconds: float = 0.2
    max_backoff_seconds: float = 10.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if self.initial_backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ValueError("RetryPolicy backoff times must not be negative")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        delay = self.initial_backoff_seconds * self.multiplier ** (retry - 1)
        return float(min(delay, self.max_backoff_seconds))


def call_with_retries(
    policy: RetryPolicy,
    action: Callable[[], Any],
    describe: str,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[Any, int]:
    """Run ``action``; retry errors marked retryable. Returns (result, retries used)."""
    retries = 0
    while True:
        try:
            return action(), retries
        except TwoPCError as exc:
            if not exc.retryable or retries + 1 >= policy.max_attempts:
                raise
            retries += 1
            delay = policy.backoff(retries)
            _log.warning("%s failed (%s); retry %d in %.2fs", describe, exc, retries, delay)
            sleep(delay)


@dataclass(frozen=True)
class TaskReport:
    """What one phase-1 task sends back to the driver: small, JSON-serializable."""

    partition: int
    attempt: int
    committable: Committable | None
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    committed_in_task: bool = False
    error: str | None = None

    def dumps(self) -> str:
        return json.dumps(
            {
                "partition": self.partition,
                "attempt": self.attempt,
                "committable": None if self.committable is None else self.committable.to_json(),
                "rows": self.rows,
                "bytes": self.bytes,
                "seconds": self.seconds,
                "committed_in_task": self.committed_in_task,
                "error": self.error,
            },
            sort_keys=True,
        )

    @classmethod
    def loads(cls, text: str) -> TaskReport:
        body = json.loads(text)
        raw = body.get("committable")
        return cls(
            partition=int(body["partition"]),
            attempt=int(body["attempt"]),
            committable=None if raw is None else Committable.from_json(raw),
            rows=int(body.get("rows", 0)),
            bytes=int(body.get("bytes", 0)),
            seconds=float(body.get("seconds", 0.0)),
            committed_in_task=bool(body.get("committed_in_task", False)),
            error=body.get("error"),
        )

    @property
    def metrics(self) -> TaskMetrics:
        return TaskMetrics(self.partition, self.attempt, self.rows, self.bytes, self.seconds)


@dataclass(frozen=True)
class Phase1Task:
    """Phase 1 for one partition: begin, invoke per Arrow batch, pre-commit.

    Picklable: the engine ships it to wherever the partition's data lives. Bad input
    (:class:`~twopc.errors.PermanentSinkError`) is reported in-band, so the engine does not
    retry what cannot succeed; other errors are raised, so the engine may retry the task.
    """

    sink: Sink[Any]
    sink_id: str
    query_id: str
    batch_id: int
    run_id: str = ""
    faults: FaultPlan | None = None
    retry: RetryPolicy = RetryPolicy()

    def run(self, partition: int, attempt: int, batches: Iterable[pa.RecordBatch]) -> TaskReport:
        started = time.monotonic()
        ctx = TaskContext(
            self.sink_id, self.query_id, self.batch_id, partition, attempt, self.run_id
        )
        self._fire(CrashPoint.BEFORE_BEGIN, partition, attempt)
        try:
            txn = self.sink.begin_transaction(ctx)
        except Exception as exc:
            return self._fail(exc, partition, attempt, started)
        rows = size = 0
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                self.sink.invoke(txn, batch)
                rows += batch.num_rows
                size += batch.nbytes
                self._fire(CrashPoint.AFTER_INVOKE, partition, attempt, rows)
            self._fire(CrashPoint.BEFORE_PRE_COMMIT, partition, attempt)
            committable = self.sink.pre_commit(txn)
        except BaseException as exc:
            self._abort_quietly(txn, partition)
            if isinstance(exc, Exception):
                return self._fail(exc, partition, attempt, started)
            raise
        self._fire(CrashPoint.AFTER_PRE_COMMIT, partition, attempt)
        in_task = self.sink.capabilities.commit_in_task
        if in_task:
            self._commit_in_task(committable, partition, attempt)
        return TaskReport(
            partition,
            attempt,
            committable,
            rows=rows,
            bytes=size,
            seconds=time.monotonic() - started,
            committed_in_task=in_task,
        )

    def _commit_in_task(self, committable: Committable, partition: int, attempt: int) -> None:
        self._fire(CrashPoint.BEFORE_TASK_COMMIT, partition, attempt)
        call_with_retries(
            self.retry,
            lambda: self.sink.commit([committable]),
            f"sink {self.sink_id!r} batch {self.batch_id} partition {partition} commit",
        )
        self._fire(CrashPoint.AFTER_TASK_COMMIT, partition, attempt)

    def _fire(
        self, point: CrashPoint, partition: int, attempt: int, rows: int | None = None
    ) -> None:
        if self.faults:
            self.faults.fire(
                point,
                sink_id=self.sink_id,
                batch_id=self.batch_id,
                partition=partition,
                attempt=attempt,
                rows=rows,
            )

    def _abort_quietly(self, txn: Any, partition: int) -> None:
        try:
            self.sink.abort(txn)
        except Exception:
            _log.exception(
                "sink %r batch %d partition %d: abort after failure failed too; recovery "
                "will clean up",
                self.sink_id,
                self.batch_id,
                partition,
            )

    def _fail(self, exc: Exception, partition: int, attempt: int, started: float) -> TaskReport:
        if isinstance(exc, PermanentSinkError):
            return TaskReport(
                partition,
                attempt,
                None,
                seconds=time.monotonic() - started,
                error=exc.cause_message,
            )
        if isinstance(exc, TwoPCError):
            if exc.partition is None:
                raise type(exc)(
                    exc.cause_message,
                    sink_id=self.sink_id,
                    batch_id=self.batch_id,
                    partition=partition,
                ) from exc
            raise exc
        raise SinkError(
            _describe(exc), sink_id=self.sink_id, batch_id=self.batch_id, partition=partition
        ) from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TwoPCError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class BatchEngine(Protocol):
    """Runs a phase-1 task on every partition of one batch's data; consumed, not subclassed.

    Must run every partition, return one report per partition (the successful attempt's),
    and raise if any partition's task failed for good.

    Optional, looked up with ``getattr`` so that older engines keep working:
    ``partition_count() -> int | None`` (partitions phase 1 will run, known before it
    starts; recorded so a restart with fewer partitions still cleans up after this one),
    ``duplicate_attempts_possible() -> bool`` (speculative copies may run) and
    ``wait_for_stragglers(timeout: float) -> None`` (wait until losing attempts ended).
    """

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]: ...

    def discard(self) -> None:
        """Consume the batch's input without writing it (a skipped replay). Spark needs
        every partition of a stateful query evaluated before it commits the state."""
        ...


_STRAGGLER_WAIT_SECONDS = 60.0
"""How long, at most, to wait for losing task attempts to end before cleaning up after them."""


@dataclass
class _Recovery:
    committed: int = 0
    aborted: int = 0
    swept: int = 0


class Coordinator:
    """Drives one sink through two-phase commit, batch after batch, on the driver.

    Args:
        sink: the sink; shipped to executors inside each :class:`Phase1Task`.
        sink_id: a stable name for this output; part of every transaction, file and log
            entry, so it must not change between restarts of the query.
        commit_log: where decisions are recorded durably.
        retry: bounded retries for phase 2.
        faults: fault injection plan (tests, demo); ``None`` means off.
        log_retention: finished batches kept in the commit log per query (like Spark's
            ``spark.sql.streaming.minBatchesToRetain``); older entries are deleted.
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
    ) -> None:
        if log_retention < 1:
            raise ValueError("log_retention must keep at least the last batch")
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.retry = retry or RetryPolicy()
        self.faults = faults
        self.log_retention = log_retention
        self._sleep = sleep
        self._earlier_runs: list[BatchRun] | None = None
        self._lingering_swept = False
        self._markers_checked: set[str] = set()
        self._guard = ReplayGuard(sink, sink_id, commit_log)

    # -- recovery ------------------------------------------------------------------------

    def recover(self) -> _Recovery:
        """Finish what a crash left: commit what was decided, abort what was not."""
        stats = _Recovery()
        self.commit_log.remove_temporaries()
        for decision in self.commit_log.pending():
            _log.info(
                "twopc sink=%s: finishing batch %d of query %s decided before a crash",
                self.sink_id,
                decision.batch_id,
                decision.query_id,
            )
            in_task = decision.committed_in_task
            if in_task is None:  # a decision of an earlier version: it did not say
                in_task = self.sink.capabilities.commit_in_task
            if in_task:
                # The tasks committed before the decision was written; only the log lags.
                self.commit_log.mark_done(decision.query_id, decision.batch_id)
            else:
                # Also after a restart in a mode that commits in the task: the decision was
                # made for prepared work, which only a commit makes visible.
                self._commit_decision(decision, recovering=True)
            stats.committed += len(decision.committables)
        earlier = self._runs_before_this_process()
        if self.sink.capabilities.recover or any(run.recover for run in earlier):
            stats.aborted = self._abort_undecided()
        stats.aborted += self._sweep_earlier_footprints(earlier)
        stats.swept = self.sink.sweep(self.sink_id)
        return stats

    def _runs_before_this_process(self) -> list[BatchRun]:
        """The runs of each query's newest batch as the log held them when this coordinator
        started: what a crashed or differently configured earlier run may have left."""
        if self._earlier_runs is None:
            self._earlier_runs = [
                run for _, runs in self.commit_log.newest_runs().values() for run in runs
            ]
        return self._earlier_runs

    def _sweep_earlier_footprints(self, earlier: Sequence[BatchRun]) -> int:
        """Once per coordinator: let the sink abort what runs with other naming or more
        partitions left open (no fixed probe limit: the log says how many there were)."""
        if self._lingering_swept:
            return 0
        footprints: dict[str, Footprint] = {}
        for run in earlier:
            key = json.dumps(run.footprint.to_json(), sort_keys=True)
            footprints.setdefault(key, run.footprint)
        aborted = 0
        for footprint in footprints.values():
            aborted += self.sink.sweep_lingering(self.sink_id, footprint)
        self._lingering_swept = True
        return aborted

    def _abort_undecided(self) -> int:
        leftovers = self.sink.recover(self.sink_id)
        decisions = self.commit_log.decisions_for(leftovers)
        to_commit: list[Committable] = []
        to_abort: list[Committable] = []
        for committable in leftovers:
            decision = decisions[(committable.query_id, committable.batch_id)]
            if decision is not None and decision.contains(committable):
                to_commit.append(committable)
            else:
                to_abort.append(committable)
        if to_commit:
            # Decided work the log already marked done but the target still shows as
            # prepared (e.g. a crash between the commit and its clean-up): finish it.
            self._commit_all(to_commit)
        if to_abort:
            _log.info(
                "twopc sink=%s: aborting %d prepared but undecided unit(s) of work: %s",
                self.sink_id,
                len(to_abort),
                ", ".join(
                    f"batch {c.batch_id} partition {c.partition} attempt {c.attempt}"
                    for c in to_abort
                ),
            )
            if self.faults:
                # one by one, so a crash can land between two aborts
                for index, committable in enumerate(to_abort):
                    point = (
                        CrashPoint.RECOVERY_BETWEEN_ABORTS
                        if index
                        else CrashPoint.RECOVERY_BEFORE_ABORT
                    )
                    self._fire(point, committable.batch_id)
                    self.sink.abort_prepared([committable])
            else:
                self.sink.abort_prepared(to_abort)
        return len(to_abort)

    # -- one batch -----------------------------------------------------------------------

    def run_batch(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        *,
        run_id: str = "",
        input_fingerprint: str | None = None,
    ) -> BatchMetrics:
        """Write one micro-batch exactly once. Raises if it could not; then nothing of
        the batch is visible (phase 1 failed) or a restart finishes it (phase 2 failed).

        ``input_fingerprint`` identifies the batch's input as the checkpoint plans it (the
        engine reads it from the offset log); with it, a replay over other input (an older
        checkpoint put back) is refused instead of skipped."""
        started = time.monotonic()
        recovery = self.recover()
        recovered_at = time.monotonic()
        base = BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status="skipped",
            recover_seconds=recovered_at - started,
            recovered_committed=recovery.committed,
            recovered_aborted=recovery.aborted,
            swept=recovery.swept,
        )
        runs = self.commit_log.runs(query_id, batch_id)
        if query_id not in self._markers_checked:
            self._guard.markers_not_ahead(query_id, batch_id)
            self._markers_checked.add(query_id)
        if self._already_committed(query_id, batch_id):
            self._guard.same_input(runs, input_fingerprint, query_id, batch_id)
            _log.info(
                "twopc sink=%s: batch %d of query %s is already committed; replay skipped",
                self.sink_id,
                batch_id,
                query_id,
            )
            engine.discard()
            return self._finish(base, started)
        self._guard.order(query_id, batch_id)
        run = BatchRun(
            Footprint(self.sink.naming(), _partition_count(engine)),
            input_fingerprint,
            committed_in_task=self.sink.capabilities.commit_in_task,
            recover=self.sink.capabilities.recover,
            started_at=time.time(),
        )
        self._guard.replay_shape(runs, run, query_id, batch_id)
        self._guard.markers_kept(runs, query_id, batch_id)
        self.commit_log.record_run(query_id, batch_id, run)

        task = Phase1Task(
            self.sink, self.sink_id, query_id, batch_id, run_id, self.faults, self.retry
        )
        try:
            reports = engine.run_phase1(task)
            committables = self._collect(reports, query_id, batch_id)
        except BaseException as exc:
            self._abort_batch(batch_id)
            if isinstance(exc, BatchFailedError):
                raise
            if isinstance(exc, Exception):
                raise BatchFailedError(
                    f"phase 1 failed ({self._what_stays()}): {_short(exc)}",
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                ) from exc
            raise
        written_at = time.monotonic()
        tasks = tuple(r.metrics for r in sorted(reports, key=lambda r: r.partition))
        if not run.footprint.partitions:
            # The engine could not tell the partition count up front: the reports do.
            self.commit_log.replace_run(
                query_id,
                batch_id,
                run,
                replace(run, footprint=replace(run.footprint, partitions=len(committables))),
            )

        in_task = self.sink.capabilities.commit_in_task
        decision = Decision(
            self.sink_id, query_id, batch_id, tuple(committables), committed_in_task=in_task
        )
        try:
            self._fire(CrashPoint.BEFORE_DECISION, batch_id)
            self.commit_log.record_decision(decision)
        except Exception:
            # No decision, so nothing may become visible: abort what phase 1 prepared.
            if self.commit_log.decision(query_id, batch_id) is None:
                self._abort_batch(batch_id)
            raise
        decided_at = time.monotonic()
        self._fire(CrashPoint.AFTER_DECISION, batch_id)

        retries = 0 if in_task else self._commit_decision(decision)
        if in_task:
            self.commit_log.mark_done(query_id, batch_id)
        committed_at = time.monotonic()
        self._fire(CrashPoint.AFTER_COMMIT, batch_id)
        self._prune_log(query_id, batch_id)
        cleaned = self._clean_failed_attempts(reports, batch_id, engine)

        metrics = replace(
            base,
            status="committed",
            partitions=len(reports),
            rows=sum(t.rows for t in tasks),
            bytes=sum(t.bytes for t in tasks),
            write_seconds=written_at - recovered_at,
            decide_seconds=decided_at - written_at,
            commit_seconds=committed_at - decided_at,
            commit_retries=retries,
            recovered_aborted=base.recovered_aborted + cleaned.aborted,
            swept=base.swept + cleaned.swept,
            tasks=tasks,
        )
        return self._finish(metrics, started)

    def _clean_failed_attempts(
        self, reports: Sequence[TaskReport], batch_id: int, engine: BatchEngine
    ) -> _Recovery:
        """Remove what the failed and losing attempts of a just-committed batch left (staged
        files, prepared branches), instead of waiting for the next batch's recovery: the
        last batch of a query may have no next batch, and a restart without new input runs
        none.

        Runs when a partition needed more than one attempt, or when the engine may have run
        speculative copies (whose losers never report: attempt 0 may be the one that lost);
        then it first waits, bounded, for the losing attempts to end. A failure here is
        logged, never raised, because the batch is already committed and recovery retries.
        """
        cleaned = _Recovery()
        retried = sorted({r.partition for r in reports if r.attempt > 0})
        speculative = bool(getattr(engine, "duplicate_attempts_possible", lambda: False)())
        if not retried and not speculative:
            return cleaned
        if speculative:
            wait = getattr(engine, "wait_for_stragglers", None)
            if wait is not None:
                wait(_STRAGGLER_WAIT_SECONDS)
        try:
            if self.sink.capabilities.recover:
                cleaned.aborted = self._abort_undecided()
            cleaned.swept = self.sink.sweep(self.sink_id)
        except Exception as exc:
            _log.warning(
                "twopc sink=%s: batch %d is committed, but cleaning up after its failed or "
                "losing task attempts (retried partitions: %s) failed; the next batch's "
                "recovery retries: %s",
                self.sink_id,
                batch_id,
                ", ".join(map(str, retried)) or "none",
                _short(exc),
            )
        return cleaned

    def _prune_log(self, query_id: str, batch_id: int) -> None:
        """Forget finished batches older than the retention; replays only ever concern the
        latest batch, and the ordering check only needs the newest decision."""
        horizon = batch_id - self.log_retention
        if horizon < 0:
            return
        old = [b for b in self.commit_log.decided_batches(query_id) if b <= horizon]
        done = [b for b in old if self.commit_log.is_done(query_id, b)]
        if done:
            self.commit_log.forget(query_id, done)

    def _finish(self, metrics: BatchMetrics, started: float) -> BatchMetrics:
        metrics = _with_total(metrics, time.monotonic() - started)
        _log.info(metrics.summary())
        return metrics

    def _already_committed(self, query_id: str, batch_id: int) -> bool:
        if self.commit_log.decision(query_id, batch_id) is not None:
            return True
        return self.sink.is_committed(RecoveryScope(self.sink_id, query_id), batch_id)

    def _collect(
        self, reports: Sequence[TaskReport], query_id: str, batch_id: int
    ) -> list[Committable]:
        by_partition: dict[int, TaskReport] = {}
        for report in reports:
            by_partition.setdefault(report.partition, report)
        failed = [r for r in by_partition.values() if r.error is not None]
        if failed:
            first = min(failed, key=lambda r: r.partition)
            raise BatchFailedError(
                f"{first.error} ({len(failed)} of {len(by_partition)} partition(s) rejected "
                f"their data; {self._what_stays()})",
                sink_id=self.sink_id,
                batch_id=batch_id,
                partition=first.partition,
            )
        expected = set(range(len(by_partition)))
        if set(by_partition) != expected:
            raise BatchFailedError(
                f"phase 1 reported partitions {sorted(by_partition)}, "
                f"expected 0..{len(expected) - 1}",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )
        committables: list[Committable] = []
        for partition in sorted(by_partition):
            committable = by_partition[partition].committable
            if committable is None or committable.batch_id != batch_id:
                raise BatchFailedError(
                    "pre_commit returned no committable for this batch",
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                    partition=partition,
                )
            if committable.query_id != query_id or committable.sink_id != self.sink_id:
                raise BatchFailedError(
                    "pre_commit returned a committable of another sink or query",
                    sink_id=self.sink_id,
                    batch_id=batch_id,
                    partition=partition,
                )
            committables.append(committable)
        return committables

    def _what_stays(self) -> str:
        if self.sink.capabilities.commit_in_task:
            return (
                "partitions that committed in their tasks stay committed and are skipped "
                "when the batch runs again"
            )
        return "nothing of the batch was committed"

    def _abort_batch(self, batch_id: int) -> None:
        """Phase 1 failed: abort everything prepared for the batch, including attempts
        that never reported back (failed or speculative tasks)."""
        try:
            self.recover()
        except Exception:
            _log.exception(
                "twopc sink=%s batch %d: clean-up after a failed phase 1 failed; the next "
                "run's recovery will retry it",
                self.sink_id,
                batch_id,
            )

    def _commit_decision(self, decision: Decision, *, recovering: bool = False) -> int:
        """Commit a decided batch partition by partition, then mark it done; idempotent,
        so recovery may run it again after a crash anywhere in it."""
        retries = 0
        if recovering:
            self._fire(CrashPoint.RECOVERY_BEFORE_COMMIT, decision.batch_id)
        between = CrashPoint.RECOVERY_BETWEEN_COMMITS if recovering else CrashPoint.BETWEEN_COMMITS
        for index, committable in enumerate(decision.committables):
            if index == 1:
                self._fire(between, decision.batch_id)
            retries += self._commit_all([committable])
        self.commit_log.mark_done(decision.query_id, decision.batch_id)
        return retries

    def _commit_all(self, committables: Sequence[Committable]) -> int:
        first = committables[0]

        def commit() -> list[CommitOutcome]:
            try:
                return self.sink.commit(committables)
            except TwoPCError:
                raise
            except Exception as exc:
                raise CommitError(
                    _describe(exc),
                    sink_id=self.sink_id,
                    batch_id=first.batch_id,
                    partition=first.partition if len(committables) == 1 else None,
                ) from exc

        try:
            _, retries = call_with_retries(
                self.retry,
                commit,
                f"sink {self.sink_id!r} batch {first.batch_id} commit",
                self._sleep,
            )
        except CommitError:
            raise
        except TwoPCError as exc:
            raise CommitError(
                "commit failed after the decision was recorded; a restart will finish it: "
                f"{exc.cause_message}",
                sink_id=self.sink_id,
                batch_id=first.batch_id,
                partition=exc.partition,
            ) from exc
        return int(retries)

    def _fire(self, point: CrashPoint, batch_id: int) -> None:
        if self.faults:
            self.faults.fire(point, sink_id=self.sink_id, batch_id=batch_id)


def _partition_count(engine: BatchEngine) -> int:
    """Partitions the engine will run, if it can tell before phase 1; 0 when unknown."""
    count = getattr(engine, "partition_count", None)
    if count is None:
        return 0
    try:
        value = count()
    except Exception:
        _log.debug("the engine could not tell its partition count", exc_info=True)
        return 0
    return int(value) if value else 0


def _with_total(metrics: BatchMetrics, total: float) -> BatchMetrics:
    return replace(metrics, total_seconds=total)


def _short(exc: BaseException, limit: int = 2000) -> str:
    """The useful part of an engine error: our own message if present, else the tail."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if "sink '" in stripped and ("batch" in stripped or "partition" in stripped):
            return stripped[:limit]
    return (text.strip().splitlines() or [type(exc).__name__])[-1][:limit]

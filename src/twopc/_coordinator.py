"""The engine-agnostic two-phase-commit coordinator, on the driver.

Nothing here knows Spark. An engine (the Spark adapter, or the local engine in
:mod:`twopc.local`) runs a :class:`~twopc._phase1.Phase1Task` once per partition wherever its
partitions live and hands back one report per partition; the :class:`Coordinator` does
everything else: recovery, replay skipping, the durable decision, phase 2 with retries,
and clean-up of lingering attempts.

The coordinator recovers when it starts and again after any failure; a batch that follows
a committed batch of the same coordinator reads the commit log once and asks the target
nothing before phase 1.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from twopc._boundary import describe_exception, leaving_sink
from twopc._commit_log import BatchRun, BatchState, CommitLog, Decision, LogListing
from twopc._metrics import BatchMetrics, BatchStatus
from twopc._paths import CommitPath
from twopc._phase1 import BatchEngine, Phase1Task
from twopc._publishing import Published, Publisher
from twopc._replay_guard import ReplayGuard
from twopc._reports import TaskOutcome, TaskReport
from twopc._retry import RetryPolicy, call_with_retries
from twopc._steps import QUIET, Steps, counted, counter
from twopc.errors import (
    BatchFailedError,
    CommitError,
    ConfigurationError,
    TwoPCError,
)
from twopc.faults import CrashPoint, FaultPlan
from twopc.progress import ProgressReporter, SourceOffsets
from twopc.protocol import (
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    KeepsMarkers,
    Sink,
)

__all__ = ["Coordinator", "RecoveryStats", "metrics_with_progress"]

_log = logging.getLogger("twopc")

_STRAGGLER_WAIT_SECONDS = 60.0
"""How long, at most, to wait for losing task attempts to end before cleaning up after them."""

_ABORT_SLICE = 50
"""Prepared work aborted per call of ``abort_prepared`` (any number is correct: each
committable is aborted on its own terms)."""

_WHAT_STAYS = {
    CommitPath.DRIVER: "nothing of the batch was committed",
    CommitPath.TASK: (
        "partitions that committed in their tasks stay committed and are skipped when the "
        "batch runs again"
    ),
}


@dataclass
class RecoveryStats:
    """What one recovery did. ``lingering``: the part of ``aborted`` that were transactions
    earlier runs left open (an in-task sink's lingering sweep)."""

    committed: int = 0
    aborted: int = 0
    swept: int = 0
    lingering: int = 0


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
    ) -> None:
        if log_retention < 1:
            raise ConfigurationError("log_retention must keep at least the last batch")
        self.path = CommitPath.of(sink)
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.retry = retry or RetryPolicy()
        self.faults = faults
        self.log_retention = log_retention
        self._sleep = sleep
        self._driver: CommitsOnDriver | None = sink if isinstance(sink, CommitsOnDriver) else None
        self._in_task: CommitsInTask[Any] | None = sink if isinstance(sink, CommitsInTask) else None
        markers = sink if isinstance(sink, KeepsMarkers) else None
        self._guard = ReplayGuard(sink_id, commit_log, markers, sink.naming)
        self._publisher = Publisher(progress, sink, sink_id)
        self._recovered = False
        self._earlier_runs: list[BatchRun] | None = None
        self._lingering_swept = False
        self._markers_checked: set[str] = set()

    # -- recovery ------------------------------------------------------------------------

    def recover(self, steps: Steps = QUIET) -> RecoveryStats:
        """Finish what a crash left: commit what was decided, abort what was not, remove
        what never prepared. ``steps`` hears how far it is (``twopc recover`` shows it on a
        terminal)."""
        stats = RecoveryStats()
        self.commit_log.remove_temporaries()
        pending = self.commit_log.pending(on_read=counter(steps, "read", "pending decisions"))
        for decision in counted(steps, pending, "finished", "decided batches"):
            self._finish_pending(decision)
            stats.committed += len(decision.committables)
        if self._driver is not None:
            stats.aborted = self._abort_undecided(self._driver, steps)
        stats.lingering = self._sweep_earlier_footprints(steps)
        stats.aborted += stats.lingering
        steps.note("sweeping leftovers that never prepared")
        stats.swept = self._sweep()
        self._recovered = True
        return stats

    def finish_decided(self) -> int:
        """Finish every batch that was decided but not finished (commit it, or mark it
        done), and nothing else; returns how many. Entry points whose tasks run before the
        coordinator is asked (the ``format("twopc")`` writer) call it before a batch's
        tasks start: a replay's tasks must never meet decided work still prepared."""
        return self._finish_all(self.commit_log.pending())

    def _finish_all(self, decisions: Sequence[Decision]) -> int:
        for decision in decisions:
            self._finish_pending(decision)
        return len(decisions)

    def check_progress(self) -> None:
        """Refuse a progress group that is not this sink's (once per coordinator)."""
        self._publisher.check()

    def publish_progress(
        self, decision: Decision, source_offsets: SourceOffsets | None = None
    ) -> Published:
        """Publish a committed batch's source offsets (when the transaction did not)."""
        return self._publisher.publish(decision, source_offsets)

    def _finish_pending(self, decision: Decision) -> None:
        _log.info(
            "twopc sink=%s: finishing batch %d of query %s decided before a crash",
            self.sink_id,
            decision.batch_id,
            decision.query_id,
        )
        # a decision is finished the way it was made, whatever the sink's mode is now
        finish = {
            CommitPath.DRIVER: self._commit_recovered,
            CommitPath.TASK: self._mark_done,
        }[decision.path or self.path]
        finish(decision)
        self._publisher.publish(decision)

    def _runs_before_this_process(self, listing: LogListing | None = None) -> list[BatchRun]:
        """The runs of each query's newest batch as the log held them when this coordinator
        started: what a crashed or differently configured earlier run may have left."""
        if self._earlier_runs is None:
            self._earlier_runs = [
                run for _, runs in self.commit_log.newest_runs(listing).values() for run in runs
            ]
        return self._earlier_runs

    def _sweep_earlier_footprints(self, steps: Steps = QUIET) -> int:
        """Once per coordinator: let an in-task sink abort what runs with other naming or
        more partitions left open (no fixed probe limit: the log says how many there
        were). Driver-commit sinks find their prepared work by listing instead."""
        if self._lingering_swept or self._in_task is None:
            return 0
        steps.note("aborting what earlier runs left open")
        footprints: dict[str, Footprint] = {}
        for run in self._runs_before_this_process():
            key = json.dumps(run.footprint.to_json(), sort_keys=True)
            footprints.setdefault(key, run.footprint)
        aborted = 0
        with leaving_sink(self.sink_id, what="aborting an earlier run's open work failed: "):
            for footprint in footprints.values():
                aborted += self._in_task.sweep_lingering(self.sink_id, footprint)
        self._lingering_swept = True
        return aborted

    def _sweep(self, keep: Sequence[Committable] = ()) -> int:
        with leaving_sink(self.sink_id, what="removing unprepared leftovers failed: "):
            return self.sink.sweep(self.sink_id, keep)

    def _list_prepared(self, driver: CommitsOnDriver) -> list[Committable]:
        with leaving_sink(self.sink_id, what="listing prepared work failed: "):
            return driver.recover(self.sink_id)

    def _abort_undecided(self, driver: CommitsOnDriver, steps: Steps = QUIET) -> int:
        steps.note("listing prepared transactions")
        leftovers = self._list_prepared(driver)
        checked = counter(steps, "checked", "prepared transactions")
        decisions = self.commit_log.decisions_for(leftovers, on_read=checked)
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
            self._commit_all(driver, to_commit)
        self._abort(driver, to_abort, "prepared but undecided", in_recovery=True, steps=steps)
        return len(to_abort)

    def _abort(
        self,
        driver: CommitsOnDriver,
        committables: Sequence[Committable],
        why: str,
        *,
        in_recovery: bool = False,
        steps: Steps = QUIET,
    ) -> None:
        if not committables:
            return
        _log.info(
            "twopc sink=%s: aborting %d %s unit(s) of work: %s",
            self.sink_id,
            len(committables),
            why,
            ", ".join(
                f"batch {c.batch_id} partition {c.partition} attempt {c.attempt}"
                for c in committables
            ),
        )
        first = committables[0]
        with leaving_sink(self.sink_id, first.batch_id, what="aborting prepared work failed: "):
            if self.faults and in_recovery:
                # one by one, so a crash can land between two aborts
                for index, committable in enumerate(committables):
                    point = (
                        CrashPoint.RECOVERY_BETWEEN_ABORTS
                        if index
                        else CrashPoint.RECOVERY_BEFORE_ABORT
                    )
                    self._fire(point, committable.batch_id)
                    driver.abort_prepared([committable])
            else:
                # in slices, so that a recovery aborting hundreds can say how far it is
                total = len(committables)
                steps.count("aborted", 0, total, "prepared transactions")
                for start in range(0, total, _ABORT_SLICE):
                    driver.abort_prepared(committables[start : start + _ABORT_SLICE])
                    done = min(start + _ABORT_SLICE, total)
                    steps.count("aborted", done, total, "prepared transactions")

    # -- one batch -----------------------------------------------------------------------

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
        try:
            return self._run_batch(
                query_id,
                batch_id,
                engine,
                run_id=run_id,
                input_fingerprint=input_fingerprint,
                source_offsets=source_offsets,
            )
        except BaseException:
            self._recovered = False  # whatever failed, the next batch recovers first
            raise

    def _run_batch(
        self,
        query_id: str,
        batch_id: int,
        engine: BatchEngine,
        *,
        run_id: str,
        input_fingerprint: str | None,
        source_offsets: SourceOffsets | None,
    ) -> BatchMetrics:
        started = time.monotonic()
        recovery = RecoveryStats() if self._recovered else self.recover()
        recovered_at = time.monotonic()
        base = BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status=BatchStatus.SKIPPED,
            backend=self.sink.backend_name,
            recover_seconds=recovered_at - started,
            recovered_committed=recovery.committed,
            recovered_aborted=recovery.aborted,
            swept=recovery.swept,
            lingering_aborted=recovery.lingering,
        )
        state = self.commit_log.batch_state(query_id, batch_id)
        base = replace(base, commit_log_batches=len(state.decided))
        if query_id not in self._markers_checked:
            self._guard.markers_not_ahead(query_id, batch_id, state)
            self._markers_checked.add(query_id)
        self.check_progress()
        if state.decision is not None:
            self._guard.same_input(state.runs, input_fingerprint, query_id, batch_id)
            _log.info(
                "twopc sink=%s: batch %d of query %s is already committed; replay skipped",
                self.sink_id,
                batch_id,
                query_id,
            )
            engine.discard()
            # the replay of a batch that committed before a crash: its group may lag
            published = self.publish_progress(state.decision, source_offsets)
            return self._finish(metrics_with_progress(base, published), started)
        run = self._record_run(
            query_id, batch_id, state, _partition_count(engine), input_fingerprint
        )

        task = Phase1Task(
            self.sink,
            self.sink_id,
            query_id,
            batch_id,
            self.path,
            run_id,
            self.faults,
            self.retry,
            self._publisher.for_task(source_offsets, query_id, batch_id),
            concurrent_attempts=engine.concurrent_attempts(),
        )
        try:
            reports = engine.run_phase1(task)
            committables = self._collect(reports, query_id, batch_id, engine.partitions_run())
        except BaseException as exc:
            self._abort_batch(query_id, batch_id)
            if isinstance(exc, BatchFailedError):
                raise
            if isinstance(exc, Exception):
                raise BatchFailedError(
                    f"phase 1 failed ({_WHAT_STAYS[self.path]}): {describe_exception(exc)}",
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

        decision, decided_at, retries = self._decide_and_commit(
            query_id, batch_id, committables, state, source_offsets
        )
        committed_at = time.monotonic()
        published = self.publish_progress(decision)
        aborted, swept = self._clean_losing_attempts(reports, decision, engine)

        metrics = replace(
            base,
            status=BatchStatus.COMMITTED,
            partitions=len(reports),
            rows=sum(t.rows for t in tasks),
            bytes=sum(t.bytes for t in tasks),
            write_seconds=written_at - recovered_at,
            decide_seconds=decided_at - written_at,
            commit_seconds=committed_at - decided_at,
            commit_retries=retries,
            recovered_aborted=base.recovered_aborted + aborted,
            swept=base.swept + swept,
            commit_log_batches=self._log_batches_after(state, batch_id),
            tasks=tasks,
        )
        return self._finish(metrics_with_progress(metrics, published), started)

    def _this_run(
        self, partitions: int, input_fingerprint: str | None, started_at: float | None = None
    ) -> BatchRun:
        """This coordinator's run of a batch: the sink's naming, ``partitions`` (0: not
        known yet), the input and the commit path."""
        return BatchRun(
            Footprint(self.sink.naming(), partitions),
            input_fingerprint,
            path=self.path,
            started_at=time.time() if started_at is None else started_at,
        )

    def _record_run(
        self,
        query_id: str,
        batch_id: int,
        state: BatchState,
        partitions: int,
        input_fingerprint: str | None,
    ) -> BatchRun:
        """Check that the batch may be written now (order, shape of a replay, markers) and
        record this run of it before its work becomes visible."""
        self._guard.order(query_id, batch_id, state.newest_decided)
        run = self._this_run(partitions, input_fingerprint)
        self._guard.replay_shape(state.runs, run, query_id, batch_id)
        self._guard.markers_kept(state.runs, query_id, batch_id)
        self.commit_log.record_run(query_id, batch_id, run, known=state.runs)
        return run

    def _record_reported_run(
        self,
        query_id: str,
        batch_id: int,
        state: BatchState,
        partitions: int,
        input_fingerprint: str | None,
    ) -> BatchRun:
        """Record the run of a batch whose tasks ran, with its partition count, in place of
        the run :meth:`plan_reported` recorded with the count unknown. Its shape is checked
        against the earlier runs whose count is known; runs that crashed before their count
        was learnt cannot be compared (a documented limit of ``format("twopc")``)."""
        unknown = self._this_run(0, input_fingerprint)
        planned = [r for r in state.runs if r.same_shape(unknown) and r.path is self.path]
        if not planned:
            return self._record_run(query_id, batch_id, state, partitions, input_fingerprint)
        self._guard.order(query_id, batch_id, state.newest_decided)
        run = self._this_run(partitions, input_fingerprint, planned[-1].started_at)
        known = [r for r in state.runs if r.footprint.partitions]
        self._guard.replay_shape(known, run, query_id, batch_id)
        self.commit_log.replace_run(query_id, batch_id, planned[-1], run)
        return run

    def _decide_and_commit(
        self,
        query_id: str,
        batch_id: int,
        committables: Sequence[Committable],
        state: BatchState,
        source_offsets: SourceOffsets | None = None,
    ) -> tuple[Decision, float, int]:
        """Record the decision over phase 1's committables, then finish it (commit on the
        driver, or mark the task-committed batch done). Returns the decision, when it was
        recorded (monotonic clock) and the commit's retries. Without a decision nothing of
        the batch may become visible, so a failure to record it aborts phase 1's work."""
        decision = Decision(
            self.sink_id,
            query_id,
            batch_id,
            tuple(committables),
            path=self.path,
            progress=self._publisher.decided(source_offsets),
        )
        try:
            self._fire(CrashPoint.BEFORE_DECISION, batch_id)
            self.commit_log.record_decision(decision)
        except Exception:
            if self.commit_log.decision(query_id, batch_id) is None:
                self._abort_batch(query_id, batch_id)
            raise
        decided_at = time.monotonic()
        self._fire(CrashPoint.AFTER_DECISION, batch_id)
        finish = {CommitPath.DRIVER: self._commit_decision, CommitPath.TASK: self._mark_done}
        retries = finish[self.path](decision)
        self._fire(CrashPoint.AFTER_COMMIT, batch_id)
        self._prune_log(query_id, batch_id, state.finished)
        return decision, decided_at, retries

    def _clean_losing_attempts(
        self, reports: Sequence[TaskReport], decision: Decision, engine: BatchEngine
    ) -> tuple[int, int]:
        """Remove what the failed and losing attempts of a just-committed batch left (staged
        files, prepared branches), instead of leaving it to a later recovery: the last batch
        of a query may have no next batch. Returns (aborted, swept).

        Runs when a partition needed more than one attempt, or when the engine may have run
        a partition twice (speculative copies, a re-attempted stage), whose losers never
        report: attempt 0 may be the one that lost. Then it first waits, bounded, for the
        losing attempts to end. A failure here is
        logged, never raised (the batch is committed), and the next batch recovers first.
        """
        retried = sorted({r.partition for r in reports if r.attempt > 0})
        speculative = engine.duplicate_attempts_possible()
        if not retried and not speculative:
            return 0, 0
        if speculative:
            # another run of a partition may still be finishing: the next batch looks again
            self._recovered = False
            engine.wait_for_stragglers(_STRAGGLER_WAIT_SECONDS)
        aborted = 0
        try:
            if self._driver is not None:
                losers = [
                    c
                    for c in self._list_prepared(self._driver)
                    if (c.query_id, c.batch_id) == (decision.query_id, decision.batch_id)
                    and not decision.contains(c)
                ]
                self._abort(self._driver, losers, "losing or failed attempt")
                aborted = len(losers)
            return aborted, self._sweep()
        except Exception as exc:
            self._recovered = False
            _log.warning(
                "twopc sink=%s: batch %d is committed, but cleaning up after its failed or "
                "losing task attempts (retried partitions: %s) failed; the next batch's "
                "recovery retries: %s",
                self.sink_id,
                decision.batch_id,
                ", ".join(map(str, retried)) or "none",
                describe_exception(exc),
            )
            return aborted, 0

    def _prune_log(self, query_id: str, batch_id: int, finished: Sequence[int]) -> None:
        """Forget finished batches older than the retention; replays only ever concern the
        latest batch, and the ordering check only needs the newest decision. ``finished``:
        the query's finished batches as the batch's one listing saw them (a batch finished
        since is forgotten after the next batch)."""
        done = self._beyond_retention(batch_id, finished)
        if done:
            self.commit_log.forget(query_id, done)

    def _beyond_retention(self, batch_id: int, finished: Sequence[int]) -> list[int]:
        horizon = batch_id - self.log_retention
        return [b for b in finished if b <= horizon]

    def _log_batches_after(self, state: BatchState, batch_id: int) -> int:
        """Batches the log holds for the query once this batch is decided and the log
        pruned (computed from the batch's one listing: no further reads)."""
        held = set(state.decided) | {batch_id}
        return len(held) - len(self._beyond_retention(batch_id, state.finished))

    def _finish(self, metrics: BatchMetrics, started: float) -> BatchMetrics:
        metrics = replace(metrics, total_seconds=time.monotonic() - started)
        _log.info(metrics.summary())
        return metrics

    def _collect(
        self,
        reports: Sequence[TaskReport],
        query_id: str,
        batch_id: int,
        partitions_run: int | None,
    ) -> list[Committable]:
        """The batch's committables, one per partition, or :class:`BatchFailedError`:
        a partition that rejected its data, a report missing, a committable of another
        batch. ``partitions_run``: how many partitions the engine ran (it knows that apart
        from the reports, so a lost last report is caught too); ``None`` where it cannot
        tell (``format("twopc")``: Spark hands its commit one message per task it ran)."""
        by_partition: dict[int, TaskReport] = {}
        for report in reports:
            by_partition.setdefault(report.partition, report)
        rejected = [r for r in by_partition.values() if r.outcome is TaskOutcome.REJECTED]
        if rejected:
            first = min(rejected, key=lambda r: r.partition)
            cause = first.rejection().at(sink_id=self.sink_id, batch_id=batch_id)
            raise BatchFailedError(
                f"{cause.cause_message} ({len(rejected)} of {len(by_partition)} partition(s) "
                f"rejected their data; {_WHAT_STAYS[self.path]})",
                sink_id=self.sink_id,
                batch_id=batch_id,
                partition=first.partition,
            ) from cause
        count = len(by_partition) if partitions_run is None else partitions_run
        expected = set(range(count))
        if set(by_partition) != expected:
            missing = sorted(expected - set(by_partition))
            raise BatchFailedError(
                f"phase 1 ran {count} partition(s) but reported partitions "
                f"{_ranges(sorted(by_partition))}"
                + (f": no report of partition(s) {_ranges(missing)}" if missing else "")
                + f" ({_WHAT_STAYS[self.path]})",
                sink_id=self.sink_id,
                batch_id=batch_id,
                partition=missing[0] if missing else None,
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

    def _abort_batch(self, query_id: str, batch_id: int) -> None:
        """Phase 1 failed: abort what the batch prepared, including attempts that never
        reported back (failed or speculative tasks), and sweep what never prepared. Only
        this batch: pending decisions of other batches are the next recovery's."""
        try:
            if self._driver is not None:
                prepared = [
                    c
                    for c in self._list_prepared(self._driver)
                    if (c.query_id, c.batch_id) == (query_id, batch_id)
                ]
                self._abort(self._driver, prepared, "prepared work of the failed batch")
            self._sweep()
        except Exception:
            _log.exception(
                "twopc sink=%s batch %d: clean-up after a failed phase 1 failed; the next "
                "run's recovery will retry it",
                self.sink_id,
                batch_id,
            )

    # -- batches whose tasks ran first: format("twopc") -------------------------------------

    def plan_reported(
        self, query_id: str, batch_id: int, *, input_fingerprint: str | None = None
    ) -> bool:
        """Where a batch whose tasks run before the coordinator is asked gets planned, before
        any of its tasks starts (``format("twopc")``: in the process that plans them). Returns
        whether the batch is decided already: a replay, whose tasks must then write nothing
        (their markers may be gone, and a driver-commit sink has none to look at).

        Otherwise it makes the checks that must come before anything is written, as
        :meth:`run_batch` does before phase 1: the log and the target's markers agree (no
        checkpoint put back from an older copy), the markers of a partly committed batch
        still exist, and undecided prepared work an earlier run left is aborted. The run is
        then recorded, with its partition count unknown until :meth:`commit_reported`, so
        that a crash during the tasks leaves its shape and age in the log."""
        listing = self.commit_log.listing()
        self._finish_all(self.commit_log.pending(listing))
        state = self.commit_log.batch_state(query_id, batch_id, listing)
        if state.decision is not None:
            self._guard.same_input(state.runs, input_fingerprint, query_id, batch_id)
            return True
        self._guard.order(query_id, batch_id, state.newest_decided)
        self._guard.markers_not_ahead(query_id, batch_id, state)
        self._guard.markers_kept(state.runs, query_id, batch_id)
        if self._driver is not None:
            self._abort_undecided(self._driver)
        self._sweep()
        planned = self._this_run(0, input_fingerprint)
        self.commit_log.record_run(query_id, batch_id, planned, known=state.runs)
        return False

    def commit_reported(
        self,
        query_id: str,
        batch_id: int,
        reports: Sequence[TaskReport | None],
        *,
        input_fingerprint: str | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> BatchMetrics:
        """Decide and commit a batch whose tasks already ran, from their reports (one per
        partition, ``None`` where a task failed). For ``format("twopc")``: Spark runs phase
        1 first and calls ``commit`` in a fresh process per batch, with nothing else.

        The rules of :meth:`run_batch` in another order. The log is listed once, and that
        listing serves finishing decided batches, the replay checks and the clean-up of
        earlier runs. A batch already decided is a replay: its tasks prepared again before
        the coordinator saw it, so that work is aborted (driver path; the task path's
        markers made them write nothing) and the batch counts as skipped. Speculative
        copies cannot be observed, so every commit cleans up as if one had run.
        ``source_offsets`` go to the progress group after the commit (again for a replay).
        Raises when the batch cannot commit; nothing of it is then visible (driver path) or
        a replay finishes it (task path)."""
        started = time.monotonic()
        listing = self.commit_log.listing()
        # before this batch's run is recorded; only in-task sinks need earlier runs
        earlier = self._runs_before_this_process(listing) if self._in_task is not None else []
        finished = self._finish_all(self.commit_log.pending(listing))
        state = self.commit_log.batch_state(query_id, batch_id, listing)
        # the tasks ran before this check: their own markers show this batch
        self._guard.markers_not_ahead(query_id, batch_id, state, tasks_ran=True)
        self.check_progress()
        base = BatchMetrics(
            self.sink_id,
            query_id,
            batch_id,
            status=BatchStatus.SKIPPED,
            backend=self.sink.backend_name,
            recovered_committed=finished,
            commit_log_batches=len(state.decided),
        )
        present = [r for r in reports if r is not None]
        if state.decision is not None:
            self._guard.same_input(state.runs, input_fingerprint, query_id, batch_id)
            _log.info(
                "twopc sink=%s: batch %d of query %s is already committed; the replay's work "
                "is discarded",
                self.sink_id,
                batch_id,
                query_id,
            )
            # The decision was finished before the replay's tasks started (the writer
            # finishes decided batches where it is planned), so none of their work is
            # decided, even where an attempt id repeats one of the decision's (Spark counts
            # task attempts from 0 again after a restart).
            aborted = self._abort_reported(present, keep=None)
            published = self.publish_progress(state.decision, source_offsets)
            skipped = replace(base, recovered_aborted=aborted, swept=self._sweep())
            return self._finish(metrics_with_progress(skipped, published), started)
        failed = [index for index, report in enumerate(reports) if report is None]
        if failed:
            self._abort_batch(query_id, batch_id)
            raise BatchFailedError(
                f"the task(s) of partition(s) {failed} failed ({_WHAT_STAYS[self.path]})",
                sink_id=self.sink_id,
                batch_id=batch_id,
                partition=failed[0],
            )
        run = self._record_reported_run(query_id, batch_id, state, len(reports), input_fingerprint)
        try:
            # Spark's commit gets one message per task it ran, so len(reports) is Spark's
            # own count of the batch's partitions (a failed task's message is None)
            committables = self._collect(present, query_id, batch_id, len(reports))
        except BaseException:
            self._abort_batch(query_id, batch_id)
            raise
        written_at = time.monotonic()
        decision, decided_at, retries = self._decide_and_commit(
            query_id, batch_id, committables, state, source_offsets
        )
        committed_at = time.monotonic()
        published = self.publish_progress(decision)
        cleaned = self._clean_up_reported(decision, run, earlier)
        tasks = tuple(r.metrics for r in sorted(present, key=lambda r: r.partition))
        metrics = replace(
            base,
            status=BatchStatus.COMMITTED,
            partitions=len(present),
            rows=sum(t.rows for t in tasks),
            bytes=sum(t.bytes for t in tasks),
            write_seconds=max((t.seconds for t in tasks), default=0.0),
            decide_seconds=decided_at - written_at,
            commit_seconds=committed_at - decided_at,
            commit_retries=retries,
            recovered_aborted=cleaned.aborted,
            swept=cleaned.swept,
            lingering_aborted=cleaned.lingering,
            commit_log_batches=self._log_batches_after(state, batch_id),
            tasks=tasks,
        )
        return self._finish(metrics_with_progress(metrics, published), started)

    def abort_reported(
        self, query_id: str, batch_id: int, reports: Sequence[TaskReport | None]
    ) -> None:
        """Spark gave up on a batch whose tasks already ran (a task failed, or ``commit``
        raised): abort what its tasks prepared, except what a recorded decision holds (a
        restart commits that), and remove what never prepared. Tasks that committed in the
        task stay committed; their markers make the replay skip them."""
        decision = self.commit_log.decision(query_id, batch_id)
        if decision is None:
            self._abort_batch(query_id, batch_id)
            return
        self._abort_reported([r for r in reports if r is not None], keep=decision)
        self._sweep()

    def _abort_reported(self, reports: Sequence[TaskReport], keep: Decision | None) -> int:
        """Abort the reported work that ``keep`` does not hold (all of it without one): a
        replay's, a losing attempt's."""
        if self._driver is None:
            return 0
        work = [
            r.committable
            for r in reports
            if r.committable is not None and (keep is None or not keep.contains(r.committable))
        ]
        self._abort(self._driver, work, "work of a replayed batch that is already committed")
        return len(work)

    def _clean_up_reported(
        self, decision: Decision, run: BatchRun, earlier: Sequence[BatchRun]
    ) -> RecoveryStats:
        """After the commit: abort whatever no decision holds (losing copies of this batch's
        tasks, work a crash left), let an in-task sink abort what earlier runs with another
        naming or more partitions left open, and remove unprepared leftovers. Logged, never
        raised: the batch is committed and the next batch cleans up again."""
        try:
            aborted = self._abort_undecided(self._driver) if self._driver is not None else 0
            lingering = 0
            if self._in_task is not None:
                with leaving_sink(
                    self.sink_id, what="aborting an earlier run's open work failed: "
                ):
                    for footprint in _not_covered(earlier, run.footprint):
                        lingering += self._in_task.sweep_lingering(self.sink_id, footprint)
            return RecoveryStats(
                aborted=aborted + lingering, swept=self._sweep(), lingering=lingering
            )
        except Exception as exc:
            _log.warning(
                "twopc sink=%s: batch %d is committed, but the clean-up after it failed; the "
                "next batch retries: %s",
                self.sink_id,
                decision.batch_id,
                describe_exception(exc),
            )
            return RecoveryStats()

    # -- finishing a decision ------------------------------------------------------------------

    def _mark_done(self, decision: Decision) -> int:
        """Task path: the tasks committed before the decision was written; only the log
        lags."""
        self.commit_log.mark_done(decision.query_id, decision.batch_id)
        return 0

    def _commit_recovered(self, decision: Decision) -> int:
        return self._commit_decision(decision, recovering=True)

    def _commit_decision(self, decision: Decision, *, recovering: bool = False) -> int:
        """Driver path: commit a decided batch partition by partition, then mark it done;
        idempotent, so recovery may run it again after a crash anywhere in it."""
        driver = self._driver
        if driver is None:
            raise ConfigurationError(
                f"batch {decision.batch_id} of query {decision.query_id} was decided for a "
                f"commit on the driver, but {type(self.sink).__name__} cannot commit on the "
                "driver: restart the query with the sink options it ran with when the batch "
                "was decided (e.g. the SQL transaction_mode), let it finish that batch, "
                "then change them",
                sink_id=self.sink_id,
                batch_id=decision.batch_id,
            )
        retries = 0
        if recovering:
            self._fire(CrashPoint.RECOVERY_BEFORE_COMMIT, decision.batch_id)
        between = CrashPoint.RECOVERY_BETWEEN_COMMITS if recovering else CrashPoint.BETWEEN_COMMITS
        for index, committable in enumerate(decision.committables):
            if index == 1:
                self._fire(between, decision.batch_id)
            retries += self._commit_all(driver, [committable])
        with leaving_sink(self.sink_id, decision.batch_id, wrap=CommitError):
            driver.batch_committed(decision.committables)
        self.commit_log.mark_done(decision.query_id, decision.batch_id)
        return retries

    def _commit_all(self, driver: CommitsOnDriver, committables: Sequence[Committable]) -> int:
        first = committables[0]
        partition = first.partition if len(committables) == 1 else None

        def commit() -> None:
            with leaving_sink(self.sink_id, first.batch_id, partition, wrap=CommitError):
                driver.commit(committables)

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
        return retries

    def _fire(self, point: CrashPoint, batch_id: int) -> None:
        if self.faults:
            self.faults.fire(point, sink_id=self.sink_id, batch_id=batch_id)


def metrics_with_progress(metrics: BatchMetrics, published: Published) -> BatchMetrics:
    if published.offsets is None:
        return metrics
    return replace(
        metrics,
        source_offsets=published.offsets.to_json()["topics"],
        source_lag=published.lag,
        progress_error=published.error,
    )


def _ranges(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0..2, 5`` (a batch may have thousands of partitions)."""
    if not numbers:
        return "none"
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}..{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)


def _partition_count(engine: BatchEngine) -> int:
    """Partitions the engine will run, if it can tell before phase 1; 0 when unknown."""
    try:
        value = engine.partition_count()
    except Exception:
        _log.debug("the engine could not tell its partition count", exc_info=True)
        return 0
    return int(value) if value else 0


def _not_covered(earlier: Sequence[BatchRun], current: Footprint) -> list[Footprint]:
    """Footprints of earlier runs that this run's tasks did not reuse (another naming, or
    partitions this run does not have): only those can still hold open work."""
    current_naming = json.dumps(current.naming, sort_keys=True)
    found: dict[str, Footprint] = {}
    for run in earlier:
        footprint = run.footprint
        same_naming = json.dumps(footprint.naming, sort_keys=True) == current_naming
        if same_naming and footprint.partitions <= current.partitions:
            continue
        found.setdefault(json.dumps(footprint.to_json(), sort_keys=True), footprint)
    return list(found.values())

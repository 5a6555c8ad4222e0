"""The durable decision and phase 2: record the decision over a batch's committables,
then finish it the way it was made (commit on the driver, or mark the batch done where
its tasks committed), with bounded retries. Recovery finishes a pending decision through
the same code, so a crash anywhere in phase 2 is finished exactly as a batch is."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from twopc._contract.boundary import leaving_sink
from twopc._contract.paths import CommitPath
from twopc._contract.retry import RetryPolicy, call_with_retries
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.publishing import Publisher
from twopc._coordination.records import BatchState, DecidedProgress, Decision
from twopc.errors import CommitError, ConfigurationError, TwoPCError
from twopc.faults import CrashPoint, FaultPlan
from twopc.protocol import CommitsOnDriver, Committable, Sink

__all__ = ["Decided", "Decider"]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class Decided:
    """A batch decided and finished: its decision, when the decision was recorded
    (monotonic clock) and how many commit calls were retried."""

    decision: Decision
    decided_at: float
    retries: int
    log_batches: int
    """Batches the log holds for the query afterwards (pruned)."""


class Decider:
    """Decides and finishes the batches of one sink.

    Args:
        abort_batch: called when recording a decision failed and no decision exists: the
            batch's prepared work must then never become visible.
    """

    def __init__(
        self,
        sink: Sink[Any],
        sink_id: str,
        commit_log: CommitLog,
        *,
        retry: RetryPolicy,
        faults: FaultPlan | None,
        publisher: Publisher,
        log_retention: int,
        sleep: Callable[[float], None],
        abort_batch: Callable[[str, int], None],
    ) -> None:
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.path = CommitPath.of(sink)
        self.retry = retry
        self.faults = faults
        self.log_retention = log_retention
        self._publisher = publisher
        self._sleep = sleep
        self._abort_batch = abort_batch
        self._driver = sink if isinstance(sink, CommitsOnDriver) else None

    def decide_and_commit(
        self,
        query_id: str,
        batch_id: int,
        committables: Sequence[Committable],
        state: BatchState,
        progress: DecidedProgress | None = None,
    ) -> Decided:
        """Record the decision over phase 1's committables, then finish it. Without a
        decision nothing of the batch may become visible, so a failure to record it aborts
        phase 1's work."""
        decision = Decision(
            self.sink_id,
            query_id,
            batch_id,
            tuple(committables),
            path=self.path,
            progress=progress,
        )
        try:
            self.fire(CrashPoint.BEFORE_DECISION, batch_id)
            self.commit_log.record_decision(decision)
        except Exception:
            if self.commit_log.decision(query_id, batch_id) is None:
                self._abort_batch(query_id, batch_id)
            raise
        decided_at = time.monotonic()
        self.fire(CrashPoint.AFTER_DECISION, batch_id)
        retries = self.finish(decision, self.path)
        self.fire(CrashPoint.AFTER_COMMIT, batch_id)
        self._prune_log(query_id, batch_id, state.finished)
        return Decided(decision, decided_at, retries, self._log_batches_after(state, batch_id))

    def finish_pending(self, decision: Decision) -> None:
        """Finish a batch decided before a crash, the way it was decided (whatever the
        sink's mode is now), and publish its progress."""
        _log.info(
            "twopc sink=%s: finishing batch %d of query %s decided before a crash",
            self.sink_id,
            decision.batch_id,
            decision.query_id,
        )
        self.finish(decision, decision.path or self.path, recovering=True)
        self._publisher.publish(decision)

    def finish(self, decision: Decision, path: CommitPath, *, recovering: bool = False) -> int:
        """Phase 2 of a decided batch; returns the commit's retries."""
        if path is CommitPath.TASK:
            # the tasks committed before the decision was written; only the log lags
            self.commit_log.mark_done(decision.query_id, decision.batch_id)
            return 0
        return self._commit_decision(decision, recovering=recovering)

    def _commit_decision(self, decision: Decision, *, recovering: bool) -> int:
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
            self.fire(CrashPoint.RECOVERY_BEFORE_COMMIT, decision.batch_id)
        between = CrashPoint.RECOVERY_BETWEEN_COMMITS if recovering else CrashPoint.BETWEEN_COMMITS
        previous: Committable | None = None
        for index, committable in enumerate(decision.committables):
            if index == 1:
                self.fire(between, decision.batch_id)
            if previous is not None and previous.sink_id != committable.sink_id and not recovering:
                self.fire(CrashPoint.BETWEEN_MEMBERS, decision.batch_id)  # a group's
            retries += self.commit(driver, [committable])
            previous = committable
        with leaving_sink(self.sink_id, decision.batch_id, wrap=CommitError):
            driver.batch_committed(decision.committables)
        self.commit_log.mark_done(decision.query_id, decision.batch_id)
        return retries

    def commit(self, driver: CommitsOnDriver, committables: Sequence[Committable]) -> int:
        """Commit decided work with the retry policy; returns the retries."""
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

    def fire(self, point: CrashPoint, batch_id: int) -> None:
        """A crash point of the fault plan (tests, the demo); nothing when faults are off."""
        if self.faults:
            self.faults.fire(point, sink_id=self.sink_id, batch_id=batch_id)

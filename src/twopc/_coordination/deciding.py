"""The durable decision and phase 2: record the decision over a batch's committables,
then finish it the way it was made (commit on the driver, or mark the batch done where
its tasks committed), with bounded retries. Recovery finishes a pending decision through
the same code, so a crash anywhere in phase 2 is finished exactly as a batch is.

A group with a last resource (Kafka ``atomic``) records a *conditional* decision first (the
other members' work, and which member decides), then runs the last resource, whose commit
is the decision: XA's last-resource commit, decision 41."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from twopc._contract.boundary import describe_exception, leaving_sink
from twopc._contract.paths import CommitPath
from twopc._contract.retry import RetryPolicy, call_with_retries
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.in_doubt import InDoubtWork
from twopc._coordination.publishing import Publisher
from twopc._coordination.records import BatchState, DecidedProgress, Decision
from twopc._coordination.reports import TaskReport
from twopc._coordination.retry_tally import RetryTally
from twopc.errors import BatchFailedError, CommitError, ConfigurationError, TwoPCError
from twopc.faults import CrashPoint, FaultPlan
from twopc.groups import SinkGroup
from twopc.progress import SourceOffsets
from twopc.protocol import CommitsOnDriver, Committable, Sink

__all__ = [
    "DEFAULT_COMMIT_PARALLELISM",
    "Decided",
    "Decider",
    "DecisionMade",
    "LastResourceRun",
    "check_commit_parallelism",
]

_log = logging.getLogger("twopc")

MARKER_PRUNE_EVERY = 100
"""Batches between two prunings of the target's markers (one statement each time)."""

DEFAULT_COMMIT_PARALLELISM = 8
"""Commit calls the driver runs at once in phase 2 by default (a sink that commits
concurrently): a 60-partition PostgreSQL batch commits in about a tenth of the time it
takes one after another, on 8 connections."""


def check_commit_parallelism(value: int) -> int:
    """``commit_parallelism`` checked: a whole number, 1 (one commit after another) to 256."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 256:
        raise ConfigurationError(
            f"commit_parallelism must be a whole number from 1 to 256, not {value!r}"
        )
    return value


@dataclass(frozen=True)
class Decided:
    """A batch decided and finished: its decision, when the decision was recorded
    (monotonic clock) and how many commit calls were retried."""

    decision: Decision
    decided_at: float
    retries: int
    log_batches: int
    """Batches the log holds for the query afterwards (pruned)."""
    last_resource_reports: tuple[TaskReport, ...] = ()
    """The reports of a group's last resource (it ran after the decision was recorded)."""


@dataclass(frozen=True)
class DecisionMade:
    """A batch's decision, durable (and, for a group with a last resource, its last
    resource committed); its phase 2 not yet run."""

    decision: Decision
    decided_at: float
    """When the decision was recorded (monotonic clock)."""
    last_resource_reports: tuple[TaskReport, ...] = ()


@dataclass(frozen=True)
class LastResourceRun:
    """A group's last resource, ready to run: its member sink id, and its phase 1 (whose
    task commits the one transaction that decides the batch), returning its reports and
    committables."""

    sink_id: str
    run: Callable[[], tuple[list[TaskReport], list[Committable]]]


class Decider:
    """Decides and finishes the batches of one sink.

    Args:
        abort_batch: called when recording a decision failed and no decision exists: the
            batch's prepared work must then never become visible.
        commit_parallelism: at most this many commit calls at once in phase 2, for a sink
            that commits concurrently (:meth:`~twopc.CommitsOnDriver.commits_concurrently`).
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
        commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM,
    ) -> None:
        self.sink = sink
        self.commit_parallelism = check_commit_parallelism(commit_parallelism)
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
        self.in_doubt = InDoubtWork()
        """Decided-but-unfinished and prepared-but-undecided work, for the metrics."""
        self.retries = RetryTally()
        """Commit calls retried, taken by each batch's metrics."""

    def decide_and_commit(
        self,
        query_id: str,
        batch_id: int,
        committables: Sequence[Committable],
        state: BatchState,
        *,
        progress: DecidedProgress | None = None,
        last_resource: LastResourceRun | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> Decided:
        """Record the decision over phase 1's committables (:meth:`decide`), then finish it
        (:meth:`commit_decided`)."""
        made = self.decide(
            query_id,
            batch_id,
            committables,
            progress=progress,
            last_resource=last_resource,
            source_offsets=source_offsets,
        )
        return self.commit_decided(made, state)

    def decide(
        self,
        query_id: str,
        batch_id: int,
        committables: Sequence[Committable],
        *,
        progress: DecidedProgress | None = None,
        last_resource: LastResourceRun | None = None,
        source_offsets: SourceOffsets | None = None,
    ) -> DecisionMade:
        """Record the decision over phase 1's committables. Without a decision nothing of
        the batch may become visible, so a failure to record it aborts phase 1's work. With
        a ``last_resource``, the record is conditional and the last resource's commit
        decides (:meth:`_run_last_resource`). The decision records the batch's
        ``source_offsets``, and the committables it commits carry them."""
        decision = Decision(
            self.sink_id,
            query_id,
            batch_id,
            tuple(c.with_source_offsets(source_offsets) for c in committables),
            path=self.path,
            progress=progress,
            last_resource=last_resource.sink_id if last_resource else None,
            source_offsets=source_offsets,
        )
        try:
            self.fire(CrashPoint.BEFORE_DECISION, batch_id)
            self.commit_log.record_decision(decision)
            self.in_doubt.decided(decision)
        except Exception:
            if self.commit_log.decision(query_id, batch_id) is None:
                self._abort_batch(query_id, batch_id)
            raise
        last_reports: list[TaskReport] = []
        if last_resource is not None:
            self.fire(CrashPoint.BEFORE_LAST_RESOURCE, batch_id)
            last_reports = self._run_last_resource(decision, last_resource)
            self.fire(CrashPoint.AFTER_LAST_RESOURCE, batch_id)
        return DecisionMade(decision, time.monotonic(), tuple(last_reports))

    def commit_decided(self, made: DecisionMade, state: BatchState) -> Decided:
        """Phase 2 of a batch :meth:`decide` just decided, then the log pruned. ``state``:
        the query's log as the batch's one listing saw it. May run in a thread of its own
        (``background_commit``): the decision is durable, so a crash before it ends is
        finished by recovery."""
        decision = made.decision
        self.fire(CrashPoint.AFTER_DECISION, decision.batch_id)
        retries = self.finish(decision, self.path)
        self.fire(CrashPoint.AFTER_COMMIT, decision.batch_id)
        self._prune_log(decision.query_id, decision.batch_id, state.finished)
        return Decided(
            decision,
            made.decided_at,
            retries,
            self._log_batches_after(state, decision.batch_id),
            made.last_resource_reports,
        )

    def _run_last_resource(self, decision: Decision, last: LastResourceRun) -> list[TaskReport]:
        """Run the last resource, whose commit decides the batch. When its run fails, its
        transaction may have committed anyway (a lost reply): fence it and read its marker.
        Committed, the batch goes on as decided; not committed, the conditional decision is
        withdrawn, every member's work aborted, and the batch fails."""
        try:
            reports, found = last.run()
        except Exception as exc:
            if self.last_resource_committed(decision):
                _log.warning(
                    "twopc sink=%s: batch %d: the last resource %s failed (%s), but its marker "
                    "shows the batch committed: the batch is decided, the other members commit",
                    self.sink_id,
                    decision.batch_id,
                    last.sink_id,
                    describe_exception(exc),
                )
                return []
            self.withdraw(decision)
            raise BatchFailedError(
                f"the group's last resource {last.sink_id} did not commit the batch, so no "
                f"member did (their prepared work is aborted): {describe_exception(exc)}",
                sink_id=self.sink_id,
                batch_id=decision.batch_id,
            ) from exc
        _log.debug(
            "twopc sink=%s: batch %d decided by its last resource %s (%d committable(s))",
            self.sink_id,
            decision.batch_id,
            last.sink_id,
            len(found),
        )
        return reports

    def last_resource_committed(self, decision: Decision) -> bool:
        """Whether the last resource of a conditional decision committed its batch, asked
        after fencing its open transactions (so the answer cannot change later)."""
        assert decision.last_resource is not None
        group = self.sink
        if not isinstance(group, SinkGroup):
            raise ConfigurationError(
                f"batch {decision.batch_id} of query {decision.query_id} was written by a "
                f"SinkGroup whose last resource {decision.last_resource} decides it; recover "
                f"it with that group, not with {type(group).__name__}",
                sink_id=self.sink_id,
                batch_id=decision.batch_id,
            )
        with leaving_sink(
            self.sink_id,
            decision.batch_id,
            what=f"asking the last resource {decision.last_resource} whether it committed: ",
        ):
            committed = group.last_resource_committed(
                decision.last_resource, decision.query_id, decision.batch_id
            )
        _log.info(
            "twopc sink=%s: batch %d of query %s: its last resource %s %s the batch",
            self.sink_id,
            decision.batch_id,
            decision.query_id,
            decision.last_resource,
            "committed" if committed else "did not commit (fenced: it never will)",
        )
        return committed

    def withdraw(self, decision: Decision) -> None:
        """A conditional decision whose last resource did not commit: remove it, then abort
        the batch's prepared work (a crash in between leaves that work undecided, which
        recovery aborts)."""
        self.commit_log.withdraw_decision(decision)
        self.in_doubt.finished(decision.query_id, decision.batch_id)
        self._abort_batch(decision.query_id, decision.batch_id)

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
            self.in_doubt.finished(decision.query_id, decision.batch_id)
            return 0
        return self._commit_decision(decision, recovering=recovering)

    def _commit_decision(self, decision: Decision, *, recovering: bool) -> int:
        """Driver path: commit a decided batch unit by unit (partition by partition unless
        the sink says otherwise, :meth:`~twopc.CommitsOnDriver.commit_units`), then mark it
        done; idempotent, so recovery may run it again after a crash anywhere in it.

        The first unit commits alone, so that ``between_commits`` falls between two
        commits; a group's members commit one after another (``between_members`` between
        them); within a member, a sink that commits concurrently gets its units committed
        side by side (:meth:`_commit_member`)."""
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
        if recovering:
            self.fire(CrashPoint.RECOVERY_BEFORE_COMMIT, decision.batch_id)
        units = driver.commit_units(decision.committables)
        retries = 0
        if units:
            retries += self.commit(driver, units[0])
        if len(units) > 1:
            between = (
                CrashPoint.RECOVERY_BETWEEN_COMMITS if recovering else CrashPoint.BETWEEN_COMMITS
            )
            self.fire(between, decision.batch_id)
        side_by_side = self.commit_parallelism if driver.commits_concurrently() else 1
        previous = units[0][-1] if units else None
        for member in _member_runs(units[1:]):
            if previous is not None and previous.sink_id != member[0][0].sink_id and not recovering:
                self.fire(CrashPoint.BETWEEN_MEMBERS, decision.batch_id)  # a group's
            retries += self._commit_member(driver, member, side_by_side)
            previous = member[-1][-1]
        with leaving_sink(self.sink_id, decision.batch_id, wrap=CommitError):
            driver.batch_committed(decision.committables)
        self.commit_log.mark_done(decision.query_id, decision.batch_id)
        self.in_doubt.finished(decision.query_id, decision.batch_id)
        return retries

    def _commit_member(
        self, driver: CommitsOnDriver, units: Sequence[Sequence[Committable]], threads: int
    ) -> int:
        """Commit one member's units: one after another, or, with ``threads`` above 1, as
        that many contiguous shares, each one :meth:`commit` call in a thread of its own.
        Every share runs to its end (with its retries) before the first error is raised,
        so no commit of this batch still runs once phase 2 has failed."""
        shares = _shares(units, threads)
        if len(shares) <= 1:
            return sum(self.commit(driver, unit) for unit in units)
        with ThreadPoolExecutor(len(shares), thread_name_prefix="twopc-commit") as pool:
            futures = [pool.submit(self.commit, driver, share) for share in shares]
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            raise failed[0]  # type: ignore[misc]  # an exception, not None
        return sum(f.result() for f in futures)

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
                self._counted_sleep,
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

    def _counted_sleep(self, seconds: float) -> None:
        """The wait before a commit's retry, counted (:class:`RetryTally`)."""
        self.retries.add()
        self._sleep(seconds)

    def _prune_log(self, query_id: str, batch_id: int, finished: Sequence[int]) -> None:
        """Forget finished batches older than the retention; replays only ever concern the
        latest batch, and the ordering check only needs the newest decision. ``finished``:
        the query's finished batches as the batch's one listing saw them (a batch finished
        since is forgotten after the next batch). Every :data:`MARKER_PRUNE_EVERY` batches
        the target's markers older than the retention go too
        (:meth:`~twopc.Sink.forget_markers`)."""
        done = self._beyond_retention(batch_id, finished)
        if done:
            self.commit_log.forget(query_id, done)
        horizon = batch_id - self.log_retention
        if horizon > 0 and batch_id % MARKER_PRUNE_EVERY == 0:
            self._forget_markers(query_id, horizon)

    def _forget_markers(self, query_id: str, before_batch: int) -> None:
        try:
            gone = self.sink.forget_markers(self.sink_id, query_id, before_batch)
        except Exception as exc:
            _log.warning(
                "twopc sink=%s: deleting the markers of query %s's batches before %d "
                "failed (%s); the next pruning tries again",
                self.sink_id,
                query_id,
                before_batch,
                describe_exception(exc),
            )
            return
        if gone:
            _log.info(
                "twopc sink=%s: deleted %d marker(s) of query %s's batches before %d",
                self.sink_id,
                gone,
                query_id,
                before_batch,
            )

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


def _member_runs(
    units: Sequence[Sequence[Committable]],
) -> list[list[Sequence[Committable]]]:
    """Consecutive units of the same sink id (a group's member, or the sink itself)."""
    runs: list[list[Sequence[Committable]]] = []
    for unit in units:
        if runs and runs[-1][-1][0].sink_id == unit[0].sink_id:
            runs[-1].append(unit)
        else:
            runs.append([unit])
    return runs


def _shares(units: Sequence[Sequence[Committable]], threads: int) -> list[list[Committable]]:
    """``units`` cut into at most ``threads`` contiguous shares of near-equal size, each
    share's committables in order (a sink's :meth:`~twopc.CommitsOnDriver.commit` takes
    any subset of a batch's committables)."""
    count = max(1, min(threads, len(units)))
    shares: list[list[Committable]] = []
    for index in range(count):
        start = index * len(units) // count
        end = (index + 1) * len(units) // count
        shares.append([c for unit in units[start:end] for c in unit])
    return [share for share in shares if share]

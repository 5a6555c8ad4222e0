"""The one sequence of checks a batch passes before anything of it may become visible, for
every entry point: the commit log is read once (one listing), the target's markers are not
ahead of the log, the progress group is this sink's, a decided batch is a replay (over the
same input, or refused), and a new run is in order, in the shape of a partly committed
earlier run, with that run's markers still there; then the run is recorded.

Entry points differ only in *when* they ask (:class:`When`): before the tasks run
(``foreach_batch``, ``write_batch``, the local engine), where ``format("twopc")`` plans its
tasks, and after those tasks ran, at its commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.publishing import Publisher
from twopc._coordination.records import BatchRun, BatchState, Decision, LogListing
from twopc._coordination.replay_guard import ReplayGuard
from twopc.protocol import Footprint, Sink

__all__ = ["Admission", "Admitted", "When"]


class When(Enum):
    """When a batch is admitted, relative to its tasks."""

    BEFORE_TASKS = "before_tasks"
    """The coordinator runs the tasks next: the run is recorded with the partition count
    the engine plans (0: not known)."""
    PLANNING = "planning"
    """``format("twopc")`` plans the tasks: the run is recorded with its count unknown."""
    AFTER_TASKS = "after_tasks"
    """``format("twopc")``'s commit: the tasks ran; the planned run gets its count."""


@dataclass(frozen=True)
class Admitted:
    """What admission found: the batch's state in the log, and either the decision of a
    replay (``replay``) or this run of a new batch, recorded (``run``)."""

    state: BatchState
    replay: Decision | None = None
    run: BatchRun | None = None


class Admission:
    """Admits the batches of one sink; remembers which queries' markers it checked."""

    def __init__(
        self,
        sink: Sink[Any],
        sink_id: str,
        commit_log: CommitLog,
        guard: ReplayGuard,
        publisher: Publisher,
    ) -> None:
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.path = CommitPath.of(sink)
        self._guard = guard
        self._publisher = publisher
        self._markers_checked: set[str] = set()

    def admit_batch(
        self,
        query_id: str,
        batch_id: int,
        *,
        partitions: int | Callable[[], int],
        input_fingerprint: str | None,
        when: When,
        listing: LogListing | None = None,
        before_run: Callable[[], None] | None = None,
    ) -> Admitted:
        """The whole sequence: read the log once, tell a replay, else admit and record the
        run. ``partitions`` (a count, or a function asked only for a new batch: it may cost the
        engine a call);
        ``before_run`` runs between the two (``format("twopc")``'s commit refuses a batch
        whose tasks failed there, before its run is recorded)."""
        state = self.read(query_id, batch_id, listing)
        replay = self.replay_of(state, query_id, batch_id, input_fingerprint, when)
        if replay is not None:
            return Admitted(state, replay=replay)
        if before_run is not None:
            before_run()
        run = self.admit(
            state,
            query_id,
            batch_id,
            partitions=partitions if isinstance(partitions, int) else partitions(),
            input_fingerprint=input_fingerprint,
            when=when,
        )
        return Admitted(state, run=run)

    def read(self, query_id: str, batch_id: int, listing: LogListing | None = None) -> BatchState:
        """What the log holds about the batch: the batch's one read of the log."""
        return self.commit_log.batch_state(query_id, batch_id, listing)

    def replay_of(
        self,
        state: BatchState,
        query_id: str,
        batch_id: int,
        input_fingerprint: str | None,
        when: When,
    ) -> Decision | None:
        """The batch's decision when it is a replay of a decided batch (whose input must be
        the same), else ``None``. First the check that holds for replays and new batches
        alike: the markers are not ahead of the log (once per query, and at every commit
        after the tasks ran, whose markers show the batch). A replay's progress group is
        checked here (not where tasks are planned: the commit checks it); a new batch's when
        its progress is planned (:meth:`~.publishing.Publisher.for_batch`)."""
        tasks_ran = when is When.AFTER_TASKS
        if tasks_ran or query_id not in self._markers_checked:
            self._guard.markers_not_ahead(query_id, batch_id, state, tasks_ran=tasks_ran)
            self._markers_checked.add(query_id)
        if state.decision is None:
            return None
        if when is not When.PLANNING:
            self._publisher.check()
        self._guard.same_input(state.runs, input_fingerprint, query_id, batch_id)
        return state.decision

    def admit(
        self,
        state: BatchState,
        query_id: str,
        batch_id: int,
        *,
        partitions: int,
        input_fingerprint: str | None,
        when: When,
    ) -> BatchRun:
        """Check that a batch that is not a replay may be written now, and record this run
        of it before any of its work becomes visible. ``partitions``: the count the engine
        plans (0: not known yet)."""
        if when is When.AFTER_TASKS:
            unknown = self.run(0, input_fingerprint)
            planned = [r for r in state.runs if r.same_shape(unknown) and r.path is self.path]
            if planned:
                return self._complete_planned(state, query_id, batch_id, planned[-1], partitions)
        run = self.run(partitions, input_fingerprint)
        # a planned run's count is not known: its shape is checked at the commit
        compare = None if when is When.PLANNING else state.runs
        self._guard.new_run(state, run, query_id, batch_id, compare=compare, markers=True)
        # Before tasks this process waits for, a driver-path run's fsync overlaps phase 1:
        # nothing of the batch can commit before its decision, which waits for it.
        defer = when is When.BEFORE_TASKS and self.path is CommitPath.DRIVER
        self.commit_log.record_run(query_id, batch_id, run, known=state.runs, defer_sync=defer)
        return run

    def _complete_planned(
        self, state: BatchState, query_id: str, batch_id: int, planned: BatchRun, partitions: int
    ) -> BatchRun:
        """The run recorded where the tasks were planned, now with its partition count. Its
        shape is checked against the earlier runs whose count is known; runs that crashed
        before their count was learnt cannot be compared (a documented limit of
        ``format("twopc")``)."""
        run = self.run(partitions, planned.input, planned.started_at)
        known = [r for r in state.runs if r.footprint.partitions]
        self._guard.new_run(state, run, query_id, batch_id, compare=known, markers=False)
        self.commit_log.replace_run(query_id, batch_id, planned, run)
        return run

    def learn_partitions(self, query_id: str, batch_id: int, run: BatchRun, count: int) -> None:
        """The engine could not tell the partition count up front; the reports do."""
        if run.footprint.partitions:
            return
        counted = replace(run, footprint=replace(run.footprint, partitions=count))
        self.commit_log.replace_run(query_id, batch_id, run, counted)

    def run(
        self, partitions: int, input_fingerprint: str | None, started_at: float | None = None
    ) -> BatchRun:
        """This sink's run of a batch: its naming, ``partitions`` (0: not known yet), the
        input and the commit path."""
        return BatchRun(
            Footprint(self.sink.naming(), partitions),
            input_fingerprint,
            path=self.path,
            started_at=time.time() if started_at is None else started_at,
        )

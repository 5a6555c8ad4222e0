"""Phase 1 of a :class:`~twopc.SinkGroup`: each member's phase 1 on its own engine (its
projection of the batch), one after the other, and the batch's committables taken member
by member, so that each member's completeness is checked against what its engine ran.

A group's last resource (Kafka ``atomic``) is not part of phase 1: the coordinator runs it
with :meth:`GroupEngine.run_last_resource` once the other members' work is recorded, since
its commit is the group's decision."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from twopc._contract.paths import CommitPath
from twopc._coordination.engine import BatchEngine
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc.groups import SinkGroup, member_sink_id
from twopc.protocol import Committable

__all__ = ["GroupEngine"]


_log = logging.getLogger("twopc")


class GroupEngine(BatchEngine):
    """Runs a group's phase 1: ``engines`` maps each member name to the engine of that
    member's projection of the batch."""

    def __init__(self, group: SinkGroup, engines: Mapping[str, BatchEngine]) -> None:
        if set(engines) != set(group.members):
            raise ValueError(f"engines for {sorted(engines)}, members {sorted(group.members)}")
        self.group = group
        self.engines = {name: engines[name] for name in group.members}
        self._reports: dict[str, list[TaskReport]] = {}
        self._task: Phase1Task | None = None

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        """Every member's phase 1 but the last resource's, in member order; the first
        failure ends it (the coordinator then aborts what the members prepared)."""
        self._reports = {}
        self._task = task
        for name, engine in self.engines.items():
            if name != self.group.last_resource:
                self._reports[name] = engine.run_phase1(self._member_task(task, name))
        return [report for reports in self._reports.values() for report in reports]

    def run_last_resource(self) -> tuple[list[TaskReport], list[Committable]]:
        """The last resource's phase 1, after :meth:`run_phase1`: its task commits its one
        transaction, which decides the group's batch. Returns its reports and committables
        (checked: one whole batch)."""
        name = self.group.last_resource
        if name is None or self._task is None:
            raise ValueError("run_last_resource needs a group with a last resource, after phase 1")
        task = self._member_task(self._task, name)
        engine = self.engines[name]
        reports = engine.run_phase1(task)
        found = engine.committables(
            reports,
            sink_id=task.sink_id,
            query_id=task.query_id,
            batch_id=task.batch_id,
            path=task.path,
        )
        return reports, found

    def _member_task(self, task: Phase1Task, name: str) -> Phase1Task:
        """The group's phase-1 task as one member runs it."""
        sink = self.group.members[name].sink
        return replace(
            task,
            sink=sink,
            sink_id=member_sink_id(task.sink_id, name),
            path=CommitPath.of(sink),
            concurrent_attempts=self.engines[name].concurrent_attempts(),
            partitions=_planned(self.engines[name]),
        )

    def committables(
        self,
        reports: Sequence[TaskReport],
        *,
        sink_id: str,
        query_id: str,
        batch_id: int,
        path: CommitPath,
    ) -> list[Committable]:
        """Each member's committables, as that member's engine puts them together (checked
        against what it ran): an error names the member's sink id and partition."""
        found: list[Committable] = []
        for name, engine in self.engines.items():
            if name == self.group.last_resource:
                continue  # it runs after these are recorded
            found += engine.committables(
                self._reports.get(name, []),
                sink_id=member_sink_id(sink_id, name),
                query_id=query_id,
                batch_id=batch_id,
                path=path,
            )
        return found

    def discard(self) -> None:
        for engine in self.engines.values():
            engine.discard()

    def concurrent_attempts(self) -> bool:
        return any(engine.concurrent_attempts() for engine in self.engines.values())

    def duplicate_attempts_possible(self) -> bool:
        return any(engine.duplicate_attempts_possible() for engine in self.engines.values())

    def wait_for_stragglers(self, timeout: float) -> bool:
        ended = [engine.wait_for_stragglers(timeout) for engine in self.engines.values()]
        return all(ended)


def _planned(engine: BatchEngine) -> int:
    """The partitions a member's engine plans (0 when it cannot tell before phase 1):
    what the member stores with its source offsets."""
    try:
        return int(engine.partition_count() or 0)
    except Exception:
        _log.debug("a member's engine could not tell its partition count", exc_info=True)
        return 0

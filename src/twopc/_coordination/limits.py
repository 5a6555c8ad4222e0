"""The target's limits on work a batch holds at once, checked before phase 1.

A PostgreSQL ``two_phase`` batch holds a prepared transaction per partition until it
commits, and every running task holds a connection: a batch wider than the server allows
would fail part-way, after most of its work, with the server's own message. The sink reads
its limits (:meth:`~twopc.Sink.work_limits`); here each batch's planned partitions (and the
tasks the engine runs at once) are held against them, and a batch that cannot fit is
refused with :class:`~twopc.TargetLimitError` before anything is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from twopc._coordination.engine import BatchEngine
from twopc._coordination.group_engine import GroupEngine
from twopc.errors import TargetLimitError
from twopc.groups import member_sink_id
from twopc.protocol import Sink, WorkLimit

__all__ = ["REFRESH_SECONDS", "WorkLimits", "needed"]

_log = logging.getLogger("twopc")

REFRESH_SECONDS = 300.0
"""How long a sink's limits, once read, are trusted (they are also read again after a
failed batch): a server's settings rarely change while it runs."""


def needed(limit: WorkLimit, partitions: int, slots: int | None) -> int | None:
    """How many of ``limit`` a batch of ``partitions`` holds at once: one per partition,
    or one per task running at once (``slots``: the engine's; ``None``: cannot tell)."""
    if limit.each_partition:
        return partitions
    if slots is None:
        return None
    return min(partitions, slots)


class WorkLimits:
    """One writer's view of its sinks' limits: read from the targets at the first batch,
    after a failed one (:meth:`forget`) and every :data:`REFRESH_SECONDS`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._read: dict[str, tuple[float, Sequence[WorkLimit]]] = {}

    def forget(self) -> None:
        """Read every sink's limits again at the next batch."""
        self._read.clear()

    def of(self, sink: Sink[Any], sink_id: str) -> Sequence[WorkLimit]:
        """``sink``'s limits, read again when older than :data:`REFRESH_SECONDS`; none
        (and a warning) when the target cannot tell."""
        now = self._clock()
        known = self._read.get(sink_id)
        if known is not None and now - known[0] < REFRESH_SECONDS:
            return known[1]
        try:
            limits = tuple(sink.work_limits())
        except Exception as exc:
            _log.warning(
                "twopc sink=%s: cannot read the target's limits (%s); batches are not "
                "checked against them",
                sink_id,
                exc,
            )
            limits = ()
        self._read[sink_id] = (now, limits)
        return limits

    def check_batch(
        self, sink: Sink[Any], sink_id: str, batch_id: int, engine: BatchEngine
    ) -> None:
        """:meth:`check` with the engine's planned partitions and task slots; a group's
        members are each held against their own targets."""
        if isinstance(engine, GroupEngine):
            for name, member in engine.engines.items():
                self.check(
                    engine.group.members[name].sink,
                    member_sink_id(sink_id, name),
                    batch_id,
                    member.planned_partitions,
                    member.task_slots,
                )
            return
        self.check(sink, sink_id, batch_id, engine.planned_partitions, engine.task_slots)

    def check(
        self,
        sink: Sink[Any],
        sink_id: str,
        batch_id: int,
        partitions: Callable[[], int],
        slots: Callable[[], int | None],
    ) -> None:
        """Refuse the batch when it needs more of any limit than the target allows; warn
        when it needs more than the target has free right now. ``partitions`` and
        ``slots`` are asked only when the sink has limits (the engine may pay a call)."""
        limits = self.of(sink, sink_id)
        if not limits:
            return
        count = partitions()
        if count <= 0:
            return  # not known before phase 1
        tasks = slots() if any(not limit.each_partition for limit in limits) else None
        for limit in limits:
            want = needed(limit, count, tasks)
            if want is None:
                continue
            if want > limit.allowed:
                raise TargetLimitError(
                    _refusal(sink, limit, want, count, tasks),
                    sink_id=sink_id,
                    batch_id=batch_id,
                )
            if limit.free is not None and want > limit.free:
                _log.warning(
                    "twopc sink=%s batch %d: the batch holds %s for each of %d %s, and the "
                    "target has %d of %d (%s) free right now: other clients hold the rest. "
                    "The batch fails if they still do when it gets there",
                    sink_id,
                    batch_id,
                    limit.holds,
                    want,
                    "partitions" if limit.each_partition else "tasks running at once",
                    limit.free,
                    limit.allowed,
                    limit.setting,
                )


def _refusal(
    sink: Sink[Any], limit: WorkLimit, want: int, partitions: int, slots: int | None
) -> str:
    """What a refused batch's error says: both numbers, and the fixes."""
    fix = f" ({limit.fix})" if limit.fix else ""
    if limit.each_partition:
        shape = (
            f"the batch has {partitions} partitions, and {sink.describe()} holds "
            f"{limit.holds} for each until the batch commits"
        )
        fewer = (
            f"write it in at most {limit.allowed} tasks (foreach_batch(..., "
            f"max_tasks={limit.allowed}) or write_batch(..., max_tasks={limit.allowed}): "
            "coalesced before phase 1)"
        )
    else:
        shape = (
            f"the batch runs {want} tasks at once ({partitions} partitions on {slots} task "
            f"slots), and {sink.describe()} holds {limit.holds} for each running task"
        )
        fewer = (
            f"run at most {limit.allowed} tasks at once (fewer executor cores, or "
            f"foreach_batch(..., max_tasks={limit.allowed}))"
        )
    return (
        f"{shape}, but the target's {limit.setting} allows only {limit.allowed}; nothing of "
        f"the batch was written. Either {fewer}, or raise {limit.setting}{fix}"
    )

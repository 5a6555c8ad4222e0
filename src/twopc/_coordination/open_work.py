"""How old a batch's open work is when it commits, against the age at which its target
aborts it (:meth:`~twopc.Sink.work_timeout`: Kafka's ``transaction.timeout.ms``).

A wider batch keeps its work open longer: a Kafka ``atomic`` task reads every partition
of the batch, and a driver-committed batch's first prepared work waits for the last task
and the decision. Past 80 % of the timeout a warning names the sink, batch, partition and
the setting, and the batch's metrics count it (``near_timeout``), before the target starts
aborting transactions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc.protocol import Sink, WorkTimeout

__all__ = ["NEAR", "OpenWork", "at_driver_commit", "in_task", "of_batch", "warn_if_near"]

_log = logging.getLogger("twopc")

NEAR = 0.8
"""The share of the timeout past which open work is reported."""


@dataclass(frozen=True)
class OpenWork:
    """The oldest open work of a batch when it committed, and how many partitions were
    past :data:`NEAR` of the timeout."""

    seconds: float = 0.0
    near_timeout: int = 0


def warn_if_near(
    timeout: WorkTimeout | None, age: float, sink_id: str, batch_id: int, partition: int
) -> bool:
    """Log a warning when ``age`` seconds passed :data:`NEAR` of ``timeout``; whether
    it did."""
    if timeout is None or timeout.seconds <= 0 or age < NEAR * timeout.seconds:
        return False
    _log.warning(
        "twopc sink=%s batch %d partition %d: its transaction is %.1f s old before its "
        "commit, %.0f%% of %s (%.1f s), after which the target aborts it; raise %s or "
        "write the batch in smaller pieces (see the backend's page, 'Wide batches')",
        sink_id,
        batch_id,
        partition,
        age,
        100 * age / timeout.seconds,
        timeout.setting,
        timeout.seconds,
        timeout.setting,
    )
    return True


def of_batch(
    sink: Sink[Any], sink_id: str, batch_id: int, reports: Sequence[TaskReport]
) -> OpenWork:
    """A batch's open work as its phase 2 starts: the work its tasks committed themselves
    (:func:`in_task`) and the prepared work waiting for the driver
    (:func:`at_driver_commit`)."""
    task_side = in_task(reports)
    prepared = [r for r in reports if r.outcome is TaskOutcome.PREPARED]
    if not prepared:
        return task_side
    driver_side = at_driver_commit(sink, sink_id, batch_id, prepared)
    return OpenWork(
        max(task_side.seconds, driver_side.seconds),
        task_side.near_timeout + driver_side.near_timeout,
    )


def in_task(reports: Sequence[TaskReport]) -> OpenWork:
    """Sinks that commit in their tasks: each task's work was open from its start to its
    commit (the task already warned where it ran)."""
    ages = [r.open_seconds for r in reports if r.open_seconds is not None]
    return OpenWork(max(ages, default=0.0), sum(1 for r in reports if r.near_timeout))


def at_driver_commit(
    sink: Sink[Any], sink_id: str, batch_id: int, reports: Sequence[TaskReport]
) -> OpenWork:
    """Driver-committed work, as phase 2 starts: each task's work has been open since its
    task began. Warns for the oldest partition past :data:`NEAR` of the timeout."""
    began = [(r.began_at, r.partition) for r in reports if r.began_at is not None]
    if not began:
        return OpenWork()
    now = time.time()
    first, partition = min(began)
    timeout = sink.work_timeout()
    near = 0
    if timeout is not None and timeout.seconds > 0:
        near = sum(1 for at, _ in began if now - at >= NEAR * timeout.seconds)
        warn_if_near(timeout, now - first, sink_id, batch_id, partition)
    return OpenWork(max(0.0, now - first), near)

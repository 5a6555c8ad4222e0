"""The target's limits on work a batch holds at once (issue 46): a batch wider than the
sink's :class:`~twopc.WorkLimit` allows is refused before phase 1, naming both numbers and
the fixes; one that only exceeds what is free right now is written with a warning."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.local
from twopc import SinkGroup, TargetLimitError, WorkLimit
from twopc._coordination.limits import WorkLimits
from twopc.testing import MemoryDriverSink, MemoryStore

pytestmark = pytest.mark.unit

PREPARED = WorkLimit(
    holds="a prepared transaction",
    setting="max_prepared_transactions",
    allowed=4,
    each_partition=True,
    free=2,
    fix="restart the server",
)
CONNECTIONS = WorkLimit(
    holds="a connection", setting="max_connections", allowed=3, each_partition=False
)


class LimitedSink(MemoryDriverSink):
    """A memory sink whose target allows ``limits``; counts the tasks that began."""

    def __init__(self, store: str, limits: Sequence[WorkLimit] = (), fail: bool = False) -> None:
        super().__init__(store)
        self.limits = list(limits)
        self.fail = fail
        self.reads = 0
        self.begun = 0

    def work_limits(self) -> Sequence[WorkLimit]:
        self.reads += 1
        if self.fail:
            raise OSError("the server is away")
        return self.limits

    def begin_transaction(self, ctx: twopc.TaskContext):  # type: ignore[no-untyped-def]
        self.begun += 1
        return super().begin_transaction(ctx)


def _parts(count: int) -> list[pa.Table]:
    return [pa.table({"id": pa.array([p], pa.int64())}) for p in range(count)]


def _writer(sink: twopc.Sink[object], tmp_path: Path, *, processes: bool = False):  # type: ignore[no-untyped-def]
    return twopc.local.foreach_batch(
        sink, "orders", commit_log=str(tmp_path / "log"), processes=processes
    )


def test_a_batch_wider_than_the_target_allows_is_refused_before_any_task(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = LimitedSink(store_name, [PREPARED])
    with pytest.raises(TargetLimitError) as caught:
        _writer(sink, tmp_path).write("q", 0, _parts(5))
    message = str(caught.value)
    assert caught.value.batch_id == 0 and caught.value.sink_id == "orders"
    assert "5 partitions" in message and "allows only 4" in message
    assert "max_prepared_transactions" in message and "max_tasks=4" in message
    assert "restart the server" in message and "nothing of the batch was written" in message
    assert sink.begun == 0 and store.visible == [] and store.prepared == {}
    # nothing recorded either: the batch is not a run of the query's log
    assert not list((tmp_path / "log").rglob("*.runs.json"))


def test_a_batch_that_fits_is_written_and_one_over_the_free_count_warns(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    sink = LimitedSink(store_name, [PREPARED])
    writer = _writer(sink, tmp_path)
    with caplog.at_level(logging.WARNING, logger="twopc"):
        writer.write("q", 0, _parts(2))
        assert "free right now" not in caplog.text
        writer.write("q", 1, _parts(4))
    assert sorted(store.visible) == [0, 0, 1, 1, 2, 3]
    assert "has 2 of 4 (max_prepared_transactions) free right now" in caplog.text


def test_a_per_task_limit_counts_the_tasks_running_at_once(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = LimitedSink(store_name, [CONNECTIONS])
    _writer(sink, tmp_path).write("q", 0, _parts(6))  # inline: one task at a time
    assert len(store.visible) == 6
    with pytest.raises(TargetLimitError, match=r"runs 6 tasks at once \(6 partitions on 6"):
        _writer(sink, tmp_path / "forked", processes=True).write("q", 0, _parts(6))


def test_limits_the_target_cannot_tell_let_the_batch_go_on(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    sink = LimitedSink(store_name, [PREPARED], fail=True)
    with caplog.at_level(logging.WARNING, logger="twopc"):
        _writer(sink, tmp_path).write("q", 0, _parts(6))
    assert len(store.visible) == 6
    assert "cannot read the target's limits (the server is away)" in caplog.text


def test_limits_are_read_once_then_again_after_a_failed_batch(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = LimitedSink(store_name, [PREPARED])
    writer = _writer(sink, tmp_path)
    writer.write("q", 0, _parts(1))
    writer.write("q", 1, _parts(1))
    assert sink.reads == 1
    with pytest.raises(TargetLimitError):
        writer.write("q", 2, _parts(9))
    sink.limits = [dataclasses.replace(PREPARED, allowed=10, free=10)]
    writer.write("q", 2, _parts(9))  # the raised setting is read again
    assert sink.reads == 2


def test_the_limits_are_read_again_after_a_while() -> None:
    now = [0.0]
    limits = WorkLimits(clock=lambda: now[0])
    sink = LimitedSink("unused", [PREPARED])
    limits.of(sink, "orders")
    now[0] += 299
    limits.of(sink, "orders")
    assert sink.reads == 1
    now[0] += 2
    limits.of(sink, "orders")
    assert sink.reads == 2


def test_a_groups_members_are_each_held_against_their_own_target(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    group = SinkGroup(
        {"free": LimitedSink(store_name), "tight": LimitedSink(store_name, [PREPARED])}
    )
    with pytest.raises(TargetLimitError) as caught:
        _writer(group, tmp_path).write("q", 0, _parts(5))
    assert caught.value.sink_id == "orders.tight"
    assert store.visible == []

"""Open work near its timeout (issue 46): a transaction older than 80 % of the sink's
``work_timeout()`` when its commit starts is logged (sink, batch, partition, setting) and
counted in the batch's metrics, for sinks that commit in their tasks and on the driver."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.local
from twopc import WorkTimeout
from twopc.metrics._catalog import CATALOG
from twopc.testing import MemoryDriverSink, MemoryStore, MemoryTaskSink
from twopc.testing._memory import MemoryTransaction

pytestmark = pytest.mark.unit

TIMEOUT = WorkTimeout("transaction.timeout.ms", 0.25)


class _Slow:
    """A memory sink whose target aborts work after :data:`TIMEOUT`; the task of
    partition ``slow_partition`` takes ``slow`` seconds to write."""

    slow_partition = 0

    def __init__(self, store: str, slow: float) -> None:
        super().__init__(store)  # type: ignore[call-arg]
        self.slow = slow

    def work_timeout(self) -> WorkTimeout:
        return TIMEOUT

    def invoke(self, txn: MemoryTransaction, batch: pa.RecordBatch) -> None:
        if txn.ctx.partition == self.slow_partition:
            time.sleep(self.slow)
        super().invoke(txn, batch)  # type: ignore[misc]


class SlowTaskSink(_Slow, MemoryTaskSink):
    """Commits in its tasks; partition 1 is slow."""

    slow_partition = 1


class SlowDriverSink(_Slow, MemoryDriverSink):
    """Commits on the driver; partition 2 is slow, so partition 0's prepared work waits."""

    slow_partition = 2


def _parts(count: int) -> list[pa.Table]:
    return [pa.table({"id": pa.array([p], pa.int64())}) for p in range(count)]


def _write(sink: twopc.Sink[object], tmp_path: Path) -> twopc.BatchMetrics:
    writer = twopc.local.foreach_batch(
        sink, "orders", commit_log=str(tmp_path / "log"), processes=False
    )
    return writer.write("q", 0, _parts(3))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records]
    return [m for m in messages if "after which the target aborts" in m]


def test_a_task_whose_transaction_nears_its_timeout_warns_and_is_counted(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="twopc"):
        metrics = _write(SlowTaskSink(store_name, slow=0.22), tmp_path)
    (warning,) = _warnings(caplog)
    assert "sink=orders batch 0 partition 1" in warning
    assert "of transaction.timeout.ms (0.2 s)" in warning
    assert metrics.near_timeout == 1
    assert 0.22 <= metrics.open_work_seconds < 5
    assert "near_timeout=1" in metrics.summary()
    assert sorted(store.visible) == [0, 1, 2]


def test_prepared_work_waiting_for_the_driver_is_aged_from_its_task(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Partition 0 prepared first; partition 2's slow task keeps it waiting for phase 2."""
    with caplog.at_level(logging.WARNING, logger="twopc"):
        metrics = _write(SlowDriverSink(store_name, slow=0.22), tmp_path)
    (warning,) = _warnings(caplog)
    assert "sink=orders batch 0 partition 0" in warning
    assert metrics.near_timeout >= 1 and metrics.open_work_seconds >= 0.22


def test_quick_work_is_quiet(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="twopc"):
        metrics = _write(SlowTaskSink(store_name, slow=0.0), tmp_path)
    assert _warnings(caplog) == [] and metrics.near_timeout == 0
    assert metrics.open_work_seconds < 0.2


def test_the_exporters_report_the_age_and_the_count(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    metrics = _write(SlowTaskSink(store_name, slow=0.22), tmp_path)
    points = {i.name: list(i.read(metrics)) for i in CATALOG}
    assert points["twopc.open_work.near_timeout"] == [({}, 1)]
    ((_, age),) = points["twopc.open_work.age"]
    assert age == metrics.open_work_seconds

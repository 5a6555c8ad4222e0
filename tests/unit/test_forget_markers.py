"""Markers that grow with every batch are pruned with the commit log (issue 46): every
``MARKER_PRUNE_EVERY`` batches the driver asks the sink to forget the markers of batches
older than the log's retention, and a failure to do so never fails a batch."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.local
from twopc._coordination.deciding import MARKER_PRUNE_EVERY
from twopc.testing import MemoryStore, MemoryTaskSink

pytestmark = pytest.mark.unit


class PrunedSink(MemoryTaskSink):
    def __init__(self, store: str, fail: bool = False) -> None:
        super().__init__(store)
        self.asked: list[tuple[str, str, int]] = []
        self.fail = fail

    def forget_markers(self, sink_id: str, query_id: str, before_batch: int) -> int:
        self.asked.append((sink_id, query_id, before_batch))
        if self.fail:
            raise OSError("the database went away")
        return 3


def _run(sink: twopc.Sink[object], tmp_path: Path, batches: int) -> None:
    writer = twopc.local.foreach_batch(
        sink, "orders", commit_log=str(tmp_path / "log"), processes=False
    )
    for batch in range(batches):
        writer.write("q", batch, [pa.table({"id": pa.array([batch], pa.int64())})])


def test_markers_older_than_the_logs_retention_are_forgotten_now_and_then(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = PrunedSink(store_name)
    _run(sink, tmp_path, 2 * MARKER_PRUNE_EVERY + 1)
    # batch 100: nothing is past the retention yet; batch 200: batches before 100 are
    assert sink.asked == [("orders", "q", 2 * MARKER_PRUNE_EVERY - 100)]


def test_a_failed_pruning_is_logged_and_the_batch_commits(
    tmp_path: Path, store_name: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    sink = PrunedSink(store_name, fail=True)
    with caplog.at_level(logging.WARNING, logger="twopc"):
        _run(sink, tmp_path, 2 * MARKER_PRUNE_EVERY + 1)
    assert len(store.visible) == 2 * MARKER_PRUNE_EVERY + 1
    assert "the database went away" in caplog.text and "the next pruning tries again" in caplog.text

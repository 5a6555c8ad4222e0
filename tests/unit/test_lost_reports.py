"""A batch whose engine lost one partition's report never commits (issue 31, item 5).

Completeness is judged by what the engine ran (``BatchEngine.partitions_run``), not by the
reports that came back: with reports of partitions 0..n-2 only, the batch looked complete
and committed without the last partition's rows. The files backend writes real files; a
reader (pyarrow) sees nothing of the failed batch, and the rerun writes every row once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from tests.harness.outputs import read_ids, staged_attempts
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc.local import LocalEngine

pytestmark = pytest.mark.unit

PARTITIONS, ROWS = 3, 5


def _partitions() -> list[pa.Table]:
    return [
        pa.table({"id": pa.array(range(p * ROWS, (p + 1) * ROWS), pa.int64())})
        for p in range(PARTITIONS)
    ]


class _LosingEngine(LocalEngine):
    """Runs every partition, then drops one partition's report, as a bug in an engine's
    collection of results would."""

    def __init__(self, lose: int) -> None:
        super().__init__(_partitions(), processes=False)
        self.lose = lose

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        return [r for r in super().run_phase1(task) if r.partition != self.lose]


@pytest.mark.parametrize("lost", [0, PARTITIONS - 1], ids=["first", "last"])
def test_a_lost_report_fails_the_batch_and_the_rerun_is_exact(tmp_path: Path, lost: int) -> None:
    out = tmp_path / "out"
    sink = twopc.create_sink("files", path=str(out))
    coordinator = Coordinator(sink, "orders", CommitLog(str(tmp_path / "log")))

    with pytest.raises(twopc.BatchFailedError) as failed:
        coordinator.run_batch("q-1", 0, _LosingEngine(lost))
    assert failed.value.partition == lost
    assert f"phase 1 ran {PARTITIONS} partition(s) but reported partitions" in str(failed.value)
    assert f"no report of partition(s) {lost}" in str(failed.value)
    assert read_ids(out) == Counter()  # nothing of the batch is visible
    assert staged_attempts(out) == []  # every partition's staged work was aborted

    rerun = Coordinator(sink, "orders", CommitLog(str(tmp_path / "log")))
    metrics = rerun.run_batch("q-1", 0, LocalEngine(_partitions(), processes=False))
    assert metrics.status is twopc.BatchStatus.COMMITTED
    assert read_ids(out) == Counter(range(PARTITIONS * ROWS))

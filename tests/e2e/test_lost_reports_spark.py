"""On real Spark, the engine counts the tasks of phase 1's result stage itself (Spark's
status tracker), so a batch whose last partition's report went missing fails instead of
committing without that partition's rows (issue 31, item 5)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.harness.outputs import read_ids, staged_attempts
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc._engines.spark_engine import SparkEngine

pytestmark = [pytest.mark.e2e]

PARTITIONS, ROWS = 3, 40


class _LosingSparkEngine(SparkEngine):
    """Phase 1 as Spark runs it, then the last partition's report dropped."""

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        reports = super().run_phase1(task)
        return [r for r in reports if r.partition != PARTITIONS - 1]


def test_a_lost_last_report_fails_the_batch_on_spark(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = twopc.create_sink("files", path=str(out))
    frame = spark.range(0, PARTITIONS * ROWS, numPartitions=PARTITIONS)
    log = CommitLog(str(tmp_path / "log"))

    with pytest.raises(twopc.BatchFailedError) as failed:
        Coordinator(sink, "orders", log).run_batch("q-1", 0, _LosingSparkEngine(frame))
    assert f"phase 1 ran {PARTITIONS} partition(s)" in str(failed.value)
    assert failed.value.partition == PARTITIONS - 1
    assert read_ids(out) == Counter()
    assert staged_attempts(out) == []

    engine = SparkEngine(frame)
    Coordinator(sink, "orders", log).run_batch("q-1", 0, engine)
    assert engine.partitions_run() == PARTITIONS
    assert read_ids(out) == Counter(range(PARTITIONS * ROWS))

"""The checks through a real Spark ``foreachBatch`` query."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from twopc._coordination.batch_metrics import BatchStatus
from twopc.testing._base import SinkChecks, expect, guarantee
from twopc.testing._runner import batch_ids

__all__ = [
    "INPUT_SCHEMA",
    "SparkChecks",
    "skip_on_spark_writer",
    "spark_input",
    "spark_session",
    "writes_with_spark",
]

INPUT_SCHEMA = "id long, payload string"


class SparkChecks(SinkChecks):
    """A real query through :func:`twopc.foreach_batch`, Spark's replay of a batch id, and
    a task that fails once and is retried by Spark."""

    def _spark_query(self, tmp_path: Path, target: str, writer: Any, files: int) -> None:
        spark = spark_session(self.spark_master)
        source = spark_input(tmp_path, files)
        stream = (
            spark.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .repartition(2, "id")
        )
        query = (
            stream.writeStream.option("checkpointLocation", str(tmp_path / "spark-checkpoint"))
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    @guarantee("spark-query")
    def test_spark_foreach_batch_query(self, target: str, tmp_path: Path) -> None:
        import twopc

        writer = twopc.foreach_batch(self.make_sink(target), sink_id=f"kit-{uuid.uuid4().hex[:8]}")
        self._spark_query(tmp_path, target, writer, files=3)
        expected = [i for b in range(3) for i in batch_ids(b, 0, 40)]
        self.exactly(self.visible(target), expected, "spark-query", "after the query")

    @guarantee("spark-replay")
    def test_spark_replays_a_batch_id_without_writing(self, target: str, tmp_path: Path) -> None:
        import twopc

        sink_id = f"kit-{uuid.uuid4().hex[:8]}"
        self._spark_query(tmp_path, target, twopc.foreach_batch(self.make_sink(target), sink_id), 2)
        commits = tmp_path / "spark-checkpoint" / "commits"
        (commits / "1").unlink()
        (commits / ".1.crc").unlink(missing_ok=True)
        replay = twopc.foreach_batch(self.make_sink(target), sink_id)
        self._spark_query(tmp_path, target, replay, 2)
        statuses = [(m.batch_id, m.status) for m in replay.metrics]
        expect(statuses == [(1, BatchStatus.SKIPPED)], "spark-replay", f"replay ran as {statuses}")
        expected = [i for b in range(2) for i in batch_ids(b, 0, 40)]
        self.exactly(self.visible(target), expected, "spark-replay", "after the replay")

    @guarantee("spark-task-retry")
    def test_spark_task_failure_and_retry(self, target: str, tmp_path: Path) -> None:
        import twopc

        skip_on_spark_writer(self.make_sink(target), "a task that fails once")
        faults = twopc.FaultPlan.parse("after_invoke:raise@batch=1,partition=1,attempt=0")
        writer = twopc.foreach_batch(
            self.make_sink(target), f"kit-{uuid.uuid4().hex[:8]}", faults=faults
        )
        self._spark_query(tmp_path, target, writer, files=2)
        attempts = {t.partition: t.attempt for t in writer.metrics[-1].tasks}
        expected = [i for b in range(2) for i in batch_ids(b, 0, 40)]
        self.exactly(self.visible(target), expected, "spark-task-retry", "after the retry")
        expect(
            attempts.get(1, 0) >= 1 or len(attempts) == 1,
            "spark-task-retry",
            f"the failed task was not retried: attempts {attempts}",
        )


def writes_with_spark(sink: Any) -> bool:
    """Whether phase 1 of ``sink`` runs in Spark's own writer under ``foreach_batch`` and
    ``write_batch`` (a :class:`~twopc.WritesWithSpark` sink whose options it serves)."""
    from twopc._engines.spark import spark_write_of

    return spark_write_of(sink)[0] is not None


def skip_on_spark_writer(sink: Any, what: str) -> None:
    """Skip a check that injects a fault into a Python task when no Python task runs."""
    if writes_with_spark(sink):
        pytest.skip(
            f"{what}: phase 1 runs in Spark's own writer, with no Python task to fail; "
            "Spark's output committer retries its tasks inside the write job"
        )


_SESSIONS: dict[str, Any] = {}


def spark_input(tmp_path: Path, files: int) -> Path:
    """JSON input for the kit's Spark checks: file ``i`` holds ``batch_ids(i, 0, 40)``."""
    source = tmp_path / "spark-input"
    source.mkdir(exist_ok=True)
    for index in range(files):
        path = source / f"part-{index:04d}.json"
        if not path.exists():
            rows = [{"id": i, "payload": f"row-{i}"} for i in batch_ids(index, 0, 40)]
            path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return source


def spark_session(master: str) -> Any:
    """A SparkSession for the kit's Spark tests (the active one if there is one)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        pytest.skip("pyspark is not installed (pip install 'twopc[spark]')")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if master not in _SESSIONS:
        session = (
            SparkSession.builder.master(master)
            .appName("twopc-conformance")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        _SESSIONS[master] = session
    return _SESSIONS[master]

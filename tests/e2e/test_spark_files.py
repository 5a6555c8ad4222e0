"""Real foreachBatch queries writing through the files sink, read back with Spark and pyarrow.

The key cases run on both write paths: Python tasks (``write_path="python"``) and Spark's
own writer (``write_path="spark"``, what ``auto`` chooses for Parquet on a local disk)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.e2e.orders_stream import run_orders_stream
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.spark_fixtures import write_orders
from twopc_files import FilesSink

pytestmark = [pytest.mark.e2e]


def _spark_ids(spark: Any, output: Path) -> tuple[int, int]:
    frame = spark.read.parquet(str(output))
    return frame.count(), frame.select("id").distinct().count()


WRITE_PATHS = ["python", "spark"]


@pytest.mark.parametrize("write_path", WRITE_PATHS)
def test_query_writes_every_row_once(spark: Any, tmp_path: Path, write_path: str) -> None:
    expected = write_orders(tmp_path / "in", batches=3, rows_per_batch=200)
    sink = twopc.create_sink(
        "files", path=str(tmp_path / "out"), partition_by=["customer"], write_path=write_path
    )
    writer = twopc.foreach_batch(sink, sink_id="orders")
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", writer)

    assert _spark_ids(spark, tmp_path / "out") == (600, 600)
    assert_exactly_once(read_ids(tmp_path / "out"), expected)
    statuses = [(m.batch_id, m.status, m.rows, m.partitions) for m in writer.metrics]
    assert statuses == [
        (0, "committed", 200, 2),
        (1, "committed", 200, 2),
        (2, "committed", 200, 2),
    ]
    assert staged_attempts(tmp_path / "out") == []
    # with batch, Spark partition and file number, in every partition directory
    names = sorted(p.name for p in (tmp_path / "out").glob("customer=c0/*"))
    token = names[0].split("-")[1]
    suffix = ".snappy.parquet" if write_path == "spark" else ".parquet"
    assert names == [
        f"part-{token}-b{b:08d}-p{p:05d}-0000{suffix}" for b in range(3) for p in range(2)
    ]


@pytest.mark.parametrize(
    "write_path", ["python", pytest.param("spark", marks=pytest.mark.extended)]
)
def test_replayed_batch_writes_nothing(spark: Any, tmp_path: Path, write_path: str) -> None:
    write_orders(tmp_path / "in", batches=2, rows_per_batch=100)
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), write_path=write_path)
    run_orders_stream(
        spark, tmp_path / "in", tmp_path / "chk", twopc.foreach_batch(sink, sink_id="orders")
    )
    files_before = sorted(p.name for p in (tmp_path / "out").glob("*.parquet"))

    # The driver died after the commit but before Spark wrote commits/1: Spark re-runs batch 1.
    (tmp_path / "chk" / "commits" / "1").unlink()
    (tmp_path / "chk" / "commits" / ".1.crc").unlink(missing_ok=True)
    replay = twopc.foreach_batch(sink, sink_id="orders")
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", replay)

    assert [(m.batch_id, m.status) for m in replay.metrics] == [(1, "skipped")]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == files_before
    assert _spark_ids(spark, tmp_path / "out") == (200, 200)


def test_failed_task_is_retried_and_its_attempt_leaves_nothing(spark: Any, tmp_path: Path) -> None:
    """Python tasks only: Spark's own writer runs no Python task to fail (its retries are
    Spark's, inside the job: test_spark_write_path.py kills its executors)."""
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=300)
    sink = twopc.create_sink("files", path=str(tmp_path / "out"), write_path="python")
    faults = twopc.FaultPlan.parse("after_invoke:raise@batch=1,partition=1,attempt=0")
    writer = twopc.foreach_batch(sink, sink_id="orders", faults=faults)
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", writer)

    assert_exactly_once(read_ids(tmp_path / "out"), expected)
    batch1 = writer.metrics[-1]
    assert batch1.status == "committed"
    assert {t.partition: t.attempt for t in batch1.tasks} == {0: 0, 1: 1}
    assert staged_attempts(tmp_path / "out") == []


@pytest.mark.parametrize("write_path", WRITE_PATHS)
def test_bad_input_fails_clearly_commits_nothing_and_recovers(
    spark: Any, tmp_path: Path, write_path: str
) -> None:
    expected = write_orders(tmp_path / "in", batches=1, rows_per_batch=100)
    broken = twopc.create_sink(
        "files", path=str(tmp_path / "out"), partition_by=["region"], write_path=write_path
    )
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as failure:
        run_orders_stream(
            spark, tmp_path / "in", tmp_path / "chk", twopc.foreach_batch(broken, "orders")
        )
    message = str(failure.value)
    # Spark's writer is planned on the driver, before any partition runs
    where = ", partition" if write_path == "python" else ""
    assert f"sink 'orders', batch 0{where}" in message
    assert "'region'" in message
    assert "not in the data" in message
    assert read_ids(tmp_path / "out") == {}

    fixed = twopc.create_sink(
        "files", path=str(tmp_path / "out"), partition_by=["customer"], write_path=write_path
    )
    run_orders_stream(
        spark, tmp_path / "in", tmp_path / "chk", twopc.foreach_batch(fixed, "orders")
    )
    assert_exactly_once(read_ids(tmp_path / "out"), expected)


def test_new_checkpoint_is_never_skipped_silently(spark: Any, tmp_path: Path) -> None:
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=50)
    sink = twopc.create_sink("files", path=str(tmp_path / "out"))
    run_orders_stream(
        spark, tmp_path / "in", tmp_path / "chk-a", twopc.foreach_batch(sink, "orders")
    )
    # A new checkpoint restarts batch ids at 0; a (sink, batch) marker would skip them all.
    writer = twopc.foreach_batch(sink, "orders")
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk-b", writer)

    assert [m.status for m in writer.metrics] == ["committed", "committed"]
    ids = read_ids(tmp_path / "out")
    assert set(ids) == expected
    assert set(ids.values()) == {2}


class _LogInCheckpointSink(FilesSink):
    def default_commit_log(self, sink_id: str) -> None:  # type: ignore[override]
        return None


def test_commit_log_defaults_to_the_checkpoint(spark: Any, tmp_path: Path) -> None:
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=50)
    sink = _LogInCheckpointSink(str(tmp_path / "out"))
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", twopc.foreach_batch(sink, "orders"))

    decisions = sorted((tmp_path / "chk" / "twopc" / "orders").glob("*/*.decision.json"))
    assert [p.name[:20] for p in decisions] == [f"{b:020d}" for b in range(2)]
    assert_exactly_once(read_ids(tmp_path / "out"), expected)


def test_rejects_direct_calls_outside_a_streaming_query(spark: Any, tmp_path: Path) -> None:
    sink = twopc.create_sink("files", path=str(tmp_path / "out"))
    with pytest.raises(twopc.ConfigurationError, match="foreachBatch"):
        twopc.foreach_batch(sink, "orders")(spark.range(3), 0)
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


class _JobListingSink(FilesSink):
    """Lists what Spark's write job left in the run's location before staging it."""

    job_files: list[list[str]]

    def spark_written(self, ctx: twopc.TaskContext, write: twopc.SparkWrite) -> Any:
        location = Path(write.path.removeprefix("file://"))
        found = sorted(str(p.relative_to(location)) for p in location.rglob("*") if p.is_file())
        self.job_files.append(found)
        return super().spark_written(ctx, write)


def test_sparks_job_leaves_only_data_files_in_the_run_location(spark: Any, tmp_path: Path) -> None:
    """The engine's settings for a run's own location: the committer moves each task's files
    once (algorithm 2) and writes no ``_SUCCESS``, the raw local filesystem no ``.crc``."""
    expected = write_orders(tmp_path / "in", batches=2, rows_per_batch=100)
    sink = _JobListingSink(str(tmp_path / "out"), partition_by=["customer"], write_path="spark")
    sink.job_files = []
    run_orders_stream(spark, tmp_path / "in", tmp_path / "chk", twopc.foreach_batch(sink, "orders"))

    assert len(sink.job_files) == 2
    for names in sink.job_files:
        assert names and all(
            n.startswith("customer=") and n.endswith(".snappy.parquet") for n in names
        ), names
    assert_exactly_once(read_ids(tmp_path / "out"), expected)
    assert _spark_ids(spark, tmp_path / "out") == (200, 200)

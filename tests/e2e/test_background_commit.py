"""``foreach_batch(..., background_commit=True)`` on real Spark, into an Iceberg table on
Spark's write path: ``foreachBatch`` returns once a batch's decision is durable and the
table's commit runs in a thread. Every check reads the table back with a pyiceberg scan.

The driver SIGKILLed while a batch's commit is still running in the background, after
Spark recorded the batch as done, is in ``tests/crash/test_background_commit_crash.py``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import twopc
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.iceberg import records_left, unreferenced_data_files

pytest.importorskip("pyiceberg")

from twopc_iceberg import IcebergSink

pytestmark = [pytest.mark.e2e]

TABLE = "db.orders"
ROWS = 50
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _input(directory: Path, batches: int) -> set[int]:
    """One Parquet file per micro-batch (``maxFilesPerTrigger=1``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for batch in range(batches):
        ids = list(range(batch * ROWS, (batch + 1) * ROWS))
        names = [f"order-{i}" for i in ids]
        path = directory / f"{batch:03d}.parquet"
        pq.write_table(pa.table({"id": ids, "name": names}, schema=SCHEMA), path)
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))  # the file source's order
    return set(range(batches * ROWS))


def _sink(warehouse: Path) -> IcebergSink:
    """The table exists (Spark's write path writes existing tables)."""
    IcebergSink(TABLE, warehouse=str(warehouse), create_table=True).access.for_data(SCHEMA)
    return IcebergSink(TABLE, warehouse=str(warehouse), write_path="spark")


def _query(spark: Any, source: Path, checkpoint: Path, writer: Any) -> Any:
    frame = spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1)
    return (
        frame.parquet(str(source))
        .repartition(2)
        .writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .foreachBatch(writer)
        .start()
    )


def _ids(sink: IcebergSink) -> Counter[int]:
    table = sink.load_table()
    assert table is not None
    return Counter(table.scan().to_arrow().column("id").to_pylist())


def _left(warehouse: Path) -> list[str]:
    return unreferenced_data_files(str(warehouse), TABLE) + records_left(str(warehouse), TABLE)


def test_every_batch_committed_in_the_background_is_in_the_table_once(
    spark: Any, tmp_path: Path
) -> None:
    """Three batches, each committed in the commit thread while Spark goes on: after
    ``close()`` the table holds every id once, one twopc snapshot per batch, and nothing
    unreferenced is left."""
    expected = _input(tmp_path / "in", 3)
    sink = _sink(tmp_path / "wh")
    writer = twopc.foreach_batch(sink, "bg-orders", background_commit=True)
    query = _query(spark, tmp_path / "in", tmp_path / "chk", writer)
    query.awaitTermination()
    writer.close()
    assert_exactly_once(_ids(sink), expected)
    table = sink.load_table()
    assert table is not None
    batches = [
        s.summary["twopc.batch-id"]
        for s in table.snapshots()
        if s.summary is not None and "twopc.batch-id" in s.summary
    ]
    assert sorted(batches) == ["0", "1", "2"]
    assert [m.status for m in writer.metrics] == ["committed"] * 3
    assert _left(tmp_path / "wh") == []


def test_a_group_commits_its_members_in_the_background(spark: Any, tmp_path: Path) -> None:
    """A ``SinkGroup`` (the Iceberg table through Spark's writer, Parquet files through
    Python tasks): one decision per batch, both members committed in the thread, each
    target holding every id once after ``close()``."""
    import pyarrow.dataset as ds

    expected = _input(tmp_path / "in", 2)
    lake = _sink(tmp_path / "wh")
    audit = twopc.create_sink(
        "files", path=str(tmp_path / "audit"), format="parquet", write_path="python"
    )
    group = twopc.SinkGroup({"lake": lake, "audit": audit})
    writer = twopc.foreach_batch(group, "bg-group", background_commit=True)
    query = _query(spark, tmp_path / "in", tmp_path / "chk", writer)
    query.awaitTermination()
    writer.close()
    assert_exactly_once(_ids(lake), expected)
    audited = ds.dataset(str(tmp_path / "audit"), format="parquet").to_table()
    assert_exactly_once(Counter(audited.column("id").to_pylist()), expected)
    assert [m.status for m in writer.metrics] == ["committed"] * 2
    assert _left(tmp_path / "wh") == []


def test_a_commit_that_fails_in_the_background_is_finished_by_the_next_batch(
    spark: Any, tmp_path: Path
) -> None:
    """Batch 0's commit fails in its thread (after the decision): its metrics say failed,
    batch 1's recovery commits it before batch 1 writes, and the table ends with every id
    once."""
    expected = _input(tmp_path / "in", 3)
    sink = _sink(tmp_path / "wh")
    faults = twopc.FaultPlan.parse("after_decision:raise@batch=0")
    writer = twopc.foreach_batch(sink, "bg-fails", background_commit=True, faults=faults)
    query = _query(spark, tmp_path / "in", tmp_path / "chk", writer)
    query.awaitTermination()
    writer.close()
    assert_exactly_once(_ids(sink), expected)
    statuses = {m.batch_id: m.status for m in writer.metrics}
    assert statuses == {0: "failed", 1: "committed", 2: "committed"}
    assert [m.recovered_committed > 0 for m in writer.metrics if m.batch_id == 1] == [True]
    assert _left(tmp_path / "wh") == []


def test_a_last_commit_that_fails_is_raised_by_close_and_finished_by_recover(
    spark: Any, tmp_path: Path
) -> None:
    """The last batch's commit fails in its thread: Spark has recorded the batch, so no
    batch runs again; ``close()`` raises the commit's error, the table lacks the batch,
    and ``twopc.recover_sink`` (what ``twopc recover`` runs) commits it from the log."""
    expected = _input(tmp_path / "in", 2)
    sink = _sink(tmp_path / "wh")
    faults = twopc.FaultPlan.parse("after_decision:raise@batch=1")
    log = str(tmp_path / "log")
    writer = twopc.foreach_batch(
        sink, "bg-last", commit_log=log, background_commit=True, faults=faults
    )
    query = _query(spark, tmp_path / "in", tmp_path / "chk", writer)
    query.awaitTermination()
    with pytest.raises(twopc.TwoPCError) as raised:
        writer.close()
    assert raised.value.batch_id == 1 and raised.value.sink_id == "bg-last"
    assert sorted(_ids(sink).elements()) == list(range(ROWS))  # batch 0 only
    report = twopc.recover_sink(sink, "bg-last", twopc.CommitLog(log))
    assert report.ok and report.committed == 2  # batch 1, its two partitions
    assert_exactly_once(_ids(sink), expected)
    assert _left(tmp_path / "wh") == []

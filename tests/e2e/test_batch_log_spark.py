"""The files sink's batch log (``batch_log=True``) read by Spark itself: with the driver
SIGKILLed between two partitions' commits, the batch is half promoted; a pyarrow reader
sees those files, Spark's batch and streaming file sources, which honour
``_spark_metadata``, see none of them. After the restart Spark reads every row once, and the
streaming reader continues with exactly the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.sinks import SinkSpec
from tests.e2e.backend_cases import add_input
from tests.e2e.entry_runs import command, run
from tests.helpers import read_ids

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _spark_ids(spark: Any, path: Path) -> list[int]:
    return sorted(r["id"] for r in spark.read.parquet(str(path)).select("id").collect())


def _stream_ids(spark: Any, path: Path, checkpoint: Path) -> list[int]:
    """What a streaming file source over the output reads now (``availableNow``), as one
    query continuing from ``checkpoint``."""
    seen: list[int] = []

    def collect(frame: Any, _: int) -> None:
        seen.extend(r["id"] for r in frame.select("id").collect())

    query = (
        spark.readStream.schema("id long, payload string")
        .parquet(str(path))
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return sorted(seen)


def _ids_of_batch(out: Path, batch: int) -> set[int]:
    """Ids in the files of one twopc batch (their names carry it: ``-b<batch:08d>-``)."""
    import pyarrow.parquet as pq

    files = [p for p in out.rglob(f"part-*-b{batch:08d}-*.parquet") if "_twopc" not in str(p)]
    return {i for f in files for i in pq.read_table(f).column("id").to_pylist()}


def test_spark_reads_whole_batches_only(spark: Any, tmp_path: Path) -> None:
    entry = "foreach"  # format("twopc"): its commit runs in a worker that Spark replaces
    out = tmp_path / "out"
    spec = SinkSpec("files", "parquet", "orders", str(out), options=json.dumps({"batch_log": True}))
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    everything = add_input(source, 0) | add_input(source, 1)
    crashed = run(command(entry, spec, source, checkpoint, faults="between_commits:kill@batch=1"))
    assert crashed.returncode != 0, crashed.stderr[-2000:]
    first = _ids_of_batch(out, 0)
    assert len(first) == 40
    # batch 1 is half promoted: a reader that lists the files sees part of it...
    assert set(read_ids(str(out))) - first, "the crash did not land between two commits"
    # ...but Spark's reader follows the batch log, which has only batch 0
    assert _spark_ids(spark, out) == sorted(first)
    assert _stream_ids(spark, out, tmp_path / "reader") == sorted(first)
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir()) == ["0"]

    rerun = run(command(entry, spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _spark_ids(spark, out) == sorted(everything)
    # the streaming reader goes on with exactly the batch it had not seen
    assert _stream_ids(spark, out, tmp_path / "reader") == sorted(everything - first)
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir()) == ["0", "1"]

"""The files sink's batch log (``batch_log=True``) read by Spark itself: with the driver
SIGKILLed between two partitions' commits, the batch is half promoted; a pyarrow reader
sees those files, Spark's batch and streaming file sources, which honour
``_spark_metadata``, see none of them. After the restart Spark reads every row once, and the
streaming reader continues with exactly the rest. The same on the S3 API, read through
Hadoop's S3A connector (``--extended``: its jars come from Maven Central on first use)."""

from __future__ import annotations

import json
import signal
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.spark_s3a_reader import s3a_reader
from tests.harness.backend_cases import add_input
from tests.harness.entry_runs import command, run
from tests.harness.outputs import read_ids
from tests.harness.processes import run_process
from tests.harness.service_fixtures import S3Store
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import make_target

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
    spec = SinkRecipe(
        "files", "parquet", "orders", str(out), options=json.dumps({"batch_log": True})
    )
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


@pytest.mark.extended
def test_spark_reads_whole_batches_only_on_s3(s3_store: S3Store, tmp_path: Path) -> None:
    """The same on the S3 API, read by Spark through Hadoop's S3A (``s3a://``, the scheme
    the log writes for ``s3://`` outputs); written by the local engine's query, whose
    driver is SIGKILLed between two completions of batch 1."""
    target = make_target("s3", s3_store.env())
    spec = target.prepare(f"bl-{uuid.uuid4().hex[:12]}", "parquet", tmp_path, 1)  # own prefix
    options = {**json.loads(spec.options), "batch_log": True}
    spec = replace(spec, options=json.dumps(options))
    query = [
        "-m",
        "tests.harness.recipe_local_query",
        spec.dumps(),
        str(tmp_path / "chk"),
        "3",
        "2",
        "20",
        "1",
    ]
    everything = {b * 1000 + i for b in range(3) for i in range(40)}
    first_batch = set(range(40))
    reader = s3a_reader(
        s3_store.endpoint_url,
        s3_store.access_key_id,
        s3_store.secret_access_key,
        tmp_path / "rd",
    )
    try:
        with reader as spark:
            crashed = run_process(query, faults="between_commits:kill@batch=1")
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
            assert set(target.committed(spec)) - first_batch, "the crash missed the commits"
            url = "s3a://" + spec.address.removeprefix("s3://")
            before = spark.read(url)
            assert (before["batch"], before["stream"]) == (sorted(first_batch),) * 2

            assert run_process(query).returncode == 0
            after = spark.read(url)
            assert after["batch"] == sorted(everything)
            assert after["stream"] == sorted(everything - first_batch)
            assert target.leftovers(spec) == []
    finally:
        target.cleanup(spec)

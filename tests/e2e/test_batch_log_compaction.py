"""Spark reads a compacted batch log: after 12 batches, ``_spark_metadata`` holds ``0`` ..
``8``, ``9.compact`` (every file of batches 0-9) and ``10``, ``11``, and Spark's readers
start from ``9.compact``. The log is written by the local engine (inline tasks, so the
suite's SparkSession can share the process) and batch 12 is left half promoted by a fault
between two partitions' commits: ``spark.read.parquet`` and a streaming file source read
exactly the rows of batches 0-11, once, and after the restart the streaming reader reads
exactly batch 12. Flat and with ``partition_by`` (Hive directories, which Spark turns back
into a column; CI runs this one, ``--extended`` the flat one too). The same on the S3 API
through S3A (``--extended``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from s3fs import S3FileSystem

import twopc
from tests.e2e.spark_s3a_reader import s3a_reader, stream_ids
from tests.harness.service_fixtures import S3Store
from tests.harness.targets import make_target
from twopc import InjectedFault
from twopc.faults import FaultPlan
from twopc.local import LocalStream, foreach_batch

pytestmark = [pytest.mark.e2e]

BATCHES = 13  # 0..11 committed (9.compact among them), 12 half promoted by the fault
PARTITIONS = 2
ROWS = 10
REGIONS = ("eu", "us")
HALF_PROMOTED = f"between_commits:raise@batch={BATCHES - 1}"


def _input() -> list[list[pa.Table]]:
    """Batch ``b``, partition ``p``: ids ``b*1000 + p*ROWS + i``, region by id parity."""
    batches = []
    for b in range(BATCHES):
        parts = []
        for p in range(PARTITIONS):
            ids = list(range(b * 1000 + p * ROWS, b * 1000 + (p + 1) * ROWS))
            parts.append(
                pa.table(
                    {
                        "id": pa.array(ids, pa.int64()),
                        "payload": [f"b{b}p{p}"] * ROWS,
                        "region": [REGIONS[i % 2] for i in ids],
                    }
                )
            )
        batches.append(parts)
    return batches


def _ids(batches: range) -> set[int]:
    return {b * 1000 + i for b in batches for i in range(PARTITIONS * ROWS)}


def _write(sink: twopc.Sink[Any], checkpoint: str, faults: str = "") -> None:
    """Run the local query; with ``faults``, up to the injected fault."""
    stream = LocalStream(checkpoint, _input())
    writer = foreach_batch(
        sink, "orders", processes=False, faults=FaultPlan.parse(faults) if faults else None
    )
    if not faults:
        stream.run(writer)
        return
    with pytest.raises(InjectedFault):
        stream.run(writer)


def _log_names(listing: list[str]) -> list[str]:
    return sorted((n.rsplit("/", 1)[-1] for n in listing), key=lambda n: int(n.split(".")[0]))


EXPECTED_LOG = [*map(str, range(9)), "9.compact", "10", "11"]


def _spark_rows(spark: Any, path: str) -> list[tuple[int, str]]:
    frame = spark.read.parquet(path)
    return sorted((r["id"], r["region"]) for r in frame.select("id", "region").collect())


def _rows(ids: set[int]) -> list[tuple[int, str]]:
    return sorted((i, REGIONS[i % 2]) for i in ids)


@pytest.mark.parametrize(
    "partition_by",
    [pytest.param((), id="flat", marks=pytest.mark.extended), pytest.param(("region",), id="hive")],
)
def test_spark_reads_a_compacted_batch_log(
    spark: Any, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    out = tmp_path / "out"
    sink = twopc.create_sink(
        "files", path=str(out), format="parquet", batch_log=True, partition_by=partition_by
    )
    _write(sink, str(tmp_path / "chk"), faults=HALF_PROMOTED)
    assert _log_names([p.name for p in (out / "_spark_metadata").iterdir()]) == EXPECTED_LOG
    compact = (out / "_spark_metadata" / "9.compact").read_text().splitlines()
    files_per_task = len(REGIONS) if partition_by else 1
    assert compact[0] == "v1"
    assert len(compact) == 1 + 10 * PARTITIONS * files_per_task  # every file of batches 0-9

    committed = _ids(range(BATCHES - 1))
    listed = set(
        ds.dataset(out, format="parquet", partitioning="hive").to_table()["id"].to_pylist()
    )
    assert set(listed) - committed, "the fault did not leave batch 12 half promoted"
    # Spark's readers go by 9.compact, 10 and 11: the files of batches 0..8 are listed
    # only there once the per-batch files are gone (Spark's own sink deletes them too)
    for name in map(str, range(9)):
        (out / "_spark_metadata" / name).unlink()
    assert _spark_rows(spark, str(out)) == _rows(committed)
    # a glob is not the output directory: Spark lists what matches, the log plays no part
    glob = out / ("*/*.parquet" if partition_by else "*.parquet")
    globbed = spark.read.parquet(str(glob)).select("id").collect()
    assert sorted(r["id"] for r in globbed) == sorted(listed)
    reader = str(tmp_path / "reader")
    schema = "id long, payload string" + (", region string" if partition_by else "")
    assert stream_ids(spark, str(out), reader, schema) == sorted(committed)

    _write(sink, str(tmp_path / "chk"))
    assert _spark_rows(spark, str(out)) == _rows(_ids(range(BATCHES)))
    # the streaming reader goes on with exactly the batch it had not read
    assert stream_ids(spark, str(out), reader, schema) == sorted(_ids(range(BATCHES - 1, BATCHES)))
    if partition_by:
        assert sorted(p.name for p in out.iterdir() if "=" in p.name) == [
            f"region={r}" for r in REGIONS
        ]
        assert not list(out.glob("*.parquet")), "partition_by wrote files outside its directories"


@pytest.mark.extended
@pytest.mark.parametrize("partition_by", [(), ("region",)], ids=["flat", "hive"])
def test_spark_reads_a_compacted_batch_log_on_s3(
    s3_store: S3Store, tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    """The same on the S3 API (multipart uploads the commit completes), read by Spark
    through S3A in its own process (``tests.e2e.spark_s3a_reader``)."""
    target = make_target("s3", s3_store.env())
    # a prefix of its own: an earlier run's open uploads must not count as this one's
    spec = target.prepare(f"blc-{uuid.uuid4().hex[:12]}", "parquet", tmp_path, 1)
    options = json.loads(spec.options)
    sink = twopc.create_sink(
        "files",
        path=spec.address,
        format="parquet",
        batch_log=True,
        partition_by=partition_by,
        **options,
    )
    schema = "id long, payload string" + (", region string" if partition_by else "")
    reader = s3a_reader(
        s3_store.endpoint_url,
        s3_store.access_key_id,
        s3_store.secret_access_key,
        tmp_path / "rd",
        schema,
    )
    log = spec.address + "/_spark_metadata"
    fs = S3FileSystem(**options["storage_options"])
    try:
        with reader as spark:
            _write(sink, str(tmp_path / "chk"), faults=HALF_PROMOTED)
            assert _log_names(fs.ls(log, detail=False)) == EXPECTED_LOG
            committed = _ids(range(BATCHES - 1))
            assert set(target.committed(spec)) - committed, "batch 12 is not half completed"
            fs.rm([f"{log}/{n}" for n in range(9)])
            url = "s3a://" + spec.address.removeprefix("s3://")
            before = spark.read(url)
            assert before["batch"] == before["stream"] == sorted(committed)
            # with partition_by the files lack ``region``: Spark rebuilds it from the paths
            assert before["columns"] == ["id", "payload", "region"]

            _write(sink, str(tmp_path / "chk"))
            after = spark.read(url)
            assert after["batch"] == sorted(_ids(range(BATCHES)))
            assert after["stream"] == sorted(_ids(range(BATCHES - 1, BATCHES)))
            assert target.leftovers(spec) == []
    finally:
        target.cleanup(spec)

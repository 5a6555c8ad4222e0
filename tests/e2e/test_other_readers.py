"""What readers other than Spark see of the files sink's output, measured: DuckDB's
``read_parquet`` with a recursive glob, DuckDB with a glob as deep as the layout, and
``pyarrow.dataset``. docs/backends/files.md ("What readers see") states these results.

The query (``tests.harness.recipe_local_query``, the local engine) writes 2 batches of 2
partitions x 10 rows; the crash freezes batch 1 at a point, a restart finishes it. DuckDB's
``**`` does not skip ``_``-prefixed directories, so under ``commit_by="move"`` it lists the staged
files under ``_twopc_staging/``; their names end in ``.inprogress``, so a glob on
``*.parquet`` (or a directory, read as ``**/*.parquet``) does not match them. A glob
that matches their names too (``**/*.parquet*``) would read them: rows of a batch not yet
committed, and a killed task attempt's rows next to its retry's. On the S3 API with
``commit_by="complete_upload"`` there is no staged data object to find: an open multipart
upload is not an object.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest

from tests.harness.exactly_once import assert_exactly_once
from tests.harness.processes import run_process
from tests.harness.service_fixtures import S3Store
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import make_target

pytestmark = [pytest.mark.e2e]

EVERYTHING = {b * 1000 + i for b in range(2) for i in range(20)}
BATCH_0 = set(range(20))
# attempt 0 of batch 1's partition 1 is killed after it prepared (its staged file stays),
# attempt 1 writes the partition again, then the driver is killed after the decision
RETRIED_THEN_DECIDED = (
    "after_pre_commit:kill@batch=1,partition=1,attempt=0;after_decision:kill@batch=1"
)


def _query(spec: SinkRecipe, checkpoint: Path) -> list[str]:
    return [
        "-m",
        "tests.harness.recipe_local_query",
        spec.dumps(),
        str(checkpoint),
        "2",
        "2",
        "10",
        "2",
    ]


def _duckdb(pattern: str, *, hive: bool = False, **fs: Any) -> Counter[int]:
    """The ids ``read_parquet(pattern)`` returns (``fs``: an fsspec filesystem to read
    through, as DuckDB's Python API allows)."""
    con = duckdb.connect()
    if "filesystem" in fs:
        con.register_filesystem(fs["filesystem"])
    rows = con.execute(
        "SELECT id FROM read_parquet(?, hive_partitioning = ?)", [pattern, hive]
    ).fetchall()
    return Counter(r[0] for r in rows)


def _duckdb_outside_hidden_directories(pattern: str, *, hive: bool) -> Counter[int]:
    """``read_parquet`` with a recursive glob, filtered by path as docs/backends/files.md
    advises: no ``_``-prefixed directory on the way."""
    rows = duckdb.connect().execute(
        "SELECT id FROM read_parquet(?, hive_partitioning = ?, filename = true)"
        " WHERE filename NOT LIKE '%/\\_%' ESCAPE '\\'",
        [pattern, hive],
    )
    return Counter(r[0] for r in rows.fetchall())


def _pyarrow(out: Path) -> Counter[int]:
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table(columns=["id"])
    return Counter(table["id"].to_pylist())


@pytest.mark.parametrize("partition_by", [(), ("payload",)], ids=["flat", "hive"])
def test_duckdb_globs_on_the_extension_skip_staged_files_under_move(
    tmp_path: Path, partition_by: tuple[str, ...]
) -> None:
    out = tmp_path / "out"
    options = {"partition_by": list(partition_by)} if partition_by else {}
    spec = SinkRecipe("files", "parquet", "orders", str(out), options=json.dumps(options))
    crashed = run_process(_query(spec, tmp_path / "chk"), faults=RETRIED_THEN_DECIDED)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    hive = bool(partition_by)
    recursive = f"{out}/**/*.parquet"
    as_deep_as_the_layout = f"{out}/*/*.parquet" if hive else f"{out}/*.parquet"

    # DuckDB's ** descends into _twopc_staging, where batch 1 is staged (partition 1 twice:
    # the killed attempt's file and its retry's), but no staged name ends in .parquet
    assert _duckdb(recursive, hive=hive) == Counter(BATCH_0)
    assert _duckdb(str(out), hive=hive) == Counter(BATCH_0)  # a directory: **/*.parquet
    staged = _duckdb(f"{out}/**/*.parquet*", hive=hive)  # a glob that matches staged names
    assert set(staged) == EVERYTHING
    assert {i for i, n in staged.items() if n == 2} == set(range(1010, 1020))
    assert _duckdb_outside_hidden_directories(f"{out}/**/*.parquet*", hive=hive) == Counter(BATCH_0)
    # a glob as deep as the committed files, and pyarrow (it skips "_" directories), read
    # only batch 0
    assert _duckdb(as_deep_as_the_layout, hive=hive) == Counter(BATCH_0)
    assert _pyarrow(out) == Counter(BATCH_0)

    assert run_process(_query(spec, tmp_path / "chk")).returncode == 0
    for ids in (_duckdb(recursive, hive=hive), _duckdb(as_deep_as_the_layout, hive=hive)):
        assert_exactly_once(ids, EVERYTHING)
    assert_exactly_once(_pyarrow(out), EVERYTHING)


def test_every_reader_sees_a_half_committed_batch_without_spark(tmp_path: Path) -> None:
    """The driver killed between two partitions' commits: every reader that lists files
    (here DuckDB and pyarrow, with the batch log on) sees half of batch 1; only Spark's
    readers follow ``_spark_metadata`` (tests/e2e/test_batch_log_spark.py)."""
    out = tmp_path / "out"
    spec = SinkRecipe("files", "parquet", "orders", str(out), options='{"batch_log": true}')
    crashed = run_process(_query(spec, tmp_path / "chk"), faults="between_commits:kill@batch=1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    half = _pyarrow(out)
    assert set(half) > BATCH_0 and len(half) == 30
    assert _duckdb(f"{out}/*.parquet") == half
    assert (out / "_spark_metadata" / "0").exists()
    assert not (out / "_spark_metadata" / "1").exists()


def test_duckdb_on_s3_finds_no_uncommitted_object_under_complete_upload(
    s3_store: S3Store, tmp_path: Path
) -> None:
    """The same crash on the S3 API with multipart uploads: the recursive glob (DuckDB
    reading through s3fs) sees batch 0 only, and no duplicate, since batch 1 (and the
    killed attempt's file) are open uploads, not objects. (DuckDB's own S3 reader, the
    httpfs extension, is downloaded at run time and cannot be installed here; it lists the
    same objects.)"""
    import s3fs

    target = make_target("s3", s3_store.env())
    spec = target.prepare(f"rd-{uuid.uuid4().hex[:12]}", "parquet", tmp_path, 1)
    assert json.loads(spec.options)["commit_by"] == "complete_upload"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_store.storage_options())
    recursive = f"{spec.address}/**/*.parquet"
    try:
        crashed = run_process(_query(spec, tmp_path / "chk"), faults=RETRIED_THEN_DECIDED)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
        assert target.leftovers(spec), "the crash left no open upload"
        assert _duckdb(recursive, filesystem=fs) == Counter(BATCH_0)

        assert run_process(_query(spec, tmp_path / "chk")).returncode == 0
        fs.invalidate_cache()
        assert_exactly_once(_duckdb(recursive, filesystem=fs), EVERYTHING)
        assert target.leftovers(spec) == []
    finally:
        target.cleanup(spec)

"""A later batch with an extra column: what readers make of the files sink's output.

Batch 0 writes ``(id, payload)``, batch 1 ``(id, payload, extra)`` (the local engine, no
JVM to write). docs/backends/files.md ("Evolving schemas") states these results:

* ``pyarrow.dataset`` reads one dataset with a unified schema (``pa.unify_schemas`` of the
  files' schemas, passed as ``schema=``): the old files' rows have nulls in ``extra``;
  without it, the dataset takes the schema of the first file it finds and drops ``extra``
  (or misses it) silently;
* Spark reads one dataset with ``mergeSchema``; without it, it also picks one file's
  schema;
* a column whose type changes between batches (``int64`` then ``string``) cannot be
  unified: pyarrow raises; a widening (``int32`` then ``int64``) unifies only with
  ``promote_options="permissive"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import twopc
from twopc.local import LocalStream, foreach_batch

pytestmark = [pytest.mark.e2e]


def _write(out: Path, batches: list[list[pa.Table]], **options: Any) -> None:
    sink = twopc.create_sink("files", path=str(out), **options)
    checkpoint = out.parent / "chk"
    LocalStream(str(checkpoint), batches).run(
        foreach_batch(sink, "files-evolve", commit_log=str(checkpoint / "log"), processes=False)
    )


def _batches(extra_type: pa.DataType | None = None) -> list[list[pa.Table]]:
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "payload": ["a", "b"]})
    extra = pa.array([30, 40], pa.int64()).cast(extra_type or pa.int64())
    second = pa.table({"id": pa.array([3, 4], pa.int64()), "payload": ["c", "d"], "extra": extra})
    return [[first], [second]]


def _unified(out: Path) -> pa.Schema:
    files = ds.dataset(str(out), format="parquet").files
    return pa.unify_schemas([pq.read_schema(f) for f in files])


def test_pyarrow_reads_one_dataset_with_a_unified_schema(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, _batches())
    schema = _unified(out)
    assert schema.names == ["id", "payload", "extra"]
    table = ds.dataset(str(out), format="parquet", schema=schema).to_table().sort_by("id")
    assert table.to_pylist() == [
        {"id": 1, "payload": "a", "extra": None},
        {"id": 2, "payload": "b", "extra": None},
        {"id": 3, "payload": "c", "extra": 30},
        {"id": 4, "payload": "d", "extra": 40},
    ]
    # without it: the first file's schema (batch 0: names sort by batch), all rows, the
    # new column dropped without an error
    plain = ds.dataset(str(out), format="parquet").to_table()
    assert plain.num_rows == 4
    assert plain.schema.names == ["id", "payload"]


def test_a_changed_type_cannot_be_unified(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # check_schemas=False: what readers meet when a writer does not refuse the change
    _write(out, [*_batches(), _batches(pa.string())[1]], check_schemas=False)
    files = ds.dataset(str(out), format="parquet").files
    schemas = [pq.read_schema(f) for f in files]
    for options in ("default", "permissive"):
        with pytest.raises(pa.ArrowTypeError, match="incompatible types: int64 vs string"):
            pa.unify_schemas(schemas, promote_options=options)


def test_a_widened_type_unifies_only_when_permissive(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, [_batches(pa.int32())[1], _batches()[1]], check_schemas=False)
    schemas = [pq.read_schema(f) for f in ds.dataset(str(out), format="parquet").files]
    with pytest.raises(pa.ArrowTypeError):
        pa.unify_schemas(schemas)
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    assert schema.field("extra").type == pa.int64()
    table = ds.dataset(str(out), format="parquet", schema=schema).to_table()
    assert sorted(table.column("extra").to_pylist()) == [30, 30, 40, 40]


@pytest.mark.slow
def test_spark_reads_one_dataset_with_merge_schema(spark: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out, _batches())
    frame = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert sorted(frame.columns) == ["extra", "id", "payload"]
    rows = sorted((r.id, r.payload, r.extra) for r in frame.collect())
    assert rows == [(1, "a", None), (2, "b", None), (3, "c", 30), (4, "d", 40)]

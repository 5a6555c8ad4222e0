"""What Spark and pyarrow read after the files sink refused batches whose columns readers
could not merge (the refusals themselves: ``tests/unit/test_files_bad_input.py``; on S3:
``tests/integration/test_s3_files.py``).

Batch 0 writes ``(id, payload)``, batch 1 adds ``extra``; a batch 2 that changes ``extra``
to a string, and one whose partitions disagree on a new column ``note``, are refused. Then
``spark.read.parquet`` (with ``mergeSchema``, as docs/backends/files.md says) and
``pyarrow.dataset`` (with the unified schema) read exactly batches 0 and 1."""

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


def _part(ids: list[int], payload: list[Any], **extra: list[Any]) -> pa.Table:
    columns = {"id": pa.array(ids, pa.int64()), "payload": payload, **extra}
    return pa.table(columns)


def _batches() -> list[list[pa.Table]]:
    first = [_part([1, 2], ["a", "b"]), _part([3, 4], ["c", "d"])]
    second = [_part([5, 6], ["e", "f"], extra=[50, 60]), _part([7, 8], ["g", "h"], extra=[70, 80])]
    return [first, second]


def _write(out: Path, batches: list[list[pa.Table]], checkpoint: Path) -> Any:
    sink = twopc.create_sink("files", path=str(out))
    writer = foreach_batch(sink, "evolve", commit_log=str(checkpoint / "log"), processes=False)
    return LocalStream(str(checkpoint), batches).run(writer)


def test_refused_batches_leave_an_output_spark_and_pyarrow_read_whole(
    spark: Any,
    tmp_path: Path,
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "chk"
    batches = _batches()
    assert _write(out, batches, checkpoint) == [0, 1]

    retyped = [_part([9], ["z"], extra=["ninety"]), _part([10], ["y"], extra=["a hundred"])]
    with pytest.raises(twopc.BatchFailedError, match="column 'extra' is string in this batch"):
        _write(out, [*batches, retyped], checkpoint)
    split = [_part([9], ["z"], note=["n"]), _part([10], ["y"], note=[1])]
    with pytest.raises(twopc.BatchFailedError, match="column 'note' is int64 in this partition"):
        _write(out, [*batches, split], checkpoint)

    expected = [(1, "a", None), (2, "b", None), (3, "c", None), (4, "d", None)]
    expected += [(5, "e", 50), (6, "f", 60), (7, "g", 70), (8, "h", 80)]
    frame = spark.read.option("mergeSchema", "true").parquet(str(out))
    assert sorted(frame.columns) == ["extra", "id", "payload"]
    assert sorted((r.id, r.payload, r.extra) for r in frame.collect()) == expected

    files = ds.dataset(str(out), format="parquet").files
    schema = pa.unify_schemas([pq.read_schema(f) for f in files])
    table = ds.dataset(str(out), format="parquet", schema=schema).to_table()
    rows = sorted((r["id"], r["payload"], r["extra"]) for r in table.to_pylist())
    assert rows == expected

"""The Iceberg sink with its warehouse on the S3 API of ``scripts/services``: pyiceberg writes
the table's metadata there, the sink its data files and records (through s3fs, with options
taken from the catalog's ``s3.*`` properties); a crash of a task attempt, then the rerun,
leave every id once and no object that no snapshot references."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from twopc import local

pytest.importorskip("pyiceberg")
pytest.importorskip("s3fs")

from twopc_iceberg import IcebergSink

pytestmark = pytest.mark.integration

TABLE = "lake.events"


def _sink(s3_store: Any, tmp_path: Path, prefix: str, **options: Any) -> IcebergSink:
    return IcebergSink(
        TABLE,
        catalog="s3lake",
        catalog_properties={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": f"s3://{s3_store.bucket}/{prefix}",
            "s3.endpoint": s3_store.endpoint_url,
            "s3.access-key-id": s3_store.access_key_id,
            "s3.secret-access-key": s3_store.secret_access_key,
            "s3.region": "us-east-1",
        },
        create_table=True,
        **options,
    )


def _batches(*ranges: tuple[int, int]) -> list[list[pa.Table]]:
    return [
        [pa.table({"id": pa.array(range(a, b), pa.int64()), "v": ["x"] * (b - a)})]
        for a, b in ranges
    ]


def test_a_warehouse_on_s3_gets_every_batch_once(s3_store: Any, tmp_path: Path) -> None:
    prefix = f"iceberg-{uuid.uuid4().hex[:8]}"
    sink = _sink(s3_store, tmp_path, prefix, partition_by=["bucket(2, id)"])
    assert s3_store.secret_access_key not in repr(sink)
    stream = local.LocalStream(str(tmp_path / "chk"), _batches((0, 20), (20, 40), (40, 60)))
    crashing = local.foreach_batch(
        sink,
        "s3ev",
        commit_log=str(tmp_path / "log"),
        processes=False,
        faults=twopc.FaultPlan.parse("after_invoke:raise@batch=1,partition=0"),
    )
    with pytest.raises(twopc.BatchFailedError):
        stream.run(crashing)
    stream.run(local.foreach_batch(sink, "s3ev", commit_log=str(tmp_path / "log"), processes=False))
    table = sink.load_table()
    assert table is not None and table.location().startswith(f"s3://{s3_store.bucket}/{prefix}")
    seen = Counter(table.scan().to_arrow()["id"].to_pylist())
    assert seen == Counter(range(60))
    import s3fs

    fs = s3fs.S3FileSystem(
        key=s3_store.access_key_id,
        secret=s3_store.secret_access_key,
        client_kwargs={"endpoint_url": s3_store.endpoint_url, "region_name": "us-east-1"},
    )
    location = table.location().removeprefix("s3://")
    data = [f"s3://{p}" for p in fs.find(f"{location}/data") if p.endswith(".parquet")]
    referenced = set(table.inspect.all_files()["file_path"].to_pylist())
    assert sorted(set(data) - referenced) == []
    assert list(fs.find(f"{location}/twopc")) == []

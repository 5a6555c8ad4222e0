"""The files backend against a real S3 API (S3Proxy from ``scripts/services``, through s3fs
as against AWS): batches commit, a failed batch leaves nothing, and nothing staged stays
behind; read back with pyarrow's own S3 filesystem, not through twopc or fsspec."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyarrow import fs as pafs

import twopc
from tests.integration.conftest import S3Store
from twopc import CommitLog, FaultPlan
from twopc._coordinator import Coordinator
from twopc.local import LocalEngine

pytestmark = pytest.mark.integration

QUERY = "query-s3"


def _arrow_s3(store: S3Store) -> pafs.S3FileSystem:
    host = store.endpoint_url.removeprefix("http://")
    return pafs.S3FileSystem(
        access_key=store.access_key_id,
        secret_key=store.secret_access_key,
        endpoint_override=host,
        scheme="http",
        region="us-east-1",
    )


def _ids(batch_id: int) -> LocalEngine:
    return LocalEngine(
        [
            pa.table({"id": pa.array(range(batch_id * 100 + p * 10, batch_id * 100 + p * 10 + 10))})
            for p in range(2)
        ],
        processes=False,
    )


def _visible(store: S3Store, prefix: str) -> list[int]:
    """Every id a pyarrow reader of the output sees (hidden ``_``/``.`` names skipped)."""
    s3 = _arrow_s3(store)
    selector = pafs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True)
    files = [
        info.path
        for info in s3.get_file_info(selector)
        if info.type == pafs.FileType.File
        and not any(part.startswith(("_", ".")) for part in info.path.split("/")[2:])
    ]
    if not files:
        return []
    table = ds.dataset(files, filesystem=s3, format="parquet").to_table()
    return sorted(table.column("id").to_pylist())


def _all_objects(store: S3Store, prefix: str) -> list[str]:
    s3 = _arrow_s3(store)
    selector = pafs.FileSelector(f"{store.bucket}/{prefix}", recursive=True, allow_not_found=True)
    return sorted(i.path for i in s3.get_file_info(selector) if i.type == pafs.FileType.File)


def test_files_on_s3_commit_once_and_a_failed_batch_leaves_nothing(
    s3_store: S3Store, tmp_path: Path
) -> None:
    prefix = f"orders-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = s3_store.storage_options()

    def coordinator(**extra: Any) -> Coordinator:
        sink = twopc.create_sink(
            "files", path=s3_store.url(prefix), format="parquet", storage_options=options
        )
        return Coordinator(sink, "orders", CommitLog(str(tmp_path / "log")), **extra)

    assert coordinator().run_batch(QUERY, 0, _ids(0)).status == "committed"
    assert _visible(s3_store, prefix) == list(range(20))

    failing = coordinator(faults=FaultPlan.parse("before_pre_commit:raise@batch=1,partition=1"))
    with pytest.raises(twopc.TwoPCError):
        failing.run_batch(QUERY, 1, _ids(1))
    assert _visible(s3_store, prefix) == list(range(20))

    assert coordinator().run_batch(QUERY, 1, _ids(1)).status == "committed"
    assert _visible(s3_store, prefix) == list(range(20)) + list(range(100, 120))
    # the replay of a committed batch writes nothing
    assert coordinator().run_batch(QUERY, 1, _ids(1)).status == "skipped"
    assert _visible(s3_store, prefix) == list(range(20)) + list(range(100, 120))
    # nothing staged is left behind
    assert [o for o in _all_objects(s3_store, prefix) if "/_twopc_staging/" in o] == []

"""The files backend passes the conformance kit, on both write paths.

``files_sink`` is the sink as users get it: under ``foreach_batch`` and ``write_batch`` its
phase 1 runs in Spark's own writer (the kit skips the check that fails a Python task, which
does not run there). The Spark checks run again with phase 1 in Python tasks (three short
queries)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from twopc.testing import GroupMemberChecks, SinkConformanceSuite, SparkChecks

pytestmark = pytest.mark.e2e


def _read_ids(target: str) -> list[int]:
    try:
        dataset = ds.dataset(target, format="parquet")
    except FileNotFoundError:
        return []
    if not dataset.files:
        return []
    return [int(i) for i in dataset.to_table(columns=["id"])["id"].to_pylist()]


class TestFilesConformance(SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:files_sink"

    def format_options(self, target: str) -> dict[str, str]:
        return {"sink": "files", "path": target, "format": "parquet"}

    def read_committed(self, target: str) -> list[int]:
        return _read_ids(target)

    def bad_batch(self) -> pa.RecordBatch:
        # a column whose type changes inside one task cannot be written to one file
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": ["x"]})


class TestFilesPythonPathSpark(SparkChecks):
    sink_factory = "tests.kit.factories:files_python_sink"

    def read_committed(self, target: str) -> list[int]:
        return _read_ids(target)

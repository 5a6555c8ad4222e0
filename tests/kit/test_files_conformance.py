"""The files backend passes the conformance kit."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from twopc.testing import SinkConformanceSuite

pytestmark = pytest.mark.e2e


class TestFilesConformance(SinkConformanceSuite):
    sink_factory = "tests.kit.factories:files_sink"

    def format_options(self, target: str) -> dict[str, str]:
        return {"sink": "files", "path": target, "format": "parquet"}

    def read_committed(self, target: str) -> list[int]:
        try:
            dataset = ds.dataset(target, format="parquet")
        except FileNotFoundError:
            return []
        if not dataset.files:
            return []
        return [int(i) for i in dataset.to_table(columns=["id"])["id"].to_pylist()]

    def bad_batch(self) -> pa.RecordBatch:
        # a column whose type changes inside one task cannot be written to one file
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": ["x"]})

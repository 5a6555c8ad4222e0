"""The Delta backend passes the conformance kit against real Delta tables on the local
filesystem, read back with deltalake's reader: a table the first batch's commit creates,
phase 1 in Python tasks on every entry point; and a table that exists before the query,
which ``foreach_batch`` and ``write_batch`` write through Spark's own Parquet writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twopc.testing import GroupMemberChecks, SinkConformanceSuite

pytestmark = pytest.mark.e2e

pytest.importorskip("deltalake")


def read_ids(target: str) -> list[int]:
    """The ids deltalake's reader sees in the table now."""
    from tests.harness.delta import ids

    return sorted(ids(target).elements())


class _DeltaTarget:
    def format_options(self, target: str) -> dict[str, str]:
        return {"sink": "delta", "table_uri": target, "create_table": "true"}

    def read_committed(self, target: str) -> list[int]:
        return read_ids(target)

    def bad_batch(self) -> pa.RecordBatch:
        # ids that are not numbers cannot go into the table's long column
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": ["x"]})


class TestDeltaConformance(_DeltaTarget, SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:delta_sink"


class TestDeltaSparkWriteConformance(_DeltaTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:delta_spark_sink"

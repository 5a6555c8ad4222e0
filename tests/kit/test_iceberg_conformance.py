"""The Iceberg backend passes the conformance kit against a real catalog: pyiceberg's SQL
catalog on a SQLite file in the warehouse (the embedded default), read back with a
pyiceberg table scan. Two classes: a table the first batch creates (phase 1 in Python tasks
on every entry point), and a table that exists before the sink, which ``foreach_batch`` and
``write_batch`` write through Spark's own writer (its Spark checks; under ``--extended``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twopc.testing import GroupMemberChecks, SinkConformanceSuite

pytestmark = pytest.mark.e2e

pytest.importorskip("pyiceberg")


def read_ids(warehouse: str, table: str = "kit.events") -> list[int]:
    """The ids a pyiceberg scan of the table sees now."""
    from twopc_iceberg import IcebergSink

    loaded = IcebergSink(table, warehouse=warehouse).load_table()
    if loaded is None:
        return []
    return [int(i) for i in loaded.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()]


class _IcebergTarget:
    def format_options(self, target: str) -> dict[str, str]:
        return {
            "sink": "iceberg",
            "table": "kit.events",
            "warehouse": target,
            "create_table": "true",
        }

    def read_committed(self, target: str) -> list[int]:
        return read_ids(target)

    def bad_batch(self) -> pa.RecordBatch:
        # ids that are not numbers cannot go into the table's long column
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": ["x"]})


class TestIcebergConformance(_IcebergTarget, SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:iceberg_sink"


class TestIcebergSparkWriteConformance(_IcebergTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:iceberg_spark_sink"

"""The Iceberg backend passes the conformance kit against a real catalog: pyiceberg's SQL
catalog on a SQLite file in the warehouse (the embedded default), read back with a
pyiceberg table scan. Phase 1 runs in Python tasks on every entry point, so the suite's
Spark checks are the only Spark variant."""

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

"""twopc's conformance kit, run against the sqlite sink.

``pytest tests`` runs everything; ``pytest tests -k "not spark"`` skips the Spark tests
(they also skip themselves when pyspark is not installed) and ``-k "not spark and not
sigkill"`` keeps only the fast protocol checks.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from twopc.testing import SinkConformanceSuite

from twopc_sqlite.testing import read_ids


class TestSqliteConformance(SinkConformanceSuite):
    # importable in the kit's fresh processes: it lives in the installed package
    sink_factory = "twopc_sqlite.testing:make_sink"
    large_rows = 100_000

    def new_target(self, tmp_path: Path) -> str:
        return str(tmp_path / "target.sqlite3")

    def read_committed(self, target: str) -> list[int]:
        return read_ids(target)

    def bad_batch(self) -> pa.RecordBatch:
        # ids that are not integers: the sink rejects the batch before anything is staged
        return pa.record_batch({"id": pa.array(["not-a-number"]), "payload": pa.array(["x"])})

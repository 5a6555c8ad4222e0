"""The SQL sinks' marker rows are pruned with the commit log (issue 46): ``forget_markers``
deletes a query's rows of batches before a horizon, and nothing of other queries or of
later batches, read back from the real servers."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.local
from tests.harness.databases import Database

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_forget_markers_deletes_a_querys_rows_before_the_horizon(
    backend: str, postgres_dsn: str, mysql_dsn: str, tmp_path: Path
) -> None:
    dsn = postgres_dsn if backend == "postgres" else mysql_dsn
    db = Database(backend, dsn)
    table = f"prune_{uuid.uuid4().hex[:8]}"
    markers = f"prune_markers_{uuid.uuid4().hex[:8]}"
    db.create(table)
    try:
        sink = twopc.create_sink(backend, dsn=dsn, table=table, marker_table=markers)
        writer = twopc.local.foreach_batch(
            sink, "prune", commit_log=str(tmp_path / "log"), processes=False
        )
        for query in ("q1", "q2"):
            for batch in range(4):
                parts = [pa.table({"id": pa.array([batch * 10 + p], pa.int64())}) for p in range(2)]
                writer.write(query, batch, parts)

        def rows(query: str) -> list[int]:
            found = db.query(
                f"SELECT batch_id FROM {markers} WHERE sink_id = 'prune' AND query_id = '{query}'"
            )
            return sorted(int(r[0]) for r in found)

        assert rows("q1") == [0, 0, 1, 1, 2, 2, 3, 3]
        assert sink.forget_markers("prune", "q1", 2) == 4
        assert rows("q1") == [2, 2, 3, 3]
        assert rows("q2") == [0, 0, 1, 1, 2, 2, 3, 3]
        assert sink.forget_markers("prune", "q1", 2) == 0  # idempotent
    finally:
        db.drop(table)
        db.drop(markers)
        db.drop(f"{markers}_writers")

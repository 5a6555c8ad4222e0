"""Schema evolution with real Spark: a classic ``foreachBatch`` query's second batch brings
a new column into PostgreSQL (``schema_evolution="add_columns"``, ``two_phase``); the driver
is SIGKILLed after the batch's decision and the query restarted from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.harness.databases import Database
from tests.harness.processes import run_process

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow, pytest.mark.extended]

FILES, ROWS = 3, 10


def test_new_column_through_a_driver_kill_after_the_decision(
    postgres_dsn: str, tmp_path: Path
) -> None:
    db = Database("postgres", postgres_dsn)
    table = f"evolve_spark_{uuid.uuid4().hex[:8]}"
    db.query(f"CREATE TABLE {table} (id BIGINT, payload TEXT)")
    source = tmp_path / "in"
    source.mkdir()
    for f in range(FILES):
        lines = [json.dumps({"id": f * 100 + i, "payload": f"f{f}"}) for i in range(ROWS)]
        path = source / f"part-{f:03d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # one batch per file, in order
    args = [
        "tests/e2e/spark_schema_query.py",
        str(source),
        str(tmp_path / "chk"),
        postgres_dsn,
        "--table",
        table,
    ]
    try:
        first = run_process(args, faults="after_decision:kill@batch=1", timeout=300)
        assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
        second = run_process(args, timeout=300)
        assert second.returncode == 0, second.stderr[-3000:]

        columns = db.query(
            "SELECT column_name, is_nullable FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        assert columns == [("id", "YES"), ("payload", "YES"), ("extra", "YES")]
        rows = db.query(f"SELECT id, extra FROM {table} ORDER BY id")
        assert [r[0] for r in rows] == [f * 100 + i for f in range(FILES) for i in range(ROWS)]
        wrong = [(i, e) for i, e in rows if e != (None if i < 100 else i * 2)]
        assert wrong == [], f"batch 0 (file 0) has no extra, later batches id * 2: {wrong[:5]}"
        assert db.prepared(f"evolve-{table}") == []
    finally:
        db.query(f"DROP TABLE IF EXISTS {table}")

"""Crash tests across schema evolution on real PostgreSQL and MariaDB: batch 1 of a
local-engine query brings a new column (``schema_evolution="add_columns"``); the process
is killed right after a task added it (and wrote rows), before the decision and after it,
then restarted from its checkpoint. The table must then have the column once, every row
exactly once, the new column filled from batch 1 on, and no prepared transaction left.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from tests.harness.databases import Database, sql_query
from tests.harness.processes import run_process
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, NEW_COLUMN_FROM = 3, 2, 20, 1
EXPECTED = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}
POINTS = (CrashPoint.AFTER_INVOKE, CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION)
FAST = {
    ("postgres", "transaction", CrashPoint.AFTER_INVOKE),
    ("mysql", "two_phase", CrashPoint.AFTER_DECISION),
}
CASES = [
    pytest.param(
        backend,
        mode,
        point,
        id=f"{backend}-{mode}-{point.value}",
        marks=() if (backend, mode, point) in FAST else pytest.mark.extended,
    )
    for backend in ("postgres", "mysql")
    for mode in ("transaction", "two_phase")
    for point in POINTS
]


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Database:
    backend = request.param
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    return Database(backend, dsn)


def _query(db: Database, tmp_path: Path, table: str, mode: str, sink_id: str) -> list[str]:
    return sql_query(
        db, tmp_path, table, mode, sink_id,
        batches=BATCHES, partitions=PARTITIONS, rows=ROWS, new_column_from=NEW_COLUMN_FROM,
    )  # fmt: skip


def _columns(db: Database, table: str) -> list[str]:
    schema = "current_schema()" if db.backend == "postgres" else "DATABASE()"
    rows = db.query(
        "SELECT column_name FROM information_schema.columns "
        f"WHERE table_schema = {schema} AND table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize(("database", "mode", "point"), CASES, indirect=["database"])
def test_kill_across_added_column_then_restart(
    database: Database, tmp_path: Path, mode: str, point: CrashPoint
) -> None:
    table = f"evolve_{uuid.uuid4().hex[:10]}"
    sink_id = f"evolve-{uuid.uuid4().hex[:8]}"
    database.create(table)
    try:
        # after_invoke on partition 1: its task added the column (or found it) and wrote
        # ten rows; the driver points come after every task of the batch did
        where = "" if point.on_driver else ",partition=1,rows=10"
        first = run_process(
            _query(database, tmp_path, table, mode, sink_id),
            faults=f"{point.value}:kill@batch={NEW_COLUMN_FROM}{where}",
            timeout=120,
        )
        assert first.returncode == (-signal.SIGKILL if point.on_driver else 1), first.stderr[-3000:]
        committed = {r[0] for r in database.query(f"SELECT id FROM {table}")}
        assert committed <= EXPECTED

        second = run_process(_query(database, tmp_path, table, mode, sink_id), timeout=120)
        assert second.returncode == 0, second.stderr[-3000:]
        assert _columns(database, table) == ["id", "payload", "extra"]
        rows = database.query(f"SELECT id, extra FROM {table}")
        ids = sorted(int(r[0]) for r in rows)
        assert ids == sorted(EXPECTED), "rows lost or duplicated"
        for row_id, extra in rows:
            expected_extra = None if row_id < NEW_COLUMN_FROM * 1000 else row_id * 2
            assert extra == expected_extra, (row_id, extra)
        assert database.prepared(sink_id) == []
    finally:
        database.drop(table)

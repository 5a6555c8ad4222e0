"""Crash matrix for the SQL sinks on real PostgreSQL and MariaDB: the query process (local
engine, no JVM) is SIGKILLed at every crash point that applies to the transaction mode,
restarted from its checkpoint, and the table must then hold every row exactly once, with
no prepared transaction of the sink left behind.
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

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 20, 1
EXPECTED = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}

TASK_POINTS = [
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
]
DRIVER_POINTS = [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION, CrashPoint.AFTER_COMMIT]
POINTS = {
    "transaction": [
        *TASK_POINTS,
        CrashPoint.BEFORE_TASK_COMMIT,
        CrashPoint.AFTER_TASK_COMMIT,
        *DRIVER_POINTS,
    ],
    "two_phase": [*TASK_POINTS, *DRIVER_POINTS, CrashPoint.BETWEEN_COMMITS],
}
CASES = [
    (backend, mode, point)
    for backend in ("postgres", "mysql")
    for mode, points in POINTS.items()
    for point in points
]


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Database:
    backend = request.param
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    return Database(backend, dsn)


@pytest.mark.parametrize(
    ("database", "mode", "point"),
    CASES,
    ids=[f"{b}-{m}-{p.value}" for b, m, p in CASES],
    indirect=["database"],
)
def test_sigkill_at_crash_point_then_restart(
    database: Database, tmp_path: Path, mode: str, point: CrashPoint
) -> None:
    table = f"crash_{uuid.uuid4().hex[:10]}"
    sink_id = f"crash-{uuid.uuid4().hex[:8]}"
    database.create(table)
    try:
        where = "" if point.on_driver else ",partition=1"
        rows = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
        first = run_process(
            sql_query(database, tmp_path, table, mode, sink_id),
            faults=f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}",
            timeout=120,
        )
        expected_code = -signal.SIGKILL if point.on_driver else 1
        assert first.returncode == expected_code, first.stderr[-3000:]
        visible = database.ids(table)
        assert all(n == 1 for n in visible.values()), "duplicates after the crash"
        assert set(visible) <= EXPECTED

        second = run_process(sql_query(database, tmp_path, table, mode, sink_id), timeout=120)
        assert second.returncode == 0, second.stderr[-3000:]
        ids = database.ids(table)
        assert sorted(ids.elements()) == sorted(EXPECTED), (
            f"duplicates: {[i for i, n in ids.items() if n > 1][:10]}, "
            f"missing: {sorted(EXPECTED - set(ids))[:10]}"
        )
        assert database.prepared(sink_id) == []
    finally:
        database.drop(table)

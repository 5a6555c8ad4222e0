"""Crash matrix of the Iceberg sink (embedded SQLite catalog, local warehouse): the query
is SIGKILLed at every crash point of batch 1 (the driver at the driver's points, the task's
process at the task's), restarted from its checkpoint, and a pyiceberg scan of the table
must then show every id exactly once, with no data file that no snapshot references and
no attempt record left. The local engine runs two points in CI (a task's after it
prepared, the driver's after the decision) and every point under ``--extended``; real
Spark (the driver a PySpark process, the task a Python worker) runs every point under
``--extended``, as does the Spark write path's driver points and an executor killed on a
two-executor cluster. CI's Iceberg crash on real Spark is the driver killed in the middle
of Spark's write job (``tests/e2e/test_iceberg_spark_write.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness.backend_cases import add_input, new_target
from tests.harness.entry_runs import command, kill_executors_when
from tests.harness.table_crashes import (
    CRASH_BATCH,
    POINTS,
    Case,
    local_query_killed,
    spark_cases,
    spark_query_killed,
)
from twopc.faults import CrashPoint

pytest.importorskip("pyiceberg")

pytestmark = [pytest.mark.e2e]

SPARK_CI: set[CrashPoint] = set()  # see the module's docstring


@pytest.fixture
def iceberg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    target, spec = new_target(request, "iceberg", "sqlite", tmp_path / "target", prefix="ic")
    yield target, spec
    target.cleanup(spec)


def test_the_matrix_has_every_point_an_iceberg_sink_passes(tmp_path: Path) -> None:
    from twopc.testing import crash_points
    from twopc_iceberg import IcebergSink

    sink = IcebergSink("db.t", warehouse=str(tmp_path))
    assert set(POINTS) == set(crash_points(sink))


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.value)
def test_local_query_killed_at_every_point(
    iceberg: Case, point: CrashPoint, tmp_path: Path
) -> None:
    local_query_killed(iceberg, point, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("point", spark_cases(SPARK_CI))
def test_spark_query_killed_at_every_point(
    iceberg: Case, point: CrashPoint, tmp_path: Path
) -> None:
    spark_query_killed(iceberg, point, tmp_path)


SPARK_WRITE_POINTS = [point for point in POINTS if point.on_driver]


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("point", SPARK_WRITE_POINTS, ids=lambda p: p.value)
def test_spark_write_path_query_killed_at_every_driver_point(
    iceberg: Case, point: CrashPoint, tmp_path: Path
) -> None:
    """The same on the Spark write path (``write_path="spark"``: Spark's own Parquet
    writer, no Python task, so the driver's points only; the table exists before the
    query, as that path needs). The driver killed in the middle of the write job itself:
    ``tests/e2e/test_iceberg_spark_write.py``."""
    import pyarrow as pa

    from tests.harness.sink_recipe import build_sink

    target, spec = iceberg
    spec = replace(
        spec, options=json.dumps({**json.loads(spec.options or "{}"), "write_path": "spark"})
    )
    build_sink(spec).access.for_data(pa.schema([("id", pa.int64()), ("payload", pa.string())]))
    spark_query_killed((target, spec), point, tmp_path)
    # only files without field ids (Spark's writer's) make the commit set the name mapping
    assert "schema.name-mapping.default" in build_sink(spec).load_table().properties


@pytest.mark.slow
@pytest.mark.extended
def test_an_executor_killed_after_its_task_prepared(iceberg: Case, tmp_path: Path) -> None:
    """local-cluster: two executor JVMs; the task of partition 0 of batch 1 stalls after it
    prepared and both executors are SIGKILLed (JVMs and Python workers). Spark retries the
    task on new executors, the decision takes the retry, and the killed attempt's prepared
    files are removed: the table shows every id once, nothing unreferenced is left."""
    target, spec = iceberg
    source = tmp_path / "in"
    expected = add_input(source, 0) | add_input(source, 1) | add_input(source, 2)
    args = command(
        "foreach",
        spec,
        source,
        tmp_path / "chk",
        master="local-cluster[2,1,1024]",
        faults=f"after_pre_commit:sleep=60@batch={CRASH_BATCH},partition=0,attempt=0",
    )
    warehouse = Path(spec.address)
    returncode, output = kill_executors_when(
        args,
        tmp_path / "query.log",
        lambda: any(warehouse.rglob(f"twopc/*/*/{CRASH_BATCH}/0-*.json")),
        f"partition 0 of batch {CRASH_BATCH} prepared",
    )
    assert returncode == 0, output[-3000:]
    seen = target.committed(spec)
    assert sorted(i for i, n in seen.items() if n > 1) == []
    assert set(seen) == expected
    assert target.leftovers(spec) == []

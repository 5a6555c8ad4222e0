"""Crash matrix of the Delta sink (a local Delta table): the query is SIGKILLed at every
crash point of batch 1 (the driver at the driver's points, the task's process at the
task's), restarted from its checkpoint, and deltalake's reader must then show every id
exactly once, with no data file that no version of the log references, no file the
table references twice, and no attempt record left; DuckDB's Parquet reader over the files
the log references must agree. The local engine runs every point; real Spark (the driver a
PySpark process, the task a Python worker) runs the driver killed after the decision in
CI and every other point under ``--extended``, as does the Spark write path's driver
points. CI's crash on the Spark write path is the driver killed in the middle of Spark's
write job (``tests/e2e/test_delta_spark_write.py``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness.backend_cases import new_target
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.table_crashes import (
    POINTS,
    Case,
    local_query_killed,
    spark_cases,
    spark_query_killed,
)
from twopc.faults import CrashPoint

pytest.importorskip("deltalake")

pytestmark = [pytest.mark.e2e]

SPARK_CI = {CrashPoint.AFTER_DECISION}  # see the module's docstring


@pytest.fixture
def delta(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    target, spec = new_target(request, "delta", "append", tmp_path / "target", prefix="dl")
    yield target, spec
    target.cleanup(spec)


def _duckdb_agrees(spec: SinkRecipe, seen: Counter[int]) -> None:
    from tests.harness.delta import duckdb_parquet_ids

    assert duckdb_parquet_ids(spec.address) == seen


def test_the_matrix_has_every_point_a_delta_sink_passes(tmp_path: Path) -> None:
    from twopc.testing import crash_points
    from twopc_delta import DeltaSink

    assert set(POINTS) == set(crash_points(DeltaSink(str(tmp_path / "t"))))


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.value)
def test_local_query_killed_at_every_point(delta: Case, point: CrashPoint, tmp_path: Path) -> None:
    local_query_killed(delta, point, tmp_path, also=_duckdb_agrees)


@pytest.mark.slow
@pytest.mark.parametrize("point", spark_cases(SPARK_CI))
def test_spark_query_killed_at_every_point(delta: Case, point: CrashPoint, tmp_path: Path) -> None:
    spark_query_killed(delta, point, tmp_path, also=_duckdb_agrees)


SPARK_WRITE_POINTS = [point for point in POINTS if point.on_driver]


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("point", SPARK_WRITE_POINTS, ids=lambda p: p.value)
def test_spark_write_path_query_killed_at_every_driver_point(
    delta: Case, point: CrashPoint, tmp_path: Path
) -> None:
    """The same on the Spark write path (``write_path="spark"``: Spark's own Parquet
    writer, no Python task, so the driver's points only; the table exists before the
    query, as that path needs)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    target, spec = delta
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string())])
    write_deltalake(spec.address, schema.empty_table())
    spec = replace(spec, options=json.dumps({"write_path": "spark"}))
    spark_query_killed((target, spec), point, tmp_path, also=_duckdb_agrees)

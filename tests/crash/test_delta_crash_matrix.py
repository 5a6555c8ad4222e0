"""Crash matrix of the Delta sink (a local Delta table): the query is SIGKILLed at every
crash point of batch 1 (the driver at the driver's points, the task's process at the
task's), restarted from its checkpoint, and deltalake's reader must then show every id
exactly once, with no data file that no version of the log references, no file the
table references twice, and no attempt record left; DuckDB's Parquet reader over the files
the log references must agree. The local engine runs every point; real Spark (the driver a
PySpark process, the task a Python worker) runs the driver killed after the decision in
CI and every other point under ``--extended``."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.backend_cases import add_input, new_target
from tests.harness.processes import run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import Target
from twopc import CommitLog
from twopc.faults import CrashPoint

pytest.importorskip("deltalake")

pytestmark = [pytest.mark.e2e]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 10, 1
EXPECTED = {
    b * 1000 + p * ROWS + i for b in range(BATCHES) for p in range(PARTITIONS) for i in range(ROWS)
}
# every point a driver-commit sink that commits a batch in one step passes
POINTS = [
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
    CrashPoint.BEFORE_DECISION,
    CrashPoint.AFTER_DECISION,
    CrashPoint.AFTER_COMMIT,
]
DECIDED = {CrashPoint.AFTER_DECISION, CrashPoint.AFTER_COMMIT}
SPARK_CI = {CrashPoint.AFTER_DECISION}  # see the module's docstring

Case = tuple[Target, SinkRecipe]


@pytest.fixture
def delta(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    target, spec = new_target(request, "delta", "append", tmp_path / "target", prefix="dl")
    yield target, spec
    target.cleanup(spec)


def _faults(point: CrashPoint) -> str:
    where = "" if point.on_driver else ",partition=1"
    rows = ",rows=5" if point is CrashPoint.AFTER_INVOKE else ""
    return f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}"


def _crash_then_restart(
    args: list[str],
    case: Case,
    point: CrashPoint,
    *,
    log: str,
    expected: set[int],
    crashed_batch: set[int],
    timeout: float,
) -> None:
    from tests.harness.delta import duckdb_parquet_ids

    target, spec = case
    crashed = run_process(args, faults=_faults(point), timeout=timeout)
    expected_code = -signal.SIGKILL if point.on_driver else 1
    assert crashed.returncode == expected_code, crashed.stderr[-3000:]
    seen = target.committed(spec)
    assert max(seen.values(), default=1) == 1, f"duplicates after {point}"
    (query_id,) = CommitLog(log).query_ids()
    decided = CommitLog(log).decision(query_id, CRASH_BATCH) is not None
    assert decided == (point in DECIDED)
    if not decided:
        assert not crashed_batch & set(seen), "the table shows an undecided batch"
    finished = run_process(args, timeout=timeout)
    assert finished.returncode == 0, finished.stderr[-3000:]
    seen = target.committed(spec)
    assert sorted(i for i, n in seen.items() if n > 1) == []
    assert set(seen) == expected
    assert duckdb_parquet_ids(spec.address) == seen
    assert target.leftovers(spec) == []


def test_the_matrix_has_every_point_a_delta_sink_passes(tmp_path: Path) -> None:
    from twopc.testing import crash_points
    from twopc_delta import DeltaSink

    assert set(POINTS) == set(crash_points(DeltaSink(str(tmp_path / "t"))))


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.value)
def test_local_query_killed_at_every_point(delta: Case, point: CrashPoint, tmp_path: Path) -> None:
    _, spec = delta
    checkpoint = str(tmp_path / "chk")
    args = ["-m", "tests.harness.recipe_local_query", spec.dumps(), checkpoint]
    args += [str(BATCHES), str(PARTITIONS), str(ROWS), "1"]
    _crash_then_restart(
        args,
        delta,
        point,
        log=str(spec.commit_log(checkpoint)),
        expected=EXPECTED,
        crashed_batch={i for i in EXPECTED if i // 1000 == CRASH_BATCH},
        timeout=180,
    )


SPARK_CASES = [
    pytest.param(point, id=point.value, marks=[] if point in SPARK_CI else [pytest.mark.extended])
    for point in POINTS
]


@pytest.mark.slow
@pytest.mark.parametrize("point", SPARK_CASES)
def test_spark_query_killed_at_every_point(delta: Case, point: CrashPoint, tmp_path: Path) -> None:
    _, spec = delta
    source = tmp_path / "in"
    first, crashed = add_input(source, 0), add_input(source, 1)
    expected = first | crashed | add_input(source, 2)
    args = ["-m", "tests.harness.recipe_spark_query", "--spec", spec.dumps()]
    args += ["--checkpoint", str(tmp_path / "chk"), "--input", str(source), "--partitions", "2"]
    _crash_then_restart(
        args,
        delta,
        point,
        log=str(spec.commit_log(str(tmp_path / "chk"))),
        expected=expected,
        crashed_batch=crashed,
        timeout=300,
    )

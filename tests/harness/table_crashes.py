"""What the crash matrices of the table-format sinks share
(``tests/crash/test_delta_crash_matrix.py``, ``tests/crash/test_iceberg_crash_matrix.py``):
the query is SIGKILLed at a crash point of batch 1, restarted from its checkpoint, and the
table must then show every id exactly once with nothing left behind."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input
from tests.harness.processes import run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import Target
from twopc import CommitLog
from twopc.faults import CrashPoint

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

Case = tuple[Target, SinkRecipe]
Check = Callable[[SinkRecipe, Counter[int]], None]
"""A further check of the table's ids after the restart."""


def faults(point: CrashPoint) -> str:
    """The fault plan that kills at ``point`` of batch 1 (a task's point: partition 1's)."""
    where = "" if point.on_driver else ",partition=1"
    rows = ",rows=5" if point is CrashPoint.AFTER_INVOKE else ""
    return f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}"


def crash_then_restart(
    args: list[str],
    case: Case,
    point: CrashPoint,
    *,
    log: str,
    expected: set[int],
    crashed_batch: set[int],
    timeout: float,
    also: Check | None = None,
) -> None:
    """Kill the query at ``point``, check that the table shows no undecided batch and no
    duplicate, restart it, and check every id once and nothing left."""
    target, spec = case
    crashed = run_process(args, faults=faults(point), timeout=timeout)
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
    if also is not None:
        also(spec, seen)
    assert target.leftovers(spec) == []


def local_query_killed(
    case: Case, point: CrashPoint, tmp_path: Path, also: Check | None = None
) -> None:
    """The local engine's query (``tests.harness.recipe_local_query``) killed at ``point``."""
    _, spec = case
    checkpoint = str(tmp_path / "chk")
    args = ["-m", "tests.harness.recipe_local_query", spec.dumps(), checkpoint]
    args += [str(BATCHES), str(PARTITIONS), str(ROWS), "1"]
    crash_then_restart(
        args,
        case,
        point,
        log=str(spec.commit_log(checkpoint)),
        expected=EXPECTED,
        crashed_batch={i for i in EXPECTED if i // 1000 == CRASH_BATCH},
        timeout=180,
        also=also,
    )


def spark_query_killed(
    case: Case, point: CrashPoint, tmp_path: Path, also: Check | None = None
) -> None:
    """A real Spark query (``tests.harness.recipe_spark_query``, two partitions, three
    input files) killed at ``point``."""
    _, spec = case
    source = tmp_path / "in"
    first, crashed = add_input(source, 0), add_input(source, 1)
    expected = first | crashed | add_input(source, 2)
    args = ["-m", "tests.harness.recipe_spark_query", "--spec", spec.dumps()]
    args += ["--checkpoint", str(tmp_path / "chk"), "--input", str(source), "--partitions", "2"]
    crash_then_restart(
        args,
        case,
        point,
        log=str(spec.commit_log(str(tmp_path / "chk"))),
        expected=expected,
        crashed_batch=crashed,
        timeout=300,
        also=also,
    )


def spark_cases(ci: set[CrashPoint]) -> list[Any]:
    """``POINTS`` as parameters: those in ``ci`` run in CI, the others under ``--extended``."""
    return [
        pytest.param(point, id=point.value, marks=[] if point in ci else [pytest.mark.extended])
        for point in POINTS
    ]

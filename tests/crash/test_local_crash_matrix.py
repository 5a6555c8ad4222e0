"""Every crash point, every action, on the JVM-free local engine: crash, restart, exactly once.

The query runs as its own process (tests/harness/local_query.py). Run 1 crashes at the point;
run 2 restarts from the checkpoint; the output read back with pyarrow must hold every id
exactly once, and nothing may be left staged.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.harness.exactly_once import assert_exactly_once
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.processes import local_query, run_process
from twopc.faults import EXIT_CODE, CrashPoint

pytestmark = pytest.mark.e2e

BATCHES, PARTITIONS, ROWS = 4, 2, 50
CRASH_BATCH = 2
EXPECTED = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}

# The files sink commits on the driver, so the in-task commit points never fire for it.
POINTS = [
    p
    for p in CrashPoint
    if p not in {CrashPoint.BEFORE_TASK_COMMIT, CrashPoint.AFTER_TASK_COMMIT}
    and not p.in_recovery  # reached only after an earlier crash: test_recovery_crashes.py
    and not p.in_group_only  # groups: test_group_crash_matrix.py
]


def _query(tmp_path: Path) -> list[str]:
    return local_query(
        "local_query",
        checkpoint=tmp_path / "chk",
        output=tmp_path / "out",
        batches=BATCHES,
        partitions=PARTITIONS,
        rows=ROWS,
    )


def _committed_before_crash(ids: set[int]) -> None:
    """Whatever run 1 left visible is a subset of the expected output, without duplicates."""
    assert ids <= EXPECTED


@pytest.mark.parametrize("action", ["kill", "exit", "raise"])
@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.value)
def test_crash_then_restart_is_exactly_once(tmp_path: Path, point: CrashPoint, action: str) -> None:
    partition = ",partition=1" if not point.on_driver else ""
    rows = ",rows=20" if point is CrashPoint.AFTER_INVOKE else ""
    fault = f"{point.value}:{action}@batch={CRASH_BATCH}{partition}{rows}"

    first = run_process(_query(tmp_path), faults=fault, timeout=120)
    if point.on_driver and action == "kill":
        assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    elif point.on_driver and action == "exit":
        assert first.returncode == EXIT_CODE, first.stderr[-2000:]
    elif point.on_driver:
        assert first.returncode == 1, first.stderr[-2000:]
        assert f"InjectedFault: sink 'local-orders', batch {CRASH_BATCH}" in first.stderr
    else:
        # A task crash fails the batch; the driver raises and exits non-zero.
        assert first.returncode == 1, first.stderr[-2000:]
        assert f"BatchFailedError: sink 'local-orders', batch {CRASH_BATCH}" in first.stderr

    visible = read_ids(tmp_path / "out")
    assert all(n == 1 for n in visible.values())
    _committed_before_crash(set(visible))
    if point in {
        CrashPoint.BEFORE_BEGIN,
        CrashPoint.AFTER_INVOKE,
        CrashPoint.BEFORE_PRE_COMMIT,
        CrashPoint.AFTER_PRE_COMMIT,
        CrashPoint.BEFORE_DECISION,
    }:
        # Undecided: nothing of the crashed batch is visible.
        assert set(visible) == {i for i in EXPECTED if i < CRASH_BATCH * 1000}

    second = run_process(_query(tmp_path), timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    assert_exactly_once(read_ids(tmp_path / "out"), EXPECTED)
    assert staged_attempts(tmp_path / "out") == []

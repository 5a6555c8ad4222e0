"""Crash tests with real Spark: at every crash point a process of the query is SIGKILLed
(the driver for driver-side points, the Python worker running the task for task-side
points), the query is restarted from its checkpoint, and the output read back with Spark
and pyarrow holds every id exactly once, with nothing left staged.

Both write paths of the files sink: Python tasks (every point) and Spark's own writer
(``write_path="spark"``: no Python task runs, so the driver's points). The Spark path's
kills in the middle of its write job, of an executor and of a speculative copy are in
``test_spark_write_path.py``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.exactly_once import assert_exactly_once
from tests.harness.outputs import read_ids, staged_attempts
from tests.harness.processes import run_process
from tests.harness.spark_fixtures import write_orders
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BATCHES, ROWS = 3, 200
CRASH_BATCH = 1
POINTS = [
    p
    for p in CrashPoint
    if p not in {CrashPoint.BEFORE_TASK_COMMIT, CrashPoint.AFTER_TASK_COMMIT}
    and not p.in_recovery  # reached only after an earlier crash: test_recovery_crashes.py
    and not p.in_group_only  # groups: test_group_crash_matrix.py
]


def _query(tmp_path: Path, *extra: str, write_path: str = "python") -> list[str]:
    return [
        "-m",
        "twopc._operations.demo_query",
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--expected",
        str(BATCHES * ROWS),
        "--sink-id",
        "crash-orders",
        "--write-path",
        write_path,
        *extra,
    ]


# Outside --extended only a commit in progress (the decision recorded but nothing
# committed); tests/extended.txt moves both write paths' cases out of CI as well, where the
# point runs on real Spark for PostgreSQL, Kafka and over Connect, and the other driver and
# task points through the kit's crash checks, the Kafka and SQL Spark tests and the
# entry-point tests. The local engine's matrix (test_local_crash_matrix.py) covers every
# point; --extended runs all of them here.
CI_POINTS = {CrashPoint.BETWEEN_COMMITS}  # after_decision: test_datasource, test_kafka_progress


def _cases() -> list[object]:
    """Every point on the Python path; the driver's points on Spark's (no task runs
    Python there)."""
    return [
        pytest.param(
            point,
            write_path,
            id=f"{write_path}-{point.value}",
            marks=[] if point in CI_POINTS else [pytest.mark.extended],
        )
        for write_path in ("python", "spark")
        for point in POINTS
        if write_path == "python" or point.on_driver
    ]


@pytest.mark.parametrize(("point", "write_path"), _cases())
def test_sigkill_at_crash_point_then_restart(
    tmp_path: Path, point: CrashPoint, write_path: str
) -> None:
    expected = write_orders(tmp_path / "in", BATCHES, ROWS)
    where = "" if point.on_driver else ",partition=1"
    rows = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
    first = run_process(
        _query(tmp_path, write_path=write_path),
        faults=f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}",
    )
    if point.on_driver:
        assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    else:
        # The Python worker died; local[2] does not retry, so the batch and the query fail.
        assert first.returncode == 1, first.stderr[-3000:]
        failed = first.of("query-failed")
        assert failed
        assert "sink 'crash-orders', batch 1" in failed[0]["error"]
    committed_first = [e["batch"] for e in first.of("batch") if e["status"] == "committed"]
    assert committed_first == [0]

    second = run_process(_query(tmp_path, "--read-back", write_path=write_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.of("read-back") == [
        {"event": "read-back", "committed": BATCHES * ROWS, "duplicates": 0, "missing": 0}
    ]
    assert_exactly_once(read_ids(tmp_path / "out"), expected)
    assert staged_attempts(tmp_path / "out") == []
    replayed = second.of("batch")[0]
    assert replayed["batch"] == CRASH_BATCH
    decided = point in {
        CrashPoint.AFTER_DECISION,
        CrashPoint.BETWEEN_COMMITS,
        CrashPoint.AFTER_COMMIT,
    }
    assert replayed["status"] == ("skipped" if decided else "committed")


def test_python_worker_killed_is_retried_on_separate_executors(tmp_path: Path) -> None:
    """local-cluster: two executor JVMs, tasks retried (spark.task.maxFailures=4)."""
    expected = write_orders(tmp_path / "in", BATCHES, ROWS)
    run = run_process(
        _query(tmp_path, "--master", "local-cluster[2,1,1024]", "--read-back"),
        faults=f"after_pre_commit:kill@batch={CRASH_BATCH},partition=0,attempt=0",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.of("read-back")[0]["duplicates"] == 0
    assert run.of("read-back")[0]["missing"] == 0
    assert_exactly_once(read_ids(tmp_path / "out"), expected)
    # The killed attempt had prepared; the decision took the retry, the orphan was removed.
    assert staged_attempts(tmp_path / "out") == []


def test_demo_prints_the_verdict_line(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "twopc.cli",
            "demo",
            "--dir",
            str(tmp_path / "demo"),
            "--rows",
            "1200",
            "--batches",
            "4",
            "--crash-batch",
            "2",
            "--keep",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = completed.stdout.strip().splitlines()
    assert completed.returncode == 0, completed.stdout + completed.stderr[-3000:]
    assert re.fullmatch(
        r"exactly-once: OK \(expected=1200 committed=1200 duplicates=0 missing=0\)", lines[-1]
    )
    assert_exactly_once(read_ids(tmp_path / "demo" / "output"), set(range(1200)))


def test_a_failed_jobs_other_task_leaves_nothing_in_a_live_session(tmp_path: Path) -> None:
    """Chaos seed 120146: a Python worker killed fails the job while the job's other task
    is about to prepare. Spark lets that task finish; the clean-up of the failed batch
    waits for it, so its prepared work is aborted too instead of staying staged while the
    session lives on (a notebook, a driver that restarts its query)."""
    result = run_process(["-m", "tests.e2e.straggler_query", str(tmp_path)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.of("staged") == [{"event": "staged", "failed": True, "attempts": []}]

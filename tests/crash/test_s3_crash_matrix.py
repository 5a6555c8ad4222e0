"""Crash matrix of the files sink on the S3 API (S3Proxy from ``scripts/services``), committing
by completing multipart uploads: the query process (local engine, no JVM: its tasks are forked
processes) is SIGKILLed at every crash point, or the S3 server is SIGKILLed while the query
waits at one, and the query is restarted from its checkpoint.

Checked on the store, never in twopc's own log: read back with pyarrow's S3 filesystem, every
row once; after the crash, nothing of an undecided batch under a name a reader picks up (an
open upload is invisible); after the restart, no open multipart upload and no staged object.
The recovery crash points on S3 are in ``test_recovery_crashes.py``; the Spark ones (a Python
worker, an executor JVM, the driver) in ``test_s3_spark.py``.

CI runs one task point (after_invoke: a task killed mid-upload) under each kill; the other
points carry the ``extended`` marker (the driver points run in CI on S3 through
``test_recovery_crashes.py`` and ``test_s3_spark.py``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import new_target
from tests.harness.entry_runs import _env
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.processes import REPO, run_process
from tests.harness.services import ServiceControl
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import S3FilesTarget
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 20, 1
EXPECTED = {b * 1000 + i for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}
BEFORE_CRASH = {i for i in EXPECTED if i < CRASH_BATCH * 1000}
CRASHED_BATCH = {i for i in EXPECTED if CRASH_BATCH * 1000 <= i < (CRASH_BATCH + 1) * 1000}

TASK_POINTS = [
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
]
DRIVER_POINTS = [
    CrashPoint.BEFORE_DECISION,
    CrashPoint.AFTER_DECISION,
    CrashPoint.BETWEEN_COMMITS,
    CrashPoint.AFTER_COMMIT,
]
UNDECIDED = {*TASK_POINTS, CrashPoint.BEFORE_DECISION}
"""Points where the crashed batch has no decision: none of it may become visible."""


def _points(in_ci: set[CrashPoint]) -> list[Any]:
    return [
        pytest.param(p, id=p.value, marks=[] if p in in_ci else [pytest.mark.extended])
        for p in TASK_POINTS + DRIVER_POINTS
    ]


@pytest.fixture
def case(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[S3FilesTarget, SinkRecipe]]:
    target, spec = new_target(request, "s3", "parquet", tmp_path, prefix="s3m")
    assert isinstance(target, S3FilesTarget)
    yield target, spec
    target.cleanup(spec)


def _query(spec: SinkRecipe, checkpoint: Path) -> list[str]:
    """The chaos campaign's local-engine query over the matrix's input."""
    numbers = [str(n) for n in (BATCHES, PARTITIONS, ROWS, 1)]
    return ["-m", "tests.harness.recipe_local_query", spec.dumps(), str(checkpoint), *numbers]


def _fault(point: CrashPoint, action: str) -> str:
    """The rule that fires at ``point`` in the crash batch (task points: partition 1)."""
    filters = [f"batch={CRASH_BATCH}"]
    if not point.on_driver:
        filters.append("partition=1")
    if point is CrashPoint.AFTER_INVOKE:
        filters.append(f"rows={ROWS // 2}")
    return f"{point.value}:{action}@{','.join(filters)}"


def _crash_batch_objects(target: S3FilesTarget, spec: SinkRecipe) -> list[str]:
    """Objects of the crash batch under names readers pick up."""
    return [p for p in target.visible_objects(spec) if f"-b{CRASH_BATCH:08d}-" in p]


# CI: a task killed mid-upload; the driver points run in CI on S3 through
# test_recovery_crashes.py (after_decision, before_decision, then the recovery points)
@pytest.mark.parametrize("point", _points({CrashPoint.AFTER_INVOKE}))
def test_a_process_sigkilled_at_a_crash_point_then_restarted_is_exactly_once(
    tmp_path: Path, case: tuple[S3FilesTarget, SinkRecipe], point: CrashPoint
) -> None:
    """A driver point kills the query's driver; a task point kills the task's process
    (partition 1), which fails the batch and so the query."""
    target, spec = case
    crashed = run_process(_query(spec, tmp_path / "chk"), faults=_fault(point, "kill"), timeout=120)
    if point.on_driver:
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    else:
        assert crashed.returncode == 1, crashed.stderr[-2000:]
        assert f"BatchFailedError: sink '{spec.sink_id}', batch {CRASH_BATCH}" in crashed.stderr

    seen = target.committed(spec)
    assert max(seen.values(), default=1) == 1
    assert BEFORE_CRASH <= set(seen) <= EXPECTED
    left = target.leftovers(spec)
    assert not [item for item in left if item.startswith("staged object") and ".parquet" in item]
    if point in UNDECIDED:
        assert set(seen) == BEFORE_CRASH
        assert _crash_batch_objects(target, spec) == []
    if not point.on_driver:
        # the failed batch cleaned up after its killed task: its upload aborted, its
        # staging removed (a task killed before it wrote anything left nothing to clean)
        assert left == []
    if point is CrashPoint.AFTER_DECISION:
        assert set(seen) == BEFORE_CRASH
        assert len([item for item in left if item.startswith("open upload")]) == PARTITIONS
    if point is CrashPoint.BETWEEN_COMMITS:
        assert BEFORE_CRASH < set(seen) < BEFORE_CRASH | CRASHED_BATCH
        assert [item for item in left if item.startswith("open upload")] != []
    if point is CrashPoint.AFTER_COMMIT:
        assert set(seen) == BEFORE_CRASH | CRASHED_BATCH

    restarted = run_process(_query(spec, tmp_path / "chk"), timeout=120)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert_target_exactly_once(target, spec, EXPECTED)


STALL = 2
"""Seconds the query sleeps at the point; the store is killed at its start and stays down
two seconds longer, so the query wakes up to a dead store."""


def _run_killing_the_store(
    args: list[str], directory: Path, faults: str, services: ServiceControl, downtime: float
) -> int:
    """Start the query; once its fault fires (it sleeps there), SIGKILL the S3 server while
    the query still runs, keep it down for ``downtime`` seconds, start it again and wait
    for the query to end. Returns its exit status; its output is ``query.log``."""
    log = directory / "query.log"
    with log.open("w") as out:
        query = subprocess.Popen(
            [sys.executable, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_env(), "TWOPC_FAULTS": faults},
            cwd=REPO,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "fault injection:" not in log.read_text(errors="replace"):
            assert query.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the fault never fired"
            time.sleep(0.1)
        services.kill("s3")
        assert query.poll() is None, "the query ended before the store was killed"
        time.sleep(downtime)
        services.start("s3")
        return query.wait(timeout=180)
    finally:
        if query.poll() is None:
            query.kill()
            query.wait()


@pytest.mark.parametrize("point", _points({CrashPoint.AFTER_INVOKE}))
def test_the_s3_server_sigkilled_while_the_query_waits_at_a_crash_point(
    tmp_path: Path,
    case: tuple[S3FilesTarget, SinkRecipe],
    services: ServiceControl,
    point: CrashPoint,
) -> None:
    """The store dies under a running query: a task mid-upload or preparing, the driver
    deciding or completing uploads. Whether the query rides it out (retries) or fails, the
    restarts end with every row once and nothing open or staged."""
    target, spec = case
    args = _query(spec, tmp_path / "chk")
    first = _run_killing_the_store(
        args, tmp_path, _fault(point, f"sleep={STALL}"), services, downtime=STALL + 2
    )
    # (no "undecided means invisible" here: the query may ride the outage out and commit)
    assert max(target.committed(spec).values(), default=1) == 1
    code, restarts = first, 0
    while code != 0:
        assert restarts < 2, (tmp_path / "query.log").read_text()[-3000:]
        restarted = run_process(args, timeout=120)
        code, restarts = restarted.returncode, restarts + 1
    assert_target_exactly_once(target, spec, EXPECTED)

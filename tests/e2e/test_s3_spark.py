"""The files backend on the S3 API through real Spark, committing by completing multipart
uploads: the driver SIGKILLed at each driver crash point, a Python worker SIGKILLed at each
task crash point (and retried by Spark in the same query), both executor JVMs of a
``local-cluster`` SIGKILLed mid-task, and the S3 server SIGKILLed while a decided batch
waits for its commit, each followed by what an operator does (a restart, or nothing when
Spark retries). Checked on the store: every row once, no staged object and no open upload
left, read back with pyarrow's S3 filesystem.

CI runs the driver killed after the decision and the S3 server kill; the other points, the
worker kills and the executor kill are ``extended`` (the local engine's S3 matrix,
``test_s3_crash_matrix.py``, covers every point in seconds)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs

from tests.harness.backend_cases import add_input
from tests.harness.entry_runs import command, kill_executors_when, kill_when, run
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.processes import run_process
from tests.harness.service_fixtures import S3Store
from tests.harness.services import ServiceControl
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import S3FilesTarget, make_target
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CRASH_BATCH = 1


@pytest.fixture
def target(s3_store: S3Store, tmp_path: Path) -> Iterator[tuple[S3FilesTarget, SinkRecipe]]:
    target = make_target("s3", s3_store.env())
    assert isinstance(target, S3FilesTarget)
    spec = target.prepare(f"s3-{tmp_path.name[-12:]}", "parquet", tmp_path, 1)
    yield target, spec
    target.cleanup(spec)


def _glob(target: S3FilesTarget, spec: SinkRecipe, pattern: str) -> list[str]:
    """Objects under the output matching ``pattern`` (relative to it), listed afresh."""
    s3 = s3fs.S3FileSystem(**target.storage_options())
    s3.invalidate_cache()
    return list(s3.glob(f"{spec.address.removeprefix('s3://')}/{pattern}"))


def _decided(target: S3FilesTarget, spec: SinkRecipe, batch_id: int) -> bool:
    """Whether the commit log, next to the data on the store, holds the batch's decision."""
    return bool(_glob(target, spec, f"_twopc/{spec.sink_id}/*/{batch_id:020d}.decision.json"))


def _input(tmp_path: Path) -> tuple[Path, Path, set[int]]:
    source = tmp_path / "in"
    return source, tmp_path / "chk", set().union(*(add_input(source, i) for i in range(3)))


@pytest.mark.parametrize("entry", ["foreach", pytest.param("format", marks=pytest.mark.extended)])
def test_the_driver_sigkilled_between_decision_and_commit(
    target: Any, tmp_path: Path, entry: str
) -> None:
    s3_target, spec = target
    source, checkpoint, expected = _input(tmp_path)
    stalled = command(entry, spec, source, checkpoint, faults="after_decision:sleep=300@batch=1")
    kill_when(stalled, tmp_path, lambda: _decided(s3_target, spec, 1), "batch 1 was decided")
    # decided, not completed: the batch's files are open uploads, invisible
    assert set(s3_target.committed(spec)) < expected
    assert any("open upload" in item for item in s3_target.leftovers(spec))
    rerun = run(command(entry, spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(s3_target, spec, expected)


@pytest.mark.extended
@pytest.mark.parametrize(
    "point",
    [CrashPoint.BEFORE_DECISION, CrashPoint.BETWEEN_COMMITS, CrashPoint.AFTER_COMMIT],
    ids=lambda p: p.value,
)
def test_the_driver_sigkilled_at_a_crash_point(
    target: Any, tmp_path: Path, point: CrashPoint
) -> None:
    """The other driver points (after_decision: the test above): undecided work is aborted
    on restart, a half-completed batch is completed, a completed one is not written again."""
    s3_target, spec = target
    source, checkpoint, expected = _input(tmp_path)
    faults = f"{point.value}:kill@batch={CRASH_BATCH}"
    # (in its own process group, killed whole: nothing of the dead driver outlives it)
    crashed = run_process(command("foreach", spec, source, checkpoint, faults=faults)[1:])
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    seen = s3_target.committed(spec)
    assert max(seen.values(), default=1) == 1 and set(seen) < expected
    rerun = run(command("foreach", spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(s3_target, spec, expected)


@pytest.mark.extended
@pytest.mark.parametrize(
    "point",
    [
        CrashPoint.BEFORE_BEGIN,
        CrashPoint.AFTER_INVOKE,
        CrashPoint.BEFORE_PRE_COMMIT,
        CrashPoint.AFTER_PRE_COMMIT,
    ],
    ids=lambda p: p.value,
)
def test_a_python_worker_sigkilled_at_a_crash_point_is_retried(
    target: Any, tmp_path: Path, point: CrashPoint
) -> None:
    """``local[2,2]``: the killed task's first attempt is retried in the same query. What
    the killed attempt left (an open upload, a prepared committable) is aborted once the
    batch is committed, with no restart to do it."""
    s3_target, spec = target
    source, checkpoint, expected = _input(tmp_path)
    rows = ",rows=5" if point is CrashPoint.AFTER_INVOKE else ""
    faults = f"{point.value}:kill@batch={CRASH_BATCH},partition=1,attempt=0{rows}"
    done = run(command("foreach", spec, source, checkpoint, faults=faults, master="local[2,2]"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fault injection:" in done.stderr  # the worker was killed
    assert_target_exactly_once(s3_target, spec, expected)


@pytest.mark.extended
def test_both_executor_jvms_sigkilled_mid_task(target: Any, tmp_path: Path) -> None:
    """``local-cluster``: partition 1 of batch 1 stalls in phase 1 with its upload open;
    both executor JVMs are SIGKILLed; Spark starts new ones and runs the stage again (its
    task attempts count from 0 again, so the stall comes once more). The killed attempt's
    upload, at the same key as the new one's, is aborted; the new one completed once."""
    s3_target, spec = target
    source, checkpoint, expected = _input(tmp_path)
    args = command(
        "foreach",
        spec,
        source,
        checkpoint,
        master="local-cluster[2,1,1024]",
        faults=f"after_invoke:sleep=8@batch={CRASH_BATCH},partition=1,attempt=0",
    )
    started = f"_twopc_staging/{spec.sink_id}/*/{CRASH_BATCH:020d}/00001-*/_started"
    returncode, output = kill_executors_when(
        args,
        tmp_path / "query.log",
        lambda: bool(_glob(s3_target, spec, started)),
        "partition 1 of the batch started",
    )
    assert returncode == 0, output[-3000:]
    assert_target_exactly_once(s3_target, spec, expected)


def test_the_s3_server_sigkilled_between_decision_and_commit(
    target: Any, tmp_path: Path, services: ServiceControl
) -> None:
    """The store dies while a decided batch waits for its commit, and the driver with it;
    the store comes back with its open uploads (S3Proxy keeps them on disk) and the
    restart completes them."""
    s3_target, spec = target
    source, checkpoint, expected = _input(tmp_path)
    stalled = command(
        "foreach", spec, source, checkpoint, faults="after_decision:sleep=300@batch=1"
    )
    kill_when(stalled, tmp_path, lambda: _decided(s3_target, spec, 1), "batch 1 was decided")
    services.kill("s3")
    services.start("s3")
    rerun = run(command("foreach", spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(s3_target, spec, expected)
